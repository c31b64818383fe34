//! The worker's timers under tokio's paused time, with a fake handler (no
//! outputs, so the producer is never asked): a backoff waits its delay, a
//! stalled record pauses the partition and reports not ready, and a drain
//! commits at its deadline what finished, not what still runs.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use sluice_kafka::KafkaConfig;

use super::*;
use crate::metrics::Identity;

/// Fails each listed offset transiently that many times, sleeps on
/// `slow` for a minute, and handles everything else at once.
#[derive(Default)]
struct Fake {
    failures: Mutex<HashMap<i64, u32>>,
    slow: Option<i64>,
    handled: AtomicUsize,
}

impl Handler for Fake {
    async fn handle(&self, record: &Record) -> Result<Handled, HandleError> {
        if self.slow == Some(record.offset) {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        if let Some(n) = self.failures.lock().unwrap().get_mut(&record.offset)
            && *n > 0
        {
            *n -= 1;
            return Err(HandleError::transient("redis", "down"));
        }
        self.handled.fetch_add(1, Ordering::Relaxed);
        Ok(Handled { outcome: "ok", event_time_ms: None, publish: Vec::new() })
    }
}

fn shared(handler: Fake, retry: RetryPolicy) -> Arc<Shared<Fake>> {
    let metrics = RuntimeMetrics::new(&Identity { service: "test", metric_prefix: "test", workload: "test" }, "g");
    Arc::new(Shared {
        handler: Arc::new(handler),
        permits: Arc::new(Semaphore::new(8)),
        kafka: Some(KafkaSink::new(&KafkaConfig::new("127.0.0.1:9"), metrics.clone()).unwrap()),
        txn: None,
        dead_letters: DeadLetters { topic: Arc::from("dlq"), group: "g".into() },
        retry,
        dead_book: Default::default(),
        stamp: Arc::new(|_: &rdkafka::TopicPartitionList| {}),
        committed: None,
        budget: Budget { max_records: 100, max_bytes: 1 << 20, resume_fraction: 0.5 },
        metrics,
        health: Arc::new(Health::default()),
    })
}

fn record(offset: i64, key: &str) -> Record {
    Record {
        topic: Arc::from("in"),
        partition: 0,
        offset,
        key: Some(key.as_bytes().to_vec()),
        payload: Some(vec![0; 8]),
        timestamp_ms: None,
        redriven: false,
    }
}

fn fails(offset: i64, times: u32) -> Fake {
    Fake { failures: Mutex::new(HashMap::from([(offset, times)])), ..Fake::default() }
}

async fn position_reaches(slot: &Slot, position: i64) {
    while slot.position() != Some(position) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const SECOND: RetryPolicy =
    RetryPolicy { initial: Duration::from_secs(1), max: Duration::from_secs(1), attempts_before_stall: 10 };

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_after_its_backoff_while_other_keys_go_on() {
    let shared = shared(fails(0, 1), SECOND);
    let handle = Worker::spawn(&tokio::runtime::Handle::current(), 0, 1, shared.clone());
    let started = tokio::time::Instant::now();
    handle.tx.send(WorkerMsg::Records(vec![record(0, "a"), record(1, "a"), record(2, "b")])).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(shared.handler.handled.load(Ordering::Relaxed), 1, "b is done; a waits out its backoff");
    assert_eq!(handle.slot.position(), Some(0));
    position_reaches(&handle.slot, 3).await;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(500) && waited < Duration::from_millis(1100), "{waited:?}");
    assert_eq!(handle.slot.finished(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_record_past_the_retry_cap_pauses_its_partition_until_it_gets_through() {
    let retry = RetryPolicy { attempts_before_stall: 3, ..SECOND };
    let shared = shared(fails(0, 3), retry);
    let handle = Worker::spawn(&tokio::runtime::Handle::current(), 0, 1, shared.clone());
    handle.tx.send(WorkerMsg::Records(vec![record(0, "a")])).unwrap();
    while shared.health.stalled.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(handle.slot.wants_pause(), "stalled: paused and not ready");
    position_reaches(&handle.slot, 1).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(shared.health.stalled.load(Ordering::Relaxed), 0);
    assert!(!handle.slot.wants_pause());
}

#[tokio::test(start_paused = true)]
async fn a_drain_commits_at_its_deadline_what_finished_not_what_still_runs() {
    let shared = shared(Fake { slow: Some(1), ..Fake::default() }, SECOND);
    let handle = Worker::spawn(&tokio::runtime::Handle::current(), 0, 1, shared);
    handle.tx.send(WorkerMsg::Records(vec![record(0, "a"), record(1, "b"), record(2, "c")])).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (reply, replies) = std::sync::mpsc::sync_channel(1);
    let started = tokio::time::Instant::now();
    // On tokio's clock (paused), as the consumer thread's would be on the real one.
    let deadline = started.into_std() + Duration::from_secs(2);
    handle.tx.send(WorkerMsg::Drain { deadline, reply }).unwrap();
    let answer = loop {
        if let Ok(answer) = replies.try_recv() {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(answer, (0, Some(1)), "1 runs on: the next owner processes it (and 2) again");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(3), "{waited:?}");
}
