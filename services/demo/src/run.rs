//! One demo run, as phases: the services started, a loop of one-second ticks (read the
//! system, show it, let the chaos act, scale the processors, end the traffic and wait for
//! the drain), then the result checked against the chain and the report written.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::BaseConsumer;
use sluice_chainsim::ChainConfig;
use sluice_kafka::KafkaConfig;
use sluice_proto::chain::v1::GetHeadRequest;
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::scheduler::v1::TriggerNowRequest;
use sluice_proto::scheduler::v1::scheduler_admin_client::SchedulerAdminClient;
use sluice_scaling::keda::PartitionOffsets;
use sluice_service::process::metric;
use tonic::transport::Channel;

use crate::args::Args;
use crate::autoscale::{self, Autoscaler, Overrides};
use crate::chaos::{self, Chaos};
use crate::procs::{self, Proc, buckets, quantile, say};
use crate::report::{self, Sample, Settings};
use crate::signals::Signals;
use crate::system::{Names, System, lag, wait_for};
use crate::{cpu, kubernetes, outputs};

/// Runs the demo on a started `system`; whether every check passed.
pub async fn run(system: &mut System, started_ms: i64, chain_config: &ChainConfig) -> anyhow::Result<bool> {
    let chain = connect_chain(&system.chain_url).await?;
    let args = system.args.clone();
    let overrides = Overrides {
        partitions: args.partitions,
        max_replicas: args.max_processors,
        lag_threshold: args.lag_threshold,
        scale_down_window_s: args.scale_down_window_seconds,
        trigger: args.trigger.clone(),
        extra: autoscale::parse_sets(&args.sets)?,
    };
    let policy = autoscale::policy(&args.values_files(), &overrides)?;
    let kube_version = if args.kubernetes { Some(install_release(system, &overrides)?) } else { None };
    start_scheduling(system).await?;
    let mut chaos = start_feed(system)?;
    let mut scaler = Autoscaler::new(policy, (args.sync_seconds * 1000) as i64);
    if let (None, Some(addr)) = (&system.kube, system.lag_scaler) {
        scaler.connect(addr, &system.names.group).await.context("connecting to sluice-lag's scaler as KEDA would")?;
    }
    let autoscaler = describe_autoscaler(chaos.is_some(), kube_version.as_deref(), &scaler, args.sync_seconds);
    announce(&args, chaos.is_some(), &autoscaler);
    let consumer: Arc<BaseConsumer> =
        Arc::new(KafkaConfig::new(args.brokers.clone()).client().set("group.id", &system.names.group).create()?);
    let mut live = Live::new(system)?;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(dead) = system.dead() {
            anyhow::bail!("{dead} exited unexpectedly; its log is in {}", system.logs.display());
        }
        if live.tick(system, &chain, &consumer, chain_config, &mut chaos, &mut scaler).await? {
            break;
        }
    }
    let full = finish(system, &chain, &consumer, chain_config, chaos, live, started_ms, autoscaler, &overrides).await?;
    Ok(full.passed())
}

async fn connect_chain(url: &str) -> anyhow::Result<ChainClient<Channel>> {
    let mut chain_client = None;
    wait_for("chainsim serving", Duration::from_secs(30), async || {
        if let Ok(mut c) = ChainClient::connect(url.to_string()).await
            && c.get_head(GetHeadRequest {}).await.is_ok()
        {
            chain_client = Some(c);
            return true;
        }
        false
    })
    .await?;
    chain_client.context("chain client")
}

/// The scheduler replicas and sluice-lag (the chart's pods with --kubernetes), and the token
/// registry filled before any processor needs it: the refresh job triggered now rather than
/// at its first tick (the pods' scheduler: its first tick, every 15 s).
async fn start_scheduling(system: &mut System) -> anyhow::Result<()> {
    let grpc = match system.kube {
        Some(_) => None,
        None => {
            let grpc = system.start_scheduler(0)?;
            system.start_scheduler(1)?;
            system.start_lag()?;
            Some(grpc)
        }
    };
    let names = system.names.clone();
    let redis = redis::Client::open(system.args.redis_url.as_str())?;
    let mut conn = redis.get_multiplexed_async_connection().await.context("connecting to Redis")?;
    let tokens_key = sluice_dex::registry::tokens_key(&names.prefix);
    wait_for("the token registry filled by the scheduler", Duration::from_secs(90), async || {
        if let Some(grpc) = grpc
            && let Ok(mut admin) = SchedulerAdminClient::connect(format!("http://127.0.0.1:{grpc}")).await
        {
            let mut request = tonic::Request::new(TriggerNowRequest { job: "token-refresh".into() });
            if let Ok(bearer) = format!("Bearer {}", names.admin_token).parse() {
                request.metadata_mut().insert("authorization", bearer);
            }
            let _ = admin.trigger_now(request).await;
        }
        let n: u64 = redis::cmd("HLEN").arg(&tokens_key).query_async(&mut conn).await.unwrap_or(0);
        n > 0
    })
    .await?;
    say("== scheduler ×2 up; token registry written by its token-refresh job; sluice-lag watching the group");
    Ok(())
}

/// The ingest pair and the first processors (none with --kubernetes: the Deployment's pods;
/// the soak's three with --chaos, whose faults it returns).
fn start_feed(system: &mut System) -> anyhow::Result<Option<Chaos>> {
    let args = system.args.clone();
    if system.kube.is_none() {
        system.start_ingest(0)?;
        system.start_ingest(1)?;
    }
    let chaos = match (args.chaos, args.stack_dir.as_deref()) {
        (true, Some(dir)) => Some(Chaos::new(args.seconds, dir)?),
        (true, None) => {
            anyhow::bail!("--chaos restarts the stack's broker and Redis: it needs --stack-dir (SLUICE_STACK_DIR)")
        }
        (false, _) => None,
    };
    let first = match (&chaos, &system.kube) {
        (Some(_), _) => chaos::PROCESSORS,
        (None, Some(_)) => 0,
        (None, None) => 1,
    };
    for _ in 0..first {
        system.start_processor()?;
    }
    let processors = match &system.kube {
        Some(k) => format!("the processor Deployment's pods (now {})", k.replicas("processor")?),
        None => format!("{first} processor(s)"),
    };
    say(&format!(
        "== ingest ×2 (active/standby), {processors}; traffic {} tx/s for {} s (bursts ×{} for {} s every {} s)",
        args.rate, args.seconds, args.burst_factor, args.burst_seconds, args.burst_every_seconds
    ));
    Ok(chaos)
}

fn announce(args: &Args, chaos: bool, autoscaler: &str) {
    if chaos {
        say("== chaos soak: exactly-once outputs, no autoscaler; faults on a timetable (sluice-demo's chaos.rs)");
    } else {
        say(&format!(
            "== autoscaling: {autoscaler}; the chart's policy from {} with the flags over it, up to {} processors, \
             scale-down window {} s (the chart's: 300 s)",
            args.values.display(),
            args.max_processors,
            args.scale_down_window_seconds
        ));
    }
}

/// What the loop keeps between its ticks.
struct Live {
    tty: bool,
    begin: Instant,
    timeline: Vec<Sample>,
    decisions: Vec<report::Scaled>,
    last_sync: Instant,
    traffic_stopped: Option<Instant>,
    drained_after: Option<Duration>,
    scaled_down_after: Option<Duration>,
    /// (when, committed, ingest transactions, chain head) at the last sample.
    last: Option<(Instant, u64, f64, u64)>,
    latency_before: Vec<(f64, f64)>,
    /// The swaps' freshness and the processors' CPU per record, added up over the run.
    signals: Signals,
    peak_lag: u64,
    /// Lines of the live view on the terminal, to redraw over.
    printed: usize,
    /// With --kubernetes: the processor Deployment's replicas as last read.
    wanted: u32,
}

/// One second's reading of the system.
struct Reading {
    sample: Sample,
    lag: u64,
    offsets: Vec<PartitionOffsets>,
    active: Option<usize>,
}

impl Live {
    fn new(system: &System) -> anyhow::Result<Self> {
        Ok(Self {
            tty: std::io::stdout().is_terminal(),
            begin: Instant::now(),
            timeline: Vec::new(),
            decisions: Vec::new(),
            last_sync: Instant::now(),
            traffic_stopped: None,
            drained_after: None,
            scaled_down_after: None,
            last: None,
            latency_before: Vec::new(),
            signals: Signals::new(&system.names.swaps),
            peak_lag: 0,
            printed: 0,
            wanted: match &system.kube {
                Some(k) => k.replicas("processor")?,
                None => 0,
            },
        })
    }

    /// One second of the run; `true` when it is over.
    async fn tick(
        &mut self,
        system: &mut System,
        chain: &ChainClient<Channel>,
        consumer: &Arc<BaseConsumer>,
        chain_config: &ChainConfig,
        chaos: &mut Option<Chaos>,
        scaler: &mut Autoscaler,
    ) -> anyhow::Result<bool> {
        let now = Instant::now();
        let Some(reading) = self.read(now, system, chain, consumer, chain_config).await? else {
            let timeout = Duration::from_secs(system.args.drain_timeout_seconds);
            return Ok(self.traffic_stopped.is_some_and(|at| at.elapsed() > timeout));
        };
        self.show(&reading, system.args.seconds);
        let lag = reading.lag;
        self.timeline.push(reading.sample);
        if let Some(c) = chaos.as_mut()
            && self.traffic_stopped.is_none()
        {
            c.tick(system, self.begin.elapsed()).await?;
            self.printed = 0;
        }
        if chaos.is_none() {
            self.scale(now, system, scaler, lag, &reading.offsets).await?;
        }
        self.traffic(system, scaler, lag)
    }

    /// The system's state now; `None` when the group's offsets cannot be read.
    async fn read(
        &mut self,
        now: Instant,
        system: &mut System,
        chain: &ChainClient<Channel>,
        consumer: &Arc<BaseConsumer>,
        chain_config: &ChainConfig,
    ) -> anyhow::Result<Option<Reading>> {
        let (topic, partitions) = (system.names.topic.clone(), system.args.partitions);
        let c = Arc::clone(consumer);
        let Some((lag, committed, produced, offsets)) =
            tokio::task::spawn_blocking(move || lag(&c, &topic, partitions)).await.ok().flatten()
        else {
            return Ok(None);
        };
        self.peak_lag = self.peak_lag.max(lag);
        if let Err(e) = system.refresh_pods() {
            say(&format!("   Kubernetes: reading the pods failed: {e:#}"));
        }
        let ingest_texts = system.metrics_of("ingest");
        let ingest_tx: f64 =
            ingest_texts.iter().map(|t| metric(t, "sluice_ingest_produced_transactions_total", "")).sum();
        let head = match chain.clone().get_head(GetHeadRequest {}).await {
            Ok(h) => h.into_inner().head_slot,
            Err(_) => self.timeline.last().map_or(0, |s: &Sample| s.chain_head_slot),
        };
        let active = ingest_texts.iter().position(|t| metric(t, "sluice_ingest_active", "") == 1.0);
        let named = system.named_metrics("processor");
        let freshness_p99 = self.signals.sample(named.iter().map(|(n, t)| (n.as_str(), t.as_str())));
        let proc_texts: Vec<String> = named.into_iter().map(|(_, t)| t).collect();
        let latency_now = buckets(proc_texts.iter().map(String::as_str), "sluice_processor_end_to_end_latency_seconds");
        let p99 = quantile(&self.latency_before, &latency_now, 0.99);
        self.latency_before = latency_now;
        let sched_texts = system.metrics_of("scheduler");
        let lag_text = system.metrics_of("lag").pop().unwrap_or_default();
        if let Some(dir) = system.args.scrapes.clone().filter(|_| system.kube.is_none()) {
            let named = system.ingest.iter().zip(&ingest_texts).chain(system.processors.iter().zip(&proc_texts));
            let named =
                named.chain(system.schedulers.iter().zip(&sched_texts)).chain(system.lag.iter().zip([&lag_text]));
            let texts: Vec<(&Proc, &str)> = named.map(|(p, t)| (p, t.as_str())).collect();
            system.write_scrapes(&dir, &texts)?;
        }
        let watched = system.lag_picture();
        let runs = |job: &str| -> u64 {
            sched_texts
                .iter()
                .map(|t| metric(t, "sluice_scheduler_runs_total", &format!("job_name=\"{job}\",outcome=\"succeeded\"")))
                .sum::<f64>() as u64
        };
        let (throughput, ingest_rate, chain_rate) = match self.last {
            Some((t, c0, tx0, head0)) => {
                let dt = now.duration_since(t).as_secs_f64().max(0.001);
                let chain_tx: u64 =
                    (head0 + 1..=head).map(|slot| u64::from(chain_config.transactions_in_slot(slot))).sum();
                (committed.saturating_sub(c0) as f64 / dt, ((ingest_tx - tx0) / dt).max(0.0), chain_tx as f64 / dt)
            }
            None => (0.0, 0.0, 0.0),
        };
        self.last = Some((now, committed, ingest_tx, head));
        let sample = Sample {
            t: self.begin.elapsed().as_secs_f64(),
            chain_head_slot: head,
            chain_tx_per_sec: chain_rate,
            ingest_tx_per_sec: ingest_rate,
            records_produced: produced,
            lag,
            lag_seconds: watched.as_ref().and_then(|g| g.time_lag_ms).map(|ms| ms as f64 / 1000.0),
            lag_status: watched.as_ref().map(|g| g.status.status.as_str().to_string()),
            processors: system.processor_count(),
            records_per_sec: throughput,
            p99_ms: p99.map(|s| s * 1000.0),
            freshness_p99_ms: freshness_p99.map(|s| s * 1000.0),
            heartbeat_runs: runs("heartbeat"),
            token_refresh_runs: runs("token-refresh"),
            reconcile_runs: runs("pool-reconcile"),
        };
        Ok(Some(Reading { sample, lag, offsets, active }))
    }

    /// The live view: redrawn in place on a terminal, every fifth second on one line otherwise.
    fn show(&mut self, reading: &Reading, seconds: u64) {
        let view = report::view(&reading.sample, seconds, self.traffic_stopped.is_some(), reading.active);
        if self.tty {
            if self.printed > 0 {
                rewind(self.printed);
            }
            self.printed = view.lines().count();
            say(&view);
        } else if self.timeline.len().is_multiple_of(5) {
            say(&view.replace('\n', " | "));
        }
    }

    /// The processors' count: with --kubernetes the Deployment's replicas (what the HPA
    /// wrote) are read every second and the kubelet starts and stops the pods; the stand-in
    /// decides every --sync-seconds and the demo starts and stops its processors.
    async fn scale(
        &mut self,
        now: Instant,
        system: &mut System,
        scaler: &mut Autoscaler,
        lag: u64,
        offsets: &[PartitionOffsets],
    ) -> anyhow::Result<()> {
        let current = system.processors.len() as u32;
        let t = self.begin.elapsed().as_secs_f64();
        if let Some(k) = &system.kube {
            if let Some((replicas, what, why)) = follow(k, self.wanted)
                && replicas != self.wanted
            {
                say(&format!("   {what} → {replicas} processors ({why})"));
                self.printed = 0;
                self.decisions.push(report::Scaled { t, lag, from: self.wanted, to: replicas });
                self.wanted = replicas;
            }
            return Ok(());
        }
        if now.duration_since(self.last_sync) < Duration::from_secs(system.args.sync_seconds) {
            return Ok(());
        }
        self.last_sync = now;
        let d = scaler.decide(now, current, offsets).await;
        let metric = d.metric.map_or("unknown".into(), |m| format!("{:.1}", m as f64 / 1000.0));
        if d.replicas != current {
            say(&format!("   autoscaler: lag {lag} (metric {metric}) → {} processors ({})", d.replicas, d.why));
            self.printed = 0;
            self.decisions.push(report::Scaled { t, lag, from: current, to: d.replicas });
        }
        for _ in current..d.replicas {
            system.start_processor()?;
        }
        for _ in d.replicas..current {
            if let Some(mut p) = system.processors.pop() {
                // A clean drain takes a few seconds; don't hold the view.
                system.stopping.push(tokio::task::spawn_blocking(move || {
                    p.stop(Duration::from_secs(25));
                }));
            }
        }
        Ok(())
    }

    /// The traffic's end and the drain after it; `true` when the run is over: drained (and,
    /// with a real HPA, scaled back down), or past the drain's or the scale-down's timeout.
    fn traffic(&mut self, system: &mut System, scaler: &Autoscaler, lag: u64) -> anyhow::Result<bool> {
        let seconds = |s: u64| Duration::from_secs(s);
        let (traffic_for, drain_timeout, scale_down_timeout) = (
            seconds(system.args.seconds),
            seconds(system.args.drain_timeout_seconds),
            seconds(system.args.scale_down_timeout_seconds),
        );
        match self.traffic_stopped {
            None if self.begin.elapsed() >= traffic_for => {
                say("== traffic done: stopping the ingest, the processors drain the lag");
                self.printed = 0;
                if let Some(k) = &system.kube {
                    k.scale("ingest", 0).context("scaling the ingest to 0")?;
                }
                let mut ingest: Vec<Proc> = system.ingest.drain(..).collect();
                let stopped =
                    tokio::task::spawn_blocking(move || procs::stop_all(&mut ingest, Duration::from_secs(25)));
                system.stopping.push(stopped);
                self.traffic_stopped = Some(Instant::now());
                Ok(false)
            }
            Some(at) if lag == 0 || self.drained_after.is_some() => {
                let drained = *self.drained_after.get_or_insert(at.elapsed());
                // With a real HPA the run goes on until it has scaled back down, too.
                let min = scaler.policy.min_replicas.max(1) as u32;
                let waited = at.elapsed().saturating_sub(drained);
                if system.kube.is_none() || scaled_back(self.wanted, system.processor_count(), min) {
                    self.scaled_down_after = system.kube.as_ref().map(|_| waited);
                    return Ok(true);
                }
                Ok(waited > scale_down_timeout)
            }
            Some(at) => Ok(at.elapsed() > drain_timeout),
            None => Ok(false),
        }
    }
}

/// Whether a real HPA has the processors back at `min`: the replicas it wrote, and the pods
/// serving. The pods alone are not enough: drained right after a scale-up, the new pods are
/// not Ready yet and only the old one serves.
fn scaled_back(wanted: u32, serving: u32, min: u32) -> bool {
    wanted <= min && serving <= min
}

/// The result checked against the chain (and, with --kubernetes or --chaos, the outputs),
/// the report written and summarised.
#[allow(clippy::too_many_arguments)]
async fn finish(
    system: &mut System,
    chain: &ChainClient<Channel>,
    consumer: &Arc<BaseConsumer>,
    chain_config: &ChainConfig,
    chaos: Option<Chaos>,
    live: Live,
    started_ms: i64,
    autoscaler: String,
    overrides: &Overrides,
) -> anyhow::Result<report::Report> {
    say("== checking the result against the chain");
    wait_ingest_gone(system).await;
    let (args, names) = (system.args.clone(), system.names.clone());
    let summary = report::check(chain, &args.redis_url, &names.prefix).await?;
    let chaos = match chaos {
        Some(c) => Some(soak_report(c, &args, &names, chain_config, summary.ingest_cursor).await?),
        None => None,
    };
    let outputs = match (&system.kube, summary.ingest_cursor) {
        (Some(_), Some(cursor)) => Some(outputs::check(chain_config, cursor, &outputs_at(&args, &names)).await?),
        _ => None,
    };
    let (_, consumed, produced, _) = {
        let c = Arc::clone(consumer);
        let (topic, partitions) = (names.topic.clone(), args.partitions);
        tokio::task::spawn_blocking(move || lag(&c, &topic, partitions)).await?.unwrap_or_default()
    };
    let settings = Settings {
        seconds: args.seconds,
        rate: args.rate,
        partitions: args.partitions,
        max_processors: args.max_processors,
        lag_threshold: args.lag_threshold,
        sync_seconds: args.sync_seconds,
        scale_down_window_seconds: args.scale_down_window_seconds,
        processor_cpu_millis: system.cpu.as_ref().map_or(0, cpu::CpuLimit::millis),
    };
    let full = report::Report {
        id: names.id.clone(),
        started_ms,
        settings,
        records_produced: produced,
        records_consumed: consumed,
        peak_lag: live.peak_lag,
        drain_seconds: live.drained_after.map(|d| d.as_secs_f64()),
        scale_down_seconds: live.scaled_down_after.map(|d| d.as_secs_f64()),
        peak_processors: live.timeline.iter().map(|s| s.processors).max().unwrap_or(0),
        autoscaler,
        values_files: args.values_files().iter().map(|p| p.display().to_string()).collect(),
        values_set: autoscale::helm_sets(overrides),
        summary,
        signals: live.signals.summary(),
        scaling: live.decisions,
        timeline: live.timeline,
        chaos,
        node: system.pods.iter().find_map(|p| p.node.clone()),
        pods: system.pods_served.iter().cloned().collect(),
        shutdowns: system.shutdown_reports(),
        outputs,
    };
    write_report(&args, &names, &full)?;
    Ok(full)
}

/// The ingest stopped before the drain: its last flush (and with --kubernetes its pods gone).
async fn wait_ingest_gone(system: &mut System) {
    for task in std::mem::take(&mut system.stopping) {
        let _ = task.await;
    }
    if system.kube.is_some() {
        let deadline = Instant::now() + Duration::from_secs(60);
        while system.refresh_pods().is_err() || system.pods.iter().any(|p| p.component == "ingest") {
            if Instant::now() > deadline {
                say("   Kubernetes: the ingest pods were still there 60 s after their scale to 0");
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn write_report(args: &Args, names: &Names, full: &report::Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join(format!("{}.json", names.id));
    std::fs::write(&path, serde_json::to_string_pretty(full)?)?;
    std::fs::write(args.out.join("latest.json"), serde_json::to_string_pretty(full)?)?;
    say(&report::summary_text(full));
    say(&format!("report: {}", path.display()));
    Ok(())
}

/// Moves the cursor up `lines` and clears below (redrawing the live view).
fn rewind(lines: usize) {
    use std::io::Write;
    let _ = write!(std::io::stdout(), "\x1b[{lines}A\x1b[J");
}

/// `--kubernetes`: installs the chart into the cluster the kubeconfig names; its version.
fn install_release(system: &mut System, overrides: &Overrides) -> anyhow::Result<String> {
    let args = system.args.clone();
    let kubeconfig = args.kubeconfig.as_deref().context(
        "--kubernetes needs the cluster's kubeconfig (--kubeconfig or KUBECONFIG; deploy/local/cluster.sh env)",
    )?;
    let cluster = kubernetes::Cluster::new(kubeconfig, &args.helm, &args.chart, &args.namespace)?;
    let version = cluster.version().context("asking the API server its version")?;
    say(&format!(
        "== Kubernetes {version}: installing the chart ({}) as release {} in namespace {} with helm",
        args.chart.display(),
        cluster.release,
        cluster.namespace
    ));
    system.install_release(cluster, autoscale::helm_sets(overrides)).context("installing the chart")?;
    Ok(version)
}

/// Who scales the processors, for the output and the report.
fn describe_autoscaler(chaos: bool, kube_version: Option<&str>, scaler: &Autoscaler, sync_seconds: u64) -> String {
    match (chaos, kube_version) {
        (true, _) => "none (the chaos soak: 3 processors throughout)".to_string(),
        (false, Some(version)) => format!(
            "Kubernetes {version}: KEDA's operator made an HPA from the chart's ScaledObject ({}), \
             kube-controller-manager's HPA controller wrote the processor Deployment's replicas, \
             the kubelet ran them as pods",
            scaler.describe()
        ),
        (false, None) => format!(
            "stand-in: the chart's policy on sluice-scaling's engine ({}), sync every {sync_seconds} s",
            scaler.describe()
        ),
    }
}

/// The processor Deployment's `spec.replicas` (written by the HPA KEDA made) and what that HPA
/// last saw; `None` when the API server does not answer.
fn follow(k: &kubernetes::Cluster, current: u32) -> Option<(u32, String, String)> {
    match k.replicas("processor") {
        Ok(replicas) if replicas == current => Some((replicas, String::new(), String::new())),
        Ok(replicas) => {
            let why = match k.hpa() {
                Ok(Some(h)) => format!(
                    "the HPA's desiredReplicas {}, metric {}",
                    h.desired,
                    h.metric.as_deref().unwrap_or("not read yet")
                ),
                Ok(None) => "KEDA has not made the HPA yet".into(),
                Err(e) => format!("reading the HPA: {e}"),
            };
            Some((replicas, "Kubernetes: the Deployment's spec.replicas".into(), why))
        }
        Err(e) => {
            say(&format!("   Kubernetes: reading the Deployment failed, processors held: {e:#}"));
            None
        }
    }
}

/// Where the outputs are, for their check.
fn outputs_at<'a>(args: &'a Args, names: &'a Names) -> outputs::Where<'a> {
    outputs::Where {
        kafka: KafkaConfig::new(args.brokers.clone()),
        input: &names.topic,
        swaps: &names.swaps,
        dlq: &names.dlq,
        redis_url: &args.redis_url,
        prefix: &names.prefix,
    }
}

/// The soak's faults and its check of the outputs up to the ingest's final cursor.
async fn soak_report(
    c: Chaos,
    args: &Args,
    names: &Names,
    chain_config: &ChainConfig,
    cursor: Option<u64>,
) -> anyhow::Result<chaos::ChaosReport> {
    let outputs = match cursor {
        Some(cursor) => Some(outputs::check(chain_config, cursor, &outputs_at(args, names)).await?),
        None => None,
    };
    Ok(chaos::ChaosReport { finished: c.finished(), kills: c.kills, faults: c.applied, outputs })
}

#[cfg(test)]
mod tests {
    use super::scaled_back;

    #[test]
    fn back_at_min_needs_the_hpas_replicas_and_the_pods_serving() {
        assert!(scaled_back(1, 1, 1));
        // Scaled up to 3 just before the drain: one pod Ready, two starting.
        assert!(!scaled_back(3, 1, 1));
        // Scaled down to 1, three pods still draining.
        assert!(!scaled_back(1, 3, 1));
        assert!(scaled_back(2, 2, 2));
    }
}
