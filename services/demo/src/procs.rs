//! The processes the demo runs: each deployable's real binary, with its
//! log in the run's folder and its admin port for `/metrics`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free local port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(0, |a| a.port())
}

/// One running process.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    pub admin_port: u16,
    child: Option<Child>,
}

/// Where the binaries are: next to this one (`cargo build` puts every
/// workspace binary in the same folder).
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let here = std::env::current_exe()?;
    let dir = here.parent().ok_or_else(|| anyhow::anyhow!("no folder for {}", here.display()))?;
    let path = dir.join(name);
    anyhow::ensure!(
        path.exists(),
        "{} is missing: build every binary first (deploy/local/demo.sh does: cargo build --release --bins)",
        path.display()
    );
    Ok(path)
}

impl Proc {
    /// Starts `binary args…` with `env`, logging to `logs/<name>.log`.
    pub fn start(
        name: &str,
        binary: &Path,
        args: &[&str],
        env: &[(String, String)],
        admin_port: u16,
        logs: &Path,
    ) -> anyhow::Result<Self> {
        let log = std::fs::File::create(logs.join(format!("{name}.log")))?;
        let mut cmd = Command::new(binary);
        cmd.args(args).env("SLUICE_LOG_FORMAT", "plain").env("SLUICE_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn()?;
        Ok(Self { name: name.into(), admin_port, child: Some(child) })
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends SIGTERM (the process starts its shutdown).
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        }
    }

    /// SIGTERM, then SIGKILL after `limit`; returns the exit code if clean.
    pub fn stop(&mut self, limit: Duration) -> Option<i32> {
        self.terminate();
        let mut child = self.child.take()?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The admin port's `/metrics` text, or empty when it does not answer.
    pub fn metrics(&self) -> String {
        scrape(self.admin_port, "/metrics").unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

/// `GET path` on a local port (HTTP/1.0): the body.
pub fn scrape(port: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// The sum of a metric's samples whose labels contain `labels`.
pub fn sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Cumulative histogram buckets of `name` summed over every text and
/// series: (upper bound, count), sorted.
pub fn buckets<'a>(texts: impl IntoIterator<Item = &'a str>, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = Vec::new();
    for text in texts {
        for line in text.lines().filter(|l| l.starts_with(&prefix)) {
            let Some(le) = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else { continue };
            let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::INFINITY) };
            let count: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            match out.iter_mut().find(|(b, _)| *b == bound) {
                Some(entry) => entry.1 += count,
                None => out.push((bound, count)),
            }
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// Stops every process of `procs` at once (SIGTERM to all, then waits):
/// stopping them one by one would hand a lease from one to the next.
pub fn stop_all(procs: &mut [Proc], limit: Duration) {
    for p in procs.iter() {
        p.terminate();
    }
    for p in procs.iter_mut() {
        p.stop(limit);
    }
}

/// The `q` quantile of the observations between two bucket snapshots
/// (the upper bound of the bucket it falls in).
pub fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let deltas: Vec<(f64, f64)> =
        after.iter().map(|(b, c)| (*b, c - before.iter().find(|(bb, _)| bb == b).map_or(0.0, |(_, cc)| *cc))).collect();
    let total = deltas.last()?.1;
    if total <= 0.0 {
        return None;
    }
    deltas.iter().find(|(_, c)| *c >= total * q).map(|(b, _)| *b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_quantiles_from_the_text_format() {
        let text = "# HELP x\nm_total{outcome=\"ok\"} 5\nm_total{outcome=\"dlq\"} 2\nm_totalx 9\n\
                    h_bucket{le=\"0.1\"} 90\nh_bucket{le=\"1\"} 99\nh_bucket{le=\"+Inf\"} 100\n";
        assert_eq!(sum(text, "m_total", ""), 7.0);
        assert_eq!(sum(text, "m_total", "outcome=\"ok\""), 5.0);
        let after = buckets([text, text], "h");
        assert_eq!(after, vec![(0.1, 180.0), (1.0, 198.0), (f64::INFINITY, 200.0)]);
        assert_eq!(quantile(&[], &after, 0.5), Some(0.1));
        assert_eq!(quantile(&[], &after, 0.99), Some(1.0));
        let before = vec![(0.1, 180.0), (1.0, 180.0), (f64::INFINITY, 180.0)];
        assert_eq!(quantile(&before, &after, 0.5), Some(1.0), "only the new observations count");
        assert_eq!(quantile(&after, &after, 0.5), None);
    }
}
