//! The broker's own request counts, read from its JMX with Kafka's
//! `JmxTool` (a short-lived JVM from the stack's Kafka jars; the stack
//! exports `SLUICE_KAFKA_JMX` and `SLUICE_KAFKA_HOME`). Read between phases,
//! never inside a measured window: a JVM start costs about a second of CPU.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::Serialize;

/// Where the broker's JMX is and the jars that read it.
#[derive(Debug, Clone)]
pub struct Jmx {
    address: String,
    kafka_home: PathBuf,
}

/// Requests the broker has served since it started, by API
/// (`kafka.network:type=RequestMetrics,name=RequestsPerSec,request=…`,
/// every version summed), and the records appended to its logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: BTreeMap<String, u64>,
    pub messages_in: u64,
}

/// What the broker served during a phase.
#[derive(Debug, Clone, Serialize)]
pub struct Served {
    pub produce_requests: u64,
    pub fetch_requests: u64,
    pub all_requests: u64,
    pub produce_per_sec: f64,
    pub fetch_per_sec: f64,
    /// Records appended (every producer: the feeder's too) per produce request.
    pub records_per_produce_request: f64,
    pub by_api: BTreeMap<String, u64>,
}

impl Jmx {
    /// From `SLUICE_KAFKA_JMX` and `SLUICE_KAFKA_HOME` (what `stack.sh env` prints).
    pub fn from_env() -> Result<Self> {
        let get = |name: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).with_context(|| {
                format!(
                    "{name} is not set: the broker's request counts need the stack's JMX; \
                     run `eval \"$(deploy/local/stack.sh env)\"` (and restart a stack started before JMX was added)"
                )
            })
        };
        Ok(Self { address: get("SLUICE_KAFKA_JMX")?, kafka_home: PathBuf::from(get("SLUICE_KAFKA_HOME")?) })
    }

    /// Reads the counters once.
    pub fn read(&self) -> Result<Counts> {
        let url = format!("service:jmx:rmi:///jndi/rmi://{}/jmxrmi", self.address);
        let output = Command::new("java")
            .args(["-Xmx64m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
            .arg(self.kafka_home.join("libs/*"))
            .args(["org.apache.kafka.tools.JmxTool", "--jmx-url", &url, "--one-time", "true"])
            .args(["--report-format", "properties", "--attributes", "Count"])
            .args(["--object-name", "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"])
            .args(["--object-name", "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec"])
            .output()
            .context("running Kafka's JmxTool (java)")?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!("JmxTool failed on {}: {}{}", self.address, text, String::from_utf8_lossy(&output.stderr));
        }
        let counts = parse(&text);
        if counts.requests.is_empty() {
            bail!("JmxTool on {} printed no request counts: {text}", self.address);
        }
        Ok(counts)
    }
}

/// `object-name:Count=value` lines of JmxTool's `properties` format.
fn parse(text: &str) -> Counts {
    let mut counts = Counts::default();
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(":Count=") else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let value = value as u64;
        if name.contains("name=MessagesInPerSec") {
            counts.messages_in += value;
        } else if let Some(api) = name.split(',').find_map(|kv| kv.strip_prefix("request=")) {
            *counts.requests.entry(api.to_string()).or_default() += value;
        }
    }
    counts
}

impl Counts {
    /// What was served between `self` (before) and `after`, over `seconds`.
    pub fn served(&self, after: &Counts, seconds: f64) -> Served {
        let by_api: BTreeMap<String, u64> = after
            .requests
            .iter()
            .map(|(api, n)| (api.clone(), n.saturating_sub(self.requests.get(api).copied().unwrap_or(0))))
            .filter(|(_, n)| *n > 0)
            .collect();
        let get = |api: &str| by_api.get(api).copied().unwrap_or(0);
        let (produce, fetch) = (get("Produce"), get("Fetch"));
        let records = after.messages_in.saturating_sub(self.messages_in);
        Served {
            produce_requests: produce,
            fetch_requests: fetch,
            all_requests: by_api.values().sum(),
            produce_per_sec: produce as f64 / seconds.max(1e-9),
            fetch_per_sec: fetch as f64 / seconds.max(1e-9),
            records_per_produce_request: records as f64 / produce.max(1) as f64,
            by_api,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_versions_and_reads_messages_in() {
        let text = "time=1764590000000\n\
            kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version=11:Count=10\n\
            kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version=12:Count=5\n\
            kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Fetch,version=17:Count=7.0\n\
            kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec:Count=300\n";
        let before = parse(text);
        assert_eq!(before.requests.get("Produce"), Some(&15));
        assert_eq!(before.requests.get("Fetch"), Some(&7));
        assert_eq!(before.messages_in, 300);
        let after = parse(&text.replace("Count=5\n", "Count=25\n").replace("Count=300", "Count=900"));
        let served = before.served(&after, 2.0);
        assert_eq!((served.produce_requests, served.fetch_requests, served.all_requests), (20, 0, 20));
        assert_eq!(served.records_per_produce_request, 30.0);
        assert_eq!(served.produce_per_sec, 10.0);
    }
}
