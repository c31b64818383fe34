//! The rebuild's state, beside the live one: the same hashes under a staging
//! prefix, seeded from the chain's pools at the rebuild's slot and moved on
//! by the DEX handler's own code (the [`Outputs`] it applies through), so a
//! replayed swap changes a staged pool exactly as it changes a live one.

use std::collections::HashMap;

use futures_util::{StreamExt, TryStreamExt, stream};
use redis::aio::MultiplexedConnection;
use sluice_dex::outputs::Outputs;
use sluice_dex::state::{self, Apply};
use sluice_proto::chain::v1::GetPoolRequest;
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::dex::v1::{PoolState as WirePoolState, TokenMetadata};
use sluice_runtime::sink::SinkError;
use tonic::transport::Channel;

use super::RebuildError;

/// Pools asked of the chain at once.
const CHAIN_CONCURRENCY: usize = 16;

/// Where the staged state goes: tokens from the chain, applies into Redis under `prefix`.
#[derive(Debug, Clone)]
pub struct Staged {
    conn: MultiplexedConnection,
    prefix: String,
    tokens: HashMap<String, String>,
    apply_sha: String,
}

impl Staged {
    /// Loads the apply script into `conn`'s Redis.
    pub async fn new(
        mut conn: MultiplexedConnection,
        prefix: &str,
        tokens: &[TokenMetadata],
    ) -> Result<Self, RebuildError> {
        let apply_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(state::APPLY_SCRIPT)
            .query_async(&mut conn)
            .await
            .map_err(RebuildError::Redis)?;
        let tokens = tokens.iter().map(|t| (t.mint.clone(), sluice_dex::registry::encode(t))).collect();
        Ok(Self { conn, prefix: prefix.to_string(), tokens, apply_sha })
    }
}

impl Outputs for Staged {
    async fn token(&self, mint: &str) -> Result<Option<String>, SinkError> {
        Ok(self.tokens.get(mint).cloned())
    }

    async fn apply(&self, apply: &Apply<'_>) -> Result<bool, SinkError> {
        let mut replies = self.apply_all(std::slice::from_ref(apply)).await?;
        replies.pop().unwrap_or(Err(SinkError::NoReply("the apply")))
    }

    /// One pipeline for all of them, in order (no audit list: that is the processors').
    async fn apply_all(&self, applies: &[Apply<'_>]) -> Result<Vec<Result<bool, SinkError>>, SinkError> {
        let mut pipe = redis::pipe();
        for a in applies {
            pipe.add_command(state::apply_command(&self.apply_sha, &self.prefix, a, false));
        }
        let replies: Vec<i64> = pipe.query_async(&mut self.conn.clone()).await.map_err(SinkError::Redis)?;
        Ok(replies.into_iter().map(|r| Ok(r != 0)).collect())
    }
}

/// Writes `pool`'s chain state into its staged hash (none for a pool never swapped by
/// then). Returns whether one was written.
async fn seed_one(conn: &mut MultiplexedConnection, prefix: &str, wire: &WirePoolState) -> Result<bool, RebuildError> {
    let Some(cmd) = state::put_command(prefix, wire) else { return Ok(false) };
    cmd.query_async::<()>(conn).await.map_err(RebuildError::Redis)?;
    Ok(true)
}

/// The chain's state of `pool` after `slot`.
pub async fn chain_state(chain: &ChainClient<Channel>, pool: &str, slot: u64) -> Result<WirePoolState, tonic::Status> {
    let request = GetPoolRequest { pool: pool.to_string(), at_slot: slot };
    chain.clone().get_pool(request).await.map(tonic::Response::into_inner)
}

/// Seeds every pool of `pools` from the chain's state after `slot`. Returns how many
/// pools got a hash (the others were never swapped by then).
pub async fn seed(
    chain: &ChainClient<Channel>,
    conn: &MultiplexedConnection,
    prefix: &str,
    pools: &[String],
    slot: u64,
) -> Result<usize, RebuildError> {
    let seeded: Vec<bool> = stream::iter(pools)
        .map(|pool| async move {
            let wire = chain_state(chain, pool, slot)
                .await
                .map_err(|s| RebuildError::Chain(format!("GetPool {pool} at slot {slot}: {}", s.message())))?;
            seed_one(&mut conn.clone(), prefix, &wire).await
        })
        .buffer_unordered(CHAIN_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(seeded.into_iter().filter(|s| *s).count())
}

/// Deletes every key under `prefix` (a staging area left by an earlier run). Returns how many.
pub async fn clear(conn: &mut MultiplexedConnection, prefix: &str) -> Result<usize, RebuildError> {
    let mut cursor: u64 = 0;
    let mut removed = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{}*", escape_glob(prefix)))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(RebuildError::Redis)?;
        if !keys.is_empty() {
            removed += keys.len();
            redis::cmd("UNLINK").arg(&keys).query_async::<()>(conn).await.map_err(RebuildError::Redis)?;
        }
        if next == 0 {
            return Ok(removed);
        }
        cursor = next;
    }
}

/// `prefix` with the glob characters of `SCAN MATCH` escaped.
fn escape_glob(prefix: &str) -> String {
    prefix.chars().fold(String::new(), |mut out, c| {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_matches_only_itself() {
        assert_eq!(escape_glob("sluice:rebuild:"), "sluice:rebuild:");
        assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
