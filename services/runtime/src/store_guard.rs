//! The Redis a workload's state lives in, held to its generation
//! (`sluice_coord::generation`): the [`crate::sink::RedisSink`] opens the
//! store's marker on its first connection, checks it on every later one,
//! before every round trip's commands and while idle, and refuses every
//! write once the store is not the one the state was written to.
//!
//! Refused writes fail as [`crate::sink::SinkError::StateLost`]: the
//! records that needed them retry and are never committed, so the work
//! that depends on Redis stops (intake fills its bound and pauses) while
//! the work that does not (dead letters) goes on. If the marker comes back
//! (the store was restored), work resumes by itself.

use std::sync::{Mutex, OnceLock};

use prometheus::IntGauge;
use redis::RedisResult;
use redis::aio::ConnectionLike;
use sluice_coord::generation::{self, Expect, Generation, Lost};

/// One sink's view of its store's generation, shared by its writers.
#[derive(Debug)]
pub(crate) struct StoreGuard {
    prefix: String,
    /// The marker's key, `<prefix>generation`.
    key: String,
    expect: Expect,
    generation: OnceLock<Generation>,
    lost: Mutex<Option<Lost>>,
    /// `sluice_processor_state_store_replaced`: 1 while writes are refused.
    gauge: IntGauge,
}

impl StoreGuard {
    pub(crate) fn new(prefix: &str, expect: Expect, gauge: IntGauge) -> Self {
        gauge.set(0);
        Self {
            prefix: prefix.to_string(),
            key: generation::key(prefix),
            expect,
            generation: OnceLock::new(),
            lost: Mutex::new(None),
            gauge,
        }
    }

    /// The marker's key, read at the head of every pipeline.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The generation this sink writes into, once its first connection
    /// opened it (the one recorded in Kafka, if the store lost it).
    pub(crate) fn generation(&self) -> Option<&Generation> {
        self.generation.get()
    }

    /// Why writes are refused, if they are.
    pub(crate) fn lost(&self) -> Option<Lost> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// On every (re)connection, before anything is sent: opens the marker
    /// the first time, checks it after.
    pub(crate) async fn on_connect(&self, conn: &mut impl ConnectionLike) -> RedisResult<()> {
        if let Some(generation) = self.generation.get() {
            let found = generation::check(conn, generation).await?;
            self.judge(found);
            return Ok(());
        }
        let (generation, opened) = generation::open(conn, &self.prefix, &self.expect).await?;
        match opened {
            Ok(true) => {
                tracing::info!(key = %generation.key, generation = %generation.id, "Redis had no state yet: marked it as a new generation")
            }
            Ok(false) => {
                tracing::info!(key = %generation.key, generation = %generation.id, "Redis state generation opened")
            }
            Err(_) => {}
        }
        let _ = self.generation.set(generation);
        self.judge(opened.map(|_| ()));
        Ok(())
    }

    /// Records the verdict on the marker as last read, logging changes.
    pub(crate) fn judge(&self, verdict: Result<(), Lost>) {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        match (verdict, lost.is_some()) {
            (Ok(()), true) => {
                tracing::info!("The Redis state store's generation is back: writes resume");
                *lost = None;
            }
            (Err(now), false) => {
                tracing::error!(
                    error = %now,
                    "Writes to Redis stop: the records that need them wait uncommitted. Restore the store (work resumes by itself), \
                     or rebuild its state by resetting the group's offsets to the earliest (docs/deploying.md, \"When Redis loses its data\")"
                );
                *lost = Some(now);
            }
            (Err(now), true) => *lost = Some(now),
            (Ok(()), false) => {}
        }
        self.gauge.set(i64::from(lost.is_some()));
    }

    /// The verdict on a marker read back in a pipeline's first reply.
    pub(crate) fn verdict(&self, found: Option<String>) -> Result<(), Lost> {
        match self.generation.get() {
            Some(generation) => generation::verdict(generation, found),
            None => Ok(()),
        }
    }
}
