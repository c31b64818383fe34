//! What an active period need not send: records already in the topic.
//!
//! At the start of an active period (after its transactional producer has
//! fenced the previous holder, whose open transaction is then aborted) the
//! ingest reads the newest committed record of each partition. Whoever wrote
//! the topic before (the previous active instance, or this one before a
//! restart) sent the chain in order, and its transactional producer
//! commits in order and aborts whatever transaction holds a failed
//! delivery, so what a partition holds below its newest committed record is
//! complete: a record this period would write to a partition at or before
//! that partition's newest position is there already. It is not sent again
//! (counted in `sluice_ingest_skipped_records_total`): a takeover, a
//! restart, or a resend from the start after a lost cursor adds no
//! duplicate. (An idempotent producer without transactions may leave a gap
//! after a failed delivery, so with `TRANSACTIONS=false` such records are
//! sent again and counted in `sluice_ingest_resent_records_total`.) The ingest
//! names each record's partition itself ([`sluice_kafka::partition`], the
//! rule librdkafka applies) to know it before sending; a record acknowledged
//! at or before its partition's newest all the same is counted in
//! `sluice_ingest_resent_records_total` (with transactions, 0 unless
//! something else wrote the topic meanwhile).

use std::collections::HashMap;

use prost::Message;
use sluice_core::route::record_keys;
use sluice_kafka::partition;
use sluice_kafka::tail::{Tail, Tails};
use sluice_proto::chain::v1::ChainTransaction;

/// A record's place in the chain: its transaction, then which of the
/// transaction's record keys (in `record_keys` order, the order it is sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub slot: u64,
    pub index: u32,
    pub key: u32,
}

/// The newest position in each partition when the period started, and how
/// many partitions the topic had.
#[derive(Debug, Clone, Default)]
pub struct AlreadySent {
    newest: HashMap<i32, Position>,
    partitions: usize,
}

impl AlreadySent {
    /// From the partitions' newest records; one that is not a transaction of
    /// this topic's shape (nothing Sluice wrote) says nothing.
    pub fn from_tails(tails: &Tails) -> Self {
        let newest = tails.newest.iter().filter_map(|t| Some((t.partition, position_of(t)?))).collect();
        Self { newest, partitions: tails.partitions }
    }

    /// The partition a record keyed `key` goes to, named by the ingest so
    /// it is known before the send: the partition count read at the
    /// period's start (`None`: a topic with no partitions yet, where the
    /// producer chooses). Partitions added later are used from the next
    /// active period on, so a key never moves within one.
    pub fn partition(&self, key: &str) -> Option<i32> {
        partition::by_key(key.as_bytes(), self.partitions)
    }

    /// Whether a record at `at`, acknowledged in `partition`, was there before.
    pub fn contains(&self, partition: i32, at: Position) -> bool {
        self.newest.get(&partition).is_some_and(|newest| at <= *newest)
    }

    /// With a `partitioner` of the user's own in the Kafka properties the
    /// client chooses partitions by it: the ingest names none, so it cannot
    /// tell which records a partition holds, and skips nothing.
    pub fn client_partitions(self) -> Self {
        Self { partitions: 0, ..self }
    }

    /// Partitions that hold a record of the chain.
    pub fn partitions_written(&self) -> usize {
        self.newest.len()
    }

    /// The newest slot any partition holds (`None`: an empty topic).
    pub fn newest_slot(&self) -> Option<u64> {
        self.newest.values().map(|p| p.slot).max()
    }
}

fn position_of(tail: &Tail) -> Option<Position> {
    let tx = ChainTransaction::decode(tail.payload.as_deref()?).ok()?;
    let key = std::str::from_utf8(tail.key.as_deref()?).ok()?;
    let key = record_keys(&tx).iter().position(|k| *k == key)? as u32;
    Some(Position { slot: tx.slot, index: tx.index, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(partition: i32, tx: &ChainTransaction, key: &str) -> Tail {
        Tail { partition, offset: 0, key: Some(key.as_bytes().to_vec()), payload: Some(tx.encode_to_vec()) }
    }

    #[test]
    fn a_record_at_or_before_its_partitions_newest_was_there() {
        let tx = ChainTransaction {
            slot: 7,
            index: 3,
            signature: "sig".into(),
            account_keys: vec!["program".into()],
            ..ChainTransaction::default()
        };
        let keys = record_keys(&tx);
        let newest_key = keys[0];
        let sent = AlreadySent::from_tails(&Tails {
            partitions: 3,
            newest: vec![
                tail(0, &tx, newest_key),
                Tail { partition: 1, offset: 5, key: Some(b"k".to_vec()), payload: Some(b"\xff not a tx".to_vec()) },
            ],
        });
        assert_eq!(sent.partitions_written(), 1, "a record that is not a transaction says nothing");
        assert_eq!((sent.newest_slot(), AlreadySent::default().newest_slot()), (Some(7), None));
        let at = |slot, index, key| Position { slot, index, key };
        assert!(sent.contains(0, at(7, 3, 0)), "the newest itself");
        assert!(sent.contains(0, at(7, 2, 5)) && sent.contains(0, at(6, 9, 0)), "anything earlier");
        assert!(!sent.contains(0, at(7, 3, 1)), "a later key of the same transaction");
        assert!(!sent.contains(0, at(7, 4, 0)) && !sent.contains(0, at(8, 0, 0)), "anything later");
        assert!(!sent.contains(1, at(0, 0, 0)) && !sent.contains(2, at(0, 0, 0)), "an unknown or empty partition");
        // A key is looked up in the partition the ingest names for it.
        let in_zero =
            (0..).map(|i| format!("key{i}")).find(|k| sent.partition(k) == Some(0)).expect("a key of partition 0");
        let elsewhere = (0..).map(|i| format!("key{i}")).find(|k| sent.partition(k) == Some(2)).expect("one of 2");
        let holds = |key: &str, at| sent.partition(key).is_some_and(|p| sent.contains(p, at));
        assert!(holds(&in_zero, at(7, 3, 0)) && !holds(&in_zero, at(7, 3, 1)));
        assert!(!holds(&elsewhere, at(0, 0, 0)), "partition 2 holds nothing");
        assert_eq!(AlreadySent::default().partition("key"), None, "no partitions known: the producer chooses");
        assert_eq!(sent.clone().client_partitions().partition(&in_zero), None, "a partitioner of the user's own");
    }
}
