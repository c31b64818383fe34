//! A concurrent, capacity-bounded cache whose hits cost a shard read lock
//! and nothing else.
//!
//! An LRU moves an entry on every hit, which under a global lock turns the
//! hottest path into the most contended one. Here a hit is a plain sharded
//! lookup; only an insert at the cap does work, evicting about a tenth of
//! the entries in one batch, so eviction is amortised over many inserts.
//! Which entries go is arbitrary (shard iteration order): for a cache of
//! registry data refetched on a miss that is good enough, and it is what
//! keeps hits free.

use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;

/// Shards of the map: many more than cores, so two threads rarely share a
/// shard's lock word (a read lock is still an atomic write to it).
const SHARDS: usize = 64;

/// A bounded concurrent map with batch eviction.
#[derive(Debug)]
pub struct BatchEvictingCache<K: Eq + Hash, V> {
    map: DashMap<K, V>,
    capacity: usize,
    /// Entries, kept on the side: `DashMap::len` visits every shard's lock.
    len: AtomicUsize,
}

impl<K: Eq + Hash + Clone, V: Clone> BatchEvictingCache<K, V> {
    /// A cache holding at most about `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            map: DashMap::with_capacity_and_shard_amount(capacity.max(1), SHARDS),
            capacity: capacity.max(1),
            len: AtomicUsize::new(0),
        }
    }

    /// The cached value, cloned.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key).map(|v| v.value().clone())
    }

    /// Inserts `value`; past the cap, evicts about 10% of the entries.
    /// Returns how many entries this call evicted.
    pub fn insert(&self, key: K, value: V) -> usize {
        if self.map.insert(key, value).is_some() {
            return 0; // replaced: no new entry
        }
        if self.len.fetch_add(1, Ordering::Relaxed) < self.capacity {
            return 0;
        }
        // Two inserters past the cap may both evict a batch: the cache then
        // holds ~80% for a while, which costs a few misses. The cap holds
        // up to the number of concurrent inserters.
        self.evict_batch()
    }

    fn evict_batch(&self) -> usize {
        let target = (self.capacity / 10).max(1);
        let mut removed = 0;
        self.map.retain(|_, _| {
            if removed < target {
                removed += 1;
                false
            } else {
                true
            }
        });
        self.len.fetch_sub(removed, Ordering::Relaxed);
        removed
    }

    /// Removes `key` (an invalidation).
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.map.remove(key).is_some();
        if removed {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Drops every entry.
    pub fn clear(&self) {
        self.map.retain(|_, _| {
            self.len.fetch_sub(1, Ordering::Relaxed);
            false
        });
    }

    /// Entries (the side counter: O(1), no shard locks).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_capacity_and_evicts_a_tenth_at_a_time() {
        let cache = BatchEvictingCache::new(1_000);
        let mut evictions = Vec::new();
        for k in 0..5_000u32 {
            let evicted = cache.insert(k, k * 2);
            if evicted > 0 {
                evictions.push(evicted);
            }
            assert!(cache.len() <= 1_000, "len {} after inserting {k}", cache.len());
        }
        assert!(evictions.iter().all(|&e| e == 100), "batches of 10%: {evictions:?}");
        // 5,000 inserts into 1,000 slots: (5,000 − 1,000) / 100 batches.
        assert_eq!(evictions.len(), 40);
        assert!(cache.len() > 900);
        // Whatever survived maps to the right value.
        for k in 0..5_000u32 {
            if let Some(v) = cache.get(&k) {
                assert_eq!(v, k * 2);
            }
        }
    }

    #[test]
    fn replacing_a_key_at_the_cap_evicts_nothing() {
        let cache = BatchEvictingCache::new(10);
        for k in 0..10 {
            cache.insert(k, 0);
        }
        assert_eq!(cache.insert(3, 1), 0);
        assert_eq!(cache.get(&3), Some(1));
        assert!(cache.remove(&3));
        assert_eq!(cache.get(&3), None);
    }

    #[test]
    fn concurrent_inserts_stay_near_the_cap() {
        let cache = std::sync::Arc::new(BatchEvictingCache::new(500));
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    for k in 0..20_000u64 {
                        cache.insert(t * 1_000_000 + k, k);
                        let len = cache.len();
                        assert!(len <= 502, "len {len}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        assert!(cache.len() <= 500, "len {}", cache.len());
        assert_eq!(cache.len(), cache.map.len(), "the side counter matches the map");
    }
}
