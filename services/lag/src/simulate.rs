//! `sluice-lag simulate`: replays a trace through the autoscaling engine
//! (`sluice-scaling`) and prints what KEDA and the HPA would have done.
//!
//! `simulate --values helm/sluice/values.yaml [--values mine.yaml] [--compare other.yaml]
//! --trace SPEC`: the policy in the values (override files merged over the first, like
//! `helm -f`) on the trace, with the consumer model's settings; prints the figures of each
//! policy side by side and the replica steps, and with `--json FILE` writes every second and
//! the HPA behavior each policy ran with (its policies derived as the chart renders them)
//! and its partition count
//! (`deploy/local/results.sh --sim-plot FILE OUT.png` draws it).
//!
//! `simulate hpa-case FILE` replays one conformance case (`services/scaling/conformance/hpa/testdata/`) and
//! prints its sync timeline as JSON, which `services/scaling/conformance/hpa` compares with Kubernetes' own
//! controller on the same case. `simulate keda-kafka FILE` runs KEDA's kafka trigger
//! arithmetic on recorded offsets (`{"trigger": {…}, "polls": [[{committed, earliest,
//! latest}, …], …]}`) and prints each poll's metric, which `services/scaling/conformance/keda` compares with
//! KEDA's own scaler on the same offsets.

use clap::Parser;
use serde::Deserialize;
use sluice_scaling::case::{HpaCase, replay};
use sluice_scaling::keda::{KafkaScaler, KafkaTrigger, PartitionOffsets};
use sluice_scaling::sim::{self, Model, Sample, Summary};
use sluice_scaling::trace::{BadTrace, Trace};
use sluice_scaling::values::{ValuesError, merge, parse_yaml, policy};

/// Why a simulation did not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Bad arguments (or `--help`: clap's text).
    #[error("{0}")]
    Args(#[from] clap::Error),
    #[error(transparent)]
    Values(#[from] ValuesError),
    #[error(transparent)]
    Trace(#[from] BadTrace),
    #[error("{0}")]
    Invalid(&'static str),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KedaKafkaCase {
    trigger: KafkaTrigger,
    polls: Vec<Vec<PartitionOffsets>>,
}

fn read<T: serde::de::DeserializeOwned>(path: &str) -> Result<T, SimulateError> {
    serde_json::from_str(&text(path)?).map_err(|source| SimulateError::Json { path: path.to_string(), source })
}

fn json(value: &impl serde::Serialize) -> Result<String, SimulateError> {
    serde_json::to_string_pretty(value).map_err(|source| SimulateError::Json { path: "stdout".into(), source })
}

/// Runs `simulate ARGS…` and returns what to print.
pub fn run(args: &[String]) -> Result<String, SimulateError> {
    match args {
        [kind, path] if kind == "hpa-case" => {
            let case: HpaCase = read(path)?;
            json(&replay(&case))
        }
        [kind, path] if kind == "keda-kafka" => {
            let case: KedaKafkaCase = read(path)?;
            let mut scaler = KafkaScaler::new(case.trigger);
            let metrics: Vec<_> = case.polls.iter().map(|p| scaler.poll(p)).collect();
            json(&metrics)
        }
        _ => policies(&SimulateArgs::try_parse_from(
            std::iter::once("sluice-lag simulate".to_string()).chain(args.iter().cloned()),
        )?),
    }
}

/// `simulate`'s arguments for a policy run.
#[derive(Debug, Parser)]
#[command(
    name = "sluice-lag simulate",
    about = "Dry-run the chart's autoscaling policy on a trace (or: simulate hpa-case FILE | keda-kafka FILE)"
)]
pub struct SimulateArgs {
    /// Values files, the chart's first; later ones are merged over it like `helm -f`.
    #[arg(long = "values", required = true)]
    pub values: Vec<String>,
    /// Another override file merged over the same values: a second policy, side by side.
    #[arg(long)]
    pub compare: Vec<String>,
    /// synthetic:base=R,burst=PEAK@START+SECONDS,ramp=PEAK@START+SECONDS,length=SECONDS |
    /// prometheus:FILE (a query_range export of a produce rate) | demo:FILE (a sluice-demo report).
    #[arg(long)]
    pub trace: String,
    /// Stretches the trace's clock (10: a 6 s burst lasts 60 s), to replay a short recording at
    /// a production pace.
    #[arg(long, default_value_t = 1.0)]
    pub stretch: f64,
    /// Multiplies the trace's produce rate.
    #[arg(long, default_value_t = 1.0)]
    pub rate_factor: f64,
    /// Records/s one processor consumes (full mode's max sustained rate on 2 cores: 41,978).
    #[arg(long, default_value_t = 40_000.0)]
    pub per_pod_rate: f64,
    /// Seconds of no consumption per rebalance.
    #[arg(long, default_value_t = 2.0)]
    pub rebalance_pause: f64,
    /// Seconds from a pod asked for to a pod consuming; default: the values'
    /// `processor.autoscaling.podStartupSeconds` (measure yours: deploy/local/measure-pods.sh).
    #[arg(long)]
    pub startup: Option<f64>,
    /// How often the processors commit, seconds (their COMMIT_INTERVAL_MS; 0: at once): what
    /// KEDA and sluice-lag read trails the consumption by up to this much.
    #[arg(long, default_value_t = 1.0)]
    pub commit_interval: f64,
    /// The time-lag objective, seconds, the figures count against.
    #[arg(long, default_value_t = 30.0)]
    pub objective: f64,
    /// Writes every policy's per-second samples and figures here (JSON).
    #[arg(long)]
    pub json: Option<String>,
}

fn text(path: &str) -> Result<String, SimulateError> {
    std::fs::read_to_string(path).map_err(|source| SimulateError::Read { path: path.to_string(), source })
}

/// Runs every policy on the trace and prints the comparison.
fn policies(args: &SimulateArgs) -> Result<String, SimulateError> {
    let mut base = parse_yaml(&args.values[0], &text(&args.values[0])?)?;
    for file in &args.values[1..] {
        merge(&mut base, parse_yaml(file, &text(file)?)?);
    }
    let mut named = vec![(args.values.last().cloned().unwrap_or_default(), base.clone())];
    for file in &args.compare {
        let mut v = base.clone();
        merge(&mut v, parse_yaml(file, &text(file)?)?);
        named.push((file.clone(), v));
    }
    let mut trace = Trace::parse(&args.trace, |path| std::fs::read_to_string(path))?;
    if !(args.stretch > 0.0 && args.rate_factor > 0.0) {
        return Err(SimulateError::Invalid("--stretch and --rate-factor must be above 0"));
    }
    if args.stretch != 1.0 || args.rate_factor != 1.0 {
        trace = trace.scaled(args.stretch, args.rate_factor);
    }
    let model = Model {
        per_pod_rate: args.per_pod_rate,
        rebalance_pause_s: args.rebalance_pause,
        startup_s: match args.startup {
            Some(s) => s,
            None => base
                .pointer("/processor/autoscaling/podStartupSeconds")
                .and_then(serde_json::Value::as_f64)
                .ok_or(SimulateError::Invalid(
                    "the values have no processor.autoscaling.podStartupSeconds: give --startup",
                ))?,
        },
        lag_poll_s: 5.0,
        sync_s: 15.0,
        commit_interval_s: args.commit_interval,
        objective_s: args.objective,
    };
    let (mut runs, mut behaviors) = (Vec::new(), Vec::new());
    for (name, values) in &named {
        let p = policy(name, values)?;
        let (samples, summary) = sim::run(&p, &model, &trace);
        behaviors.push((p.behavior, p.partitions));
        runs.push((summary, samples));
    }
    if let Some(path) = &args.json {
        let out = serde_json::json!({
            "trace": trace.name,
            "model": model,
            "columns": ["t_s", "produce_rate", "consume_rate", "lag", "time_lag_s", "desired", "ready", "paused"],
            "runs": runs.iter().zip(&behaviors).map(|((s, samples), (behavior, partitions))| serde_json::json!({
                "summary": s,
                "behavior": behavior,
                "partitions": partitions,
                "samples": samples.iter().map(row).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, out.to_string()).map_err(|source| SimulateError::Write { path: path.clone(), source })?;
    }
    Ok(report(&trace, &model, &runs))
}

/// One second as a compact row (`columns` in the JSON), rounded to what a plot shows.
fn row(s: &Sample) -> serde_json::Value {
    let r = |x: f64| (x * 10.0).round() / 10.0;
    serde_json::json!([
        s.t_s,
        r(s.produce_rate),
        r(s.consume_rate),
        r(s.lag),
        r(s.time_lag_s),
        s.desired,
        s.ready,
        s.paused
    ])
}

fn report(trace: &Trace, model: &Model, runs: &[(Summary, Vec<Sample>)]) -> String {
    let mut out = format!(
        "trace {} ({:.0} s); model: {:.0} records/s per pod, {:.1} s pause per rebalance, {:.0} s start-up\n\n",
        trace.name,
        trace.length_s(),
        model.per_pod_rate,
        model.rebalance_pause_s,
        model.startup_s
    );
    type Row = (&'static str, fn(&Summary) -> String);
    let rows: [Row; 7] = [
        ("peak lag (records)", |s| format!("{:.0}", s.peak_lag)),
        ("peak time lag (s)", |s| format!("{:.1}", s.peak_time_lag_s)),
        ("time over objective (s)", |s| format!("{:.0} (> {:.0} s)", s.seconds_over_objective, s.objective_s)),
        ("rebalances", |s| s.rebalances.to_string()),
        ("replica-minutes", |s| format!("{:.1}", s.replica_minutes)),
        ("peak replicas", |s| s.peak_replicas.to_string()),
        ("lag at the end", |s| format!("{:.0}", s.final_lag.max(0.0) + 0.0)),
    ];
    let width = runs.iter().map(|(s, _)| s.policy.len()).max().unwrap_or(0).max(12);
    out += &format!("{:<24}", "");
    for (s, _) in runs {
        out += &format!("  {:>width$}", s.policy);
    }
    out.push('\n');
    for (label, f) in rows {
        out += &format!("{label:<24}");
        for (s, _) in runs {
            out += &format!("  {:>width$}", f(s));
        }
        out.push('\n');
    }
    for (s, samples) in runs {
        out += &format!("\nreplica steps, {}: ", s.policy);
        let mut last = None;
        let steps: Vec<String> = samples
            .iter()
            .filter_map(|x| {
                let changed = last != Some(x.desired);
                last = Some(x.desired);
                changed.then(|| format!("{:.0}s→{}", x.t_s, x.desired))
            })
            .collect();
        out += &steps.join(" ");
        out.push('\n');
    }
    out
}
