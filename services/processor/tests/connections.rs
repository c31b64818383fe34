//! What one processor opens, as the chart's README states it ("Connections and memory"):
//! its Kafka and Redis connections counted by the process itself
//! (`sluice_processor_tcp_connections`, from the kernel's tables) while it drains a fed chain,
//! at-least-once and exactly-once, equal to the README's figures for a single-broker cluster;
//! Redis's own `CLIENT LIST` (a Redis of the test's own) agrees; and its resident memory stays
//! under the README's figure.

mod jepsen;

use std::time::Duration;

use jepsen::Scenario;

/// The README's row for `mode` in its per-process table: (Kafka, Redis, RSS MiB).
fn stated(mode: &str) -> (f64, f64, f64) {
    let readme = std::fs::read_to_string(sluice_testkit::repo_root().join("helm/sluice/README.md")).expect("README");
    let row = readme
        .lines()
        .find(|l| l.starts_with(&format!("| processor, {mode} |")))
        .unwrap_or_else(|| panic!("the chart README has no row `| processor, {mode} |`"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let number = |i: usize| -> f64 {
        let cell = cells.get(i).copied().unwrap_or_default();
        cell.trim_start_matches('≤').trim().split(' ').next().unwrap_or_default().parse().unwrap_or(f64::NAN)
    };
    (number(2), number(3), number(4))
}

/// Clients connected to the Redis at `url`, as it lists them.
async fn clients_of(url: &str) -> usize {
    let client = redis::Client::open(url).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut conn).await.expect("CLIENT LIST");
    // Less this connection.
    list.lines().count() - 1
}

async fn measure(mode: &str, exactly_once: bool) {
    // A Redis of the test's own: every client it lists is this processor's.
    let own = jepsen::OwnRedis::start(std::env::temp_dir().join(sluice_testkit::unique("conns-redis")));
    let mut s = Scenario::new("conns", &own.url(), 2_000).await;
    s.env.push(("EXACTLY_ONCE".into(), exactly_once.to_string()));
    let fed = s.feed(6_000).await;
    let processor = s.spawn("a");
    jepsen::wait_drained(&s, fed.records, Duration::from_secs(120)).await;
    let body = jepsen::admin_body(processor.admin_port, "/metrics");
    let count =
        |peer: &str| sluice_testkit::metric(&body, "sluice_processor_tcp_connections", &format!("peer=\"{peer}\""));
    let rss_mib = sluice_testkit::metric(&body, "process_resident_memory_bytes", "") / (1024.0 * 1024.0);
    let (kafka, redis, rss) = (count("kafka"), count("redis"), rss_mib);
    let listed = clients_of(&own.url()).await as f64;
    eprintln!(
        "connections[{mode}]: kafka {kafka}, redis {redis} (Redis lists {listed}), other {}, inbound {}; RSS {rss:.0} MiB",
        count("other"),
        count("inbound")
    );
    let (want_kafka, want_redis, want_rss) = stated(mode);
    processor.terminate();
    assert_eq!(redis, listed, "{mode}: the processor's count of its Redis connections is Redis's");
    assert_eq!(
        (kafka, redis),
        (want_kafka, want_redis),
        "{mode}: Kafka and Redis connections against the README's row"
    );
    assert!(rss <= want_rss, "{mode}: {rss:.0} MiB resident, above the README's {want_rss} MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processor_opens_what_the_chart_readme_states() {
    measure("at-least-once", false).await;
    measure("exactly-once", true).await;
}
