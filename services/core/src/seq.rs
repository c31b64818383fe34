//! A swap's position on the chain: what orders the facts the processor applies and what
//! a pool's state remembers as the last one applied.

/// Position of a swap on the chain, ordered by slot, then transaction index,
/// then instruction index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq {
    pub slot: u64,
    pub tx_index: u32,
    pub ix_index: u32,
}

impl From<Seq> for crate::dex::Sequence {
    fn from(s: Seq) -> Self {
        Self { slot: s.slot, tx_index: s.tx_index, ix_index: s.ix_index }
    }
}

impl From<&crate::dex::Sequence> for Seq {
    fn from(s: &crate::dex::Sequence) -> Self {
        Self { slot: s.slot, tx_index: s.tx_index, ix_index: s.ix_index }
    }
}
