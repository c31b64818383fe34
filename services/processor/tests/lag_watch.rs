//! The lag stays visible when consumption stops: two processors consume a
//! live-paced chain while sluice-lag watches their group; both are SIGKILLed
//! and none is left. Their own lag gauge goes with them, but sluice-lag keeps
//! reporting the group's lag, and it keeps growing, and names the stopped
//! partitions (STALL while the dead members still hold them, STOP after).
//! Before that, the processors joining is seen as rebalancing, with the pause.

mod jepsen;

use std::process::Command;
use std::time::{Duration, Instant};

use jepsen::{Scenario, lag_binary, lag_picture};
use sluice_chainsim::feed::{FeedOptions, feed};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_lag::model::status::Status;
use sluice_service::process::{Spawned, http_get, wait_ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_keeps_being_reported_and_growing_when_every_processor_is_killed() {
    let redis = sluice_testkit::redis_url();
    let s = Scenario::new("lagwatch", &redis, 1_000).await;
    let live = Chain::new(ChainConfig { genesis_ms: sluice_core::clock::now_ms(), ..s.chain.clone() }).expect("chain");
    let options =
        FeedOptions { paced: true, max_duration: Some(Duration::from_secs(60)), ..FeedOptions::new(&s.input) };
    let kafka = s.kafka.clone();
    let feeding = tokio::spawn(async move { feed(live, &kafka, &options).await });

    let port = sluice_testkit::free_port();
    let mut cmd = Command::new(lag_binary());
    cmd.env("SLUICE_LAG_BROKERS", &s.kafka.brokers)
        .env("SLUICE_LAG_GROUPS", &s.group)
        .env("SLUICE_LAG_ADMIN_LISTEN", format!("127.0.0.1:{port}"))
        .env("SLUICE_LAG_POLL_INTERVAL_MS", "500")
        .env("SLUICE_LAG_RATE_WINDOW_MS", "3000")
        .env("SLUICE_LAG_STALL_AFTER_MS", "3000")
        .env("SLUICE_LOG_FORMAT", "plain");
    let lag = Spawned::spawn(&mut cmd, s.logs.join("sluice-lag.log")).expect("sluice-lag");
    assert!(wait_ready(port, Duration::from_secs(30)).await, "{}", lag.log_tail(20));

    let processors = [s.spawn("a"), s.spawn("b")];
    let deadline = Instant::now() + Duration::from_secs(60);
    while lag_picture(port, &s.group)
        .is_none_or(|g| g.members != Some(2) || g.lag.is_none() || g.status.status != Status::Ok)
    {
        assert!(Instant::now() < deadline, "never consuming: {:#?}", lag_picture(port, &s.group));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Joining was rebalancing: how long consumption stopped is recorded, each time.
    let joined = loop {
        let g = lag_picture(port, &s.group).expect("picture");
        if !g.recent_rebalances.is_empty() {
            break g;
        }
        assert!(Instant::now() < deadline, "no rebalance pause recorded: {g:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let pause = joined.recent_rebalances.last().map(|r| r.pause_ms);
    assert!(joined.rebalances >= 1 && pause.is_some_and(|p| (0..30_000).contains(&p)), "{joined:#?}");
    let text = http_get(port, "/metrics").map(|(_, b)| b).unwrap_or_default();
    let seen = sluice_service::process::metric(&text, "sluice_lag_rebalance_pause_seconds_count", &s.group);
    assert!(seen >= 1.0, "each pause is in the histogram: {seen}");
    let ports: Vec<u16> = processors.iter().map(|p| p.admin_port).collect();
    let own = http_get(ports[0], "/metrics").map(|(_, b)| b).unwrap_or_default();
    for p in processors {
        p.kill();
    }
    assert!(!own.is_empty(), "the processors served metrics while alive");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(ports.iter().all(|p| http_get(*p, "/metrics").is_none()), "their own lag went with them");

    // Sampled each second for 8 s: always there, always growing.
    let mut samples = Vec::new();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(lag_picture(port, &s.group).and_then(|g| g.lag));
    }
    assert!(samples.iter().all(Option::is_some), "the lag never went missing: {samples:?}");
    let lags: Vec<i64> = samples.into_iter().flatten().collect();
    assert!(lags.windows(2).all(|w| w[1] >= w[0]) && lags[lags.len() - 1] > lags[0] + 1_000, "it grows: {lags:?}");
    let stopped = lag_picture(port, &s.group).expect("picture");
    assert!(matches!(stopped.status.status, Status::Stall | Status::Stop), "{:?}", stopped.status);
    assert!(stopped.status.reason.starts_with(&s.input), "the partition is named: {:?}", stopped.status);
    feeding.abort();
}
