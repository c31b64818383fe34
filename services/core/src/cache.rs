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

use std::cell::Cell;
use std::hash::Hash;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use dashmap::DashMap;
use foldhash::fast::RandomState;

/// Shards of the map: many more than cores, so two threads rarely share a
/// shard's lock word (a read lock is still an atomic write to it).
const SHARDS: usize = 64;

/// Entry-count stripes: each thread counts in its own cache line, so
/// inserts from different threads do not bounce one shared counter.
const STRIPES: usize = 16;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe(AtomicIsize);

/// This thread's stripe, assigned round-robin on first use.
fn my_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! { static MINE: Cell<Option<usize>> = const { Cell::new(None) }; }
    MINE.with(|m| {
        *m.get().get_or_insert_with(|| {
            let s = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
            m.set(Some(s));
            s
        })
    })
}

/// A bounded concurrent map with batch eviction.
#[derive(Debug)]
pub struct BatchEvictingCache<K: Eq + Hash, V> {
    /// Hashed with foldhash, seeded per process: keys come from chain data,
    /// so not a fixed-seed hash, but no SipHash on every hit either.
    map: DashMap<K, V, RandomState>,
    capacity: usize,
    /// Entries, striped per thread (a removal may count in another stripe
    /// than its insert: only the sum is meaningful).
    counts: Box<[Stripe]>,
    /// A thread sums the stripes after every this many of its inserts.
    check_every: isize,
}

impl<K: Eq + Hash + Clone, V: Clone> BatchEvictingCache<K, V> {
    /// A cache holding about `capacity` entries (at least 1): each thread
    /// checks the total every `capacity / 64` of its inserts (at most 64),
    /// so it may pass the cap by that much per inserting thread.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            map: DashMap::with_capacity_and_hasher_and_shard_amount(capacity, RandomState::default(), SHARDS),
            capacity,
            counts: (0..STRIPES).map(|_| Stripe::default()).collect(),
            check_every: (capacity / 64).clamp(1, 64) as isize,
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

    /// Inserts `value`; at the cap, evicts about 10% of the entries.
    /// Returns how many entries this call evicted.
    pub fn insert(&self, key: K, value: V) -> usize {
        if self.map.insert(key, value).is_some() {
            return 0; // replaced: no new entry
        }
        let mine = self.counts[my_stripe()].0.fetch_add(1, Ordering::Relaxed) + 1;
        if mine.rem_euclid(self.check_every) != 0 || self.len() <= self.capacity {
            return 0;
        }
        // Two inserters at the cap may both evict a batch: the cache then
        // holds ~80% for a while, which costs a few misses.
        self.evict_batch()
    }

    fn count(&self, delta: isize) {
        self.counts[my_stripe()].0.fetch_add(delta, Ordering::Relaxed);
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
        self.count(-(removed as isize));
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
            self.count(-1);
        }
        removed
    }

    /// Drops every entry.
    pub fn clear(&self) {
        let mut removed = 0;
        self.map.retain(|_, _| {
            removed += 1;
            false
        });
        self.count(-removed);
    }

    /// Entries: the sum of the stripes (no shard locks).
    pub fn len(&self) -> usize {
        self.counts.iter().map(|s| s.0.load(Ordering::Relaxed)).sum::<isize>().max(0) as usize
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
            // One thread checks the total every 1,000 / 64 = 15 inserts.
            assert!(cache.len() <= 1_000 + 15, "len {} after inserting {k}", cache.len());
        }
        assert!(evictions.iter().all(|&e| e == 100), "batches of 10%: {evictions:?}");
        // 5,000 inserts into ~1,000 slots, 100 at a time.
        assert!((39..=41).contains(&evictions.len()), "{} batches", evictions.len());
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
                        // Each of the two threads checks every 500 / 64 = 7 inserts.
                        assert!(len <= 500 + 2 * 7, "len {len}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        assert!(cache.len() <= 500 + 2 * 7, "len {}", cache.len());
        assert_eq!(cache.len(), cache.map.len(), "the striped count matches the map");
    }
}
