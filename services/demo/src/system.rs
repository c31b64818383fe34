//! Everything the demo started, and how it starts each deployable: their
//! real binaries with the settings a pod would have, on this machine.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice_scaling::keda::PartitionOffsets;
use sluice_service::process::free_port;

use crate::args::Args;
use crate::kubernetes::{Cluster, PodView};
use crate::procs::{Proc, binary};

/// The admin port of each of the chart's containers (its templates fix them), where the demo
/// reads a pod's `/metrics` and sluice-lag's group picture.
fn admin_port(component: &str) -> u16 {
    match component {
        "processor" => 9090,
        "scheduler" => 9091,
        "ingest" => 9094,
        _ => 9096, // sluice-lag
    }
}

/// The demo's job schedules (the scheduler's, local or the chart's pods): short, so a run of a
/// minute or two sees every job tick several times.
const SCHEDULES: [(&str, &str); 4] = [
    ("JOB_HEARTBEAT_SCHEDULE", "*/5 * * * * *"),
    ("JOB_TOKEN_REFRESH_SCHEDULE", "*/15 * * * * *"),
    ("JOB_POOL_RECONCILE_SCHEDULE", "*/20 * * * * *"),
    ("JOB_POOL_RECONCILE_CATCH_UP_WINDOW_MS", "10000"),
];

/// Names of one run: nothing shared with earlier runs.
#[derive(Debug, Clone)]
pub struct Names {
    pub id: String,
    pub topic: String,
    pub swaps: String,
    pub dlq: String,
    pub group: String,
    pub prefix: String,
    /// The schedulers' admin token, fresh for each run.
    pub admin_token: String,
}

impl Names {
    /// A run's own topics, group and key prefix, all derived from its `id`.
    pub fn for_run(id: String, admin_token: String) -> Self {
        Self {
            topic: format!("{id}.chain.transactions"),
            swaps: format!("{id}.dex.swaps"),
            dlq: format!("{id}.chain.transactions.dlq"),
            group: format!("{id}.processor"),
            prefix: format!("{id}:"),
            admin_token,
            id,
        }
    }
}

/// 128 random bits as hex (the standard library's per-process hash keys).
pub fn fresh_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let half = || std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!("{:016x}{:016x}", half(), half())
}

/// Everything the demo started.
pub struct System {
    pub args: Args,
    pub names: Names,
    pub logs: PathBuf,
    pub chain: Proc,
    pub chain_url: String,
    pub schedulers: Vec<Proc>,
    pub ingest: Vec<Proc>,
    pub processors: Vec<Proc>,
    /// sluice-lag, watching the processors' group.
    pub lag: Option<Proc>,
    /// Its KEDA external scaler's address.
    pub lag_scaler: Option<std::net::SocketAddr>,
    pub next_processor: u32,
    /// With --kubernetes: the chart's release, whose pods run the processors and sluice-lag.
    pub kube: Option<Cluster>,
    /// With --kubernetes: the release's pods as last read, and every processor pod that served.
    pub pods: Vec<PodView>,
    pub pods_served: std::collections::BTreeSet<String>,
    /// With --kubernetes: the processor pods seen shutting down, their logs followed into the
    /// run's folder while they do (the name, its grace period, the log, the follower).
    pub shutdowns: Vec<(String, u64, PathBuf, std::thread::JoinHandle<anyhow::Result<()>>)>,
    /// `--processor-cpu`: the control group that limits each local processor.
    pub cpu: Option<crate::cpu::CpuLimit>,
    /// Processes being stopped in the background (scale-down, the ingest).
    pub stopping: Vec<tokio::task::JoinHandle<()>>,
}

impl System {
    pub fn env(&self, prefix: &str, pairs: &[(&str, String)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (format!("{prefix}{k}"), v.clone())).collect()
    }

    /// A process that should be running and is not.
    pub fn dead(&mut self) -> Option<String> {
        std::iter::once(&mut self.chain)
            .chain(self.schedulers.iter_mut())
            .chain(self.ingest.iter_mut())
            .chain(self.processors.iter_mut())
            .chain(self.lag.iter_mut())
            .find_map(|p| (!p.is_running()).then(|| p.name.clone()))
    }

    /// With --kubernetes: installs the chart with the demo's names and `sets` over the values:
    /// its images, the addresses where the pods reach the stack and the chain, the demo's job
    /// schedules, exactly-once outputs. KEDA reaches sluice-lag's scaler at the chart's
    /// default, its Service's name.
    pub fn install_release(&mut self, cluster: Cluster, sets: Vec<(String, String)>) -> anyhow::Result<()> {
        let a = &self.args;
        let pod = |what: &str, value: &Option<String>| {
            value.clone().with_context(|| format!("--kubernetes needs {what} (stack.sh env prints it)"))
        };
        let n = &self.names;
        let mut all: Vec<(String, String)> = [
            ("kafka.bootstrapServers", pod("--pod-brokers (SLUICE_KAFKA_POD_BROKERS)", &a.pod_brokers)?),
            ("redis.url", pod("--pod-redis-url (SLUICE_REDIS_POD_URL)", &a.pod_redis_url)?),
            ("chain.url", self.chain_url.clone()),
            ("kafka.topic", n.topic.clone()),
            ("kafka.swapsTopic", n.swaps.clone()),
            ("kafka.dlqTopic", n.dlq.clone()),
            ("processor.groupId", n.group.clone()),
            ("redis.prefix", n.prefix.clone()),
            // Exactly-once outputs and the audit log of applied sequences the outputs' check
            // reads: every pod that starts, stops, is killed or replaced is held to them.
            ("processor.exactlyOnce.enabled", "true".into()),
            ("processor.env.AUDIT_APPLIED", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(SCHEDULES.iter().map(|(job, cron)| (format!("scheduler.env.{job}"), cron.to_string())))
        .chain(a.image_registry.iter().map(|r| ("image.registry".to_string(), r.clone())))
        .chain(a.image_tag.iter().map(|t| ("image.tag".to_string(), t.clone())))
        .collect();
        all.extend(sets);
        cluster.install(&self.args.values_files(), &all)?;
        self.kube = Some(cluster);
        Ok(())
    }

    /// With --kubernetes: the release's pods, as the API server has them.
    pub fn refresh_pods(&mut self) -> anyhow::Result<()> {
        let Some(k) = &self.kube else { return Ok(()) };
        self.pods = k.pods()?;
        let serving = self.pods.iter().filter(|p| p.component == "processor" && p.serving());
        self.pods_served.extend(serving.map(|p| p.name.clone()));
        for pod in self.pods.iter().filter(|p| p.component == "processor" && p.terminating) {
            if !self.shutdowns.iter().any(|(name, ..)| *name == pod.name) {
                let log = self.logs.join(format!("{}.log", pod.name));
                self.shutdowns.push((pod.name.clone(), pod.grace_seconds, log.clone(), k.follow_log(&pod.name, log)));
            }
        }
        Ok(())
    }

    /// How each processor pod seen shutting down did, from its log (waits for the logs to end).
    pub fn shutdown_reports(&mut self) -> Vec<crate::shutdown::Shutdown> {
        std::mem::take(&mut self.shutdowns)
            .into_iter()
            .map(|(pod, grace, log, follower)| {
                let _ = follower.join();
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                crate::shutdown::Shutdown::from_log(&pod, grace, &text)
            })
            .collect()
    }

    /// The pods of a component Ready and not shutting down.
    pub fn serving(&self, component: &str) -> impl Iterator<Item = &PodView> {
        self.pods.iter().filter(move |p| p.component == component && p.serving())
    }

    /// The processors serving: the local ones, or the pods Ready and not shutting down.
    pub fn processor_count(&self) -> u32 {
        match &self.kube {
            Some(_) => self.serving("processor").count() as u32,
            None => self.processors.len() as u32,
        }
    }

    /// Each serving process's `/metrics` text of a component (empty when it does not answer):
    /// its pods with --kubernetes, the local processes otherwise.
    pub fn metrics_of(&self, component: &str) -> Vec<String> {
        self.named_metrics(component).into_iter().map(|(_, text)| text).collect()
    }

    /// [`System::metrics_of`] with each process's or pod's name.
    pub fn named_metrics(&self, component: &str) -> Vec<(String, String)> {
        if self.kube.is_some() {
            let port = admin_port(component);
            return self
                .serving(component)
                .map(|p| (p.name.clone(), p.http_get(port, "/metrics").map(|(_, b)| b).unwrap_or_default()))
                .collect();
        }
        let local: Vec<&Proc> = match component {
            "processor" => self.processors.iter().collect(),
            "ingest" => self.ingest.iter().collect(),
            "scheduler" => self.schedulers.iter().collect(),
            _ => self.lag.iter().collect(),
        };
        local.into_iter().map(|p| (p.name.clone(), p.metrics())).collect()
    }

    /// The local sluice-lag (the stand-in's; with --kubernetes it is the chart's pod).
    pub fn start_lag(&mut self) -> anyhow::Result<()> {
        if self.kube.is_some() {
            return Ok(());
        }
        let port = free_port()?;
        let scaler = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()?));
        self.lag_scaler = Some(scaler);
        let env = self.env(
            "SLUICE_LAG_",
            &[
                ("BROKERS", self.args.brokers.clone()),
                ("GROUPS", self.names.group.clone()),
                ("ADMIN_LISTEN", format!("127.0.0.1:{port}")),
                ("SCALER_LISTEN", scaler.to_string()),
                ("POLL_INTERVAL_MS", "1000".into()),
                ("RATE_WINDOW_MS", "5000".into()),
            ],
        );
        self.lag = Some(Proc::start("lag-0", &binary("sluice-lag")?, &[], &env, port, &self.logs)?);
        Ok(())
    }

    /// sluice-lag's picture of the processors' group.
    pub fn lag_picture(&self) -> Option<sluice_lag::picture::GroupPicture> {
        let path = format!("/groups/{}", self.names.group);
        let (code, body) = match (self.serving("lag").next(), &self.lag) {
            (Some(pod), _) => pod.http_get(admin_port("lag"), &path)?,
            (None, Some(lag)) => sluice_service::process::http_get(lag.admin_port, &path)?,
            (None, None) => return None,
        };
        (code == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }

    /// What a PodMonitor would give Prometheus, as file-based discovery: every
    /// service's newest `/metrics` as `<process>.prom`, and `targets.json`.
    pub fn write_scrapes(&self, dir: &std::path::Path, texts: &[(&Proc, &str)]) -> anyhow::Result<()> {
        let mut targets = Vec::new();
        for (proc, text) in texts {
            if !text.is_empty() {
                std::fs::write(dir.join(format!("{}.prom", proc.name)), text)?;
            }
            let component = proc.name.split('-').next().unwrap_or_default();
            targets.push(serde_json::json!({
                "targets": [format!("127.0.0.1:{}", proc.admin_port)],
                "labels": {"namespace": "sluice-demo", "pod": proc.name, "app_kubernetes_io_component": component},
            }));
        }
        // Replaced whole (rename), so Prometheus never reads half a file.
        let tmp = dir.join("targets.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&targets)?)?;
        std::fs::rename(&tmp, dir.join("targets.json"))?;
        Ok(())
    }

    pub fn start_processor(&mut self) -> anyhow::Result<()> {
        self.next_processor += 1;
        let name = format!("processor-{}", self.next_processor);
        let port = free_port()?;
        let n = &self.names;
        let env = self.env(
            "SLUICE_PROCESSOR_",
            &[
                ("KAFKA_BROKERS", self.args.brokers.clone()),
                ("REDIS_URL", self.args.redis_url.clone()),
                ("REDIS_PREFIX", n.prefix.clone()),
                ("GROUP_ID", n.group.clone()),
                ("INPUT_TOPIC", n.topic.clone()),
                ("SWAPS_TOPIC", n.swaps.clone()),
                ("DLQ_TOPIC", n.dlq.clone()),
                ("ADMIN_LISTEN", format!("127.0.0.1:{port}")),
                ("SESSION_TIMEOUT_MS", "15000".into()),
                ("SHUTDOWN_DEADLINE_MS", "20000".into()),
            ],
        );
        // The soak: exactly-once outputs, and the audit log its check reads.
        let env = if self.args.chaos {
            let soak = [
                ("EXACTLY_ONCE", "true".into()),
                ("TRANSACTION_TIMEOUT_MS", "5000".into()),
                ("AUDIT_APPLIED", "true".into()),
            ];
            [env, self.env("SLUICE_PROCESSOR_", &soak)].concat()
        } else {
            env
        };
        let p = Proc::start(&name, &binary("processor")?, &[], &env, port, &self.logs)?;
        if let Some(cpu) = &self.cpu {
            cpu.limit(&name, p.pid())?;
        }
        self.processors.push(p);
        Ok(())
    }

    pub fn start_ingest(&mut self, i: usize) -> anyhow::Result<()> {
        let port = free_port()?;
        let n = &self.names;
        let env = self.env(
            "SLUICE_INGEST_",
            &[
                ("KAFKA_BROKERS", self.args.brokers.clone()),
                ("REDIS_URL", self.args.redis_url.clone()),
                ("REDIS_PREFIX", n.prefix.clone()),
                ("CHAIN_URL", self.chain_url.clone()),
                ("TOPIC", n.topic.clone()),
                ("INSTANCE_ID", format!("ingest-{i}")),
                ("LEASE_TTL_MS", "3000".into()),
                ("ADMIN_LISTEN", format!("127.0.0.1:{port}")),
            ],
        );
        let p = Proc::start(&format!("ingest-{i}"), &binary("sluice-ingest")?, &[], &env, port, &self.logs)?;
        self.ingest.push(p);
        Ok(())
    }

    pub fn start_scheduler(&mut self, i: usize) -> anyhow::Result<u16> {
        let port = free_port()?;
        let grpc = free_port()?;
        let env = self.env(
            "SLUICE_SCHEDULER_",
            &[
                ("REDIS_URL", self.args.redis_url.clone()),
                ("REDIS_PREFIX", self.names.prefix.clone()),
                ("CHAIN_URL", self.chain_url.clone()),
                ("INSTANCE_ID", format!("scheduler-{i}")),
                ("ADMIN_LISTEN", format!("127.0.0.1:{port}")),
                ("GRPC_LISTEN", format!("127.0.0.1:{grpc}")),
                ("ADMIN_TOKEN", self.names.admin_token.clone()),
                ("LEASE_TTL_MS", "3000".into()),
            ],
        );
        let env =
            [env, SCHEDULES.iter().map(|(k, v)| (format!("SLUICE_SCHEDULER_{k}"), v.to_string())).collect()].concat();
        let p = Proc::start(&format!("scheduler-{i}"), &binary("sluice-scheduler")?, &[], &env, port, &self.logs)?;
        self.schedulers.push(p);
        Ok(grpc)
    }
}

/// The group's lag, committed and end totals, and each partition's offsets, from Kafka.
pub fn lag(consumer: &BaseConsumer, topic: &str, partitions: u32) -> Option<(u64, u64, u64, Vec<PartitionOffsets>)> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(5)).ok()?;
    let (mut lag, mut done, mut end, mut offsets) = (0u64, 0u64, 0u64, Vec::new());
    for e in committed.elements() {
        let known = if let Offset::Offset(o) = e.offset() { Some(o.max(0)) } else { None };
        let c = known.unwrap_or(0) as u64;
        let (low, high) = consumer.fetch_watermarks(topic, e.partition(), Duration::from_secs(5)).ok()?;
        offsets.push(PartitionOffsets { committed: known, earliest: Some(low), latest: high });
        let high = high.max(0) as u64;
        lag += high.saturating_sub(c);
        done += c;
        end += high;
    }
    Some((lag, done, end, offsets))
}

pub async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !check().await {
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
