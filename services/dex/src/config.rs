//! The DEX workload's settings.

use sluice_service::env::EnvReader;

/// Settings of the DEX handler, read after the runtime's from the same prefix.
#[derive(Debug, Clone)]
pub struct DexConfig {
    /// Where recognised swaps go, keyed by pool.
    pub swaps_topic: String,
    /// Prefix of every Redis key and channel this workload uses.
    pub redis_prefix: String,
    /// Token-decimals cache entries; at the cap ~10% are evicted at once.
    pub token_cache_capacity: usize,
    /// Symbols priced at 1 USD.
    pub usd_stables: Vec<String>,
    /// Symbols whose USD price comes from their pools against a stable.
    pub reference_tokens: Vec<String>,
    /// Also append every applied sequence to a per-pool Redis list, so a
    /// checker can prove no swap was applied twice or out of order.
    pub audit_applied: bool,
}

fn list(raw: &str) -> Vec<String> {
    raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

impl DexConfig {
    pub fn read(env: &mut EnvReader) -> Self {
        let config = Self {
            swaps_topic: env.or("SWAPS_TOPIC", "dex.swaps".to_string()),
            redis_prefix: env.or("REDIS_PREFIX", "sluice:".to_string()),
            token_cache_capacity: env.or("TOKEN_CACHE_CAPACITY", 10_000),
            usd_stables: list(&env.or("USD_STABLES", "USDC,USDT".to_string())),
            reference_tokens: list(&env.or("REFERENCE_TOKENS", "SOL".to_string())),
            audit_applied: env.or("AUDIT_APPLIED", false),
        };
        if config.token_cache_capacity == 0 {
            let name = env.name("TOKEN_CACHE_CAPACITY");
            env.problem(format!("{name} must be above 0"));
        }
        config
    }
}
