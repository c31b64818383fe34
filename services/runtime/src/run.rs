//! Wiring: sinks, the admin server, the consumer thread, and the shutdown
//! sequence (not ready → stop intake → drain → flush → final commit →
//! close), all under one deadline.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::topic_partition_list::TopicPartitionList;
use sluice_coord::generation::Expect;
use sluice_service::admin;
use tokio::sync::Semaphore;

use crate::config::RuntimeConfig;
use crate::consumer;
use crate::handler::Handler;
use crate::health::Health;
use crate::metrics::{Identity, RuntimeMetrics};
use crate::outcome::DeadLetters;
use crate::output::{self, KafkaSink};
use crate::partition::Budget;
use crate::recorded;
use crate::retry::Exhausted;
use crate::sink::SinkError;
use crate::txn::Transactions;
use crate::worker::Shared;

/// Why the runtime could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("sink: {0}")]
    Sink(#[from] SinkError),
    #[error("admin server: {0}")]
    Admin(#[from] std::io::Error),
    #[error("shutdown did not finish within {0:?}")]
    ShutdownTimeout(Duration),
    #[error("the consumer thread stopped unexpectedly")]
    ConsumerDied,
    #[error(transparent)]
    Transactions(#[from] crate::txn::TxnFailed),
}

/// The runtime, before it runs a handler: build the handler from its sinks.
#[derive(Debug)]
pub struct Runtime {
    config: RuntimeConfig,
    identity: Identity,
    metrics: RuntimeMetrics,
    health: Arc<Health>,
    /// The at-least-once outputs' producer; none with exactly-once outputs, whose
    /// transactional producer carries everything (a producer unused holds a connection to
    /// every broker and its threads all the same).
    kafka: Option<KafkaSink>,
    /// The generation the group's commits recorded, once read.
    recorded: std::sync::OnceLock<Option<String>>,
}

/// A handle on the running runtime, for tests and embedding.
#[derive(Debug, Clone)]
pub struct RuntimeHandle {
    pub admin_addr: std::net::SocketAddr,
    pub health: Arc<Health>,
}

impl Runtime {
    /// Creates the metrics, named with the workload's prefix and labelled
    /// `workload` (e.g. `dex`) and `consumergroup`, so two workloads scraped
    /// in one namespace keep their series apart, and the Kafka output. A
    /// workload that needs Redis starts its own [`crate::sink::RedisSink`]
    /// with [`Runtime::metrics`], and reports it in [`Handler::ready`].
    /// Must run inside a tokio runtime.
    pub fn new(config: RuntimeConfig, identity: Identity) -> Result<Self, RuntimeError> {
        let metrics = RuntimeMetrics::new(&identity, &config.group_id);
        let kafka = match config.exactly_once {
            None => Some(KafkaSink::new(&config.kafka, metrics.clone())?),
            Some(_) => None,
        };
        let health = Arc::new(Health::default());
        Ok(Self { config, identity, metrics, health, kafka, recorded: Default::default() })
    }

    /// What the store a stateful workload writes must carry: the state
    /// generation recorded with the group's committed offsets (`recorded`),
    /// for its [`crate::sink::StateStore`]. Waits for Kafka for up to a
    /// minute, then gives up with its error.
    pub async fn recorded_generation(&self) -> Result<Expect, RuntimeError> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(200);
        loop {
            let config = self.config.clone();
            let read = tokio::task::spawn_blocking(move || recorded::read(&config, Duration::from_secs(10)))
                .await
                .map_err(|_| RuntimeError::ConsumerDied)?;
            match read {
                Ok(generations) => {
                    let expect = recorded::expect(&generations);
                    let id = match &expect {
                        Expect::Recorded(id) => Some(id.clone()),
                        Expect::Nothing => None,
                    };
                    tracing::info!(recorded = ?id, "State generation recorded with the group's offsets");
                    let _ = self.recorded.set(id);
                    return Ok(expect);
                }
                Err(e) if started.elapsed() < Duration::from_secs(60) => {
                    tracing::warn!(error = %e, "Reading the group's committed offsets failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub fn metrics(&self) -> &RuntimeMetrics {
        &self.metrics
    }

    /// The at-least-once outputs' producer (none with exactly-once outputs).
    pub fn kafka(&self) -> Option<KafkaSink> {
        self.kafka.clone()
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Runs `handler` until `shutdown` resolves, then drains and stops.
    /// `started` is called once the admin server listens.
    pub async fn run<H: Handler>(
        self,
        handler: H,
        shutdown: impl Future<Output = ()> + Send,
        started: impl FnOnce(RuntimeHandle),
    ) -> Result<(), RuntimeError> {
        let handler = Arc::new(handler);
        let recorded = self.recorded.get().cloned().flatten();
        let dead_book = Arc::new(recorded::DeadBook::default());
        let stamp = {
            let (handler, book) = (handler.clone(), dead_book.clone());
            Arc::new(move |tpl: &TopicPartitionList| {
                let generation = handler.state_generation().or_else(|| recorded.clone());
                recorded::stamp(tpl, generation.as_deref(), &book);
            }) as crate::txn::Stamp
        };
        let (txn, driver) = match self.start_transactions(stamp.clone()).await? {
            Some((txn, driver)) => (Some(txn), Some(driver)),
            None => (None, None),
        };
        let committed = match handler.retry_exhausted() {
            Exhausted::DeadLetterKey => Some(Arc::new(recorded::Committed::new(&self.config)?)),
            Exhausted::PausePartition => None,
        };
        tracing::info!(policy = handler.retry_exhausted().as_str(), "What exhausted retries lead to");
        let shared = self.shared(handler.clone(), txn.clone(), dead_book, stamp, committed);
        let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
        let (admin_addr, admin_task) = self.serve_admin(&handler, admin_stopped).await?;
        let service = self.identity.service;
        tracing::info!(%admin_addr, topic = %self.config.input_topic, group = %self.config.group_id, service, "Running");
        started(RuntimeHandle { admin_addr, health: self.health.clone() });

        let thread = consumer::start(&self.config, shared, self.metrics.clone(), self.health.clone())?;
        let died = {
            let join = &thread.join;
            async move {
                while !join.is_finished() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let consumer_died = tokio::select! {
            () = shutdown => false,
            () = died => true,
        };

        // Not ready first, so no new traffic is routed here while draining.
        let begun = Instant::now();
        self.health.shutting_down.store(true, Ordering::Relaxed);
        thread.stop.store(true, Ordering::Release);
        tracing::info!("Shutting down: draining, flushing, committing");
        let deadline = self.config.shutdown_deadline;
        let join = thread.join;
        let joined = tokio::time::timeout(deadline, tokio::task::spawn_blocking(move || join.join())).await;
        let txn_failed = stop_transactions(txn, driver).await;
        let _ = admin_stop.send(());
        let _ = admin_task.await;
        if let Some(e) = txn_failed {
            return Err(e.into());
        }
        match joined {
            Err(_) => Err(RuntimeError::ShutdownTimeout(deadline)),
            // The consumer thread panicked (while draining, or before).
            Ok(Ok(Err(_)) | Err(_)) => Err(RuntimeError::ConsumerDied),
            Ok(_) if consumer_died => Err(RuntimeError::ConsumerDied),
            Ok(_) => {
                tracing::info!(elapsed_ms = begun.elapsed().as_millis() as u64, "Shutdown complete");
                Ok(())
            }
        }
    }
}

impl Runtime {
    /// What every partition worker shares.
    fn shared<H: Handler>(
        &self,
        handler: Arc<H>,
        txn: Option<Arc<Transactions>>,
        dead_book: Arc<recorded::DeadBook>,
        stamp: crate::txn::Stamp,
        committed: Option<Arc<recorded::Committed>>,
    ) -> Arc<Shared<H>> {
        Arc::new(Shared {
            handler,
            permits: Arc::new(Semaphore::new(self.config.concurrency)),
            kafka: self.kafka.clone(),
            txn,
            dead_letters: DeadLetters {
                topic: Arc::from(self.config.dlq_topic.as_str()),
                group: self.config.group_id.clone(),
            },
            retry: self.config.retry,
            dead_book,
            stamp,
            committed,
            budget: Budget {
                max_records: self.config.max_in_flight_per_partition,
                max_bytes: self.config.max_bytes_per_partition,
                resume_fraction: self.config.resume_fraction,
            },
            metrics: self.metrics.clone(),
            health: self.health.clone(),
        })
    }

    /// The admin server (`/live`, `/ready`, `/metrics`) until `stop` resolves.
    async fn serve_admin<H: Handler>(
        &self,
        handler: &Arc<H>,
        stop: tokio::sync::oneshot::Receiver<()>,
    ) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
        let ready = {
            let (health, handler) = (self.health.clone(), handler.clone());
            Arc::new(move || readiness(&health, handler.as_ref())) as admin::ReadyCheck
        };
        let registry = self.metrics.registry.clone();
        // This process's connections to the brokers' port are Kafka's (`tcp_connections`).
        sluice_service::connections::declare("kafka", &self.config.kafka.brokers);
        admin::serve(self.config.admin_listen, self.identity.service, registry, ready, async {
            let _ = stop.await;
        })
        .await
    }

    /// Exactly-once mode: the transactional producer, initialised (which
    /// waits for Kafka's transaction coordinator), and its driver thread.
    async fn start_transactions(
        &self,
        stamp: crate::txn::Stamp,
    ) -> Result<Option<(Arc<Transactions>, std::thread::JoinHandle<()>)>, RuntimeError> {
        let Some(settings) = self.config.exactly_once.clone() else { return Ok(None) };
        let client = output::producer_config(&self.config.kafka);
        let topic: Arc<str> = Arc::from(self.config.input_topic.as_str());
        let metrics = self.metrics.clone();
        let started = tokio::task::spawn_blocking(move || Transactions::start(client, settings, topic, metrics, stamp))
            .await
            .map_err(|_| RuntimeError::ConsumerDied)??;
        Ok(Some(started))
    }
}

/// Ends the transaction driver after a last transaction; what stopped it,
/// if it stopped on its own.
async fn stop_transactions(
    txn: Option<Arc<Transactions>>,
    driver: Option<std::thread::JoinHandle<()>>,
) -> Option<crate::txn::TxnFailed> {
    let (txn, driver) = (txn?, driver?);
    txn.stop();
    let _ = tokio::task::spawn_blocking(move || driver.join()).await;
    txn.failed().map(crate::txn::TxnFailed)
}

fn readiness<H: Handler>(health: &Health, handler: &H) -> Result<(), admin::NotReady> {
    if health.shutting_down.load(Ordering::Relaxed) {
        return Err(admin::NotReady::new("shutting down"));
    }
    if health.assigned.load(Ordering::Relaxed) == 0 {
        return Err(admin::NotReady::new("no partitions assigned"));
    }
    let stalled = health.stalled.load(Ordering::Relaxed);
    if stalled > 0 {
        return Err(admin::NotReady::new(format!("{stalled} records past the retry cap")));
    }
    handler.ready()
}
