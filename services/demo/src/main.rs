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
mod run;
mod shutdown;
mod signals;
mod system;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use sluice_chainsim::ChainConfig;
use sluice_kafka::{KafkaConfig, TopicSpec, ensure_topics};
use sluice_service::process::free_port;

use crate::args::Args;
use crate::procs::{Proc, binary, say};
use crate::system::{Names, System, fresh_token};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    check_args(&args)?;
    let started_ms = sluice_core::clock::now_ms();
    let names = Names::for_run(format!("demo-{}", started_ms / 1000), fresh_token());
    // A report left by an earlier run must not pass for this one's.
    let _ = std::fs::remove_file(args.out.join("latest.json"));
    let logs = args.logs.clone().unwrap_or_else(|| PathBuf::from(".stack").join(&names.id));
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    if let Some(dir) = &args.scrapes {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    create_topics(&args, &names).await?;
    say(&format!("== {}: the whole system on this machine (logs in {})", names.id, logs.display()));
    let chain_config = chain_config(&args, started_ms);
    let (chain, chain_url) = start_chain(&args, &chain_config, &logs)?;
    let cpu = cpu_limit(&args)?;
    let mut system = System {
        args: args.clone(),
        names,
        logs,
        chain,
        chain_url,
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
    let outcome = run_until_signal(&mut system, started_ms, &chain_config).await;
    stop_everything(system).await;
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

fn check_args(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.seconds > 0 && args.rate > 0, "--seconds and --rate must be above 0");
    anyhow::ensure!(
        args.max_processors >= 1 && args.max_processors <= args.partitions,
        "--max-processors must be between 1 and --partitions ({}): more consumers than partitions sit idle",
        args.partitions
    );
    anyhow::ensure!(
        args.burst_every_seconds >= 0.0 && args.burst_seconds >= 0.0 && args.burst_seconds <= args.burst_every_seconds,
        "--burst-seconds must be between 0 and --burst-every-seconds"
    );
    Ok(())
}

async fn create_topics(args: &Args, names: &Names) -> anyhow::Result<()> {
    let kafka = KafkaConfig::new(args.brokers.clone());
    let topics = [
        TopicSpec::new(&names.topic, args.partitions as i32),
        TopicSpec::new(&names.swaps, args.partitions as i32),
        TopicSpec::new(&names.dlq, 3),
    ];
    ensure_topics(&kafka, &topics, Duration::from_secs(60)).await.context("creating the demo's topics")
}

/// The chain's shape, known here too so that the view can show its true rate.
fn chain_config(args: &Args, started_ms: i64) -> ChainConfig {
    let slots = |seconds: f64| (seconds * 1000.0 / ChainConfig::default().slot_ms as f64).round() as u64;
    ChainConfig {
        seed: 1,
        genesis_ms: started_ms,
        tx_per_sec: args.rate,
        burst_every_slots: slots(args.burst_every_seconds),
        burst_slots: slots(args.burst_seconds),
        burst_factor: args.burst_factor,
        ..ChainConfig::default()
    }
}

/// chainsim serving `chain_config`, and its URL (with --kubernetes where the pods reach the host).
fn start_chain(args: &Args, chain_config: &ChainConfig, logs: &std::path::Path) -> anyhow::Result<(Proc, String)> {
    let chain_port = free_port()?;
    let chain_host = match (args.kubernetes, &args.pod_address) {
        (true, Some(address)) => address.clone(),
        (true, None) => {
            anyhow::bail!("--kubernetes needs --pod-address (SLUICE_STACK_POD_ADDRESS): the pods reach the chain there")
        }
        (false, _) => "127.0.0.1".to_string(),
    };
    let listen = format!("{chain_host}:{chain_port}");
    let chain = Proc::start(
        "chainsim",
        &binary("chainsim")?,
        &[
            "serve",
            "--listen",
            &listen,
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
        logs,
    )?;
    Ok((chain, format!("http://{listen}")))
}

/// The run, or `None` when Ctrl-C or SIGTERM stopped it.
async fn run_until_signal(
    system: &mut System,
    started_ms: i64,
    chain_config: &ChainConfig,
) -> anyhow::Result<Option<bool>> {
    let run = async { run::run(system, started_ms, chain_config).await.map(Some) };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        outcome = run => outcome,
        _ = tokio::signal::ctrl_c() => {
            say("\n== interrupted: stopping everything the demo started");
            Ok(None)
        }
        _ = term.recv() => {
            say("\n== terminated: stopping everything the demo started");
            Ok(None)
        }
    }
}

/// Everything still running stops now (SIGTERM, then SIGKILL), and what was already stopping
/// is waited for; then the processors' control group goes.
async fn stop_everything(mut system: System) {
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
