//! An unreachable broker (the test stack's broker frozen with SIGSTOP, as a
//! hung host leaves it): sluice-lag reports the group as ERR with the reason
//! and stops answering ready, never as lag 0; when the broker is back, OK.
//! (Its own test binary: binaries run one at a time, so no other test uses
//! the broker while it is frozen.)

mod common;

use std::time::Duration;

use common::{Lag, commit, produce, topic};
use sluice_lag::model::status::Status;

/// Freezes the stack's broker until dropped (also when an assertion fails).
struct Frozen(u32);

impl Frozen {
    fn broker() -> Self {
        let dir = std::env::var("SLUICE_STACK_DIR").expect("SLUICE_STACK_DIR: run through deploy/local/test.sh");
        let pid: u32 =
            std::fs::read_to_string(format!("{dir}/kafka.pid")).expect("kafka.pid").trim().parse().expect("pid");
        signal("STOP", pid);
        Self(pid)
    }
}

fn signal(name: &str, pid: u32) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{name} {pid}");
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("CONT", self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_is_err_not_zero_and_ok_when_it_is_back() {
    let topic = topic("lag-err", 1).await;
    let group = sluice_testkit::unique("lag-err-group");
    produce(&topic, 0, 50, |_| sluice_core::clock::now_ms()).await;
    commit(&group, &topic, &[(0, 20)]);
    let lag = Lag::start(&group, &[&group], &[("REQUEST_TIMEOUT_MS", "1000")]).await;
    lag.until(&group, Duration::from_secs(10), "read", |g| g.lag == Some(30)).await;
    let frozen = Frozen::broker();
    let err = lag.until(&group, Duration::from_secs(20), "err", |g| g.status.status == Status::Err).await;
    assert_eq!(err.lag, None, "no made-up lag while it cannot be read: {err:?}");
    assert!(err.error.is_some() && err.status.reason.contains("unreadable"), "{err:?}");
    let metrics = lag.metrics();
    assert!(
        !metrics.contains(&format!("kafka_consumergroup_lag{{consumergroup=\"{group}\"")),
        "no lag series: {metrics}"
    );
    assert!(metrics.contains(&format!("sluice_lag_group_status{{consumergroup=\"{group}\",status=\"err\"}} 1")));
    let ready = sluice_service::process::http_get(lag.port, "/ready").map(|(c, _)| c);
    drop(frozen);
    let back =
        lag.until(&group, Duration::from_secs(30), "ok", |g| g.status.status == Status::Ok && g.lag == Some(30)).await;
    assert_eq!(back.error, None);
    // Not ready while it could not poll (checked after the broker is back, so
    // a failed assertion never leaves it frozen).
    assert!(ready.is_some(), "the admin port answers while Kafka does not");
}
