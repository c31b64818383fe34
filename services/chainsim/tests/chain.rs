//! The chain simulator's promises, checked without any service: same seed →
//! same stream; the true pool states equal what recognising the stream's
//! swaps yields; fault fractions as configured.

use std::collections::HashMap;

use prost::Message;
use sluice_chainsim::{Chain, ChainConfig, Fault, TxKind};
use sluice_core::pool::PoolState;
use sluice_core::recognize::recognize;
use sluice_core::route::record_keys;

fn config(seed: u64) -> ChainConfig {
    ChainConfig {
        seed,
        tx_per_sec: 2_500, // 1,000 transactions per slot
        burst_every_slots: 20,
        burst_slots: 2,
        burst_factor: 3,
        ..ChainConfig::default()
    }
}

fn stream_bytes(chain: &mut Chain, slots: u64) -> Vec<Vec<u8>> {
    (0..slots).flat_map(|_| chain.next_block().transactions).map(|g| g.tx.encode_to_vec()).collect()
}

#[test]
fn same_seed_same_stream_and_states_other_seed_differs() {
    let mut a = Chain::new(config(7)).expect("valid config");
    let mut b = Chain::new(config(7)).expect("valid config");
    let mut c = Chain::new(config(8)).expect("valid config");
    assert_eq!(a.tokens(), b.tokens());
    assert_eq!(a.pool_infos(), b.pool_infos());
    let (sa, sb, sc) = (stream_bytes(&mut a, 30), stream_bytes(&mut b, 30), stream_bytes(&mut c, 30));
    assert!(sa.len() > 30_000, "{} transactions", sa.len());
    assert_eq!(sa, sb);
    assert_ne!(sa, sc);
    for i in 0..a.pools().len() {
        assert_eq!(a.pool_state(i), b.pool_state(i));
    }
    // A clone forks an identical future: replay from any point.
    let mut fork = a.clone();
    assert_eq!(stream_bytes(&mut a, 3), stream_bytes(&mut fork, 3));
}

/// Applies every recognised swap of the stream, record by record as the
/// processor will see them, and compares with the chain's own states.
#[test]
fn recognised_swaps_rebuild_the_true_pool_states_and_faults_match_their_rates() {
    let mut chain = Chain::new(config(11)).expect("valid config");
    let genesis = chain.clone();
    let mut states: HashMap<String, PoolState> = HashMap::new();
    for (i, pool) in genesis.pools().iter().enumerate() {
        let _ = i;
        states.insert(pool.info.pool.clone(), pool.state);
    }
    let mut kinds: HashMap<TxKind, u64> = HashMap::new();
    let (mut total, mut swaps_seen) = (0u64, 0u64);
    let mut checked_midway = false;
    while total < 100_000 {
        let block = chain.next_block();
        for g in &block.transactions {
            total += 1;
            *kinds.entry(g.kind).or_default() += 1;
            let keys = record_keys(&g.tx);
            let results: Vec<_> = keys.iter().map(|k| (k, recognize(&g.tx, k))).collect();
            match g.kind {
                TxKind::Swap { hops } => {
                    assert_eq!(keys.len(), usize::from(hops), "one record per pool touched");
                    for (key, result) in results {
                        let recognised = result.unwrap_or_else(|e| panic!("swap {} failed: {e}", g.tx.signature));
                        assert_eq!(recognised.swaps.len(), 1);
                        for swap in &recognised.swaps {
                            assert_eq!(swap.pool, *key);
                            let state = states.get_mut(swap.pool).expect("known pool");
                            state.apply(swap);
                            swaps_seen += 1;
                        }
                    }
                }
                TxKind::Malformed(fault) => {
                    assert_eq!(keys.len(), 1);
                    let err = results[0].1.as_ref().expect_err("malformed must not recognise");
                    let expected = match fault {
                        Fault::TruncatedData | Fault::BadTag => &["layout"][..],
                        Fault::MissingAccounts => &["missing_accounts"][..],
                        Fault::NoEffect => &["missing_event", "inconsistent"][..],
                    };
                    assert!(expected.contains(&err.kind()), "{fault:?} gave {err}");
                }
                TxKind::UnknownVenue => {
                    let r = results[0].1.as_ref().expect("unknown venues are not errors");
                    assert_eq!((r.swaps.len(), r.unknown_venue), (0, 1));
                }
            }
        }
        if !checked_midway && total > 50_000 {
            // GetPool at an intermediate slot: the chain's state now equals the replay so far.
            for (i, pool) in chain.pools().iter().enumerate() {
                assert_eq!(states[&pool.info.pool], pool.state, "pool {i} at slot {}", block.slot);
            }
            checked_midway = true;
        }
    }
    for pool in chain.pools() {
        assert_eq!(states[&pool.info.pool], pool.state, "pool {}", pool.info.pool);
    }
    let applied: u64 = chain.pools().iter().map(|p| p.state.swaps_applied).sum();
    assert_eq!(applied, swaps_seen);

    let share = |pred: &dyn Fn(&TxKind) -> bool| -> f64 {
        kinds.iter().filter(|(k, _)| pred(k)).map(|(_, n)| *n).sum::<u64>() as f64 / total as f64
    };
    let malformed = share(&|k| matches!(k, TxKind::Malformed(_)));
    let unknown = share(&|k| matches!(k, TxKind::UnknownVenue));
    let multi = share(&|k| matches!(k, TxKind::Swap { hops } if *hops > 1));
    let swaps = share(&|k| matches!(k, TxKind::Swap { .. }));
    // Binomial standard deviations at n = 100k are ≈ 0.03% (1%) and 0.045% (2%).
    assert!((malformed - 0.01).abs() < 0.0015, "malformed share {malformed}");
    assert!((unknown - 0.02).abs() < 0.002, "unknown-venue share {unknown}");
    // Multi-hop is 15% of swaps, less the routes that found no second pool.
    let multi_of_swaps = multi / swaps;
    assert!((0.12..0.16).contains(&multi_of_swaps), "multi-hop share {multi_of_swaps}");
    for fault in [Fault::TruncatedData, Fault::BadTag, Fault::MissingAccounts, Fault::NoEffect] {
        assert!(kinds.get(&TxKind::Malformed(fault)).copied().unwrap_or(0) > 100, "{fault:?} too rare");
    }
    assert_eq!(kinds.get(&TxKind::Swap { hops: 0 }), None, "every swap found a pool");
}
