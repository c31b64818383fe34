//! Real chain transactions, mutated at the byte level and decoded the way
//! the processor does (protobuf → routing → recognition): no input panics,
//! every failure is a typed error with a stable kind.

use proptest::prelude::*;
use prost::Message;
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::chain::ChainTransaction;
use sluice_core::recognize::recognize;
use sluice_core::route::record_keys;

fn corpus() -> Vec<Vec<u8>> {
    let mut chain =
        Chain::new(ChainConfig { seed: 3, tx_per_sec: 2_500, malformed_ppm: 100_000, ..ChainConfig::default() })
            .expect("valid config");
    (0..2).flat_map(|_| chain.next_block().transactions).map(|g| g.tx.encode_to_vec()).collect()
}

fn process(bytes: &[u8]) {
    let Ok(tx) = ChainTransaction::decode(bytes) else { return };
    for key in record_keys(&tx) {
        if let Err(e) = recognize(&tx, key) {
            assert!(!e.kind().is_empty() && !e.to_string().is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_transactions_never_panic(
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        thread_local!(static CORPUS: Vec<Vec<u8>> = corpus());
        let mut bytes = CORPUS.with(|c| c[pick.index(c.len())].clone());
        for (at, byte, op) in edits {
            if bytes.is_empty() { break; }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => bytes.truncate(i),
                _ => bytes.insert(i, byte),
            }
        }
        process(&bytes);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        process(&bytes);
    }
}
