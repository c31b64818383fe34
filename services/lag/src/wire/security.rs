//! How to reach the brokers: the same librdkafka property names the other
//! services take (`SLUICE_LAG_KAFKA_PROPERTIES` and the credential
//! variables, as the chart renders them), read into typed settings. A
//! property this client does not implement stops the service naming it,
//! rather than being silently ignored.

use std::path::PathBuf;

/// The transport and authentication of every broker connection.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Security {
    pub tls: Option<Tls>,
    pub sasl: Option<Sasl>,
}

/// TLS settings (`security.protocol` SSL or SASL_SSL).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tls {
    /// `ssl.ca.location`: the CA bundle to trust (the system's if unset).
    pub ca: Option<PathBuf>,
    /// `ssl.certificate.location` and `ssl.key.location`: a client
    /// certificate (mutual TLS).
    pub certificate: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// `ssl.endpoint.identification.algorithm`: `https` (default) checks the
    /// broker's name against its certificate; `none` does not.
    pub verify_hostname: bool,
}

/// SASL settings (`security.protocol` SASL_PLAINTEXT or SASL_SSL); its
/// `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub struct Sasl {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

/// The SASL mechanisms this client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sasl")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

// Credentials never reach a log line.
impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sasl = self.sasl.as_ref().map(|s| (s.mechanism, &s.username));
        f.debug_struct("Security").field("tls", &self.tls).field("sasl", &sasl).finish()
    }
}

/// The properties understood here; librdkafka tuning properties that mean
/// nothing to this client are refused by name.
const KNOWN: [&str; 9] = [
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
];

impl Security {
    /// Reads librdkafka-style `properties`; every problem, by name.
    pub fn from_properties(properties: &[(String, String)]) -> Result<Self, Vec<String>> {
        let get = |key: &str| properties.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let mut problems: Vec<String> = properties
            .iter()
            .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
            .map(|(k, _)| format!("{k}: not supported by sluice-lag (it understands {})", KNOWN.join(", ")))
            .collect();
        let (tls, sasl) = match get("security.protocol").unwrap_or("PLAINTEXT").to_ascii_uppercase().as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => {
                problems.push(format!(
                    "security.protocol: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got {other:?}"
                ));
                (false, false)
            }
        };
        let security = Self {
            tls: tls.then(|| Tls {
                ca: get("ssl.ca.location").map(PathBuf::from),
                certificate: get("ssl.certificate.location").map(PathBuf::from),
                key: get("ssl.key.location").map(PathBuf::from),
                verify_hostname: !matches!(get("ssl.endpoint.identification.algorithm"), Some("none" | "")),
            }),
            sasl: if sasl { read_sasl(&get, &mut problems) } else { None },
        };
        if let Some(t) = &security.tls
            && t.certificate.is_some() != t.key.is_some()
        {
            problems.push("ssl.certificate.location and ssl.key.location: set both or neither".into());
        }
        if problems.is_empty() { Ok(security) } else { Err(problems) }
    }
}

fn read_sasl<'a>(get: &impl Fn(&str) -> Option<&'a str>, problems: &mut Vec<String>) -> Option<Sasl> {
    let name = get("sasl.mechanism").or_else(|| get("sasl.mechanisms")).unwrap_or("PLAIN");
    let mechanism = match name.to_ascii_uppercase().as_str() {
        "PLAIN" => Mechanism::Plain,
        "SCRAM-SHA-256" => Mechanism::ScramSha256,
        "SCRAM-SHA-512" => Mechanism::ScramSha512,
        other => {
            problems.push(format!("sasl.mechanism: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got {other:?}"));
            return None;
        }
    };
    match (get("sasl.username"), get("sasl.password")) {
        (Some(u), Some(p)) => Some(Sasl { mechanism, username: u.into(), password: p.into() }),
        _ => {
            problems.push("sasl.username and sasl.password: SASL needs both".into());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn what_the_chart_renders_is_understood() {
        let s = Security::from_properties(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("ssl.ca.location", "/etc/kafka/ca.crt"),
            ("sasl.username", "sluice"),
            ("sasl.password", "hunter2"),
        ]))
        .expect("valid");
        let tls = s.tls.as_ref().expect("tls");
        assert_eq!((tls.ca.as_deref(), tls.verify_hostname), (Some(std::path::Path::new("/etc/kafka/ca.crt")), true));
        assert_eq!(s.sasl.as_ref().map(|s| s.mechanism), Some(Mechanism::ScramSha512));
        assert!(!format!("{s:?}").contains("hunter2"), "never printed");
        assert_eq!(Security::from_properties(&[]).expect("plaintext"), Security::default());
    }

    #[test]
    fn what_it_cannot_do_is_refused_by_name() {
        let problems = Security::from_properties(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "GSSAPI"),
            ("linger.ms", "5"),
            ("ssl.certificate.location", "/c"),
        ]))
        .expect_err("refused");
        let text = problems.join("\n");
        for part in ["linger.ms: not supported", "sasl.mechanism: expected", "set both or neither"] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }
}
