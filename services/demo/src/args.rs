//! The demo's command line.

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(name = "sluice-demo", about = "Run the whole Sluice system locally and check the result against the chain")]
pub struct Args {
    /// How long the chain's traffic runs, seconds.
    #[arg(long, default_value_t = 120)]
    pub seconds: u64,
    /// Average chain transactions per second outside bursts (bursts: 4× for 6 s every 60 s).
    #[arg(long, default_value_t = 2_000)]
    pub rate: u32,
    /// Partitions of the demo's topics.
    #[arg(long, default_value_t = 12)]
    pub partitions: u32,
    /// At most this many processors (KEDA maxReplicaCount).
    #[arg(long, default_value_t = 4)]
    pub max_processors: u32,
    /// Lag each processor is expected to carry (KEDA lagThreshold).
    #[arg(long, default_value_t = 3_000)]
    pub lag_threshold: u64,
    /// The chart values whose autoscaling policy the demo runs (the flags below override it).
    #[arg(long, default_value = "helm/sluice/values.yaml")]
    pub values: PathBuf,
    /// The autoscaling trigger, over the values' (kafka, offsetLag, timeLag, drainTime).
    #[arg(long)]
    pub trigger: Option<String>,
    /// How often the autoscaler decides (the HPA syncs every 15 s).
    #[arg(long, default_value_t = 5)]
    pub sync_seconds: u64,
    /// Scale-down stabilization window (the HPA's default is 300 s).
    #[arg(long, default_value_t = 30)]
    pub scale_down_window_seconds: u64,
    /// After traffic stops, how long the processors may take to drain the lag.
    #[arg(long, default_value_t = 180)]
    pub drain_timeout_seconds: u64,
    /// Where the JSON report goes.
    #[arg(long, default_value = "results/demo")]
    pub out: PathBuf,
    /// Where the processes' logs go (default: .stack/<run id>/).
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Keep each service's newest `/metrics` text here as `<process>.prom`
    /// (the chart's tests check the dashboard's and the alerts' metric names
    /// against them), and the running services as Prometheus file-based
    /// discovery targets in `targets.json` (namespace `sluice-demo`).
    #[arg(long)]
    pub scrapes: Option<PathBuf>,
    #[arg(long, env = "SLUICE_KAFKA_BROKERS")]
    pub brokers: String,
    #[arg(long, env = "SLUICE_REDIS_URL")]
    pub redis_url: String,
    /// The chaos soak: 3 processors with exactly-once outputs (no autoscaler)
    /// while faults hit every part (see `chaos.rs`), then the outputs are
    /// checked too: nothing lost, nothing twice.
    #[arg(long)]
    pub chaos: bool,
    /// The local stack's folder (`stack.sh`'s `SLUICE_STACK_DIR`): the soak
    /// restarts its broker and Redis.
    #[arg(long, env = "SLUICE_STACK_DIR")]
    pub stack_dir: Option<PathBuf>,
}
