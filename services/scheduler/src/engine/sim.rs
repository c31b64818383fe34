//! Ten thousand ticks of three replicas under random faults, in paused
//! time: calls that fail, replies lost after the call applied, replicas
//! killed before or after any call (a write, its reply, the end record) and
//! restarted, replicas paused past their lease, writes delayed in flight
//! (zombies), and stretches with every replica down. For every tick the
//! job's effect, counted by its write's model independently of the history,
//! must have applied at most once, and the history must say which run
//! applied it, or record why nothing did. The seed is printed; set
//! `SLUICE_SIM_SEED` to replay a run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Engine;
use super::harness::{Beat, EPOCH_MS, World, records_of};
use crate::model::Outcome;
use crate::store::faulty::{Call, Fault, Faulty, Plan};

const TICKS: i64 = 10_000;
const PERIOD_MS: i64 = 3_000;
const REPLICAS: usize = 3;
/// Every 3 s; the lease (1.2 s) is well inside the start window (the
/// period), so a dead run's tick can be taken over: the case that matters.
const ENV: [(&str, &str); 4] = [
    ("JOB_BEAT_SCHEDULE", "*/3 * * * * *"),
    ("JOB_BEAT_TIMEOUT_MS", "2000"),
    ("LEASE_TTL_MS", "1200"),
    ("CANCEL_GRACE_MS", "300"),
];

/// SplitMix64: small, seeded, good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `per_10k` / 10,000.
    fn chance(&mut self, per_10k: u64) -> bool {
        self.next() % 10_000 < per_10k
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.next() % (to - from + 1))
    }

    /// The fault for one call, if any.
    fn fault(&mut self, call: Call) -> Option<Fault> {
        let r = self.next() % 10_000;
        let slow = if call == Call::Apply || call == Call::Finish { 40 } else { 10 };
        match r {
            0..100 => Some(Fault::FailBefore),
            100..200 => Some(Fault::LoseReply),
            200..210 => Some(Fault::DieBefore),
            210..220 => Some(Fault::DieAfter),
            _ if r < 220 + slow => Some(Fault::Delay(self.millis(100, 3_000))),
            _ if r < 220 + 2 * slow => Some(Fault::Pause(self.millis(500, 4_000))),
            _ => None,
        }
    }
}

fn seed() -> u64 {
    std::env::var("SLUICE_SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64)
    })
}

/// One replica slot: its current incarnation, and when a dead one restarts.
struct Slot {
    name: String,
    _engine: Engine,
    store: Arc<Faulty>,
    restart_at: Option<i64>,
}

struct Sim {
    world: World,
    rng: Arc<Mutex<Rng>>,
    faults: Arc<AtomicBool>,
    job: Arc<Beat>,
}

impl Sim {
    fn plan(&self) -> Plan {
        let (rng, faults) = (Arc::clone(&self.rng), Arc::clone(&self.faults));
        Box::new(move |call| {
            if !faults.load(Ordering::Relaxed) {
                return None;
            }
            rng.lock().unwrap_or_else(|e| e.into_inner()).fault(call)
        })
    }

    fn start(&self, name: &str) -> Slot {
        let (engine, store) = self.world.replica(name, self.job.clone(), self.plan());
        Slot { name: name.into(), _engine: engine, store, restart_at: None }
    }

    /// Each step: restart the dead whose time came; kill, pause, or take
    /// everyone down now and then.
    fn disturb(&self, slots: &mut [Slot], now: i64, all_down_until: &mut i64) {
        let faults = self.faults.load(Ordering::Relaxed);
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        if faults && rng.chance(2) {
            *all_down_until = now + rng.millis(5_000, 20_000).as_millis() as i64;
            for slot in slots.iter() {
                slot.store.kill();
            }
        }
        for slot in slots.iter_mut() {
            if slot.store.is_dead() {
                let at = *slot.restart_at.get_or_insert(now + rng.millis(300, 8_000).as_millis() as i64);
                if now >= at.max(*all_down_until) || !faults {
                    // The dead incarnation's tasks stay parked on its dead
                    // store: like a killed process, they never act again.
                    *slot = self.start(&slot.name);
                }
            } else if faults && rng.chance(10) {
                slot.store.kill();
            } else if faults && rng.chance(20) {
                slot.store.pause(rng.millis(500, 5_000));
            }
        }
    }
}

#[derive(Debug, Default)]
struct Tally {
    applied: u64,
    not_applied: BTreeMap<&'static str, u64>,
    abandoned_applied: u64,
    taken_over: u64,
}

/// The property, for tick `at_ms` (relative to the epoch).
fn check_tick(world: &World, history: &[crate::store::RunRecord], at_ms: i64, tally: &mut Tally) {
    let effects = world.effects.of(at_ms);
    let records = records_of(history, at_ms);
    let context = || format!("tick {}: effects by {effects:?}, records {records:#?}", EPOCH_MS + at_ms);
    assert!(effects.len() <= 1, "applied more than once: {}", context());
    assert!(!records.is_empty(), "neither applied nor recorded: {}", context());
    let appliers: Vec<_> = records.iter().filter(|r| r.applied > 0).collect();
    assert_eq!(appliers.len(), effects.len(), "the history does not say which run applied it: {}", context());
    assert!(records.iter().filter(|r| r.outcome == Outcome::Succeeded).count() <= 1, "{}", context());
    assert!(records.iter().all(|r| !matches!(r.outcome, Outcome::Running | Outcome::Queued)), "{}", context());
    tally.taken_over += records.iter().filter(|r| r.reason == crate::store::history::texts::TAKEOVER).count() as u64;
    if let Some(applier) = appliers.first() {
        assert_eq!(applier.token, effects[0], "the history names another run: {}", context());
        assert_eq!(applier.applied, 1, "{}", context());
        tally.applied += 1;
        if applier.outcome == Outcome::Abandoned {
            tally.abandoned_applied += 1;
        }
    } else {
        // Nothing applied: the history must say so, never `succeeded`.
        assert!(records.iter().all(|r| r.outcome != Outcome::Succeeded), "succeeded with no effect: {}", context());
        *tally.not_applied.entry(records.last().map_or("none", |r| r.outcome.as_str())).or_default() += 1;
    }
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_ticks_under_random_faults_apply_each_effect_at_most_once_and_say_which() {
    let seed = seed();
    eprintln!("SLUICE_SIM_SEED={seed}");
    let mut rng = Rng(seed);
    let timing_seed = rng.next();
    let timing = Arc::new(move |tick: i64, token: u64| {
        let mut r = Rng(timing_seed ^ (tick as u64).wrapping_mul(31) ^ token);
        (r.millis(0, 500), r.millis(0, 500))
    });
    let sim = Sim {
        world: World::new(PERIOD_MS - 500, &ENV),
        rng: Arc::new(Mutex::new(rng)),
        faults: Arc::new(AtomicBool::new(true)),
        job: Arc::new(Beat::new("*/3 * * * * *", timing)),
    };
    let mut slots: Vec<Slot> = (0..REPLICAS).map(|i| sim.start(&format!("r{i}"))).collect();
    let mut all_down_until = 0;
    let end = TICKS * PERIOD_MS + 500;
    let mut now = PERIOD_MS;
    while now < end + 20 * PERIOD_MS {
        if now >= end {
            // A quiet end: everyone back, no faults, so every dead run is
            // found and recorded by the claims that follow.
            sim.faults.store(false, Ordering::Relaxed);
        }
        sim.disturb(&mut slots, now, &mut all_down_until);
        now += 250;
        sim.world.until(now).await;
    }
    let history = sim.world.history().await;
    let mut tally = Tally::default();
    for k in 1..=TICKS {
        check_tick(&sim.world, &history, k * PERIOD_MS, &mut tally);
    }
    let refused = sim.world.store.refused_writes();
    eprintln!("{TICKS} ticks: {tally:?}; writes refused by the fence: {refused}");
    // The faults really happened: each path the property covers was taken.
    assert!(tally.applied > TICKS as u64 * 8 / 10, "{tally:?}");
    assert!(tally.abandoned_applied > 0, "some holders died after their write: {tally:?}");
    assert!(tally.taken_over > 0, "some ticks were taken over: {tally:?}");
    assert!(refused > 0, "some zombie writes were refused: {tally:?}");
    assert!(tally.not_applied.get("missed").is_some_and(|n| *n > 0), "{tally:?}");
}
