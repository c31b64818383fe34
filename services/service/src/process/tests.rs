use std::process::Command;
use std::time::Duration;

use super::*;

/// A log file of this test's own, removed first so no earlier run shows in it.
fn log(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("sluice-process-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn sh(script: &str) -> Command {
    let mut command = Command::new("sh");
    command.args(["-c", script]);
    command
}

/// The process state letter in `/proc/<pid>/stat` (`T`: stopped), if it exists.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn wait_exit(p: &mut Spawned) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.is_running() {
        assert!(Instant::now() < deadline, "still running after 5 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn args_env_and_both_streams_go_to_the_log_and_a_restart_appends() {
    let path = log("streams");
    for run in ["one", "two"] {
        let mut p = Spawned::spawn(sh("echo \"out $RUN\"; echo \"err $RUN\" >&2").env("RUN", run), &path).expect("sh");
        wait_exit(&mut p);
    }
    assert_eq!(log_tail(&path, 10), "out one\nerr one\nout two\nerr two");
    let p = Spawned::spawn(&mut Command::new("true"), &path).expect("true");
    assert_eq!(p.log_tail(2), "out two\nerr two", "the tail is the last lines");
    assert_eq!(p.log(), path.as_path());
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_missing_program_is_an_error() {
    assert!(Spawned::spawn(&mut Command::new("/nonexistent/sluice"), log("missing")).is_err());
}

#[test]
fn terminate_returns_the_exit_code_of_a_clean_shutdown() {
    let mut p = Spawned::spawn(&mut sh("trap 'exit 3' TERM; while :; do sleep 0.05; done"), log("clean")).expect("sh");
    std::thread::sleep(Duration::from_millis(200)); // until the trap is set
    let (code, took) = p.terminate(Duration::from_secs(10));
    assert_eq!(code, Some(3));
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(!p.is_running());
    assert_eq!(p.terminate(Duration::from_secs(10)), (Some(3), Duration::ZERO), "a second call only reports");
}

#[test]
fn terminate_kills_what_ignores_sigterm_after_the_limit() {
    // An ignored signal stays ignored across exec, so `sleep` itself ignores it.
    let mut p = Spawned::spawn(&mut sh("trap '' TERM; exec sleep 30"), log("stubborn")).expect("sh");
    std::thread::sleep(Duration::from_millis(200));
    let (code, took) = p.terminate(Duration::from_millis(300));
    assert_eq!(code, None, "killed, not exited");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(5), "{took:?}");
    assert!(!p.is_running());
}

#[test]
fn pause_stops_resume_continues_and_signals_stop_after_the_exit() {
    let mut p = Spawned::spawn(Command::new("sleep").arg("30"), log("pause")).expect("sleep");
    let pid = p.pid();
    p.pause().expect("STOP");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(state(pid), Some('T'), "stopped");
    assert!(p.is_running(), "a stopped process has not exited");
    p.resume().expect("CONT");
    std::thread::sleep(Duration::from_millis(100));
    assert_ne!(state(pid), Some('T'), "continued");
    p.kill();
    assert!(!p.is_running());
    assert_eq!(state(pid), None, "killed and reaped");
    assert!(p.signal("TERM").is_err(), "no signal to a pid that may be reused");
}

#[test]
fn dropping_kills_even_a_stopped_process() {
    let p = Spawned::spawn(Command::new("sleep").arg("30"), log("drop")).expect("sleep");
    let pid = p.pid();
    p.pause().expect("STOP");
    drop(p);
    assert_eq!(state(pid), None, "killed and reaped");
}

#[test]
fn metric_sums_the_matching_series_only() {
    let text = "# HELP m_total x\nm_total{job=\"a\"} 2\nm_total{job=\"b\"} 3\nm_total_other 9\nm_total 1\n";
    assert_eq!(metric(text, "m_total", ""), 6.0);
    assert_eq!(metric(text, "m_total", "job=\"b\""), 3.0);
    assert_eq!(metric(text, "absent", ""), 0.0);
}

#[tokio::test]
async fn http_get_and_wait_ready_read_an_admin_port() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    // Not ready twice, then ready.
    std::thread::spawn(move || {
        for code in ["503 Service Unavailable", "503 Service Unavailable", "200 OK", "200 OK"] {
            let Ok((mut stream, _)) = listener.accept() else { return };
            // The whole request first: closing on unread bytes resets the connection.
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                request.push(byte[0]);
            }
            let _ = write!(stream, "HTTP/1.1 {code}\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    assert!(wait_ready(port, Duration::from_secs(5)).await, "ready on the third answer");
    assert_eq!(http_get(port, "/metrics"), Some((200, "ok".to_string())));
    let closed = free_port().expect("a free port");
    assert_eq!(http_get(closed, "/ready"), None, "nothing listens there");
    assert!(!wait_ready(closed, Duration::from_millis(200)).await);
}

#[test]
fn a_sample_line_with_or_without_its_timestamp() {
    assert_eq!(sample("up 1"), Some(("up", 1.0, None)));
    assert_eq!(
        sample("lag{group=\"a b\",p=\"0\"} 42 1700000000123"),
        Some(("lag{group=\"a b\",p=\"0\"}", 42.0, Some(1_700_000_000_123)))
    );
    assert_eq!(sample("x{a=\"1\"} NaN").map(|(_, v, _)| v.is_nan()), Some(true));
    assert_eq!(sample("x{a=\"1\"} 1 soon"), None, "a timestamp that is not one");
    let text = "lag{p=\"0\"} 2 1000\nlag{p=\"1\"} 3\n";
    assert_eq!(metric(text, "lag", ""), 5.0, "timestamps are no values");
}

/// Serves `response` once on a loopback port; the port.
fn serve_once(response: &'static [u8]) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            // The whole request, so closing sends no reset.
            let (mut request, mut buf) = (Vec::new(), [0u8; 1024]);
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match Read::read(&mut s, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = Write::write_all(&mut s, response);
        }
    });
    port
}

#[test]
fn http_get_reads_plain_and_chunked_bodies() {
    let plain = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(http_get(plain, "/"), Some((200, "hello".to_string())));
    let chunked = serve_once(
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\na;ext=1\r\n:\"\xc3\xa9\r\n\r\n\"}\r\n0\r\n\r\n",
    );
    assert_eq!(http_get(chunked, "/"), Some((404, "{\"a\":\"\u{e9}\r\n\r\n\"}".to_string())));
    let cut = serve_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort");
    assert_eq!(http_get(cut, "/"), None, "a body cut short is not a body");
}

#[test]
fn free_ports_come_from_below_the_ephemeral_range_and_differ() {
    let ephemeral = ephemeral_low().expect("Linux says where its ephemeral range starts");
    let ports: Vec<u16> = (0..20).map(|_| free_port().expect("a free port")).collect();
    for port in &ports {
        assert!(*port < ephemeral && *port >= PORTS_BELOW_EPHEMERAL.0, "{port} outside 20000..{ephemeral}");
        std::net::TcpListener::bind(("127.0.0.1", *port)).expect("a port handed out is free");
    }
    let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
    assert_eq!(distinct.len(), ports.len(), "each call hands out another port: {ports:?}");
}
