//! Keeping a lease alive: one rule for every holder (the active ingest, a
//! scheduler run).
//!
//! Every third of the lease time the keeper asks the store to extend it. A
//! renewal that surely landed was asked at some instant `t`, so the lease
//! lasts at least until `t + ttl`; the keeper times freshness from *before*
//! the call. The holder is told to stop when a renewal is refused (someone
//! else holds it now), or at the latest half the lease time after the last
//! renewal that surely landed: the other half is the holder's margin to stop
//! before the lease can lapse and a peer can take over. Each call is bounded
//! by a third of the lease and never runs past that half; after a failed
//! call the next is tried sooner (a ninth of the lease).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Why a kept lease must be given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// The store refused to renew it: it lapsed, or another holder has it.
    Refused,
    /// No renewal was confirmed for half the lease time (the last error).
    Unconfirmed(String),
}

impl Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused => f.write_str("the renewal was refused"),
            Self::Unconfirmed(e) => write!(f, "no renewal confirmed for half the lease time ({e})"),
        }
    }
}

/// A lease being kept alive by a background task (stopped on drop).
#[derive(Debug)]
pub struct Kept {
    lost: watch::Receiver<Option<Lost>>,
    task: tokio::task::JoinHandle<()>,
}

impl Kept {
    /// Resolves once the lease must be given up, with why.
    pub async fn lost(&mut self) -> Lost {
        match self.lost.wait_for(Option::is_some).await {
            Ok(lost) => lost.clone().unwrap_or(Lost::Refused),
            // The keeper task ended without a verdict (it panicked): treat
            // the lease as lost rather than as kept.
            Err(_) => Lost::Unconfirmed("the keeper stopped".into()),
        }
    }

    /// Whether the lease must be given up, without waiting.
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// A receiver of the verdict, for code that selects on it in several
    /// places (`Some` once the lease must be given up).
    pub fn subscribe(&self) -> watch::Receiver<Option<Lost>> {
        self.lost.clone()
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Keeps a lease of `ttl` alive with `renew` (which extends it and answers
/// whether it was still held), telling `on_error` about each failed call.
pub fn keep<F, Fut, E, R>(ttl: Duration, mut renew: F, mut on_error: R) -> Kept
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<bool, E>> + Send + 'static,
    E: Display + Send + 'static,
    R: FnMut(&str) + Send + 'static,
{
    let (tx, lost) = watch::channel(None);
    let task = tokio::spawn(async move {
        let every = ttl / 3;
        let mut confirmed = Instant::now();
        let mut next = confirmed + every;
        let mut last_error = String::from("no renewal tried");
        let verdict = loop {
            let give_up = confirmed + ttl / 2;
            tokio::time::sleep_until(next.min(give_up)).await;
            let asked = Instant::now();
            if asked >= give_up {
                break Lost::Unconfirmed(last_error);
            }
            let bound = (asked + every).min(give_up);
            let error = match tokio::time::timeout_at(bound, renew()).await {
                Ok(Ok(true)) => {
                    (confirmed, next) = (asked, asked + every);
                    continue;
                }
                Ok(Ok(false)) => break Lost::Refused,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {} ms", (bound - asked).as_millis()),
            };
            on_error(&error);
            last_error = error;
            next = Instant::now() + ttl / 9;
        };
        tx.send_replace(Some(verdict));
    });
    Kept { lost, task }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};

    use super::*;

    type Renewal = Pin<Box<dyn Future<Output = Result<bool, &'static str>> + Send>>;

    /// A renewal answering from a script of (delay, result); renewed after it.
    fn scripted(steps: Vec<(u64, Result<bool, &'static str>)>) -> impl FnMut() -> Renewal + Send + 'static {
        let steps = Arc::new(Mutex::new(steps.into_iter()));
        move || {
            let (delay, result) = steps.lock().expect("lock").next().unwrap_or((0, Ok(true)));
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                result
            })
        }
    }

    const TTL: Duration = Duration::from_millis(3000);

    /// Keeps a lease with `steps` and returns why and when (ms) it was lost,
    /// and how many failed calls were reported.
    async fn lose(steps: Vec<(u64, Result<bool, &'static str>)>) -> (Lost, u128, usize) {
        let errors = Arc::new(Mutex::new(0));
        let counted = Arc::clone(&errors);
        let started = Instant::now();
        let mut kept = keep(TTL, scripted(steps), move |_| *counted.lock().expect("lock") += 1);
        let lost = kept.lost().await;
        let errors = *errors.lock().expect("lock");
        (lost, started.elapsed().as_millis(), errors)
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_lost_at_once() {
        assert_eq!(lose(vec![(0, Ok(true)), (0, Ok(false))]).await, (Lost::Refused, 2000, 0));
    }

    const DOWN: (u64, Result<bool, &str>) = (0, Err("down"));

    #[tokio::test(start_paused = true)]
    async fn errors_are_tolerated_until_half_the_lease() {
        // Confirmed at 1 s; errors at 2 s and 2.33 s (sooner after a
        // failure); given up at 2.5 s, half the lease after 1 s.
        let (lost, at, errors) = lose(vec![(0, Ok(true)), DOWN, DOWN, DOWN]).await;
        assert_eq!((lost, at, errors), (Lost::Unconfirmed("down".into()), 2500, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn one_failed_call_is_retried_sooner_and_the_lease_kept() {
        let kept = keep(TTL, scripted(vec![(0, Ok(true)), DOWN]), |_| {});
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!kept.is_lost(), "the retry at 2.33 s renewed it");
    }

    #[tokio::test(start_paused = true)]
    async fn freshness_is_timed_from_before_the_call() {
        // Asked at 1 s, confirmed at 1.5 s: the lease surely lasts from 1 s,
        // so it is given up at 2.5 s (timed from the answer: 3 s).
        let (lost, at, errors) = lose(vec![(500, Ok(true)), DOWN, DOWN, DOWN]).await;
        assert_eq!((lost, at, errors), (Lost::Unconfirmed("down".into()), 2500, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_with_no_answer_never_runs_past_half_the_lease() {
        let (lost, at, errors) = lose(vec![(3_600_000, Ok(true))]).await;
        assert!(matches!(&lost, Lost::Unconfirmed(e) if e.contains("no answer")), "{lost:?}");
        assert_eq!((at, errors), (1500, 1), "asked at 1 s, given up at 1.5 s");
    }

    #[tokio::test(start_paused = true)]
    async fn never_later_than_half_the_lease_after_the_last_confirmation() {
        // A fast error, then a call that hangs: given up at 2.5 s, not when
        // the hanging call would time out (the old rule stopped at 3 s).
        let (lost, at, _) = lose(vec![(0, Ok(true)), DOWN, (3_600_000, Ok(true))]).await;
        assert!(matches!(lost, Lost::Unconfirmed(_)));
        assert_eq!(at, 2500);
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_lease_stays_kept() {
        let kept = keep(TTL, scripted(Vec::new()), |_| {});
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!kept.is_lost());
    }
}
