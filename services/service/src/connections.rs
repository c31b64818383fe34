//! The process's open TCP connections by peer (Kafka, Redis, the chain node), counted from
//! the kernel's own tables at each scrape: the sockets among `/proc/self/fd` matched against
//! `/proc/self/net/tcp` and `tcp6`, established ones only. So whatever a client opened on its
//! own (librdkafka's connection per broker, a reconnect, a pool) is counted as the server
//! sees it, which is what a managed Redis's `maxclients` or a broker's connection quota
//! limits. Peers are told apart by remote port, which each client declares when it is
//! configured ([`declare`]); a connection to a port this process listens on is `inbound`
//! (a scrape, an admin call), any other `other`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

/// Remote ports and the peer they mean, declared by the clients.
static PEERS: Mutex<Vec<(u16, &'static str)>> = Mutex::new(Vec::new());

/// Connections to any of `addresses` (`host:port` lists, comma-separated, or URLs) are
/// `peer`'s. An address without a port is left out.
pub fn declare(peer: &'static str, addresses: &str) {
    let mut peers = PEERS.lock().unwrap_or_else(|e| e.into_inner());
    for address in addresses.split(',') {
        let Some(port) = port_of(address.trim()) else { continue };
        if !peers.contains(&(port, peer)) {
            peers.push((port, peer));
        }
    }
}

/// The port of `host:port`, `[v6]:port` or `scheme://[user@]host:port[/path]`.
fn port_of(address: &str) -> Option<u16> {
    let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
    let authority = rest.split('/').next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    host_port.rsplit_once(':')?.1.parse().ok()
}

/// One row of `/proc/net/tcp`: local port, remote port, state, socket inode.
fn row(line: &str) -> Option<(u16, u16, u8, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let port = |field: &str| u16::from_str_radix(field.rsplit_once(':')?.1, 16).ok();
    let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
    Some((port(fields.get(1)?)?, port(fields.get(2)?)?, state, fields.get(9)?.parse().ok()?))
}

const ESTABLISHED: u8 = 0x01;
const LISTEN: u8 = 0x0A;

/// This process's established connections, by peer (`inbound`, `other` included).
pub fn count() -> BTreeMap<&'static str, i64> {
    let ours: HashSet<u64> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect();
    let rows: Vec<(u16, u16, u8, u64)> = ["/proc/self/net/tcp", "/proc/self/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| text.lines().skip(1).filter_map(row).collect::<Vec<_>>())
        .filter(|(_, _, _, inode)| ours.contains(inode))
        .collect();
    let peers = PEERS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    tally(&rows, &peers)
}

/// Established connections of `rows` (this process's) by peer.
fn tally(rows: &[(u16, u16, u8, u64)], peers: &[(u16, &'static str)]) -> BTreeMap<&'static str, i64> {
    let listening: HashSet<u16> = rows.iter().filter(|r| r.2 == LISTEN).map(|r| r.0).collect();
    let mut counts = BTreeMap::new();
    for (local, remote, _, _) in rows.iter().filter(|r| r.2 == ESTABLISHED) {
        let peer = match peers.iter().find(|(port, _)| port == remote) {
            Some((_, peer)) => *peer,
            None if listening.contains(local) => "inbound",
            None => "other",
        };
        *counts.entry(peer).or_insert(0) += 1;
    }
    counts
}

/// `<prefix>_tcp_connections{peer}`, counted at each collection.
#[derive(Debug, Clone)]
pub struct Connections {
    gauge: IntGaugeVec,
}

impl Connections {
    pub fn new(prefix: &str) -> prometheus::Result<Self> {
        let opts = Opts::new(
            format!("{prefix}_tcp_connections"),
            "TCP connections this process has open (established), by peer: kafka, redis, chain (as declared by its clients), inbound (to its own ports) or other",
        );
        Ok(Self { gauge: IntGaugeVec::new(opts, &["peer"])? })
    }
}

impl Collector for Connections {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.gauge.reset();
        for (peer, n) in count() {
            self.gauge.with_label_values(&[peer]).set(n);
        }
        self.gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_of_addresses_and_urls() {
        assert_eq!(port_of("kafka-0.kafka:9092"), Some(9092));
        assert_eq!(port_of("rediss://user:pw@redis.example:6380/0"), Some(6380));
        assert_eq!(port_of("http://[::1]:50051"), Some(50051));
        assert_eq!(port_of("redis://redis"), None);
    }

    #[test]
    fn rows_of_the_kernel_table() {
        let line = "  3: 0100007F:1F90 0100007F:238C 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1";
        assert_eq!(row(line), Some((0x1F90, 0x238C, ESTABLISHED, 4242)));
    }

    #[test]
    fn established_connections_are_told_apart_by_peer() {
        let rows = [
            (40000, 9092, ESTABLISHED, 1),
            (40001, 9092, ESTABLISHED, 2),
            (40002, 6379, ESTABLISHED, 3),
            (9090, 0, LISTEN, 4),
            (9090, 51000, ESTABLISHED, 5),
            (40003, 443, ESTABLISHED, 6),
            (40004, 6379, 0x06, 7),
        ];
        let counts = tally(&rows, &[(9092, "kafka"), (6379, "redis")]);
        let want = BTreeMap::from([("kafka", 2), ("redis", 1), ("inbound", 1), ("other", 1)]);
        assert_eq!(counts, want, "a TIME_WAIT and a listening socket are not connections");
    }

    #[test]
    fn a_connection_to_a_declared_port_counts_for_its_peer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        declare("test-peer", &format!("127.0.0.1:{port}"));
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let _server = listener.accept().expect("accept");
        // The whole process's count: tests running beside this one may add connections.
        let counts = count();
        assert!(counts.get("test-peer").is_some_and(|n| *n >= 1), "{counts:?}");
        assert!(counts.get("inbound").is_some_and(|n| *n >= 1), "the accepted side is inbound: {counts:?}");
    }
}
