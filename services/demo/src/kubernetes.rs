//! `--kubernetes`: the chart installed with the real helm into a real control plane
//! (`deploy/local/cluster.sh`: kube-apiserver, kube-controller-manager's HPA controller,
//! KEDA's operator, metrics adapter and webhooks) in place of the stand-in engine. No
//! kubelet runs there, so the demo plays its part for two Deployments: the **replica
//! follower** runs as many local processors as the processor Deployment's `spec.replicas`
//! (which the HPA that KEDA made from the chart's ScaledObject writes), each with the
//! pod's environment as the API server holds it (Secrets resolved), and sluice-lag with
//! its pod's environment, its scaler where the chart's `lag.scaler.address` tells KEDA.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use openssl::ssl::{SslConnector, SslMethod};
use serde_json::Value;

/// The API server, as the kubeconfig names it (cluster.sh's: a CA file and a bearer token).
#[derive(Debug)]
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
        let config = sluice_scaling::values::parse_yaml(&name, &text).map_err(anyhow::Error::msg)?;
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
        let tcp = TcpStream::connect(&self.addr).with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut s = self.tls.connect(&self.host, tcp).with_context(|| format!("TLS to {}", self.addr))?;
        // HTTP/1.0: the body ends with the connection, never chunked.
        let request = format!(
            "GET {path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\n\r\n",
            self.addr, self.token
        );
        s.write_all(request.as_bytes())?;
        let mut raw = Vec::new();
        // A server that closes without TLS's close_notify ends the read with an error: the
        // body is whole when its Content-Length arrived or the headers said nothing of one.
        let ended = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").with_context(|| format!("GET {path}: no HTTP answer"))?;
        let length = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok()).flatten()
        });
        if let Err(e) = ended
            && length.is_some_and(|n| body.len() < n)
        {
            bail!("GET {path}: the answer was cut short: {e}");
        }
        let code: u16 = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        match code {
            200 => Ok(Some(serde_json::from_str(body).with_context(|| format!("GET {path}: not JSON"))?)),
            404 => Ok(None),
            _ => {
                let message = serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v.get("message").and_then(Value::as_str).map(String::from));
                bail!("GET {path}: HTTP {code}: {}", message.unwrap_or_else(|| body.chars().take(200).collect()))
            }
        }
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

    /// The first container's environment as a pod of the Deployment would get it: literal
    /// values, Secret and ConfigMap keys read from the API server, the pod's name.
    pub fn pod_env(&self, component: &str, pod: &str) -> anyhow::Result<Vec<(String, String)>> {
        let d = self.deployment(component)?;
        let env = d.pointer("/spec/template/spec/containers/0/env").and_then(Value::as_array).cloned();
        let mut out = Vec::new();
        for e in env.unwrap_or_default() {
            let name = e["name"].as_str().unwrap_or_default().to_string();
            let value = match (&e["value"], &e["valueFrom"]) {
                (Value::String(v), _) => v.clone(),
                (_, Value::Object(from)) => self.value_from(&name, from, pod)?,
                _ => String::new(),
            };
            out.push((name, value));
        }
        Ok(out)
    }

    fn value_from(&self, name: &str, from: &serde_json::Map<String, Value>, pod: &str) -> anyhow::Result<String> {
        let key_of = |kind: &str, r: &Value| -> anyhow::Result<Option<String>> {
            let (object, key) = (r["name"].as_str().unwrap_or_default(), r["key"].as_str().unwrap_or_default());
            let path = format!("/api/v1/namespaces/{}/{kind}/{object}", self.namespace);
            let Some(obj) = self.api.get(&path)? else {
                bail!("{name}: {kind} {object} does not exist (a pod would not start)");
            };
            Ok(obj.pointer(&format!("/data/{key}")).and_then(Value::as_str).map(String::from))
        };
        if let Some(r) = from.get("secretKeyRef") {
            let encoded = key_of("secrets", r)?.with_context(|| format!("{name}: no such key in the Secret"))?;
            let bytes = openssl::base64::decode_block(&encoded)?;
            return Ok(String::from_utf8(bytes)?);
        }
        if let Some(r) = from.get("configMapKeyRef") {
            return key_of("configmaps", r)?.with_context(|| format!("{name}: no such key in the ConfigMap"));
        }
        match from.get("fieldRef").and_then(|f| f["fieldPath"].as_str()) {
            Some("metadata.name") => Ok(pod.to_string()),
            Some("metadata.namespace") => Ok(self.namespace.clone()),
            other => bail!("{name}: valueFrom {other:?} is not something the follower can give"),
        }
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

/// The pod environment with the local process's own ports over it (every pod of a
/// Deployment listens on the same port; here they share one address).
pub fn local_env(pod: Vec<(String, String)>, overrides: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        pod.into_iter().filter(|(k, _)| k != "SLUICE_LOG_FORMAT" && !overrides.iter().any(|(o, _)| o == k)).collect();
    env.extend(overrides.iter().cloned());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_process_keeps_the_pod_s_settings_and_takes_its_own_ports() {
        let pod = vec![
            ("SLUICE_PROCESSOR_GROUP_ID".to_string(), "g".to_string()),
            ("SLUICE_PROCESSOR_ADMIN_LISTEN".to_string(), "0.0.0.0:9090".to_string()),
            ("SLUICE_LOG_FORMAT".to_string(), "json".to_string()),
        ];
        let env = local_env(pod, &[("SLUICE_PROCESSOR_ADMIN_LISTEN".into(), "127.0.0.1:4000".into())]);
        assert_eq!(
            env,
            vec![
                ("SLUICE_PROCESSOR_GROUP_ID".to_string(), "g".to_string()),
                ("SLUICE_PROCESSOR_ADMIN_LISTEN".to_string(), "127.0.0.1:4000".to_string()),
            ]
        );
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
