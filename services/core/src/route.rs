//! The routing rule: which Kafka record key(s) a transaction is published
//! under.
//!
//! A transaction is published once per pool it touches, keyed by that pool,
//! so that all of a pool's events sit in one partition in chain order. The
//! pool of an instruction is the account at its venue's pool position (the
//! first account for programs Sluice does not know). An instruction whose
//! pool cannot be found (too few accounts) is keyed by the transaction's
//! signature, so that it still reaches a processor and its dead-letter queue.

use crate::chain::{ChainTransaction, Instruction};
use crate::venue;

/// The key an instruction routes to.
pub fn instruction_key<'a>(tx: &'a ChainTransaction, ix: &Instruction) -> &'a str {
    let key = |index: u32| tx.account_keys.get(index as usize).map(String::as_str);
    pool_key(key(ix.program_id_index), &ix.accounts, key, &tx.signature)
}

/// The rule itself, over any representation of a transaction: `program` is
/// the instruction's program key, `accounts` its account indexes, `key`
/// looks an index up in the transaction's account keys.
pub fn pool_key<'a>(
    program: Option<&str>,
    accounts: &[u32],
    key: impl Fn(u32) -> Option<&'a str>,
    signature: &'a str,
) -> &'a str {
    let position = program.and_then(venue::venue_of_program).map_or(0, venue::pool_account_position);
    accounts.get(position).and_then(|&index| key(index)).unwrap_or(signature)
}

/// The distinct record keys of a transaction, in order of first appearance.
/// Never empty: a transaction without instructions is keyed by its signature.
pub fn record_keys(tx: &ChainTransaction) -> Vec<&str> {
    let mut keys: Vec<&str> = Vec::with_capacity(tx.instructions.len().max(1));
    for ix in &tx.instructions {
        let key = instruction_key(tx, ix);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        keys.push(&tx.signature);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::venue::{CLMM_PROGRAM, CPAMM_PROGRAM};

    fn tx(keys: &[&str], instructions: Vec<Instruction>) -> ChainTransaction {
        ChainTransaction {
            signature: "sig".into(),
            account_keys: keys.iter().map(|k| k.to_string()).collect(),
            instructions,
            ..Default::default()
        }
    }

    fn ix(program: u32, accounts: &[u32]) -> Instruction {
        Instruction { program_id_index: program, accounts: accounts.to_vec(), ..Default::default() }
    }

    #[test]
    fn one_key_per_pool_in_order_of_first_touch() {
        // keys: 0 cp program, 1 cl program, 2 pool X, 3 pool Y, 4 other.
        let t = tx(
            &[CPAMM_PROGRAM, CLMM_PROGRAM, "X", "Y", "o"],
            vec![
                ix(1, &[4, 4, 3, 4, 4, 4, 4, 4, 4, 4, 4]), // CL: pool at position 2 → Y
                ix(0, &[4, 2, 4, 4, 4, 4, 4, 4]),          // CP: pool at position 1 → X
                ix(0, &[4, 3, 4, 4, 4, 4, 4, 4]),          // Y again
            ],
        );
        assert_eq!(record_keys(&t), vec!["Y", "X"]);
    }

    #[test]
    fn unknown_programs_route_by_first_account_and_broken_ones_by_signature() {
        let t = tx(&["Unknown", "P", CPAMM_PROGRAM], vec![ix(0, &[1, 0]), ix(2, &[1])]);
        assert_eq!(record_keys(&t), vec!["P", "sig"]);
        let out_of_range = tx(&["Unknown"], vec![ix(7, &[9])]);
        assert_eq!(record_keys(&out_of_range), vec!["sig"]);
        assert_eq!(record_keys(&tx(&[], vec![])), vec!["sig"]);
    }
}
