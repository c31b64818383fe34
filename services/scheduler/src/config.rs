//! The scheduler's configuration, from `SLUICE_SCHEDULER_…` variables.
//!
//! The service's settings and each job's (`SLUICE_SCHEDULER_JOB_<NAME>_…`, the job's name
//! upper-cased, `-` as `_`) are tables in [`settings`], each default with its reason; a job
//! declares its own schedule, timeout and overlap. Every bad or unknown variable is reported
//! by name at start.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use sluice_coord::endpoint::RedisEndpoint;
use sluice_proto::scheduler::v1 as api;
use sluice_service::env::{EnvReader, Unexpected};
use sluice_service::settings::Setting;

pub mod settings;

use self::settings as s;

use crate::schedule::Schedule;

/// What happens to a tick that comes due while the job still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// Recorded as skipped (reason `overlap`).
    Skip,
    /// Waits for the running tick, then runs; while one waits, more are skipped.
    BufferOne,
}

impl FromStr for Overlap {
    type Err = Unexpected;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "skip" => Ok(Self::Skip),
            "buffer-one" => Ok(Self::BufferOne),
            other => Err(Unexpected::new("skip or buffer-one", other)),
        }
    }
}

impl Overlap {
    pub fn to_proto(self) -> api::OverlapPolicy {
        match self {
            Self::Skip => api::OverlapPolicy::Skip,
            Self::BufferOne => api::OverlapPolicy::BufferOne,
        }
    }
}

/// What happens to a tick nobody started on time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfire {
    /// The latest due tick still runs if it is within the catch-up window;
    /// older unrun ticks are recorded as missed.
    RunLatest,
    /// A tick not started within [`ON_TIME`] of its time is recorded as
    /// missed and not run.
    Skip,
}

impl FromStr for Misfire {
    type Err = Unexpected;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "run-latest" => Ok(Self::RunLatest),
            "skip" => Ok(Self::Skip),
            other => Err(Unexpected::new("run-latest or skip", other)),
        }
    }
}

impl Misfire {
    pub fn to_proto(self) -> api::MisfirePolicy {
        match self {
            Self::RunLatest => api::MisfirePolicy::RunLatest,
            Self::Skip => api::MisfirePolicy::Skip,
        }
    }
}

/// A tick started this long after its time (plus its jitter) is on time.
pub const ON_TIME: Duration = Duration::from_secs(1);

/// A job's defaults, declared by the job.
#[derive(Debug, Clone)]
pub struct JobDefaults {
    pub schedule: &'static str,
    pub enabled: bool,
    pub timeout: Duration,
    pub overlap: Overlap,
}

/// One job's settings.
#[derive(Debug, Clone)]
pub struct JobSettings {
    pub enabled: bool,
    pub schedule: Schedule,
    pub overlap: Overlap,
    pub misfire: Misfire,
    /// How late a tick may still start under `run-latest`.
    pub catch_up_window: Duration,
    /// A run longer than this is stopped and recorded as timed out.
    pub timeout: Duration,
    /// Each replica waits up to this long after a tick before claiming it,
    /// to spread load when many jobs share a second.
    pub jitter: Duration,
    /// Paused by configuration (claims nothing; ticks are recorded as skipped).
    pub paused: bool,
}

impl JobSettings {
    /// Reads `JOB_<NAME>_…` with `defaults`. `None` if the schedule is bad
    /// (the problem is recorded in `env`).
    pub fn read(env: &mut EnvReader, job: &str, defaults: &JobDefaults) -> Option<Self> {
        let var = format!("JOB_{}_", job.to_uppercase().replace('-', "_"));
        let n = |s: &Setting| format!("{var}{}", s.name);
        let expression: String = env.or(&n(&s::JOB_SCHEDULE), defaults.schedule.to_string());
        let schedule = match Schedule::parse(&expression) {
            Ok(s) => Some(s),
            Err(e) => {
                let name = env.name(&n(&s::JOB_SCHEDULE));
                env.problem(format!("{name}: {e}"));
                None
            }
        };
        let period = schedule.as_ref().map_or(Duration::from_secs(1), Schedule::period);
        let settings = Self {
            enabled: env.or(&n(&s::JOB_ENABLED), defaults.enabled),
            schedule: schedule?,
            overlap: env.or(&n(&s::JOB_OVERLAP), defaults.overlap),
            misfire: env.or(&n(&s::JOB_MISFIRE), s::JOB_MISFIRE.value()),
            catch_up_window: env.millis(&n(&s::JOB_CATCH_UP_WINDOW_MS), period),
            timeout: env.millis(&n(&s::JOB_TIMEOUT_MS), defaults.timeout),
            jitter: Duration::from_millis(env.or(&n(&s::JOB_JITTER_MS), s::JOB_JITTER_MS.value())),
            paused: env.or(&n(&s::JOB_PAUSED), s::JOB_PAUSED.value()),
        };
        if settings.timeout.is_zero() {
            let name = env.name(&n(&s::JOB_TIMEOUT_MS));
            env.problem(format!("{name} must be above 0"));
        }
        if settings.jitter >= period {
            let name = env.name(&n(&s::JOB_JITTER_MS));
            env.problem(format!("{name} must be below the schedule's period ({} ms)", period.as_millis()));
        }
        Some(settings)
    }

    /// How long a tick's claim is kept after its run: past the period and
    /// the catch-up window, so a replica whose ticker or clock is out of
    /// phase cannot claim it again. (Ticks are also claimed in order, which
    /// keeps an old tick from being claimed again after the key expires.)
    pub fn claim_keep(&self) -> Duration {
        self.schedule.period() + self.catch_up_window.max(ON_TIME)
    }

    /// How late a tick may still start, under the misfire policy.
    pub fn start_window(&self) -> Duration {
        match self.misfire {
            Misfire::RunLatest => self.catch_up_window.max(ON_TIME),
            Misfire::Skip => ON_TIME,
        }
    }
}

/// Everything the scheduler needs to run.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// The URL, ACL user and TLS files.
    pub redis: RedisEndpoint,
    /// Prefix of every Redis key (shared with the processors' keys).
    pub redis_prefix: String,
    /// The chain node (gRPC), for the token and reconciliation jobs.
    pub chain_url: String,
    /// Deadline of each chain request.
    pub chain_timeout: Duration,
    /// This replica's name in claims and the run history.
    pub instance_id: String,
    pub admin_listen: SocketAddr,
    pub grpc_listen: SocketAddr,
    /// Bearer token the admin gRPC API (trigger, pause) requires; `None`
    /// only when `ADMIN_INSECURE` asked for an open API. Never logged.
    pub admin_token: Option<String>,
    /// A run's lease; renewed every third of it. A replica that dies holds
    /// its job this long at most.
    pub lease_ttl: Duration,
    /// After a run is cancelled (lease lost, shutdown), how long it may take
    /// to stop before it is dropped.
    pub cancel_grace: Duration,
    /// On SIGTERM: running jobs may finish within this; set below the pod's
    /// terminationGracePeriodSeconds.
    pub shutdown_deadline: Duration,
    /// Run records kept per job, and for how long.
    pub history_keep: usize,
    pub history_ttl: Duration,
    /// Pools the reconciliation checks at once.
    pub reconcile_concurrency: usize,
    /// Repair drift found (false: record it only).
    pub reconcile_repair: bool,
}

/// Shortest admin token accepted: a guessable token is no token.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;

/// `ADMIN_TOKEN`, required: the admin API is closed by default. Only
/// `ADMIN_INSECURE=true` (and no token) serves it open.
fn admin_token(env: &mut EnvReader) -> Option<String> {
    let token: Option<String> = env.optional(s::ADMIN_TOKEN.name);
    let insecure: bool = env.setting(&s::ADMIN_INSECURE);
    let (name, open) = (env.name(s::ADMIN_TOKEN.name), env.name(s::ADMIN_INSECURE.name));
    match (&token, insecure) {
        (None, false) => env.problem(format!(
            "{name} is required: the admin gRPC API (trigger, pause) does not start without a bearer token \
             (set {open}=true to serve it without one, on a trusted network only)"
        )),
        (Some(t), false) if t.len() < MIN_ADMIN_TOKEN_LEN => {
            env.problem(format!("{name} must be at least {MIN_ADMIN_TOKEN_LEN} characters"));
        }
        (Some(_), true) => env.problem(format!("set {name} or {open}=true, not both")),
        _ => {}
    }
    token
}

impl SchedulerConfig {
    /// Reads the service's variables ([`settings::SETTINGS`]); problems are collected in
    /// `env`. `None` when `REDIS_URL` is missing (a missing token is a problem, not a `None`:
    /// `ADMIN_INSECURE` may stand for it).
    pub fn read(env: &mut EnvReader) -> Option<Self> {
        let redis_url: Option<String> = env.required_setting(&s::REDIS_URL);
        let config = Self {
            redis: RedisEndpoint::read(env, redis_url.as_deref()),
            redis_prefix: env.setting(&s::REDIS_PREFIX),
            chain_url: env.setting(&s::CHAIN_URL),
            chain_timeout: env.setting_ms(&s::CHAIN_TIMEOUT_MS),
            instance_id: env.setting_or(&s::INSTANCE_ID, sluice_service::env::default_instance_id("scheduler")),
            admin_listen: env.setting(&s::ADMIN_LISTEN),
            grpc_listen: env.setting(&s::GRPC_LISTEN),
            admin_token: admin_token(env),
            lease_ttl: env.setting_ms(&s::LEASE_TTL_MS),
            cancel_grace: env.setting_ms(&s::CANCEL_GRACE_MS),
            shutdown_deadline: env.setting_ms(&s::SHUTDOWN_DEADLINE_MS),
            history_keep: env.setting(&s::HISTORY_KEEP),
            history_ttl: env.setting_ms(&s::HISTORY_TTL_MS),
            reconcile_concurrency: env.setting(&s::RECONCILE_CONCURRENCY),
            reconcile_repair: env.setting(&s::RECONCILE_REPAIR),
        };
        config.check(env);
        redis_url.map(|_| config)
    }

    /// The rules between settings.
    fn check(&self, env: &mut EnvReader) {
        let config = self;
        if config.lease_ttl < Duration::from_millis(300) {
            let name = env.name(s::LEASE_TTL_MS.name);
            env.problem(format!("{name} must be at least 300 (it is renewed every third of it)"));
        }
        if config.shutdown_deadline <= config.cancel_grace {
            let (a, b) = (env.name(s::SHUTDOWN_DEADLINE_MS.name), env.name(s::CANCEL_GRACE_MS.name));
            env.problem(format!("{a} must be above {b}"));
        }
        for (name, value) in
            [(s::HISTORY_KEEP.name, config.history_keep), (s::RECONCILE_CONCURRENCY.name, config.reconcile_concurrency)]
        {
            if value == 0 {
                let name = env.name(name);
                env.problem(format!("{name} must be above 0"));
            }
        }
        if config.instance_id.contains(char::is_whitespace) || config.instance_id.is_empty() {
            let name = env.name(s::INSTANCE_ID.name);
            env.problem(format!("{name} must be a non-empty name without spaces"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvReader {
        EnvReader::from_vars("S_", pairs.iter().map(|(k, v)| (format!("S_{k}"), v.to_string())))
    }

    const DEFAULTS: JobDefaults = JobDefaults {
        schedule: "*/30 * * * * *",
        enabled: true,
        timeout: Duration::from_secs(60),
        overlap: Overlap::Skip,
    };

    #[test]
    fn job_settings_default_and_override() {
        let mut e = env(&[
            ("JOB_POOL_RECONCILE_SCHEDULE", "* * * * * *"),
            ("JOB_POOL_RECONCILE_OVERLAP", "buffer-one"),
            ("JOB_POOL_RECONCILE_MISFIRE", "skip"),
        ]);
        let s = JobSettings::read(&mut e, "pool-reconcile", &DEFAULTS).expect("valid");
        assert_eq!((s.overlap, s.misfire), (Overlap::BufferOne, Misfire::Skip));
        assert_eq!(s.catch_up_window, Duration::from_secs(1), "defaults to the period");
        assert_eq!(s.start_window(), ON_TIME);
        let d = JobSettings::read(&mut e, "token-refresh", &DEFAULTS).expect("valid");
        assert_eq!(
            (d.schedule.expression(), d.timeout, d.misfire),
            ("*/30 * * * * *", DEFAULTS.timeout, Misfire::RunLatest)
        );
        assert_eq!(d.claim_keep(), Duration::from_secs(60));
        assert!(e.finish().is_ok());
    }

    #[test]
    fn the_admin_api_needs_a_token_unless_asked_to_be_open() {
        let problems = |pairs: &[(&str, &str)]| {
            let mut e = env(&[&[("REDIS_URL", "redis://x")], pairs].concat());
            let config = SchedulerConfig::read(&mut e).expect("REDIS_URL");
            (config.admin_token, e.finish().err().map(|e| e.to_string()))
        };
        let (token, none) = problems(&[]);
        let text = none.expect("no token is a problem");
        assert!(token.is_none() && text.contains("S_ADMIN_TOKEN is required") && text.contains("S_ADMIN_INSECURE"));
        let (_, short) = problems(&[("ADMIN_TOKEN", "short")]);
        assert!(short.expect("a short token is a problem").contains("at least 16"));
        let (_, both) = problems(&[("ADMIN_TOKEN", "0123456789abcdef"), ("ADMIN_INSECURE", "true")]);
        assert!(both.expect("both is a problem").contains("not both"));
        assert_eq!(problems(&[("ADMIN_TOKEN", "0123456789abcdef")]), (Some("0123456789abcdef".into()), None));
        assert_eq!(problems(&[("ADMIN_INSECURE", "true")]), (None, None), "open, because asked");
    }

    #[test]
    fn bad_job_settings_name_their_variable() {
        let mut e = env(&[
            ("JOB_HEARTBEAT_SCHEDULE", "every minute"),
            ("JOB_TOKEN_REFRESH_OVERLAP", "queue"),
            ("JOB_TOKEN_REFRESH_JITTER_MS", "30000"),
            ("JOB_NOPE_SCHEDULE", "* * * * * *"),
            ("REDIS_URL", "redis://x"),
        ]);
        assert!(JobSettings::read(&mut e, "heartbeat", &DEFAULTS).is_none());
        let _ = JobSettings::read(&mut e, "token-refresh", &DEFAULTS);
        let _ = SchedulerConfig::read(&mut e);
        let text = e.finish().expect_err("problems").to_string();
        for name in [
            "S_JOB_HEARTBEAT_SCHEDULE",
            "S_JOB_TOKEN_REFRESH_OVERLAP",
            "S_JOB_TOKEN_REFRESH_JITTER_MS",
            "S_JOB_NOPE_SCHEDULE",
        ] {
            assert!(text.contains(name), "{name} missing from: {text}");
        }
    }
}
