//! Where the DEX handler's state goes. Production reads the registry from
//! and applies pool state to Redis ([`Live`]); benchmarks keep them in
//! memory ([`InMemory`]) to measure the handling path's ceiling with the
//! very same handler code. (Swaps are published by the runtime, from what
//! the handler returns.)

use std::collections::HashMap;

use dashmap::DashMap;
use sluice_core::pool::{Applied, PoolState};
use sluice_runtime::sink::{RedisSink, SinkError};
use sluice_service::admin::NotReady;

use crate::config::DexConfig;
use crate::registry;
use crate::state::{self, Apply};

/// The handler's reads and writes besides publishing. Each awaits its reply.
pub trait Outputs: Send + Sync + 'static {
    /// The registry value of `mint` (`<decimals>:<symbol>`), if registered.
    fn token(&self, mint: &str) -> impl Future<Output = Result<Option<String>, SinkError>> + Send;
    /// Applies a swap to its pool: `true` when applied, `false` when the
    /// pool had already applied a swap at or above its sequence.
    fn apply(&self, apply: &Apply<'_>) -> impl Future<Output = Result<bool, SinkError>> + Send;

    /// Applies swaps in order: one result each, or `Err` when none is known
    /// to have landed (the round trip failed). One by one unless overridden.
    fn apply_all(
        &self,
        applies: &[Apply<'_>],
    ) -> impl Future<Output = Result<Vec<Result<bool, SinkError>>, SinkError>> + Send {
        async move {
            let mut out = Vec::with_capacity(applies.len());
            for apply in applies {
                out.push(self.apply(apply).await);
            }
            Ok(out)
        }
    }

    /// Whether the store answers (the processor's readiness).
    fn ready(&self) -> Result<(), NotReady> {
        Ok(())
    }

    /// The generation of the store the state lives in (none in memory).
    fn state_generation(&self) -> Option<String> {
        None
    }
}

/// Production: the registry and pool state in Redis (the apply script).
#[derive(Debug, Clone)]
pub struct Live {
    redis: RedisSink,
    prefix: String,
    apply_sha: String,
    apply_many_sha: String,
    audit: bool,
}

impl Live {
    pub fn new(config: &DexConfig, redis: RedisSink) -> Self {
        Self {
            redis,
            prefix: config.redis_prefix.clone(),
            apply_sha: state::script_sha(state::APPLY_SCRIPT),
            apply_many_sha: state::script_sha(state::APPLY_MANY_SCRIPT),
            audit: config.audit_applied,
        }
    }
}

impl Outputs for Live {
    fn ready(&self) -> Result<(), NotReady> {
        self.redis.ready()
    }

    fn state_generation(&self) -> Option<String> {
        self.redis.generation()
    }

    async fn token(&self, mint: &str) -> Result<Option<String>, SinkError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(registry::tokens_key(&self.prefix)).arg(mint);
        let value = self.redis.exec(cmd).await?;
        redis::from_redis_value(value).map_err(|e| SinkError::Redis(e.into()))
    }

    async fn apply(&self, apply: &Apply<'_>) -> Result<bool, SinkError> {
        let command = state::apply_command(&self.apply_sha, &self.prefix, apply, self.audit);
        let applied = self.redis.exec(command).await?;
        Ok(redis::from_redis_value::<i64>(applied).ok() != Some(0))
    }

    /// One round trip for all of them, one batch-script call per pool (its
    /// swaps in their order: the order across pools does not change any
    /// pool's state), each swap's result where it stood in `applies`.
    async fn apply_all(&self, applies: &[Apply<'_>]) -> Result<Vec<Result<bool, SinkError>>, SinkError> {
        let pools = state::by_pool(applies);
        let commands = pools
            .iter()
            .map(|(pool, at)| {
                let mine = at.iter().map(|&i| &applies[i]);
                state::apply_many_command(&self.apply_many_sha, &self.prefix, pool, mine, self.audit)
            })
            .collect();
        let replies = self.redis.exec_all(commands).await?;
        let mut out: Vec<Result<bool, SinkError>> =
            (0..applies.len()).map(|_| Err(SinkError::NoReply("a swap of the batch"))).collect();
        for ((_, at), reply) in pools.iter().zip(replies) {
            let each =
                reply.and_then(|v| redis::from_redis_value::<Vec<i64>>(v).map_err(|e| SinkError::Redis(e.into())));
            for (k, &i) in at.iter().enumerate() {
                out[i] = match &each {
                    Ok(each) => each.get(k).map(|&r| r != 0).ok_or(SinkError::NoReply("a swap of the pool's call")),
                    Err(e) => Err(e.clone()),
                };
            }
        }
        Ok(out)
    }
}

/// Everything in memory, with the same semantics (the apply ignores a swap
/// not above the pool's last applied sequence): the ceiling of the path.
#[derive(Debug, Default)]
pub struct InMemory {
    tokens: HashMap<String, String>,
    pools: DashMap<String, PoolState>,
}

impl InMemory {
    /// With `tokens` as the registry (mint → `<decimals>:<symbol>`).
    pub fn new(tokens: HashMap<String, String>) -> Self {
        Self { tokens, ..Self::default() }
    }

    /// A pool's state.
    pub fn pool(&self, pool: &str) -> Option<PoolState> {
        self.pools.get(pool).map(|s| *s)
    }

    /// Forgets every pool state (a benchmark replaying its input again).
    pub fn reset_pools(&self) {
        self.pools.clear();
    }
}

impl Outputs for InMemory {
    async fn token(&self, mint: &str) -> Result<Option<String>, SinkError> {
        Ok(self.tokens.get(mint).cloned())
    }

    async fn apply(&self, apply: &Apply<'_>) -> Result<bool, SinkError> {
        // The pool's key is allocated only the first time the pool is seen.
        let applied = match self.pools.get_mut(apply.pool) {
            Some(mut state) => state.apply_update(&apply.update),
            None => self.pools.entry(apply.pool.to_string()).or_default().apply_update(&apply.update),
        };
        Ok(applied == Applied::Changed)
    }
}
