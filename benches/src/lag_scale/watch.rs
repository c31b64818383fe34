//! sluice-lag as a child process, observed from outside: its CPU and memory
//! from /proc, what it says of itself from `/metrics`, and the time of the
//! picture it serves from `/groups`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_service::process::{Spawned, free_port, http_get, http_get_within, metric, wait_ready};

use crate::machine;

/// A running sluice-lag.
pub struct Watched {
    process: Spawned,
    port: u16,
}

/// One read of `/metrics` (and `/groups` for the picture's time).
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// `sluice_lag_poll_duration_seconds`: polls done, and their total seconds.
    pub polls: u64,
    pub poll_seconds: f64,
    pub groups: i64,
    pub errors: f64,
    /// Series of `kafka_consumergroup_lag` and their sum.
    pub lag_series: usize,
    pub lag_sum: f64,
    /// `sluice_lag_time_lag_seconds` by (group, topic, partition).
    pub time_lags: HashMap<(String, String, String), f64>,
    /// `sluice_lag_requests_total` by API.
    pub requests: BTreeMap<String, u64>,
    pub bytes: usize,
    pub series: usize,
    /// When the served picture's poll started, Unix ms.
    pub at_ms: i64,
}

/// What one read of the admin port cost sluice-lag.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ScrapeCost {
    pub metrics_bytes: usize,
    pub metrics_series: usize,
    /// `/metrics` and `/groups`, wall and sluice-lag's CPU.
    pub wall_ms: f64,
    pub cpu_ms: f64,
}

/// The labels of a Prometheus text line, `name{a="x",b="y"} v` → [(a, x), (b, y)].
fn labels(line: &str) -> Vec<(&str, &str)> {
    let Some(inner) = line.split_once('{').and_then(|(_, rest)| rest.rsplit_once('}')).map(|(l, _)| l) else {
        return Vec::new();
    };
    inner.split("\",").filter_map(|pair| pair.split_once("=\"").map(|(k, v)| (k, v.trim_end_matches('"')))).collect()
}

fn value(line: &str) -> Option<f64> {
    sluice_service::process::sample(line).map(|(_, value, _)| value)
}

impl Scrape {
    /// Reads the figures out of a `/metrics` text.
    pub fn parse(text: &str) -> Self {
        let mut s = Self {
            polls: metric(text, "sluice_lag_poll_duration_seconds_count", "") as u64,
            poll_seconds: metric(text, "sluice_lag_poll_duration_seconds_sum", ""),
            groups: metric(text, "sluice_lag_groups", "") as i64,
            errors: metric(text, "sluice_lag_poll_errors_total", ""),
            bytes: text.len(),
            ..Self::default()
        };
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            s.series += 1;
            if line.starts_with("kafka_consumergroup_lag{") {
                s.lag_series += 1;
                s.lag_sum += value(line).unwrap_or(f64::NAN);
            } else if line.starts_with("sluice_lag_time_lag_seconds{") {
                let l: HashMap<&str, &str> = labels(line).into_iter().collect();
                let key = |k: &str| l.get(k).map_or_else(String::new, |v| v.to_string());
                let at = (key("consumergroup"), key("topic"), key("partition"));
                s.time_lags.insert(at, value(line).unwrap_or(f64::NAN));
            } else if line.starts_with("sluice_lag_requests_total{") {
                let api = labels(line).into_iter().find(|(k, _)| *k == "api").map_or("", |(_, v)| v).to_string();
                *s.requests.entry(api).or_default() += value(line).unwrap_or(0.0) as u64;
            }
        }
        s
    }

    /// Requests since `earlier`, by API (those with none left out).
    pub fn requests_since(&self, earlier: &Self) -> BTreeMap<String, u64> {
        self.requests
            .iter()
            .map(|(api, n)| (api.clone(), n - earlier.requests.get(api).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

impl Watched {
    /// Starts `binary` on `brokers` with `env` (names without `SLUICE_LAG_`)
    /// (its log to `log`).
    pub fn start(binary: &Path, brokers: &str, env: &[(&str, String)], log: &Path) -> Result<Self> {
        let port = free_port()?;
        let mut cmd = Command::new(binary);
        cmd.env("SLUICE_LOG_FORMAT", "plain")
            .env("SLUICE_LAG_BROKERS", brokers)
            .env("SLUICE_LAG_ADMIN_LISTEN", format!("127.0.0.1:{port}"));
        for (k, v) in env {
            cmd.env(format!("SLUICE_LAG_{k}"), v);
        }
        let process = Spawned::spawn(&mut cmd, log).with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self { process, port })
    }

    /// Waits for the first complete poll.
    pub async fn ready(&self, limit: Duration) -> Result<()> {
        if wait_ready(self.port, limit).await {
            return Ok(());
        }
        let errors: Vec<String> = http_get(self.port, "/metrics")
            .map(|(_, text)| {
                text.lines().filter(|l| l.starts_with("sluice_lag_poll_errors_total")).map(String::from).collect()
            })
            .unwrap_or_default();
        anyhow::bail!("sluice-lag not ready within {limit:?}: {errors:?}\n{}", self.process.log_tail(20))
    }

    /// Its CPU time so far (user + system).
    pub fn cpu(&self) -> Duration {
        machine::cpu_time(&self.process.pid().to_string())
    }

    /// Resident and peak resident memory, MiB.
    pub fn rss_mib(&self) -> (f64, f64) {
        let status = format!("/proc/{}/status", self.process.pid());
        let mib = |field| machine::proc_kib(&status, field).unwrap_or(0) as f64 / 1024.0;
        (mib("VmRSS:"), mib("VmHWM:"))
    }

    /// Reads `/metrics` and the served picture's time, and what that cost.
    pub async fn scrape(&self) -> Result<(Scrape, ScrapeCost)> {
        let (cpu, started) = (self.cpu(), Instant::now());
        let limit = Duration::from_secs(120);
        let (code, text) = http_get_within("127.0.0.1", self.port, "/metrics", limit).context("GET /metrics")?;
        anyhow::ensure!(code == 200, "GET /metrics: {code}");
        let mut scrape = Scrape::parse(&text);
        // The picture is sent just after the metrics are published: wait for it.
        for _ in 0..100 {
            let (_, body) = http_get(self.port, "/groups").context("GET /groups")?;
            let v: serde_json::Value = serde_json::from_str(&body).context("/groups is not JSON")?;
            scrape.at_ms = v["at_ms"].as_i64().unwrap_or(0);
            if scrape.at_ms > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let cost = ScrapeCost {
            metrics_bytes: scrape.bytes,
            metrics_series: scrape.series,
            wall_ms: started.elapsed().as_secs_f64() * 1e3,
            cpu_ms: (self.cpu() - cpu).as_secs_f64() * 1e3,
        };
        Ok((scrape, cost))
    }

    /// SIGTERM, then the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.process.terminate(Duration::from_secs(10)).0
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail(20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_figures_out_of_the_text_format() {
        let text = "# HELP x\nsluice_lag_poll_duration_seconds_sum 1.5\nsluice_lag_poll_duration_seconds_count 3\n\
            kafka_consumergroup_lag{consumergroup=\"g\",partition=\"0\",topic=\"t\"} 4\n\
            kafka_consumergroup_lag_sum{consumergroup=\"g\",topic=\"t\"} 4\n\
            sluice_lag_time_lag_seconds{consumergroup=\"g\",partition=\"0\",topic=\"t\"} 12.5\n\
            sluice_lag_requests_total{api=\"Fetch\"} 7\nsluice_lag_groups 1\n";
        let s = Scrape::parse(text);
        assert_eq!((s.polls, s.poll_seconds, s.groups, s.lag_series, s.lag_sum), (3, 1.5, 1, 1, 4.0));
        assert_eq!(s.time_lags[&("g".into(), "t".into(), "0".into())], 12.5);
        assert_eq!(s.requests["Fetch"], 7);
        assert_eq!(s.series, 7);
    }
}
