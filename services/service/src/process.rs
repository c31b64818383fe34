//! Deployables as child processes, for the programs that run them: the demo
//! (`sluice-demo`) and the integration tests (through `sluice-testkit`).
//!
//! [`Spawned`] owns one child: its log file, signals (pause, resume), SIGTERM
//! then wait, SIGKILL, and a kill when it is dropped. The free functions read
//! a child's admin port: a free port to give it, `GET`, the sum of a metric
//! in the Prometheus text format, waiting for `/ready`.
//!
//! Why here and not in `sluice-testkit`: the demo is a binary, and testkit is
//! made for tests. Its helpers panic on purpose (a missing stack must fail a
//! test loudly) and it may grow test-only dependencies. The demo links rdkafka
//! anyway, so depending on testkit would cost it nothing today; it would still
//! make a binary depend on test code. This crate is what the deployables share
//! and already serves the admin port, so the reading side sits next to it; a
//! deployable that spawns nothing links none of this. Testkit re-exports it.
//!
//! Signals other than SIGKILL go through `kill(1)`: std sends only SIGKILL,
//! and the workspace forbids the `unsafe` a direct `kill(2)` would need.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A child process this value owns: killed when dropped.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    log: PathBuf,
    /// Set once the child has been reaped. Its pid may then belong to another
    /// process, so no signal is sent to it any more.
    exited: Option<ExitStatus>,
}

impl Spawned {
    /// Starts `command` (program, args and env as the caller set them) with
    /// stdin closed and stdout and stderr appended to `log`, so a process
    /// restarted under the same log keeps its earlier run's lines.
    pub fn spawn(command: &mut Command, log: impl Into<PathBuf>) -> io::Result<Self> {
        let log = log.into();
        let out = OpenOptions::new().create(true).append(true).open(&log)?;
        let err = out.try_clone()?;
        let child = command.stdin(Stdio::null()).stdout(out).stderr(err).spawn()?;
        Ok(Self { child, log, exited: None })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where stdout and stderr go.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Whether it has not exited yet (paused with SIGSTOP counts as running).
    pub fn is_running(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.exited = Some(status);
                false
            }
            Err(_) => false,
        }
    }

    /// Sends `signal` (`TERM`, `STOP`, `CONT`, …); an error once it was reaped.
    pub fn signal(&self, signal: &str) -> io::Result<()> {
        let pid = self.pid();
        if let Some(status) = self.exited {
            return Err(io::Error::other(format!("kill -{signal} {pid}: it already exited ({status})")));
        }
        let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status()?;
        if status.success() { Ok(()) } else { Err(io::Error::other(format!("kill -{signal} {pid}: {status}"))) }
    }

    /// SIGSTOP: frozen until [`Spawned::resume`], as a stalled host leaves a process.
    pub fn pause(&self) -> io::Result<()> {
        self.signal("STOP")
    }

    /// SIGCONT after [`Spawned::pause`].
    pub fn resume(&self) -> io::Result<()> {
        self.signal("CONT")
    }

    /// SIGKILL (no chance to clean up), then waits for the exit.
    pub fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    /// SIGTERM, then waits up to `limit` for the exit (SIGKILL after it):
    /// the exit code (`None` if it had to be killed or died of a signal) and
    /// how long it took. A process that already exited answers at once.
    pub fn terminate(&mut self, limit: Duration) -> (Option<i32>, Duration) {
        let started = Instant::now();
        if let Some(status) = self.exited {
            return (status.code(), Duration::ZERO);
        }
        // A failed signal shows as the timeout below.
        let _ = self.signal("TERM");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exited = Some(status);
                return (status.code(), started.elapsed());
            }
            if started.elapsed() > limit {
                self.kill();
                return (None, started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.exited.is_none() {
            // CONT first, as the tests' own wrappers did. On Linux SIGKILL ends a
            // stopped process as well, so this matters only where it would not.
            let _ = self.resume();
            self.kill();
        }
    }
}

/// The last `lines` lines of the file at `path` (empty if it cannot be read),
/// for the failure message of a process that is no longer there.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A free loopback port for a child to take, from below the kernel's
/// ephemeral range. A port the kernel hands out for `:0` lies in that range,
/// and between this call and the child's bind any outgoing connection on the
/// machine may take it as its local end (seen in CI: a processor's admin port
/// taken so, the processor exiting with "address in use" while a parallel
/// test's clients connected). Each call in a process moves on to the next
/// port, from an offset that differs per process, and skips ports in use.
pub fn free_port() -> io::Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = PORTS_BELOW_EPHEMERAL;
    let high = ephemeral_low().map_or(high, |ephemeral| ephemeral.min(high));
    if high <= low + 1_000 {
        return Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    }
    let span = u32::from(high - low);
    let offset = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = low + u16::try_from(offset.wrapping_add(n) % span).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(io::ErrorKind::AddrInUse, format!("no free port in {low}..{high}")))
}

/// Where [`free_port`] looks: clear of the well-known ports and of the node
/// ports a local Kubernetes control plane serves (30000-32767).
const PORTS_BELOW_EPHEMERAL: (u16, u16) = (20_000, 30_000);

/// The first port of the kernel's ephemeral range, when it can be read.
fn ephemeral_low() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// `GET path` on a loopback port: the status code and the body; `None`
/// when nothing answers within 5 s.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at("127.0.0.1", port, path)
}

/// GET `path` from `host:port` (a pod's address, say): its status and body, or `None` when
/// nothing answers within 5 s.
pub fn http_get_at(host: &str, port: u16, path: &str) -> Option<(u16, String)> {
    http_get_within(host, port, path, Duration::from_secs(5))
}

/// GET `path` from `host:port`, waiting up to `limit` for each read (a large `/metrics`
/// can take longer than 5 s to start).
pub fn http_get_within(host: &str, port: u16, path: &str, limit: Duration) -> Option<(u16, String)> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host, port)).ok()?.next()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let end = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = &response[end + 4..];
    let chunked = head.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked { dechunk(body)? } else { body.to_vec() };
    Some((code, String::from_utf8_lossy(&body).into_owned()))
}

/// A `Transfer-Encoding: chunked` body, joined (`None` if it is cut short).
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&body[..line]).ok()?.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        body = &body[line + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// The sum of a metric's samples (Prometheus text format) whose labels
/// contain `labels` (`""`: every series).
pub fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']) && l.contains(labels))
        .filter_map(|l| sample(l).map(|(_, value, _)| value))
        .sum()
}

/// A sample line of the text exposition, `name{labels} value [timestamp_ms]`: its name
/// and labels, its value, and its timestamp if it carries one.
pub fn sample(line: &str) -> Option<(&str, f64, Option<i64>)> {
    let split = match line.rfind('}') {
        Some(brace) => brace + 1,
        None => line.find(' ')?,
    };
    let (head, rest) = line.split_at(split);
    let mut fields = rest.split_whitespace();
    let value = fields.next()?.parse().ok()?;
    let timestamp = match fields.next() {
        Some(t) => Some(t.parse().ok()?),
        None => None,
    };
    Some((head, value, timestamp))
}

/// Polls `/ready` on `port` until it answers 200 (true) or `limit` passed.
pub async fn wait_ready(port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if http_get(port, "/ready").is_some_and(|(code, _)| code == 200) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[cfg(test)]
mod tests;
