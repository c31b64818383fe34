//! The scheduler's settings as tables (`sluice_service::settings`): name, type, default, what
//! each sets and why the default is what it is. [`super::SchedulerConfig::read`] and
//! [`super::JobSettings::read`] read by these names and defaults; docs/scheduler.md's tables
//! are rendered from [`SETTINGS`] and [`JOB_SETTINGS`].

use sluice_service::settings::{Default, Setting};

/// The service's settings (`SLUICE_SCHEDULER_…`), in the docs' order.
pub const SETTINGS: &[Setting] = &[
    REDIS_URL,
    REDIS_PREFIX,
    CHAIN_URL,
    CHAIN_TIMEOUT_MS,
    INSTANCE_ID,
    LEASE_TTL_MS,
    CANCEL_GRACE_MS,
    SHUTDOWN_DEADLINE_MS,
    HISTORY_KEEP,
    HISTORY_TTL_MS,
    RECONCILE_CONCURRENCY,
    RECONCILE_REPAIR,
    ADMIN_LISTEN,
    GRPC_LISTEN,
    ADMIN_TOKEN,
    ADMIN_INSECURE,
];

pub const REDIS_URL: Setting = Setting::new(
    "REDIS_URL",
    "`redis[s]://[user:password@]host:port[/db]`",
    Default::Required,
    "the Redis holding claims, leases, the run history and pauses",
    "",
);

pub const REDIS_PREFIX: Setting = Setting::new(
    "REDIS_PREFIX",
    "text",
    Default::Value("sluice:"),
    "the prefix of every Redis key",
    "the processors' and the ingest's default too: the jobs read and repair the pool state the processors write",
);

pub const CHAIN_URL: Setting = Setting::new(
    "CHAIN_URL",
    "URL",
    Default::Value("http://127.0.0.1:50051"),
    "the chain node's gRPC endpoint, for the token and reconciliation jobs",
    "chainsim's local address; the chart sets the in-cluster one",
);

pub const CHAIN_TIMEOUT_MS: Setting = Setting::new(
    "CHAIN_TIMEOUT_MS",
    "milliseconds",
    Default::Value("10000"),
    "the deadline of each chain request",
    "a choice: well inside the shortest job timeout that calls the chain (token-refresh, 30 s)",
);

pub const INSTANCE_ID: Setting = Setting::new(
    "INSTANCE_ID",
    "name without spaces",
    Default::Derived("the pod's hostname, else `scheduler-<pid>`"),
    "this replica's name in claims and the run history",
    "unique per replica without configuration: the pod name is",
);

pub const LEASE_TTL_MS: Setting = Setting::new(
    "LEASE_TTL_MS",
    "milliseconds",
    Default::Value("5000"),
    "a run's lease, renewed every third of it: a replica that dies holds its job this long at most",
    "renewals every 1.7 s with each call bounded survive a slow Redis call, and a dead replica's job is taken over within 5 s (at least 300)",
);

pub const CANCEL_GRACE_MS: Setting = Setting::new(
    "CANCEL_GRACE_MS",
    "milliseconds",
    Default::Value("2000"),
    "after a run is cancelled (lease lost, shutdown), how long it may take to stop before it is dropped",
    "a choice: a job's effects are fenced and idempotent per tick, so a dropped run costs nothing but its work (below the shutdown deadline)",
);

pub const SHUTDOWN_DEADLINE_MS: Setting = Setting::new(
    "SHUTDOWN_DEADLINE_MS",
    "milliseconds",
    Default::Value("20000"),
    "on SIGTERM, running jobs may finish within this",
    "a choice: room for the short jobs to finish; a longer run is cancelled, its effects fenced and idempotent per tick; the chart gives the pod this + 15 s of grace",
);

pub const HISTORY_KEEP: Setting = Setting::new(
    "HISTORY_KEEP",
    "runs",
    Default::Value("1000"),
    "run records kept per job",
    "a choice: about 4 h of the 15-second heartbeat, 17 h of the minutely token refresh, 3.5 days of the 5-minute reconciliation",
);

pub const HISTORY_TTL_MS: Setting = Setting::new(
    "HISTORY_TTL_MS",
    "milliseconds",
    Default::Value("604800000"),
    "how long run records are kept (a tick's effect ledger at least this long and twice the tick's claim)",
    "a week: a weekend's runs are still there on Monday",
);

pub const RECONCILE_CONCURRENCY: Setting = Setting::new(
    "RECONCILE_CONCURRENCY",
    "pools",
    Default::Value("8"),
    "pools the reconciliation checks at once",
    "a choice: the chain node and Redis each see 8 requests at a time, not the whole pool list",
);

pub const RECONCILE_REPAIR: Setting = Setting::new(
    "RECONCILE_REPAIR",
    "true or false",
    Default::Value("true"),
    "repair drift found (false: record it only)",
    "drift is a bug's trace; repaired, the state is the chain's again, and the run records what it found either way",
);

pub const ADMIN_LISTEN: Setting = Setting::new(
    "ADMIN_LISTEN",
    "host:port",
    Default::Value("0.0.0.0:9091"),
    "`/live`, `/ready`, `/metrics`",
    "the port the chart's probes and scrape use",
);

pub const GRPC_LISTEN: Setting = Setting::new(
    "GRPC_LISTEN",
    "host:port",
    Default::Value("0.0.0.0:50061"),
    "the admin gRPC API: list jobs, trigger, pause, resume, history",
    "the port the chart's Service exposes",
);

pub const ADMIN_TOKEN: Setting = Setting::new(
    "ADMIN_TOKEN",
    "text, 16 characters or more",
    Default::Required,
    "the admin API's bearer token; never logged",
    "closed by default: without it the scheduler does not start, unless `ADMIN_INSECURE=true`",
);

pub const ADMIN_INSECURE: Setting = Setting::new(
    "ADMIN_INSECURE",
    "true or false",
    Default::Value("false"),
    "serve the admin API without a token (a trusted network only; not with `ADMIN_TOKEN`)",
    "an open trigger and pause API must be asked for",
);

/// Each job's settings (`SLUICE_SCHEDULER_JOB_<NAME>_…`), in the docs' order.
pub const JOB_SETTINGS: &[Setting] = &[
    JOB_SCHEDULE,
    JOB_ENABLED,
    JOB_PAUSED,
    JOB_OVERLAP,
    JOB_MISFIRE,
    JOB_CATCH_UP_WINDOW_MS,
    JOB_TIMEOUT_MS,
    JOB_JITTER_MS,
];

pub const JOB_SCHEDULE: Setting = Setting::new(
    "SCHEDULE",
    "cron with seconds, UTC",
    Default::Derived("the job's (`0 * * * * *`, `0 */5 * * * *`, `*/15 * * * * *`)"),
    "when the job's ticks come",
    "",
);

pub const JOB_ENABLED: Setting = Setting::new(
    "ENABLED",
    "true or false",
    Default::Derived("the job's (`true`)"),
    "a disabled job claims nothing and records nothing",
    "",
);

pub const JOB_PAUSED: Setting = Setting::new(
    "PAUSED",
    "true or false",
    Default::Value("false"),
    "a paused job claims its ticks and records them as skipped",
    "a pause is an operator's act, usually through the API",
);

pub const JOB_OVERLAP: Setting = Setting::new(
    "OVERLAP",
    "`skip` or `buffer-one`",
    Default::Derived("the job's (`skip`)"),
    "`skip`: a tick due while the previous run goes on (on any replica) is recorded as skipped; `buffer-one`: it waits and runs right after, further ones are skipped",
    "",
);

pub const JOB_MISFIRE: Setting = Setting::new(
    "MISFIRE",
    "`run-latest` or `skip`",
    Default::Value("run-latest"),
    "`run-latest`: after downtime, the latest missed tick runs if within the catch-up window, the ones before are recorded as missed; `skip`: a tick not started within 1 s is recorded as missed",
    "what Kubernetes' CronJob does within its startingDeadlineSeconds: catch up once, not once per missed tick",
);

pub const JOB_CATCH_UP_WINDOW_MS: Setting = Setting::new(
    "CATCH_UP_WINDOW_MS",
    "milliseconds",
    Default::Derived("the schedule's period"),
    "how late a tick may still start under `run-latest`; the start window (this, or 1 s under `skip`) is also how long a dead run's tick may be taken over",
    "a tick later than its period would run beside the next one",
);

pub const JOB_TIMEOUT_MS: Setting = Setting::new(
    "TIMEOUT_MS",
    "milliseconds",
    Default::Derived("the job's (30 s, 240 s, 5 s)"),
    "a longer run is cancelled and recorded as `timed_out`",
    "",
);

pub const JOB_JITTER_MS: Setting = Setting::new(
    "JITTER_MS",
    "milliseconds",
    Default::Value("0"),
    "each replica waits up to this long after a tick before claiming (below the period)",
    "the jobs are few: no herd to spread",
);
