//! sluice-lag's configuration, from `SLUICE_LAG_…` variables (names, defaults and their
//! reasons in [`settings`]); every bad or unknown one is reported by name at start.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use sluice_service::env::EnvReader;

use crate::model::status::Thresholds;
use crate::wire::security::Security;

pub mod settings;

use self::settings as s;

/// One group's settings beyond the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupSettings {
    pub thresholds: Thresholds,
    /// The group reads `read_committed`: its lag is measured against the last
    /// stable offset.
    pub read_committed: bool,
}

/// Everything sluice-lag needs to run.
#[derive(Debug, Clone)]
pub struct LagConfig {
    pub brokers: String,
    pub security: Security,
    /// Groups watched by name (always reported, even while they have no
    /// members or do not exist yet).
    pub groups: Vec<String>,
    /// Groups watched by pattern (found with `ListGroups`).
    pub groups_regex: Option<Regex>,
    /// Groups the pattern matches but that are not watched.
    pub groups_exclude: Option<Regex>,
    /// The topics of the topic series.
    pub topics: TopicFilter,
    pub poll_interval: Duration,
    /// Bounds every connect and every request.
    pub request_timeout: Duration,
    /// Rates (produce, consume, velocity, time to drain) are over this window.
    pub rate_window: Duration,
    /// A pattern-matched group no longer listed is still reported this long.
    pub inactive_ttl: Duration,
    pub defaults: GroupSettings,
    /// Per group, by name.
    pub per_group: BTreeMap<String, GroupSettings>,
    pub admin_listen: SocketAddr,
    /// Burrow's series and consumer status API, under this cluster name.
    pub burrow_cluster: Option<String>,
    /// KEDA's external scaler (gRPC); `None`: not served.
    pub scaler_listen: Option<SocketAddr>,
    pub scaler_tls: Option<TlsFiles>,
}

impl LagConfig {
    /// A group's settings.
    pub fn settings(&self, group: &str) -> &GroupSettings {
        self.per_group.get(group).unwrap_or(&self.defaults)
    }

    /// Reads sluice-lag's variables ([`settings::SETTINGS`]); problems are collected in `env`.
    /// `None` when `BROKERS` is missing.
    pub fn read(env: &mut EnvReader) -> Option<Self> {
        let brokers: Option<String> = env.required_setting(&s::BROKERS);
        let security = security(env);
        let (groups, groups_regex, groups_exclude) = groups(env);
        let include: String = env.setting(&s::TOPICS_REGEX);
        let exclude = env.optional_setting::<String>(&s::TOPICS_EXCLUDE_REGEX);
        let topics = TopicFilter {
            include: compiled(env, &s::TOPICS_REGEX, &include).unwrap_or_else(|| whole(".*").expect("valid")),
            exclude: exclude.and_then(|text| compiled(env, &s::TOPICS_EXCLUDE_REGEX, &text)),
        };
        let poll_interval = env.setting_ms(&s::POLL_INTERVAL_MS);
        let stall_after = env.setting_ms(&s::STALL_AFTER_MS);
        let defaults = GroupSettings {
            thresholds: Thresholds {
                window: env.setting_ms(&s::STATUS_WINDOW_MS),
                stall_after,
                // Three polls: what "within a few polls" can tell from a poll's timing.
                min_still: (poll_interval * 3).min(stall_after),
                warn_time_lag: env.optional_setting::<u64>(&s::WARN_TIME_LAG_MS).map(Duration::from_millis),
                warn_lag: env.optional_setting(&s::WARN_LAG),
            },
            read_committed: false,
        };
        let per_group = match env.optional_setting::<String>(&s::GROUP_SETTINGS) {
            Some(text) => parse_group_settings(&text, &defaults).unwrap_or_else(|e| {
                let name = env.name(s::GROUP_SETTINGS.name);
                env.problem(format!("{name}: {e}"));
                BTreeMap::new()
            }),
            None => BTreeMap::new(),
        };
        let config = Self {
            brokers: brokers.clone().unwrap_or_default(),
            security,
            groups,
            groups_regex,
            groups_exclude,
            topics,
            poll_interval,
            request_timeout: env.setting_ms(&s::REQUEST_TIMEOUT_MS),
            rate_window: env.setting_ms(&s::RATE_WINDOW_MS),
            inactive_ttl: env.setting_ms(&s::INACTIVE_TTL_MS),
            defaults,
            per_group,
            admin_listen: env.setting(&s::ADMIN_LISTEN),
            burrow_cluster: env.optional_setting(&s::BURROW_CLUSTER),
            scaler_listen: scaler_listen(env),
            scaler_tls: scaler_tls(env),
        };
        if config.poll_interval < Duration::from_millis(200) {
            let name = env.name(s::POLL_INTERVAL_MS.name);
            env.problem(format!("{name} must be at least 200"));
        }
        if config.rate_window < config.poll_interval * 2 {
            let (a, b) = (env.name(s::RATE_WINDOW_MS.name), env.name(s::POLL_INTERVAL_MS.name));
            env.problem(format!("{a} must be at least twice {b} (a rate needs two polls)"));
        }
        brokers.map(|_| config)
    }
}

/// The connection's security, from `KAFKA_PROPERTIES` and the SASL credentials.
fn security(env: &mut EnvReader) -> Security {
    let properties = env.kafka_properties();
    Security::from_properties(&properties).unwrap_or_else(|problems| {
        let name = env.name(s::KAFKA_PROPERTIES.name);
        for p in problems {
            env.problem(format!("{name}: {p}"));
        }
        Security::default()
    })
}

/// `GROUPS`, `GROUPS_REGEX` (every group when neither is set) and `GROUPS_EXCLUDE_REGEX`.
fn groups(env: &mut EnvReader) -> (Vec<String>, Option<Regex>, Option<Regex>) {
    let groups: String = env.optional_setting(&s::GROUPS).unwrap_or_default();
    let groups: Vec<String> = groups.split(',').map(str::trim).filter(|g| !g.is_empty()).map(String::from).collect();
    let every = if groups.is_empty() { ".*" } else { "" };
    let pattern: String = env.setting_or(&s::GROUPS_REGEX, every.to_string());
    let groups_regex = (!pattern.is_empty()).then(|| compiled(env, &s::GROUPS_REGEX, &pattern)).flatten();
    let exclude = env.optional_setting::<String>(&s::GROUPS_EXCLUDE_REGEX);
    let groups_exclude = exclude.and_then(|text| compiled(env, &s::GROUPS_EXCLUDE_REGEX, &text));
    (groups, groups_regex, groups_exclude)
}

/// `setting`'s pattern, matched against whole names; `None` when it is bad (a problem naming
/// the setting).
fn compiled(env: &mut EnvReader, setting: &sluice_service::settings::Setting, pattern: &str) -> Option<Regex> {
    match whole(pattern) {
        Ok(r) => Some(r),
        Err(e) => {
            let name = env.name(setting.name);
            env.problem(format!("{name}: {e}"));
            None
        }
    }
}

/// `pattern` anchored at both ends.
fn whole(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

/// Which topics the topic series cover.
#[derive(Debug, Clone)]
pub struct TopicFilter {
    pub include: Regex,
    pub exclude: Option<Regex>,
}

impl TopicFilter {
    pub fn shows(&self, topic: &str) -> bool {
        self.include.is_match(topic) && !self.exclude.as_ref().is_some_and(|e| e.is_match(topic))
    }
}

/// `SCALER_LISTEN`: an address (the chart's is `0.0.0.0:9097`), or `off`, the default.
fn scaler_listen(env: &mut EnvReader) -> Option<SocketAddr> {
    let text: String = env.setting(&s::SCALER_LISTEN);
    if text == "off" {
        return None;
    }
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            let name = env.name(s::SCALER_LISTEN.name);
            env.problem(format!("{name}: {text:?} is not an address (host:port) or off"));
            None
        }
    }
}

/// TLS for the scaler's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients (KEDA's operator and metrics server) must present a certificate it signed.
    pub client_ca: Option<PathBuf>,
}

/// `SCALER_TLS_CERT` and `SCALER_TLS_KEY` (both or neither), `SCALER_TLS_CLIENT_CA`.
fn scaler_tls(env: &mut EnvReader) -> Option<TlsFiles> {
    let cert = env.optional_setting::<String>(&s::SCALER_TLS_CERT);
    let key = env.optional_setting::<String>(&s::SCALER_TLS_KEY);
    let client_ca = env.optional_setting::<String>(&s::SCALER_TLS_CLIENT_CA).map(Into::into);
    match (cert, key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert: cert.into(), key: key.into(), client_ca }),
        (None, None) => {
            if client_ca.is_some() {
                let (a, b) = (env.name(s::SCALER_TLS_CLIENT_CA.name), env.name(s::SCALER_TLS_CERT.name));
                env.problem(format!("{a} needs {b} and its key: a client CA without TLS"));
            }
            None
        }
        _ => {
            let (a, b) = (env.name(s::SCALER_TLS_CERT.name), env.name(s::SCALER_TLS_KEY.name));
            env.problem(format!("{a} and {b}: set both or neither"));
            None
        }
    }
}

/// An entry of `GROUP_SETTINGS` that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadGroupSettings {
    #[error("expected `group: key=value …`, got {0:?}")]
    Entry(String),
    #[error("{group}: expected key=value, got {pair:?}")]
    Pair { group: String, pair: String },
    #[error("{group}: {key}={value:?} is not a number")]
    NotANumber { group: String, key: String, value: String },
    #[error("{group}: read_committed={value:?}")]
    NotABool { group: String, value: String },
    #[error("{group}: unknown setting {key:?}")]
    Unknown { group: String, key: String },
}

/// `group: key=value key=value; group: …` with keys `stall_after_ms`,
/// `window_ms`, `warn_time_lag_ms`, `warn_lag`, `read_committed`.
pub fn parse_group_settings(
    text: &str,
    defaults: &GroupSettings,
) -> Result<BTreeMap<String, GroupSettings>, BadGroupSettings> {
    let mut out = BTreeMap::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (group, pairs) = entry.split_once(':').ok_or_else(|| BadGroupSettings::Entry(entry.to_string()))?;
        let mut settings = defaults.clone();
        for pair in pairs.split_whitespace() {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| BadGroupSettings::Pair { group: group.to_string(), pair: pair.to_string() })?;
            let number = || {
                value.parse::<u64>().map_err(|_| BadGroupSettings::NotANumber {
                    group: group.to_string(),
                    key: key.to_string(),
                    value: value.to_string(),
                })
            };
            match key {
                "stall_after_ms" => settings.thresholds.stall_after = Duration::from_millis(number()?),
                "window_ms" => settings.thresholds.window = Duration::from_millis(number()?),
                "warn_time_lag_ms" => settings.thresholds.warn_time_lag = Some(Duration::from_millis(number()?)),
                "warn_lag" => settings.thresholds.warn_lag = Some(number()? as i64),
                "read_committed" => {
                    settings.read_committed = value.parse().map_err(|_| BadGroupSettings::NotABool {
                        group: group.to_string(),
                        value: value.to_string(),
                    })?
                }
                other => return Err(BadGroupSettings::Unknown { group: group.to_string(), key: other.to_string() }),
            }
        }
        out.insert(group.trim().to_string(), settings);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvReader {
        EnvReader::from_vars("L_", pairs.iter().map(|(k, v)| (format!("L_{k}"), v.to_string())))
    }

    #[test]
    fn groups_by_name_and_pattern_with_settings_per_group() {
        let mut e = env(&[
            ("BROKERS", "k:9092"),
            ("GROUPS", "sluice-processor, other"),
            ("GROUPS_REGEX", "team-.*"),
            (
                "GROUP_SETTINGS",
                "sluice-processor: stall_after_ms=30000 warn_time_lag_ms=10000; other: read_committed=true",
            ),
        ]);
        let c = LagConfig::read(&mut e).expect("complete");
        assert!(e.finish().is_ok());
        assert_eq!(c.groups, ["sluice-processor", "other"]);
        assert!(c.groups_regex.as_ref().is_some_and(|r| r.is_match("team-a") && !r.is_match("xteam-a")));
        let p = c.settings("sluice-processor");
        assert_eq!(
            (p.thresholds.stall_after, p.thresholds.warn_time_lag),
            (Duration::from_secs(30), Some(Duration::from_secs(10)))
        );
        assert!(c.settings("other").read_committed);
        assert_eq!(c.settings("team-a"), &c.defaults);
    }

    #[test]
    fn bad_settings_name_their_variable() {
        let mut e = env(&[
            ("KAFKA_PROPERTIES", "linger.ms=5"),
            ("GROUPS_REGEX", "("),
            ("GROUP_SETTINGS", "g: stall=1"),
            ("POLL_INTERVAL_MS", "5000"),
            ("RATE_WINDOW_MS", "6000"),
        ]);
        assert!(LagConfig::read(&mut e).is_none(), "BROKERS is missing");
        let text = e.finish().expect_err("problems").to_string();
        for name in [
            "L_BROKERS",
            "L_KAFKA_PROPERTIES: linger.ms",
            "L_GROUPS_REGEX",
            "L_GROUP_SETTINGS: g: unknown setting",
            "L_RATE_WINDOW_MS",
        ] {
            assert!(text.contains(name), "{name} missing from: {text}");
        }
    }

    #[test]
    fn every_group_and_topic_unless_named_or_excluded() {
        let mut e = env(&[("BROKERS", "k:9092"), ("GROUPS_EXCLUDE_REGEX", "console-consumer-.*")]);
        let c = LagConfig::read(&mut e).expect("complete");
        assert!(e.finish().is_ok());
        assert!(c.groups.is_empty());
        assert!(c.groups_regex.as_ref().is_some_and(|r| r.is_match("any-team")), "every group by default");
        assert!(c.groups_exclude.as_ref().is_some_and(|r| r.is_match("console-consumer-42") && !r.is_match("x")));
        assert!(c.topics.shows("__consumer_offsets") && c.topics.shows("dex.swaps"), "every topic by default");

        let mut e = env(&[
            ("BROKERS", "k:9092"),
            ("GROUPS", "a"),
            ("TOPICS_REGEX", "dex\\..*|chain\\..*"),
            ("TOPICS_EXCLUDE_REGEX", ".*\\.dlq"),
        ]);
        let c = LagConfig::read(&mut e).expect("complete");
        assert!(e.finish().is_ok());
        assert!(c.groups_regex.is_none(), "named groups only");
        assert!(c.topics.shows("dex.swaps") && c.topics.shows("chain.transactions"));
        assert!(!c.topics.shows("chain.transactions.dlq") && !c.topics.shows("xdex.swaps"), "whole names");
    }
}
