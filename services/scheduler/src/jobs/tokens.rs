//! Token-metadata refresh: the chain's token list into the Redis registry
//! the processors read, and an invalidation message per changed token on
//! pub/sub, so running processors pick up new or changed tokens without a
//! restart. The write is fenced: a run that lost its lease cannot put an
//! older list over a newer run's.

use std::time::Duration;

use sluice_dex::registry;
use sluice_proto::chain::v1::ListTokensRequest;
use sluice_proto::chain::v1::chain_client::ChainClient;
use tonic::transport::Channel;

use super::{Effects, Job, JobError, Report, RunContext, RunFuture};
use crate::config::{JobDefaults, Overlap};
use crate::store::JobScript;

/// Writes every changed registry entry and announces each on the
/// invalidation channel. Returns how many changed.
const BODY: &str = "
-- KEYS: registry. ARGV: channel, then mint, value pairs
local changed = 0
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    redis.call('PUBLISH', ARGV[1], ARGV[i])
    changed = changed + 1
  end
end
return changed";

/// The token-refresh job.
#[derive(Debug)]
pub struct TokenRefresh {
    chain: ChainClient<Channel>,
    script: std::sync::Arc<JobScript>,
}

impl TokenRefresh {
    pub fn new(chain: ChainClient<Channel>) -> Self {
        Self { chain, script: JobScript::new("token-refresh", BODY) }
    }

    async fn refresh(&self, ctx: &RunContext) -> Result<Report, JobError> {
        let tokens = self
            .chain
            .clone()
            .list_tokens(ListTokensRequest {})
            .await
            .map_err(|e| JobError::unavailable("chain", format!("ListTokens: {}", e.message())))?
            .into_inner()
            .tokens;
        let mut write = ctx
            .write(&self.script, "registry")
            .key(registry::tokens_key(&ctx.prefix))
            .arg(registry::invalidate_channel(&ctx.prefix));
        for token in &tokens {
            write = write.arg(&token.mint).arg(registry::encode(token));
        }
        let changed = write.apply().await?.max(0) as u64;
        if changed > 0 {
            tracing::info!(changed, tokens = tokens.len(), "Token registry updated");
        }
        Ok(Report { items: tokens.len() as u64, drift_found: changed, drift_repaired: changed, ..Report::default() })
    }
}

impl Job for TokenRefresh {
    fn name(&self) -> &'static str {
        "token-refresh"
    }

    fn description(&self) -> &'static str {
        "Chain ListTokens into the Redis token registry; changed tokens are invalidated in every processor's cache."
    }

    fn defaults(&self) -> JobDefaults {
        JobDefaults { schedule: "0 * * * * *", enabled: true, timeout: Duration::from_secs(30), overlap: Overlap::Skip }
    }

    fn effects(&self) -> Effects {
        Effects::Ledger
    }

    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a> {
        Box::pin(self.refresh(ctx))
    }
}
