//! Dead letters as the runtime writes them (`sluice-runtime`'s `outcome.rs`): the record as
//! it came, key and payload, with headers naming where it came from and why.

use sluice_kafka::whole::Record;

/// Where a record was when it was consumed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Coordinates {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// One record of the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Its own place in the dead-letter topic.
    pub at: Coordinates,
    /// When it was dead-lettered (the record's timestamp).
    pub timestamp_ms: Option<i64>,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    /// `sluice.error.kind`: the reason, as a word (`decode`, `invalid`, …); empty if missing.
    pub kind: String,
    /// `sluice.error.message`.
    pub message: String,
    /// `sluice.original.*`: where the record was consumed, if the headers say.
    pub origin: Option<Coordinates>,
    /// `sluice.consumer.group`: the group that dead-lettered it.
    pub group: Option<String>,
}

impl DeadLetter {
    /// A record of `topic` read as a dead letter.
    pub fn from_record(topic: &str, r: Record) -> Self {
        let origin = match (
            r.header_text("sluice.original.topic"),
            r.header_text("sluice.original.partition").and_then(|p| p.parse().ok()),
            r.header_text("sluice.original.offset").and_then(|o| o.parse().ok()),
        ) {
            (Some(topic), Some(partition), Some(offset)) => Some(Coordinates { topic, partition, offset }),
            _ => None,
        };
        Self {
            at: Coordinates { topic: topic.to_string(), partition: r.partition, offset: r.offset },
            timestamp_ms: r.timestamp_ms,
            kind: r.header_text("sluice.error.kind").unwrap_or_default(),
            message: r.header_text("sluice.error.message").unwrap_or_default(),
            group: r.header_text("sluice.consumer.group"),
            origin,
            key: r.key,
            payload: r.payload,
        }
    }

    /// The key as text (lossy).
    pub fn key_text(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }

    /// The order a redrive sends in: the original order where known (a key's records share
    /// a partition, so this is the key's order), else the dead-letter topic's.
    pub fn order(&self) -> (i32, i64, i32, i64) {
        let (p, o) = self.origin.as_ref().map_or((i32::MAX, i64::MAX), |c| (c.partition, c.offset));
        (p, o, self.at.partition, self.at.offset)
    }
}
