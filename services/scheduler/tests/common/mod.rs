//! What the scheduler's integration tests share: scheduler replicas as real
//! processes (so they can be killed, stopped and continued), a chain node
//! (chainsim) in the test process, and readers of the run history.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_chainsim::server::{ChainNode, ServerOptions};
use sluice_chainsim::{Chain, ChainConfig};
pub use sluice_core::clock::now_ms;
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::chain::v1::{GetPoolRequest, ListPoolsRequest};
use sluice_proto::dex::v1::PoolInfo;
use sluice_scheduler::store::redis::RedisStore;
pub use sluice_scheduler::store::{RunRecord, Store};
use sluice_testkit::process::{Spawned, log_tail, wait_ready};
pub use sluice_testkit::{free_port, http_get};
use tonic::transport::Channel;

/// A chain node serving in this process.
pub struct TestChain {
    pub url: String,
    pub client: ChainClient<Channel>,
    pub node: ChainNode,
}

/// A fast chain (50 ms slots) whose first 40 slots are already due.
pub fn chain_config(pools: usize) -> ChainConfig {
    ChainConfig {
        seed: 7,
        genesis_ms: now_ms() - 40 * 50,
        slot_ms: 50,
        tx_per_sec: 2_000,
        pools,
        ..ChainConfig::default()
    }
}

pub async fn start_chain(config: ChainConfig, options: ServerOptions) -> TestChain {
    let chain = Chain::new(config).expect("valid chain config");
    let (listener, addr) = ChainNode::bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let node = ChainNode::start(chain, &options);
    tokio::spawn(node.clone().serve(listener, std::future::pending()));
    let url = format!("http://{addr}");
    let client = ChainClient::connect(url.clone()).await.expect("connect to chainsim");
    node.wait_for_slot(1).await;
    TestChain { url, client, node }
}

/// A chain of `pools` pools whose `GetPool` takes `latency`, except for the
/// first pool `ListPools` returns, which takes `slow_factor` times as long
/// (first, so a cohort sweep would hold its whole cohort behind it). Returns
/// the chain, its pools in `ListPools` order, and the slow pool.
pub async fn start_chain_with_slow_pool(
    pools: usize,
    latency: Duration,
    slow_factor: u32,
) -> (TestChain, Vec<String>, String) {
    // The pool list is a function of the config: read it from a probe.
    let names: Vec<String> = {
        let probe = start_chain(chain_config(pools), ServerOptions::default()).await;
        probe.pools().await.into_iter().map(|p| p.pool).collect()
    };
    let slow = names[0].clone();
    let options = ServerOptions {
        get_pool_latency: latency,
        slow_pools: vec![slow.clone()],
        slow_factor,
        ..ServerOptions::default()
    };
    (start_chain(chain_config(pools), options).await, names, slow)
}

impl TestChain {
    /// The chain's state of `pool` after `slot`.
    pub async fn state(&self, pool: &str, slot: u64) -> sluice_proto::dex::v1::PoolState {
        let request = GetPoolRequest { pool: pool.to_string(), at_slot: slot };
        self.client.clone().get_pool(request).await.expect("GetPool").into_inner()
    }

    pub async fn pools(&self) -> Vec<PoolInfo> {
        self.client.clone().list_pools(ListPoolsRequest {}).await.expect("ListPools").into_inner().pools
    }

    /// Writes every pool's chain state after `slot` into Redis, in the
    /// processors' layout, as if processors had applied every swap up to it.
    pub async fn seed_redis(&self, redis: &mut redis::aio::MultiplexedConnection, prefix: &str, slot: u64) -> usize {
        let mut seeded = 0;
        for info in self.pools().await {
            let state = self.state(&info.pool, slot).await;
            let Some(cmd) = sluice_dex::state::put_command(prefix, &state) else { continue };
            let () = cmd.query_async(redis).await.expect("HSET");
            seeded += 1;
        }
        seeded
    }

    /// Pools whose Redis state differs from the chain's at the same slot.
    pub async fn mismatches(&self, redis: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        for info in self.pools().await {
            let Some(ours) = sluice_dex::state::read_pool(redis, prefix, &info.pool).await.expect("read") else {
                continue;
            };
            let slot = ours.last_applied.map_or(0, |s| s.slot);
            let wire = self.state(&info.pool, slot).await;
            let truth = sluice_core::pool::PoolState::from_proto(&wire).expect("valid state");
            if truth != ours {
                out.push(info.pool.clone());
            }
        }
        out
    }
}

pub async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(sluice_testkit::redis_url())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connecting to the test stack's Redis")
}

pub async fn store(prefix: &str) -> RedisStore {
    let client = redis::Client::open(sluice_testkit::redis_url()).expect("redis url");
    let conn = redis::aio::ConnectionManager::new(client).await.expect("connecting to Redis");
    RedisStore::new(conn, prefix, 100_000, Duration::from_secs(3600))
}

/// A scheduler replica: a real `sluice-scheduler` process, which can be
/// killed and started again under the same name, ports and log.
pub struct Replica {
    pub name: String,
    env: Vec<(String, String)>,
    pub admin_port: u16,
    pub grpc_port: u16,
    /// `None` until started and once killed or terminated (even if it crashed:
    /// `terminate` then reports the crash).
    process: Option<Spawned>,
    log: PathBuf,
}

/// The admin API's bearer token every test replica requires.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

impl Replica {
    /// Configures (does not start) replica `name` with `env` (names without
    /// the `SLUICE_SCHEDULER_` prefix) on top of the test stack's Redis,
    /// with [`ADMIN_TOKEN`] as its admin token.
    pub fn new(name: &str, prefix: &str, env: &[(&str, &str)]) -> Self {
        let admin_port = free_port();
        let grpc_port = free_port();
        let mut all: Vec<(String, String)> = vec![
            ("REDIS_URL".into(), sluice_testkit::redis_url()),
            ("REDIS_PREFIX".into(), prefix.into()),
            ("INSTANCE_ID".into(), name.into()),
            ("ADMIN_LISTEN".into(), format!("127.0.0.1:{admin_port}")),
            ("GRPC_LISTEN".into(), format!("127.0.0.1:{grpc_port}")),
            ("ADMIN_TOKEN".into(), ADMIN_TOKEN.into()),
        ];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let log = std::env::temp_dir().join(format!("{}-{name}.log", prefix.trim_end_matches(':')));
        Self { name: name.into(), env: all, admin_port, grpc_port, process: None, log }
    }

    /// Starts the process; its log is appended to, so it keeps earlier runs.
    pub fn start(&mut self) {
        assert!(self.process.is_none(), "{} already running", self.name);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice-scheduler"));
        cmd.env("SLUICE_LOG_FORMAT", "plain").env("SLUICE_LOG", "info,sluice_scheduler=debug");
        cmd.envs(self.env.iter().map(|(k, v)| (format!("SLUICE_SCHEDULER_{k}"), v)));
        self.process = Some(Spawned::spawn(&mut cmd, &self.log).expect("starting sluice-scheduler"));
    }

    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    fn running(&self) -> &Spawned {
        self.process.as_ref().unwrap_or_else(|| panic!("{} is not running", self.name))
    }

    pub fn pid(&self) -> u32 {
        self.running().pid()
    }

    /// SIGKILL: no chance to release anything.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    pub fn pause(&self) {
        self.running().pause().unwrap_or_else(|e| panic!("{}: {e}", self.name));
    }

    pub fn resume(&self) {
        self.running().resume().unwrap_or_else(|e| panic!("{}: {e}", self.name));
    }

    /// SIGTERM and wait for the exit; the exit status and how long it took.
    pub fn terminate(&mut self, limit: Duration) -> (Option<i32>, Duration) {
        match self.process.take() {
            Some(mut process) => process.terminate(limit),
            None => (None, Duration::ZERO),
        }
    }

    /// Waits until `/ready` answers 200.
    pub async fn wait_ready(&self, limit: Duration) {
        if !wait_ready(self.admin_port, limit).await {
            panic!("{} not ready within {limit:?}; log:\n{}", self.name, self.log_tail());
        }
    }

    /// A metric's value summed over series whose labels contain `labels`.
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        let (_, body) = http_get(self.admin_port, "/metrics").unwrap_or_else(|| panic!("{} /metrics", self.name));
        sluice_testkit::metric(&body, name, labels)
    }

    /// The metric once it reads `want`, or what it read last after 5 s: a run's metrics are
    /// emitted just after its record is written, so a test that saw the record may be early.
    pub async fn metric_reaching(&self, name: &str, labels: &str, want: f64) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let value = self.metric(name, labels);
            if value == want || Instant::now() >= deadline {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last 40 lines of its log (of every run), also once it is stopped.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log, 40)
    }

    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }
}

/// Waits until `job`'s history has a record matching `pred`.
pub async fn wait_for_run(
    store: &dyn Store,
    job: &str,
    limit: Duration,
    what: &str,
    pred: impl Fn(&RunRecord) -> bool,
) -> RunRecord {
    let deadline = Instant::now() + limit;
    loop {
        let runs = store.runs(job, 1000).await.expect("reading runs");
        if let Some(run) = runs.iter().find(|r| pred(r)) {
            return run.clone();
        }
        assert!(Instant::now() < deadline, "no {job} run {what} within {limit:?}; runs: {runs:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A scheduler engine in this process (for policy tests that need no
/// process boundary), with `jobs` and their `SLUICE_SCHEDULER_…` settings
/// from `env` (names without the prefix).
pub async fn engine(
    instance: &str,
    prefix: &str,
    env: &[(&str, &str)],
    jobs: Vec<std::sync::Arc<dyn sluice_scheduler::jobs::Job>>,
) -> sluice_scheduler::engine::Engine {
    use sluice_scheduler::config::SchedulerConfig;
    use sluice_scheduler::engine::{Engine, JobEntry};
    let mut vars: Vec<(String, String)> = vec![
        ("S_REDIS_URL".into(), sluice_testkit::redis_url()),
        ("S_REDIS_PREFIX".into(), prefix.into()),
        ("S_INSTANCE_ID".into(), instance.into()),
        ("S_ADMIN_TOKEN".into(), ADMIN_TOKEN.into()),
    ];
    vars.extend(env.iter().map(|(k, v)| (format!("S_{k}"), v.to_string())));
    let mut reader = sluice_service::env::EnvReader::from_vars("S_", vars);
    let config = SchedulerConfig::read(&mut reader).expect("REDIS_URL");
    let entries = JobEntry::read_all(&mut reader, jobs);
    reader.finish().expect("valid test configuration");
    let client = redis::Client::open(sluice_testkit::redis_url()).expect("redis url");
    let conn = redis::aio::ConnectionManager::new(client).await.expect("connecting to Redis");
    let store = RedisStore::new(conn, prefix, config.history_keep, config.history_ttl);
    let clock = std::sync::Arc::new(sluice_scheduler::clock::SystemClock);
    let engine =
        Engine::new(config, std::sync::Arc::new(store), clock, sluice_scheduler::metrics::Metrics::new(), entries);
    engine.start();
    engine
}
