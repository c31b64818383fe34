//! Experiment 2: contention, before and after.
//!
//! - Token cache: a `Mutex<HashMap + VecDeque>` LRU (every hit reorders the
//!   queue in O(n) under the lock: the defect) against the project's
//!   `BatchEvictingCache` (sharded; a hit does no bookkeeping), at a stated
//!   capacity and key population, and at the processor's real shape (every
//!   token fits: hits only).
//! - Pool state: `RwLock<HashMap>` against `DashMap`, each operation a read
//!   and a write of one pool (what every swap does).
//! - Price board: `SeqCst` against `Release`/`Acquire` stores and loads.
//! - Machine reference (first row): the token cache's two shapes on a
//!   thread-local `HashMap` (same keys, RNG, batch eviction and latency
//!   recording; nothing shared), so its 2-thread ÷ 1-thread ratio is what
//!   this machine allows for a loop of that shape.
//!
//! Each variant runs on 1 and 2 threads in the same process; the results
//! carry throughput, the per-operation latency distribution and the ratios.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_core::cache::BatchEvictingCache;
use sluice_core::rng::Rng;

use crate::stats::{Latency, histogram};

/// The "before" cache: an LRU whose hits move the key to the back.
pub struct MutexLru<K, V> {
    inner: Mutex<(HashMap<K, V>, VecDeque<K>)>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> MutexLru<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self { inner: Mutex::new((HashMap::with_capacity(capacity), VecDeque::with_capacity(capacity))), capacity }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        let value = map.get(key)?.clone();
        // O(n): find the key, move it to the back.
        if let Some(i) = order.iter().position(|k| k == key) {
            order.remove(i);
        }
        order.push_back(key.clone());
        Some(value)
    }

    pub fn insert(&self, key: K, value: V) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if map.len() >= self.capacity
            && !map.contains_key(&key)
            && let Some(old) = order.pop_front()
        {
            map.remove(&old);
        }
        if map.insert(key.clone(), value).is_none() {
            order.push_back(key);
        }
    }
}

/// One variant's figures at one thread count.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub threads: usize,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub latency: Latency,
}

/// A variant on 1 and 2 threads.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    pub name: String,
    pub runs: Vec<Run>,
    /// 2-thread ÷ 1-thread throughput.
    pub scaling: f64,
}

/// One comparison: before vs after, and their ratio at 2 threads.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub what: String,
    pub setup: String,
    pub before: Variant,
    pub after: Variant,
    /// after ÷ before throughput at 2 threads.
    pub speedup_2_threads: f64,
    /// before ÷ after p99 at 2 threads (> 1: after has the lower p99).
    pub p99_ratio_2_threads: f64,
}

/// Runs `op` on `threads` threads for `duration`; op gets (thread rng).
fn run_threads(threads: usize, duration: Duration, op: Arc<dyn Fn(&mut Rng) + Send + Sync>) -> Run {
    let start = Instant::now() + Duration::from_millis(20);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let op = op.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::seeded(0xC0FFEE + t as u64);
                let mut h = histogram();
                while Instant::now() < start {}
                let end = start + duration;
                let mut ops = 0u64;
                loop {
                    let t0 = Instant::now();
                    if t0 >= end {
                        break;
                    }
                    op(&mut rng);
                    let _ = h.record((t0.elapsed().as_nanos() as u64).max(1));
                    ops += 1;
                }
                (ops, h)
            })
        })
        .collect();
    let mut total = 0;
    let mut merged = histogram();
    for handle in handles {
        let (ops, h) = handle.join().expect("bench thread");
        total += ops;
        let _ = merged.add(&h);
    }
    Run { threads, ops: total, ops_per_sec: total as f64 / duration.as_secs_f64(), latency: Latency::of(&merged) }
}

fn variant(name: &str, duration: Duration, make: &dyn Fn() -> Arc<dyn Fn(&mut Rng) + Send + Sync>) -> Variant {
    // A fresh structure per thread count, warmed by its own run.
    let runs: Vec<Run> = [1, 2].iter().map(|&t| run_threads(t, duration, make())).collect();
    let scaling = runs[1].ops_per_sec / runs[0].ops_per_sec;
    Variant { name: name.to_string(), runs, scaling }
}

fn compare(what: &str, setup: String, before: Variant, after: Variant) -> Comparison {
    let (b, a) = (&before.runs[1], &after.runs[1]);
    Comparison {
        what: what.to_string(),
        setup,
        speedup_2_threads: a.ops_per_sec / b.ops_per_sec,
        p99_ratio_2_threads: b.latency.p99_ns as f64 / a.latency.p99_ns.max(1) as f64,
        before,
        after,
    }
}

/// Cache get-or-insert over `population` uniformly drawn keys.
fn cache_comparison(capacity: usize, population: u64, duration: Duration, label: &str) -> Comparison {
    let before = variant("mutex_lru", duration, &|| {
        let cache = Arc::new(MutexLru::<u64, u64>::new(capacity));
        Arc::new(move |rng: &mut Rng| {
            let k = rng.below(population);
            if cache.get(&k).is_none() {
                cache.insert(k, k);
            }
        })
    });
    let after = variant("dashmap_batch_evicting", duration, &|| {
        let cache = Arc::new(BatchEvictingCache::<u64, u64>::new(capacity));
        Arc::new(move |rng: &mut Rng| {
            let k = rng.below(population);
            if cache.get(&k).is_none() {
                cache.insert(k, k);
            }
        })
    });
    compare(
        label,
        format!("capacity {capacity}, {population} keys drawn uniformly, get then insert on a miss"),
        before,
        after,
    )
}

/// The cache's get-or-insert on a map private to each thread, evicting a
/// tenth at the cap like the real cache: what perfect scaling looks like
/// on this machine. "before" is the 10k-of-20k shape, "after" the
/// processor shape; their speedup column compares the two shapes only.
fn machine_reference(capacity: usize, duration: Duration) -> Comparison {
    thread_local!(static LOCAL: RefCell<HashMap<u64, u64>> = RefCell::new(HashMap::new()));
    let local = |population: u64| -> Arc<dyn Fn(&mut Rng) + Send + Sync> {
        Arc::new(move |rng: &mut Rng| {
            let k = rng.below(population);
            LOCAL.with_borrow_mut(|map| {
                if std::hint::black_box(map.get(&k)).is_none() {
                    if map.len() >= capacity {
                        map.extract_if(|_, _| true).take(capacity / 10).for_each(drop);
                    }
                    map.insert(k, k);
                }
            });
        })
    };
    // Each run's threads are new, so each starts with an empty map.
    let before = variant("thread_local_10k_of_20k", duration, &|| local(2 * capacity as u64));
    let after = variant("thread_local_24_keys", duration, &|| local(24));
    compare(
        "machine_reference",
        format!("thread-local HashMap, capacity {capacity}: {} keys, then 24 keys", 2 * capacity),
        before,
        after,
    )
}

/// Pool state: read and write one of `pools` per operation.
fn pool_state_comparison(pools: u64, duration: Duration) -> Comparison {
    #[derive(Clone, Copy, Default)]
    struct State {
        reserve_a: u64,
        reserve_b: u64,
        seq: u64,
    }
    let before = variant("rwlock_hashmap", duration, &|| {
        let map: Arc<RwLock<HashMap<u64, State>>> =
            Arc::new(RwLock::new((0..pools).map(|p| (p, State::default())).collect()));
        Arc::new(move |rng: &mut Rng| {
            let p = rng.below(pools);
            let current = map.read().unwrap_or_else(|e| e.into_inner()).get(&p).copied().unwrap_or_default();
            let next =
                State { reserve_a: current.reserve_a + 1, reserve_b: current.reserve_b + 2, seq: current.seq + 1 };
            map.write().unwrap_or_else(|e| e.into_inner()).insert(p, next);
        })
    });
    let after = variant("dashmap", duration, &|| {
        let map: Arc<dashmap::DashMap<u64, State>> = Arc::new((0..pools).map(|p| (p, State::default())).collect());
        Arc::new(move |rng: &mut Rng| {
            let p = rng.below(pools);
            if let Some(mut s) = map.get_mut(&p) {
                s.reserve_a += 1;
                s.reserve_b += 2;
                s.seq += 1;
            }
        })
    });
    compare("pool_state", format!("{pools} pools, each operation reads and writes one"), before, after)
}

/// Price board: each operation stores one price and loads another.
fn price_comparison(duration: Duration) -> Comparison {
    fn board(store: Ordering, load: Ordering) -> Arc<dyn Fn(&mut Rng) + Send + Sync> {
        let slots: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        Arc::new(move |rng: &mut Rng| {
            let i = rng.below(4) as usize;
            slots[i].store(rng.next_u64() & 0xFFFF_FFFF, store);
            std::hint::black_box(slots[(i + 1) % 4].load(load));
        })
    }
    let before = variant("seqcst", duration, &|| board(Ordering::SeqCst, Ordering::SeqCst));
    let after = variant("release_acquire", duration, &|| board(Ordering::Release, Ordering::Acquire));
    compare("price_board", "4 reference prices; each operation stores one and loads another".into(), before, after)
}

/// Every comparison, each variant on 1 and 2 threads for `duration`.
pub fn run(duration: Duration) -> Vec<Comparison> {
    vec![
        machine_reference(10_000, duration),
        cache_comparison(10_000, 20_000, duration, "token_cache_10k_of_20k"),
        // The processor's real shape: 24 tokens in a 10,000-entry cache, all hits.
        cache_comparison(10_000, 24, duration, "token_cache_processor_shape"),
        pool_state_comparison(64, duration),
        price_comparison(duration),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutex_lru_evicts_the_least_recently_used() {
        let lru = MutexLru::new(2);
        lru.insert(1, "a");
        lru.insert(2, "b");
        assert_eq!(lru.get(&1), Some("a")); // 2 is now the oldest
        lru.insert(3, "c");
        assert_eq!(lru.get(&2), None);
        assert_eq!(lru.get(&1), Some("a"));
        assert_eq!(lru.get(&3), Some("c"));
    }
}
