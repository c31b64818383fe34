//! Chainsim traffic as the processor receives it: one Kafka record per
//! (transaction, pool it touches), keyed by the pool, generated once before
//! a run so generating it costs the measurement nothing.

use std::hash::{DefaultHasher, Hash, Hasher};

use prost::Message;
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::route::record_keys;

/// The records of `transactions` chain transactions, in chain order.
#[derive(Debug)]
pub struct Traffic {
    /// The chain before the first transaction (its tokens are the registry).
    pub genesis: Chain,
    /// Encoded transactions; a multi-pool one is shared by its records.
    pub payloads: Vec<Vec<u8>>,
    /// (index into `payloads`, key) per record.
    pub records: Vec<(u32, String)>,
}

impl Traffic {
    pub fn generate(transactions: u64) -> Self {
        Self::generate_prefix(transactions, usize::MAX)
    }

    /// The same traffic, stopped early once it holds `records` records: its
    /// first `records` records are those of [`Traffic::generate`] (a feeder
    /// that sends only a prefix need not build the rest).
    pub fn generate_prefix(transactions: u64, records_wanted: usize) -> Self {
        let mut chain = Chain::new(ChainConfig { seed: 7, tx_per_sec: 10_000, ..ChainConfig::default() })
            .expect("the default chain config is valid");
        let genesis = chain.clone();
        let (mut payloads, mut records) = (Vec::new(), Vec::new());
        while (payloads.len() as u64) < transactions && records.len() < records_wanted {
            for g in chain.next_block().transactions {
                let index = payloads.len() as u32;
                records.extend(record_keys(&g.tx).into_iter().map(|k| (index, k.to_string())));
                payloads.push(g.tx.encode_to_vec());
            }
        }
        Self { genesis, payloads, records }
    }

    /// The `i`-th record's key and payload (`i` wraps around: replays).
    pub fn record(&self, i: usize) -> (&str, &[u8]) {
        let (tx, key) = &self.records[i % self.records.len()];
        (key, &self.payloads[*tx as usize])
    }

    /// Keys spread evenly: keys by record count (most first) dealt to
    /// partitions in turn, so every partition carries as many pools (each
    /// pool is a key) and as many records as the keys allow.
    pub fn balanced(&self, n: usize) -> std::collections::HashMap<String, usize> {
        let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (_, key) in &self.records {
            *counts.entry(key.as_str()).or_default() += 1;
        }
        let mut keys: Vec<(&str, usize)> = counts.into_iter().collect();
        keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        keys.into_iter().enumerate().map(|(i, (k, _))| (k.to_string(), i % n)).collect()
    }

    /// The registry's contents: mint → `<decimals>:<symbol>`.
    pub fn tokens(&self) -> std::collections::HashMap<String, String> {
        sluice_dex::registry::entries(&self.genesis.tokens())
    }
}

/// The partition (of `n`) a key goes to: any stable function of the key
/// keeps each pool's records in one partition, in order, as production does.
pub fn partition_of(key: &str, n: usize) -> usize {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() % n as u64) as usize
}
