//! Services under test as processes: free ports, their admin endpoints
//! (`/ready`, `/metrics`) and stopping them.

use std::io::{Read, Write};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released for a child to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port").port()
}

/// `GET path` on a loopback port: the status code and the body; `None`
/// when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((code, body))
}

/// The sum of a metric's samples (Prometheus text format) whose labels
/// contain `labels` (`""`: every series).
pub fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sends `signal` (`TERM`, `STOP`, `CONT`, …) to `child`.
pub fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{signal} {}", child.id());
}

/// SIGTERM, then waits up to `limit` for the exit (SIGKILL after it):
/// the exit code (`None` if it had to be killed) and how long it took.
pub fn terminate(mut child: Child, limit: Duration) -> (Option<i32>, Duration) {
    let started = Instant::now();
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return (status.code(), started.elapsed());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return (None, started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_the_matching_series_only() {
        let text = "# HELP m_total x\nm_total{job=\"a\"} 2\nm_total{job=\"b\"} 3\nm_total_other 9\nm_total 1\n";
        assert_eq!(metric(text, "m_total", ""), 6.0);
        assert_eq!(metric(text, "m_total", "job=\"b\""), 3.0);
        assert_eq!(metric(text, "absent", ""), 0.0);
    }
}
