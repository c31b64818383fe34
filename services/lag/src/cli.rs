//! `sluice-lag describe --group G`: a running sluice-lag's picture of one
//! group, printed like Kafka's own `kafka-consumer-groups --describe`, with
//! the time lag, the rates and the status beside it.

use std::io::{Read, Write};
use std::time::Duration;

use crate::picture::{GroupPicture, PartitionPicture};

/// `describe`'s arguments.
#[derive(Debug, clap::Parser)]
#[command(name = "sluice-lag describe", about = "Print a watched group's lag, time lag and status")]
pub struct DescribeArgs {
    /// The group.
    #[arg(long)]
    pub group: String,
    /// A running sluice-lag's admin address (`kubectl port-forward` to it).
    #[arg(long, env = "SLUICE_LAG_ADDR", default_value = "127.0.0.1:9096")]
    pub addr: String,
}

/// Why `describe` has no answer.
#[derive(Debug, thiserror::Error)]
pub enum DescribeError {
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}: not an HTTP response")]
    NotHttp { addr: String },
    /// sluice-lag answered with an error (an unwatched group: 404).
    #[error("{addr}: {body}")]
    Refused { addr: String, body: String },
    #[error("{source}: {body}")]
    NotAGroup {
        body: String,
        #[source]
        source: serde_json::Error,
    },
}

/// GET `path` of `addr` (HTTP/1.0): status code and body.
fn get(addr: &str, path: &str) -> Result<(u16, String), DescribeError> {
    let io = |source| DescribeError::Io { addr: addr.to_string(), source };
    let mut stream = std::net::TcpStream::connect(addr).map_err(io)?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(io)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(io)?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(io)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| DescribeError::NotHttp { addr: addr.to_string() })?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

fn seconds(ms: Option<i64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.1}s", ms as f64 / 1000.0))
}

fn rate(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.0}/s"))
}

const COLUMNS: usize = 11;

fn row(p: &PartitionPicture) -> [String; COLUMNS] {
    let lag = p.lag.and_then(|l| l.records()).map_or("-".into(), |l| l.to_string());
    let committed = match p.lag {
        Some(crate::model::lag::Lag::Behind { committed, .. }) => committed.to_string(),
        _ => "-".into(),
    };
    let drain = match (p.lag.and_then(|l| l.records()), p.drain_seconds) {
        (Some(0), _) => "0".into(),
        (Some(_), None) => "never".into(),
        (_, d) => d.map_or("-".into(), |d| format!("{d:.0}s")),
    };
    [
        p.topic.clone(),
        p.partition.to_string(),
        committed,
        p.log.map_or("-".into(), |l| l.end.to_string()),
        lag,
        seconds(p.time_lag_ms),
        rate(p.produce_rate),
        rate(p.consume_rate),
        drain,
        p.status.status.as_str().to_uppercase(),
        p.owner.clone().unwrap_or_else(|| "-".into()),
    ]
}

/// The group as text.
pub fn render(g: &GroupPicture) -> String {
    let mut out = format!(
        "GROUP {}  state {}  members {}  status {}{}\n  lag {}  time lag {}  rebalances {} (pauses, newest last: {})\n",
        g.group,
        g.state.as_deref().unwrap_or("unknown"),
        g.members.map_or("-".into(), |m| m.to_string()),
        g.status.status.as_str().to_uppercase(),
        if g.status.reason.is_empty() { String::new() } else { format!(": {}", g.status.reason) },
        g.lag.map_or("-".into(), |l| l.to_string()),
        seconds(g.time_lag_ms),
        g.rebalances,
        if g.recent_rebalances.is_empty() {
            "-".to_string()
        } else {
            g.recent_rebalances.iter().map(|r| seconds(Some(r.pause_ms))).collect::<Vec<_>>().join(" ")
        },
    );
    if let Some(e) = &g.error {
        out.push_str(&format!("  error: {e}\n"));
    }
    let header = [
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "TIME-LAG",
        "PRODUCE",
        "CONSUME",
        "DRAIN",
        "STATUS",
        "CONSUMER",
    ];
    let rows: Vec<[String; COLUMNS]> =
        std::iter::once(header.map(String::from)).chain(g.partitions.iter().map(row)).collect();
    let widths: Vec<usize> = (0..COLUMNS).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Runs `describe`: the text, or why not.
pub fn describe(args: &DescribeArgs) -> Result<String, DescribeError> {
    let (code, body) = get(&args.addr, &format!("/groups/{}", args.group))?;
    if code != 200 {
        return Err(DescribeError::Refused { addr: args.addr.clone(), body });
    }
    let group: GroupPicture =
        serde_json::from_str(&body).map_err(|source| DescribeError::NotAGroup { body: body.clone(), source })?;
    Ok(render(&group))
}
