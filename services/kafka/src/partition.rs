//! The partition a keyed record goes to, known before it is sent.
//!
//! librdkafka's default partitioner (`consistent_random`) places a record
//! with a non-empty key at `crc32(key) % partitions`, CRC-32 being the IEEE
//! one (zlib's); only records without a key go to a random partition. A
//! producer that must know where a record lands before sending it (the
//! ingest, which does not send again what a partition already holds) applies
//! the same rule and names the partition, so records keep the partitions they
//! had when librdkafka chose (checked against the real client in
//! `tests/partition.rs`).

/// The partition of `key` in a topic of `partitions` partitions, as
/// librdkafka's default partitioner chooses it; `None` for an empty key
/// (which that partitioner places at random) or a topic with no partitions.
pub fn by_key(key: &[u8], partitions: usize) -> Option<i32> {
    if key.is_empty() || partitions == 0 {
        return None;
    }
    i32::try_from(crc32fast::hash(key) as usize % partitions).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_ieee_crc32_and_the_partition_its_remainder() {
        // The CRC-32 check value: crc32("123456789") = 0xCBF43926.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(by_key(b"123456789", 7), Some((0xCBF4_3926u32 % 7) as i32));
        assert_eq!(by_key(b"pool", 1), Some(0));
        assert_eq!((by_key(b"", 12), by_key(b"pool", 0)), (None, None));
    }
}
