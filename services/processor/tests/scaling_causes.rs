//! Lag more processors cannot drain, on the real stack, with sluice-lag's scaler asked the
//! way KEDA asks it.
//!
//! A dependency outage: two processors consume a
//! live-paced chain, sluice-lag watches their group and serves its scaler (asked the way KEDA
//! asks it), and Redis is stopped under that load. Every processor stops at once, and
//! sluice-lag reads the group as `blocked` from its partitions' verdicts: the scaler holds the
//! count (never a step up into the outage, nor down), `sluice_lag_group_cause{cause="blocked"}`
//! (what `SluiceScalingBlocked` reads) is 1, and the lag grows. Redis back, the lag drains, the
//! cause clears and the scaler decides by its rule again. A real Prometheus scrapes sluice-lag
//! meanwhile and evaluates the rules the chart ships: `SluiceScalingBlocked` fires during the
//! outage and resolves after it (its `for` shortened from 2m to 10s, its expression the
//! shipped one).
//!
//! Hot keys: every swap of the chain is on one of 3 pools (the fewest the chain has, one per
//! venue), so at most 3 of the 12 partitions hold the backlog. No count drains a partition
//! faster than one processor, so the scaler asks for at most one per hot partition plus what
//! the others need (rule `hot_partition`), not for the 6 or 12 its formula would size the
//! whole lag for.

mod jepsen;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use jepsen::{OwnRedis, Scenario, lag_binary, lag_picture};
use sluice_chainsim::feed::{FeedOptions, feed};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_lag::model::cause::Cause;
use sluice_lag::picture::GroupPicture;
use sluice_lag::scaler::grpc::pb::external_scaler_client::ExternalScalerClient;
use sluice_lag::scaler::grpc::pb::{GetMetricsRequest, ScaledObjectRef};
use sluice_service::process::{Spawned, http_get, wait_ready};

/// The alert that says more processors cannot help.
const BLOCKED: &str = "SluiceScalingBlocked";

/// Waits until the group's picture satisfies `done`, failing with `what` after `limit`.
async fn until(
    port: u16,
    group: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(&GroupPicture) -> bool,
) -> GroupPicture {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(g) = lag_picture(port, group).filter(|g| done(g)) {
            return g;
        }
        assert!(Instant::now() < deadline, "{what} within {limit:?}: {:#?}", lag_picture(port, group));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The scaler, asked as KEDA asks it: the replicas it serves and the rule that decided.
struct Keda {
    client: ExternalScalerClient<tonic::transport::Channel>,
    reference: ScaledObjectRef,
    metric: String,
    port: u16,
}

/// sluice-lag watching the scenario's group, serving its scaler: (process, admin port, scaler port).
async fn start_lag(s: &Scenario) -> (Spawned, u16, u16) {
    let (port, scaler) = (sluice_testkit::free_port(), sluice_testkit::free_port());
    let mut cmd = Command::new(lag_binary());
    cmd.env("SLUICE_LAG_BROKERS", &s.kafka.brokers)
        .env("SLUICE_LAG_GROUPS", &s.group)
        .env("SLUICE_LAG_ADMIN_LISTEN", format!("127.0.0.1:{port}"))
        .env("SLUICE_LAG_SCALER_LISTEN", format!("127.0.0.1:{scaler}"))
        .env("SLUICE_LAG_POLL_INTERVAL_MS", "500")
        .env("SLUICE_LAG_RATE_WINDOW_MS", "3000")
        .env("SLUICE_LAG_STALL_AFTER_MS", "5000")
        .env("SLUICE_LOG_FORMAT", "plain");
    let lag = Spawned::spawn(&mut cmd, s.logs.join("sluice-lag.log")).expect("sluice-lag");
    assert!(wait_ready(port, Duration::from_secs(30)).await, "{}", lag.log_tail(20));
    (lag, port, scaler)
}

impl Keda {
    /// The `timeLag` trigger (20 s) on `group` at `per_pod_rate`, as the chart renders it.
    async fn connect(scaler: u16, port: u16, group: &str, per_pod_rate: &str) -> Self {
        let metadata: HashMap<String, String> = [
            ("group", group),
            ("trigger", "timeLag"),
            ("targetSeconds", "20"),
            ("perPodRate", per_pod_rate),
            ("minCooldownSeconds", "15"),
            ("maxReplicas", "12"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut client = ExternalScalerClient::connect(format!("http://127.0.0.1:{scaler}")).await.expect("the scaler");
        let reference =
            ScaledObjectRef { name: "processor".into(), namespace: "test".into(), scaler_metadata: metadata };
        let spec = client.get_metric_spec(reference.clone()).await.expect("metric spec").into_inner();
        let metric = spec.metric_specs.first().map(|m| m.metric_name.clone()).expect("a metric");
        Self { client, reference, metric, port }
    }

    /// The newest decision, whole.
    fn newest(&self) -> serde_json::Value {
        let (_, body) = http_get(self.port, "/scaler/decisions").expect("decisions");
        let all: serde_json::Value = serde_json::from_str(&body).expect("json");
        all["scaled_objects"][0]["decisions"].as_array().and_then(|d| d.last()).cloned().unwrap_or_default()
    }

    /// The metric served and the newest decision's rule and reason; an input the scaler cannot
    /// read yet (a time lag before its first read) is its error, as KEDA would count it.
    async fn try_ask(&mut self) -> Result<(f64, String), tonic::Status> {
        let request =
            GetMetricsRequest { scaled_object_ref: Some(self.reference.clone()), metric_name: self.metric.clone() };
        let response = self.client.get_metrics(request).await?.into_inner();
        let value = response.metric_values.first().map_or(f64::NAN, |m| m.metric_value_float);
        let newest = self.newest();
        Ok((value, format!("{} ({})", newest["rule"].as_str().unwrap_or("?"), newest["reason"].as_str().unwrap_or(""))))
    }

    async fn ask(&mut self) -> (f64, String) {
        self.try_ask().await.unwrap_or_else(|e| panic!("the scaler refused: {}", e.message()))
    }
}

/// A real Prometheus (Debian's, through `deploy/local/tools.sh`) scraping one target every
/// second and evaluating `deploy/prometheus/sluice-rules.yaml` (the chart's rules, rendered),
/// with one alert's `for` shortened so a test need not wait it out.
struct OwnPrometheus {
    _process: Spawned,
    port: u16,
}

impl OwnPrometheus {
    async fn start(dir: &Path, target: u16, alert: &str, hold: &str) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = Command::new(root.join("deploy/local/tools.sh")).arg("prometheus").output().expect("tools.sh");
        assert!(out.status.success(), "tools.sh prometheus: {}", String::from_utf8_lossy(&out.stderr));
        let binary = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let rules = std::fs::read_to_string(root.join("deploy/prometheus/sluice-rules.yaml")).expect("the rules");
        std::fs::create_dir_all(dir).expect("prometheus dir");
        std::fs::write(dir.join("rules.yaml"), held_for(&rules, alert, hold)).expect("rules");
        let config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
             rule_files: [\"{}\"]\n\
             scrape_configs: [{{job_name: sluice-lag, static_configs: [{{targets: [\"127.0.0.1:{target}\"]}}]}}]\n",
            dir.join("rules.yaml").display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("config");
        let port = sluice_testkit::free_port();
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn");
        let process = Spawned::spawn(&mut cmd, dir.join("prometheus.log")).expect("prometheus");
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(port, "/-/ready").is_none_or(|(code, _)| code != 200) {
            assert!(Instant::now() < deadline, "prometheus ready: {}", process.log_tail(20));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Self { _process: process, port }
    }

    /// The state (`pending`, `firing`) of `alert` for consumer group `group`, if active.
    fn state(&self, alert: &str, group: &str) -> Option<String> {
        let (_, body) = http_get(self.port, "/api/v1/alerts")?;
        let all: serde_json::Value = serde_json::from_str(&body).ok()?;
        all["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == alert && a["labels"]["consumergroup"] == group)
            .and_then(|a| a["state"].as_str().map(str::to_string))
    }

    /// Waits until `alert`'s state for `group` is `want` (`None`: not active), failing after `limit`.
    async fn until(&self, alert: &str, group: &str, want: Option<&str>, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let state = self.state(alert, group);
            if state.as_deref() == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{alert} for {group}: {state:?}, not {want:?} within {limit:?}; targets: {:?}; rules: {:?}",
                http_get(self.port, "/api/v1/targets").map(|(_, b)| b),
                http_get(self.port, "/api/v1/rules?type=alert").map(|(_, b)| b),
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// `rules` with `alert`'s `for` set to `hold`; fails if the alert or its `for` is not there.
fn held_for(rules: &str, alert: &str, hold: &str) -> String {
    let mut out = Vec::new();
    let (mut inside, mut changed) = (false, false);
    for line in rules.lines() {
        if line.trim_start().starts_with("- alert:") {
            inside = line.trim_end().ends_with(&format!(" {alert}"));
        }
        if inside && !changed && line.trim_start().starts_with("for:") {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push(format!("{indent}for: {hold}"));
            changed = true;
            continue;
        }
        out.push(line.to_string());
    }
    assert!(changed, "no `for:` of alert {alert} in the rules");
    out.join("\n") + "\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_under_load_holds_the_count_and_the_lag_drains_after() {
    let tmp = std::env::temp_dir().join(sluice_testkit::unique("blocked-redis"));
    let mut redis = OwnRedis::start(tmp.clone());
    let s = Scenario::new("blocked", &redis.url(), 1_500).await;
    let live = Chain::new(ChainConfig { genesis_ms: sluice_core::clock::now_ms(), ..s.chain.clone() }).expect("chain");
    let options =
        FeedOptions { paced: true, max_duration: Some(Duration::from_secs(150)), ..FeedOptions::new(&s.input) };
    let kafka = s.kafka.clone();
    let feeding = tokio::spawn(async move { feed(live, &kafka, &options).await });

    let (_lag, port, scaler) = start_lag(&s).await;
    let prometheus = OwnPrometheus::start(&tmp.join("prometheus"), port, BLOCKED, "10s").await;
    let processors = [s.spawn("a"), s.spawn("b")];
    until(port, &s.group, Duration::from_secs(90), "two members consuming", |g| {
        g.members == Some(2) && g.lag.is_some() && matches!(g.cause.cause, Cause::Idle | Cause::Scalable)
    })
    .await;

    let mut keda = Keda::connect(scaler, port, &s.group, "1000").await;
    let mut before = (f64::NAN, String::new());
    for _ in 0..6 {
        before = keda.ask().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(before.0 >= 1.0, "a decision before the outage: {before:?}");

    redis.stop();
    let blocked = until(port, &s.group, Duration::from_secs(60), "the group read as blocked", |g| {
        g.cause.cause == Cause::Blocked
    })
    .await;
    let outage_began = blocked.lag.unwrap_or(0);
    // 20 s of outage, asked every 500 ms: the count holds, whatever the lag does.
    let mut served = Vec::new();
    for _ in 0..40 {
        let (value, rule) = keda.ask().await;
        served.push((value, rule));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let g = lag_picture(port, &s.group).expect("picture");
    let metrics = http_get(port, "/metrics").map(|(_, b)| b).unwrap_or_default();
    assert!(
        metrics.lines().any(|l| l.starts_with("sluice_lag_group_cause{")
            && l.contains("cause=\"blocked\"")
            && l.contains(&s.group)
            && l.split(' ').nth(1) == Some("1")),
        "the series SluiceScalingBlocked reads is 1"
    );
    assert!(g.lag.unwrap_or(0) > outage_began + 10_000, "the lag grows meanwhile: {outage_began} → {:?}", g.lag);
    let at_blocked: Vec<&(f64, String)> = served.iter().filter(|(_, rule)| rule.starts_with("blocked")).collect();
    assert!(at_blocked.len() >= served.len() * 3 / 4, "the scaler said why it held: {served:?}");
    assert!(
        served.iter().all(|(value, _)| *value == before.0),
        "never a step up into the outage, nor down: before {before:?}, during {served:?}"
    );
    prometheus.until(BLOCKED, &s.group, Some("firing"), Duration::from_secs(30)).await;

    redis.restart();
    let drained = until(port, &s.group, Duration::from_secs(120), "the lag drained after Redis returned", |g| {
        g.cause.cause != Cause::Blocked && g.lag.is_some_and(|l| l < 5_000)
    })
    .await;
    // The hold outlasts the outage by the scaler's cooldown (15 s), then its rule decides.
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let (value, rule) = keda.ask().await;
        if !rule.starts_with("blocked") {
            break (value, rule);
        }
        assert!(Instant::now() < deadline, "the scaler decides by its rule again: {rule}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    prometheus.until(BLOCKED, &s.group, None, Duration::from_secs(30)).await;
    eprintln!(
        "before: {before:?}; blocked at lag {outage_began}, {} records behind 20 s later; drained: {:?} ({:?}); after: {after:?}",
        g.lag.unwrap_or(0),
        drained.lag,
        drained.cause.cause
    );
    for p in processors {
        p.terminate();
    }
    drop(prometheus);
    feeding.abort();
    let _ = std::fs::remove_dir_all(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_s_backlog_gets_one_processor_not_the_partition_count() {
    let redis = sluice_testkit::redis_url();
    let mut s = Scenario::new("hotkey", &redis, 1_500).await;
    s.chain = ChainConfig { pools: 3, multi_hop_ppm: 0, ..s.chain.clone() };
    let (_lag, port, scaler) = start_lag(&s).await;
    let processor = s.spawn("a");
    until(port, &s.group, Duration::from_secs(90), "one member", |g| g.members == Some(1)).await;
    let feeding = s.feed_in_background(60_000);
    // 300 records/s per processor, as the scaler is told: the hot partition's backlog would
    // need many, and no count can give it more than one.
    let mut keda = Keda::connect(scaler, port, &s.group, "300").await;
    let backlogged = |g: &GroupPicture| {
        g.partitions.iter().filter(|p| p.lag.and_then(|l| l.records()).is_some_and(|r| r > 500)).count()
    };
    let hot = until(port, &s.group, Duration::from_secs(120), "hot partitions' backlog", |g| {
        g.lag.is_some_and(|l| l > 5_000) && (1..=3).contains(&backlogged(g))
    })
    .await;
    // Every decision for 20 s once the first hot-partition one is made (the cooldowns after a
    // step hold the same count).
    let (mut seen, mut hot_rules) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < 40 {
        assert!(Instant::now() < deadline, "decisions within 60 s: {seen:?}");
        if let Ok((value, rule)) = keda.try_ask().await
            && (hot_rules > 0 || rule.starts_with("hot_partition"))
        {
            hot_rules += usize::from(rule.starts_with("hot_partition"));
            seen.push((value, keda.newest()["hot_share"].as_f64().unwrap_or(0.0), rule));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // At most one processor per hot partition, and a little for the rest: at most 4, a
    // useful count for 12 partitions.
    assert!(
        seen.iter().all(|(value, share, rule)| *value <= 4.0 && (*share > 0.25 || !rule.starts_with("hot_partition"))),
        "one per hot partition plus the rest's need, not 6 or 12: {seen:?}"
    );
    eprintln!(
        "{} hot partitions ({:?} the hottest, {:?} share) of {:?} records; decisions {seen:?}",
        backlogged(&hot),
        hot.cause.hot_partition,
        hot.cause.hot_share,
        hot.lag
    );
    eprintln!("{hot_rules} of {} decisions by the hot-partition rule", seen.len());
    processor.terminate();
    let _ = feeding.await;
}
