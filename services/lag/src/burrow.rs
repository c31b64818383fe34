//! Burrow's conventions, for its users (with `BURROW_CLUSTER` set): its status codes (Burrow
//! v1.9's `StatusConstant`) and the shape of its HTTP API's consumer status
//! (`/v3/kafka/{cluster}/consumer/{group}/lag` and `/status`), from sluice-lag's picture.
//!
//! Sluice's statuses map to Burrow's: a partition's `ok`, `warn`, `stop`, `stall`, `rewind`
//! are Burrow's OK 1, WARN 2, STOP 4, STALL 5, REWIND 6; a group is the worst of its
//! partitions with STOP, STALL and REWIND counted as ERR 3, as Burrow's evaluator does.
//! Sluice's `err` (a partition or group that cannot be read) has no Burrow status: Burrow
//! calls a stopped or stuck group ERR, and an unreadable one is neither, so it gets no code
//! (and no series) rather than a made-up one.
//!
//! Burrow's `start` and `end` are the first and last commits of its window; here they are
//! the first and last committed offsets sluice-lag saw within the status window, with the
//! poll's time as both `timestamp` and `observedAt` (sluice-lag does not read commit times).

use serde_json::{Value, json};

use crate::model::status::Status;
use crate::picture::{GroupPicture, PartitionPicture, Seen};

/// Burrow's code of a partition's status; `None` for Sluice's `err`.
pub fn partition_code(status: Status) -> Option<u8> {
    match status {
        Status::Ok => Some(1),
        Status::Warn => Some(2),
        Status::Stop => Some(4),
        Status::Stall => Some(5),
        Status::Rewind => Some(6),
        Status::Err => None,
    }
}

/// Burrow's code of a group's status: the worst of its partitions', STOP, STALL and REWIND
/// counted as ERR; `None` when the group, or any partition, cannot be read.
pub fn group_code(g: &GroupPicture) -> Option<u8> {
    if g.status.status == Status::Err {
        return None;
    }
    let mut worst = 1;
    for p in &g.partitions {
        worst = worst.max(partition_code(p.status.status)?.min(3));
    }
    Some(worst)
}

/// The name Burrow gives a code.
fn name(code: Option<u8>) -> &'static str {
    match code {
        Some(1) => "OK",
        Some(2) => "WARN",
        Some(3) => "ERR",
        Some(4) => "STOP",
        Some(5) => "STALL",
        Some(6) => "REWIND",
        _ => "NOTFOUND",
    }
}

fn seen(s: Option<Seen>) -> Value {
    s.map_or(Value::Null, |s| json!({ "offset": s.offset, "timestamp": s.at_ms, "observedAt": s.at_ms, "lag": s.lag }))
}

fn partition(p: &PartitionPicture) -> Value {
    let (client_id, owner) = match p.owner.as_deref().and_then(|o| o.split_once('/')) {
        Some((client, host)) => (client, host),
        None => ("", ""),
    };
    json!({
        "topic": p.topic,
        "partition": p.partition,
        "owner": owner,
        "client_id": client_id,
        "status": name(partition_code(p.status.status)),
        "start": seen(p.window_start),
        "end": seen(p.window_end),
        "current_lag": p.lag.and_then(|l| l.records()).unwrap_or(0).max(0),
        "complete": if p.window_end.is_some() { 1.0 } else { 0.0 },
    })
}

/// Burrow's `ConsumerGroupStatus` of a group: every partition (`all`, its `/lag`), or only
/// those not OK (its `/status`); `maxlag` and `totallag` over every partition either way.
pub fn consumer_status(cluster: &str, g: &GroupPicture, all: bool) -> Value {
    let lag = |p: &PartitionPicture| p.lag.and_then(|l| l.records()).unwrap_or(0).max(0);
    // Burrow's: the first partition with the most lag (so the first one when none has any).
    let max = g.partitions.iter().fold(None, |best: Option<&PartitionPicture>, p| match best {
        Some(b) if lag(p) <= lag(b) => Some(b),
        _ => Some(p),
    });
    let shown: Vec<Value> =
        g.partitions.iter().filter(|p| all || p.status.status != Status::Ok).map(partition).collect();
    let complete = g.partitions.iter().filter(|p| p.window_end.is_some()).count();
    json!({
        "cluster": cluster,
        "group": g.group,
        "status": name(group_code(g)),
        "complete": if g.partitions.is_empty() { 0.0 } else { complete as f64 / g.partitions.len() as f64 },
        "partitions": shown,
        "partition_count": g.partitions.len(),
        "maxlag": max.map_or(Value::Null, partition),
        "totallag": g.partitions.iter().map(lag).sum::<i64>(),
    })
}

/// Burrow's reply around a status: `error`, `message`, `status`, `request`.
pub fn reply(status: Value, url: &str, host: &str) -> Value {
    json!({ "error": false, "message": "consumer status returned", "status": status, "request": { "url": url, "host": host } })
}

/// Burrow's reply for a cluster or group it does not know (with HTTP 404).
pub fn not_found(url: &str, host: &str) -> Value {
    json!({ "error": true, "message": "cluster or consumer not found", "request": { "url": url, "host": host } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::status::Verdict;

    fn part(n: i32, status: Status, lag: i64) -> PartitionPicture {
        let mut p: PartitionPicture = serde_json::from_value(json!({
            "topic": "t", "partition": n, "owner": "rdkafka/10.0.0.7", "log": null, "lag": null,
            "time_lag_ms": null, "oldest_timestamp_ms": null, "timestamp_type": null, "produce_rate": null,
            "consume_rate": null, "velocity": null, "drain_seconds": null, "retention_headroom_ms": null,
            "status": {"status": "ok", "reason": ""}
        }))
        .expect("a partition");
        p.status = Verdict { status, reason: String::new() };
        p.lag = Some(crate::model::lag::Lag::Behind { records: lag, lost: 0, committed: 100 });
        p.window_end = Some(Seen { offset: 100, at_ms: 5_000, lag: Some(lag) });
        p
    }

    fn group(partitions: Vec<PartitionPicture>) -> GroupPicture {
        let g: GroupPicture = serde_json::from_value(json!({
            "group": "g", "state": "Stable", "protocol": "range", "members": 1,
            "status": {"status": "ok", "reason": ""}, "lag": null, "time_lag_ms": null, "rebalances": 0,
            "last_rebalance_pause_ms": null, "recent_rebalances": [], "error": null, "partitions": []
        }))
        .expect("a group");
        GroupPicture { partitions, ..g }
    }

    #[test]
    fn a_stopped_or_stuck_group_is_err_and_an_unreadable_one_has_no_code() {
        assert_eq!(group_code(&group(vec![part(0, Status::Ok, 0), part(1, Status::Warn, 5)])), Some(2));
        assert_eq!(group_code(&group(vec![part(0, Status::Stall, 9), part(1, Status::Warn, 5)])), Some(3));
        assert_eq!(group_code(&group(vec![part(0, Status::Stop, 9)])), Some(3));
        assert_eq!(group_code(&group(vec![part(0, Status::Err, 0)])), None);
        assert_eq!(partition_code(Status::Rewind), Some(6));
    }

    #[test]
    fn the_status_reply_has_burrow_s_shape() {
        let g = group(vec![part(0, Status::Ok, 0), part(1, Status::Stall, 40), part(2, Status::Ok, 7)]);
        let all = consumer_status("prod", &g, true);
        assert_eq!(
            (all["status"].as_str(), all["totallag"].as_i64(), all["partition_count"].as_u64()),
            (Some("ERR"), Some(47), Some(3))
        );
        assert_eq!(all["maxlag"]["partition"], 1);
        assert_eq!(all["maxlag"]["status"], "STALL");
        assert_eq!(
            (all["maxlag"]["owner"].as_str(), all["maxlag"]["client_id"].as_str()),
            (Some("10.0.0.7"), Some("rdkafka"))
        );
        assert_eq!(all["partitions"].as_array().map(Vec::len), Some(3));
        assert_eq!(all["partitions"][0]["end"]["offset"], 100);
        assert_eq!(all["partitions"][0]["start"], Value::Null);
        let status = consumer_status("prod", &g, false);
        assert_eq!(status["partitions"].as_array().map(Vec::len), Some(1), "only what is not OK");
        let r = reply(status, "/v3/kafka/prod/consumer/g/status", "lag-0");
        assert_eq!((r["error"].as_bool(), r["request"]["host"].as_str()), (Some(false), Some("lag-0")));
    }
}
