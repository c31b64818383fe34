//! The token registry: decimals and symbols by mint, in one Redis hash
//! (`<prefix>tokens`, field = mint, value = `<decimals>:<symbol>`), written
//! by the scheduler's refresh job (and tests), read by processors through a
//! batch-evicting cache. A message on `<prefix>tokens:invalidate` (a mint,
//! or `*`) drops cache entries, so registry changes apply without restart.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use sluice_core::cache::BatchEvictingCache;
use sluice_core::dex::TokenMetadata;

/// A token symbol stored inline (up to 23 bytes; longer ones are cut at a
/// character boundary), so that copying a `TokenInfo` out of the cache on
/// every hit touches no shared reference count.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Symbol {
    bytes: [u8; 23],
    len: u8,
}

impl Symbol {
    pub fn new(s: &str) -> Self {
        let mut end = s.len().min(23);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0u8; 23];
        bytes[..end].copy_from_slice(&s.as_bytes()[..end]);
        Self { bytes, len: end as u8 }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for Symbol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// What the processor needs of a token. `Copy`: a cache hit is a memcpy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenInfo {
    pub decimals: u32,
    pub symbol: Symbol,
}

/// The registry hash's key.
pub fn tokens_key(prefix: &str) -> String {
    format!("{prefix}tokens")
}

/// The invalidation channel.
pub fn invalidate_channel(prefix: &str) -> String {
    format!("{prefix}tokens:invalidate")
}

/// A registry value.
pub fn encode(token: &TokenMetadata) -> String {
    format!("{}:{}", token.decimals, token.symbol)
}

/// Parses a registry value.
pub fn decode(value: &str) -> Option<TokenInfo> {
    let (decimals, symbol) = value.split_once(':')?;
    let decimals: u32 = decimals.parse().ok().filter(|d| *d <= 30)?;
    Some(TokenInfo { decimals, symbol: Symbol::new(symbol) })
}

/// The registry's entries for `tokens`: mint → `<decimals>:<symbol>`
/// (what [`publish`] writes; an in-memory registry starts from it).
pub fn entries(tokens: &[TokenMetadata]) -> std::collections::HashMap<String, String> {
    tokens.iter().map(|t| (t.mint.clone(), encode(t))).collect()
}

/// Writes `tokens` into the registry and announces the change (tests and
/// benches; deployments have the scheduler's token-refresh job do it).
pub async fn publish(
    conn: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    tokens: &[TokenMetadata],
) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    for t in tokens {
        pipe.hset(tokens_key(prefix), &t.mint, encode(t)).ignore();
    }
    pipe.publish(invalidate_channel(prefix), "*").ignore();
    pipe.query_async(conn).await
}

/// Applies invalidation messages to `cache` until the task is dropped,
/// reconnecting with backoff.
pub async fn follow_invalidations(
    client: redis::Client,
    prefix: String,
    cache: Arc<BatchEvictingCache<String, TokenInfo>>,
) {
    let channel = invalidate_channel(&prefix);
    let mut delay = Duration::from_millis(200);
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => {
                if pubsub.subscribe(&channel).await.is_ok() {
                    // Anything may have changed while we were not listening.
                    cache.clear();
                    delay = Duration::from_millis(200);
                    let mut messages = pubsub.on_message();
                    while let Some(msg) = messages.next().await {
                        match msg.get_payload::<String>() {
                            Ok(mint) if mint == "*" => cache.clear(),
                            Ok(mint) => {
                                cache.remove(&mint);
                            }
                            Err(_) => cache.clear(),
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "Token invalidation subscription failed; retrying"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_bad_ones_are_refused() {
        let t = TokenMetadata { mint: "m".into(), symbol: "SOL".into(), decimals: 9, ..Default::default() };
        assert_eq!(decode(&encode(&t)), Some(TokenInfo { decimals: 9, symbol: Symbol::new("SOL") }));
        assert_eq!(decode("x:SOL"), None);
        assert_eq!(decode("99:SOL"), None);
        assert_eq!(decode("6"), None);
        assert_eq!(decode("6:A:B").map(|t| t.symbol.as_str().to_string()), Some("A:B".into()));
        assert_eq!(Symbol::new("ÄÄÄÄÄÄÄÄÄÄÄÄ").as_str(), "ÄÄÄÄÄÄÄÄÄÄÄ", "cut at a character boundary");
    }
}
