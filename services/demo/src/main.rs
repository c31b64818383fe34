//! sluice-demo: the whole system on this machine, as real processes.
//!
//! chainsim (the chain) → 2 ingest (active/standby) → Kafka → processors
//! (1..max, added and removed on consumer-group lag by the KEDA + HPA rule
//! in [`autoscale`], the chart's policy on sluice-scaling's engine) → Redis; 2 scheduler
//! replicas run the periodic jobs. A live view while traffic runs; then the
//! ingest stops, the processors drain the lag, and the result is checked
//! against the chain: pools whose Redis state differs from `GetPool`
//! (must be 0) and scheduled ticks that ran more than once (must be 0).
//! A JSON report goes under `results/demo/`.
//!
//! Expects the stack (Kafka, Redis) from the environment, as
//! `deploy/local/demo.sh` provides it, and every binary built next to this
//! one. Ctrl-C stops everything it started.

mod args;
mod autoscale;
mod chaos;
mod cpu;
mod kubernetes;
mod outputs;
mod procs;
mod report;
mod system;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use rdkafka::consumer::BaseConsumer;
use sluice_chainsim::ChainConfig;
use sluice_kafka::{KafkaConfig, TopicSpec, ensure_topics};
use sluice_proto::chain::v1::GetHeadRequest;
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::scheduler::v1::TriggerNowRequest;
use sluice_proto::scheduler::v1::scheduler_admin_client::SchedulerAdminClient;
use sluice_service::process::{free_port, metric};

use crate::args::Args;
use crate::autoscale::{Autoscaler, Overrides};
use crate::chaos::Chaos;
use crate::procs::{Proc, binary, buckets, quantile, say};
use crate::report::{Sample, Settings};
use crate::system::{Names, System, fresh_token, lag, wait_for};

/// Moves the cursor up `lines` and clears below (redrawing the live view).
fn rewind(lines: usize) {
    use std::io::Write;
    let _ = write!(std::io::stdout(), "\x1b[{lines}A\x1b[J");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.seconds > 0 && args.rate > 0, "--seconds and --rate must be above 0");
    anyhow::ensure!(
        args.max_processors >= 1 && args.max_processors <= args.partitions,
        "--max-processors must be between 1 and --partitions ({}): more consumers than partitions sit idle",
        args.partitions
    );
    let started_ms = sluice_core::clock::now_ms();
    let id = format!("demo-{}", started_ms / 1000);
    let names = Names {
        topic: format!("{id}.chain.transactions"),
        swaps: format!("{id}.dex.swaps"),
        dlq: format!("{id}.chain.transactions.dlq"),
        group: format!("{id}.processor"),
        prefix: format!("{id}:"),
        admin_token: fresh_token(),
        id: id.clone(),
    };
    // A report left by an earlier run must not pass for this one's.
    let _ = std::fs::remove_file(args.out.join("latest.json"));
    let logs = args.logs.clone().unwrap_or_else(|| PathBuf::from(".stack").join(&id));
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    if let Some(dir) = &args.scrapes {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let kafka = KafkaConfig::new(args.brokers.clone());
    ensure_topics(
        &kafka,
        &[
            TopicSpec::new(&names.topic, args.partitions as i32),
            TopicSpec::new(&names.swaps, args.partitions as i32),
            TopicSpec::new(&names.dlq, 3),
        ],
        Duration::from_secs(60),
    )
    .await
    .context("creating the demo's topics")?;

    say(&format!("== {id}: the whole system on this machine (logs in {})", logs.display()));
    let chain_port = free_port()?;
    // With --kubernetes the chain listens where the pods reach the host.
    let chain_host = match (args.kubernetes, &args.pod_address) {
        (true, Some(address)) => address.clone(),
        (true, None) => {
            anyhow::bail!("--kubernetes needs --pod-address (SLUICE_STACK_POD_ADDRESS): the pods reach the chain there")
        }
        (false, _) => "127.0.0.1".to_string(),
    };
    let chain_url = format!("http://{chain_host}:{chain_port}");
    // The chain's shape is known here too, so the view can show its true rate.
    anyhow::ensure!(
        args.burst_every_seconds >= 0.0 && args.burst_seconds >= 0.0 && args.burst_seconds <= args.burst_every_seconds,
        "--burst-seconds must be between 0 and --burst-every-seconds"
    );
    let slots = |seconds: f64| (seconds * 1000.0 / ChainConfig::default().slot_ms as f64).round() as u64;
    let chain_config = ChainConfig {
        seed: 1,
        genesis_ms: started_ms,
        tx_per_sec: args.rate,
        burst_every_slots: slots(args.burst_every_seconds),
        burst_slots: slots(args.burst_seconds),
        burst_factor: args.burst_factor,
        ..ChainConfig::default()
    };
    let chain = Proc::start(
        "chainsim",
        &binary("chainsim")?,
        &[
            "serve",
            "--listen",
            &format!("{chain_host}:{chain_port}"),
            "--rate",
            &args.rate.to_string(),
            "--seed",
            &chain_config.seed.to_string(),
            "--genesis-ms",
            &chain_config.genesis_ms.to_string(),
            "--burst-every-slots",
            &chain_config.burst_every_slots.to_string(),
            "--burst-slots",
            &chain_config.burst_slots.to_string(),
            "--burst-factor",
            &chain_config.burst_factor.to_string(),
        ],
        &[],
        0,
        &logs,
    )?;
    let cpu = cpu_limit(&args)?;
    let mut system = System {
        args: args.clone(),
        names: names.clone(),
        logs,
        chain,
        chain_url: chain_url.clone(),
        schedulers: Vec::new(),
        ingest: Vec::new(),
        processors: Vec::new(),
        lag: None,
        lag_scaler: None,
        next_processor: 0,
        kube: None,
        pods: Vec::new(),
        pods_served: Default::default(),
        shutdowns: Vec::new(),
        cpu,
        stopping: Vec::new(),
    };
    let run = async { run(&mut system, started_ms, &chain_config).await.map(Some) };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        outcome = run => outcome,
        _ = tokio::signal::ctrl_c() => {
            say("\n== interrupted: stopping everything the demo started");
            Ok(None)
        }
        _ = term.recv() => {
            say("\n== terminated: stopping everything the demo started");
            Ok(None)
        }
    };
    // Everything still running stops now (SIGTERM, then SIGKILL), and what
    // was already stopping is waited for; then the processors' control group goes.
    let stopping = std::mem::take(&mut system.stopping);
    let cpu = system.cpu.take();
    let stop = tokio::task::spawn_blocking(move || {
        procs::stop_all(&mut system.ingest, Duration::from_secs(25));
        procs::stop_all(&mut system.processors, Duration::from_secs(25));
        procs::stop_all(&mut system.schedulers, Duration::from_secs(25));
        if let Some(lag) = system.lag.as_mut() {
            lag.stop(Duration::from_secs(10));
        }
        system.chain.stop(Duration::from_secs(10));
        if let Some(k) = system.kube.as_ref() {
            match k.uninstall() {
                Ok(()) => say(&format!("== helm uninstall {} -n {}: done", k.release, k.namespace)),
                Err(e) => say(&format!("== helm uninstall {} -n {} failed: {e:#}", k.release, k.namespace)),
            }
        }
    });
    let _ = stop.await;
    for task in stopping {
        let _ = task.await;
    }
    drop(cpu);
    match outcome {
        Ok(Some(true)) => Ok(()),
        Ok(Some(false)) => {
            say("== the checks failed (see above)");
            std::process::exit(1)
        }
        Ok(None) => {
            say("== stopped");
            std::process::exit(130)
        }
        Err(e) => Err(e),
    }
}

/// Runs the demo; `Ok(passed)`.
async fn run(system: &mut System, started_ms: i64, chain_config: &ChainConfig) -> anyhow::Result<bool> {
    let args = system.args.clone();
    let names = system.names.clone();
    let chain_url = system.chain_url.clone();
    let mut chain_client = None;
    wait_for("chainsim serving", Duration::from_secs(30), async || {
        if let Ok(mut c) = ChainClient::connect(chain_url.clone()).await
            && c.get_head(GetHeadRequest {}).await.is_ok()
        {
            chain_client = Some(c);
            return true;
        }
        false
    })
    .await?;
    let chain = chain_client.context("chain client")?;

    let overrides = Overrides {
        partitions: args.partitions,
        max_replicas: args.max_processors,
        lag_threshold: args.lag_threshold,
        scale_down_window_s: args.scale_down_window_seconds,
        trigger: args.trigger.clone(),
        extra: autoscale::parse_sets(&args.sets).map_err(anyhow::Error::msg)?,
    };
    let policy = autoscale::policy(&args.values_files(), &overrides).map_err(anyhow::Error::msg)?;
    let kube_version = if args.kubernetes { Some(install_release(system, &overrides)?) } else { None };
    // With --kubernetes the chart's pods run the scheduler, sluice-lag and the ingest.
    let grpc = match system.kube {
        Some(_) => None,
        None => {
            let grpc = system.start_scheduler(0)?;
            system.start_scheduler(1)?;
            system.start_lag()?;
            Some(grpc)
        }
    };
    // The token registry before any processor needs it: trigger the refresh job now rather
    // than wait for its first tick (the pods' scheduler: its first tick, every 15 s).
    let redis = redis::Client::open(args.redis_url.as_str())?;
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
    if system.kube.is_none() {
        system.start_ingest(0)?;
        system.start_ingest(1)?;
    }
    let mut chaos = match (args.chaos, args.stack_dir.as_deref()) {
        (true, Some(dir)) => Some(Chaos::new(args.seconds, dir)?),
        (true, None) => {
            anyhow::bail!("--chaos restarts the stack's broker and Redis: it needs --stack-dir (SLUICE_STACK_DIR)")
        }
        (false, _) => None,
    };
    // With --kubernetes the processors are the Deployment's pods: the demo starts none.
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
    let mut scaler = Autoscaler::new(policy, (args.sync_seconds * 1000) as i64);
    match (&system.kube, system.lag_scaler) {
        (Some(_), _) | (None, None) => {}
        (None, Some(addr)) => {
            scaler.connect(addr, &names.group).await.context("connecting to sluice-lag's scaler as KEDA would")?;
        }
    }
    let autoscaler = describe_autoscaler(chaos.is_some(), kube_version.as_deref(), &scaler, args.sync_seconds);
    if chaos.is_some() {
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

    let consumer: Arc<BaseConsumer> =
        Arc::new(KafkaConfig::new(args.brokers.clone()).client().set("group.id", &names.group).create()?);
    let tty = std::io::stdout().is_terminal();
    let begin = Instant::now();
    let mut timeline: Vec<Sample> = Vec::new();
    let mut decisions = Vec::new();
    let mut last_sync = Instant::now();
    let mut traffic_stopped: Option<Instant> = None;
    let mut drained_after: Option<Duration> = None;
    let mut scaled_down_after: Option<Duration> = None;
    let mut last: Option<(Instant, u64, f64, u64)> = None; // (when, committed, ingest tx, chain head)
    let mut latency_before: Vec<(f64, f64)> = Vec::new();
    let mut peak_lag = 0u64;
    let mut printed = 0usize;
    // With --kubernetes: the processor Deployment's replicas as last read.
    let mut wanted = match &system.kube {
        Some(k) => k.replicas("processor")?,
        None => 0,
    };
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(dead) = system.dead() {
            anyhow::bail!("{dead} exited unexpectedly; its log is in {}", system.logs.display());
        }
        let now = Instant::now();
        let topic = names.topic.clone();
        let partitions = args.partitions;
        let c = Arc::clone(&consumer);
        let Some((lag, committed, produced, offsets)) =
            tokio::task::spawn_blocking(move || lag(&c, &topic, partitions)).await.ok().flatten()
        else {
            if traffic_stopped.is_some_and(|at| at.elapsed() > Duration::from_secs(args.drain_timeout_seconds)) {
                break;
            }
            continue;
        };
        peak_lag = peak_lag.max(lag);
        if let Err(e) = system.refresh_pods() {
            say(&format!("   Kubernetes: reading the pods failed: {e:#}"));
        }
        let ingest_texts = system.metrics_of("ingest");
        let ingest_tx: f64 =
            ingest_texts.iter().map(|t| metric(t, "sluice_ingest_produced_transactions_total", "")).sum();
        let head = match chain.clone().get_head(GetHeadRequest {}).await {
            Ok(h) => h.into_inner().head_slot,
            Err(_) => timeline.last().map_or(0, |s: &Sample| s.chain_head_slot),
        };
        let active = ingest_texts.iter().position(|t| metric(t, "sluice_ingest_active", "") == 1.0);
        let proc_texts = system.metrics_of("processor");
        let latency_now = buckets(proc_texts.iter().map(String::as_str), "sluice_processor_end_to_end_latency_seconds");
        let p99 = quantile(&latency_before, &latency_now, 0.99);
        latency_before = latency_now;
        let sched_texts = system.metrics_of("scheduler");
        let lag_text = system.metrics_of("lag").pop().unwrap_or_default();
        if let Some(dir) = args.scrapes.as_ref().filter(|_| system.kube.is_none()) {
            let named = system.ingest.iter().zip(&ingest_texts).chain(system.processors.iter().zip(&proc_texts));
            let named =
                named.chain(system.schedulers.iter().zip(&sched_texts)).chain(system.lag.iter().zip([&lag_text]));
            let texts: Vec<(&Proc, &str)> = named.map(|(p, t)| (p, t.as_str())).collect();
            system.write_scrapes(dir, &texts)?;
        }
        let watched = system.lag_picture();
        let runs = |job: &str| -> u64 {
            sched_texts
                .iter()
                .map(|t| metric(t, "sluice_scheduler_runs_total", &format!("job_name=\"{job}\",outcome=\"succeeded\"")))
                .sum::<f64>() as u64
        };
        let (throughput, ingest_rate, chain_rate) = match last {
            Some((t, c0, tx0, head0)) => {
                let dt = now.duration_since(t).as_secs_f64().max(0.001);
                let chain_tx: u64 =
                    (head0 + 1..=head).map(|slot| u64::from(chain_config.transactions_in_slot(slot))).sum();
                (committed.saturating_sub(c0) as f64 / dt, ((ingest_tx - tx0) / dt).max(0.0), chain_tx as f64 / dt)
            }
            None => (0.0, 0.0, 0.0),
        };
        last = Some((now, committed, ingest_tx, head));
        let sample = Sample {
            t: begin.elapsed().as_secs_f64(),
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
            heartbeat_runs: runs("heartbeat"),
            token_refresh_runs: runs("token-refresh"),
            reconcile_runs: runs("pool-reconcile"),
        };
        let view = report::view(&sample, args.seconds, traffic_stopped.is_some(), active);
        if tty {
            if printed > 0 {
                rewind(printed);
            }
            printed = view.lines().count();
            say(&view);
        } else if timeline.len().is_multiple_of(5) {
            say(&view.replace('\n', " | "));
        }
        timeline.push(sample);

        if let Some(c) = chaos.as_mut()
            && traffic_stopped.is_none()
        {
            c.tick(system, begin.elapsed()).await?;
            printed = 0;
        }
        let current = system.processors.len() as u32;
        // With --kubernetes the Deployment's replicas (what the HPA wrote) are read every
        // second and the kubelet starts and stops the pods; the stand-in decides every
        // --sync-seconds and the demo starts and stops its processors.
        let decided = match (&chaos, &system.kube) {
            (Some(_), _) => None,
            (None, Some(k)) => {
                if let Some((replicas, what, why)) = follow(k, wanted)
                    && replicas != wanted
                {
                    say(&format!("   {what} → {replicas} processors ({why})"));
                    printed = 0;
                    let t = begin.elapsed().as_secs_f64();
                    decisions.push(report::Scaled { t, lag, from: wanted, to: replicas });
                    wanted = replicas;
                }
                None
            }
            (None, None) if now.duration_since(last_sync) >= Duration::from_secs(args.sync_seconds) => {
                last_sync = now;
                let d = scaler.decide(now, current, &offsets).await;
                let metric = d.metric.map_or("unknown".into(), |m| format!("{:.1}", m as f64 / 1000.0));
                Some((d.replicas, format!("autoscaler: lag {lag} (metric {metric})"), d.why))
            }
            (None, None) => None,
        };
        if let Some((replicas, what, why)) = decided {
            if replicas != current {
                say(&format!("   {what} → {replicas} processors ({why})"));
                printed = 0;
                decisions.push(report::Scaled { t: begin.elapsed().as_secs_f64(), lag, from: current, to: replicas });
            }
            for _ in current..replicas {
                system.start_processor()?;
            }
            for _ in replicas..current {
                if let Some(mut p) = system.processors.pop() {
                    // A clean drain takes a few seconds; don't hold the view.
                    system.stopping.push(tokio::task::spawn_blocking(move || {
                        p.stop(Duration::from_secs(25));
                    }));
                }
            }
        }

        match traffic_stopped {
            None if begin.elapsed() >= Duration::from_secs(args.seconds) => {
                say("== traffic done: stopping the ingest, the processors drain the lag");
                printed = 0;
                if let Some(k) = &system.kube {
                    k.scale("ingest", 0).context("scaling the ingest to 0")?;
                }
                let mut ingest: Vec<Proc> = system.ingest.drain(..).collect();
                let stopped =
                    tokio::task::spawn_blocking(move || procs::stop_all(&mut ingest, Duration::from_secs(25)));
                system.stopping.push(stopped);
                traffic_stopped = Some(Instant::now());
            }
            Some(at) if lag == 0 || drained_after.is_some() => {
                let drained = *drained_after.get_or_insert(at.elapsed());
                // With a real HPA the run goes on until it has scaled back down, too.
                let min = scaler.policy.min_replicas.max(1) as u32;
                let waited = at.elapsed().saturating_sub(drained);
                if system.kube.is_none() || system.processor_count() <= min {
                    scaled_down_after = system.kube.as_ref().map(|_| waited);
                    break;
                }
                if waited > Duration::from_secs(args.scale_down_timeout_seconds) {
                    break;
                }
            }
            Some(at) if at.elapsed() > Duration::from_secs(args.drain_timeout_seconds) => break,
            _ => {}
        }
    }

    say("== checking the result against the chain");
    // The ingest stopped before the drain; wait for its last flush (its pods gone).
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
    let summary = report::check(&chain, &args.redis_url, &names.prefix).await?;
    let chaos = match chaos {
        Some(c) => Some(soak_report(c, &args, &names, chain_config, summary.ingest_cursor).await?),
        None => None,
    };
    let outputs = match (&system.kube, summary.ingest_cursor) {
        (Some(_), Some(cursor)) => Some(outputs::check(chain_config, cursor, &outputs_at(&args, &names)).await?),
        _ => None,
    };
    let (_, consumed, produced, _) = {
        let c = Arc::clone(&consumer);
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
        peak_lag,
        drain_seconds: drained_after.map(|d| d.as_secs_f64()),
        scale_down_seconds: scaled_down_after.map(|d| d.as_secs_f64()),
        peak_processors: timeline.iter().map(|s| s.processors).max().unwrap_or(0),
        autoscaler,
        values_files: args.values_files().iter().map(|p| p.display().to_string()).collect(),
        values_set: autoscale::helm_sets(&overrides),
        summary,
        scaling: decisions,
        timeline,
        chaos,
        node: system.pods.iter().find_map(|p| p.node.clone()),
        pods: system.pods_served.iter().cloned().collect(),
        shutdowns: system.shutdown_reports(),
        outputs,
    };
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join(format!("{}.json", names.id));
    std::fs::write(&path, serde_json::to_string_pretty(&full)?)?;
    std::fs::write(args.out.join("latest.json"), serde_json::to_string_pretty(&full)?)?;
    say(&report::summary_text(&full));
    say(&format!("report: {}", path.display()));
    Ok(full.passed())
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

/// `--processor-cpu`: the local processors' control group. By default 100m where one can be
/// made; with --kubernetes none (the chart's values set the pods' CPU).
fn cpu_limit(args: &Args) -> anyhow::Result<Option<cpu::CpuLimit>> {
    let root = std::path::Path::new("/sys/fs/cgroup");
    match (args.processor_cpu, args.kubernetes) {
        (Some(millis), true) if millis > 0 => {
            anyhow::bail!(
                "--processor-cpu is for the local processors: with --kubernetes the chart's processor.resources set the pods' CPU"
            )
        }
        (_, true) | (Some(0), _) => Ok(None),
        (Some(millis), false) => Ok(Some(cpu::CpuLimit::new(root, millis)?)),
        (None, false) => match cpu::CpuLimit::new(root, DEFAULT_PROCESSOR_CPU) {
            Ok(limit) => Ok(Some(limit)),
            Err(e) => {
                say(&format!("== the processors run with no CPU limit: {e:#}"));
                Ok(None)
            }
        },
    }
}

/// The local processors' CPU by default, millicores: a small pod's, so that the default traffic's
/// bursts outgrow one processor (about 7,000 records/s at the processor's 14 CPU-µs/record).
const DEFAULT_PROCESSOR_CPU: u32 = 100;

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
        partitions: args.partitions as i32,
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
