//! The venue decoders fed random and mutated byte strings: no input makes
//! them panic, and every failure is a typed `LayoutError`.

use proptest::prelude::*;
use sluice_core::venue::{LayoutError, clmm, clob, cpamm};

fn valid_inputs() -> Vec<Vec<u8>> {
    vec![
        cpamm::SwapBaseIn { amount_in: 1_000, minimum_amount_out: 990 }.encode(),
        clmm::Swap {
            amount: 5,
            other_amount_threshold: 4,
            sqrt_price_limit: 1 << 70,
            amount_specified_is_input: true,
            a_to_b: false,
        }
        .encode(),
        clmm::Traded {
            pool: [9; 32],
            a_to_b: true,
            pre_sqrt_price: 1 << 64,
            post_sqrt_price: 1 << 63,
            input_amount: 10,
            output_amount: 9,
            lp_fee: 1,
        }
        .encode(),
        clob::SwapOrder { side: clob::Side::Bid, price_in_ticks: 7, num_base_lots: 3, min_base_lots_to_fill: 3 }
            .encode(),
        clob::FillSummary {
            market: [4; 32],
            side: clob::Side::Ask,
            base_lots_filled: 3,
            quote_atoms_filled: 21,
            last_price_in_ticks: 7,
            fee_in_quote_atoms: 1,
        }
        .encode(),
    ]
}

/// Every decoder on `bytes`; returns how many accepted them.
fn decode_all(bytes: &[u8]) -> usize {
    fn typed<T>(r: Result<T, LayoutError>) -> usize {
        match r {
            Ok(_) => 1,
            // Every error renders a message naming the layout.
            Err(e) => {
                assert!(!e.to_string().is_empty());
                0
            }
        }
    }
    typed(cpamm::SwapBaseIn::decode(bytes))
        + typed(clmm::Swap::decode(bytes))
        + typed(clmm::Traded::decode(bytes))
        + typed(clob::SwapOrder::decode(bytes))
        + typed(clob::FillSummary::decode(bytes))
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: prop::sample::Index, bit: u8 },
    Truncate(prop::sample::Index),
    Insert { at: prop::sample::Index, byte: u8 },
    Overwrite { at: prop::sample::Index, byte: u8 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Overwrite { at, byte }),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match m {
        Mutation::Flip { at, bit } => {
            let i = at.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        Mutation::Truncate(at) => bytes.truncate(at.index(bytes.len())),
        Mutation::Insert { at, byte } => {
            let i = at.index(bytes.len());
            bytes.insert(i, *byte);
        }
        Mutation::Overwrite { at, byte } => {
            let i = at.index(bytes.len());
            bytes[i] = *byte;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4_000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_valid_encodings_never_panic(
        which in 0usize..5,
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let mut bytes = valid_inputs()[which].clone();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        decode_all(&bytes);
    }
}

#[test]
fn each_valid_encoding_is_accepted_by_exactly_one_decoder() {
    for bytes in valid_inputs() {
        assert_eq!(decode_all(&bytes), 1, "{bytes:02x?}");
    }
}
