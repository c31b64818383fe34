//! The demo's command line.

use std::path::{Path, PathBuf};

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(name = "sluice-demo", about = "Run the whole Sluice system locally and check the result against the chain")]
pub struct Args {
    /// How long the chain's traffic runs, seconds.
    #[arg(long, default_value_t = 120)]
    pub seconds: u64,
    /// Average chain transactions per second outside bursts.
    #[arg(long, default_value_t = 2_000)]
    pub rate: u32,
    /// A burst ends every this many seconds (0: no bursts).
    #[arg(long, default_value_t = 60.0)]
    pub burst_every_seconds: f64,
    /// Each burst's length, seconds (the last ones of each period).
    #[arg(long, default_value_t = 30.0)]
    pub burst_seconds: f64,
    /// The rate's multiplier during a burst.
    #[arg(long, default_value_t = 4)]
    pub burst_factor: u32,
    /// Each local processor's CPU, millicores, as a pod's CPU limit (a control group of the
    /// demo's own with the kubelet's CFS quota; needs root): a processor drains at the rate a
    /// pod of that size would, so the traffic can outgrow one. 0: unlimited. Default: 100
    /// where a control group can be made (else unlimited, said so). Not with --kubernetes,
    /// where the chart's values set it.
    #[arg(long)]
    pub processor_cpu: Option<u32>,
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
    /// More values files merged over --values in order, as `helm -f` does (and given to helm).
    #[arg(long = "values-override", short = 'f', value_name = "FILE")]
    pub values_override: Vec<PathBuf>,
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
    /// With --kubernetes, after the drain: how long the HPA may take to scale the processors
    /// back to minReplicas (its stabilization window and scale-down policies) before the
    /// demo stops waiting.
    #[arg(long, default_value_t = 600)]
    pub scale_down_timeout_seconds: u64,
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
    /// Scale with a real Kubernetes cluster (deploy/local/cluster.sh) instead of the stand-in:
    /// the chart installed with helm, KEDA and the HPA deciding, the processors and sluice-lag
    /// the chart's pods on the cluster's node (see kubernetes.rs).
    #[arg(long)]
    pub kubernetes: bool,
    /// With --kubernetes: the registry and path the node pulls the images from (the chart's
    /// image.registry; deploy/images/build.sh --push put them there).
    #[arg(long, env = "SLUICE_IMAGE_REGISTRY")]
    pub image_registry: Option<String>,
    /// With --kubernetes: the images' tag (the chart's image.tag; empty: its appVersion).
    #[arg(long, env = "SLUICE_IMAGE_TAG")]
    pub image_tag: Option<String>,
    /// With --kubernetes: where the pods reach Kafka (stack.sh's listener for pods).
    #[arg(long, env = "SLUICE_KAFKA_POD_BROKERS")]
    pub pod_brokers: Option<String>,
    /// With --kubernetes: this machine's address that the pods reach (the chain listens there).
    #[arg(long, env = "SLUICE_STACK_POD_ADDRESS")]
    pub pod_address: Option<String>,
    /// With --kubernetes: where the pods reach Redis.
    #[arg(long, env = "SLUICE_REDIS_POD_URL")]
    pub pod_redis_url: Option<String>,
    /// The cluster's kubeconfig (cluster.sh env prints it).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The helm binary (deploy/local/tools.sh helm).
    #[arg(long, env = "SLUICE_HELM", default_value = "helm")]
    pub helm: PathBuf,
    /// The chart installed with --kubernetes.
    #[arg(long, default_value = "helm/sluice")]
    pub chart: PathBuf,
    /// The namespace it is installed into (created; the release is uninstalled at the end).
    #[arg(long, default_value = "sluice-demo")]
    pub namespace: String,
    /// More chart values, KEY=VALUE, over --values and the flags (e.g.
    /// processor.autoscaling.timeLag.targetSeconds=10); with the stand-in too.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
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

impl Args {
    /// The values files in helm's order: `--values`, then each `-f` over it.
    pub fn values_files(&self) -> Vec<&Path> {
        std::iter::once(&self.values).chain(&self.values_override).map(PathBuf::as_path).collect()
    }
}
