use super::*;

fn settings(trigger: Trigger) -> Settings {
    Settings {
        trigger,
        min_replicas: 1,
        max_replicas: 12,
        per_pod_rate: 500.0,
        rate_bounds_factor: 4.0,
        min_cooldown_ms: 10_000,
        hpa_tolerance: 0.1,
        rate_window_ms: 60_000,
    }
}

fn group(at_ms: i64, members: u32, lags: &[i64]) -> GroupInput {
    GroupInput {
        at_ms,
        consume_rate: None,
        members: Some(members),
        rebalancing: false,
        last_rebalance_pause_ms: None,
        stable_for_ms: Some(600_000),
        partitions: lags
            .iter()
            .map(|&l| PartitionInput {
                lag: Some(l),
                time_lag_ms: Some(if l > 0 { 1_000 } else { 0 }),
                produce_rate: Some(100.0),
                stalled: false,
            })
            .collect(),
    }
}

#[test]
fn offset_lag_is_keda_arithmetic_snapped_to_a_useful_count() {
    let mut s = Scaler::new(settings(Trigger::OffsetLag { lag_threshold: 1000 }));
    let d = s.decide(&group(0, 1, &[500; 10].iter().chain(&[0, 0]).copied().collect::<Vec<_>>()));
    assert_eq!(
        (d.raw, d.replicas, d.rule),
        (Some(5.0), Some(4), Rule::OffsetLag),
        "5 pods relieve no one that 4 do not"
    );
    assert_eq!(d.metric, Some(4.0));
}

#[test]
fn stalled_partitions_are_left_out_and_reported() {
    let mut s = Scaler::new(settings(Trigger::OffsetLag { lag_threshold: 1000 }));
    let mut g = group(0, 2, &[0; 12]);
    g.partitions[3] = PartitionInput { lag: Some(90_000), stalled: true, ..g.partitions[3] };
    let d = s.decide(&g);
    assert_eq!((d.replicas, d.lag, d.stalled_partitions, d.stalled_lag), (Some(1), Some(0), 1, 90_000));
}

#[test]
fn an_unknown_input_is_no_decision_not_zero() {
    let mut s = Scaler::new(settings(Trigger::DrainTime { target_seconds: 60.0 }));
    let mut g = group(0, 2, &[10; 12]);
    g.partitions[0].lag = None;
    let d = s.decide(&g);
    assert_eq!((d.replicas, d.metric, d.rule), (None, None, Rule::Unknown));
    let mut g = group(0, 2, &[10; 12]);
    g.partitions[5].produce_rate = None;
    assert_eq!(s.decide(&g).replicas, None, "drainTime needs the produce rate");
    let mut off = Scaler::new(settings(Trigger::OffsetLag { lag_threshold: 1000 }));
    assert_eq!(off.decide(&g).replicas, Some(1), "offsetLag does not");
}

#[test]
fn drain_time_is_produce_plus_backlog_over_the_target_per_pod() {
    let mut s = Scaler::new(settings(Trigger::DrainTime { target_seconds: 60.0 }));
    // 12 × 100/s produced, 48,000 behind: (1,200 + 800) / 500 = 4 pods.
    let d = s.decide(&group(0, 1, &[4_000; 12]));
    assert_eq!((d.raw, d.replicas), (Some(4.0), Some(4)));
}

#[test]
fn time_lag_keeps_up_when_young_and_drains_within_half_the_target_when_old() {
    let mut s = Scaler::new(settings(Trigger::TimeLag { target_seconds: 30.0 }));
    let d = s.decide(&group(0, 3, &[10; 12]));
    assert_eq!((d.rule, d.replicas), (Rule::TimeLagKeepUp, Some(3)), "1,200/s ÷ 500 = 2.4");
    let mut s = Scaler::new(settings(Trigger::TimeLag { target_seconds: 30.0 }));
    let mut g = group(0, 3, &[2_000; 12]);
    g.partitions[0].time_lag_ms = Some(20_000);
    let d = s.decide(&g);
    // (1,200 + 24,000 / 15) / 500 = 5.6 → 6.
    assert_eq!((d.rule, d.replicas), (Rule::TimeLagDrain, Some(6)));
}

#[test]
fn rebalances_and_the_cooldown_after_a_step_hold_the_last_decision() {
    let mut s = Scaler::new(settings(Trigger::OffsetLag { lag_threshold: 1000 }));
    assert_eq!(s.decide(&group(0, 1, &[500; 12])).replicas, Some(6));
    let mut g = group(5_000, 4, &[0; 12]);
    g.rebalancing = true;
    let d = s.decide(&g);
    assert_eq!((d.rule, d.replicas), (Rule::Rebalancing, Some(6)));
    // Stable at 6 members from 20 s, the last pause 15 s: held until 35 s.
    let mut g = group(20_000, 6, &[0; 12]);
    g.last_rebalance_pause_ms = Some(15_000);
    assert_eq!(s.decide(&g).rule, Rule::Cooldown);
    let mut g = group(34_999, 6, &[0; 12]);
    g.last_rebalance_pause_ms = Some(15_000);
    assert_eq!(s.decide(&g).rule, Rule::Cooldown);
    let mut g = group(35_000, 6, &[0; 12]);
    g.last_rebalance_pause_ms = Some(15_000);
    assert_eq!((s.decide(&g).rule, s.last()), (Rule::OffsetLag, Some(1)));
}

#[test]
fn a_step_inside_the_hpa_tolerance_is_served_past_it() {
    let mut s = Scaler::new(settings(Trigger::OffsetLag { lag_threshold: 1000 }));
    // 11 members (a rate limit left them there), 12 wanted: 12/11 is within 10 %.
    let d = s.decide(&group(0, 11, &[5_000; 12]));
    assert_eq!(d.replicas, Some(12));
    assert_eq!(d.metric, Some(13.0), "the HPA clamps 13 to max 12; 12 alone would be held by its tolerance");
    let mut s = Scaler::new(Settings { max_replicas: 48, ..settings(Trigger::OffsetLag { lag_threshold: 1000 }) });
    // 48 partitions, 15 members, 16 wanted (16/15 within 10 %): served as 24, the next useful count.
    let d = s.decide(&group(0, 15, &[333; 48]));
    assert_eq!((d.replicas, d.metric), (Some(16), Some(24.0)));
    // max 20 of 48 partitions: 24 is past max and 17 relieves no one; 16 is served as is.
    let mut s = Scaler::new(Settings { max_replicas: 20, ..settings(Trigger::OffsetLag { lag_threshold: 1000 }) });
    let d = s.decide(&group(0, 15, &[333; 48]));
    assert_eq!((d.replicas, d.metric), (Some(16), Some(16.0)));
    // A hold still serves past the tolerance.
    let mut s = Scaler::new(settings(Trigger::OffsetLag { lag_threshold: 1000 }));
    s.decide(&group(0, 11, &[5_000; 12]));
    let mut g = group(5_000, 11, &[5_000; 12]);
    g.rebalancing = true;
    let d = s.decide(&g);
    assert_eq!((d.rule, d.metric), (Rule::Rebalancing, Some(13.0)));
}

#[test]
fn the_per_pod_rate_is_learned_only_when_every_member_has_work_and_stays_within_bounds() {
    let mut s = Scaler::new(settings(Trigger::DrainTime { target_seconds: 60.0 }));
    let mut g = group(0, 4, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 90_000, 90_000]);
    g.consume_rate = Some(1_600.0);
    s.decide(&g);
    assert_eq!(
        s.per_pod_rate(),
        500.0,
        "a big backlog on two partitions of four members' twelve: not every member busy"
    );
    // Steady traffic: every partition trails its commits a little, the pods are mostly idle.
    let mut g = group(5_000, 4, &[50; 12]);
    g.consume_rate = Some(1_200.0);
    s.decide(&g);
    assert_eq!(s.per_pod_rate(), 500.0, "600 records behind is half a second of work: not a capacity sample");
    let mut g = group(10_000, 4, &[2_000; 12]);
    g.consume_rate = Some(4_000.0);
    g.stable_for_ms = Some(30_000);
    s.decide(&g);
    assert_eq!(s.per_pod_rate(), 500.0, "members changed within the rate window: its average is mixed");
    g.stable_for_ms = Some(60_000);
    s.decide(&g);
    assert_eq!(s.per_pod_rate(), 1_000.0, "24,000 behind, 6 s of work at 4,000/s: a sample");
    g.consume_rate = Some(100_000.0);
    g.partitions.iter_mut().for_each(|p| p.lag = Some(50_000));
    s.decide(&g);
    assert_eq!(s.per_pod_rate(), 1_000.0 * 0.7 + 2_000.0 * 0.3, "a sample is bounded at 4 × the setting");
    // Not behind, but members consumed more than believed: a floor.
    let mut s = Scaler::new(settings(Trigger::DrainTime { target_seconds: 60.0 }));
    let mut g = group(0, 2, &[10; 12]);
    g.consume_rate = Some(1_600.0);
    s.decide(&g);
    assert_eq!(s.per_pod_rate(), 800.0, "two members consumed 800/s each");
}
