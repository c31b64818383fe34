//! Every count the HPA applies relieves a processor: the chart's values and each of its `ci/`
//! files, under every trigger, replayed through the engine (the HPA's sync as
//! `test.sh conformance` holds it to Kubernetes' own controller) on the committed demo trace
//! and on bursty synthetic ones, over start-up times from a cached image to a new node.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_scaling::behavior::{Behavior, BehaviorSpec};
use sluice_scaling::landing::useless_landings;
use sluice_scaling::partitions::useful_counts;
use sluice_scaling::sim::{self, Model};
use sluice_scaling::trace::Trace;
use sluice_scaling::values::{Policy, merge, parse_yaml, policy};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_yaml(&path.display().to_string(), &text).expect("values")
}

fn trigger(name: &str) -> Value {
    let settings = match name {
        "timeLag" => json!({"trigger": name, "timeLag": {"targetSeconds": 30}}),
        "drainTime" => json!({"trigger": name, "drainTime": {"targetSeconds": 60}}),
        _ => json!({"trigger": name}),
    };
    json!({"processor": {"autoscaling": settings}})
}

/// The chart's values, each `ci/` file merged over them (and the values alone).
fn chart_policies() -> Vec<(String, Value)> {
    let chart = repo().join("helm/sluice");
    let base = yaml(&chart.join("values.yaml"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart.join("ci"))
        .expect("helm/sluice/ci")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "the ci/ files: {files:?}");
    let mut out = vec![("values.yaml".to_string(), base.clone())];
    for f in files {
        let mut v = base.clone();
        merge(&mut v, yaml(&f));
        out.push((f.file_name().expect("name").to_string_lossy().into_owned(), v));
    }
    out
}

fn traces() -> Vec<Trace> {
    let read = |p: &str| std::fs::read_to_string(repo().join(p));
    let demo = Trace::parse("demo:results/demo/example.json", read).expect("the committed demo trace");
    vec![
        demo.scaled(10.0, 10.0),
        Trace::parse("synthetic:base=20000,burst=400000@300+120,burst=120000@1200+60,length=2400", read)
            .expect("trace"),
        Trace::parse("synthetic:base=5000,ramp=300000@120+600,burst=90000@1000+30,length=1800", read).expect("trace"),
    ]
}

fn model(per_pod_rate: f64, startup_s: f64) -> Model {
    Model {
        per_pod_rate,
        rebalance_pause_s: 4.5,
        startup_s,
        lag_poll_s: 5.0,
        sync_s: 15.0,
        commit_interval_s: 1.0,
        objective_s: 30.0,
    }
}

/// Every applied count outside the useful ones (0 aside), and every count applied.
fn replay(p: &Policy, traces: &[Trace], startups: &[f64]) -> (BTreeSet<i32>, BTreeSet<i32>) {
    let useful: BTreeSet<i32> = useful_counts(p.partitions).into_iter().map(|n| n as i32).collect();
    let (mut bad, mut all) = (BTreeSet::new(), BTreeSet::new());
    for trace in traces {
        for &startup in startups {
            let (samples, _) = sim::run(p, &model(34_000.0, startup), trace);
            for s in samples {
                all.insert(s.desired);
                if s.desired != 0 && !useful.contains(&s.desired) {
                    bad.insert(s.desired);
                }
            }
        }
    }
    (bad, all)
}

#[test]
fn every_count_the_hpa_applies_under_the_chart_s_policies_relieves_a_processor() {
    let traces = traces();
    let (mut replayed, policies) = (0, chart_policies());
    // The defaults and every ci/ scenario (nine when this was written).
    let scenarios = policies.len();
    assert!(scenarios >= 9, "the chart's scenarios were all found: {scenarios}");
    for (name, values) in policies {
        for t in ["kafka", "offsetLag", "timeLag", "drainTime"] {
            let mut v = values.clone();
            merge(&mut v, trigger(t));
            let p = policy(&name, &v).expect("a policy");
            let (bad, all) = replay(&p, &traces, &[6.0, 30.0, 180.0]);
            assert!(bad.is_empty(), "{name} with trigger {t}: applied {bad:?} of {all:?}");
            assert!(all.len() >= 3, "{name} with trigger {t} scaled: {all:?}");
            replayed += 1;
        }
    }
    assert_eq!(replayed, 4 * scenarios);
}

#[test]
fn the_replay_finds_the_useless_counts_of_the_chart_s_former_behavior() {
    let mut v = yaml(&repo().join("helm/sluice/values.yaml"));
    merge(
        &mut v,
        json!({"processor": {"autoscaling": {"behavior": {
            "scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
            "scaleDown": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}
        }}}}),
    );
    for t in ["kafka", "timeLag"] {
        let mut v = v.clone();
        merge(&mut v, trigger(t));
        let p = policy("former", &v).expect("a policy");
        let (bad, all) = replay(&p, &traces(), &[30.0]);
        assert!(!bad.is_empty(), "trigger {t}: the former behavior applied only {all:?}");
    }
}

fn arbitrary_policy() -> impl Strategy<Value = Value> {
    (prop_oneof![Just("Pods"), Just("Percent")], 1i32..=150, prop_oneof![Just(15), Just(30), Just(60)])
        .prop_map(|(kind, value, period)| json!({"type": kind, "value": value, "periodSeconds": period}))
}

fn arbitrary_rules() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(arbitrary_policy(), 1..3),
        prop_oneof![Just("Max"), Just("Min"), Just("Disabled")],
        prop_oneof![Just(0), Just(30), Just(300)],
    )
        .prop_map(|(policies, select, window)| {
            json!({"policies": policies, "selectPolicy": select, "stabilizationWindowSeconds": window})
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The check the chart applies at render time is sound: a behavior it accepts never lands
    /// on a useless count in the engine, whatever the policies, periods and selection.
    #[test]
    fn a_behavior_the_check_accepts_never_lands_on_a_useless_count(
        up in arbitrary_rules(),
        down in arbitrary_rules(),
        partitions in prop_oneof![Just(6u32), Just(9), Just(12), Just(16)],
        kafka in any::<bool>(),
    ) {
        let spec: BehaviorSpec = serde_json::from_value(json!({"scaleUp": up, "scaleDown": down})).expect("behavior");
        let max = partitions as i32;
        prop_assume!(useless_landings(&Behavior::from_spec(&spec), partitions, 1, max).is_empty());
        let mut v = yaml(&repo().join("helm/sluice/values.yaml"));
        merge(&mut v, trigger(if kafka { "kafka" } else { "timeLag" }));
        merge(&mut v, json!({"kafka": {"partitions": partitions}, "processor": {"autoscaling": {
            "maxReplicas": max, "fallback": {"replicas": 1}, "behavior": {"scaleUp": up, "scaleDown": down}}}}));
        let p = policy("arbitrary", &v).expect("a policy");
        let (bad, all) = replay(&p, &traces()[1..2], &[30.0]);
        prop_assert!(bad.is_empty(), "applied {:?} of {:?}", bad, all);
    }
}
