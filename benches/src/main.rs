//! sluice-bench: Sluice's benchmarks. Every run writes
//! `results/<UTC timestamp>-<mode>.json` (git commit, machine, config,
//! figures) and prints a table.
//!
//! Modes so far:
//! - `chain`: how fast the chain simulator generates transactions and how
//!   fast the core recognises them, on one thread; the ceiling for any
//!   benchmark fed by chainsim.
//! - `contention`: experiment 2, locks before and after (see `contention`).
//! - `barrier`: experiment 3, cohort barrier against the bounded pipeline.
//! - `drain`: experiment 5, a backlog drained by 1, 2 and 4 instances.
//! - `ingest`: the ingest gateway streaming a backlog into Kafka, with and
//!   without Kafka transactions (see `ingest`).
//! - `lag-scale`: one sluice-lag poller watching many groups × partitions on
//!   the local broker (issue 14's scale target; see `lag_scale`).
//! - `stress`: the stress harness: `--mode in-process` (the handling path's
//!   ceiling with in-memory outputs), `kafka` and `full` (against the local
//!   broker and Redis, beside the fair ceiling of `ceiling`; see `broker`).

use anyhow::{Context, Result};
use clap::Parser;

use crate::cli::{Cli, Mode};
use crate::modes::Outcome;

mod barrier;
mod broker;
mod ceiling;
mod cli;
mod contention;
mod cost;
mod drain;
mod feeder;
mod ingest;
mod jmx;
mod lag_scale;
mod live;
mod machine;
mod modes;
mod report;
mod stats;
mod stress;
mod traffic;

fn main() -> Result<()> {
    let cli = Cli::parse();
    let outcome = match cli.mode {
        Mode::Feed => return feeder::serve(),
        Mode::Chain(a) => modes::chain(a),
        Mode::Stress(a) => modes::stress(*a),
        Mode::Contention(a) => modes::contention(a),
        Mode::Drain(a) => modes::drain(a),
        Mode::Ingest(a) => modes::ingest(a),
        Mode::LagScale(a) => modes::lag_scale(a),
        Mode::Barrier(a) => modes::barrier(a),
    }?;
    write_result(&cli.out, outcome)
}

/// Writes `<out>/<UTC timestamp>-<mode>.json`: the commit, the machine, the build profile,
/// the mode's configuration and its figures.
#[allow(clippy::print_stdout)]
fn write_result(out: &std::path::Path, outcome: Outcome) -> Result<()> {
    let Outcome { mode, config, figures } = outcome;
    let report = serde_json::json!({
        "mode": mode,
        "git_commit": machine::git_commit(),
        "machine": machine::describe(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "config": config,
        "figures": figures,
    });
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let path = out.join(format!("{}-{mode}.json", machine::utc_stamp()));
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
