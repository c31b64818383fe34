//! KEDA's external scaler service (`externalscaler.proto`, compiled from KEDA's released
//! module by `build.rs`), over plain TCP or TLS (OpenSSL; mutual when a client CA is set).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod, SslVerifyMode};
use prometheus::{GaugeVec, IntCounterVec, Opts, Registry};
use sluice_scaling::rules::Decision;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::{Scalers, TriggerSpec};
use crate::config::TlsFiles;
use crate::picture::Picture;

/// KEDA's messages and service (the client too: the demo calls the scaler the way KEDA does).
#[allow(clippy::all, missing_debug_implementations, unused_qualifications)]
pub mod pb {
    tonic::include_proto!("externalscaler");
}

use pb::external_scaler_server::{ExternalScaler, ExternalScalerServer};
use pb::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec, MetricValue,
    ScaledObjectRef,
};

/// The scaler's series on sluice-lag's `/metrics`.
#[derive(Debug, Clone)]
pub struct ScalerMetrics {
    replicas: GaugeVec,
    metric: GaugeVec,
    excluded: GaugeVec,
    decisions: IntCounterVec,
}

impl ScalerMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let labels = ["scaled_object", "consumergroup"];
        let gauge = |name: &str, help: &str| -> prometheus::Result<GaugeVec> {
            let g = GaugeVec::new(Opts::new(name, help), &labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let decisions = IntCounterVec::new(
            Opts::new("sluice_lag_scaler_decisions_total", "Scaler decisions by the rule that decided"),
            &["scaled_object", "consumergroup", "rule"],
        )?;
        registry.register(Box::new(decisions.clone()))?;
        Ok(Self {
            replicas: gauge(
                "sluice_lag_scaler_replicas",
                "Replicas the scaler wants (absent when its input is unknown)",
            )?,
            metric: gauge("sluice_lag_scaler_metric", "The metric served to KEDA (AverageValue 1 per replica)")?,
            excluded: gauge(
                "sluice_lag_scaler_excluded_lag_records",
                "Lag left out of the metric: partitions in STALL, which more pods cannot fix",
            )?,
            decisions,
        })
    }

    /// Sets the gauges; counts the decision when it is new (KEDA asks several times a poll).
    fn record(&self, object: &str, group: &str, d: &Decision, fresh: bool) {
        let labels = [object, group];
        match (d.replicas, d.metric) {
            (Some(r), Some(m)) => {
                self.replicas.with_label_values(&labels).set(f64::from(r));
                self.metric.with_label_values(&labels).set(m);
            }
            _ => {
                let _ = self.replicas.remove_label_values(&labels);
                let _ = self.metric.remove_label_values(&labels);
            }
        }
        self.excluded.with_label_values(&labels).set(d.stalled_lag as f64);
        if fresh {
            let rule = serde_json::to_value(d.rule).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            self.decisions.with_label_values(&[object, group, &rule]).inc();
        }
    }
}

/// The service.
#[derive(Debug, Clone)]
pub struct Service {
    pub scalers: Scalers,
    pub picture: watch::Receiver<Arc<Picture>>,
    /// A picture older than this is unknown input.
    pub stale_ms: i64,
    pub metrics: ScalerMetrics,
}

fn object(r: &ScaledObjectRef) -> String {
    format!("{}/{}", r.namespace, r.name)
}

impl Service {
    fn spec(r: &ScaledObjectRef) -> Result<TriggerSpec, Status> {
        TriggerSpec::from_metadata(&r.scaler_metadata).map_err(|e| Status::invalid_argument(e.to_string()))
    }

    fn decide(&self, r: &ScaledObjectRef) -> Result<(TriggerSpec, Decision), Status> {
        let spec = Self::spec(r)?;
        let picture = self.picture.borrow().clone();
        let (decision, fresh) =
            self.scalers.decide_fresh(&object(r), &spec, &picture, sluice_core::clock::now_ms(), self.stale_ms);
        self.metrics.record(&object(r), &spec.group, &decision, fresh);
        Ok((spec, decision))
    }

    fn active(&self, r: &ScaledObjectRef) -> Result<bool, Status> {
        let (spec, d) = self.decide(r)?;
        match d.lag {
            Some(lag) => Ok(lag > spec.activation_lag),
            None => Err(Status::unavailable(d.reason)),
        }
    }
}

type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalScaler for Service {
    async fn is_active(&self, request: Request<ScaledObjectRef>) -> Result<Response<IsActiveResponse>, Status> {
        Ok(Response::new(IsActiveResponse { result: self.active(request.get_ref())? }))
    }

    type StreamIsActiveStream = Streamed<IsActiveResponse>;

    /// Activity after every poll.
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let r = request.into_inner();
        Self::spec(&r)?;
        let this = self.clone();
        let polls = tokio_stream::wrappers::WatchStream::new(self.picture.clone());
        let stream = polls.map(move |_| this.active(&r).map(|result| IsActiveResponse { result }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let spec = Self::spec(request.get_ref())?;
        Ok(Response::new(GetMetricSpecResponse {
            metric_specs: vec![MetricSpec { metric_name: spec.metric_name(), target_size: 1, target_size_float: 1.0 }],
        }))
    }

    type StreamMetricSpecStream = Streamed<GetMetricSpecResponse>;

    /// The spec never changes for a ScaledObject: sent once, the stream then stays open.
    async fn stream_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        let spec = self.get_metric_spec(request).await?.into_inner();
        let stream = tokio_stream::once(Ok(spec)).chain(tokio_stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_metrics(&self, request: Request<GetMetricsRequest>) -> Result<Response<GetMetricsResponse>, Status> {
        let request = request.into_inner();
        let r = request.scaled_object_ref.ok_or_else(|| Status::invalid_argument("scaledObjectRef is missing"))?;
        let (spec, d) = self.decide(&r)?;
        let name = spec.metric_name();
        if request.metric_name != name {
            return Err(Status::not_found(format!("metric {:?}: this trigger serves {name:?}", request.metric_name)));
        }
        let value = d.metric.ok_or_else(|| Status::unavailable(d.reason.clone()))?;
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: name,
                metric_value: value.ceil() as i64,
                metric_value_float: value,
            }],
        }))
    }
}

/// Why the scaler's port could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding the scaler port {listen}: {source}")]
    Bind {
        listen: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[source] openssl::error::ErrorStack),
    /// A certificate, key or CA file OpenSSL refused.
    #[error("{}: {source}", .path.display())]
    TlsFile {
        path: std::path::PathBuf,
        #[source]
        source: openssl::error::ErrorStack,
    },
}

fn acceptor(tls: &TlsFiles) -> Result<SslAcceptor, ServeError> {
    fn file(path: &std::path::Path) -> impl FnOnce(openssl::error::ErrorStack) -> ServeError {
        let path = path.to_path_buf();
        move |source| ServeError::TlsFile { path, source }
    }
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).map_err(ServeError::Tls)?;
    b.set_certificate_chain_file(&tls.cert).map_err(file(&tls.cert))?;
    b.set_private_key_file(&tls.key, SslFiletype::PEM).map_err(file(&tls.key))?;
    b.check_private_key().map_err(file(&tls.key))?;
    b.set_alpn_select_callback(|_, offered| {
        openssl::ssl::select_next_proto(b"\x02h2", offered).ok_or(openssl::ssl::AlpnError::NOACK)
    });
    if let Some(ca) = &tls.client_ca {
        b.set_ca_file(ca).map_err(file(ca))?;
        b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
    }
    Ok(b.build())
}

/// A TLS connection tonic can serve.
struct TlsConn(tokio_openssl::SslStream<TcpStream>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for TlsConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Binds `listen` and serves until `stopped`; returns the bound address and the server task.
pub async fn serve(
    listen: SocketAddr,
    tls: Option<TlsFiles>,
    service: Service,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ServeError> {
    let bind = |source| ServeError::Bind { listen, source };
    let listener = TcpListener::bind(listen).await.map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;
    let router = tonic::transport::Server::builder().add_service(ExternalScalerServer::new(service));
    let task = match tls {
        None => {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tokio::spawn(async move {
                if let Err(e) = router.serve_with_incoming_shutdown(incoming, stopped).await {
                    tracing::error!(%e, "the scaler's gRPC server stopped");
                }
            })
        }
        Some(files) => {
            let acceptor = Arc::new(acceptor(&files)?);
            let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<TlsConn>>(16);
            tokio::spawn(accept_tls(listener, acceptor, tx));
            let incoming = tokio_stream::wrappers::ReceiverStream::new(rx);
            tokio::spawn(async move {
                if let Err(e) = router.serve_with_incoming_shutdown(incoming, stopped).await {
                    tracing::error!(%e, "the scaler's gRPC server stopped");
                }
            })
        }
    };
    Ok((addr, task))
}

/// Accepts and handshakes each connection on its own task (a slow client holds up no one).
async fn accept_tls(
    listener: TcpListener,
    acceptor: Arc<SslAcceptor>,
    tx: tokio::sync::mpsc::Sender<std::io::Result<TlsConn>>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%e, "accepting a scaler connection");
                continue;
            }
        };
        let (acceptor, tx) = (Arc::clone(&acceptor), tx.clone());
        if tx.is_closed() {
            return;
        }
        tokio::spawn(async move {
            let ssl = match openssl::ssl::Ssl::new(acceptor.context()) {
                Ok(s) => s,
                Err(e) => return tracing::warn!(%e, "a TLS session"),
            };
            let Ok(mut stream) = tokio_openssl::SslStream::new(ssl, tcp) else { return };
            match Pin::new(&mut stream).accept().await {
                Ok(()) => {
                    let _ = tx.send(Ok(TlsConn(stream))).await;
                }
                Err(e) => tracing::warn!(%peer, %e, "a scaler client's TLS handshake failed"),
            }
        });
    }
}
