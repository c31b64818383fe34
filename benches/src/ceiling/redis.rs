//! The full variant's Redis side: each record applied with the processor's
//! own batch apply script, one call per pool of the batch (as the processor
//! applies), one pipeline per batch.

use anyhow::{Context, Result, bail};
use sluice_core::pool::PoolUpdate;
use sluice_core::seq::Seq;
use sluice_dex::state::{self, Apply};

use super::Input;

/// The full variant's Redis side: one connection, the apply script.
pub struct RedisApply {
    rt: tokio::runtime::Runtime,
    conn: redis::aio::MultiplexedConnection,
    sha: String,
    prefix: String,
}

impl RedisApply {
    /// Connects to `url` and loads the apply script; pool keys go under `prefix`.
    pub fn connect(url: &str, prefix: String) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let conn = rt.block_on(async {
            let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
            let script = state::APPLY_MANY_SCRIPT;
            let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(script).query_async(&mut conn).await?;
            Ok::<_, redis::RedisError>(conn)
        })?;
        Ok(Self { rt, conn, sha: state::script_sha(state::APPLY_MANY_SCRIPT), prefix })
    }

    /// Applies one swap per record (the key as the pool, the offset as its
    /// sequence, so every apply is a real write), one call per pool, one
    /// pipeline for all.
    pub(super) fn apply(&mut self, batch: &[Input]) -> Result<()> {
        let applies: Vec<Apply<'_>> = batch
            .iter()
            .map(|input| Apply {
                pool: std::str::from_utf8(&input.key).unwrap_or("pool"),
                update: PoolUpdate {
                    seq: Seq { slot: input.offset as u64 + 1, tx_index: 0, ix_index: 0 },
                    reserve_a: 1_000_000 + input.offset as u64,
                    reserve_b: 2_000_000,
                    sqrt_price_x64: None,
                    last_price_ticks: None,
                },
                price: 1.0 + input.offset as f64,
                venue: 1,
            })
            .collect();
        let mut pipe = redis::pipe();
        for (pool, at) in state::by_pool(&applies) {
            let mine = at.iter().map(|&i| &applies[i]);
            pipe.add_command(state::apply_many_command(&self.sha, &self.prefix, pool, mine, false));
        }
        let conn = &mut self.conn;
        let applied: Vec<Vec<i64>> =
            self.rt.block_on(pipe.query_async(conn)).context("the ceiling's Redis pipeline")?;
        let applied: usize = applied.iter().map(Vec::len).sum();
        if applied != batch.len() {
            bail!("{applied} replies for {} applies", batch.len());
        }
        Ok(())
    }
}
