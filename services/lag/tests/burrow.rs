//! Burrow's conventions on the real broker (`BURROW_CLUSTER` set): a group whose consumers
//! stopped with lag is ERR with its partitions STOP, in Burrow v1.9.5's own series (names,
//! label names and codes from `contract/burrow-v1.9.5.json`) and in its consumer status API's
//! JSON shape, with Burrow's 404 for a cluster or group it does not know.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Lag, commit, produce, topic};
use serde_json::Value;
use sluice_lag::model::status::Status;
use sluice_service::process::http_get;

fn contract() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/contract/burrow-v1.9.5.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("contract")).expect("json")
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

fn wanted(c: &Value, name: &str) -> BTreeSet<String> {
    c[name].as_array().expect(name).iter().map(|k| k.as_str().expect("key").to_string()).collect()
}

/// The series of `family` in an exposition: each one's labels and value.
fn series(text: &str, family: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let pair = regex::Regex::new(r#"([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)""#).expect("regex");
    text.lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .map(|l| {
            let (head, value, _) = sluice_service::process::sample(l).expect("a sample");
            let labels = pair.captures_iter(head).map(|c| (c[1].to_string(), c[2].to_string())).collect();
            (labels, value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_group_is_err_in_burrow_s_series_and_api() {
    let topic = topic("burrow", 2).await;
    let group = sluice_testkit::unique("burrow-group");
    produce(&topic, 0, 20, |_| sluice_core::clock::now_ms()).await;
    produce(&topic, 1, 30, |_| sluice_core::clock::now_ms()).await;
    commit(&group, &topic, &[(0, 15), (1, 10)]);
    let env = [("BURROW_CLUSTER", "local-test"), ("STALL_AFTER_MS", "2000")];
    let lag = Lag::start(&group, &[&group], &env).await;
    lag.until(&group, Duration::from_secs(30), "stopped on both partitions", |g| {
        g.partitions.len() == 2 && g.partitions.iter().all(|p| p.status.status == Status::Stop)
    })
    .await;

    let c = contract();
    let code = |name: &str| c["codes"][name].as_f64().expect("a code");
    let text = lag.metrics();
    let families: BTreeMap<String, Vec<String>> = serde_json::from_value(c["families"].clone()).expect("families");
    for (family, labels) in &families {
        let found = series(&text, family);
        assert!(!found.is_empty(), "{family}: not exported");
        let want: BTreeSet<&str> = labels.iter().map(String::as_str).collect();
        for (l, _) in &found {
            assert_eq!(l.keys().map(String::as_str).collect::<BTreeSet<_>>(), want, "{family}: label names");
        }
    }
    let of = |family: &str, partition: Option<&str>| -> Option<f64> {
        series(&text, family)
            .into_iter()
            .find(|(l, _)| {
                l.get("consumer_group") == Some(&group)
                    && l["cluster"] == "local-test"
                    && partition.is_none_or(|p| l.get("partition").map(String::as_str) == Some(p))
            })
            .map(|(_, v)| v)
    };
    assert_eq!(of("burrow_kafka_consumer_status", None), Some(code("ERR")), "stopped partitions make the group ERR");
    assert_eq!(of("burrow_kafka_topic_partition_status", Some("1")), Some(code("STOP")));
    assert_eq!(of("burrow_kafka_consumer_lag_total", None), Some(25.0));
    assert_eq!(of("burrow_kafka_consumer_partition_lag", Some("1")), Some(20.0));
    assert_eq!(of("burrow_kafka_consumer_current_offset", Some("0")), Some(15.0));

    // The consumer status API: Burrow's keys at every level, its values.
    let get = |path: &str| -> (u16, Value) {
        let (code, body) = http_get(lag.port, path).expect("an answer");
        (code, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")))
    };
    let (status, all) = get(&format!("/v3/kafka/local-test/consumer/{group}/lag"));
    assert_eq!(status, 200);
    assert_eq!(keys(&all), wanted(&c, "reply_keys"));
    assert_eq!(keys(&all["request"]), wanted(&c, "request_keys"));
    let s = &all["status"];
    assert_eq!(keys(s), wanted(&c, "status_keys"));
    assert_eq!(
        (s["status"].as_str(), s["totallag"].as_i64(), s["partition_count"].as_i64()),
        (Some("ERR"), Some(25), Some(2))
    );
    assert_eq!(s["maxlag"]["partition"], 1, "{s}");
    for p in s["partitions"].as_array().expect("partitions") {
        assert_eq!(keys(p), wanted(&c, "partition_keys"));
        assert_eq!(p["status"], "STOP");
        assert_eq!(keys(&p["end"]), wanted(&c, "offset_keys"));
    }
    let (_, only) = get(&format!("/v3/kafka/local-test/consumer/{group}/status"));
    assert_eq!(only["status"]["partitions"].as_array().map(Vec::len), Some(2), "both are not OK");
    for path in [format!("/v3/kafka/other/consumer/{group}/lag"), "/v3/kafka/local-test/consumer/nobody/lag".into()] {
        let (status, body) = get(&path);
        assert_eq!((status, keys(&body)), (404, wanted(&c, "not_found_keys")), "{path}");
        assert_eq!(body["error"], true);
    }
}
