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
        lead_ms: 0,
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
        blocked: None,
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
fn a_blocked_group_holds_never_scaling_into_the_outage_and_scales_as_before_once_it_clears() {
    let mut s = Scaler::new(settings(Trigger::TimeLag { target_seconds: 30.0 }));
    let busy = |at_ms, members| {
        let mut g = group(at_ms, members, &[0; 12]);
        for p in &mut g.partitions {
            (p.lag, p.time_lag_ms, p.produce_rate) = (Some(400), Some(2_000), Some(250.0));
        }
        g
    };
    assert_eq!(s.decide(&busy(0, 2)).replicas, Some(6), "3,000 records/s at 500 each");
    assert_eq!(s.decide(&busy(30_000, 6)).rule, Rule::Cooldown, "the six join; a cooldown starts");
    // Every member stands still: the lag grows past what 12 pods would be asked for.
    let mut outage = busy(60_000, 6);
    for p in &mut outage.partitions {
        (p.lag, p.time_lag_ms, p.stalled) = (Some(90_000), Some(40_000), true);
    }
    outage.blocked = Some("every member (6) stands still".into());
    let d = s.decide(&outage);
    assert_eq!((d.rule, d.replicas, d.metric), (Rule::Blocked, Some(6), Some(6.0)), "{d:?}");
    assert!(d.reason.starts_with("no count can help: every member (6) stands still; holding at 6"), "{}", d.reason);
    assert_eq!(d.stalled_lag, 12 * 90_000, "reported, not scaled on");
    // Started during the outage, with no decision of its own: the members it sees.
    let mut fresh = Scaler::new(settings(Trigger::TimeLag { target_seconds: 30.0 }));
    assert_eq!(fresh.decide(&outage).replicas, Some(6));
    // A commit or two of in-flight work right after: still held, for the cooldown.
    let mut trickle = busy(65_000, 6);
    for p in &mut trickle.partitions {
        (p.lag, p.time_lag_ms) = (Some(90_000), Some(45_000));
    }
    let d = s.decide(&trickle);
    assert_eq!((d.rule, d.replicas), (Rule::Blocked, Some(6)), "{d:?}");
    // The outage over: the backlog is consumed again and the rule decides as before.
    let mut after = busy(120_000, 6);
    for p in &mut after.partitions {
        (p.lag, p.time_lag_ms) = (Some(90_000), Some(45_000));
    }
    let d = s.decide(&after);
    assert_eq!((d.rule, d.replicas), (Rule::TimeLagDrain, Some(12)), "{d:?}");
}

#[test]
fn a_hot_partition_gets_one_pod_and_the_rest_what_they_need() {
    // 500 records/s per pod, a 30 s objective (drain within 15 s). One partition holds
    // 60,000 records and takes 300 records/s: one pod drains it in 300 s, whatever the count.
    let mut s = Scaler::new(settings(Trigger::TimeLag { target_seconds: 30.0 }));
    let mut g = group(0, 2, &[100; 12]);
    for p in &mut g.partitions {
        p.produce_rate = Some(50.0);
    }
    g.partitions[7] =
        PartitionInput { lag: Some(60_000), time_lag_ms: Some(90_000), produce_rate: Some(300.0), stalled: false };
    let d = s.decide(&g);
    // The plain rule: (850 + 61,100 / 15) / 500 = 9.8 → 6. Each partition at most one pod:
    // 11 × (50 + 100 / 15) / 500 = 1.25, plus one.
    assert_eq!(d.rule, Rule::HotPartition, "{d:?}");
    assert!((d.raw.expect("raw") - 2.2467).abs() < 1e-3, "{d:?}");
    assert_eq!(d.replicas, Some(3));
    assert!((d.hot_share.expect("share") - 60_000.0 / 61_100.0).abs() < 1e-9);
    assert_eq!(d.best_drain_s, Some(300.0));
    assert!(
        d.reason.contains("one partition holds 98% of the lag and one processor drains it in 300 s at best"),
        "{}",
        d.reason
    );
    // Spread over every partition, the same lag is drained by more pods: no cap.
    let mut even = Scaler::new(settings(Trigger::TimeLag { target_seconds: 30.0 }));
    let mut spread = group(0, 2, &[5_092; 12]);
    for p in &mut spread.partitions {
        (p.produce_rate, p.time_lag_ms) = (Some(70.0), Some(90_000));
    }
    let d = even.decide(&spread);
    assert_eq!((d.rule, d.replicas), (Rule::TimeLagDrain, Some(6)), "10 relieve no one 6 do not: {d:?}");
    // KEDA's arithmetic is left as KEDA's.
    let mut keda = Scaler::new(settings(Trigger::OffsetLag { lag_threshold: 1000 }));
    assert_eq!(keda.decide(&g).rule, Rule::OffsetLag);
}

#[test]
fn scaling_ahead_takes_one_step_toward_what_the_rise_will_need_and_nothing_on_a_flat_rate() {
    let ahead = Settings { lead_ms: 30_000, ..settings(Trigger::TimeLag { target_seconds: 30.0 }) };
    // Polls every 5 s; the produce rate climbs 20 records/s each second, lag stays small.
    let poll = |t_s: i64, produce: f64| {
        let mut g = group(t_s * 1000, 4, &[10; 12]);
        for p in &mut g.partitions {
            p.produce_rate = Some(produce / 12.0);
        }
        g
    };
    let mut s = Scaler::new(ahead.clone());
    let mut plain = Scaler::new(settings(Trigger::TimeLag { target_seconds: 30.0 }));
    let mut last = None;
    for t in (0..=60).step_by(5) {
        let produce = 1_000.0 + 20.0 * t as f64;
        last = Some((s.decide(&poll(t, produce)), plain.decide(&poll(t, produce))));
    }
    let (d, p) = last.take().expect("decisions");
    assert!((s.produce_trend() - 20.0).abs() < 1e-6, "{}", s.produce_trend());
    // 2,200 records/s asks 4.4: 4 (5 relieve no one 4 do not); in 30 s, 2,800 will need 6.
    assert_eq!((p.rule, p.replicas), (Rule::TimeLagKeepUp, Some(4)), "{p:?}");
    assert_eq!((d.rule, d.replicas), (Rule::ScaleAhead, Some(6)), "{d:?}");
    assert!(d.reason.contains("2200 → 2800 records/s in 30 s"), "{}", d.reason);
    // Foreseen far ahead (300 s: 8,200 records/s, which needs 12), it still takes one step.
    let mut far = Scaler::new(Settings { lead_ms: 300_000, ..ahead.clone() });
    let d = (0..=60).step_by(5).map(|t| far.decide(&poll(t, 1_000.0 + 20.0 * t as f64))).last();
    let d = d.expect("decisions");
    assert_eq!((d.rule, d.replicas), (Rule::ScaleAhead, Some(6)), "{d:?}");
    assert!(d.reason.contains("needs 12, so one step ahead"), "{}", d.reason);
    // A flat rate: nothing ahead.
    let mut flat = Scaler::new(ahead);
    let d = (0..=60).step_by(5).map(|t| flat.decide(&poll(t, 2_200.0))).last().expect("decisions");
    assert_eq!((d.rule, d.replicas), (Rule::TimeLagKeepUp, Some(4)), "{d:?}");
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
