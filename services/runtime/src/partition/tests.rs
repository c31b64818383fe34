//! The partition's rules as units, and as properties over random
//! interleavings of records, unit results, acknowledgements (some failed),
//! backoffs, transactions and drains: no key's record starts or is released
//! out of offset order, the position never passes a record that is not
//! complete, and in exactly-once mode no output is released outside the
//! transaction that commits its record's offset.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use proptest::prelude::*;
use rdkafka::error::RDKafkaErrorCode;

use super::*;
use crate::handler::Publish;

fn rules(batching: Batching, exactly_once: bool) -> Rules {
    Rules {
        batching,
        exactly_once,
        budget: Budget { max_records: 1_000, max_bytes: 1 << 20, resume_fraction: 0.5 },
        attempts_before_stall: 3,
        exhausted: Exhausted::PausePartition,
        dead_letters: DeadLetters { topic: Arc::from("dlq"), group: "g".into() },
    }
}

/// A record whose payload names its offset, so every output (the handler's
/// and a dead letter) says which record it came from.
fn record(offset: i64, key: Option<&str>) -> Record {
    Record {
        topic: Arc::from("in"),
        partition: 0,
        offset,
        key: key.map(|k| k.as_bytes().to_vec()),
        payload: Some(offset.to_be_bytes().to_vec()),
        timestamp_ms: None,
        redriven: false,
    }
}

fn source(output: &Output) -> i64 {
    i64::from_be_bytes(output.payload[..8].try_into().unwrap())
}

/// The handler's result for `r`: `outputs` records published.
fn ok(r: &Record, outputs: usize) -> Result<Handled, HandleError> {
    let publish = (0..outputs)
        .map(|_| Publish {
            topic: Arc::from("out"),
            key: r.key.clone().unwrap_or_default(),
            payload: r.payload.clone().unwrap(),
        })
        .collect();
    Ok(Handled { outcome: "ok", event_time_ms: None, publish })
}

fn transient() -> Result<Handled, HandleError> {
    Err(HandleError::transient("redis", "down"))
}

fn sends(actions: &[Action]) -> Vec<(u64, Vec<i64>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { id, outputs } => Some((*id, outputs.iter().map(source).collect())),
            _ => None,
        })
        .collect()
}

fn offsets(records: &[Record]) -> Vec<i64> {
    records.iter().map(|r| r.offset).collect()
}

#[test]
fn a_keys_next_record_starts_when_its_unit_is_through_and_other_keys_go_on() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(0, Some("a")), record(1, Some("a")), record(2, Some("b"))]);
    let first = p.start_unit();
    let other = p.start_unit();
    assert_eq!((offsets(&first), offsets(&other)), (vec![0], vec![2]));
    assert!(p.start_unit().is_empty(), "a's second record waits for its first");
    let r = first[0].clone();
    p.unit_done(first, vec![ok(&r, 1)]);
    assert_eq!(offsets(&p.start_unit()), vec![1], "enqueued outputs are enough to start the next");
}

#[test]
fn the_position_waits_for_the_acknowledgement_of_a_records_outputs() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(5, Some("a")), record(6, Some("b"))]);
    let (u0, u1) = (p.start_unit(), p.start_unit());
    let (r0, r1) = (u0[0].clone(), u1[0].clone());
    let sent = sends(&p.unit_done(u1, vec![ok(&r1, 0)]));
    assert!(sent.is_empty(), "no outputs: complete at once");
    assert_eq!(p.position(), Some(5), "6 is complete, 5 is not");
    let sent = sends(&p.unit_done(u0, vec![ok(&r0, 2)]));
    assert_eq!(sent, vec![(1, vec![5, 5])]);
    assert_eq!(p.position(), Some(5), "sent, not acknowledged");
    assert!(p.acknowledged(1, Vec::new()).is_empty());
    assert_eq!(p.position(), Some(7));
    assert_eq!(p.take_finished(), 2);
}

#[test]
fn a_transient_failure_retries_the_key_from_the_failed_record_while_others_go_on() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(0, Some("a")), record(1, Some("a")), record(2, Some("b"))]);
    let u = p.start_unit();
    let actions = p.unit_done(u, vec![transient()]);
    let Some(Action::Backoff { records, attempts: 1 }) =
        actions.into_iter().find(|a| matches!(a, Action::Backoff { .. }))
    else {
        panic!("no backoff")
    };
    assert_eq!(offsets(&p.start_unit()), vec![2], "b goes on; a waits out its backoff");
    assert!(p.start_unit().is_empty());
    p.retry_due(records);
    assert_eq!(offsets(&p.start_unit()), vec![0], "the failed record first");
}

#[test]
fn the_retry_cap_stalls_and_pauses_the_partition_until_the_record_gets_through() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(0, Some("a"))]);
    for attempt in 1..=3 {
        let u = p.start_unit();
        let actions = p.unit_done(u, vec![transient()]);
        let stalled = actions.iter().any(|a| matches!(a, Action::Failed { stalled: true, .. }));
        assert_eq!(stalled, attempt == 3, "attempt {attempt}");
        assert_eq!(p.paused(), attempt == 3);
        let Some(Action::Backoff { records, .. }) = actions.into_iter().find(|a| matches!(a, Action::Backoff { .. }))
        else {
            panic!()
        };
        p.retry_due(records);
    }
    let u = p.start_unit();
    let r = u[0].clone();
    let actions = p.unit_done(u, vec![ok(&r, 0)]);
    assert!(actions.iter().any(|a| matches!(a, Action::Unstalled { offset: 0 })));
    assert!(!p.paused());
    assert_eq!(p.stalled(), 0);
}

#[test]
fn a_failed_delivery_is_sent_again_and_completes_only_when_acknowledged() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(0, Some("a"))]);
    let u = p.start_unit();
    let r = u[0].clone();
    let out = match p.unit_done(u, vec![ok(&r, 1)]).pop() {
        Some(Action::Send { outputs, .. }) => outputs,
        other => panic!("{other:?}"),
    };
    let timed_out = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
    let failed: Vec<(Output, KafkaError)> = out.into_iter().map(|o| (o, timed_out.clone())).collect();
    let actions = p.acknowledged(1, failed);
    let Some(Action::Resend { outputs, records, attempts: 1 }) = actions.into_iter().last() else { panic!() };
    assert_eq!(p.position(), Some(0));
    assert!(!p.drained());
    let Action::Send { id, .. } = p.resend_due(outputs, records, 1) else { panic!() };
    p.acknowledged(id, Vec::new());
    assert_eq!(p.position(), Some(1));
    assert!(p.drained());
}

#[test]
fn an_invalid_record_goes_to_the_dead_letter_topic_and_completes_with_its_delivery() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(0, Some("a"))]);
    let u = p.start_unit();
    let actions = p.unit_done(u, vec![Err(HandleError::invalid("decode", "bad"))]);
    assert!(actions.iter().any(|a| matches!(a, Action::Done { dead_letter: Some("decode"), .. })));
    let Some(Action::Send { id, outputs }) = actions.into_iter().last() else { panic!() };
    assert_eq!(&*outputs[0].topic, "dlq");
    assert_eq!(p.position(), Some(0));
    p.acknowledged(id, Vec::new());
    assert_eq!(p.position(), Some(1));
}

#[test]
fn exactly_once_releases_in_offset_order_only_from_the_lowest_unfinished_record() {
    let mut p = Partition::new(rules(Batching::PerRecord, true));
    p.receive(vec![record(0, Some("a")), record(1, Some("b")), record(2, Some("c"))]);
    let (u0, u1, u2) = (p.start_unit(), p.start_unit(), p.start_unit());
    let (r0, r1, r2) = (u0[0].clone(), u1[0].clone(), u2[0].clone());
    assert!(sends(&p.unit_done(u2, vec![ok(&r2, 1)])).is_empty(), "staged, never sent on its own");
    assert!(sends(&p.unit_done(u1, vec![ok(&r1, 1)])).is_empty());
    assert!(!p.releasable() && p.release().is_none(), "0 is not done");
    p.unit_done(u0, vec![ok(&r0, 1)]);
    let release = p.release().unwrap();
    assert_eq!(release.outputs.iter().map(source).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!((release.position, p.position()), (Some(3), Some(3)));
}

#[test]
fn the_budget_pauses_past_its_bytes_and_resumes_below_the_fraction() {
    let mut r = rules(Batching::PerRecord, false);
    r.budget.max_bytes = 4 * 9; // four records of 9 bytes (key and payload)
    let mut p = Partition::new(r);
    p.receive((0..3).map(|o| record(o, Some("k"))).collect());
    assert!(!p.paused());
    p.receive(vec![record(3, Some("k"))]);
    assert!(p.paused(), "36 bytes of 36");
    for expected_paused in [true, false] {
        let u = p.start_unit();
        let r = u[0].clone();
        p.unit_done(u, vec![ok(&r, 0)]);
        assert_eq!(p.paused(), expected_paused, "hysteresis: resumes at 18 bytes, not at 27");
    }
}

#[test]
fn a_batch_drain_waits_for_the_running_unit_not_for_records_never_started() {
    let mut p = Partition::new(rules(Batching::Batch { max_records: 2 }, false));
    p.receive((0..4).map(|o| record(o, None)).collect());
    let u = p.start_unit();
    assert_eq!(offsets(&u), vec![0, 1]);
    assert!(!p.can_start(), "one batch at a time");
    assert!(!p.drained());
    let rs = u.clone();
    let sent = sends(&p.unit_done(u, rs.iter().map(|r| ok(r, 1)).collect()));
    assert!(!p.drained(), "its outputs are not acknowledged");
    p.acknowledged(sent[0].0, Vec::new());
    assert!(p.drained());
    assert_eq!(p.position(), Some(2), "what was never started is the next owner's");
}

#[test]
fn a_per_record_drain_finishes_everything_received() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(0, Some("a")), record(1, Some("b"))]);
    let u = p.start_unit();
    let r = u[0].clone();
    p.unit_done(u, vec![ok(&r, 0)]);
    assert!(!p.drained(), "1 is not done");
}

#[test]
fn a_record_out_of_offset_order_is_refused_and_counted_as_finished() {
    let mut p = Partition::new(rules(Batching::PerRecord, false));
    p.receive(vec![record(5, None)]);
    let actions = p.receive(vec![record(3, None)]);
    assert!(matches!(actions.as_slice(), [Action::OutOfOrder(_)]));
    assert_eq!((p.take_finished(), p.incomplete()), (1, 1));
}

fn dead_letter_key(batching: Batching) -> Partition {
    Partition::new(Rules { exhausted: Exhausted::DeadLetterKey, ..rules(batching, false) })
}

/// Fails `unit` transiently until its retries run out (3 attempts): the
/// actions of the last failure.
fn exhaust(p: &mut Partition, mut unit: Vec<Record>) -> Vec<Action> {
    for _ in 0..3 {
        let mut actions = p.unit_done(unit.clone(), unit.iter().map(|_| transient()).collect());
        let Some(i) = actions.iter().position(|a| matches!(a, Action::Backoff { .. })) else { return actions };
        if p.stalled() > 0 {
            return actions;
        }
        let Action::Backoff { records, .. } = actions.swap_remove(i) else { unreachable!() };
        p.retry_due(records);
        unit = p.start_unit();
    }
    panic!("retries never ran out")
}

fn kinds(actions: &[Action]) -> Vec<(i64, Option<&'static str>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Done { offset, dead_letter, .. } => Some((*offset, *dead_letter)),
            _ => None,
        })
        .collect()
}

#[test]
fn exhausted_retries_dead_letter_the_key_in_order_and_a_redriven_record_lifts_it() {
    let mut p = dead_letter_key(Batching::PerRecord);
    p.receive(vec![record(0, Some("a")), record(1, Some("a")), record(2, Some("b")), record(3, Some("a"))]);
    let (a, b) = (p.start_unit(), p.start_unit());
    assert_eq!((offsets(&a), offsets(&b)), (vec![0], vec![2]));
    let mut groups = vec![sends(&p.unit_done(b.clone(), vec![ok(&b[0], 1)]))[0].0];
    let actions = exhaust(&mut p, a);
    assert!(
        actions.iter().any(|a| matches!(a, Action::KeyDeadLettered { offset: 0, records: 3, full: false, .. })),
        "{actions:?}"
    );
    let letters = sends(&actions);
    assert_eq!(letters.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>(), [vec![0, 1, 3]], "in offset order");
    assert_eq!(
        kinds(&actions),
        [(0, Some("retry_exhausted")), (1, Some("retry_exhausted")), (3, Some("retry_exhausted"))]
    );
    groups.push(letters[0].0);
    assert_eq!((p.stalled(), p.paused()), (0, false), "no stall: the partition moves on");
    assert_eq!(p.take_dead_keys().as_deref(), Some("61@0-"));

    // Later records of the dead key go straight to the dead-letter topic, unhandled.
    let actions = p.receive(vec![record(4, Some("a")), record(5, Some("b"))]);
    assert_eq!(kinds(&actions), [(4, Some("retry_exhausted"))]);
    groups.push(sends(&actions)[0].0);
    assert_eq!(offsets(&p.start_unit()), [5], "b goes on");

    // A record of the key redriven from the dead-letter topic lifts it.
    let redriven = Record { redriven: true, ..record(6, Some("a")) };
    assert!(kinds(&p.receive(vec![redriven, record(7, Some("a"))])).is_empty());
    p.unit_done(vec![record(5, Some("b"))], vec![ok(&record(5, Some("b")), 0)]);
    for expected in [6, 7] {
        let u = p.start_unit();
        assert_eq!(offsets(&u), [expected], "handled again, in order");
        p.unit_done(u.clone(), vec![ok(&u[0], 0)]);
    }
    assert_eq!(p.take_dead_keys().as_deref(), Some("61@0-6"), "kept while a replay may reach it");
    for id in groups {
        p.acknowledged(id, Vec::new());
    }
    assert_eq!(p.position(), Some(8));
}

#[test]
fn a_batch_handlers_dead_key_takes_its_queued_records_along() {
    let mut p = dead_letter_key(Batching::Batch { max_records: 2 });
    p.receive((0..5).map(|o| record(o, Some(if o % 2 == 0 { "a" } else { "b" }))).collect());
    let u = p.start_unit();
    assert_eq!(offsets(&u), [0, 1]);
    let results = vec![transient(), ok(&u[1], 0)];
    let Some(Action::Backoff { records, .. }) =
        p.unit_done(u, results).into_iter().find(|a| matches!(a, Action::Backoff { .. }))
    else {
        panic!("a backoff")
    };
    assert_eq!(offsets(&p.start_unit()), [3], "a is held, b goes on");
    p.unit_done(vec![record(3, Some("b"))], vec![ok(&record(3, Some("b")), 0)]);
    p.retry_due(records);
    let u = p.start_unit();
    let actions = exhaust(&mut p, u);
    assert_eq!(kinds(&actions).iter().map(|k| k.0).collect::<Vec<_>>(), [0, 2, 4]);
    assert!(p.start_unit().is_empty(), "nothing of a is left to handle");
}

#[test]
fn a_new_owner_decides_as_the_last_one_from_the_dead_keys_it_restores() {
    let mut p = dead_letter_key(Batching::PerRecord);
    p.restore(DeadKeys::decode("61@2-").unwrap());
    let actions = p.receive(vec![record(1, Some("a")), record(2, Some("a")), record(3, Some("b"))]);
    assert_eq!(kinds(&actions), [(2, Some("retry_exhausted"))], "1 came before the exhaustion");
    assert_eq!(offsets(&p.start_unit()), [1]);
    assert_eq!(offsets(&p.start_unit()), [3]);
}

#[test]
fn with_no_room_left_for_a_dead_key_the_partition_stalls_instead() {
    let mut full = DeadKeys::default();
    let mut n = 0;
    while full.has_room(1) {
        full.kill(format!("{n:040}").as_bytes(), n);
        n += 1;
    }
    let mut p = dead_letter_key(Batching::PerRecord);
    p.restore(full);
    p.receive(vec![record(1_000_000, Some("z"))]);
    let u = p.start_unit();
    let actions = exhaust(&mut p, u);
    assert!(actions.iter().any(|a| matches!(a, Action::KeyDeadLettered { full: true, .. })), "{actions:?}");
    assert!(actions.iter().any(|a| matches!(a, Action::Backoff { .. })), "it keeps retrying");
    assert_eq!((p.stalled(), p.paused()), (1, true));
}

/// A resend the driver holds: outputs, the records they complete, attempts.
type Resend = (Vec<Output>, Vec<(i64, usize)>, u32);

/// What the property driver can do next; `n` picks among the candidates.
#[derive(Debug, Clone)]
enum Step {
    Receive(usize),
    Start,
    /// Finish a running unit; each record's result from `results`
    /// (0: no output, 1–2: outputs, 3: invalid, 4: transient).
    Finish {
        n: usize,
        results: Vec<u8>,
    },
    Ack {
        n: usize,
        fail: bool,
    },
    Backoff(usize),
    Resend(usize),
    Release,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1usize..4).prop_map(Step::Receive),
        Just(Step::Start),
        Just(Step::Start),
        (any::<usize>(), prop::collection::vec(0u8..5, 4)).prop_map(|(n, results)| Step::Finish { n, results }),
        (any::<usize>(), prop::bool::weighted(0.2)).prop_map(|(n, fail)| Step::Ack { n, fail }),
        any::<usize>().prop_map(Step::Backoff),
        any::<usize>().prop_map(Step::Resend),
        Just(Step::Release),
    ]
}

/// A partition driven as the worker drives it, with everything it was told
/// and everything it did recorded, checked after every step.
struct Driver {
    p: Partition,
    exactly_once: bool,
    input: Vec<Record>,
    received: usize,
    running: Vec<Vec<Record>>,
    groups: BTreeMap<u64, Vec<Output>>,
    backoffs: Vec<Vec<Record>>,
    resends: Vec<Resend>,
    done: BTreeSet<i64>,
    /// Per key, the last record whose outputs were first sent or released.
    released: HashMap<Option<Vec<u8>>, i64>,
    /// Exactly-once: the position the last release reached.
    committed: i64,
    /// Keys dead-lettered since their retries ran out: none of their later
    /// records may start.
    dead: BTreeSet<Vec<u8>>,
}

impl Driver {
    fn new(batching: Batching, exactly_once: bool, exhausted: Exhausted, keys: &[Option<u8>]) -> Self {
        let names = ["a", "b", "c"];
        let input = keys.iter().enumerate().map(|(o, k)| record(o as i64, k.map(|k| names[k as usize]))).collect();
        Self {
            p: Partition::new(Rules { exhausted, ..rules(batching, exactly_once) }),
            exactly_once,
            input,
            received: 0,
            running: Vec::new(),
            groups: BTreeMap::new(),
            backoffs: Vec::new(),
            resends: Vec::new(),
            done: BTreeSet::new(),
            released: HashMap::new(),
            committed: 0,
            dead: BTreeSet::new(),
        }
    }

    fn key(&self, offset: i64) -> Option<Vec<u8>> {
        self.input[offset as usize].key.clone()
    }

    fn step(&mut self, step: Step) -> Result<(), TestCaseError> {
        match step {
            Step::Receive(n) => {
                let to = (self.received + n).min(self.input.len());
                let batch = self.input[self.received..to].to_vec();
                self.received = to;
                let actions = self.p.receive(batch);
                self.apply(actions, false)?;
            }
            Step::Start => self.start()?,
            Step::Finish { n, results } if !self.running.is_empty() => {
                let unit = self.running.remove(n % self.running.len());
                let results = unit
                    .iter()
                    .zip(results.iter().cycle())
                    .map(|(r, k)| match k {
                        0..=2 => ok(r, *k as usize),
                        3 => Err(HandleError::invalid("decode", "bad")),
                        _ => transient(),
                    })
                    .collect();
                let actions = self.p.unit_done(unit, results);
                self.apply(actions, false)?;
            }
            Step::Ack { n, fail } if !self.groups.is_empty() => {
                let id = *self.groups.keys().nth(n % self.groups.len()).unwrap();
                let outputs = self.groups.remove(&id).unwrap();
                let failed = if fail {
                    outputs
                        .into_iter()
                        .map(|o| (o, KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut)))
                        .collect()
                } else {
                    vec![]
                };
                let actions = self.p.acknowledged(id, failed);
                self.apply(actions, false)?;
            }
            Step::Backoff(n) if !self.backoffs.is_empty() => {
                let records = self.backoffs.remove(n % self.backoffs.len());
                self.p.retry_due(records);
            }
            Step::Resend(n) if !self.resends.is_empty() => {
                let (outputs, records, attempts) = self.resends.remove(n % self.resends.len());
                let action = self.p.resend_due(outputs, records, attempts);
                self.apply(vec![action], true)?;
            }
            Step::Release => self.release()?,
            _ => {}
        }
        self.check()
    }

    /// Starts a unit: each of its records' earlier records of the same key
    /// are done, or earlier in this unit.
    fn start(&mut self) -> Result<(), TestCaseError> {
        let unit = self.p.start_unit();
        for (i, r) in unit.iter().enumerate() {
            if r.key.is_none() {
                continue;
            }
            for earlier in (0..r.offset).filter(|o| self.key(*o) == r.key) {
                let in_unit = unit[..i].iter().any(|u| u.offset == earlier);
                prop_assert!(
                    self.done.contains(&earlier) || in_unit,
                    "record {} started before {earlier} of its key was done",
                    r.offset
                );
            }
            prop_assert!(
                r.key.as_ref().is_none_or(|k| !self.dead.contains(k)),
                "record {} of a dead-lettered key started",
                r.offset
            );
            prop_assert!(
                !self.running.iter().flatten().any(|u| u.key == r.key),
                "two units of one key at once ({})",
                r.offset
            );
            prop_assert!(
                !self.backoffs.iter().flatten().any(|b| b.key == r.key),
                "record {} started while its key waits out a backoff",
                r.offset
            );
        }
        if !unit.is_empty() {
            self.running.push(unit);
        }
        Ok(())
    }

    fn release(&mut self) -> Result<(), TestCaseError> {
        let Some(release) = self.p.release() else { return Ok(()) };
        prop_assert!(self.exactly_once, "a release outside exactly-once mode");
        let position = release.position.unwrap();
        for o in release.outputs.iter().map(source) {
            prop_assert!(
                o >= self.committed && o < position,
                "output of {o} released with [{}, {position})",
                self.committed
            );
        }
        for o in self.committed..position {
            prop_assert!(self.done.contains(&o), "position {position} released past {o}, not done");
        }
        self.first_release(release.outputs.iter().map(source))?;
        self.committed = position;
        Ok(())
    }

    /// A key's records' outputs first go out in offset order.
    fn first_release(&mut self, sources: impl Iterator<Item = i64>) -> Result<(), TestCaseError> {
        for o in sources {
            let key = self.key(o);
            let last = self.released.get(&key).copied().unwrap_or(-1);
            prop_assert!(o >= last, "record {o}'s outputs released after {last}'s of the same key");
            if key.is_some() {
                self.released.insert(key, o);
            }
        }
        Ok(())
    }

    fn apply(&mut self, actions: Vec<Action>, resend: bool) -> Result<(), TestCaseError> {
        for action in actions {
            match action {
                Action::Send { id, outputs } => {
                    prop_assert!(!self.exactly_once, "outputs sent outside a transaction");
                    if !resend {
                        self.first_release(outputs.iter().map(source))?;
                    }
                    self.groups.insert(id, outputs);
                }
                Action::Backoff { records, .. } => self.backoffs.push(records),
                Action::Resend { outputs, records, attempts } => self.resends.push((outputs, records, attempts)),
                Action::Done { offset, .. } => {
                    prop_assert!(self.done.insert(offset), "{offset} done twice");
                }
                Action::KeyDeadLettered { offset, full: false, .. } => {
                    self.dead.extend(self.key(offset));
                }
                Action::Failed { .. } | Action::Unstalled { .. } | Action::OutOfOrder(_) => {}
                Action::KeyDeadLettered { .. } => {}
            }
        }
        Ok(())
    }

    /// The position is below every record that is not done or whose
    /// outputs are not acknowledged (exactly-once: not released).
    fn check(&self) -> Result<(), TestCaseError> {
        let Some(position) = self.p.position() else { return Ok(()) };
        if self.exactly_once {
            prop_assert_eq!(position, self.committed, "exactly-once: only releases move the position");
            return Ok(());
        }
        let pending: BTreeSet<i64> = self
            .groups
            .values()
            .flatten()
            .map(source)
            .chain(self.resends.iter().flat_map(|(_, records, _)| records.iter().map(|r| r.0)))
            .collect();
        for o in 0..position {
            prop_assert!(self.done.contains(&o), "position {position} passed {o}, not done");
            prop_assert!(!pending.contains(&o), "position {position} passed {o}, not acknowledged");
        }
        Ok(())
    }

    /// Everything received, every handler succeeding and every delivery
    /// acknowledged: the partition ends complete.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        self.step(Step::Receive(self.input.len()))?;
        for _ in 0..10 * self.input.len() + 10 {
            while let Some(records) = self.backoffs.pop() {
                self.p.retry_due(records);
            }
            while let Some((o, r, a)) = self.resends.pop() {
                let action = self.p.resend_due(o, r, a);
                self.apply(vec![action], true)?;
            }
            self.start()?;
            while !self.running.is_empty() {
                self.step(Step::Finish { n: 0, results: vec![1] })?;
            }
            while !self.groups.is_empty() {
                self.step(Step::Ack { n: 0, fail: false })?;
            }
            self.release()?;
            self.check()?;
        }
        prop_assert_eq!(self.p.incomplete(), 0);
        prop_assert_eq!(self.p.position(), Some(self.input.len() as i64));
        prop_assert!(self.p.drained());
        Ok(())
    }
}

fn batching() -> impl Strategy<Value = Batching> {
    prop_oneof![Just(Batching::PerRecord), (1usize..4).prop_map(|max_records| Batching::Batch { max_records })]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_keeps_key_order_and_commits_only_what_is_complete(
        batching in batching(),
        exactly_once in any::<bool>(),
        dead_letter_key in any::<bool>(),
        keys in prop::collection::vec(prop::option::weighted(0.85, 0u8..3), 1..24),
        steps in prop::collection::vec(step(), 0..120),
    ) {
        let exhausted = if dead_letter_key { Exhausted::DeadLetterKey } else { Exhausted::PausePartition };
        let mut d = Driver::new(batching, exactly_once, exhausted, &keys);
        for s in steps {
            d.step(s)?;
        }
        d.finish()?;
    }
}
