//! `sluice-ops offsets` against the real broker and processor: the committed offsets shown
//! with the state generation the processors record in each commit; a reset refused while the
//! group has a member; a reset to a time, done with the processors stopped, lands on the
//! first record at or after it in every partition, keeps each partition's generation, and
//! the processor started again consumes exactly the records after it, on the same Redis
//! state (the generation it finds is the one it expects).

mod jepsen;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jepsen::{Scenario, admin_body, ops, ops_output, wait_drained};
use sluice_kafka::whole::read_whole;

/// (partition → (committed, metadata)) of an `offsets show`.
fn committed(shown: &serde_json::Value) -> BTreeMap<i64, (i64, String)> {
    shown["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            let at = p["committed"].as_i64().unwrap_or(-1);
            (p["partition"].as_i64().unwrap_or(-1), (at, p["metadata"].as_str().unwrap_or("").to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_to_a_time_resumes_there_and_keeps_the_generation() {
    let s = Scenario::new("offsets", &sluice_testkit::redis_url(), 2_000).await;
    let fed = s.feed(3_000).await;
    let processor = s.spawn("a");
    wait_drained(&s, fed.records, Duration::from_secs(120)).await;

    let shown = ops(&s, &["offsets", "show"]);
    assert!(shown["members"].as_u64() >= Some(1), "{shown:#}");
    let before = committed(&shown);
    assert_eq!(before.len(), 12);
    for p in shown["partitions"].as_array().expect("partitions") {
        assert_eq!((p["committed"].as_i64(), p["lag"].as_i64()), (p["log_end"].as_i64(), Some(0)), "{p}");
    }
    let generation = before[&0].1.clone();
    assert!(generation.starts_with("generation="), "the processors' commits carry their generation: {generation:?}");
    assert!(before.values().all(|(_, m)| *m == generation), "{before:?}");

    // Refused while the group has a member: it would commit over the reset.
    let refused = ops_output(&s, &["offsets", "reset", "--to-earliest", "--execute"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("members") && stderr.contains("--force"), "{stderr}");
    let dry = ops(&s, &["offsets", "reset", "--to-earliest"]);
    assert!(dry["refused"].as_str().is_some_and(|r| r.contains("members")), "{dry:#}");
    assert_eq!(committed(&ops(&s, &["offsets", "show"])), before, "neither changed anything");

    processor.terminate();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ops(&s, &["offsets", "show"])["members"].as_u64() != Some(0) {
        assert!(Instant::now() < deadline, "the group empty within 60 s of the processor's stop");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A time inside the run: the timestamp of the middle record of partition 0.
    let input = tokio::task::block_in_place(|| read_whole(&s.kafka, &s.input, Duration::from_secs(60))).expect("input");
    let first: Vec<_> = input.iter().filter(|r| r.partition == 0).collect();
    let at = first[first.len() / 2].timestamp_ms.expect("a timestamp");
    let mut want: BTreeMap<i64, i64> = BTreeMap::new();
    for (p, (end, _)) in &before {
        let first_at =
            input.iter().filter(|r| i64::from(r.partition) == *p && r.timestamp_ms >= Some(at)).map(|r| r.offset).min();
        want.insert(*p, first_at.unwrap_or(*end));
    }
    let reset = ops(&s, &["offsets", "reset", "--to-time", &at.to_string(), "--execute"]);
    assert_eq!(reset["dry_run"], false, "{reset:#}");
    let again: i64 = before.iter().map(|(p, (end, _))| end - want[p]).sum();
    assert!(again > 0, "the reset moves back");
    let consequences = reset["consequences"].to_string();
    assert!(consequences.contains(&format!("{again} records will be consumed again")), "{consequences}");
    let after = committed(&ops(&s, &["offsets", "show"]));
    for (p, (at, metadata)) in &after {
        assert_eq!(
            (*at, metadata.as_str()),
            (want[p], generation.as_str()),
            "partition {p}: the first record at the time, the generation kept"
        );
    }

    // Started again, the processor resumes there, on the same state: it consumes exactly the
    // records after the reset and stays ready (the generation it expects is the store's).
    let processor = s.spawn("b");
    wait_drained(&s, fed.records, Duration::from_secs(120)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let finished = loop {
        let text = admin_body(processor.admin_port, "/metrics");
        let n = sluice_service::process::metric(&text, "sluice_processor_messages_total", "");
        if n as i64 >= again || Instant::now() > deadline {
            break n as i64;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(finished, again, "exactly the records after the reset consumed");
    assert_eq!(processor.admin_status("/ready"), 200, "ready on the same state");
    eprintln!("reset to {at}: {again} records consumed again; moves {:#}", reset["moves"]);
    processor.terminate();
}
