use super::*;

fn behavior(json: serde_json::Value) -> Behavior {
    Behavior::from_spec(&serde_json::from_value(json).expect("a behavior"))
}

/// The chart's behavior before its policies were derived.
fn gentle() -> Behavior {
    behavior(serde_json::json!({
        "scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 300, "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}
    }))
}

#[test]
fn the_old_default_lands_on_counts_that_relieve_no_one() {
    let found = useless_landings(&gentle(), 12, 1, 12);
    let up: BTreeSet<i32> = found.iter().filter(|u| u.direction == Direction::Up).map(|u| u.to).collect();
    let down: BTreeSet<i32> = found.iter().filter(|u| u.direction == Direction::Down).map(|u| u.to).collect();
    assert_eq!(up, BTreeSet::from([5, 7, 8, 10]), "+4 from 1, 3, 4, 6; ×2 from 4");
    assert_eq!(down, BTreeSet::from([10]), "-2 from 12");
    assert_eq!(found[0].to_string(), "scaleUp policy Pods 4 per 15 s can land on 5 (from 1)");
    assert_eq!(
        reachable(&gentle(), 12, 1, 12),
        BTreeSet::from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
        "from 5: 9 and 10; from 9: 7 and 11"
    );
}

#[test]
fn the_derived_policies_land_only_on_useful_counts_for_any_partition_count() {
    for partitions in 1..=96u32 {
        for min in [0, 1] {
            let max = partitions as i32;
            let spec = with_derived_policies(&BehaviorSpec::default(), partitions, max);
            let b = Behavior::from_spec(&spec);
            assert_eq!(useless_landings(&b, partitions, min, max), vec![], "{partitions} partitions");
            let useful: BTreeSet<i32> = partitions::useful_counts(partitions).into_iter().map(|n| n as i32).collect();
            assert_eq!(reachable(&b, partitions, min, max), useful, "{partitions} partitions");
        }
    }
}

#[test]
fn derived_policies_fill_only_a_direction_that_gives_none() {
    let given: BehaviorSpec = serde_json::from_value(serde_json::json!({
        "scaleUp": {"tolerance": "0.05"},
        "scaleDown": {"stabilizationWindowSeconds": 600, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
    }))
    .expect("a behavior");
    let spec = with_derived_policies(&given, 12, 12);
    let up = spec.scale_up.expect("scale-up");
    assert_eq!(up.policies, Some(derived_up(12, 12)));
    assert!(up.tolerance.is_some(), "what was given stays");
    let down = spec.scale_down.expect("scale-down");
    assert_eq!((down.stabilization_window_seconds, down.policies.map(|p| p[0].value)), (Some(600), Some(1)));
    assert_eq!(derived_up(12, 16)[0].value, 16, "above the partitions when maxReplicas is allowed there");
}

#[test]
fn a_whole_percentage_counts_its_floating_point_neighbour() {
    use crate::behavior::{down_proposal, up_proposal};
    let twelve = Policy { kind: PolicyType::Percent, value: 12, period_seconds: 15 };
    assert_eq!(limits(&twelve, 25, Direction::Up), vec![28, 29]);
    assert_eq!(up_proposal(&twelve, 25), 29, "25 × 1.12 is just above 28 in float64");
    let eighty = Policy { kind: PolicyType::Percent, value: 80, period_seconds: 15 };
    assert_eq!(limits(&eighty, 10, Direction::Down), vec![2, 1]);
    assert_eq!(down_proposal(&eighty, 10), 1, "10 × 0.2 is just below 2 in float64");
    let half = Policy { kind: PolicyType::Percent, value: 50, period_seconds: 15 };
    assert_eq!((limits(&half, 12, Direction::Down), limits(&half, 3, Direction::Up)), (vec![6], vec![5]));
}

#[test]
fn halving_suits_twelve_partitions_but_not_nine_and_a_disabled_direction_never_lands() {
    let halve = behavior(serde_json::json!({
        "scaleUp": {"selectPolicy": "Disabled"},
        "scaleDown": {"policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}]}
    }));
    assert_eq!(useless_landings(&halve, 12, 1, 12), vec![]);
    let nine = useless_landings(&halve, 9, 1, 9);
    assert!(nine.iter().any(|u| (u.from, u.to) == (9, 4)), "{nine:?}");
}

#[test]
fn counts_above_the_partitions_are_left_to_allow_more_replicas_than_partitions() {
    let b = Behavior::from_spec(&with_derived_policies(&BehaviorSpec::default(), 12, 16));
    assert_eq!(useless_landings(&b, 12, 1, 16), vec![]);
    assert!(reachable(&b, 12, 1, 16).contains(&16));
}
