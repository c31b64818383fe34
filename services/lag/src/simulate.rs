//! `sluice-lag simulate`: replays a trace through the autoscaling engine
//! (`sluice-scaling`) and prints what KEDA and the HPA would have done.
//!
//! `simulate hpa-case FILE` replays one conformance case (`conformance/hpa/testdata/`) and
//! prints its sync timeline as JSON, which `conformance/hpa` compares with Kubernetes' own
//! controller on the same case.

use sluice_scaling::case::{HpaCase, replay};

/// Runs `simulate ARGS…` and returns what to print.
pub fn run(args: &[String]) -> Result<String, String> {
    match args {
        [kind, path] if kind == "hpa-case" => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
            let case: HpaCase = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
            let timeline = replay(&case);
            serde_json::to_string_pretty(&timeline).map_err(|e| e.to_string())
        }
        _ => Err("usage: sluice-lag simulate hpa-case FILE".into()),
    }
}
