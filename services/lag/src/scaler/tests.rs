use super::*;
use crate::model::lag::Log;
use crate::model::status::Verdict;
use crate::picture::PartitionPicture;
use sluice_scaling::rules::Rule;

fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn partition(i: i32, lag: Option<Lag>, status: Status) -> PartitionPicture {
    PartitionPicture {
        topic: "t".into(),
        partition: i,
        owner: None,
        log: Some(Log { start: 0, end: 10_000, stable: 10_000 }),
        lag,
        time_lag_ms: Some(2_000),
        oldest_timestamp_ms: None,
        timestamp_type: None,
        produce_rate: Some(50.0),
        consume_rate: Some(40.0),
        velocity: None,
        drain_seconds: None,
        retention_headroom_ms: None,
        status: Verdict { status, reason: String::new() },
        window_start: None,
        window_end: None,
    }
}

fn picture(at_ms: i64, partitions: Vec<PartitionPicture>) -> Picture {
    let group: GroupPicture = serde_json::from_value(serde_json::json!({
        "group": "g", "state": "Stable", "protocol": "range", "members": 2,
        "status": {"status": "ok", "reason": ""}, "lag": null, "time_lag_ms": null, "rebalances": 0,
        "last_rebalance_pause_ms": null, "recent_rebalances": [], "error": null, "partitions": []
    }))
    .expect("a group picture");
    Picture { at_ms, groups: vec![GroupPicture { partitions, ..group }], ..Picture::default() }
}

#[test]
fn metadata_is_read_and_mistakes_are_named() {
    let spec = TriggerSpec::from_metadata(&meta(&[("group", "g"), ("scalerAddress", "x:1")])).expect("defaults");
    assert_eq!(spec.settings.trigger, Trigger::OffsetLag { lag_threshold: 1000 });
    assert_eq!(spec.metric_name(), "sluice-g-offset-lag");
    let spec = TriggerSpec::from_metadata(&meta(&[("group", "G_1"), ("trigger", "timeLag"), ("targetSeconds", "30")]))
        .expect("timeLag");
    assert_eq!(
        (spec.settings.trigger, spec.metric_name()),
        (Trigger::TimeLag { target_seconds: 30.0 }, "sluice-g-1-time-lag".into())
    );
    for (bad, named) in [
        (meta(&[("trigger", "offsetLag")]), "group"),
        (meta(&[("group", "g"), ("trigger", "drainTime")]), "targetSeconds"),
        (meta(&[("group", "g"), ("lagTreshold", "5")]), "lagTreshold"),
        (meta(&[("group", "g"), ("lagThreshold", "many")]), "lagThreshold"),
        (meta(&[("group", "g"), ("trigger", "cpu")]), "trigger"),
        (meta(&[("group", "g"), ("minReplicas", "3"), ("maxReplicas", "2")]), "maxReplicas"),
        (meta(&[("group", "g"), ("offsetResetPolicy", "none")]), "offsetResetPolicy"),
    ] {
        let e = TriggerSpec::from_metadata(&bad).expect_err("refused");
        assert_eq!(e.key, named, "{e} should name {named}");
        assert!(e.to_string().starts_with(&format!("trigger metadata {named}: ")), "{e}");
    }
}

#[test]
fn the_picture_maps_to_the_scaler_input_with_explicit_states() {
    let p = picture(
        1_000,
        vec![
            partition(0, Some(Lag::Behind { records: 300, lost: 0, committed: 9_700 }), Status::Ok),
            PartitionPicture { time_lag_ms: None, ..partition(1, Some(Lag::Uncommitted), Status::Ok) },
            partition(2, Some(Lag::Behind { records: 800, lost: 0, committed: 9_200 }), Status::Stall),
        ],
    );
    let g = &p.groups[0];
    let input = group_input(g, 1_000, true).expect("readable");
    let lags: Vec<Option<i64>> = input.partitions.iter().map(|p| p.lag).collect();
    assert_eq!(lags, vec![Some(300), Some(10_000), Some(800)], "uncommitted with earliest: the whole log");
    assert_eq!(input.partitions.iter().filter(|p| p.stalled).count(), 1);
    assert_eq!((input.consume_rate, input.members), (Some(120.0), Some(2)));
    assert_eq!(input.partitions[1].time_lag_ms, None, "its age is not read: unknown, not zero");
    let latest = group_input(g, 1_000, false).expect("readable");
    assert_eq!(
        (latest.partitions[1].lag, latest.partitions[1].time_lag_ms),
        (Some(0), Some(0)),
        "uncommitted with latest: nothing"
    );
    let mut empty = partition(3, Some(Lag::Uncommitted), Status::Ok);
    empty.log = Some(Log { start: 40, end: 40, stable: 40 });
    let p = picture(1_000, vec![empty]);
    let input = group_input(&p.groups[0], 1_000, true).expect("readable");
    assert_eq!(
        (input.partitions[0].lag, input.partitions[0].time_lag_ms),
        (Some(0), Some(0)),
        "an empty partition never committed: nothing behind"
    );
    let unread = picture(1_000, vec![partition(0, None, Status::Err)]);
    let input = group_input(&unread.groups[0], 1_000, true).expect("a group");
    assert_eq!(input.partitions[0].lag, None, "unknown stays unknown");
}

#[test]
fn one_decision_per_poll_and_a_stale_picture_is_unknown() {
    let scalers = Scalers::new(60_000);
    let spec = TriggerSpec::from_metadata(&meta(&[("group", "g"), ("lagThreshold", "100")])).expect("spec");
    let lag = |r| Some(Lag::Behind { records: r, lost: 0, committed: 0 });
    let p = picture(10_000, (0..4).map(|i| partition(i, lag(100), Status::Ok)).collect());
    let d = scalers.decide("ns/so", &spec, &p, 10_500, 5_000);
    assert_eq!((d.replicas, d.rule), (Some(4), Rule::OffsetLag));
    scalers.decide("ns/so", &spec, &p, 11_000, 5_000);
    assert_eq!(scalers.snapshot()[0].decisions.len(), 1, "the same poll is not decided twice");
    let d = scalers.decide("ns/so", &spec, &picture(20_000, p.groups[0].partitions.clone()), 30_000, 5_000);
    assert_eq!((d.replicas, d.rule), (None, Rule::Unknown));
    assert!(d.reason.contains("10000 ms old"), "{}", d.reason);
    let other = TriggerSpec { group: "nope".into(), ..spec };
    let d = scalers.decide("ns/other", &other, &p, 10_500, 5_000);
    assert!(d.reason.contains("not watched"), "{}", d.reason);
}
