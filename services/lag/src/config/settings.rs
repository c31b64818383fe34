//! sluice-lag's settings as a table (`sluice_service::settings`): name, type, default, what
//! each sets and why the default is what it is. [`super::LagConfig::read`] reads by these
//! names and defaults; docs/operating.md's table is rendered from [`SETTINGS`].

use sluice_service::settings::{Default, Setting};

/// Every sluice-lag setting, in the docs' order.
pub const SETTINGS: &[Setting] = &[
    BROKERS,
    GROUPS,
    GROUPS_REGEX,
    GROUPS_EXCLUDE_REGEX,
    TOPICS_REGEX,
    TOPICS_EXCLUDE_REGEX,
    KAFKA_PROPERTIES,
    KAFKA_SASL_USERNAME,
    KAFKA_SASL_PASSWORD,
    POLL_INTERVAL_MS,
    REQUEST_TIMEOUT_MS,
    RATE_WINDOW_MS,
    STATUS_WINDOW_MS,
    STALL_AFTER_MS,
    WARN_TIME_LAG_MS,
    WARN_LAG,
    GROUP_SETTINGS,
    INACTIVE_TTL_MS,
    ADMIN_LISTEN,
    BURROW_CLUSTER,
    SCALER_LISTEN,
    SCALER_TLS_CERT,
    SCALER_TLS_KEY,
    SCALER_TLS_CLIENT_CA,
];

pub const BROKERS: Setting =
    Setting::new("BROKERS", "host:port list", Default::Required, "the Kafka bootstrap servers", "");

pub const GROUPS: Setting = Setting::new(
    "GROUPS",
    "group list",
    Default::Unset,
    "groups watched by name (comma-separated), reported even with no members or before they exist",
    "",
);

pub const GROUPS_REGEX: Setting = Setting::new(
    "GROUPS_REGEX",
    "regular expression",
    Default::Derived("`.*` (every group) when `GROUPS` is unset too; else none"),
    "groups watched by pattern, matched against whole names (found with `ListGroups`)",
    "kafka_exporter's default: a new team's group appears by itself. Naming groups (`GROUPS`) watches only those unless a pattern is set as well",
);

pub const GROUPS_EXCLUDE_REGEX: Setting = Setting::new(
    "GROUPS_EXCLUDE_REGEX",
    "regular expression",
    Default::Unset,
    "groups the pattern would watch but should not (a group named in `GROUPS` is watched anyway), matched against whole names",
    "",
);

pub const TOPICS_REGEX: Setting = Setting::new(
    "TOPICS_REGEX",
    "regular expression",
    Default::Value(".*"),
    "topics whose partitions, offsets, leaders and replicas are exported (kafka_exporter's topic series), matched against whole names; a watched group's lag is read whatever this says",
    "kafka_exporter's `--topic.filter` default: every topic, so the topics no watched group reads (the output, the dead letters) are on the dashboards too. Its filter matches anywhere in the name: its `foo` is `.*foo.*` here",
);

pub const TOPICS_EXCLUDE_REGEX: Setting = Setting::new(
    "TOPICS_EXCLUDE_REGEX",
    "regular expression",
    Default::Unset,
    "topics left out of the topic series even when `TOPICS_REGEX` matches them (e.g. `__.*` for Kafka's internal topics), matched against whole names",
    "",
);

pub const KAFKA_PROPERTIES: Setting = Setting::new(
    "KAFKA_PROPERTIES",
    "`key=value,…`",
    Default::Unset,
    "the connection's security: `security.protocol`, `sasl.mechanism`, `ssl.*` locations, `ssl.endpoint.identification.algorithm`; any other property is refused by name rather than ignored; never logged",
    "",
);

pub const KAFKA_SASL_USERNAME: Setting = Setting::new(
    "KAFKA_SASL_USERNAME",
    "text",
    Default::Unset,
    "SASL user name, with `KAFKA_SASL_PASSWORD` (both or neither)",
    "",
);

pub const KAFKA_SASL_PASSWORD: Setting = Setting::new(
    "KAFKA_SASL_PASSWORD",
    "text",
    Default::Unset,
    "SASL password, a variable of its own so a Secret fills it and it may hold commas",
    "",
);

pub const POLL_INTERVAL_MS: Setting = Setting::new(
    "POLL_INTERVAL_MS",
    "milliseconds",
    Default::Value("5000"),
    "how often offsets and timestamps are read: every figure's resolution (at least 200)",
    "measured: a poll of 200 groups × 50 partitions took 116 ms at most (results/README.md), so 5 s leaves room for 40 times that, and is 3 times as fresh as KEDA's 15 s polling in the chart",
);

pub const REQUEST_TIMEOUT_MS: Setting = Setting::new(
    "REQUEST_TIMEOUT_MS",
    "milliseconds",
    Default::Value("10000"),
    "bounds every connect and every request",
    "a choice: two poll intervals; a slower broker makes the poll incomplete (`/ready` fails) rather than late forever",
);

pub const RATE_WINDOW_MS: Setting = Setting::new(
    "RATE_WINDOW_MS",
    "milliseconds",
    Default::Value("60000"),
    "rates (produce, consume, lag velocity, time to drain) are over this window (at least two polls)",
    "a choice: 12 polls, steadier than one poll's difference, yet a change in load shows within a minute",
);

pub const STATUS_WINDOW_MS: Setting = Setting::new(
    "STATUS_WINDOW_MS",
    "milliseconds",
    Default::Value("300000"),
    "the window a partition's Burrow-style status is judged over",
    "Burrow judges a fixed number of commits, which a slow committer stretches (Burrow#303); 5 minutes hold 60 polls and 300 of the processor's commits",
);

pub const STALL_AFTER_MS: Setting = Setting::new(
    "STALL_AFTER_MS",
    "milliseconds",
    Default::Value("60000"),
    "STALL (owned) or STOP (not owned): with lag, the committed offset has not moved this long, or nobody owns the partition and its oldest unconsumed record has waited this long; a partition seen committing more often is judged after three of its commit intervals (at least three polls)",
    "a minute: 60 commits of the processor's 1 s interval missed, far past a rebalance pause (1–4.5 s measured on pods)",
);

pub const WARN_TIME_LAG_MS: Setting = Setting::new(
    "WARN_TIME_LAG_MS",
    "milliseconds",
    Default::Unset,
    "WARN when a partition's time lag is over this",
    "",
);

pub const WARN_LAG: Setting =
    Setting::new("WARN_LAG", "records", Default::Unset, "WARN when a partition's lag is over this", "");

pub const GROUP_SETTINGS: Setting = Setting::new(
    "GROUP_SETTINGS",
    "`group: key=value …; …`",
    Default::Unset,
    "per group: `stall_after_ms`, `window_ms`, `warn_time_lag_ms`, `warn_lag`, `read_committed` (lag against the last stable offset)",
    "",
);

pub const INACTIVE_TTL_MS: Setting = Setting::new(
    "INACTIVE_TTL_MS",
    "milliseconds",
    Default::Value("600000"),
    "a pattern-matched group no longer listed is still reported this long",
    "10 minutes: a group that restarts is not dropped from dashboards (kafka_exporter drops it at once: its issues #226, #463)",
);

pub const ADMIN_LISTEN: Setting = Setting::new(
    "ADMIN_LISTEN",
    "host:port",
    Default::Value("0.0.0.0:9096"),
    "`/live`, `/ready`, `/metrics`, `/groups`",
    "the port the chart's probes and scrape use",
);

pub const BURROW_CLUSTER: Setting = Setting::new(
    "BURROW_CLUSTER",
    "text",
    Default::Unset,
    "Burrow's conventions, for its users: its series (`burrow_kafka_*`: Burrow v1.9's names, labels and status codes, `cluster` set to this) and its consumer status API (`/v3/kafka/{cluster}/consumer/{group}/lag` and `/status`) on the admin port",
    "",
);

pub const SCALER_LISTEN: Setting = Setting::new(
    "SCALER_LISTEN",
    "host:port or `off`",
    Default::Value("off"),
    "KEDA's external scaler (gRPC)",
    "off outside Kubernetes; the chart sets `0.0.0.0:9097`",
);

pub const SCALER_TLS_CERT: Setting = Setting::new(
    "SCALER_TLS_CERT",
    "file",
    Default::Unset,
    "the scaler port's TLS certificate, with `SCALER_TLS_KEY` (both or neither)",
    "",
);

pub const SCALER_TLS_KEY: Setting =
    Setting::new("SCALER_TLS_KEY", "file", Default::Unset, "the scaler port's TLS key", "");

pub const SCALER_TLS_CLIENT_CA: Setting = Setting::new(
    "SCALER_TLS_CLIENT_CA",
    "file",
    Default::Unset,
    "clients (KEDA's operator and metrics server) must present a certificate this CA signed (mutual TLS)",
    "",
);
