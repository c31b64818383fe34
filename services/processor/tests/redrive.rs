//! `sluice-ops dlq` against the real broker and a real processor: the dead letters of a
//! chain's malformed transactions inspected, redriven as an operator would (a dry run
//! first), each sent back once and processed once (the DEX workload cannot decode them
//! either, so each is dead-lettered again, once, with its reason), and a second redrive
//! of the same selection sends nothing.

mod jepsen;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use jepsen::{Scenario, ops, wait_drained};
use sluice_kafka::whole::{Record, read_whole};

fn read(s: &Scenario, topic: &str) -> Vec<Record> {
    tokio::task::block_in_place(|| read_whole(&s.kafka, topic, Duration::from_secs(60))).expect("read")
}

/// Reads the dead-letter topic until it holds `n` letters, failing after `limit`.
async fn letters(s: &Scenario, n: usize, limit: Duration) -> Vec<Record> {
    let deadline = Instant::now() + limit;
    loop {
        let all = read(s, &s.dlq);
        if all.len() >= n {
            return all;
        }
        assert!(Instant::now() < deadline, "{} of {n} dead letters within {limit:?}", all.len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn coordinates(r: &Record) -> (String, String, String) {
    let h = |name: &str| r.header_text(name).unwrap_or_default();
    (h("sluice.original.topic"), h("sluice.original.partition"), h("sluice.original.offset"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_sends_each_dead_letter_back_once_and_each_is_processed_once() {
    let s = Scenario::new("redrive", &sluice_testkit::redis_url(), 2_000).await;
    let fed = s.feed(3_000).await;
    let processor = s.spawn("a");
    wait_drained(&s, fed.records, Duration::from_secs(120)).await;
    let before = letters(&s, 1, Duration::from_secs(30)).await;
    let n = before.len();

    let inspected = ops(&s, &["dlq", "inspect"]);
    assert_eq!(inspected["summary"]["total"], n, "{inspected:#}");
    assert_eq!(inspected["summary"]["selected"], n);
    let reasons = inspected["summary"]["reasons"].as_array().expect("reasons").clone();
    let counted: u64 = reasons.iter().map(|r| r["count"].as_u64().unwrap_or(0)).sum();
    assert_eq!(counted as usize, n, "every letter under a reason: {reasons:?}");
    assert!(reasons.iter().all(|r| !r["name"].as_str().unwrap_or("").is_empty()), "{reasons:?}");
    let none = ops(&s, &["dlq", "inspect", "--reason", "no-such-reason", "--until", "1970-01-02T00:00:00Z"]);
    assert_eq!(none["summary"]["selected"], 0);

    // A dry run says what it would send and sends nothing.
    let input_before = read(&s, &s.input).len();
    let dry = ops(&s, &["dlq", "redrive"]);
    assert_eq!((dry["dry_run"].as_bool(), dry["to_send"].as_u64()), (Some(true), Some(n as u64)), "{dry:#}");
    assert!(dry["sent"].is_null());
    assert_eq!(read(&s, &s.input).len(), input_before, "a dry run writes nothing");

    let done = ops(&s, &["dlq", "redrive", "--execute", "--batch", "7"]);
    assert_eq!(done["sent"]["records"], n, "{done:#}");
    assert_eq!(done["sent"]["transactions"], n.div_ceil(7));

    // Each copy in the input once, carrying its origin.
    let copies: Vec<Record> =
        read(&s, &s.input).into_iter().filter(|r| r.header("sluice.redrive.origin").is_some()).collect();
    let origins: HashSet<String> = copies.iter().filter_map(|r| r.header_text("sluice.redrive.origin")).collect();
    assert_eq!((copies.len(), origins.len()), (n, n), "each letter sent back once");
    let wanted: HashSet<String> = before.iter().map(|r| format!("{}/{}/{}", s.dlq, r.partition, r.offset)).collect();
    assert_eq!(origins, wanted, "the letters selected, no other");

    // Each copy processed once: dead-lettered again (it is still malformed), with a reason.
    let after = letters(&s, 2 * n, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_settled = read(&s, &s.dlq);
    assert_eq!(after_settled.len(), after.len(), "no letter after the copies' own");
    let copy_at: HashSet<(String, String, String)> =
        copies.iter().map(|r| (s.input.clone(), r.partition.to_string(), r.offset.to_string())).collect();
    let mut again: HashMap<(String, String, String), usize> = HashMap::new();
    for r in after_settled.iter().filter(|r| copy_at.contains(&coordinates(r))) {
        assert!(r.header("sluice.error.kind").is_some_and(|k| !k.is_empty()), "dead-lettered with its reason");
        *again.entry(coordinates(r)).or_default() += 1;
    }
    assert_eq!(again.len(), n, "every copy dead-lettered again");
    assert!(again.values().all(|&c| c == 1), "never twice: {again:?}");

    // A second redrive of the same selection sends nothing: the letters are in the ledger,
    // and their copies' letters are copies failing again.
    let second = ops(&s, &["dlq", "redrive", "--execute"]);
    assert_eq!(second["to_send"], 0, "{second:#}");
    assert_eq!((second["redriven_before"].as_u64(), second["failed_again"].as_u64()), (Some(n as u64), Some(n as u64)));
    assert_eq!(read(&s, &s.input).iter().filter(|r| r.header("sluice.redrive.origin").is_some()).count(), n);
    let inspected = ops(&s, &["dlq", "inspect"]);
    assert_eq!(
        (inspected["redriven_before"].as_u64(), inspected["failed_again"].as_u64()),
        (Some(n as u64), Some(n as u64))
    );
    eprintln!("{n} dead letters; redrive: {:#}", done["sent"]);
    processor.terminate();
}
