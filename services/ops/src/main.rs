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
use sluice_ops::offsets::{self, Target};
use sluice_ops::rebuild;
use sluice_ops::redrive::{self, Ledger, Redriver};
use sluice_ops::select::{Selection, Summary, summarize};
use sluice_ops::time;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-ops",
    version,
    about = "What an operator does after something went wrong: dead letters inspected and redriven, offsets shown and reset, the DEX state rebuilt."
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
    /// The processors' consumer group.
    #[arg(long, env = "SLUICE_PROCESSOR_GROUP_ID", default_value = "sluice-processor", global = true)]
    group: String,
    /// How long reading a topic whole may take, in seconds.
    #[arg(long, default_value_t = 120, global = true)]
    read_timeout: u64,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The dead-letter topic.
    #[command(subcommand)]
    Dlq(Dlq),
    /// The processors' committed offsets on the input topic.
    #[command(subcommand)]
    Offsets(Offsets),
    /// Rebuilds the DEX's pool state from the chain's pools at a slot plus a replay of the
    /// input topic from there, beside the live state; checks it against the chain and
    /// switches it in at once. A dry run (the plan) unless --execute.
    Rebuild(RebuildArgs),
}

#[derive(Debug, Args)]
struct RebuildArgs {
    /// Take the chain's pools after this slot (default: the chain's head, which needs the
    /// shortest replay; an older slot needs the topic to still hold the records after it).
    #[arg(long)]
    at_slot: Option<u64>,
    /// The chain node's gRPC endpoint.
    #[arg(long, env = "SLUICE_OPS_CHAIN_URL")]
    chain_url: Option<String>,
    /// The Redis the processors' state lives in (`redis://` or `rediss://`; an ACL user and
    /// TLS files from SLUICE_PROCESSOR_REDIS_USERNAME, _PASSWORD, _TLS_CA_FILE, _TLS_CERT_FILE
    /// and _TLS_KEY_FILE, as the processors read them).
    #[arg(long, env = "SLUICE_PROCESSOR_REDIS_URL")]
    redis_url: Option<String>,
    /// The processors' key prefix (SLUICE_PROCESSOR_REDIS_PREFIX, default sluice:).
    #[arg(long)]
    redis_prefix: Option<String>,
    /// How long each replay to the topic's end may take, in seconds.
    #[arg(long, default_value_t = 1800)]
    replay_timeout: u64,
    /// How long the switch may keep catching up with processors that are ahead, in seconds.
    #[arg(long, default_value_t = 600)]
    switch_timeout: u64,
    /// Rebuild and switch (without it: say what would be done, and change nothing).
    #[arg(long)]
    execute: bool,
}

#[derive(Debug, Subcommand)]
enum Offsets {
    /// Each partition's committed offset, its metadata (the state generation), the log's
    /// bounds and the lag; the group's state and members. Reads only.
    Show,
    /// Moves the committed offsets, keeping each commit's metadata; refused while the group
    /// has members unless --force. A dry run unless --execute.
    Reset {
        /// To the first record at or after this time (2026-12-06T05:00:00Z, 15m, epoch ms).
        #[arg(long, group = "target")]
        to_time: Option<String>,
        /// To this offset of this partition, PARTITION=OFFSET (repeatable; others stay).
        #[arg(long, value_name = "PARTITION=OFFSET", group = "target")]
        to_offset: Vec<String>,
        /// To each partition's log start.
        #[arg(long, group = "target")]
        to_earliest: bool,
        /// To each partition's log end (skips everything not yet consumed).
        #[arg(long, group = "target")]
        to_latest: bool,
        /// Commit the new offsets (without it: say what would change, and change nothing).
        #[arg(long)]
        execute: bool,
        /// Even while the group has members (they commit over it at their next commit).
        #[arg(long)]
        force: bool,
    },
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
    match &cli.command {
        Command::Dlq(dlq) => run_dlq(cli, &kafka, dlq),
        Command::Offsets(offsets) => run_offsets(cli, &kafka, offsets),
        Command::Rebuild(args) => run_rebuild(cli, kafka, args),
    }
}

fn run_dlq(cli: &Cli, kafka: &KafkaConfig, command: &Dlq) -> anyhow::Result<()> {
    let limit = Duration::from_secs(cli.kafka.read_timeout);
    let dlq = &cli.kafka.dlq_topic;
    let letters: Vec<DeadLetter> =
        read_whole(kafka, dlq, limit)?.into_iter().map(|r| DeadLetter::from_record(dlq, r)).collect();
    match command {
        Dlq::Inspect { select, top_keys } => {
            let selection = select.selection()?;
            let ledger = Ledger::read(kafka, dlq, limit)?;
            let summary = summarize(dlq, &letters, &selection, *top_keys);
            let plan = redrive::plan(&letters, &selection, &ledger, false);
            let json = serde_json::json!({
                "summary": summary, "redriven_before": plan.already, "failed_again": plan.failed_again,
            });
            print(cli.json, &json, || inspect_text(&summary, plan.already, plan.failed_again))
        }
        Dlq::Redrive { select, execute, again, batch } => {
            let selection = select.selection()?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let opened = if *execute {
                let replication = redrive::replication(kafka, dlq)?;
                Some(runtime.block_on(Redriver::open(kafka, dlq, replication))?)
            } else {
                None
            };
            // Read after fencing: a redrive that ran before has committed or aborted.
            let ledger = Ledger::read(kafka, dlq, limit)?;
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

fn run_offsets(cli: &Cli, kafka: &KafkaConfig, command: &Offsets) -> anyhow::Result<()> {
    let (group, topic) = (&cli.kafka.group, &cli.kafka.input_topic);
    let timeout = Duration::from_secs(30);
    let now = offsets::show(kafka, group, topic, timeout)?;
    let Offsets::Reset { to_time, to_offset, to_earliest, to_latest, execute, force } = command else {
        let json = serde_json::to_value(&now)?;
        return print(cli.json, &json, || offsets_text(&now));
    };
    let target = match (to_time, to_offset.is_empty(), to_earliest, to_latest) {
        (Some(t), ..) => Target::Time(time::parse(t, now_ms()).context("--to-time")?),
        (None, false, ..) => Target::Offsets(partition_offsets(to_offset)?),
        (None, true, true, _) => Target::Earliest,
        (None, true, false, true) => Target::Latest,
        _ => anyhow::bail!("say where to: --to-time, --to-offset, --to-earliest or --to-latest"),
    };
    let times = match target {
        Target::Time(at) => {
            let ids: Vec<i32> = now.partitions.iter().map(|p| p.partition).collect();
            offsets::offsets_at(kafka, group, topic, &ids, at, timeout)?
        }
        _ => Default::default(),
    };
    let moves = offsets::plan(&now, &target, |p| times.get(&p).copied().flatten())?;
    if *execute {
        offsets::apply(kafka, &now, &moves, *force, timeout)?;
    }
    // A dry run says what --execute would refuse.
    let refused = (now.members > 0 && !force).then(|| {
        offsets::OffsetsError::HasMembers { group: now.group.clone(), state: now.state.clone(), members: now.members }
            .to_string()
    });
    let json = serde_json::json!({
        "dry_run": !execute, "group": group, "topic": topic, "moves": moves,
        "consequences": offsets::consequences(&moves), "refused": refused,
    });
    print(cli.json, &json, || reset_text(&json))
}

fn run_rebuild(cli: &Cli, kafka: KafkaConfig, args: &RebuildArgs) -> anyhow::Result<()> {
    let chain_url = args.chain_url.as_deref().context("set --chain-url or SLUICE_OPS_CHAIN_URL: the chain node")?;
    let redis_url =
        args.redis_url.as_deref().context("set --redis-url or SLUICE_PROCESSOR_REDIS_URL: the state store")?;
    let mut env = sluice_service::env::EnvReader::from_env("SLUICE_PROCESSOR_");
    let mut dex = sluice_dex::DexConfig::read(&mut env);
    // The ACL user and TLS files come from the processors' own variables, as the chart's
    // ops Job carries them.
    let endpoint = sluice_coord::endpoint::RedisEndpoint::read(&mut env, Some(redis_url));
    anyhow::ensure!(env.problems().is_empty(), "{}", env.problems().join("; "));
    if let Some(prefix) = &args.redis_prefix {
        dex.redis_prefix.clone_from(prefix);
    }
    let settings = rebuild::Settings {
        kafka,
        topic: cli.kafka.input_topic.clone(),
        group: cli.kafka.group.clone(),
        dex,
        at_slot: args.at_slot,
        replay_limit: Duration::from_secs(args.replay_timeout),
        switch_limit: Duration::from_secs(args.switch_timeout),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let (plan, outcome) = runtime.block_on(async {
        let chain = rebuild::connect_chain(chain_url).await?;
        let client = endpoint.client()?;
        let mut conn = client.get_multiplexed_async_connection().await.context("connecting to Redis")?;
        let plan = rebuild::plan(&settings, &chain, &mut conn).await?;
        let outcome = match args.execute {
            true => Some(rebuild::execute(&settings, &plan, &chain, &mut conn).await?),
            false => None,
        };
        anyhow::Ok((plan, outcome))
    })?;
    let json = serde_json::json!({ "dry_run": !args.execute, "plan": plan, "outcome": outcome });
    print(cli.json, &json, || rebuild_text(&json))
}

fn rebuild_text(j: &serde_json::Value) -> String {
    let (p, o) = (&j["plan"], &j["outcome"]);
    let mut out = format!(
        "{} state (store generation {}, the group's commits record {}; {} members)\n",
        p["case"].as_str().unwrap_or(""),
        p["store_generation"].as_str().unwrap_or("none"),
        p["recorded_generation"].as_str().unwrap_or("none"),
        p["group_members"]
    );
    out += &format!(
        "the chain's {} pools after slot {} (head {}), then {} records of the input topic:\n",
        p["pools"], p["slot"], p["head"], p["to_replay"]
    );
    for s in p["starts"].as_array().into_iter().flatten() {
        out += &format!("  partition {:>3}: from offset {} to {}\n", s["partition"], s["offset"], s["log_end"]);
    }
    if o.is_null() {
        out += "dry run: nothing was written; add --execute to rebuild and switch";
        return out;
    }
    let v = &o["verified"];
    out += &format!(
        "seeded {} pools, replayed {} records ({} invalid); checked against the chain: {} equal, {} mid-slot, {} never swapped, {} unverifiable\n",
        o["seeded_pools"],
        o["replayed"]["records"],
        o["replayed"]["invalid"],
        v["clean"],
        v["behind"],
        v["unseen"],
        v["unverifiable"]
    );
    let t = &o["seconds"];
    out += &format!(
        "switched after {} attempts: {}; {:.2} s (seed {:.2}, replay {:.2}, check {:.2}, switch {:.2})",
        o["switch_attempts"],
        o["switch"],
        t["total"].as_f64().unwrap_or(0.0),
        t["seed"].as_f64().unwrap_or(0.0),
        t["replay"].as_f64().unwrap_or(0.0),
        t["verify"].as_f64().unwrap_or(0.0),
        t["switch"].as_f64().unwrap_or(0.0)
    );
    for w in o["warnings"].as_array().into_iter().flatten() {
        out += &format!("\nwarning: {}", w.as_str().unwrap_or(""));
    }
    out
}

/// `PARTITION=OFFSET` pairs.
fn partition_offsets(pairs: &[String]) -> anyhow::Result<std::collections::BTreeMap<i32, i64>> {
    pairs
        .iter()
        .map(|p| {
            let parsed = p.split_once('=').and_then(|(k, v)| Some((k.trim().parse().ok()?, v.trim().parse().ok()?)));
            parsed.with_context(|| format!("--to-offset {p:?}: expected PARTITION=OFFSET"))
        })
        .collect()
}

fn offsets_text(g: &offsets::GroupOffsets) -> String {
    let mut out = format!("group {} on {}: {}, {} members\n\n", g.group, g.topic, g.state, g.members);
    out += "partition  committed  log start    log end        lag  metadata\n";
    for p in &g.partitions {
        let opt = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        out += &format!(
            "{:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {}\n",
            p.partition,
            opt(p.committed),
            p.log_start,
            p.log_end,
            opt(p.lag),
            p.metadata
        );
    }
    out.trim_end().to_string()
}

fn reset_text(j: &serde_json::Value) -> String {
    let mut out = format!(
        "{} {} on {}:\n",
        if j["dry_run"] == true { "would move" } else { "moved" },
        j["group"].as_str().unwrap_or(""),
        j["topic"].as_str().unwrap_or("")
    );
    for m in j["moves"].as_array().into_iter().flatten() {
        out += &format!("  partition {:>3}: {} -> {} ({})\n", m["partition"], m["from"], m["to"], m["metadata"]);
    }
    for c in j["consequences"].as_array().into_iter().flatten() {
        out += &format!("{}\n", c.as_str().unwrap_or(""));
    }
    if let Some(refused) = j["refused"].as_str() {
        out += &format!("--execute would be refused: {refused}\n");
    }
    if j["dry_run"] == true {
        out += "dry run: nothing was committed; add --execute to commit";
    }
    out.trim_end().to_string()
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
