//! Config from environment variables, checked all at once.
//!
//! Each service reads its variables through one [`EnvReader`]: every value
//! is parsed, every failure is collected with the variable's name, and
//! variables with the service's prefix that nobody read are reported as
//! unknown (a typo must not silently fall back to a default). The service
//! then stops with one message listing everything wrong.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

use crate::settings::{Default, Setting};

/// The Kafka client settings every service that talks to Kafka reads
/// ([`EnvReader::kafka_properties`]).
pub const KAFKA_SETTINGS: &[Setting] = &[
    Setting {
        name: "KAFKA_PROPERTIES",
        kind: "`key=value,…`",
        default: Default::Unset,
        what: "passed to librdkafka as they are (`security.protocol`, `sasl.mechanism`, `ssl.ca.location`, tuning); never logged",
        why: "",
    },
    Setting {
        name: "KAFKA_SASL_USERNAME",
        kind: "text",
        default: Default::Unset,
        what: "SASL user name, with `KAFKA_SASL_PASSWORD` (both or neither)",
        why: "",
    },
    Setting {
        name: "KAFKA_SASL_PASSWORD",
        kind: "text",
        default: Default::Unset,
        what: "SASL password, a variable of its own so a Secret fills it and it may hold commas",
        why: "",
    },
];

/// A replica's default name in leases and histories: the pod's hostname, or
/// `<role>-<pid>` off Kubernetes. Must be unique per replica.
pub fn default_instance_id(role: &str) -> String {
    std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| format!("{role}-{}", std::process::id()))
}

/// A setting's value that is none of the ones it accepts (the `Err` of a
/// setting's `FromStr`): "expected skip or buffer-one, got \"sikp\"".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected {expected}, got {got:?}")]
pub struct Unexpected {
    pub expected: &'static str,
    pub got: String,
}

impl Unexpected {
    pub fn new(expected: &'static str, got: &str) -> Self {
        Self { expected, got: got.to_string() }
    }
}

/// Every problem found in a service's configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration:\n  {}", .problems.join("\n  "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

/// Reads variables with one prefix from a snapshot of the environment.
#[derive(Debug)]
pub struct EnvReader {
    prefix: String,
    vars: HashMap<String, String>,
    read: BTreeSet<String>,
    problems: Vec<String>,
}

impl EnvReader {
    /// Reads from the process environment.
    pub fn from_env(prefix: &str) -> Self {
        Self::from_vars(prefix, std::env::vars())
    }

    /// Reads from the given variables (tests).
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(prefix: &str, vars: I) -> Self {
        Self {
            prefix: prefix.to_string(),
            vars: vars.into_iter().collect(),
            read: BTreeSet::new(),
            problems: Vec::new(),
        }
    }

    fn raw(&mut self, name: &str) -> (String, Option<String>) {
        let full = format!("{}{name}", self.prefix);
        self.read.insert(full.clone());
        let value = self.vars.get(&full).cloned().filter(|v| !v.is_empty());
        (full, value)
    }

    /// A variable that must be set.
    pub fn required<T: FromStr>(&mut self, name: &str) -> Option<T>
    where
        T::Err: Display,
    {
        match self.raw(name) {
            (full, None) => {
                self.problems.push(format!("{full} is required"));
                None
            }
            (full, Some(v)) => self.parse_value(&full, &v),
        }
    }

    /// A variable with a default.
    pub fn or<T: FromStr>(&mut self, name: &str, default: T) -> T
    where
        T::Err: Display,
    {
        match self.raw(name) {
            (_, None) => default,
            (full, Some(v)) => self.parse_value(&full, &v).unwrap_or(default),
        }
    }

    /// A duration in milliseconds with a default.
    pub fn millis(&mut self, name: &str, default: Duration) -> Duration {
        Duration::from_millis(self.or(name, default.as_millis() as u64))
    }

    /// An optional variable.
    pub fn optional<T: FromStr>(&mut self, name: &str) -> Option<T>
    where
        T::Err: Display,
    {
        match self.raw(name) {
            (_, None) => None,
            (full, Some(v)) => self.parse_value(&full, &v),
        }
    }

    /// `setting`'s value, or its default from the table ([`Default::Value`]).
    ///
    /// # Panics
    /// If the table's default is not a `Value` or does not parse as `T`: a mistake in the
    /// table, which every test that reads the service's configuration finds.
    pub fn setting<T: FromStr>(&mut self, setting: &Setting) -> T
    where
        T::Err: Display,
    {
        self.or(setting.name, setting.value())
    }

    /// `setting`'s value, or `default` (computed at start: the table says how, as
    /// [`Default::Derived`]).
    pub fn setting_or<T: FromStr>(&mut self, setting: &Setting, default: T) -> T
    where
        T::Err: Display,
    {
        debug_assert!(matches!(setting.default, Default::Derived(_)), "setting {}", setting.name);
        self.or(setting.name, default)
    }

    /// A duration setting in milliseconds, its default from the table.
    pub fn setting_ms(&mut self, setting: &Setting) -> Duration {
        Duration::from_millis(self.setting(setting))
    }

    /// A [`Default::Required`] setting: `None` (and a problem recorded) when unset.
    pub fn required_setting<T: FromStr>(&mut self, setting: &Setting) -> Option<T>
    where
        T::Err: Display,
    {
        debug_assert_eq!(setting.default, Default::Required, "setting {}", setting.name);
        self.required(setting.name)
    }

    /// A [`Default::Unset`] setting: `None` when unset.
    pub fn optional_setting<T: FromStr>(&mut self, setting: &Setting) -> Option<T>
    where
        T::Err: Display,
    {
        debug_assert_eq!(setting.default, Default::Unset, "setting {}", setting.name);
        self.optional(setting.name)
    }

    /// The names read so far, without the prefix (a service's test compares them with its
    /// table).
    pub fn names_read(&self) -> BTreeSet<String> {
        self.read.iter().map(|n| n.strip_prefix(&self.prefix).unwrap_or(n).to_string()).collect()
    }

    /// librdkafka properties of a service that talks to Kafka, never logged:
    /// - `KAFKA_PROPERTIES`: `key=value,key=value`, passed as they are (TLS
    ///   file locations, `security.protocol`, `sasl.mechanism`, tuning);
    /// - `KAFKA_SASL_USERNAME`, `KAFKA_SASL_PASSWORD`: each a variable of its
    ///   own, so a Kubernetes Secret fills it and a password may hold commas.
    pub fn kafka_properties(&mut self) -> Vec<(String, String)> {
        let mut properties = Vec::new();
        if let (full, Some(raw)) = self.raw("KAFKA_PROPERTIES") {
            for pair in key_values(&raw) {
                match pair {
                    Ok(kv) => properties.push(kv),
                    Err(e) => self.problems.push(format!("{full}: {e}")),
                }
            }
        }
        let (user_name, user) = self.raw("KAFKA_SASL_USERNAME");
        let (password_name, password) = self.raw("KAFKA_SASL_PASSWORD");
        match (user, password) {
            (Some(user), Some(password)) => {
                properties.push(("sasl.username".into(), user));
                properties.push(("sasl.password".into(), password));
            }
            (None, None) => {}
            _ => self.problems.push(format!("{user_name} and {password_name}: set both or neither")),
        }
        properties
    }

    /// The problems found so far (for a reader of another service's variables, which does
    /// not [`finish`](Self::finish): the unknown ones are that service's).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Records a cross-field problem (e.g. one deadline above another).
    pub fn problem(&mut self, message: impl Into<String>) {
        self.problems.push(message.into());
    }

    /// The full name of a variable, for messages.
    pub fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn parse_value<T: FromStr>(&mut self, full: &str, value: &str) -> Option<T>
    where
        T::Err: Display,
    {
        match value.trim().parse() {
            Ok(v) => Some(v),
            Err(e) => {
                self.problems.push(format!("{full}={value:?}: {e}"));
                None
            }
        }
    }

    /// Reports unknown variables with this prefix, then every problem. The variables the
    /// kubelet adds for a Service whose name shares the prefix (a Service `sluice-lag` gives
    /// `SLUICE_LAG_SERVICE_HOST`, `SLUICE_LAG_PORT=tcp://…` and so on) are not settings.
    pub fn finish(mut self) -> Result<(), ConfigError> {
        let mut unknown: Vec<&String> = self
            .vars
            .iter()
            .filter(|(k, v)| k.starts_with(&self.prefix) && !self.read.contains(*k) && !is_service_link(k, v))
            .map(|(k, _)| k)
            .collect();
        unknown.sort();
        for name in unknown {
            self.problems.push(format!("{name} is not a known setting"));
        }
        if self.problems.is_empty() { Ok(()) } else { Err(ConfigError { problems: self.problems }) }
    }
}

/// Is NAME=VALUE one of Kubernetes' service environment variables (`<SVC>_SERVICE_HOST`,
/// `<SVC>_SERVICE_PORT[_<PORT NAME>]`, `<SVC>_PORT=tcp://…`, `<SVC>_PORT_<N>_<PROTO>[_ADDR|_PORT|_PROTO]`)?
fn is_service_link(name: &str, value: &str) -> bool {
    if name.ends_with("_SERVICE_HOST") || name.ends_with("_SERVICE_PORT") || name.contains("_SERVICE_PORT_") {
        return true;
    }
    if name.ends_with("_PORT") && ["tcp://", "udp://", "sctp://"].iter().any(|p| value.starts_with(p)) {
        return true;
    }
    let base = ["_ADDR", "_PORT", "_PROTO"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
    [base, name].iter().any(|n| n.rsplit_once("_PORT_").is_some_and(|(_, rest)| is_port_and_protocol(rest)))
}

/// `<N>_<PROTO>`: a port number and a protocol, as in `9097_TCP`.
fn is_port_and_protocol(text: &str) -> bool {
    text.split_once('_').is_some_and(|(n, p)| n.parse::<u16>().is_ok() && ["TCP", "UDP", "SCTP"].contains(&p))
}

/// An item of a `key=value` list that is not one; it holds the key alone
/// (the value may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected key=value, got {0:?}")]
pub struct NotKeyValue(pub String);

/// A `key=value,key=value` list, blank items skipped and both sides
/// trimmed: each item as a pair, or [`NotKeyValue`] when it is not
/// `key=value` with a key.
pub fn key_values(raw: &str) -> impl Iterator<Item = Result<(String, String), NotKeyValue>> + '_ {
    raw.split(',').filter(|p| !p.trim().is_empty()).map(|pair| match pair.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(NotKeyValue(pair.split('=').next().unwrap_or("").trim().to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reports_every_bad_and_unknown_variable_by_name() {
        let mut env = EnvReader::from_vars(
            "SLUICE_X_",
            vars(&[("SLUICE_X_PORT", "eighty"), ("SLUICE_X_TYPO", "1"), ("SLUICE_X_LIMIT", "5"), ("OTHER", "1")]),
        );
        let port: u16 = env.or("PORT", 80);
        let limit: usize = env.or("LIMIT", 1);
        let brokers: Option<String> = env.required("BROKERS");
        assert_eq!((port, limit, brokers), (80, 5, None));
        let err = env.finish().expect_err("three problems");
        assert_eq!(err.problems.len(), 3, "{err}");
        let text = err.to_string();
        for name in ["SLUICE_X_PORT", "SLUICE_X_TYPO", "SLUICE_X_BROKERS"] {
            assert!(text.contains(name), "{name} missing from: {text}");
        }
    }

    #[test]
    fn the_kubelets_service_variables_are_not_unknown_settings() {
        // What the kubelet sets for a Service `sluice-lag` with ports admin 9096 and scaler 9097.
        let kubelet = [
            ("SLUICE_LAG_SERVICE_HOST", "10.96.4.7"),
            ("SLUICE_LAG_SERVICE_PORT", "9096"),
            ("SLUICE_LAG_SERVICE_PORT_SCALER", "9097"),
            ("SLUICE_LAG_PORT", "tcp://10.96.4.7:9096"),
            ("SLUICE_LAG_PORT_9097_TCP", "tcp://10.96.4.7:9097"),
            ("SLUICE_LAG_PORT_9097_TCP_ADDR", "10.96.4.7"),
            ("SLUICE_LAG_PORT_9097_TCP_PORT", "9097"),
            ("SLUICE_LAG_PORT_9097_TCP_PROTO", "tcp"),
            ("SLUICE_LAG_SCALER_SERVICE_HOST", "10.96.4.8"),
        ];
        let mut env = EnvReader::from_vars("SLUICE_LAG_", vars(&kubelet));
        let _: Option<String> = env.optional("BROKERS");
        assert_eq!(env.finish(), Ok(()));
        // A setting that only looks like one is still unknown: a PORT that is no address, a typo.
        let bad =
            [("SLUICE_LAG_PORT", "9096"), ("SLUICE_LAG_PORT_9097_TCP_ADDRESS", "x"), ("SLUICE_LAG_SERVCE_HOST", "h")];
        let err = EnvReader::from_vars("SLUICE_LAG_", vars(&bad)).finish().expect_err("three unknown settings");
        assert_eq!(err.problems.len(), 3, "{err}");
    }

    #[test]
    fn kafka_properties_from_the_list_and_the_credential_variables() {
        let mut env = EnvReader::from_vars(
            "S_",
            vars(&[
                ("S_KAFKA_PROPERTIES", "security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512,"),
                ("S_KAFKA_SASL_USERNAME", "sluice"),
                ("S_KAFKA_SASL_PASSWORD", "a,b=c"),
            ]),
        );
        let props = env.kafka_properties();
        let get = |k: &str| props.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!((get("sasl.username"), get("sasl.password")), (Some("sluice"), Some("a,b=c")));
        env.finish().expect("valid");

        let mut env = EnvReader::from_vars(
            "S_",
            vars(&[("S_KAFKA_PROPERTIES", "security.protocol=SSL,sasl.password"), ("S_KAFKA_SASL_USERNAME", "u")]),
        );
        env.kafka_properties();
        let text = env.finish().expect_err("two problems").to_string();
        assert!(text.contains("S_KAFKA_PROPERTIES: expected key=value, got \"sasl.password\""), "{text}");
        assert!(text.contains("S_KAFKA_SASL_USERNAME and S_KAFKA_SASL_PASSWORD: set both or neither"), "{text}");
    }

    #[test]
    fn defaults_and_durations() {
        let mut env = EnvReader::from_vars("P_", vars(&[("P_DEADLINE_MS", "1500")]));
        assert_eq!(env.millis("DEADLINE_MS", Duration::from_secs(1)), Duration::from_millis(1500));
        assert_eq!(env.millis("OTHER_MS", Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(env.optional::<u32>("NONE"), None);
        assert!(env.finish().is_ok());
    }
}
