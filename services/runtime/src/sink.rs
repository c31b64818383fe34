//! The batching Redis writer a workload may use, and the sinks' error. It
//! never drops a write: a failure comes back as an error for the caller to
//! retry. It writes only into the store generation the state lives in
//! (`store_guard`). (The Kafka output is `output`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{Mutex, mpsc, oneshot};

use sluice_coord::endpoint::RedisEndpoint;
use sluice_coord::generation::Expect;
use sluice_service::admin::NotReady;
use sluice_service::env::EnvReader;
use sluice_service::settings::{Default, Setting};

use crate::metrics::{Dependency, RuntimeMetrics, Sink};
use crate::store_guard::StoreGuard;

/// How long a writer with nothing to send waits before it checks the
/// store's generation anyway.
const IDLE_CHECK: Duration = Duration::from_secs(5);

/// Where a workload that needs Redis finds it. The runtime itself needs
/// none: a workload reads this only if it uses a [`RedisSink`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// The URL, ACL user and TLS files ([`sluice_coord::endpoint`]).
    pub endpoint: RedisEndpoint,
    /// Connections the batching writer keeps, whatever the concurrency.
    pub connections: usize,
    /// Most commands one round trip carries.
    pub max_batch: usize,
}

/// `REDIS_URL`: where the store is.
pub const REDIS_URL: Setting = Setting {
    name: "REDIS_URL",
    kind: "`redis[s]://[user:password@]host:port[/db]`",
    default: Default::Required,
    what: "the Redis the workload's state and registry live in (the runtime itself needs none); `rediss://` for TLS",
    why: "",
};

/// `REDIS_CONNECTIONS`: the batching writer's connections.
pub const REDIS_CONNECTIONS: Setting = Setting {
    name: "REDIS_CONNECTIONS",
    kind: "connections",
    default: Default::Value("1"),
    what: "connections the batching writer pipelines over, whatever the concurrency",
    why: "each writer sends what queued while its last round trip was out, so one connection makes the largest batches, and Redis runs commands on one thread anyway",
};

/// `REDIS_MAX_BATCH`: the most commands in one round trip.
pub const REDIS_MAX_BATCH: Setting = Setting {
    name: "REDIS_MAX_BATCH",
    kind: "commands",
    default: Default::Value("256"),
    what: "a round trip takes no more queued operations once it carries this many commands (an operation is never split)",
    why: "a choice, not swept: at 70% load round trips carried 131 commands on average, below it (results/README.md)",
};

/// The Redis sink's settings, for a workload's table (with the endpoint's: [`ENDPOINT_SETTINGS`]).
pub const REDIS_SETTINGS: &[Setting] = &[REDIS_URL, REDIS_CONNECTIONS, REDIS_MAX_BATCH];

/// The ACL user and TLS settings every service reads beside its `REDIS_URL`.
pub use sluice_coord::endpoint::SETTINGS as ENDPOINT_SETTINGS;

impl RedisConfig {
    /// Reads [`REDIS_SETTINGS`]; problems are collected in `env`. `None` without `REDIS_URL`.
    pub fn read(env: &mut EnvReader) -> Option<Self> {
        let url: Option<String> = env.required_setting(&REDIS_URL);
        let config = Self {
            endpoint: RedisEndpoint::read(env, url.as_deref()),
            connections: env.setting(&REDIS_CONNECTIONS),
            max_batch: env.setting(&REDIS_MAX_BATCH),
        };
        if config.connections == 0 || config.max_batch == 0 {
            let (a, b) = (env.name(REDIS_CONNECTIONS.name), env.name(REDIS_MAX_BATCH.name));
            env.problem(format!("{a} and {b} must be above 0"));
        }
        url.map(|_| config)
    }
}

/// A write that did not land. Each keeps its client's error, so a caller can tell a full
/// queue from a dropped connection or a missing script.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SinkError {
    /// The Kafka client refused the send, or the delivery report says it did not land.
    #[error("kafka: {0}")]
    Kafka(#[source] rdkafka::error::KafkaError),
    /// The producer stopped before the record's delivery report came.
    #[error("kafka: the producer stopped before the delivery report")]
    ProducerStopped,
    /// Redis failed the round trip or the command, or its reply is not the command's type.
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    /// Fewer replies came back than commands went (`what`: which).
    #[error("redis: no reply to {0}")]
    NoReply(&'static str),
    /// The endpoint's settings do not make a client (checked when read, so only a caller
    /// that built its own [`RedisConfig`] sees it).
    #[error("redis: {0}")]
    Endpoint(String),
    /// The sink's writers are gone (the sink stopped).
    #[error("redis: the writer stopped")]
    WriterStopped,
    /// The store is not the one the state lives in (reset or replaced): no
    /// write is sent until its generation is back.
    #[error("redis: {0}")]
    StateLost(String),
}

/// The state a sink writes: its keys' prefix (the generation marker is
/// `<prefix>generation`) and what the runtime found recorded with the
/// group's offsets ([`crate::Runtime::recorded_generation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStore {
    pub prefix: String,
    pub expect: Expect,
}

/// Commands that go out together, in order, in one round trip, and where
/// their replies go.
struct Op {
    cmds: Vec<Cmd>,
    reply: oneshot::Sender<Result<Vec<RedisResult<Value>>, SinkError>>,
}

/// Redis through a fixed, small number of connections whatever the
/// concurrency: callers enqueue commands; each writer takes what is queued
/// (up to a batch), sends it as one pipeline, and hands each caller its own
/// reply. Queue many, flush, resolve afterwards.
#[derive(Clone)]
pub struct RedisSink {
    tx: mpsc::Sender<Op>,
    healthy: Arc<AtomicBool>,
    guard: Arc<StoreGuard>,
}

impl std::fmt::Debug for RedisSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSink").field("healthy", &self.healthy.load(Ordering::Relaxed)).finish()
    }
}

impl RedisSink {
    /// Starts `connections` writers for `url`, writing `state`. `scripts`
    /// (Lua sources) are loaded on every (re)connection so `EVALSHA` always
    /// finds them.
    pub fn start(
        config: &RedisConfig,
        scripts: Vec<String>,
        metrics: &RuntimeMetrics,
        state: StateStore,
    ) -> Result<Self, SinkError> {
        let (connections, max_batch) = (config.connections, config.max_batch);
        // The series an alert reads exist from the start, at zero.
        metrics.retries.with_label_values(&[Dependency::Redis.as_str()]);
        let client = config.endpoint.client().map_err(|e| SinkError::Endpoint(e.to_string()))?;
        let (tx, rx) = mpsc::channel(max_batch * connections * 4);
        let rx = Arc::new(Mutex::new(rx));
        let healthy = Arc::new(AtomicBool::new(false));
        let scripts = Arc::new(scripts);
        let guard = Arc::new(StoreGuard::new(&state.prefix, state.expect, metrics.state_store_replaced.clone()));
        for _ in 0..connections.max(1) {
            let writer = Writer {
                client: client.clone(),
                rx: rx.clone(),
                healthy: healthy.clone(),
                guard: guard.clone(),
                scripts: scripts.clone(),
                max_batch: max_batch.max(1),
                round_trips: metrics.sink_round_trips.with_label_values(&[Sink::Redis.as_str()]),
                batch_size: metrics.sink_batch_size.with_label_values(&[Sink::Redis.as_str()]),
                seconds: metrics.sink_seconds.with_label_values(&[Sink::Redis.as_str()]),
            };
            tokio::spawn(writer.run());
        }
        Ok(Self { tx, healthy, guard })
    }

    /// Runs one command through the next pipeline and returns its reply.
    pub async fn exec(&self, cmd: Cmd) -> Result<Value, SinkError> {
        let reply = self.exec_all(vec![cmd]).await?.pop();
        reply.unwrap_or(Err(SinkError::NoReply("the command")))
    }

    /// Runs `cmds` in order in one round trip (with other callers' commands
    /// around them) and returns each one's reply: what a batch handler
    /// sends for a whole batch. `Err` when the round trip itself failed.
    pub async fn exec_all(&self, cmds: Vec<Cmd>) -> Result<Vec<Result<Value, SinkError>>, SinkError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Op { cmds, reply }).await.map_err(|_| SinkError::WriterStopped)?;
        match rx.await {
            Ok(Ok(replies)) => Ok(replies.into_iter().map(|r| r.map_err(SinkError::Redis)).collect()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SinkError::WriterStopped),
        }
    }

    /// The id of the store generation this sink writes into, once its first
    /// connection opened it: what a handler reports as its
    /// [`crate::Handler::state_generation`].
    pub fn generation(&self) -> Option<String> {
        self.guard.generation().map(|g| g.id.clone())
    }

    /// Whether the last round trip succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// [`RedisSink::healthy`] and the store's generation as a readiness
    /// answer, for a handler's `ready`.
    pub fn ready(&self) -> Result<(), NotReady> {
        if let Some(lost) = self.guard.lost() {
            return Err(NotReady::new(lost.to_string()));
        }
        if self.healthy() { Ok(()) } else { Err(NotReady::new("redis does not answer")) }
    }
}

struct Writer {
    client: redis::Client,
    rx: Arc<Mutex<mpsc::Receiver<Op>>>,
    healthy: Arc<AtomicBool>,
    guard: Arc<StoreGuard>,
    scripts: Arc<Vec<String>>,
    max_batch: usize,
    /// The `sink="redis"` series, resolved once.
    round_trips: prometheus::IntCounter,
    batch_size: prometheus::Histogram,
    seconds: prometheus::Histogram,
}

impl Writer {
    async fn connect(&self) -> ConnectionManager {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(1);
        let mut delay = Duration::from_millis(100);
        loop {
            match ConnectionManager::new_with_config(self.client.clone(), config.clone()).await {
                Ok(mut conn) => {
                    // The generation first: nothing is sent to another store.
                    if self.guard.on_connect(&mut conn).await.is_ok() && self.load_scripts(&mut conn).await.is_ok() {
                        self.healthy.store(true, Ordering::Relaxed);
                        return conn;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "Redis connect failed; retrying"),
            }
            self.healthy.store(false, Ordering::Relaxed);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    async fn load_scripts(&self, conn: &mut ConnectionManager) -> RedisResult<()> {
        for source in self.scripts.iter() {
            let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(source).query_async(conn).await?;
        }
        Ok(())
    }

    async fn run(self) {
        let mut conn = self.connect().await;
        while let Some(batch) = self.next_batch().await {
            conn = self.serve(conn, batch).await;
        }
    }

    /// Up to a batch of queued operations; none after [`IDLE_CHECK`] with
    /// nothing queued (a round trip that only checks the generation);
    /// `None` once every sender is gone.
    async fn next_batch(&self) -> Option<Vec<Op>> {
        let mut rx = self.rx.lock().await;
        let first = match tokio::time::timeout(IDLE_CHECK, rx.recv()).await {
            Ok(Some(op)) => op,
            Ok(None) => return None,
            Err(_) => return Some(Vec::new()),
        };
        let mut commands = first.cmds.len();
        let mut batch = vec![first];
        while commands < self.max_batch {
            match rx.try_recv() {
                Ok(op) => {
                    commands += op.cmds.len();
                    batch.push(op);
                }
                Err(_) => break,
            }
        }
        Some(batch)
    }

    /// Sends `batch` as one pipeline behind a read of the generation marker
    /// and hands each caller its replies. While the store is lost only the
    /// marker is read; once it is back, the batch goes out.
    async fn serve(&self, mut conn: ConnectionManager, mut batch: Vec<Op>) -> ConnectionManager {
        let mut send = self.guard.lost().is_none();
        loop {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            pipe.cmd("GET").arg(self.guard.key());
            let counts: Vec<usize> = batch.iter().map(|op| op.cmds.len()).collect();
            let commands: usize = if send { counts.iter().sum() } else { 0 };
            if send {
                for op in &mut batch {
                    for cmd in op.cmds.drain(..) {
                        pipe.add_command(cmd);
                    }
                }
            }
            let started = Instant::now();
            let result: RedisResult<Vec<RedisResult<Value>>> = pipe.query_async(&mut conn).await;
            self.round_trips.inc();
            if commands > 0 {
                self.batch_size.observe(commands as f64);
                self.seconds.observe(started.elapsed().as_secs_f64());
            }
            let replies = match result {
                Ok(replies) => replies,
                Err(e) => {
                    self.healthy.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %e, commands, "Redis round trip failed; callers retry");
                    let reconnect = e.is_connection_dropped() || e.is_io_error() || e.is_timeout();
                    reply_all(batch, &SinkError::Redis(e));
                    if reconnect {
                        conn = self.connect().await;
                    }
                    return conn;
                }
            };
            self.healthy.store(true, Ordering::Relaxed);
            let mut replies = replies.into_iter();
            let found = replies.next().and_then(|r| r.ok()).and_then(|v| redis::from_redis_value(v).ok());
            let verdict = self.guard.verdict(found);
            self.guard.judge(verdict.clone());
            match (verdict, send) {
                (Err(lost), _) => {
                    // Sent along with the check, if at all: into a store
                    // that is no longer the state's, so none of it counts.
                    reply_all(batch, &SinkError::StateLost(lost.to_string()));
                    return conn;
                }
                (Ok(()), false) => send = true,
                (Ok(()), true) => {
                    let replies: Vec<RedisResult<Value>> = replies.collect();
                    let noscript = replies.iter().any(|r| matches!(r, Err(e) if e.code() == Some("NOSCRIPT")));
                    let mut replies = replies.into_iter();
                    for (op, n) in batch.into_iter().zip(counts) {
                        let mine: Vec<RedisResult<Value>> = replies.by_ref().take(n).collect();
                        let _ = op.reply.send(Ok(mine));
                    }
                    if noscript {
                        // Redis restarted (or was flushed): reload, the callers retry.
                        let _ = self.load_scripts(&mut conn).await;
                    }
                    return conn;
                }
            }
        }
    }
}

/// Fails every operation of `batch` with `error`.
fn reply_all(batch: Vec<Op>, error: &SinkError) {
    for op in batch {
        let _ = op.reply.send(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(pairs: &[(&str, &str)]) -> EnvReader {
        EnvReader::from_vars("W_", pairs.iter().map(|(k, v)| (format!("W_{k}"), v.to_string())))
    }

    #[test]
    fn redis_settings_name_what_is_missing_or_bad() {
        let mut env = reader(&[("REDIS_URL", "redis://r:6379")]);
        let config = RedisConfig::read(&mut env).expect("complete");
        env.finish().expect("no problems");
        let endpoint = RedisEndpoint::url("redis://r:6379");
        assert_eq!(config, RedisConfig { endpoint, connections: 1, max_batch: 256 });

        let mut env = reader(&[("REDIS_CONNECTIONS", "0")]);
        assert!(RedisConfig::read(&mut env).is_none(), "REDIS_URL is missing");
        let text = env.finish().expect_err("problems").to_string();
        for name in ["W_REDIS_URL", "W_REDIS_CONNECTIONS"] {
            assert!(text.contains(name), "{name} not named in:\n{text}");
        }
    }
}
