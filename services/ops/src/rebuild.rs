//! `rebuild`: the DEX workload's Redis state made again from the source of
//! truth, whatever the input topic's retention: every pool's state from the
//! chain at a slot, then the input topic replayed from the first record past
//! that slot in each partition, through the DEX handler's own code, into a
//! staging area beside the live state (`<prefix>rebuild:`). The staged pools
//! are checked against the chain, then switched in with one script.
//!
//! Two cases, told apart by the store's generation marker:
//! - **live**: the marker is the one the group's commits record. The state
//!   keeps serving while the rebuild runs; the switch refuses while a
//!   processor has applied a swap the replay has not, and the replay catches
//!   up and tries again. No processor stops.
//! - **lost**: the marker is gone (Redis came back empty). The processors
//!   wait, as they do for a lost store; the switch puts the recorded marker
//!   back with the rebuilt state, and they resume by themselves: the
//!   downtime is the rebuild's time. The rebuilt state holds every swap up
//!   to the topic's end, so it is at or past every committed offset, and the
//!   processors' replay from there changes nothing twice.
//!
//! A store whose marker is another generation is refused: it is another
//! deployment's store, or the wrong one.
//!
//! - [`start`]: each partition's first record past the slot.
//! - [`staged`]: the staged state: seeded from the chain, applied by the handler.
//! - [`replay`]: the input topic read into it.
//! - [`switch`]: the check against the chain, and the switch.

pub mod replay;
pub mod staged;
pub mod start;
pub mod switch;

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde::Serialize;
use sluice_dex::{DexConfig, DexHandler};
use sluice_kafka::KafkaConfig;
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::chain::v1::{GetHeadRequest, ListPoolsRequest, ListTokensRequest};
use sluice_proto::dex::v1::TokenMetadata;
use tonic::transport::Channel;

use crate::offsets;
use replay::{Replay, Replayed};
use staged::Staged;
use start::Start;
use switch::{Switch, Verified};

/// Why a rebuild could not be planned or done.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("kafka ({topic}): {source}")]
    Kafka { topic: String, source: rdkafka::error::KafkaError },
    #[error("the topic {topic} does not exist")]
    NoTopic { topic: String },
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("the chain: {0}")]
    Chain(String),
    #[error("{what}: not done in time")]
    Timeout { what: String },
    #[error(transparent)]
    Offsets(#[from] offsets::OffsetsError),
    #[error(
        "the store holds generation {found}, the group's commits record {expected}: it is another store; point --redis-url at the right one"
    )]
    OtherStore { expected: String, found: String },
    #[error(
        "partition {partition} no longer holds the records right after slot {slot} (its log starts at offset {log_start}, already past the slot): choose a later --at-slot"
    )]
    Retention { partition: i32, slot: u64, log_start: i64 },
    #[error("slot {slot} is ahead of the chain's head {head}")]
    Future { slot: u64, head: u64 },
    #[error("{drifted} rebuilt pools differ from the chain; nothing was switched (first: {first})")]
    Drift { drifted: usize, first: String },
    #[error(
        "the live state stayed ahead of the replay for {seconds} s, {attempts} switch attempts (the input grows faster than the replay reads it; last: pool {pool}, live at {live}, rebuilt at {staged}); nothing was switched"
    )]
    StillAhead { seconds: u64, attempts: u32, pool: String, live: String, staged: String },
    #[error("another rebuild holds {key}: wait for it, or delete the key if it died")]
    Busy { key: String },
    #[error("replaying: {0}")]
    Handler(String),
    #[error("{0}")]
    Unexpected(String),
}

/// What the rebuild works on.
#[derive(Debug, Clone)]
pub struct Settings {
    pub kafka: KafkaConfig,
    pub topic: String,
    pub group: String,
    pub dex: DexConfig,
    /// The chain's state is taken after this slot (`None`: the chain's head).
    pub at_slot: Option<u64>,
    /// How long each replay to the topic's end may take.
    pub replay_limit: Duration,
    /// How long the switch may keep replaying to the topic's new end while a live pool is
    /// ahead (the processors read the newest records too) before it gives up.
    pub switch_limit: Duration,
}

impl Settings {
    /// Where the rebuilt state is staged.
    pub fn staging(&self) -> String {
        format!("{}rebuild:", self.dex.redis_prefix)
    }
}

/// What a rebuild would do, found without writing anything.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// `live`, `lost` or `new` (no marker, and no generation recorded).
    pub case: &'static str,
    pub slot: u64,
    pub head: u64,
    pub pools: usize,
    pub starts: Vec<Start>,
    /// Records from the starts to the log ends, now.
    pub to_replay: i64,
    pub group_members: usize,
    pub recorded_generation: Option<String>,
    pub store_generation: Option<String>,
    pub seconds: PlanTimings,
    #[serde(skip)]
    pool_names: Vec<String>,
    #[serde(skip)]
    tokens: Vec<TokenMetadata>,
}

/// Seconds the plan's Kafka reads took: the group's offsets, and the search for each
/// partition's start.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PlanTimings {
    pub group: f64,
    pub search: f64,
}

/// Seconds each step took.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Timings {
    pub seed: f64,
    pub replay: f64,
    pub verify: f64,
    pub switch: f64,
    pub total: f64,
}

/// What a rebuild did.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub seeded_pools: usize,
    pub replayed: Replayed,
    pub verified: Verified,
    pub switch: Switch,
    pub switch_attempts: u32,
    pub registry_published: bool,
    pub seconds: Timings,
    /// What failed after the switch (it stands).
    pub warnings: Vec<String>,
}

/// Connects to the chain node.
pub async fn connect_chain(url: &str) -> Result<ChainClient<Channel>, RebuildError> {
    let endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| RebuildError::Chain(format!("{url}: {e}")))?
        .connect_timeout(Duration::from_secs(10));
    let channel = endpoint.connect().await.map_err(|e| RebuildError::Chain(format!("connecting to {url}: {e}")))?;
    Ok(ChainClient::new(channel).max_decoding_message_size(16 << 20))
}

fn chain_error(what: &str) -> impl Fn(tonic::Status) -> RebuildError + '_ {
    move |s| RebuildError::Chain(format!("{what}: {}", s.message()))
}

/// Finds the slot, the pools, each partition's start and the store's case; writes nothing.
pub async fn plan(
    s: &Settings,
    chain: &ChainClient<Channel>,
    conn: &mut MultiplexedConnection,
) -> Result<Plan, RebuildError> {
    let head = chain.clone().get_head(GetHeadRequest {}).await.map_err(chain_error("GetHead"))?.into_inner().head_slot;
    let slot = s.at_slot.unwrap_or(head);
    if slot > head {
        return Err(RebuildError::Future { slot, head });
    }
    let pools = chain.clone().list_pools(ListPoolsRequest {}).await.map_err(chain_error("ListPools"))?.into_inner();
    let tokens = chain.clone().list_tokens(ListTokensRequest {}).await.map_err(chain_error("ListTokens"))?.into_inner();
    let (kafka, topic, group) = (s.kafka.clone(), s.topic.clone(), s.group.clone());
    let (group_offsets, starts, seconds) = tokio::task::spawn_blocking(move || {
        let (timeout, began) = (Duration::from_secs(30), Instant::now());
        let group_offsets = offsets::show(&kafka, &group, &topic, timeout)?;
        let group_seconds = began.elapsed().as_secs_f64();
        let starts = start::after_slot(&kafka, &topic, slot, timeout)?;
        let seconds = PlanTimings { group: group_seconds, search: began.elapsed().as_secs_f64() - group_seconds };
        Ok::<_, RebuildError>((group_offsets, starts, seconds))
    })
    .await
    .map_err(|e| RebuildError::Unexpected(format!("the offsets task: {e}")))??;
    if let Some(gap) = starts.values().find(|p| p.offset == p.log_start && p.log_start > 0 && p.offset < p.log_end) {
        return Err(RebuildError::Retention { partition: gap.partition, slot, log_start: gap.log_start });
    }
    let recorded = offsets::recorded_generation(&group_offsets);
    let marker: Option<String> = redis::cmd("GET")
        .arg(sluice_coord::generation::key(&s.dex.redis_prefix))
        .query_async(conn)
        .await
        .map_err(RebuildError::Redis)?;
    let case = match (&marker, &recorded) {
        (Some(found), Some(expected)) if found != expected => {
            return Err(RebuildError::OtherStore { expected: expected.clone(), found: found.clone() });
        }
        (Some(_), _) => "live",
        (None, Some(_)) => "lost",
        (None, None) => "new",
    };
    Ok(Plan {
        case,
        slot,
        head,
        pools: pools.pools.len(),
        to_replay: starts.values().map(Start::records).sum(),
        starts: starts.into_values().collect(),
        group_members: group_offsets.members,
        recorded_generation: recorded,
        store_generation: marker,
        seconds,
        pool_names: pools.pools.into_iter().map(|p| p.pool).collect(),
        tokens: tokens.tokens,
    })
}

/// Does `plan`: seeds, replays, checks and switches. A drifted pool stops it before the
/// switch, with the staging area cleared.
pub async fn execute(
    s: &Settings,
    plan: &Plan,
    chain: &ChainClient<Channel>,
    conn: &mut MultiplexedConnection,
) -> Result<Outcome, RebuildError> {
    let lock = format!("{}rebuild-lock", s.dex.redis_prefix);
    let token = format!("{}-{}", std::process::id(), now_ms());
    // Held for as long as the run may take, so it never lapses under a running rebuild.
    let hold = s.replay_limit.as_secs() * (2 + u64::from(VERIFY_AGAIN)) + s.switch_limit.as_secs() + 600;
    let taken: Option<String> = redis::cmd("SET")
        .arg(&lock)
        .arg(&token)
        .arg("NX")
        .arg("EX")
        .arg(hold)
        .query_async(conn)
        .await
        .map_err(RebuildError::Redis)?;
    if taken.is_none() {
        return Err(RebuildError::Busy { key: lock });
    }
    let outcome = rebuild(s, plan, chain, conn).await;
    let staging = s.staging();
    let cleared = staged::clear(conn, &staging).await;
    let _: Result<i64, _> = redis::Script::new(RELEASE).key(&lock).arg(&token).invoke_async(conn).await;
    let mut outcome = outcome?;
    // Switched already: what fails now is said, not an error of the rebuild.
    if let Err(e) = cleared {
        outcome.warnings.push(format!("the staging area {staging}* was not cleared: {e}"));
    }
    Ok(outcome)
}

/// Deletes the lock only if this run still holds it.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

async fn rebuild(
    s: &Settings,
    plan: &Plan,
    chain: &ChainClient<Channel>,
    conn: &mut MultiplexedConnection,
) -> Result<Outcome, RebuildError> {
    let (started, staging) = (Instant::now(), s.staging());
    let mut seconds = Timings::default();
    staged::clear(conn, &staging).await?;
    let seeded_pools = staged::seed(chain, conn, &staging, &plan.pool_names, plan.slot).await?;
    seconds.seed = started.elapsed().as_secs_f64();

    let outputs = Staged::new(conn.clone(), &staging, &plan.tokens).await?;
    let handler = DexHandler::with_outputs(s.dex.clone(), outputs, &prometheus::Registry::new());
    let mut replay = Replay::open(&s.kafka, &s.topic, &plan.starts)?;
    replay.catch_up(&handler, s.replay_limit).await?;
    seconds.replay = started.elapsed().as_secs_f64() - seconds.seed;

    // A pool the replay left mid-slot (the topic's end was) is compared again after the
    // replay has read the topic's newer end, a bounded number of times.
    let mut verified = switch::verify(chain, conn, &staging, &plan.pool_names, through(plan, &replay)).await?;
    for _ in 0..VERIFY_AGAIN {
        if verified.behind == 0 || !verified.drift.is_empty() {
            break;
        }
        replay.catch_up(&handler, s.replay_limit).await?;
        verified = switch::verify(chain, conn, &staging, &plan.pool_names, through(plan, &replay)).await?;
    }
    seconds.verify = started.elapsed().as_secs_f64() - seconds.seed - seconds.replay;
    if let Some(first) = verified.drift.first() {
        return Err(RebuildError::Drift { drifted: verified.drifted, first: first.clone() });
    }

    let registry_published = publish_registry(conn, &s.dex.redis_prefix, &plan.tokens).await?;
    let generation = plan.recorded_generation.clone().unwrap_or_default();
    let (mut attempts, switching) = (0, Instant::now());
    let switched = loop {
        attempts += 1;
        match switch::switch(conn, &s.dex.redis_prefix, &staging, &generation, &plan.pool_names).await? {
            done @ Switch::Switched { .. } => break done,
            Switch::Ahead { pool, live, staged } if switching.elapsed() >= s.switch_limit => {
                let seconds = s.switch_limit.as_secs();
                return Err(RebuildError::StillAhead { seconds, attempts, pool, live, staged });
            }
            Switch::Ahead { .. } => replay.catch_up(&handler, s.replay_limit).await?,
        }
    };
    seconds.total = started.elapsed().as_secs_f64();
    seconds.switch = seconds.total - seconds.seed - seconds.replay - seconds.verify;
    let mut outcome = Outcome {
        seeded_pools,
        replayed: replay.replayed,
        verified,
        switch: switched,
        switch_attempts: attempts,
        registry_published,
        seconds,
        warnings: Vec::new(),
    };
    if let Err(e) = record(conn, &s.dex.redis_prefix, plan, &outcome).await {
        outcome.warnings.push(format!("this rebuild was not recorded in {}rebuilds: {e}", s.dex.redis_prefix));
    }
    Ok(outcome)
}

/// Slots below the replay's slowest partition not taken as read through: a producer that
/// is not transactional (the ingest with transactions off) may make a partition's records
/// visible a little after another partition's later ones.
const UNORDERED_SLOTS: u64 = 8;

/// The slot the check compares at: one the replay has read every record of.
fn through(plan: &Plan, replay: &Replay) -> u64 {
    replay.slots_read_below().map_or(plan.slot, |s| s.saturating_sub(1 + UNORDERED_SLOTS).max(plan.slot))
}

/// Checks again while pools are mid-slot, each after replaying to the topic's new end.
const VERIFY_AGAIN: u32 = 2;

/// Publishes the token registry from the chain when the store has none (it was lost
/// with the store; the processors need it before their first swap).
async fn publish_registry(
    conn: &mut MultiplexedConnection,
    prefix: &str,
    tokens: &[TokenMetadata],
) -> Result<bool, RebuildError> {
    let key = sluice_dex::registry::tokens_key(prefix);
    let present: bool = redis::cmd("EXISTS").arg(&key).query_async(conn).await.map_err(RebuildError::Redis)?;
    if present {
        return Ok(false);
    }
    sluice_dex::registry::publish(conn, prefix, tokens).await.map_err(RebuildError::Redis)?;
    Ok(true)
}

/// Keeps the last 50 rebuilds' plans and outcomes in `<prefix>rebuilds`, newest first.
async fn record(
    conn: &mut MultiplexedConnection,
    prefix: &str,
    plan: &Plan,
    outcome: &Outcome,
) -> Result<(), RebuildError> {
    let entry = serde_json::json!({ "at_ms": now_ms() as u64, "plan": plan, "outcome": outcome }).to_string();
    let key = format!("{prefix}rebuilds");
    redis::pipe()
        .cmd("LPUSH")
        .arg(&key)
        .arg(entry)
        .ignore()
        .cmd("LTRIM")
        .arg(&key)
        .arg(0)
        .arg(49)
        .ignore()
        .query_async::<()>(conn)
        .await
        .map_err(RebuildError::Redis)
}
