//! chainsim: serve the simulated chain over gRPC, or feed it into Kafka.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use sluice_chainsim::config::fraction_to_ppm;
use sluice_chainsim::feed::{FeedOptions, feed};
use sluice_chainsim::server::{ChainNode, ServerOptions};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_kafka::topics::{CHAIN_TRANSACTIONS, TopicSpec};
use sluice_kafka::{KafkaConfig, ensure_topics};

#[derive(Parser, Debug)]
#[command(name = "chainsim", version, about = "A deterministic synthetic chain")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the `Chain` gRPC API, producing slots in real time.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "SLUICE_CHAINSIM_LISTEN", default_value = "127.0.0.1:50051")]
        listen: SocketAddr,
        /// Pool states kept per pool for GetPool.
        #[arg(long, env = "SLUICE_CHAINSIM_HISTORY", default_value_t = 50_000)]
        history_per_pool: usize,
        /// Latency added to every GetPool answer, ms (a real node's query time).
        #[arg(long, env = "SLUICE_CHAINSIM_GET_POOL_LATENCY_MS", default_value_t = 0)]
        get_pool_latency_ms: u64,
        /// Pools whose GetPool answers take `--slow-factor` times the latency
        /// (comma-separated addresses), to show a sweep that does not wait on them.
        #[arg(long, env = "SLUICE_CHAINSIM_SLOW_POOLS", value_delimiter = ',')]
        slow_pools: Vec<String>,
        #[arg(long, env = "SLUICE_CHAINSIM_SLOW_FACTOR", default_value_t = 100)]
        slow_factor: u32,
        /// End every subscription with an error after this many updates
        /// (a dropped connection, for reconnection tests).
        #[arg(long, env = "SLUICE_CHAINSIM_CUT_STREAMS_AFTER")]
        cut_streams_after: Option<u64>,
        #[command(flatten)]
        chain: ChainArgs,
    },
    /// Produce the chain straight into Kafka (one record per pool touched)
    /// and print what was produced.
    Feed {
        /// Kafka bootstrap servers.
        #[arg(long, env = "SLUICE_KAFKA_BROKERS", default_value = "127.0.0.1:9092")]
        brokers: String,
        /// Destination topic.
        #[arg(long, env = "SLUICE_CHAINSIM_TOPIC", default_value = CHAIN_TRANSACTIONS)]
        topic: String,
        /// Create the topic first with this many partitions (if missing).
        #[arg(long)]
        create_topic_partitions: Option<i32>,
        /// Stop after this many slots.
        #[arg(long)]
        slots: Option<u64>,
        /// Stop after at least this many transactions.
        #[arg(long)]
        transactions: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long)]
        seconds: Option<u64>,
        /// Produce each slot at its block time instead of as fast as possible.
        #[arg(long)]
        paced: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        chain: ChainArgs,
    },
}

/// The chain's parameters; each has an environment variable.
#[derive(Args, Debug)]
struct ChainArgs {
    /// Seed of every random draw: same seed, same chain.
    #[arg(long, env = "SLUICE_CHAINSIM_SEED", default_value_t = 1)]
    seed: u64,
    /// Block time of slot 0 (Unix ms); defaults to now.
    #[arg(long, env = "SLUICE_CHAINSIM_GENESIS_MS")]
    genesis_ms: Option<i64>,
    /// Slot duration, ms.
    #[arg(long, env = "SLUICE_CHAINSIM_SLOT_MS", default_value_t = 400)]
    slot_ms: u64,
    /// Average transactions per second outside bursts.
    #[arg(long, env = "SLUICE_CHAINSIM_RATE", default_value_t = 1_000)]
    rate: u32,
    /// A burst starts every this many slots (0: none).
    #[arg(long, env = "SLUICE_CHAINSIM_BURST_EVERY_SLOTS", default_value_t = 150)]
    burst_every_slots: u64,
    /// Burst length, slots.
    #[arg(long, env = "SLUICE_CHAINSIM_BURST_SLOTS", default_value_t = 15)]
    burst_slots: u64,
    /// Rate multiplier during bursts.
    #[arg(long, env = "SLUICE_CHAINSIM_BURST_FACTOR", default_value_t = 4)]
    burst_factor: u32,
    /// Tokens in the registry.
    #[arg(long, env = "SLUICE_CHAINSIM_TOKENS", default_value_t = 24)]
    tokens: usize,
    /// Pools over the three venue layouts.
    #[arg(long, env = "SLUICE_CHAINSIM_POOLS", default_value_t = 64)]
    pools: usize,
    /// Trader wallets.
    #[arg(long, env = "SLUICE_CHAINSIM_TRADERS", default_value_t = 500)]
    traders: usize,
    /// Fraction of swaps routed through 2–3 pools.
    #[arg(long, env = "SLUICE_CHAINSIM_MULTI_HOP", default_value_t = 0.15)]
    multi_hop: f64,
    /// Fraction of malformed transactions.
    #[arg(long, env = "SLUICE_CHAINSIM_MALFORMED", default_value_t = 0.01)]
    malformed: f64,
    /// Fraction of transactions on unknown venues.
    #[arg(long, env = "SLUICE_CHAINSIM_UNKNOWN_VENUE", default_value_t = 0.02)]
    unknown_venue: f64,
}

impl ChainArgs {
    fn config(&self) -> Result<ChainConfig> {
        let genesis_ms = self.genesis_ms.unwrap_or_else(sluice_core::clock::now_ms);
        let ppm = |name: &str, v: f64| fraction_to_ppm(name, v).map_err(anyhow::Error::from);
        let config = ChainConfig {
            seed: self.seed,
            genesis_ms,
            slot_ms: self.slot_ms,
            tx_per_sec: self.rate,
            burst_every_slots: self.burst_every_slots,
            burst_slots: self.burst_slots,
            burst_factor: self.burst_factor,
            tokens: self.tokens,
            pools: self.pools,
            traders: self.traders,
            multi_hop_ppm: ppm("--multi-hop (SLUICE_CHAINSIM_MULTI_HOP)", self.multi_hop)?,
            malformed_ppm: ppm("--malformed (SLUICE_CHAINSIM_MALFORMED)", self.malformed)?,
            unknown_venue_ppm: ppm("--unknown-venue (SLUICE_CHAINSIM_UNKNOWN_VENUE)", self.unknown_venue)?,
        };
        config.validate().map_err(|e| anyhow::anyhow!("invalid chain config: {e}"))?;
        Ok(config)
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return ctrl_c.await.unwrap_or(()),
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await.unwrap_or(());
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| "info".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr);
    if std::env::var("SLUICE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    init_tracing();
    match Cli::parse().command {
        Command::Serve {
            listen,
            history_per_pool,
            get_pool_latency_ms,
            slow_pools,
            slow_factor,
            cut_streams_after,
            chain,
        } => {
            let config = chain.config()?;
            let chain = Chain::new(config.clone())?;
            let (listener, addr) = ChainNode::bind(listen).await.with_context(|| format!("binding {listen}"))?;
            let node = ChainNode::start(
                chain,
                &ServerOptions {
                    history_per_pool,
                    get_pool_latency: Duration::from_millis(get_pool_latency_ms),
                    slow_pools,
                    slow_factor,
                    cut_streams_after,
                },
            );
            tracing::info!(%addr, seed = config.seed, rate = config.tx_per_sec, pools = config.pools, "Chain serving");
            node.serve(listener, shutdown_signal()).await.context("serving gRPC")?;
            tracing::info!("Chain stopped");
        }
        Command::Feed { brokers, topic, create_topic_partitions, slots, transactions, seconds, paced, json, chain } => {
            let kafka = KafkaConfig::new(brokers);
            if let Some(partitions) = create_topic_partitions {
                ensure_topics(&kafka, &[TopicSpec::new(&topic, partitions)], Duration::from_secs(30))
                    .await
                    .with_context(|| format!("creating topic {topic}"))?;
            }
            let chain = Chain::new(chain.config()?)?;
            let options = FeedOptions {
                max_slots: slots,
                max_transactions: transactions,
                max_duration: seconds.map(Duration::from_secs),
                paced,
                ..FeedOptions::new(&topic)
            };
            if slots.is_none() && transactions.is_none() && seconds.is_none() {
                anyhow::bail!("feed needs a limit: --slots, --transactions or --seconds");
            }
            let report = feed(chain, &kafka, &options).await.context("feeding Kafka")?;
            let out = if json {
                serde_json::to_string_pretty(&report)?
            } else {
                format!(
                    "fed {topic}: slots {}..={}, {} transactions → {} records ({} swaps, {} multi-hop, {} malformed, {} unknown venue) in {:.1} s ({:.0} tx/s); records per partition: {:?}",
                    report.first_slot,
                    report.last_slot.unwrap_or(report.first_slot),
                    report.transactions,
                    report.records,
                    report.swaps,
                    report.multi_hop,
                    report.malformed,
                    report.unknown_venue,
                    report.elapsed_ms as f64 / 1000.0,
                    report.transactions_per_sec(),
                    report.records_per_partition,
                )
            };
            #[allow(clippy::print_stdout)]
            {
                println!("{out}");
            }
        }
    }
    Ok(())
}
