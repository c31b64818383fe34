use super::*;
use crate::behavior::{BehaviorSpec, Policy, PolicyType, RulesSpec, Tolerance};

fn spec(behavior: Option<BehaviorSpec>) -> HpaSpec {
    HpaSpec {
        min_replicas: 1,
        max_replicas: 12,
        target: Target::AverageValue(1_000_000),
        behavior: behavior.as_ref().map(Behavior::from_spec),
    }
}

fn lag(records: i64) -> Option<i64> {
    Some(records * 1000)
}

#[test]
fn without_behavior_scale_up_is_at_most_double_or_four() {
    let mut h = Hpa::new(spec(None), ControllerFlags::default());
    let r = h.sync(15_000, 1, lag(20_000));
    assert_eq!((r.recommended, r.desired, r.limit), (20, 4, Limit::Rate));
    let r = h.sync(30_000, 4, lag(20_000));
    assert_eq!((r.desired, r.limit), (8, Limit::Rate));
    let r = h.sync(45_000, 8, lag(20_000));
    assert_eq!((r.desired, r.limit), (12, Limit::Bounds));
}

#[test]
fn without_behavior_scale_down_waits_for_the_downscale_window() {
    let mut h = Hpa::new(spec(None), ControllerFlags::default());
    assert_eq!(h.sync(15_000, 1, lag(6_000)).desired, 4);
    assert_eq!(h.sync(30_000, 4, lag(6_000)).desired, 6);
    let r = h.sync(45_000, 6, lag(0));
    assert_eq!((r.recommended, r.desired, r.limit), (0, 6, Limit::Stabilized));
    // The recommendation of 6 at 30 s leaves the window after 330 s (strictly older).
    assert_eq!(h.sync(330_000, 6, lag(0)).desired, 6);
    assert_eq!(h.sync(345_000, 6, lag(0)).desired, 1);
}

#[test]
fn the_tolerance_holds_a_ratio_near_one() {
    let mut h = Hpa::new(spec(None), ControllerFlags::default());
    assert_eq!(h.sync(15_000, 1, lag(3_000)).desired, 3);
    let r = h.sync(30_000, 3, lag(3_300));
    assert_eq!((r.desired, r.limit), (3, Limit::Tolerance), "1.1 is within 10 %");
    assert_eq!(h.sync(45_000, 3, lag(3_301)).desired, 4, "just over 1.1 scales");
}

#[test]
fn the_chart_policy_adds_at_most_four_pods_or_doubles_per_fifteen_seconds_and_removes_two_per_minute() {
    let behavior = BehaviorSpec {
        scale_up: Some(RulesSpec {
            stabilization_window_seconds: Some(0),
            tolerance: Some(Tolerance::parse("0.05").expect("tolerance")),
            ..RulesSpec::default()
        }),
        scale_down: Some(RulesSpec {
            stabilization_window_seconds: Some(60),
            policies: Some(vec![Policy { kind: PolicyType::Pods, value: 2, period_seconds: 60 }]),
            ..RulesSpec::default()
        }),
    };
    let mut h = Hpa::new(spec(Some(behavior)), ControllerFlags::default());
    assert_eq!(h.sync(15_000, 1, lag(12_000)).desired, 5, "max(1 + 4, 2 × 1)");
    assert_eq!(h.sync(30_000, 5, lag(12_000)).desired, 10, "max(5 + 4, 2 × 5)");
    assert_eq!(h.sync(45_000, 10, lag(12_000)).desired, 12);
    // Down: held for the 60 s window, then 2 pods per 60 s.
    assert_eq!(h.sync(60_000, 12, lag(1_000)).desired, 12);
    let r = h.sync(105_000, 12, lag(1_000));
    assert_eq!(
        (r.desired, r.limit),
        (10, Limit::Rate),
        "the 12 recommended at 45 s is out of the window (strictly newer only)"
    );
    assert_eq!(h.sync(120_000, 10, lag(1_000)).desired, 10, "2 pods already removed in this minute");
    assert_eq!(h.sync(150_000, 10, lag(1_000)).desired, 10);
    assert_eq!(h.sync(165_000, 10, lag(1_000)).desired, 8, "the removal at 105 s is not strictly newer than 60 s ago");
}

#[test]
fn bounds_apply_before_the_metric_is_read() {
    let mut h = Hpa::new(spec(None), ControllerFlags::default());
    let r = h.sync(15_000, 20, None);
    assert_eq!((r.desired, r.limit), (12, Limit::Bounds));
    let r = h.sync(30_000, 12, None);
    assert_eq!((r.desired, r.limit), (12, Limit::NoMetric), "an unreadable metric changes nothing");
}
