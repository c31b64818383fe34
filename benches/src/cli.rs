//! sluice-bench's command line: a subcommand per mode, each with its arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::lag_scale;

#[derive(Parser, Debug)]
#[command(name = "sluice-bench", about = "Sluice benchmarks; results land in results/")]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Mode,
    /// Folder the JSON result is written to.
    #[arg(long, global = true, default_value = "results")]
    pub out: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum Mode {
    /// Chain generation and swap recognition throughput, one thread.
    Chain(ChainArgs),
    /// Experiment 2: Mutex LRU vs batch-evicting DashMap cache, RwLock vs
    /// DashMap pool state, SeqCst vs Release/Acquire prices; 1 and 2 threads.
    Contention(ContentionArgs),
    /// The stress harness: the real DEX handling path, in-process (in-memory
    /// outputs), or consuming from the local broker (`kafka`: swaps to Kafka,
    /// state in memory; `full`: Redis and Kafka, the production outputs).
    Stress(Box<StressArgs>),
    /// Experiment 5: a backlog drained by 1, 2 and 4 processor instances
    /// (production handler on the local broker and Redis, plus simulated IO).
    Drain(DrainArgs),
    /// The ingest gateway streaming a chain backlog into Kafka: idempotent
    /// and transactional rounds, alternating, on the local broker.
    Ingest(IngestArgs),
    /// One sluice-lag poller (the binary, built by this mode unless given)
    /// watching topics × groups on the local broker: poll time, CPU, requests.
    LagScale(LagScaleArgs),
    /// The open-loop feeder's own process (started by `stress`; speaks
    /// JSON lines on stdin and stdout, see `feeder`).
    #[command(hide = true)]
    Feed,
    /// Experiment 3: cohort barrier vs bounded pipeline under heavy-tailed IO.
    Barrier(BarrierArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StressMode {
    InProcess,
    Kafka,
    Full,
}

#[derive(Args, Debug)]
pub struct ChainArgs {
    /// Transactions to generate.
    #[arg(long, default_value_t = 200_000)]
    pub transactions: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct ContentionArgs {
    /// Seconds per variant and thread count.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Fail if an "after" variant's 2-thread p99 exceeds this (CI smoke; catches gross regressions).
    #[arg(long)]
    pub max_p99_us: Option<u64>,
}

#[derive(Args, Debug)]
pub struct StressArgs {
    #[arg(long, value_enum, default_value_t = StressMode::InProcess)]
    pub mode: StressMode,
    /// Run time, seconds (for kafka and full: the open-loop phase).
    #[arg(long, default_value_t = 65.0)]
    pub seconds: f64,
    /// In-process: workers (disjoint key sets, like partitions).
    #[arg(long, default_value_t = 12)]
    pub workers: usize,
    /// Kafka and full: partitions of the input topic.
    #[arg(long, default_value_t = 12)]
    pub partitions: usize,
    /// Kafka and full: open-loop rate, records/s (default: 70% of the backlog drain rate).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Kafka and full: extra librdkafka properties for the processor, `k=v,k=v`.
    #[arg(long)]
    pub kafka_properties: Option<String>,
    /// Kafka and full: record a perf profile (DWARF call graphs) of this
    /// process during the open loop into this file (needs `perf`).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Distinct transactions generated, then replayed for the duration
    /// (default 100,000 in-process; 400,000 for kafka and full, whose
    /// backlog they are, about 1.2 records each, so that even the ceilings
    /// drain for seconds).
    #[arg(long)]
    pub transactions: Option<u64>,
    /// Fail if p99 exceeds this, µs (CI smoke; catches gross regressions).
    #[arg(long)]
    pub max_p99_us: Option<u64>,
    /// Kafka and full: fail if the processor drains the backlog below
    /// this share of the fair ceiling (CI smoke: catches a return to
    /// per-record hand-offs).
    #[arg(long)]
    pub min_over_ceiling: Option<f64>,
    /// Kafka and full: also drain the backlog with the fair ceiling in
    /// Kafka transactions committed every this many ms (what
    /// exactly-once outputs cost at the client).
    #[arg(long)]
    pub ceiling_transactions_ms: Option<u64>,
    /// Kafka and full: also run the processor with exactly-once outputs
    /// (Kafka transactions every this many ms), same run: the backlog
    /// drained at-least-once, exactly-once, at-least-once again, and an
    /// exactly-once open loop at the same rate as the first.
    #[arg(long)]
    pub exactly_once_ms: Option<u64>,
    /// With --exactly-once-ms: drains of each kind, alternating.
    #[arg(long, default_value_t = 3)]
    pub exactly_once_drains: usize,
    /// Kafka and full: the processor drains the backlog this many times,
    /// and its drain figures (the denominator of every cost ratio) are the
    /// drain of the median whole-system cost.
    #[arg(long, default_value_t = 3)]
    pub drains: usize,
    /// Kafka and full: extra librdkafka properties for the open loops'
    /// feeder, which stands in for the ingest (`k=v,k=v`).
    #[arg(long)]
    pub feeder_properties: Option<String>,
    /// Kafka and full: topic configs for every topic the run creates
    /// (`k=v,k=v`; `--topic-config ''`: the stack's broker defaults). By
    /// default Kafka's own segment size, 1 GiB: the stack's 64 MiB (kept
    /// small for its long-lived topics' disk) rolled ~100 segments in a 65 s
    /// loop at 149k records/s, and 5 rolls in one second stalled records
    /// 241 ms (`…T165335Z` against `…T170623Z`, results/README.md).
    #[arg(long, default_value = "segment.bytes=1073741824")]
    pub topic_config: String,
    /// Kafka and full: also drain the backlog with the best loop on the same
    /// client, this many consume-produce loops on one shared producer, and
    /// feed it at the headline rate and at each --loads and --fixed-rates
    /// rate for --load-seconds (0: not run).
    #[arg(long, default_value_t = 2)]
    pub ceiling_threads: usize,
    /// Kafka and full: open loops at the headline rate (70% of the max
    /// sustained, or --rate), one after the other: the tail's spread.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Kafka and full: further open loops at these shares of the max
    /// sustained rate (cost across the load range), `0.3,0.5`; `--loads`
    /// alone: none.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "0.3")]
    pub loads: Vec<f64>,
    /// Kafka and full: further open loops at these fixed rates, records/s,
    /// which do not move when the max sustained rate does; `--fixed-rates`
    /// alone: none.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "20000,40000")]
    pub fixed_rates: Vec<f64>,
    /// Kafka and full: the length of each --loads and --fixed-rates open loop,
    /// and of each run of the best loop at a rate, s.
    #[arg(long, default_value_t = 30.0)]
    pub load_seconds: f64,
    /// Kafka and full: an unmeasured open loop at 20,000 records/s before
    /// anything is measured, and another at the headline rate before the
    /// headline loops, s each (a broker just started serves its first minute
    /// slower, and compiles again at a new rate: its JIT); 0 reports a cold run.
    #[arg(long, default_value_t = 20.0)]
    pub warmup_seconds: f64,
    /// Kafka and full: fail if the whole-system CPU per record at any load
    /// exceeds this multiple of the drain's, in the same run (CI smoke).
    #[arg(long)]
    pub max_cost_over_drain: Option<f64>,
    /// Kafka and full: the length of each of the rate search's trials, s.
    #[arg(long, default_value_t = 5.0)]
    pub trial_seconds: f64,
    /// Kafka and full, without --rate: fail unless the rate search finds a
    /// limit (a rate not sustained above one sustained) and its max
    /// sustained is at least this share of the drain's rate, same run (CI
    /// smoke: catches a verdict that always passes or always fails).
    #[arg(long)]
    pub min_max_over_drain: Option<f64>,
}

#[derive(Args, Debug)]
pub struct DrainArgs {
    /// Transactions in the backlog (about 1.2 records each).
    #[arg(long, default_value_t = 20_000)]
    pub transactions: u64,
    /// Instance counts, one round each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub instances: Vec<usize>,
    /// Simulated IO wait per record, ms (large enough that the 2 cores are not the limit).
    #[arg(long, default_value_t = 10)]
    pub io_ms: u64,
    /// Handler concurrency per instance.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Partitions (divisible by every instance count).
    #[arg(long, default_value_t = 16)]
    pub partitions: usize,
    /// Fail unless the largest round reaches this speedup over one instance (CI smoke).
    #[arg(long)]
    pub min_speedup: Option<f64>,
}

#[derive(Args, Debug)]
pub struct IngestArgs {
    /// Chain transactions in each round's backlog (about 1.6 records each).
    #[arg(long, default_value_t = 200_000)]
    pub transactions: u64,
    /// Rounds per mode.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The transactional rounds' commit interval, ms (the ingest's default).
    #[arg(long, default_value_t = 100)]
    pub interval_ms: u64,
    #[arg(long, default_value_t = 12)]
    pub partitions: i32,
    /// Fail if transactional ÷ idempotent throughput is below this (CI smoke).
    #[arg(long)]
    pub min_ratio: Option<f64>,
}

#[derive(Args, Debug)]
pub struct LagScaleArgs {
    #[arg(long, default_value_t = 20)]
    pub topics: usize,
    /// Partitions per topic.
    #[arg(long, default_value_t = 50)]
    pub partitions: usize,
    /// Groups per topic, each committed on every partition at an offset of its own.
    #[arg(long, default_value_t = 10)]
    pub groups_per_topic: usize,
    /// Records per partition (more than the groups per topic: every group lags).
    #[arg(long, default_value_t = 20)]
    pub records_per_partition: i64,
    #[arg(long, default_value_t = 5000)]
    pub poll_interval_ms: u64,
    /// Steady polls measured per run, after the cold first poll.
    #[arg(long, default_value_t = 10)]
    pub polls: usize,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "list,regex")]
    pub selection: Vec<lag_scale::Selection>,
    /// Runs of each selection, each a fresh sluice-lag.
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    /// The sluice-lag binary (default: built now with this benchmark's profile).
    #[arg(long)]
    pub lag_bin: Option<PathBuf>,
    /// Fail if any poll, cold or steady, took longer, ms (CI smoke).
    #[arg(long)]
    pub max_poll_ms: Option<f64>,
}

#[derive(Args, Debug)]
pub struct BarrierArgs {
    /// Base item latency, ms (large against tokio's 1 ms timer).
    #[arg(long, default_value_t = 20)]
    pub base_ms: u64,
    /// Slow items take this many times the base.
    #[arg(long, default_value_t = 100)]
    pub slow_factor: u64,
    /// Share of slow items, parts per million (10,000 = 1%).
    #[arg(long, default_value_t = 10_000)]
    pub slow_ppm: u32,
    /// Counting window per run, seconds (long against the slowest item).
    #[arg(long, default_value_t = 20.0)]
    pub window_seconds: f64,
    /// Warm-up before the window, seconds.
    #[arg(long, default_value_t = 3.0)]
    pub warmup_seconds: f64,
    /// Fail unless the pipeline reaches this share of its Little's-law bound (CI smoke).
    #[arg(long)]
    pub min_utilization: Option<f64>,
}
