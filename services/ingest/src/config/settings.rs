//! The ingest's settings as a table (`sluice_service::settings`): name, type, default, what
//! it sets and why the default is what it is. [`super::IngestConfig::read`] reads them by these
//! names and defaults; docs/workload.md's table is rendered from [`SETTINGS`].

use sluice_service::settings::{Default, Setting};

/// Every ingest setting, in the docs' order (the Kafka client's own are
/// `sluice_service::env::KAFKA_SETTINGS`).
pub const SETTINGS: &[Setting] = &[
    KAFKA_BROKERS,
    REDIS_URL,
    CHAIN_URL,
    TOPIC,
    REDIS_PREFIX,
    INSTANCE_ID,
    LEASE_TTL_MS,
    MAX_IN_FLIGHT,
    CURSOR_INTERVAL_MS,
    TRANSACTIONS,
    TRANSACTIONAL_ID,
    TRANSACTION_INTERVAL_MS,
    TRANSACTION_TIMEOUT_MS,
    START,
    LOST_CURSOR,
    RECONNECT_MIN_MS,
    RECONNECT_MAX_MS,
    SHUTDOWN_DEADLINE_MS,
    ADMIN_LISTEN,
];

pub const KAFKA_BROKERS: Setting =
    Setting::new("KAFKA_BROKERS", "host:port list", Default::Required, "the Kafka bootstrap servers", "");

pub const REDIS_URL: Setting = Setting::new(
    "REDIS_URL",
    "`redis[s]://[user:password@]host:port[/db]`",
    Default::Required,
    "the Redis holding the cursor and the active instance's lease",
    "",
);

pub const CHAIN_URL: Setting = Setting::new(
    "CHAIN_URL",
    "URL",
    Default::Value("http://127.0.0.1:50051"),
    "the chain node's gRPC endpoint (`Subscribe`)",
    "chainsim's local address; the chart sets the in-cluster one",
);

pub const TOPIC: Setting = Setting::new(
    "TOPIC",
    "topic",
    Default::Value("chain.transactions"),
    "where the chain's records go, one per pool a transaction touches",
    "the topic the processors consume by default",
);

pub const REDIS_PREFIX: Setting = Setting::new(
    "REDIS_PREFIX",
    "text",
    Default::Value("sluice:"),
    "the prefix of the cursor's and the lease's keys",
    "the processors' and the scheduler's default too, so one Redis serves them all",
);

pub const INSTANCE_ID: Setting = Setting::new(
    "INSTANCE_ID",
    "text",
    Default::Derived("the pod's hostname, else `ingest-<pid>`"),
    "this replica's name in the lease",
    "unique per replica without configuration: the pod name is",
);

pub const LEASE_TTL_MS: Setting = Setting::new(
    "LEASE_TTL_MS",
    "milliseconds",
    Default::Value("5000"),
    "the active instance's lease; a standby takes over within about this long after the active one dies",
    "renewed every third of it with each call bounded, so a lease survives a slow Redis call, and a crash stops the stream for 5 s at most (at least 1000)",
);

pub const MAX_IN_FLIGHT: Setting = Setting::new(
    "MAX_IN_FLIGHT",
    "records",
    Default::Value("10000"),
    "records sent and not yet acknowledged before the oldest is awaited",
    "a choice, not swept: about 0.15 s at the saturated rate of 64,000–72,000 records/s (results/README.md), so the producer never waits on one delivery",
);

pub const CURSOR_INTERVAL_MS: Setting = Setting::new(
    "CURSOR_INTERVAL_MS",
    "milliseconds",
    Default::Value("200"),
    "without transactions: how often the cursor is written, when it moved",
    "a choice: what a crash re-sends at most (the processors' effects are idempotent), at five Redis writes a second",
);

pub const TRANSACTIONS: Setting = Setting::new(
    "TRANSACTIONS",
    "true or false",
    Default::Value("true"),
    "send in Kafka transactions, which fence a paused ex-active instance at the broker",
    "measured: the fence left 0 duplicates where idempotent sends left 60 (ingest tests), for 0.89 of the throughput at saturation, far above the chain's real rate (results/README.md)",
);

pub const TRANSACTIONAL_ID: Setting = Setting::new(
    "TRANSACTIONAL_ID",
    "text",
    Default::Derived("`sluice-ingest.<topic>`"),
    "with transactions: the `transactional.id` the active/standby pair shares",
    "one per topic, shared by the pair, so the instance that becomes active fences the other",
);

pub const TRANSACTION_INTERVAL_MS: Setting = Setting::new(
    "TRANSACTION_INTERVAL_MS",
    "milliseconds",
    Default::Value("100"),
    "with transactions: how often the open transaction commits (and the cursor is written)",
    "measured: 500 ms bought no throughput (0.910 against 0.892 of idempotent, results/README.md), and readers see records at most 0.1 s later",
);

pub const TRANSACTION_TIMEOUT_MS: Setting = Setting::new(
    "TRANSACTION_TIMEOUT_MS",
    "milliseconds",
    Default::Value("60000"),
    "with transactions: the bound of each transaction call and of a record's delivery, and how long the broker keeps a dead producer's transaction",
    "Kafka's default; a standby that takes over aborts the old transaction at once, so it only matters with no standby (at least 1000 and above the interval)",
);

pub const START: Setting = Setting::new(
    "START",
    "`genesis`, `head` or a slot",
    Default::Value("genesis"),
    "where the stream starts when no cursor is stored",
    "the whole chain: nothing before the first deployment is skipped unless asked",
);

pub const LOST_CURSOR: Setting = Setting::new(
    "LOST_CURSOR",
    "`stop` or `resend`",
    Default::Value("stop"),
    "when Redis holds no cursor but the topic holds records: stop, or read the chain again from `START` sending only what the topic lacks",
    "re-reading the chain is an operator's call; starting at the head would leave a gap",
);

pub const RECONNECT_MIN_MS: Setting = Setting::new(
    "RECONNECT_MIN_MS",
    "milliseconds",
    Default::Value("100"),
    "the first backoff after a dropped chain stream",
    "a choice: a node restart is retried at once, not hammered",
);

pub const RECONNECT_MAX_MS: Setting = Setting::new(
    "RECONNECT_MAX_MS",
    "milliseconds",
    Default::Value("5000"),
    "the longest backoff; also how often a lost cursor is checked again",
    "a choice: an outage costs at most 5 s more once the node is back",
);

pub const SHUTDOWN_DEADLINE_MS: Setting = Setting::new(
    "SHUTDOWN_DEADLINE_MS",
    "milliseconds",
    Default::Value("20000"),
    "on SIGTERM: flush and record the cursor within this",
    "a choice: room for the last flush and commit behind a slow broker; the chart gives the pod this + 15 s of grace",
);

pub const ADMIN_LISTEN: Setting = Setting::new(
    "ADMIN_LISTEN",
    "host:port",
    Default::Value("0.0.0.0:9094"),
    "`/live`, `/ready`, `/metrics`",
    "the port the chart's probes and scrape use",
);
