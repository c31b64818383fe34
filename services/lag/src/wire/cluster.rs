//! The cluster as the poller sees it: brokers by id (from `Metadata`), one
//! connection per broker opened on first use and dropped on any error (the
//! next call opens a new one), and the bootstrap list for when no broker is
//! known yet.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::{Request, StrBytes};

use super::WireError;
use super::conn::{Conn, Requests};
use super::security::Security;

type Slot = Arc<tokio::sync::Mutex<Option<Conn>>>;

/// Brokers and their connections.
pub struct Cluster {
    bootstrap: Vec<String>,
    security: Security,
    timeout: Duration,
    brokers: Mutex<BTreeMap<i32, String>>,
    conns: Mutex<HashMap<String, Slot>>,
    requests: Arc<Requests>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("bootstrap", &self.bootstrap).field("security", &self.security).finish()
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cluster {
    /// `bootstrap`: `host:port` list, comma-separated; `timeout` bounds every
    /// connect and every request.
    pub fn new(bootstrap: &str, security: Security, timeout: Duration) -> Self {
        let bootstrap = bootstrap.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        let (brokers, conns, requests) = (Mutex::default(), Mutex::default(), Arc::default());
        Self { bootstrap, security, timeout, brokers, conns, requests }
    }

    /// Requests sent so far, by API name.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.requests.by_api()
    }

    /// Brokers known from the last metadata.
    pub fn brokers(&self) -> Vec<i32> {
        locked(&self.brokers).keys().copied().collect()
    }

    pub fn address(&self, broker: i32) -> Option<String> {
        locked(&self.brokers).get(&broker).cloned()
    }

    fn slot(&self, addr: &str) -> Slot {
        Arc::clone(locked(&self.conns).entry(addr.to_string()).or_default())
    }

    /// Sends the request `build` makes for the version the broker at `addr`
    /// speaks (it gets the negotiated version, capped at `cap`).
    pub async fn call<R: Request>(
        &self,
        addr: &str,
        cap: i16,
        build: impl FnOnce(i16) -> R,
    ) -> Result<R::Response, WireError> {
        let slot = self.slot(addr);
        let mut conn = slot.lock().await;
        if conn.is_none() {
            *conn = Some(Conn::open(addr, &self.security, self.timeout, Arc::clone(&self.requests)).await?);
        }
        let Some(open) = conn.as_mut() else { return Err(WireError::Io(format!("{addr}: not connected"))) };
        let version = open.version::<R>()?.min(cap);
        let result = open.call_at(&build(version), version).await;
        if result.is_err() {
            *conn = None;
        }
        result
    }

    /// [`Self::call`] to broker `id`.
    pub async fn call_broker<R: Request>(
        &self,
        id: i32,
        cap: i16,
        build: impl FnOnce(i16) -> R,
    ) -> Result<R::Response, WireError> {
        let addr = self.address(id).ok_or_else(|| WireError::Io(format!("broker {id} is not in the metadata")))?;
        self.call(&addr, cap, build).await
    }

    /// Topic-scoped metadata (`None`: every topic), and the brokers learned
    /// from it. Tries the known brokers, then the bootstrap list.
    pub async fn metadata(&self, topics: Option<&[String]>) -> Result<MetadataResponse, WireError> {
        let known: Vec<String> = locked(&self.brokers).values().cloned().collect();
        let mut last = WireError::Io("no bootstrap broker configured".into());
        for addr in known.iter().chain(self.bootstrap.iter()) {
            let build = |_| {
                let topics = topics.map(|names| {
                    names
                        .iter()
                        .map(|n| {
                            MetadataRequestTopic::default().with_name(Some(StrBytes::from_string(n.clone()).into()))
                        })
                        .collect()
                });
                MetadataRequest::default().with_topics(topics).with_allow_auto_topic_creation(false)
            };
            match self.call(addr, 12, build).await {
                Ok(response) => {
                    let brokers =
                        response.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)));
                    *locked(&self.brokers) = brokers.collect();
                    return Ok(response);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}
