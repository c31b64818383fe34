//! The DEX workload's settings.

use sluice_service::env::EnvReader;
use sluice_service::settings::{Default, Setting};

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

/// `SWAPS_TOPIC`.
pub const SWAPS_TOPIC: Setting = Setting {
    name: "SWAPS_TOPIC",
    kind: "topic",
    default: Default::Value("dex.swaps"),
    what: "where recognised swaps go, keyed by pool",
    why: "the topic the chart creates and the demo reads",
};

/// `REDIS_PREFIX`.
pub const REDIS_PREFIX: Setting = Setting {
    name: "REDIS_PREFIX",
    kind: "text",
    default: Default::Value("sluice:"),
    what: "the prefix of every Redis key and channel the workload uses",
    why: "the scheduler's jobs and the ingest use the same default, so one Redis serves them all",
};

/// `TOKEN_CACHE_CAPACITY`.
pub const TOKEN_CACHE_CAPACITY: Setting = Setting {
    name: "TOKEN_CACHE_CAPACITY",
    kind: "entries",
    default: Default::Value("10000"),
    what: "token decimals cached in memory; at the cap about 10% are evicted at once",
    why: "a choice, not measured on a real chain: a few hundred times the simulated chain's 24 tokens, a few MB at most",
};

/// `USD_STABLES`.
pub const USD_STABLES: Setting = Setting {
    name: "USD_STABLES",
    kind: "symbol list",
    default: Default::Value("USDC,USDT"),
    what: "symbols priced at 1 USD",
    why: "the two largest USD stablecoins",
};

/// `REFERENCE_TOKENS`.
pub const REFERENCE_TOKENS: Setting = Setting {
    name: "REFERENCE_TOKENS",
    kind: "symbol list",
    default: Default::Value("SOL"),
    what: "symbols whose USD price comes from their pools against a stable, to price the rest",
    why: "the chain's native token, in the most pools",
};

/// `AUDIT_APPLIED`.
pub const AUDIT_APPLIED: Setting = Setting {
    name: "AUDIT_APPLIED",
    kind: "true or false",
    default: Default::Value("false"),
    what: "also append every applied sequence to a per-pool Redis list, so a checker can prove no swap was applied twice or out of order",
    why: "a test's tool: one more Redis write per swap and a list that grows without end",
};

/// The DEX workload's settings, read after the runtime's from the same prefix.
pub const SETTINGS: &[Setting] =
    &[SWAPS_TOPIC, REDIS_PREFIX, TOKEN_CACHE_CAPACITY, USD_STABLES, REFERENCE_TOKENS, AUDIT_APPLIED];

impl DexConfig {
    /// Reads [`SETTINGS`]; problems are collected in `env`.
    pub fn read(env: &mut EnvReader) -> Self {
        let config = Self {
            swaps_topic: env.setting(&SWAPS_TOPIC),
            redis_prefix: env.setting(&REDIS_PREFIX),
            token_cache_capacity: env.setting(&TOKEN_CACHE_CAPACITY),
            usd_stables: list(&env.setting::<String>(&USD_STABLES)),
            reference_tokens: list(&env.setting::<String>(&REFERENCE_TOKENS)),
            audit_applied: env.setting(&AUDIT_APPLIED),
        };
        if config.token_cache_capacity == 0 {
            let name = env.name(TOKEN_CACHE_CAPACITY.name);
            env.problem(format!("{name} must be above 0"));
        }
        config
    }
}
