//! The soak's check of what the processors published, against the chain
//! regenerated from its seed: every swap of every slot the ingest finished
//! is in `dex.swaps` and every malformed transaction in the dead-letter
//! topic, each exactly once as a `read_committed` reader sees them; and the
//! audit log of applied sequences shows no swap applied twice or out of
//! order.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use prost::Message;
use serde::Serialize;
use sluice_chainsim::{Chain, ChainConfig, TxKind};
use sluice_core::route::record_keys;
use sluice_core::seq::Seq;
use sluice_kafka::KafkaConfig;
use sluice_kafka::whole::read_whole;
use sluice_proto::chain::v1::ChainTransaction;
use sluice_proto::dex::v1::Swap;

/// What the outputs hold against what the chain says they must.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outputs {
    /// Slots checked: up to the ingest's final cursor.
    pub up_to_slot: u64,
    pub expected_swaps: usize,
    pub lost_swaps: usize,
    /// `Swap` records beyond one per (pool, sequence), any slot.
    pub duplicate_swaps: usize,
    /// Of those, the ones the processors added: beyond one per copy of the
    /// input record that carries the swap (a record the ingest sent twice
    /// is processed twice); the rest came from duplicate inputs.
    pub duplicate_swaps_from_processors: usize,
    pub expected_dead_letters: usize,
    pub missing_dead_letters: usize,
    /// Dead letters beyond one per (transaction, record key).
    pub duplicate_dead_letters: usize,
    /// Dead letters beyond one per copy of their input record.
    pub duplicate_dead_letters_from_processors: usize,
    pub dead_letters_without_reason: usize,
    /// Input records beyond one per (transaction, record key): what the
    /// ingest sent twice.
    pub duplicate_inputs: usize,
    /// From the audit log of applied sequences (every pool).
    pub double_applied: usize,
    pub out_of_order: usize,
    pub lost_effects: usize,
}

impl Outputs {
    pub fn passed(&self) -> bool {
        self.lost_swaps == 0
            && self.duplicate_swaps == 0
            && self.duplicate_inputs == 0
            && self.missing_dead_letters == 0
            && self.duplicate_dead_letters == 0
            && self.dead_letters_without_reason == 0
            && self.double_applied == 0
            && self.out_of_order == 0
            && self.lost_effects == 0
    }
}

/// The topics and keys of one run.
pub struct Where<'a> {
    pub kafka: KafkaConfig,
    pub input: &'a str,
    pub swaps: &'a str,
    pub dlq: &'a str,
    pub redis_url: &'a str,
    pub prefix: &'a str,
}

/// Checks the outputs of every slot up to `cursor` (the ingest's final one).
pub async fn check(chain: &ChainConfig, cursor: u64, at: &Where<'_>) -> anyhow::Result<Outputs> {
    let mut out = Outputs { up_to_slot: cursor, ..Outputs::default() };
    let Expected { swaps: expected, malformed, pools, carriers } = expected(chain, cursor)?;
    out.expected_swaps = expected.values().map(Vec::len).sum();
    out.expected_dead_letters = malformed.len();

    let read = |topic: &str| {
        let (kafka, topic) = (at.kafka.clone(), topic.to_string());
        tokio::task::spawn_blocking(move || read_whole(&kafka, &topic, Duration::from_secs(120)))
    };
    let (inputs, swaps, dead) = (read(at.input), read(at.swaps), read(at.dlq));
    let inputs = inputs.await??;
    let mut copies: HashMap<(Vec<u8>, String), usize> = HashMap::new();
    for r in &inputs {
        *copies.entry((r.key.clone(), signature(&r.payload))).or_default() += 1;
    }
    out.duplicate_inputs = copies.values().map(|n| n - 1).sum();
    // How many times the input holds the record behind a swap or a letter (1 when unknown).
    let copies_of =
        |record: Option<&(Vec<u8>, String)>| record.and_then(|r| copies.get(r)).copied().unwrap_or(1).max(1);

    let mut published: HashMap<(String, Seq), usize> = HashMap::new();
    for r in swaps.await?? {
        let swap = Swap::decode(r.payload.as_slice())?;
        let seq = Seq::from(swap.sequence.as_ref().ok_or_else(|| anyhow::anyhow!("a Swap without its sequence"))?);
        *published.entry((swap.pool, seq)).or_default() += 1;
    }
    out.duplicate_swaps = published.values().map(|n| n - 1).sum();
    out.duplicate_swaps_from_processors =
        published.iter().map(|(swap, n)| n.saturating_sub(copies_of(carriers.get(swap)))).sum();
    for (pool, seqs) in &expected {
        out.lost_swaps += seqs.iter().filter(|s| !published.contains_key(&(pool.clone(), **s))).count();
    }

    let mut letters: HashMap<(Vec<u8>, String), usize> = HashMap::new();
    for r in dead.await?? {
        let has = |h: &str| r.header(h).is_some_and(|v| !v.is_empty());
        if !(has("sluice.error.kind") && has("sluice.error.message") && has("sluice.original.offset")) {
            out.dead_letters_without_reason += 1;
        }
        *letters.entry((r.key.clone(), signature(&r.payload))).or_default() += 1;
    }
    out.duplicate_dead_letters = letters.values().map(|n| n - 1).sum();
    out.duplicate_dead_letters_from_processors =
        letters.iter().map(|(record, n)| n.saturating_sub(copies_of(Some(record)))).sum();
    let lettered: HashSet<&String> = letters.keys().map(|(_, s)| s).collect();
    out.missing_dead_letters = malformed.iter().filter(|s| !lettered.contains(s)).count();

    audit(&mut out, &pools, &expected, at).await?;
    Ok(out)
}

/// What the chain says the outputs must hold, up to a slot.
struct Expected {
    /// Every swap, per pool.
    swaps: HashMap<String, Vec<Seq>>,
    /// Every malformed transaction's signature.
    malformed: HashSet<String>,
    pools: Vec<String>,
    /// The input record (key, signature) that carries each swap.
    carriers: HashMap<(String, Seq), (Vec<u8>, String)>,
}

/// Every swap per pool and every malformed transaction's signature, up to
/// `cursor`; and every pool.
fn expected(config: &ChainConfig, cursor: u64) -> anyhow::Result<Expected> {
    let mut chain = Chain::new(config.clone())?;
    let (mut swaps, mut malformed) = (HashMap::<String, Vec<Seq>>::new(), HashSet::new());
    let mut carriers = HashMap::new();
    while chain.next_slot() <= cursor {
        for g in chain.next_block().transactions {
            match g.kind {
                TxKind::Swap { .. } => {
                    for key in record_keys(&g.tx) {
                        let r = sluice_core::recognize::recognize(&g.tx, key).map_err(|e| anyhow::anyhow!("{e}"))?;
                        for f in r.swaps {
                            swaps.entry(f.pool.to_string()).or_default().push(f.seq);
                            let record = (key.as_bytes().to_vec(), g.tx.signature.clone());
                            carriers.insert((f.pool.to_string(), f.seq), record);
                        }
                    }
                }
                TxKind::Malformed(_) => {
                    malformed.insert(g.tx.signature.clone());
                }
                TxKind::UnknownVenue => {}
            }
        }
    }
    let pools = chain.pools().iter().map(|p| p.info.pool.clone()).collect();
    Ok(Expected { swaps, malformed, pools, carriers })
}

/// The audit log: each applied sequence once, in order, and every expected one there.
async fn audit(
    out: &mut Outputs,
    pools: &[String],
    expected: &HashMap<String, Vec<Seq>>,
    at: &Where<'_>,
) -> anyhow::Result<()> {
    let client = redis::Client::open(at.redis_url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    for pool in pools {
        let log =
            sluice_dex::state::read_audit(&mut conn, at.prefix, pool).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut seen = HashSet::new();
        for (i, seq) in log.iter().enumerate() {
            if !seen.insert(*seq) {
                out.double_applied += 1;
            }
            if i > 0 && log[i - 1] >= *seq {
                out.out_of_order += 1;
            }
        }
        let wanted = expected.get(pool).map_or(&[][..], Vec::as_slice);
        out.lost_effects += wanted.iter().filter(|s| !seen.contains(s)).count();
    }
    Ok(())
}

fn signature(payload: &[u8]) -> String {
    ChainTransaction::decode(payload).map(|t| t.signature).unwrap_or_default()
}
