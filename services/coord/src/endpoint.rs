//! How every service reaches its Redis: the URL (`redis://` or `rediss://`), an ACL user and
//! password of their own (so a Secret fills them), and for TLS the CA that signed the
//! server's certificate and an optional client certificate, each a PEM file (a mounted
//! Secret). One reader and one client builder serve the processor, the scheduler, the ingest
//! and `sluice-ops`, so a managed Redis is set up the same way for all of them.
//!
//! Everything is checked when the configuration is read, so a bad setting stops the service
//! naming it: a URL that does not parse, TLS files beside a plain `redis://` URL, a
//! certificate without its key, a file that cannot be read or is not PEM the TLS stack takes.

use std::path::PathBuf;

use redis::{ConnectionAddr, IntoConnectionInfo};
use sluice_service::env::EnvReader;
use sluice_service::settings::{Default, Setting};

/// `REDIS_USERNAME`.
pub const REDIS_USERNAME: Setting = Setting::new(
    "REDIS_USERNAME",
    "text",
    Default::Unset,
    "the ACL user the service logs in as (`AUTH user password`); overrides a user in the URL",
    "unset, Redis's `default` user, as the URL says",
);
/// `REDIS_PASSWORD`.
pub const REDIS_PASSWORD: Setting = Setting::new(
    "REDIS_PASSWORD",
    "text",
    Default::Unset,
    "the password for `REDIS_USERNAME` (or the `default` user), a variable of its own so a Secret fills it; never logged",
    "",
);
/// `REDIS_TLS_CA_FILE`.
pub const REDIS_TLS_CA_FILE: Setting = Setting::new(
    "REDIS_TLS_CA_FILE",
    "path to a PEM file",
    Default::Unset,
    "the certificates a `rediss://` server's certificate must chain to (a bundle may hold several)",
    "unset, the system's trust store, which a managed Redis with a public CA needs",
);
/// `REDIS_TLS_CERT_FILE`.
pub const REDIS_TLS_CERT_FILE: Setting = Setting::new(
    "REDIS_TLS_CERT_FILE",
    "path to a PEM file",
    Default::Unset,
    "the client certificate a `rediss://` server that checks clients asks for, with `REDIS_TLS_KEY_FILE`",
    "",
);
/// `REDIS_TLS_KEY_FILE`.
pub const REDIS_TLS_KEY_FILE: Setting = Setting::new(
    "REDIS_TLS_KEY_FILE",
    "path to a PEM file",
    Default::Unset,
    "the client certificate's private key, PKCS#8 (`BEGIN PRIVATE KEY`; `openssl pkcs8 -topk8 -nocrypt` converts others)",
    "",
);

/// The settings [`RedisEndpoint::read`] reads beside each service's own `REDIS_URL`.
pub const SETTINGS: &[Setting] =
    &[REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS_CA_FILE, REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE];

/// Where a service's Redis is and how it proves who it is. Built from settings by
/// [`RedisEndpoint::read`] (checked there) or from a URL alone by [`RedisEndpoint::url`].
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RedisEndpoint {
    pub url: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub ca_file: Option<PathBuf>,
    /// The client certificate and its key (both or neither: [`RedisEndpoint::read`] checks).
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for RedisEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password too: only its scheme and address are shown.
        let shown = self.url.rsplit_once('@').map_or(self.url.as_str(), |(_, host)| host);
        f.debug_struct("RedisEndpoint")
            .field("url", &shown)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .finish()
    }
}

/// Why a client could not be built, with the setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("REDIS_URL: {0}")]
    Url(#[source] redis::RedisError),
    #[error("REDIS_URL: TLS files are set but the URL is `redis://`; use `rediss://`")]
    TlsWithoutRediss,
    #[error("{setting}: cannot read {path}: {source}")]
    File { setting: &'static str, path: PathBuf, source: std::io::Error },
    /// `setting`: the CA file when the TLS stack refused the root certificates, else the
    /// client certificate (with its key).
    #[error("{setting}: the TLS stack refused the file: {source}")]
    Tls { setting: &'static str, source: redis::RedisError },
}

impl EndpointError {
    /// The setting a reader names in its problem.
    fn setting(&self) -> &'static str {
        match self {
            Self::Url(_) | Self::TlsWithoutRediss => "REDIS_URL",
            Self::File { setting, .. } | Self::Tls { setting, .. } => setting,
        }
    }
}

impl RedisEndpoint {
    /// A plain endpoint: the URL alone (tests, tools that take a URL).
    pub fn url(url: impl Into<String>) -> Self {
        Self { url: url.into(), ..Self::default() }
    }

    /// Reads [`SETTINGS`] for the service's `url` (its own `REDIS_URL`, already read) and
    /// builds a client once to check them; problems are collected in `env`.
    pub fn read(env: &mut EnvReader, url: Option<&str>) -> Self {
        let username: Option<String> = env.optional_setting(&REDIS_USERNAME);
        let password: Option<String> = env.optional_setting(&REDIS_PASSWORD);
        let ca_file: Option<PathBuf> = env.optional_setting(&REDIS_TLS_CA_FILE);
        let cert: Option<PathBuf> = env.optional_setting(&REDIS_TLS_CERT_FILE);
        let key: Option<PathBuf> = env.optional_setting(&REDIS_TLS_KEY_FILE);
        let client_cert = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                let (a, b) = (env.name(REDIS_TLS_CERT_FILE.name), env.name(REDIS_TLS_KEY_FILE.name));
                env.problem(format!("{a} and {b}: set both or neither"));
                None
            }
        };
        if username.is_some() && password.is_none() {
            let (a, b) = (env.name(REDIS_USERNAME.name), env.name(REDIS_PASSWORD.name));
            env.problem(format!("{a} needs {b}: Redis logs a user in with its password"));
        }
        let endpoint = Self { url: url.unwrap_or_default().to_string(), username, password, ca_file, client_cert };
        if url.is_some()
            && let Err(e) = endpoint.client()
        {
            let name = env.name(e.setting());
            // The error's own text starts with the unprefixed name; the problem names the variable.
            let text = e.to_string();
            let detail = text.split_once(": ").map_or(text.as_str(), |(_, rest)| rest);
            env.problem(format!("{name}: {detail}"));
        }
        endpoint
    }

    /// A client for this endpoint: the URL with the user and password set, and for
    /// `rediss://` the CA and client certificate read from their files (now: a renewed
    /// certificate is picked up by the next process, not by a running one).
    pub fn client(&self) -> Result<redis::Client, EndpointError> {
        let mut info = self.url.as_str().into_connection_info().map_err(EndpointError::Url)?;
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        info = info.set_redis_settings(settings);
        if let ConnectionAddr::Tcp(_, port) | ConnectionAddr::TcpTls { port, .. } = info.addr() {
            // This process's connections to the port are Redis's (`<service>_tcp_connections`).
            sluice_service::connections::declare("redis", &format!(":{port}"));
        }
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        if !tls {
            if self.ca_file.is_some() || self.client_cert.is_some() {
                return Err(EndpointError::TlsWithoutRediss);
            }
            return redis::Client::open(info).map_err(EndpointError::Url);
        }
        if self.ca_file.is_none() && self.client_cert.is_none() {
            return redis::Client::open(info).map_err(EndpointError::Url);
        }
        let root_cert = self.ca_file.as_ref().map(|p| read(REDIS_TLS_CA_FILE.name, p)).transpose()?;
        let client_tls = match &self.client_cert {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read(REDIS_TLS_CERT_FILE.name, cert)?,
                client_key: read(REDIS_TLS_KEY_FILE.name, key)?,
            }),
            None => None,
        };
        redis::Client::build_with_tls(info, redis::TlsCertificates { client_tls, root_cert }).map_err(|source| {
            // The client's own message says which it could not parse.
            let root = source.to_string().contains("oot certificate");
            let setting = if root { REDIS_TLS_CA_FILE.name } else { REDIS_TLS_CERT_FILE.name };
            EndpointError::Tls { setting, source }
        })
    }
}

fn read(setting: &'static str, path: &PathBuf) -> Result<Vec<u8>, EndpointError> {
    std::fs::read(path).map_err(|source| EndpointError::File { setting, path: path.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(vars: &[(&str, &str)]) -> EnvReader {
        EnvReader::from_vars("S_", vars.iter().map(|(k, v)| (format!("S_{k}"), v.to_string())))
    }

    fn problems(url: &str, vars: &[(&str, &str)]) -> String {
        let mut env = reader(vars);
        RedisEndpoint::read(&mut env, Some(url));
        env.problems().join("\n")
    }

    #[test]
    fn user_and_password_override_the_url_and_stay_out_of_debug() {
        let mut env = reader(&[("REDIS_USERNAME", "sluice"), ("REDIS_PASSWORD", "s3cret")]);
        let endpoint = RedisEndpoint::read(&mut env, Some("redis://old:older@r:6379/2"));
        assert!(env.problems().is_empty(), "{:?}", env.problems());
        let client = endpoint.client().expect("client");
        let settings = client.get_connection_info().redis_settings();
        assert_eq!((settings.username(), settings.password()), (Some("sluice"), Some("s3cret")));
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("older"), "{shown}");
    }

    #[test]
    fn bad_settings_are_named() {
        assert!(problems("redis:/r", &[]).contains("S_REDIS_URL:"), "an unparsable URL");
        let plain = problems("redis://r:6379", &[("REDIS_TLS_CA_FILE", "/etc/hostname")]);
        assert!(plain.contains("S_REDIS_URL: TLS files are set but the URL is `redis://`"), "{plain}");
        let half = problems("rediss://r:6379", &[("REDIS_TLS_CERT_FILE", "/etc/hostname")]);
        assert!(half.contains("S_REDIS_TLS_CERT_FILE and S_REDIS_TLS_KEY_FILE: set both or neither"), "{half}");
        let missing = problems("rediss://r:6379", &[("REDIS_TLS_CA_FILE", "/no/such/ca.pem")]);
        assert!(missing.contains("S_REDIS_TLS_CA_FILE: cannot read /no/such/ca.pem"), "{missing}");
        let not_pem = problems("rediss://r:6379", &[("REDIS_TLS_CA_FILE", "/etc/hostname")]);
        assert!(not_pem.contains("S_REDIS_TLS_CA_FILE: the TLS stack refused the file"), "{not_pem}");
        let pem = [("REDIS_TLS_CERT_FILE", "/etc/hostname"), ("REDIS_TLS_KEY_FILE", "/etc/hostname")];
        let not_key = problems("rediss://r:6379", &pem);
        assert!(not_key.contains("S_REDIS_TLS_CERT_FILE: the TLS stack refused the file"), "{not_key}");
        let lonely = problems("redis://r:6379", &[("REDIS_USERNAME", "sluice")]);
        assert!(lonely.contains("S_REDIS_USERNAME needs S_REDIS_PASSWORD"), "{lonely}");
    }
}
