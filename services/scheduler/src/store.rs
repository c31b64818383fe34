//! The scheduler's state in Redis: who runs which tick, with which token,
//! and what happened. Every transition is one Lua script, so replicas racing
//! for the same tick see one outcome.
//!
//! Keys of job `J` (under the deployment's prefix):
//! - `sched:J:state` (hash): `last_tick` (the newest scheduled tick claimed:
//!   ticks are claimed in order, so an older one can never be claimed again,
//!   however long ago its claim expired), `last_done_tick` (the newest tick
//!   resolved: run to an end or skipped), `last_success_ms`, `paused`,
//!   `paused_reason`.
//! - `sched:J:tick:T` (claim of tick `T`, `owner:token`, or `owner:q` while
//!   queued behind a running tick, `owner:s` when skipped): kept for the
//!   period plus the catch-up window after the run, so a replica whose ticker
//!   or clock is out of phase finds the tick taken.
//! - `sched:J:running` (`owner:token`, a lease renewed while the run lasts):
//!   at most one run of a job at a time across replicas; a dead holder's
//!   lease lapses and a peer may take the tick over within its window.
//! - `sched:J:queued` (`owner:q`): the one tick waiting (overlap policy
//!   buffer-one).
//! - `sched:J:fence`: the fencing counter; every run start draws the next
//!   token, so a newer token means a newer run started, and a write with an
//!   older one is refused ([`sluice_coord::FENCE_CHECK`]).
//! - `sched:J:runs` (sorted set by tick) and `sched:J:run:ID` (a JSON
//!   [`RunRecord`]): the run history, trimmed to the newest N per job.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};
use serde::{Deserialize, Serialize};

/// Key names of one job.
#[derive(Debug, Clone)]
pub struct JobKeys {
    base: String,
}

impl JobKeys {
    pub fn new(prefix: &str, job: &str) -> Self {
        Self { base: format!("{prefix}sched:{job}:") }
    }
    pub fn state(&self) -> String {
        format!("{}state", self.base)
    }
    pub fn fence(&self) -> String {
        format!("{}fence", self.base)
    }
    pub fn running(&self) -> String {
        format!("{}running", self.base)
    }
    pub fn queued(&self) -> String {
        format!("{}queued", self.base)
    }
    pub fn runs(&self) -> String {
        format!("{}runs", self.base)
    }
    /// Prefix of the run records' keys.
    pub fn run_prefix(&self) -> String {
        format!("{}run:", self.base)
    }
    /// A scheduled tick's claim; manual runs have their own namespace so
    /// that triggering never takes a scheduled tick's place.
    pub fn tick(&self, tick: &Tick) -> String {
        if tick.manual { format!("{}manual:{}", self.base, tick.ms) } else { format!("{}tick:{}", self.base, tick.ms) }
    }
}

/// The claim and queue value of a tick waiting behind a running one: names
/// the tick, so a lapsed wait can never be mistaken for a newer one.
pub fn queued_value(owner: &str, tick: &Tick) -> String {
    format!("{owner}:q{}{}", if tick.manual { "m" } else { "" }, tick.ms)
}

/// A tick: a scheduled one (its nominal UTC instant) or a manual trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    pub ms: i64,
    pub manual: bool,
}

/// How the claimer means to treat the tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    Run,
    /// Resolve it as not run, for this reason (`late`, `paused`).
    Skip(&'static str),
}

/// A claim attempt.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub job: &'a str,
    pub tick: Tick,
    pub owner: &'a str,
    /// The newest claimed tick as the caller last saw it; the claim is
    /// refused with `retry` if it moved (the gap record would be wrong).
    pub observed_last: i64,
    /// The ticks between `observed_last` and `tick` nobody claimed, as a
    /// `missed` record (written only if this claim moves the job on).
    pub gap: Option<RunRecord>,
    /// How long the tick's claim lives (kept past the run, see
    /// [`crate::config::JobSettings::claim_keep`]).
    pub claim_ttl: Duration,
    pub lease_ttl: Duration,
    pub intent: Intent,
    pub buffer_one: bool,
    /// The record's reason if the tick is resolved as `intent`'s skip.
    pub skip_detail: String,
}

/// What a claim attempt got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This replica runs the tick with this fencing token.
    Run { token: u64, takeover: bool },
    /// Waiting behind the running tick (buffer-one).
    Queued,
    /// This replica resolved the tick as not run, for `reason`
    /// (`paused`, `overlap`, `late`).
    Skipped { reason: String },
    /// Someone else has it (`held`), it was resolved (`done`), a newer
    /// tick was claimed (`superseded`), or the job moved on since the caller
    /// looked (`retry`, with the new last tick in `previous_tick`).
    Lost { reason: String },
}

/// A claim attempt's outcome and the job's state as the script saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub outcome: ClaimOutcome,
    /// The newest scheduled tick claimed before this attempt (-1: none).
    pub previous_tick: i64,
    pub last_success_ms: i64,
}

/// Lua: adds a record to a job's history and trims it to the newest `keep`.
/// (Record keys are derived from the prefix inside the script: one Redis
/// primary, no cluster slots.)
const RECORD_FN: &str = r"
local function record(runs, prefix, id, score, json, ttl, keep)
  redis.call('SET', prefix .. id, json, 'PX', ttl)
  redis.call('ZADD', runs, score, id)
  local excess = redis.call('ZCARD', runs) - tonumber(keep)
  if excess > 0 then
    local old = redis.call('ZRANGE', runs, 0, excess - 1)
    for _, o in ipairs(old) do redis.call('DEL', prefix .. o) end
    redis.call('ZREMRANGEBYRANK', runs, 0, excess - 1)
  end
end
";

/// The claim of a tick, with every record it implies written in the same
/// step (the missed ticks before it, the running, queued or skipped record),
/// so a replica killed right after claiming leaves nothing unrecorded.
const CLAIM: &str = r"
-- KEYS: tick claim, fence, state, running, queued, runs
-- ARGV: 1 tick, 2 owner, 3 claim ttl, 4 lease ttl, 5 intent, 6 overlap, 7 manual,
--   8 observed last tick, 9 run key prefix, 10 history ttl, 11 history keep,
--   12 gap id ('' none), 13 gap score, 14 gap json, 15 running head, 16 running tail,
--   17 run id head, 18 skip-intent id, 19 skip-intent json, 20 skipped id,
--   21 skipped-paused json, 22 skipped-overlap json, 23 queued id, 24 queued json,
--   25 queued value (owner:q<tick>)
local tick = tonumber(ARGV[1])
local manual = ARGV[7] == '1'
local st = redis.call('HMGET', KEYS[3], 'last_tick', 'last_done_tick', 'last_success_ms', 'paused')
local last = tonumber(st[1] or '-1')
local done = tonumber(st[2] or '-1')
local success = st[3] or '0'
local function reply(code, reason) return {code, reason, tostring(last), success} end
local function rec(id, json) record(KEYS[6], ARGV[9], id, ARGV[1], json, ARGV[10], ARGV[11]) end
local takeover = false
local current = redis.call('GET', KEYS[1])
if current then
  -- Only the latest scheduled tick, unresolved, whose run or wait is dead,
  -- may be taken over.
  if manual then return reply(0, 'held') end
  local mark = string.match(current, ':([^:]+)$')
  if done >= tick or mark == 's' then return reply(0, 'done') end
  if tick < last then return reply(0, 'superseded') end
  if string.sub(mark, 1, 1) == 'q' then
    if redis.call('GET', KEYS[5]) == current then return reply(0, 'held') end
  elseif redis.call('GET', KEYS[4]) == current then
    return reply(0, 'held')
  end
  takeover = true
elseif not manual then
  if tick < last then return reply(0, 'superseded') end
  if tick == last and done >= tick then return reply(0, 'done') end
  -- The caller computed the missed ticks from the last tick it saw.
  if last ~= tonumber(ARGV[8]) then return reply(0, 'retry') end
end
if not manual and tick > last then
  redis.call('HSET', KEYS[3], 'last_tick', ARGV[1])
  if ARGV[12] ~= '' then record(KEYS[6], ARGV[9], ARGV[12], ARGV[13], ARGV[14], ARGV[10], ARGV[11]) end
end
local function skip(reason, id, json)
  redis.call('SET', KEYS[1], ARGV[2] .. ':s', 'PX', ARGV[3])
  if not manual and tick > done then redis.call('HSET', KEYS[3], 'last_done_tick', ARGV[1]) end
  rec(id, json)
  return reply(-2, reason)
end
if st[4] == '1' then return skip('paused', ARGV[20], ARGV[21]) end
if ARGV[5] ~= 'run' then return skip(ARGV[5], ARGV[18], ARGV[19]) end
if redis.call('EXISTS', KEYS[4]) == 1 or redis.call('EXISTS', KEYS[5]) == 1 then
  if ARGV[6] == 'buffer' and redis.call('SET', KEYS[5], ARGV[25], 'NX', 'PX', ARGV[4]) then
    redis.call('SET', KEYS[1], ARGV[25], 'PX', ARGV[3])
    rec(ARGV[23], ARGV[24])
    return reply(-1, 'queued')
  end
  return skip('overlap', ARGV[20], ARGV[22])
end
local token = redis.call('INCR', KEYS[2])
local value = ARGV[2] .. ':' .. token
redis.call('SET', KEYS[4], value, 'PX', ARGV[4])
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
rec(ARGV[17] .. token, ARGV[15] .. token .. ARGV[16])
return {token, takeover and 'takeover' or 'claimed', tostring(last), success}
";

const START_QUEUED: &str = r"
-- KEYS: running, fence, queued, tick claim, runs, state
-- ARGV: 1 owner, 2 lease ttl, 3 claim ttl, 4 run key prefix, 5 history ttl, 6 keep,
--   7 queued id, 8 running head, 9 running tail, 10 run id head, 11 tick, 12 queued value,
--   13 manual, 14 skipped id, 15 skipped-paused json
local mine = ARGV[12]
local current = redis.call('GET', KEYS[4])
-- Already started (a retry after a lost reply): the same token again.
if current and current == redis.call('GET', KEYS[1])
  and string.sub(current, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  local token = tonumber(string.sub(current, #ARGV[1] + 2))
  if token then return token end
end
if redis.call('GET', KEYS[3]) ~= mine or current ~= mine then return -1 end
if redis.call('HGET', KEYS[6], 'paused') == '1' then
  redis.call('DEL', KEYS[3])
  redis.call('SET', KEYS[4], ARGV[1] .. ':s', 'PX', ARGV[3])
  if ARGV[13] ~= '1' then
    local done = tonumber(redis.call('HGET', KEYS[6], 'last_done_tick') or '-1')
    if tonumber(ARGV[11]) > done then redis.call('HSET', KEYS[6], 'last_done_tick', ARGV[11]) end
  end
  redis.call('ZREM', KEYS[5], ARGV[7])
  redis.call('DEL', ARGV[4] .. ARGV[7])
  record(KEYS[5], ARGV[4], ARGV[14], ARGV[11], ARGV[15], ARGV[5], ARGV[6])
  return -2
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
  return 0
end
local token = redis.call('INCR', KEYS[2])
local value = ARGV[1] .. ':' .. token
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
redis.call('SET', KEYS[4], value, 'PX', ARGV[3])
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[5], ARGV[7])
redis.call('DEL', ARGV[4] .. ARGV[7])
record(KEYS[5], ARGV[4], ARGV[10] .. token, ARGV[11], ARGV[8] .. token .. ARGV[9], ARGV[5], ARGV[6])
return token
";

const RENEW: &str = r"
-- KEYS: running, tick claim. ARGV: owner:token, lease ttl, claim ttl
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
return 1
";

/// The end of a run, with its final record written in the same step (so a
/// reader never sees the lease gone while the record still says running).
/// Fenced by token: a run that a newer run superseded marks nothing and is
/// recorded with the `lost` variant. A run whose lease lapsed while no newer
/// run started still completed every write it made (each was checked), so
/// its end is marked as usual; that also makes a retry after a lost reply
/// harmless.
const FINISH: &str = r"
-- KEYS: fence, state, tick claim, running, runs
-- ARGV: 1 token, 2 tick, 3 owner:token, 4 ended ms, 5 succeeded, 6 resolved, 7 manual,
--   8 keep ms, 9 run key prefix, 10 history ttl, 11 keep records, 12 id, 13 json, 14 lost json
local function rec(json) record(KEYS[5], ARGV[9], ARGV[12], ARGV[2], json, ARGV[10], ARGV[11]) end
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < newest then rec(ARGV[14]) return -1 end
local held = redis.call('GET', KEYS[4]) == ARGV[3]
if held then redis.call('DEL', KEYS[4]) end
if ARGV[7] ~= '1' and ARGV[6] == '1' then
  local done = tonumber(redis.call('HGET', KEYS[2], 'last_done_tick') or '-1')
  if tonumber(ARGV[2]) > done then redis.call('HSET', KEYS[2], 'last_done_tick', ARGV[2]) end
end
if ARGV[5] == '1' then redis.call('HSET', KEYS[2], 'last_success_ms', ARGV[4]) end
if ARGV[6] == '1' then redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[8]) end
rec(ARGV[13])
if held then return 1 end
return 2
";

const RECORD: &str = r"
-- KEYS: runs. ARGV: tick, id, json, ttl ms, keep, run key prefix
record(KEYS[1], ARGV[6], ARGV[2], ARGV[1], ARGV[3], ARGV[4], ARGV[5])
return 1
";

/// Where a queued tick stands, for [`Store::start_queued`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    Started(u64),
    Waiting,
    Paused,
    Lost,
}

/// How a finished run ended, for [`Store::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Marked; the lease was still this run's.
    Done,
    /// Marked; the lease had lapsed, but no newer run had started.
    DoneAfterLapse,
    /// A newer run holds a newer token: nothing marked.
    Stale,
}

/// One entry of the run history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RunRecord {
    pub job: String,
    pub tick_ms: i64,
    pub owner: String,
    pub token: u64,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub outcome: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub items: u64,
    #[serde(default)]
    pub drift_found: u64,
    #[serde(default)]
    pub drift_repaired: u64,
    #[serde(default)]
    pub stale_writes: u64,
    #[serde(default)]
    pub ticks: u64,
    #[serde(default)]
    pub last_tick_ms: i64,
    #[serde(default)]
    pub manual: bool,
    #[serde(default)]
    pub item_done_p50_ms: u64,
    #[serde(default)]
    pub item_done_p95_ms: u64,
    #[serde(default)]
    pub item_done_max_ms: u64,
}

impl RunRecord {
    /// The record's id in the history: a tick can have several records (a
    /// run taken over carries a new token; missed and skipped ones have none).
    pub fn id(&self) -> String {
        let kind = if self.manual { "m" } else { "" };
        match (self.token, self.outcome.as_str()) {
            (0, "missed") => format!("{}-missed", self.tick_ms),
            (0, "skipped") => format!("{kind}{}-skipped", self.tick_ms),
            // Waiting (queued), or given up while waiting.
            (0, _) => format!("{kind}{}-queued-{}", self.tick_ms, self.owner),
            (token, _) => format!("{kind}{}-{token}", self.tick_ms),
        }
    }

    fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The record's JSON split around its token (which only the script
    /// knows), and its id without the token.
    fn around_token(&self) -> (String, String, String) {
        let json = Self { token: 0, ..self.clone() }.json();
        let (head, tail) = json.split_once("\"token\":0").unwrap_or((&json, ""));
        let id = Self { token: 1, ..self.clone() }.id();
        (format!("{head}\"token\":"), tail.to_string(), id[..id.len() - 1].to_string())
    }
}

/// The job state a replica reports (admin API).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobState {
    pub paused: bool,
    pub paused_reason: String,
    pub last_success_ms: i64,
}

/// Redis access for the scheduler.
#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
    prefix: String,
    claim: Script,
    start_queued: Script,
    renew: Script,
    finish: Script,
    record: Script,
    history_keep: usize,
    history_ttl: Duration,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// Wall-clock now, Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn ms(d: Duration) -> u64 {
    d.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

impl Store {
    pub fn new(conn: ConnectionManager, prefix: &str, history_keep: usize, history_ttl: Duration) -> Self {
        Self {
            conn,
            prefix: prefix.to_string(),
            claim: Script::new(&format!("{RECORD_FN}{CLAIM}")),
            start_queued: Script::new(&format!("{RECORD_FN}{START_QUEUED}")),
            renew: Script::new(RENEW),
            finish: Script::new(&format!("{RECORD_FN}{FINISH}")),
            record: Script::new(&format!("{RECORD_FN}{RECORD}")),
            history_keep,
            history_ttl,
        }
    }

    pub fn keys(&self, job: &str) -> JobKeys {
        JobKeys::new(&self.prefix, job)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A connection for jobs (multiplexed; cheap to clone).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The newest scheduled tick claimed for `job` (-1: none yet).
    pub async fn last_tick(&self, job: &str) -> RedisResult<i64> {
        let last: Option<i64> =
            redis::cmd("HGET").arg(self.keys(job).state()).arg("last_tick").query_async(&mut self.conn.clone()).await?;
        Ok(last.unwrap_or(-1))
    }

    /// Claims a tick (see [`ClaimRequest`]).
    pub async fn claim(&self, req: &ClaimRequest<'_>) -> RedisResult<Claimed> {
        let keys = self.keys(req.job);
        let tick = req.tick;
        let now = now_ms();
        let base = RunRecord {
            job: req.job.to_string(),
            tick_ms: tick.ms,
            owner: req.owner.to_string(),
            started_ms: now,
            manual: tick.manual,
            ..RunRecord::default()
        };
        let running = RunRecord { outcome: "running".into(), ..base.clone() };
        let (head, tail, run_id) = running.around_token();
        let ended = RunRecord { ended_ms: now, ticks: 1, last_tick_ms: tick.ms, ..base.clone() };
        let intent_reason = match req.intent {
            Intent::Run => "run",
            Intent::Skip(reason) => reason,
        };
        let skip_intent = RunRecord {
            outcome: if intent_reason == "late" { "missed".into() } else { "skipped".into() },
            reason: req.skip_detail.clone(),
            ..ended.clone()
        };
        let paused = RunRecord { outcome: "skipped".into(), reason: "the job is paused".into(), ..ended.clone() };
        let overlap = RunRecord {
            outcome: "skipped".into(),
            reason: "the previous run was still going (overlap policy)".into(),
            ..ended
        };
        let queued = RunRecord {
            outcome: "queued".into(),
            reason: "waiting for the running tick (overlap policy buffer-one)".into(),
            ..base
        };
        let (gap_id, gap_score, gap_json) = match &req.gap {
            Some(gap) => (gap.id(), gap.tick_ms, gap.json()),
            None => (String::new(), 0, String::new()),
        };
        let (code, reason, previous, success): (i64, String, String, String) = self
            .claim
            .key(keys.tick(&tick))
            .key(keys.fence())
            .key(keys.state())
            .key(keys.running())
            .key(keys.queued())
            .key(keys.runs())
            .arg(tick.ms)
            .arg(req.owner)
            .arg(ms(req.claim_ttl))
            .arg(ms(req.lease_ttl))
            .arg(intent_reason)
            .arg(if req.buffer_one { "buffer" } else { "skip" })
            .arg(if tick.manual { "1" } else { "0" })
            .arg(req.observed_last)
            .arg(keys.run_prefix())
            .arg(ms(self.history_ttl))
            .arg(self.history_keep)
            .arg(gap_id)
            .arg(gap_score)
            .arg(gap_json)
            .arg(head)
            .arg(tail)
            .arg(run_id)
            .arg(skip_intent.id())
            .arg(skip_intent.json())
            .arg(paused.id())
            .arg(paused.json())
            .arg(overlap.json())
            .arg(queued.id())
            .arg(queued.json())
            .arg(queued_value(req.owner, &tick))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let outcome = match code {
            token if token > 0 => ClaimOutcome::Run { token: token as u64, takeover: reason == "takeover" },
            -1 => ClaimOutcome::Queued,
            -2 => ClaimOutcome::Skipped { reason },
            _ => ClaimOutcome::Lost { reason },
        };
        Ok(Claimed {
            outcome,
            previous_tick: previous.parse().unwrap_or(-1),
            last_success_ms: success.parse().unwrap_or(0),
        })
    }

    /// For a queued tick: `Started(token)` once it may run, `Waiting` while
    /// it must wait (this renews its place), `Paused` if the job was paused
    /// meanwhile (recorded as skipped), `Lost` if its place lapsed.
    pub async fn start_queued(
        &self,
        job: &str,
        tick: Tick,
        owner: &str,
        claim_ttl: Duration,
        lease_ttl: Duration,
    ) -> RedisResult<Queue> {
        let keys = self.keys(job);
        let base = RunRecord {
            job: job.to_string(),
            tick_ms: tick.ms,
            owner: owner.to_string(),
            manual: tick.manual,
            ..RunRecord::default()
        };
        let queued_id = RunRecord { outcome: "queued".into(), ..base.clone() }.id();
        let paused = RunRecord {
            outcome: "skipped".into(),
            reason: "the job was paused while the tick waited".into(),
            started_ms: now_ms(),
            ended_ms: now_ms(),
            ticks: 1,
            last_tick_ms: tick.ms,
            ..base.clone()
        };
        let (head, tail, run_id) = RunRecord { outcome: "running".into(), started_ms: now_ms(), ..base }.around_token();
        let token: i64 = self
            .start_queued
            .key(keys.running())
            .key(keys.fence())
            .key(keys.queued())
            .key(keys.tick(&tick))
            .key(keys.runs())
            .key(keys.state())
            .arg(owner)
            .arg(ms(lease_ttl))
            .arg(ms(claim_ttl))
            .arg(keys.run_prefix())
            .arg(ms(self.history_ttl))
            .arg(self.history_keep)
            .arg(queued_id)
            .arg(head)
            .arg(tail)
            .arg(run_id)
            .arg(tick.ms)
            .arg(queued_value(owner, &tick))
            .arg(if tick.manual { "1" } else { "0" })
            .arg(paused.id())
            .arg(paused.json())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match token {
            -1 => Queue::Lost,
            -2 => Queue::Paused,
            0 => Queue::Waiting,
            t => Queue::Started(t as u64),
        })
    }

    /// Gives up a queued place (shutdown).
    pub async fn leave_queue(&self, job: &str, owner: &str, tick: &Tick) -> RedisResult<()> {
        let keys = self.keys(job);
        let script =
            Script::new("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0");
        let _: i64 =
            script.key(keys.queued()).arg(queued_value(owner, tick)).invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Extends a running tick's lease and claim; `false` once it is lost.
    pub async fn renew(
        &self,
        job: &str,
        tick: Tick,
        value: &str,
        claim_ttl: Duration,
        lease_ttl: Duration,
    ) -> RedisResult<bool> {
        let keys = self.keys(job);
        let renewed: i64 = self
            .renew
            .key(keys.running())
            .key(keys.tick(&tick))
            .arg(value)
            .arg(ms(lease_ttl))
            .arg(ms(claim_ttl))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(renewed == 1)
    }

    /// Ends a run: frees the job's lease, marks the tick resolved when
    /// `resolved` (a cancelled run leaves it open for a peer to take over),
    /// keeps the tick's claim for `keep`, and writes `run` as the final
    /// record, or, if a newer run superseded this one, `run` as `lost_claim`
    /// (when it claimed success).
    pub async fn finish(&self, run: &RunRecord, value: &str, resolved: bool, keep: Duration) -> RedisResult<Finish> {
        let keys = self.keys(&run.job);
        let tick = Tick { ms: run.tick_ms, manual: run.manual };
        let lost = if run.outcome == "succeeded" {
            RunRecord {
                outcome: "lost_claim".into(),
                reason: "the lease was gone when the run ended".into(),
                ..run.clone()
            }
        } else {
            run.clone()
        };
        let result: i64 = self
            .finish
            .key(keys.fence())
            .key(keys.state())
            .key(keys.tick(&tick))
            .key(keys.running())
            .key(keys.runs())
            .arg(run.token)
            .arg(tick.ms)
            .arg(value)
            .arg(run.ended_ms)
            .arg(if run.outcome == "succeeded" { "1" } else { "0" })
            .arg(if resolved { "1" } else { "0" })
            .arg(if tick.manual { "1" } else { "0" })
            .arg(ms(keep))
            .arg(keys.run_prefix())
            .arg(ms(self.history_ttl))
            .arg(self.history_keep)
            .arg(run.id())
            .arg(run.json())
            .arg(lost.json())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match result {
            1 => Finish::Done,
            -1 => Finish::Stale,
            _ => Finish::DoneAfterLapse,
        })
    }

    /// Adds or replaces a record in the job's history.
    pub async fn record(&self, run: &RunRecord) -> RedisResult<()> {
        let keys = self.keys(&run.job);
        let id = run.id();
        let json = serde_json::to_string(run).unwrap_or_default();
        let _: i64 = self
            .record
            .key(keys.runs())
            .key(format!("{}{id}", keys.run_prefix()))
            .arg(run.tick_ms)
            .arg(&id)
            .arg(json)
            .arg(ms(self.history_ttl))
            .arg(self.history_keep)
            .arg(keys.run_prefix())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The newest `limit` records of `job`, newest first. A run still marked
    /// running (or queued) whose lease is gone is reported as abandoned: its
    /// replica died or lost the lease without recording an end.
    pub async fn runs(&self, job: &str, limit: usize) -> RedisResult<Vec<RunRecord>> {
        let keys = self.keys(job);
        let mut conn = self.conn.clone();
        let ids: Vec<String> =
            redis::cmd("ZREVRANGE").arg(keys.runs()).arg(0).arg(limit.max(1) - 1).query_async(&mut conn).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let prefix = keys.run_prefix();
        // Records and leases in one atomic read: a run that ends in between
        // must not look abandoned.
        let (raw, running, queued): (Vec<Option<String>>, Option<String>, Option<String>) = redis::pipe()
            .atomic()
            .cmd("MGET")
            .arg(ids.iter().map(|id| format!("{prefix}{id}")).collect::<Vec<_>>())
            .get(keys.running())
            .get(keys.queued())
            .query_async(&mut conn)
            .await?;
        Ok(raw
            .into_iter()
            .flatten()
            .filter_map(|json| serde_json::from_str::<RunRecord>(&json).ok())
            .map(|mut run| {
                let alive = match run.outcome.as_str() {
                    "running" => running.as_deref() == Some(&format!("{}:{}", run.owner, run.token)),
                    "queued" => {
                        let tick = Tick { ms: run.tick_ms, manual: run.manual };
                        queued.as_deref() == Some(&queued_value(&run.owner, &tick))
                    }
                    _ => true,
                };
                if !alive {
                    run.reason = format!("{} on {} without an end; its lease lapsed", run.outcome, run.owner);
                    run.outcome = "abandoned".into();
                }
                run
            })
            .collect())
    }

    /// Every record of `job` (tests and audits), oldest first.
    pub async fn all_runs(&self, job: &str) -> RedisResult<Vec<RunRecord>> {
        let mut runs = self.runs(job, usize::MAX / 2).await?;
        runs.reverse();
        Ok(runs)
    }

    /// Pause state and last success, as stored.
    pub async fn job_state(&self, job: &str) -> RedisResult<JobState> {
        let (paused, reason, success): (Option<String>, Option<String>, Option<i64>) = redis::cmd("HMGET")
            .arg(self.keys(job).state())
            .arg("paused")
            .arg("paused_reason")
            .arg("last_success_ms")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(JobState {
            paused: paused.as_deref() == Some("1"),
            paused_reason: reason.unwrap_or_default(),
            last_success_ms: success.unwrap_or(0),
        })
    }

    /// Pauses or resumes `job` on every replica.
    pub async fn set_paused(&self, job: &str, paused: bool, reason: &str) -> RedisResult<()> {
        let _: () = redis::cmd("HSET")
            .arg(self.keys(job).state())
            .arg("paused")
            .arg(if paused { "1" } else { "0" })
            .arg("paused_reason")
            .arg(if paused { reason } else { "" })
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}
