//! One connection to one broker: TCP, TLS when configured, the API versions
//! the broker speaks, SASL when configured, then framed requests, one at a
//! time (a [`super::Cluster`] keeps one connection per broker and sends to
//! different brokers at once). Every request is counted, by API, in the
//! cluster's [`Requests`].

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use openssl::ssl::{SslConnector, SslFiletype, SslMethod};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use super::WireError;
use super::scram::Scram;
use super::security::{Mechanism, Sasl, Security, Tls};

/// The client id brokers see in their request logs and quotas.
pub const CLIENT_ID: &str = "sluice-lag";
/// A response larger than this is refused (a broken stream, not a reply).
const MAX_FRAME: usize = 256 << 20;

enum Stream {
    Plain(TcpStream),
    Tls(Box<SslStream<TcpStream>>),
}

impl Stream {
    async fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => s.write_all(buf).await,
            Self::Tls(s) => s.write_all(buf).await,
        }
    }

    async fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => s.read_exact(buf).await.map(|_| ()),
            Self::Tls(s) => s.read_exact(buf).await.map(|_| ()),
        }
    }
}

/// Requests sent over every connection of a cluster, by API key (the
/// handshake's `ApiVersions` and SASL requests included).
#[derive(Debug, Default)]
pub struct Requests(Mutex<BTreeMap<i16, u64>>);

impl Requests {
    fn count(&self, key: i16) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default() += 1;
    }

    /// The counts so far by API name (`Fetch`, `OffsetFetch`…).
    pub fn by_api(&self) -> BTreeMap<String, u64> {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let name = |key: i16| ApiKey::try_from(key).map_or_else(|()| format!("api{key}"), |k| format!("{k:?}"));
        counts.iter().map(|(key, n)| (name(*key), *n)).collect()
    }
}

/// A broker connection, authenticated and ready for requests.
pub struct Conn {
    addr: String,
    stream: Stream,
    /// The broker's highest version per API key.
    versions: HashMap<i16, (i16, i16)>,
    next_id: i32,
    timeout: Duration,
    requests: Arc<Requests>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("addr", &self.addr).finish_non_exhaustive()
    }
}

fn io<'a>(addr: &'a str, what: &str) -> impl Fn(std::io::Error) -> WireError + 'a {
    let what = what.to_string();
    move |e| WireError::Io(format!("{addr}: {what}: {e}"))
}

async fn tls_handshake(tcp: TcpStream, host: &str, tls: &Tls) -> Result<SslStream<TcpStream>, WireError> {
    let bad = |e: openssl::error::ErrorStack| WireError::Tls(format!("{host}: {e}"));
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(bad)?;
    if let Some(ca) = &tls.ca {
        builder.set_ca_file(ca).map_err(|e| WireError::Tls(format!("ssl.ca.location {}: {e}", ca.display())))?;
    }
    if let (Some(cert), Some(key)) = (&tls.certificate, &tls.key) {
        builder.set_certificate_chain_file(cert).map_err(bad)?;
        builder.set_private_key_file(key, SslFiletype::PEM).map_err(bad)?;
    }
    let mut config = builder.build().configure().map_err(bad)?;
    config.set_verify_hostname(tls.verify_hostname);
    let ssl = config.into_ssl(host).map_err(bad)?;
    let mut stream = SslStream::new(ssl, tcp).map_err(bad)?;
    Pin::new(&mut stream).connect().await.map_err(|e| WireError::Tls(format!("{host}: handshake: {e}")))?;
    Ok(stream)
}

impl Conn {
    /// Connects to `addr` (`host:port`) as `security` says, counting its
    /// requests in `requests`.
    pub async fn open(
        addr: &str,
        security: &Security,
        timeout: Duration,
        requests: Arc<Requests>,
    ) -> Result<Self, WireError> {
        let connect = tokio::time::timeout(timeout, TcpStream::connect(addr));
        let tcp = connect
            .await
            .map_err(|_| WireError::Io(format!("{addr}: connect: timed out")))?
            .map_err(io(addr, "connect"))?;
        tcp.set_nodelay(true).map_err(io(addr, "nodelay"))?;
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']);
        let stream = match &security.tls {
            None => Stream::Plain(tcp),
            Some(tls) => Stream::Tls(Box::new(
                tokio::time::timeout(timeout, tls_handshake(tcp, host, tls))
                    .await
                    .map_err(|_| WireError::Tls(format!("{addr}: handshake: timed out")))??,
            )),
        };
        let mut conn = Self { addr: addr.into(), stream, versions: HashMap::new(), next_id: 0, timeout, requests };
        conn.negotiate().await?;
        if let Some(sasl) = &security.sasl {
            conn.authenticate(sasl).await?;
        }
        Ok(conn)
    }

    async fn negotiate(&mut self) -> Result<(), WireError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response = self.call_at(&request, 3).await?;
        if response.error_code != 0 {
            return Err(WireError::Kafka { api: "ApiVersions", code: response.error_code });
        }
        self.versions = response.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
        Ok(())
    }

    async fn authenticate(&mut self, sasl: &Sasl) -> Result<(), WireError> {
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(sasl.mechanism.name()));
        let response = self.call(&handshake).await?;
        if response.error_code != 0 {
            let offered: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(WireError::Auth(format!(
                "{}: {} not enabled (the broker offers {offered:?})",
                self.addr,
                sasl.mechanism.name()
            )));
        }
        match sasl.mechanism {
            Mechanism::Plain => {
                self.sasl_round(format!("\0{}\0{}", sasl.username, sasl.password).into_bytes()).await?;
            }
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
                let nonce = Scram::nonce().map_err(|e| WireError::Auth(e.to_string()))?;
                let (mut scram, first) = Scram::start(sasl.mechanism, &sasl.username, &sasl.password, &nonce);
                let server_first = self.sasl_round(first.into_bytes()).await?;
                let last = scram.respond(&server_first).map_err(|e| WireError::Auth(format!("{}: {e}", self.addr)))?;
                let server_final = self.sasl_round(last.into_bytes()).await?;
                scram.verify(&server_final).map_err(|e| WireError::Auth(format!("{}: {e}", self.addr)))?;
            }
        }
        Ok(())
    }

    async fn sasl_round(&mut self, bytes: Vec<u8>) -> Result<String, WireError> {
        let response = self.call(&SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes))).await?;
        if response.error_code != 0 {
            let message = response.error_message.as_ref().map_or("", |m| m.as_str());
            return Err(WireError::Auth(format!("{}: authentication failed: {message}", self.addr)));
        }
        Ok(String::from_utf8_lossy(&response.auth_bytes).into_owned())
    }

    /// The version `R` is sent at: the highest both sides speak.
    pub fn version<R: Request>(&self) -> Result<i16, WireError> {
        let (min, max) = self.versions.get(&R::KEY).copied().unwrap_or((0, -1));
        let ours = R::VERSIONS;
        let version = max.min(ours.max);
        if version < min.max(ours.min) {
            return Err(WireError::Unsupported(format!(
                "{}: API {} (the broker speaks {min}..={max})",
                self.addr,
                R::KEY
            )));
        }
        Ok(version)
    }

    /// Sends `request` at the highest common version.
    pub async fn call<R: Request>(&mut self, request: &R) -> Result<R::Response, WireError> {
        let version = self.version::<R>()?;
        self.call_at(request, version).await
    }

    /// Sends `request` at `version` and reads its response (bounded by the
    /// connection's timeout; on any error the connection must be dropped).
    pub async fn call_at<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response, WireError> {
        let limit = self.timeout;
        let addr = self.addr.clone();
        tokio::time::timeout(limit, self.exchange(request, version)).await.map_err(|_| {
            WireError::Io(format!("{addr}: no answer to API {} within {} ms", R::KEY, limit.as_millis()))
        })?
    }

    async fn exchange<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response, WireError> {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        let encode = |e: anyhow::Error| WireError::Protocol(format!("encoding API {}: {e}", R::KEY));
        header.encode(&mut frame, R::header_version(version)).map_err(encode)?;
        request.encode(&mut frame, version).map_err(encode)?;
        let length = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&length.to_be_bytes());
        self.requests.count(R::KEY);
        self.stream.write_all(&frame).await.map_err(io(&self.addr, "write"))?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).await.map_err(io(&self.addr, "read"))?;
        let size = i32::from_be_bytes(size);
        if size < 4 || size as usize > MAX_FRAME {
            return Err(WireError::Protocol(format!("{}: a response of {size} bytes", self.addr)));
        }
        let mut body = vec![0u8; size as usize];
        self.stream.read_exact(&mut body).await.map_err(io(&self.addr, "read"))?;
        let mut body = Bytes::from(body);
        let decode = |e: anyhow::Error| WireError::Protocol(format!("decoding API {} v{version}: {e}", R::KEY));
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version)).map_err(decode)?;
        if header.correlation_id != id {
            return Err(WireError::Protocol(format!(
                "{}: response {} to request {id}",
                self.addr, header.correlation_id
            )));
        }
        let response = R::Response::decode(&mut body, version).map_err(decode)?;
        if body.has_remaining() {
            tracing::debug!(addr = self.addr, api = R::KEY, left = body.remaining(), "Response had bytes left over");
        }
        Ok(response)
    }
}
