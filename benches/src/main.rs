//! sluice-bench: Sluice's benchmarks. Every run writes
//! `results/<UTC timestamp>-<mode>.json` (git commit, machine, config,
//! figures) and prints a table.
//!
//! Modes so far:
//! - `chain`: how fast the chain simulator generates transactions and how
//!   fast the core recognises them, on one thread; the ceiling for any
//!   benchmark fed by chainsim.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::recognize::recognize;
use sluice_core::route::record_keys;

mod machine;

#[derive(Parser, Debug)]
#[command(name = "sluice-bench", about = "Sluice benchmarks; results land in results/")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
    /// Folder the JSON result is written to.
    #[arg(long, global = true, default_value = "results")]
    out: PathBuf,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Chain generation and swap recognition throughput, one thread.
    Chain {
        /// Transactions to generate.
        #[arg(long, default_value_t = 200_000)]
        transactions: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Serialize, Debug)]
struct ChainFigures {
    transactions: u64,
    records: u64,
    swaps_recognised: u64,
    generate_tx_per_sec: f64,
    generate_us_per_tx: f64,
    recognise_records_per_sec: f64,
    recognise_ns_per_record: f64,
    encoded_bytes_per_tx: f64,
}

fn chain_mode(transactions: u64, seed: u64) -> Result<(serde_json::Value, ChainFigures)> {
    let config = ChainConfig { seed, tx_per_sec: 10_000, ..ChainConfig::default() };
    let mut chain = Chain::new(config.clone()).map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let mut txs = Vec::with_capacity(transactions as usize);
    while (txs.len() as u64) < transactions {
        txs.extend(chain.next_block().transactions.into_iter().map(|g| g.tx));
    }
    let generate = started.elapsed();

    let started = Instant::now();
    let (mut records, mut swaps) = (0u64, 0u64);
    for tx in &txs {
        for key in record_keys(tx) {
            records += 1;
            if let Ok(r) = recognize(tx, key) {
                swaps += r.swaps.len() as u64;
            }
        }
    }
    let recognise = started.elapsed();
    let bytes: usize = txs.iter().map(prost::Message::encoded_len).sum();
    let n = txs.len() as f64;
    let figures = ChainFigures {
        transactions: txs.len() as u64,
        records,
        swaps_recognised: swaps,
        generate_tx_per_sec: n / generate.as_secs_f64(),
        generate_us_per_tx: generate.as_secs_f64() * 1e6 / n,
        recognise_records_per_sec: records as f64 / recognise.as_secs_f64(),
        recognise_ns_per_record: recognise.as_secs_f64() * 1e9 / records as f64,
        encoded_bytes_per_tx: bytes as f64 / n,
    };
    Ok((serde_json::to_value(&config)?, figures))
}

#[allow(clippy::print_stdout)]
fn main() -> Result<()> {
    let cli = Cli::parse();
    let (mode, config, figures) = match cli.mode {
        Mode::Chain { transactions, seed } => {
            let (config, figures) = chain_mode(transactions, seed)?;
            println!("mode chain ({} transactions, one thread)", figures.transactions);
            println!(
                "  generate   {:>12.0} tx/s   {:>8.2} µs/tx",
                figures.generate_tx_per_sec, figures.generate_us_per_tx
            );
            println!(
                "  recognise  {:>12.0} rec/s  {:>8.0} ns/record",
                figures.recognise_records_per_sec, figures.recognise_ns_per_record
            );
            println!("  encoded    {:>12.0} bytes/tx", figures.encoded_bytes_per_tx);
            ("chain", config, serde_json::to_value(&figures)?)
        }
    };
    let report = serde_json::json!({
        "mode": mode,
        "git_commit": machine::git_commit(),
        "machine": machine::describe(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "config": config,
        "figures": figures,
    });
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;
    let path = cli.out.join(format!("{}-{mode}.json", machine::utc_stamp()));
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
