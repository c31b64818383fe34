//! The processes the demo runs: each deployable's real binary, with its
//! log in the run's folder and its admin port for `/metrics`. Spawning,
//! signals and reading the admin port are `sluice_service::process`, which
//! the tests share; what is the demo's own is stopping gracefully (also when
//! dropped) and the histogram arithmetic of the live view.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sluice_service::process::{Spawned, http_get};

/// One running process; dropping it stops it (SIGTERM, SIGKILL after 10 s).
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    pub admin_port: u16,
    process: Spawned,
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
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .env("SLUICE_LOG_FORMAT", "plain")
            .env("SLUICE_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)));
        let process = Spawned::spawn(&mut cmd, logs.join(format!("{name}.log")))?;
        Ok(Self { name: name.into(), admin_port, process })
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// SIGKILL: no drain, no commit, no cursor written.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`); one that already exited gets nothing.
    pub fn signal(&self, signal: &str) {
        let _ = self.process.signal(signal);
    }

    /// Sends SIGTERM (the process starts its shutdown).
    pub fn terminate(&self) {
        // One that already exited has nothing to shut down.
        let _ = self.process.signal("TERM");
    }

    /// SIGTERM, then SIGKILL after `limit`; returns the exit code if clean.
    pub fn stop(&mut self, limit: Duration) -> Option<i32> {
        self.process.terminate(limit).0
    }

    /// The admin port's `/metrics` text, or empty when it does not answer.
    pub fn metrics(&self) -> String {
        http_get(self.admin_port, "/metrics").map(|(_, body)| body).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Gracefully, unlike `Spawned`'s own drop (a kill): a processor gets to
        // commit and the ingest to write its cursor, as on a pod's deletion.
        self.stop(Duration::from_secs(10));
    }
}

/// Prints a line of the demo's output.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// `deploy/local/stack.sh` of the checkout this binary was built from.
pub fn stack_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/stack.sh")
}

/// Cumulative histogram buckets of `name` summed over every text and
/// series: (upper bound, count), sorted.
pub fn buckets<'a>(texts: impl IntoIterator<Item = &'a str>, name: &str) -> Vec<(f64, f64)> {
    buckets_where(texts, name, "")
}

/// [`buckets`] of the series whose line contains `labels` (e.g. `topic="dex.swaps"`).
pub fn buckets_where<'a>(texts: impl IntoIterator<Item = &'a str>, name: &str, labels: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = Vec::new();
    for text in texts {
        for line in text.lines().filter(|l| l.starts_with(&prefix) && l.contains(labels)) {
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
    fn buckets_and_quantiles_from_the_text_format() {
        let text = "# HELP x\nm_total{outcome=\"ok\"} 5\nh_bucket{le=\"0.1\"} 90\nh_bucket{le=\"1\"} 99\n\
                    h_bucket{le=\"+Inf\"} 100\n";
        let after = buckets([text, text], "h");
        assert_eq!(after, vec![(0.1, 180.0), (1.0, 198.0), (f64::INFINITY, 200.0)]);
        assert_eq!(quantile(&[], &after, 0.5), Some(0.1));
        assert_eq!(quantile(&[], &after, 0.99), Some(1.0));
        let before = vec![(0.1, 180.0), (1.0, 180.0), (f64::INFINITY, 180.0)];
        assert_eq!(quantile(&before, &after, 0.5), Some(1.0), "only the new observations count");
        assert_eq!(quantile(&after, &after, 0.5), None);
    }
}
