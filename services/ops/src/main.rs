//! `sluice-ops`: the operator's CLI. It reads the processor's own settings
//! (`SLUICE_PROCESSOR_KAFKA_BROKERS`, `_KAFKA_PROPERTIES`, `_KAFKA_SASL_USERNAME`/`_PASSWORD`,
//! `_INPUT_TOPIC`, `_DLQ_TOPIC`), so it runs beside a processor's environment (the chart's
//! ops Job, `kubectl exec`) or from a workstation with flags. Anything that writes is a dry
//! run unless `--execute` is given.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use sluice_kafka::KafkaConfig;
use sluice_kafka::whole::read_whole;
use sluice_ops::letters::DeadLetter;
use sluice_ops::redrive::{self, Ledger, Redriver};
use sluice_ops::select::{Selection, Summary, summarize};
use sluice_ops::time;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-ops",
    version,
    about = "What an operator does after something went wrong: dead letters inspected and redriven."
)]
struct Cli {
    #[command(flatten)]
    kafka: KafkaArgs,
    /// JSON on stdout (for scripts) instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct KafkaArgs {
    /// Kafka's bootstrap servers (required, by flag or variable).
    #[arg(long, env = "SLUICE_PROCESSOR_KAFKA_BROKERS", global = true)]
    brokers: Option<String>,
    /// The processors' input topic: where redriven records go.
    #[arg(long, env = "SLUICE_PROCESSOR_INPUT_TOPIC", default_value = "chain.transactions", global = true)]
    input_topic: String,
    /// The dead-letter topic.
    #[arg(long, env = "SLUICE_PROCESSOR_DLQ_TOPIC", default_value = "chain.transactions.dlq", global = true)]
    dlq_topic: String,
    /// A librdkafka property, key=value (repeatable), after SLUICE_PROCESSOR_KAFKA_PROPERTIES
    /// and SLUICE_PROCESSOR_KAFKA_SASL_USERNAME/_PASSWORD.
    #[arg(long = "kafka-property", value_name = "KEY=VALUE", global = true)]
    properties: Vec<String>,
    /// How long reading a topic whole may take, in seconds.
    #[arg(long, default_value_t = 120, global = true)]
    read_timeout: u64,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The dead-letter topic.
    #[command(subcommand)]
    Dlq(Dlq),
}

#[derive(Debug, Subcommand)]
enum Dlq {
    /// Counts by reason, time range and key; reads only.
    Inspect {
        #[command(flatten)]
        select: SelectArgs,
        /// How many keys to list (the most dead-lettered first).
        #[arg(long, default_value_t = 10)]
        top_keys: usize,
    },
    /// Sends the selected letters back to the input topic, in each key's original order,
    /// each once (a ledger topic, `<dlq>.redriven`, records what was sent). A dry run
    /// unless --execute.
    Redrive {
        #[command(flatten)]
        select: SelectArgs,
        /// Send (without it: say what would be sent, and change nothing).
        #[arg(long)]
        execute: bool,
        /// Also send letters that are a redriven copy failing again.
        #[arg(long)]
        again: bool,
        /// Letters per Kafka transaction.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
}

#[derive(Debug, Args)]
struct SelectArgs {
    /// Only this reason (`sluice.error.kind`: decode, invalid, …); repeatable.
    #[arg(long = "reason")]
    reasons: Vec<String>,
    /// Only this record key; repeatable.
    #[arg(long = "key")]
    keys: Vec<String>,
    /// Dead-lettered at or after: 2026-12-06T05:00:00Z, a span back (15m, 2h, 7d) or epoch ms.
    #[arg(long)]
    since: Option<String>,
    /// Dead-lettered before (the same forms).
    #[arg(long)]
    until: Option<String>,
}

impl SelectArgs {
    fn selection(&self) -> anyhow::Result<Selection> {
        let now = now_ms();
        let at = |t: &Option<String>| t.as_deref().map(|t| time::parse(t, now)).transpose();
        Ok(Selection {
            reasons: self.reasons.clone(),
            keys: self.keys.clone(),
            since_ms: at(&self.since).context("--since")?,
            until_ms: at(&self.until).context("--until")?,
        })
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "sluice-ops: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let kafka = kafka(&cli.kafka)?;
    let limit = Duration::from_secs(cli.kafka.read_timeout);
    let dlq = &cli.kafka.dlq_topic;
    let letters: Vec<DeadLetter> =
        read_whole(&kafka, dlq, limit)?.into_iter().map(|r| DeadLetter::from_record(dlq, r)).collect();
    match &cli.command {
        Command::Dlq(Dlq::Inspect { select, top_keys }) => {
            let selection = select.selection()?;
            let ledger = Ledger::read(&kafka, dlq, limit)?;
            let summary = summarize(dlq, &letters, &selection, *top_keys);
            let plan = redrive::plan(&letters, &selection, &ledger, false);
            let json = serde_json::json!({
                "summary": summary, "redriven_before": plan.already, "failed_again": plan.failed_again,
            });
            print(cli.json, &json, || inspect_text(&summary, plan.already, plan.failed_again))
        }
        Command::Dlq(Dlq::Redrive { select, execute, again, batch }) => {
            let selection = select.selection()?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let opened = if *execute {
                let replication = redrive::replication(&kafka, dlq)?;
                Some(runtime.block_on(Redriver::open(&kafka, dlq, replication))?)
            } else {
                None
            };
            // Read after fencing: a redrive that ran before has committed or aborted.
            let ledger = Ledger::read(&kafka, dlq, limit)?;
            let plan = redrive::plan(&letters, &selection, &ledger, *again);
            let sent = match &opened {
                Some(r) => Some(runtime.block_on(r.send(&cli.kafka.input_topic, &plan.send, *batch))?),
                None => None,
            };
            let json = serde_json::json!({
                "dry_run": !execute, "input_topic": cli.kafka.input_topic, "dlq_topic": dlq,
                "selected": plan.send.len() + plan.already + plan.failed_again, "to_send": plan.send.len(),
                "redriven_before": plan.already, "failed_again": plan.failed_again, "sent": sent,
            });
            print(cli.json, &json, || redrive_text(&json))
        }
    }
}

/// The Kafka settings: the processor's variables, then the flags.
fn kafka(args: &KafkaArgs) -> anyhow::Result<KafkaConfig> {
    let brokers = args.brokers.clone().context("set --brokers or SLUICE_PROCESSOR_KAFKA_BROKERS: where Kafka is")?;
    let mut env = sluice_service::env::EnvReader::from_env("SLUICE_PROCESSOR_");
    let mut properties = env.kafka_properties();
    anyhow::ensure!(env.problems().is_empty(), "{}", env.problems().join("; "));
    for p in &args.properties {
        let (k, v) = p.split_once('=').with_context(|| format!("--kafka-property {p:?}: expected key=value"))?;
        properties.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(KafkaConfig { brokers, properties })
}

fn print(json: bool, value: &serde_json::Value, text: impl FnOnce() -> String) -> anyhow::Result<()> {
    let body = if json { serde_json::to_string_pretty(value)? } else { text() };
    writeln!(std::io::stdout(), "{body}")?;
    Ok(())
}

fn when(ms: Option<i64>) -> String {
    ms.map_or_else(|| "-".to_string(), time::format)
}

fn inspect_text(s: &Summary, redriven: usize, failed_again: usize) -> String {
    let mut out = format!(
        "{}: {} dead letters, {} selected, from {} to {}\n",
        s.topic,
        s.total,
        s.selected,
        when(s.first_ms),
        when(s.last_ms)
    );
    out += "\nreason     count  first                     last                      example\n";
    for g in &s.reasons {
        let example = g.example.as_deref().unwrap_or("").chars().take(60).collect::<String>();
        out +=
            &format!("{:<10} {:>5}  {:<24}  {:<24}  {example}\n", g.name, g.count, when(g.first_ms), when(g.last_ms));
    }
    out += &format!("\nkeys: {} distinct; the most dead-lettered:\n", s.distinct_keys);
    for g in &s.keys {
        out += &format!("  {:>5}  {}\n", g.count, g.name);
    }
    out += &format!("\nof the selected: {redriven} redriven before, {failed_again} a redriven copy that failed again");
    out
}

fn redrive_text(j: &serde_json::Value) -> String {
    let mut out = format!(
        "{} of {} selected letters {} to {} ({} redriven before, {} a redriven copy failing again: --again sends them)",
        j["to_send"],
        j["selected"],
        if j["dry_run"] == true { "would be sent" } else { "sent" },
        j["input_topic"].as_str().unwrap_or(""),
        j["redriven_before"],
        j["failed_again"]
    );
    if let Some(sent) = j["sent"].as_object() {
        out += &format!(
            "\nsent {} records in {} transactions, {:.2} s",
            sent["records"],
            sent["transactions"],
            sent["seconds"].as_f64().unwrap_or(0.0)
        );
    } else {
        out += "\ndry run: nothing was sent; add --execute to send";
    }
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
