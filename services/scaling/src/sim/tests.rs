use super::*;
use crate::behavior::BehaviorSpec;
use crate::keda::KafkaTrigger;
use crate::rules::Trigger;
use crate::values::PolicyTrigger;

fn model() -> Model {
    Model {
        per_pod_rate: 1_000.0,
        rebalance_pause_s: 2.0,
        startup_s: 5.0,
        lag_poll_s: 5.0,
        sync_s: 15.0,
        commit_interval_s: 0.0,
        objective_s: 30.0,
    }
}

fn policy(trigger: PolicyTrigger, behavior: Option<BehaviorSpec>) -> Policy {
    Policy {
        name: "test".into(),
        trigger,
        min_replicas: 1,
        max_replicas: 12,
        partitions: 12,
        polling_interval_s: 15,
        cooldown_period_s: 300,
        activation_lag_threshold: 0,
        offset_reset_earliest: true,
        fallback: None,
        behavior,
        per_pod_rate: 1_000.0,
        min_cooldown_s: 15.0,
        lead_s: 0.0,
    }
}

fn kafka(threshold: i64) -> PolicyTrigger {
    PolicyTrigger::Kafka(KafkaTrigger { lag_threshold: threshold, ..KafkaTrigger::default() })
}

fn trace(spec: &str) -> Trace {
    Trace::parse(spec, |_| Err(std::io::Error::other("no files"))).expect("a trace")
}

#[test]
fn a_rate_one_pod_carries_needs_one_pod_and_no_rebalance() {
    let (samples, summary) = run(&policy(kafka(1_000), None), &model(), &trace("synthetic:base=600,length=300"));
    assert_eq!((summary.peak_replicas, summary.rebalances), (1, 0));
    assert!(summary.peak_lag < 700.0, "{summary:?}");
    assert!(samples.iter().all(|s| s.time_lag_s <= 1.0));
    assert!((summary.replica_minutes - 5.0).abs() < 1e-9);
}

#[test]
fn a_burst_scales_up_drains_and_counts_its_rebalances_and_cost() {
    let (samples, summary) =
        run(&policy(kafka(1_000), None), &model(), &trace("synthetic:base=600,burst=6000@60+120,length=900"));
    assert!(summary.peak_replicas >= 6, "{summary:?}");
    assert!(summary.rebalances >= 2, "{summary:?}");
    assert!(summary.final_lag < 1_000.0, "drained by the end: {summary:?}");
    assert!(summary.replica_minutes > 15.0);
    // No consumption while a rebalance pauses the group.
    assert!(samples.iter().filter(|s| s.paused).all(|s| s.consume_rate == 0.0));
    assert!(samples.iter().any(|s| s.paused));
}

#[test]
fn sluice_s_scaler_serves_only_counts_that_relieve_a_pod() {
    // Without rate limits in the way (scale-up 100 % or +12 per 15 s), the HPA follows the
    // scaler, whose counts for 12 partitions are 1, 2, 3, 4, 6, 12.
    let behavior: BehaviorSpec = serde_json::from_value(serde_json::json!({
        "scaleUp": {"policies": [{"type": "Pods", "value": 12, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 60, "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
    }))
    .expect("behavior");
    let p = policy(PolicyTrigger::Sluice(Trigger::TimeLag { target_seconds: 30.0 }), Some(behavior));
    let (samples, summary) = run(&p, &model(), &trace("synthetic:base=600,burst=4500@60+180,length=900"));
    let counts: std::collections::BTreeSet<i32> = samples.iter().map(|s| s.desired).collect();
    assert!(counts.iter().all(|c| [1, 2, 3, 4, 6, 12].contains(c)), "{counts:?}");
    assert!(summary.peak_replicas >= 4, "{summary:?}");
    assert!(summary.peak_time_lag_s < 60.0, "{summary:?}");
}

#[test]
fn time_lag_is_the_oldest_unconsumed_record_s_age() {
    // Nothing consumes (a pod of rate 0): the age grows with the clock.
    let m = Model { per_pod_rate: 0.0, ..model() };
    let (samples, _) = run(&policy(kafka(1_000_000), None), &m, &trace("synthetic:base=100,length=50"));
    assert_eq!(samples[49].time_lag_s, 50.0);
    assert!((samples[49].lag - 5_000.0).abs() < 1e-6);
}

#[test]
fn a_group_that_keeps_up_still_shows_a_commit_interval_of_records_and_kafka_s_trigger_sees_it() {
    // 600 records/s, one pod of 1,000/s: nothing queues, but what KEDA and sluice-lag read is
    // the committed offset, one commit interval behind.
    let committing = Model { commit_interval_s: 1.0, ..model() };
    let at_once = run(&policy(kafka(1_000), None), &model(), &trace("synthetic:base=600,length=120")).1;
    let (samples, summary) = run(&policy(kafka(1_000), None), &committing, &trace("synthetic:base=600,length=120"));
    assert!(at_once.peak_lag < 1.0, "{at_once:?}");
    assert!(samples[5..].iter().all(|s| (s.lag - 600.0).abs() < 1.0 && (s.time_lag_s - 1.0).abs() < 1e-9));
    assert_eq!(summary.peak_replicas, 1, "600 < lagThreshold 1,000: {summary:?}");
    // At lagThreshold 250 the same trail alone asks for ceil(600 / 250) = 3 pods.
    let (_, small) = run(&policy(kafka(250), None), &committing, &trace("synthetic:base=600,length=120"));
    assert_eq!(small.peak_replicas, 3, "{small:?}");
}
