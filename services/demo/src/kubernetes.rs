//! `--kubernetes`: the chart installed with the real helm into a real cluster
//! (`deploy/local/cluster.sh`: kube-apiserver, kube-controller-manager's HPA controller,
//! KEDA's operator, metrics adapter and webhooks, kube-scheduler, and a node whose kubelet
//! runs the pods) in place of the stand-in engine. The processors and sluice-lag are the
//! chart's pods, from the images the project built: KEDA scales the processor Deployment
//! through the HPA it made, the kubelet starts and stops the pods (SIGTERM, then the grace
//! period), and the demo watches them through the API server and reads each pod's
//! `/metrics` on its address. The chain, the ingest and the scheduler stay the demo's own
//! processes: they are the traffic and the record it is checked against.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use openssl::ssl::{SslConnector, SslMethod};
use serde_json::Value;

/// The API server, as the kubeconfig names it (cluster.sh's: a CA file and a bearer token).
#[derive(Debug, Clone)]
pub struct Api {
    addr: String,
    host: String,
    token: String,
    tls: SslConnector,
}

impl Api {
    pub fn from_kubeconfig(path: &Path) -> anyhow::Result<Self> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading the kubeconfig {name}"))?;
        let config = sluice_scaling::values::parse_yaml(&name, &text)?;
        let field = |pointer: &str| {
            config.pointer(pointer).and_then(Value::as_str).map(String::from).with_context(|| {
                format!("{name}: no {pointer} (the demo reads kubeconfigs like cluster.sh's: a CA file and a token)")
            })
        };
        let server = field("/clusters/0/cluster/server")?;
        let (ca, token) = (field("/clusters/0/cluster/certificate-authority")?, field("/users/0/user/token")?);
        let addr = server.strip_prefix("https://").with_context(|| format!("{name}: the server is not https://"))?;
        let addr = addr.trim_end_matches('/').to_string();
        let mut tls = SslConnector::builder(SslMethod::tls_client())?;
        tls.set_ca_file(&ca).with_context(|| format!("{name}: reading the CA {ca}"))?;
        let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h).to_string();
        Ok(Self { addr, host, token, tls: tls.build() })
    }

    /// GET `path`: the JSON body of a 200, `None` for a 404, an error otherwise.
    pub fn get(&self, path: &str) -> anyhow::Result<Option<Value>> {
        self.send("GET", path, None)
    }

    /// `method path` with an optional (content type, body): the JSON body of a 2xx, `None`
    /// for a 404, an error naming the server's message otherwise.
    pub fn send(&self, method: &str, path: &str, body: Option<(&str, &str)>) -> anyhow::Result<Option<Value>> {
        let mut s = self.request(method, path, body, Duration::from_secs(10))?;
        let mut raw = Vec::new();
        // A server that closes without TLS's close_notify ends the read with an error: the
        // body is whole when its Content-Length arrived or the headers said nothing of one.
        let ended = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").with_context(|| format!("{method} {path}: no HTTP answer"))?;
        let length = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok()).flatten()
        });
        if let Err(e) = ended
            && length.is_some_and(|n| body.len() < n)
        {
            bail!("{method} {path}: the answer was cut short: {e}");
        }
        let code: u16 = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        match code {
            200..=299 => Ok(Some(serde_json::from_str(body).with_context(|| format!("{method} {path}: not JSON"))?)),
            404 => Ok(None),
            _ => {
                let message = serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v.get("message").and_then(Value::as_str).map(String::from));
                bail!("{method} {path}: HTTP {code}: {}", message.unwrap_or_else(|| body.chars().take(200).collect()))
            }
        }
    }
}

impl Api {
    /// Sends `method path` (HTTP/1.0: the answer's body ends with the connection, never
    /// chunked) and returns the connection to read the answer from.
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &str)>,
        timeout: Duration,
    ) -> anyhow::Result<openssl::ssl::SslStream<TcpStream>> {
        let tcp = TcpStream::connect(&self.addr).with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_read_timeout(Some(timeout))?;
        let mut s = self.tls.connect(&self.host, tcp).with_context(|| format!("TLS to {}", self.addr))?;
        let mut request = format!(
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\n",
            self.addr, self.token
        );
        if let Some((kind, text)) = body {
            request.push_str(&format!("Content-Type: {kind}\r\nContent-Length: {}\r\n", text.len()));
        }
        request.push_str("\r\n");
        request.push_str(body.map_or("", |(_, text)| text));
        s.write_all(request.as_bytes())?;
        Ok(s)
    }

    /// GET `path` and copy the answer's body into `to` as it comes, until the server ends it
    /// (a followed log ends when its container exits) or nothing comes for `idle`.
    pub fn stream(&self, path: &str, to: &mut impl Write, idle: Duration) -> anyhow::Result<()> {
        let mut s = self.request("GET", path, None, idle)?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            anyhow::ensure!(s.read(&mut byte)? == 1, "GET {path}: no HTTP answer");
            head.push(byte[0]);
        }
        let code = String::from_utf8_lossy(&head).split_whitespace().nth(1).and_then(|c| c.parse::<u16>().ok());
        anyhow::ensure!(code == Some(200), "GET {path}: HTTP {code:?}");
        // The server closes without TLS's close_notify: what arrived is what there was.
        let _ = std::io::copy(&mut s, to);
        Ok(())
    }
}

/// One release of the chart in one namespace.
#[derive(Debug)]
pub struct Cluster {
    pub api: Api,
    helm: PathBuf,
    kubeconfig: PathBuf,
    chart: PathBuf,
    pub namespace: String,
    /// The release's name, which is also its `fullname` (it contains the chart's name).
    pub release: String,
}

/// What the HPA that KEDA made says now.
#[derive(Debug, Clone, PartialEq)]
pub struct HpaView {
    pub current: u32,
    pub desired: u32,
    /// The external metric's current average value, as the HPA last read it.
    pub metric: Option<String>,
}

impl Cluster {
    pub fn new(kubeconfig: &Path, helm: &Path, chart: &Path, namespace: &str) -> anyhow::Result<Self> {
        Ok(Self {
            api: Api::from_kubeconfig(kubeconfig)?,
            helm: helm.into(),
            kubeconfig: kubeconfig.into(),
            chart: chart.into(),
            namespace: namespace.into(),
            release: "sluice".into(),
        })
    }

    /// The API server's version, e.g. `v1.36.4`.
    pub fn version(&self) -> anyhow::Result<String> {
        let v = self.api.get("/version")?.context("no /version")?;
        Ok(v["gitVersion"].as_str().unwrap_or("unknown").to_string())
    }

    fn helm(&self, args: &[String]) -> anyhow::Result<()> {
        let out = Command::new(&self.helm)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .with_context(|| format!("running {}", self.helm.display()))?;
        if !out.status.success() {
            bail!("helm {}: {}", args.first().map_or("", String::as_str), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }

    /// `helm upgrade --install` of the chart with `values` files and `sets` over them.
    pub fn install(&self, values: &[&Path], sets: &[(String, String)]) -> anyhow::Result<()> {
        let mut args: Vec<String> = ["upgrade", "--install", &self.release, &self.chart.display().to_string()]
            .into_iter()
            .map(String::from)
            .collect();
        args.extend(["--namespace".into(), self.namespace.clone(), "--create-namespace".into()]);
        for v in values {
            args.extend(["-f".into(), v.display().to_string()]);
        }
        for (k, v) in sets {
            // Numbers and booleans typed (the schema checks types), everything else a string.
            let typed = v.parse::<f64>().is_ok() || v == "true" || v == "false";
            let flag = if typed { "--set" } else { "--set-string" };
            args.extend([flag.into(), format!("{k}={}", v.replace(',', "\\,"))]);
        }
        self.helm(&args)
    }

    pub fn uninstall(&self) -> anyhow::Result<()> {
        self.helm(&["uninstall".into(), self.release.clone(), "--namespace".into(), self.namespace.clone()])
    }

    fn deployment(&self, component: &str) -> anyhow::Result<Value> {
        let path = format!("/apis/apps/v1/namespaces/{}/deployments/{}-{component}", self.namespace, self.release);
        self.api
            .get(&path)?
            .with_context(|| format!("no Deployment {}-{component} in {}", self.release, self.namespace))
    }

    /// The Deployment's `spec.replicas`: what the HPA last wrote.
    pub fn replicas(&self, component: &str) -> anyhow::Result<u32> {
        let d = self.deployment(component)?;
        Ok(d.pointer("/spec/replicas").and_then(Value::as_u64).unwrap_or(1) as u32)
    }

    /// Every pod of the release, as the API server has them.
    pub fn pods(&self) -> anyhow::Result<Vec<PodView>> {
        let path = format!(
            "/api/v1/namespaces/{}/pods?labelSelector=app.kubernetes.io/instance%3D{}",
            self.namespace, self.release
        );
        let list = self.api.get(&path)?.with_context(|| format!("no pods list in {}", self.namespace))?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        Ok(items.iter().map(PodView::from_json).collect())
    }

    /// Follows a pod's log into `to` in the background until its container exits (the
    /// kubelet deletes a stopped pod's log with it: what a processor printed while it shut down
    /// is read while it does).
    pub fn follow_log(&self, pod: &str, to: PathBuf) -> std::thread::JoinHandle<anyhow::Result<()>> {
        let (api, path) =
            (self.api.clone(), format!("/api/v1/namespaces/{}/pods/{pod}/log?follow=true", self.namespace));
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(&to).with_context(|| format!("creating {}", to.display()))?;
            api.stream(&path, &mut file, Duration::from_secs(120))
        })
    }

    /// Sets a component's Deployment to `replicas` through its scale subresource, as
    /// `kubectl scale` does (the ingest to 0 ends the traffic).
    pub fn scale(&self, component: &str, replicas: u32) -> anyhow::Result<()> {
        let path =
            format!("/apis/apps/v1/namespaces/{}/deployments/{}-{component}/scale", self.namespace, self.release);
        let body = serde_json::json!({"spec": {"replicas": replicas}}).to_string();
        self.api.send("PATCH", &path, Some(("application/merge-patch+json", &body)))?;
        Ok(())
    }

    /// The HPA KEDA made for the processors' ScaledObject, if it exists yet.
    pub fn hpa(&self) -> anyhow::Result<Option<HpaView>> {
        let path = format!(
            "/apis/autoscaling/v2/namespaces/{}/horizontalpodautoscalers/keda-hpa-{}-processor",
            self.namespace, self.release
        );
        let Some(h) = self.api.get(&path)? else { return Ok(None) };
        let n = |p: &str| h.pointer(p).and_then(Value::as_u64).unwrap_or(0) as u32;
        let metric = h.pointer("/status/currentMetrics/0/external/current/averageValue").and_then(Value::as_str);
        Ok(Some(HpaView {
            current: n("/status/currentReplicas"),
            desired: n("/status/desiredReplicas"),
            metric: metric.map(String::from),
        }))
    }
}

/// One pod, as far as the demo needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    pub name: String,
    /// Its `app.kubernetes.io/component` (processor, lag, ingest, scheduler, chainsim).
    pub component: String,
    /// Its address on the node's bridge, once it has one.
    pub ip: Option<String>,
    pub node: Option<String>,
    /// Its Ready condition (the readiness probe on /ready passing).
    pub ready: bool,
    /// Deleted and shutting down (SIGTERM sent, the grace period running).
    pub terminating: bool,
    /// How long the kubelet waits after SIGTERM: the deletion's grace period once it is
    /// deleted (0: killed at once, as `kubectl delete --grace-period=0 --force`), its
    /// `terminationGracePeriodSeconds` before.
    pub grace_seconds: u64,
}

impl PodView {
    fn from_json(pod: &Value) -> Self {
        let text = |p: &str| pod.pointer(p).and_then(Value::as_str).map(String::from);
        let ready = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        Self {
            name: text("/metadata/name").unwrap_or_default(),
            component: text("/metadata/labels/app.kubernetes.io~1component").unwrap_or_default(),
            ip: text("/status/podIP"),
            node: text("/spec/nodeName"),
            ready,
            terminating: pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()),
            grace_seconds: pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds"))
                .and_then(Value::as_u64)
                .unwrap_or(30),
        }
    }

    /// Serving: Ready and not shutting down.
    pub fn serving(&self) -> bool {
        self.ready && !self.terminating
    }

    /// GET `path` on the pod's `port`: its status and body.
    pub fn http_get(&self, port: u16, path: &str) -> Option<(u16, String)> {
        sluice_service::process::http_get_at(self.ip.as_deref()?, port, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_serves_when_ready_and_not_shutting_down() {
        let pod = |ready: &str, deleted: Value| {
            PodView::from_json(&serde_json::json!({
                "metadata": {"name": "sluice-processor-1", "deletionTimestamp": deleted,
                             "labels": {"app.kubernetes.io/component": "processor"}},
                "spec": {"nodeName": "sluice-node"},
                "status": {"podIP": "10.244.0.7", "conditions": [{"type": "Ready", "status": ready}]},
            }))
        };
        let serving = pod("True", Value::Null);
        assert_eq!((serving.ip.as_deref(), serving.node.as_deref()), (Some("10.244.0.7"), Some("sluice-node")));
        assert_eq!(serving.component, "processor");
        assert!(serving.serving());
        assert!(!pod("False", Value::Null).serving(), "not ready");
        assert!(!pod("True", "2026-12-03T00:00:00Z".into()).serving(), "terminating");
    }

    #[test]
    fn a_kubeconfig_without_a_token_is_refused_naming_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("sluice-demo-kubeconfig-{}", std::process::id()));
        std::fs::write(&dir, "clusters:\n- cluster: {server: 'https://127.0.0.1:1', certificate-authority: /x}\n")
            .expect("write");
        let err = Api::from_kubeconfig(&dir).expect_err("no token").to_string();
        let _ = std::fs::remove_file(&dir);
        assert!(err.contains("/users/0/user/token"), "{err}");
    }
}
