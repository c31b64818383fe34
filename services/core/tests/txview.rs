//! The borrowed decode against prost's: on well-formed transactions, on
//! byte-level mutations of them, and on field soups (unknown fields, groups,
//! repeated scalars, packed and unpacked indexes), both accept the same
//! inputs and read the same values.

use proptest::prelude::*;
use prost::Message;
use sluice_core::chain::{ChainTransaction, Instruction, TokenBalance};
use sluice_core::txview::TxView;

/// Both decoders on `bytes`: same verdict, same values.
fn agree(bytes: &[u8]) {
    let owned = ChainTransaction::decode(bytes);
    let view = TxView::decode(bytes);
    match (&owned, &view) {
        (Ok(tx), Ok(v)) => assert_eq!(v, &TxView::of(tx), "values differ on {bytes:?}"),
        (Err(_), Err(_)) => {}
        _ => panic!("verdicts differ on {bytes:?}: prost {:?}, view {:?}", owned.is_ok(), view.is_ok()),
    }
    // Into a view that already holds another transaction: nothing of it stays.
    let mut reused = TxView::decode(&SOME_TX).expect("a transaction");
    let verdict = reused.decode_into(bytes);
    assert_eq!(verdict.is_ok(), view.is_ok(), "decode_into's verdict differs on {bytes:?}");
    if let Ok(v) = &view {
        assert_eq!(&reused, v, "decode_into leaves a trace of the earlier view on {bytes:?}");
    }
}

/// A transaction with every field set, to decode over.
static SOME_TX: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    ChainTransaction {
        slot: 7,
        index: 3,
        signature: "sig".into(),
        block_time_ms: 9,
        account_keys: vec!["k1".into(), "k2".into()],
        instructions: vec![Instruction {
            program_id_index: 1,
            accounts: vec![0, 1],
            data: vec![4],
            events: vec![vec![5]],
        }],
        token_balances: vec![TokenBalance { account_index: 1, mint: "m".into(), pre_amount: 1, post_amount: 2 }],
    }
    .encode_to_vec()
});

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[1-9A-HJ-NP-Za-km-z]{32,44}", "\\PC{0,6}"]
}

fn instruction() -> impl Strategy<Value = Instruction> {
    (
        any::<u32>(),
        prop::collection::vec(prop_oneof![0u32..20, any::<u32>()], 0..24),
        prop::collection::vec(any::<u8>(), 0..40),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..50), 0..3),
    )
        .prop_map(|(program_id_index, accounts, data, events)| Instruction {
            program_id_index,
            accounts,
            data,
            events,
        })
}

fn transaction() -> impl Strategy<Value = ChainTransaction> {
    (
        (any::<u64>(), any::<u32>(), text(), any::<i64>()),
        prop::collection::vec(text(), 0..12),
        prop::collection::vec(instruction(), 0..4),
        prop::collection::vec((any::<u32>(), text(), any::<u64>(), any::<u64>()), 0..6),
    )
        .prop_map(|((slot, index, signature, block_time_ms), account_keys, instructions, balances)| {
            ChainTransaction {
                slot,
                index,
                signature,
                block_time_ms,
                account_keys,
                instructions,
                token_balances: balances
                    .into_iter()
                    .map(|(account_index, mint, pre_amount, post_amount)| TokenBalance {
                        account_index,
                        mint,
                        pre_amount,
                        post_amount,
                    })
                    .collect(),
            }
        })
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One raw field: a tag (known or not), any wire type, a payload shaped
/// mostly like that wire type wants.
fn field() -> impl Strategy<Value = Vec<u8>> {
    (0u32..10, 0u8..8, any::<u64>(), prop::collection::vec(any::<u8>(), 0..12)).prop_map(|(tag, wire, n, bytes)| {
        let mut out = Vec::new();
        varint(u64::from(tag) << 3 | u64::from(wire), &mut out);
        match wire {
            0 => varint(n, &mut out),
            1 => out.extend_from_slice(&n.to_le_bytes()),
            2 => {
                varint(bytes.len() as u64, &mut out);
                out.extend_from_slice(&bytes);
            }
            5 => out.extend_from_slice(&(n as u32).to_le_bytes()),
            _ => out.extend_from_slice(&bytes),
        }
        out
    })
}

/// A nested message (an instruction or a balance) made of raw fields.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            3 => field(),
            1 => (prop_oneof![Just(6u8), Just(7u8)], prop::collection::vec(field(), 0..6)).prop_map(|(tag, inner)| {
                let inner: Vec<u8> = inner.concat();
                let mut out = vec![tag << 3 | 2];
                varint(inner.len() as u64, &mut out);
                out.extend_from_slice(&inner);
                out
            }),
        ],
        0..10,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn well_formed_transactions_read_the_same(tx in transaction()) {
        let bytes = tx.encode_to_vec();
        prop_assert_eq!(TxView::decode(&bytes).expect("valid"), TxView::of(&tx));
    }

    #[test]
    fn mutated_transactions_get_the_same_verdict(
        tx in transaction(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut bytes = tx.encode_to_vec();
        for (at, byte, op) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => {
                    bytes.remove(i);
                }
            }
        }
        agree(&bytes);
    }

    #[test]
    fn field_soups_get_the_same_verdict(bytes in soup()) {
        agree(&bytes);
    }

    #[test]
    fn random_bytes_get_the_same_verdict(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        agree(&bytes);
    }
}

#[test]
fn edge_cases_get_the_same_verdict() {
    let nested_groups = |depth: usize, in_instruction: bool| {
        let mut group = Vec::new();
        for _ in 0..depth {
            group.push(9 << 3 | 3);
        }
        for _ in 0..depth {
            group.push(9 << 3 | 4);
        }
        if in_instruction {
            let mut out = vec![6 << 3 | 2];
            varint(group.len() as u64, &mut out);
            out.extend_from_slice(&group);
            out
        } else {
            group
        }
    };
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x08, 0x01, 0x08, 0x02],                         // slot twice: last wins
        vec![0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F],             // index past u32: truncated
        vec![0x1A, 0x02, 0xC3, 0x28],                         // signature not UTF-8
        vec![0x09, 0, 0, 0, 0, 0, 0, 0, 0],                   // slot with the wrong wire type
        vec![0x32, 0x06, 0x12, 0x02, 0x01, 0x02, 0x10, 0x03], // packed then unpacked accounts
        vec![0x32, 0x03, 0x12, 0x02, 0x01],                   // packed run cut short
        vec![0x32, 0x02, 0x15, 0x00],                         // accounts as fixed32
        vec![0x4B, 0x4C],                                     // empty group 9
        vec![0x4B, 0x54],                                     // group 9 closed as 10
        vec![0x4C],                                           // end group alone
        vec![0x07],                                           // wire type 7
        vec![0x00],                                           // tag 0
        vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x01],             // key past u32
        // Account keys with multi-byte characters, valid and cut.
        vec![0x2A, 0x02, 0xC3, 0xA9, 0x2A, 0x01, 0x41, 0x2A, 0x03, 0xE2, 0x82, 0xAC],
        vec![0x2A, 0x01, 0xC3, 0x2A, 0x01, 0xA9],
        // A key ending in a lead byte that the next (unknown, wide-tag)
        // field's key completes: valid across the run, not on its own.
        vec![0x2A, 0x01, 0xC3, 0xA9, 0x01, 0, 0, 0, 0, 0, 0, 0, 0],
        vec![0x2A, 0x02, 0x41, 0xC3, 0xA9, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0x2A, 0x01, 0x42],
        vec![0x2A, 0x02, 0xC3, 0xA9, 0xA9, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0x2A, 0x01, 0x42],
        nested_groups(99, false),
        nested_groups(100, false),
        nested_groups(101, false),
        nested_groups(98, true),
        nested_groups(99, true),
        nested_groups(100, true),
    ];
    for bytes in &cases {
        agree(bytes);
    }
    // The last multi-byte case is valid: "é", then an unknown fixed64 field.
    let accepted = TxView::decode(&[0x2A, 0x02, 0xC3, 0xA9, 0xA9, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0x2A, 0x01, 0x42]);
    assert_eq!(accepted.map(|tx| tx.account_keys), Ok(vec!["é", "B"]));
}
