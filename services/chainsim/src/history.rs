//! Pool states over time, so `GetPool(pool, at_slot)` can answer for any
//! recent slot without replaying the chain.
//!
//! One entry per pool per slot that changed it (the state at the end of the
//! slot), in a bounded ring per pool: memory stays flat on a long-running
//! chain, and a question about a slot older than what is kept gets a clear
//! error rather than a wrong answer.

use std::collections::VecDeque;

use sluice_core::pool::PoolState;

use crate::generator::{Block, Chain};

/// Why a state cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    #[error("slot {at_slot} is not produced yet (head is {head:?})")]
    Future { at_slot: u64, head: Option<u64> },
    #[error("slot {at_slot} is older than the history kept for this pool (oldest kept: slot {oldest})")]
    Evicted { at_slot: u64, oldest: u64 },
}

/// Per-pool state history.
#[derive(Debug, Clone)]
pub struct History {
    genesis: Vec<PoolState>,
    per_pool: Vec<VecDeque<(u64, PoolState)>>,
    /// Whether a pool's ring has dropped entries (then genesis no longer answers).
    trimmed: Vec<bool>,
    capacity: usize,
    head: Option<u64>,
}

impl History {
    /// Starts from the chain's genesis states, keeping at most `capacity`
    /// entries per pool.
    pub fn new(chain: &Chain, capacity: usize) -> Self {
        let genesis: Vec<PoolState> = chain.pools().iter().map(|p| p.state).collect();
        Self {
            per_pool: vec![VecDeque::new(); genesis.len()],
            trimmed: vec![false; genesis.len()],
            genesis,
            capacity: capacity.max(1),
            head: None,
        }
    }

    /// Records the states `chain` holds after producing `block`.
    pub fn record(&mut self, block: &Block, chain: &Chain) {
        for &i in &block.touched_pools {
            let ring = &mut self.per_pool[i];
            if ring.len() == self.capacity {
                ring.pop_front();
                self.trimmed[i] = true;
            }
            ring.push_back((block.slot, chain.pools()[i].state));
        }
        self.head = Some(block.slot);
    }

    /// Last slot recorded.
    pub fn head(&self) -> Option<u64> {
        self.head
    }

    /// State of pool `index` after every transaction of `at_slot`.
    pub fn state_at(&self, index: usize, at_slot: u64) -> Result<PoolState, HistoryError> {
        if self.head.is_none_or(|h| at_slot > h) {
            return Err(HistoryError::Future { at_slot, head: self.head });
        }
        let ring = &self.per_pool[index];
        let after = ring.partition_point(|(slot, _)| *slot <= at_slot);
        match after.checked_sub(1) {
            Some(i) => Ok(ring[i].1),
            None if self.trimmed[index] => {
                Err(HistoryError::Evicted { at_slot, oldest: ring.front().map_or(0, |(s, _)| *s) })
            }
            None => Ok(self.genesis[index]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ChainConfig;

    #[test]
    fn answers_any_kept_slot_exactly_and_refuses_others() {
        let config = ChainConfig { tx_per_sec: 250, pools: 6, ..ChainConfig::default() };
        let mut chain = Chain::new(config).expect("valid config");
        let mut history = History::new(&chain, 1_000);
        let mut snapshots = Vec::new();
        for _ in 0..40 {
            let block = chain.next_block();
            history.record(&block, &chain);
            snapshots.push(chain.pools().iter().map(|p| p.state).collect::<Vec<_>>());
        }
        for (slot, states) in snapshots.iter().enumerate() {
            for (i, state) in states.iter().enumerate() {
                assert_eq!(history.state_at(i, slot as u64).as_ref(), Ok(state));
            }
        }
        assert!(matches!(history.state_at(0, 40), Err(HistoryError::Future { .. })));

        let mut small = History::new(&Chain::new(chain.config().clone()).expect("valid"), 2);
        let mut replay = Chain::new(chain.config().clone()).expect("valid");
        for _ in 0..40 {
            let block = replay.next_block();
            small.record(&block, &replay);
        }
        assert!(matches!(small.state_at(0, 0), Err(HistoryError::Evicted { .. })));
        assert_eq!(small.state_at(0, 39), Ok(replay.pools()[0].state));
    }
}
