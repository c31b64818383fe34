//! The runtime's settings as a table (`sluice_service::settings`): name, type, default, what
//! it sets and why the default is what it is. [`super::RuntimeConfig::read`] reads them by
//! these names and defaults; docs/runtime.md's table is rendered from [`SETTINGS`].

use sluice_service::settings::{Default, Setting};

/// Every runtime setting, in the docs' order (the Kafka client's own are
/// `sluice_service::env::KAFKA_SETTINGS`).
pub const SETTINGS: &[Setting] = &[
    KAFKA_BROKERS,
    GROUP_ID,
    INPUT_TOPIC,
    DLQ_TOPIC,
    GROUP_PROTOCOL,
    INSTANCE_ID,
    SESSION_TIMEOUT_MS,
    MAX_POLL_INTERVAL_MS,
    MAX_IN_FLIGHT_PER_PARTITION,
    MAX_BYTES_PER_PARTITION,
    RESUME_FRACTION,
    CONCURRENCY,
    RETRY_INITIAL_MS,
    RETRY_MAX_MS,
    RETRY_ATTEMPTS_BEFORE_STALL,
    DRAIN_DEADLINE_MS,
    SHUTDOWN_DEADLINE_MS,
    COMMIT_INTERVAL_MS,
    ADMIN_LISTEN,
    EXACTLY_ONCE,
    TRANSACTION_INTERVAL_MS,
    TRANSACTION_TIMEOUT_MS,
    TRANSACTIONAL_ID,
];

pub const KAFKA_BROKERS: Setting =
    Setting::new("KAFKA_BROKERS", "host:port list", Default::Required, "the Kafka bootstrap servers", "");

pub const GROUP_ID: Setting = Setting::new(
    "GROUP_ID",
    "text",
    Default::Derived("the workload's (the processor's: `sluice-processor`)"),
    "the consumer group; every replica of one workload shares it",
    "only the workload knows what it consumes",
);

pub const INPUT_TOPIC: Setting = Setting::new(
    "INPUT_TOPIC",
    "topic",
    Default::Derived("the workload's (the processor's: `chain.transactions`)"),
    "the topic consumed",
    "only the workload knows what it consumes",
);

pub const DLQ_TOPIC: Setting = Setting::new(
    "DLQ_TOPIC",
    "topic",
    Default::Derived("the workload's (the processor's: `chain.transactions.dlq`)"),
    "where invalid records go, with the reason in their headers",
    "only the workload knows what it consumes",
);

pub const GROUP_PROTOCOL: Setting = Setting::new(
    "GROUP_PROTOCOL",
    "`classic` or `consumer`",
    Default::Value("classic"),
    "`classic`: cooperative-sticky assignment; `consumer`: KIP-848",
    "classic runs on brokers before 4.0 too (KIP-848 is GA from Kafka 4.0), and moved a killed pod's partitions sooner on pods: 13 s against 18 s (results/README.md)",
);

pub const INSTANCE_ID: Setting = Setting::new(
    "INSTANCE_ID",
    "text",
    Default::Unset,
    "static membership (`group.instance.id`): a restart within the session timeout keeps the partitions",
    "off: a static member's close sends no LeaveGroup in librdkafka, so every scale-down would idle the removed pod's partitions for the whole session timeout",
);

pub const SESSION_TIMEOUT_MS: Setting = Setting::new(
    "SESSION_TIMEOUT_MS",
    "milliseconds",
    Default::Value("15000"),
    "classic protocol: how long a member that stopped heartbeating (a crash) keeps its partitions",
    "not Kafka's 45 s: a killed pod's partitions waited 42–45 s at 45 s and 13 s at 15 s, measured on pods (results/README.md); heartbeats come every 3 s from librdkafka's own thread",
);

pub const MAX_POLL_INTERVAL_MS: Setting = Setting::new(
    "MAX_POLL_INTERVAL_MS",
    "milliseconds",
    Default::Value("300000"),
    "a member that does not poll this long leaves the group",
    "librdkafka's default; the consumer thread polls continuously, so only a hang reaches it",
);

pub const MAX_IN_FLIGHT_PER_PARTITION: Setting = Setting::new(
    "MAX_IN_FLIGHT_PER_PARTITION",
    "records",
    Default::Value("10000"),
    "a partition pauses with this many records received and not complete",
    "above the consumer thread's 8,192-record intake bound, which comes first: a pause throws librdkafka's prefetch away",
);

pub const MAX_BYTES_PER_PARTITION: Setting = Setting::new(
    "MAX_BYTES_PER_PARTITION",
    "bytes",
    Default::Value("16777216"),
    "a partition pauses with this many payload bytes received and not complete",
    "16 MiB, what librdkafka prefetches (`queued.max.messages.kbytes` 16,384)",
);

pub const RESUME_FRACTION: Setting = Setting::new(
    "RESUME_FRACTION",
    "fraction in [0, 1)",
    Default::Value("0.5"),
    "a paused partition resumes once both are below this share of the budget",
    "hysteresis: a partition at its limit does not pause and resume on every record",
);

pub const CONCURRENCY: Setting = Setting::new(
    "CONCURRENCY",
    "units",
    Default::Value("256"),
    "units of work (a record, or a batch) in handlers at once; one waiting only for Kafka acknowledgements holds none",
    "a choice, not swept: far above the partitions a pod owns, so records waiting on a slow key never hold back the rest",
);

pub const RETRY_INITIAL_MS: Setting = Setting::new(
    "RETRY_INITIAL_MS",
    "milliseconds",
    Default::Value("50"),
    "the first backoff after a transient failure (doubling, with jitter)",
    "a choice, not measured: a few Redis round trips, so a blip costs little latency",
);

pub const RETRY_MAX_MS: Setting = Setting::new(
    "RETRY_MAX_MS",
    "milliseconds",
    Default::Value("5000"),
    "the longest backoff",
    "a choice: an outage is retried every few seconds, not hammered",
);

pub const RETRY_ATTEMPTS_BEFORE_STALL: Setting = Setting::new(
    "RETRY_ATTEMPTS_BEFORE_STALL",
    "attempts",
    Default::Value("10"),
    "at this many attempts a record's retries are exhausted: its partition pauses and `/ready` fails while retries go on (the DEX's policy), or, where the workload chooses it, its key is dead-lettered (docs/runtime.md)",
    "about 20 s of backoff (50 ms doubling to 5 s): longer than a Redis failover, so a stall means an outage",
);

pub const DRAIN_DEADLINE_MS: Setting = Setting::new(
    "DRAIN_DEADLINE_MS",
    "milliseconds",
    Default::Value("10000"),
    "on revoke, how long in-flight work of the revoked partitions may finish",
    "must be below the rebalance timeout (the 15 s session timeout, classic); a member still draining then is expelled and its commit fails",
);

pub const SHUTDOWN_DEADLINE_MS: Setting = Setting::new(
    "SHUTDOWN_DEADLINE_MS",
    "milliseconds",
    Default::Value("25000"),
    "on SIGTERM, the whole drain, flush, commit and close",
    "the drain's 10 s + 6 s for the flush and commit, with room; the chart gives the pod this + 15 s of grace",
);

pub const COMMIT_INTERVAL_MS: Setting = Setting::new(
    "COMMIT_INTERVAL_MS",
    "milliseconds",
    Default::Value("1000"),
    "how often the completed positions are committed",
    "bounds what a crash replays to about a second of records (effects are idempotent) at one commit request per second; librdkafka's auto-commit waits 5 s",
);

pub const ADMIN_LISTEN: Setting = Setting::new(
    "ADMIN_LISTEN",
    "host:port",
    Default::Value("0.0.0.0:9090"),
    "`/live`, `/ready`, `/metrics`",
    "the port the chart's probes and scrape use",
);

pub const EXACTLY_ONCE: Setting = Setting::new(
    "EXACTLY_ONCE",
    "true or false",
    Default::Value("false"),
    "outputs in Kafka transactions with the consumed offsets (docs/runtime.md)",
    "at-least-once with idempotent effects is what the DEX needs; exactly-once cost 8–22% more CPU per record in the open loops (results/README.md) and one interval of latency for `read_committed` readers",
);

pub const TRANSACTION_INTERVAL_MS: Setting = Setting::new(
    "TRANSACTION_INTERVAL_MS",
    "milliseconds",
    Default::Value("100"),
    "exactly-once: how often the open transaction commits",
    "measured: at 100 ms the drain kept 0.95–1.02 of at-least-once's rate (results/README.md), and a `read_committed` reader waits at most 0.1 s more",
);

pub const TRANSACTION_TIMEOUT_MS: Setting = Setting::new(
    "TRANSACTION_TIMEOUT_MS",
    "milliseconds",
    Default::Value("10000"),
    "exactly-once: how long the broker keeps a dead processor's open transaction before aborting it",
    "at least 10 intervals; shorter than Kafka's 60 s, because until it ends the outputs' readers and the partitions' next owners wait",
);

pub const TRANSACTIONAL_ID: Setting = Setting::new(
    "TRANSACTIONAL_ID",
    "text",
    Default::Derived("`<group>.<instance id>`, else `<group>.<host>.<nonce>`"),
    "exactly-once: the producer's `transactional.id`",
    "unique per process, so two processes never fence each other; with static membership a restart fences its predecessor at once",
);
