//! A processor pod's shutdown after the kubelet's SIGTERM, read from its log: did it drain,
//! flush and commit inside its grace period (`--kubernetes`; the report holds one per pod the
//! HPA or a rollout removed).

use serde::Serialize;

/// A processor pod's shutdown after the kubelet's SIGTERM, as its log tells it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Shutdown {
    pub pod: String,
    pub grace_seconds: u64,
    /// It logged the start of its drain-flush-commit.
    pub began: bool,
    /// From SIGTERM to "Shutdown complete" (drained, flushed, committed, left the group), ms.
    pub complete_ms: Option<u64>,
}

impl Shutdown {
    /// Reads the JSON log lines the runtime prints on SIGTERM.
    pub fn from_log(pod: &str, grace_seconds: u64, log: &str) -> Self {
        let lines: Vec<serde_json::Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let message =
            |v: &serde_json::Value| v.pointer("/fields/message").and_then(serde_json::Value::as_str).map(String::from);
        let began = lines.iter().any(|v| message(v).is_some_and(|m| m.starts_with("Shutting down")));
        let complete_ms = lines
            .iter()
            .find(|v| message(v).as_deref() == Some("Shutdown complete"))
            .and_then(|v| v.pointer("/fields/elapsed_ms").and_then(serde_json::Value::as_u64));
        Self { pod: pod.to_string(), grace_seconds, began, complete_ms }
    }

    /// Deleted with no grace period: SIGKILL, nothing to drain (its partitions' next owner
    /// starts from their last commit).
    pub fn killed(&self) -> bool {
        self.grace_seconds == 0
    }

    /// Drained and committed inside the pod's grace period (or killed, with none).
    pub fn in_time(&self) -> bool {
        self.killed() || (self.began && self.complete_ms.is_some_and(|ms| ms < self.grace_seconds * 1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shutdown_is_read_from_the_runtime_s_log_and_held_to_the_grace_period() {
        let log = concat!(
            r#"{"level":"INFO","fields":{"message":"Consumer started"}}"#,
            "\n",
            r#"{"level":"INFO","fields":{"message":"Shutting down: draining, flushing, committing"}}"#,
            "\n",
            "not json\n",
            r#"{"level":"INFO","fields":{"message":"Shutdown complete","elapsed_ms":1830}}"#,
        );
        let s = Shutdown::from_log("sluice-processor-a", 30, log);
        assert_eq!((s.began, s.complete_ms), (true, Some(1830)));
        assert!(s.in_time());
        assert!(!Shutdown::from_log("p", 1, log).in_time(), "1.8 s is past a 1 s grace");
        let cut = Shutdown::from_log("p", 30, r#"{"fields":{"message":"Shutting down: draining"}}"#);
        assert_eq!((cut.began, cut.complete_ms, cut.in_time()), (true, None, false));
        let killed = Shutdown::from_log("p", 0, r#"{"fields":{"message":"Consumer started"}}"#);
        assert!(killed.killed() && killed.in_time(), "a pod deleted with no grace period has nothing to drain");
    }
}
