//! Genesis: the tokens, pools and traders of a simulated chain, drawn from
//! the seed. Only IEEE-exact float operations (+, −, ×, ÷, sqrt) are used,
//! so every platform builds the same world.

use sluice_core::dex::{PoolInfo, TokenMetadata, Venue};
use sluice_core::keys::random_key;
use sluice_core::pool::{PoolState, PriceParams};
use sluice_core::rng::Rng;

use crate::config::ChainConfig;

/// The SPL token program, passed to every venue.
pub const TOKEN_PROGRAM: &str = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";

/// Named tokens: symbol, name, decimals, USD price at genesis. The first
/// three are quote tokens; SOL/USDC pools are the reference pools.
const NAMED_TOKENS: &[(&str, &str, u32, f64)] = &[
    ("USDC", "USD Coin", 6, 1.0),
    ("SOL", "Wrapped SOL", 9, 150.0),
    ("USDT", "Tether USD", 6, 1.0),
    ("JUP", "Jupiter", 6, 0.8),
    ("BONK", "Bonk", 5, 0.000_02),
    ("RAY", "Raydium", 6, 2.0),
    ("ORCA", "Orca", 6, 3.0),
    ("mSOL", "Marinade staked SOL", 9, 170.0),
    ("PYTH", "Pyth Network", 6, 0.4),
    ("WIF", "dogwifhat", 6, 2.5),
    ("JTO", "Jito", 9, 3.0),
];

/// Index of USDC and SOL in the token list.
pub const USDC: usize = 0;
pub const SOL: usize = 1;
const QUOTE_TOKENS: usize = 3;

/// A token and its genesis USD price.
#[derive(Debug, Clone)]
pub struct Token {
    pub meta: TokenMetadata,
    pub usd_price: f64,
}

/// Static and dynamic facts of one pool.
#[derive(Debug, Clone)]
pub struct Pool {
    pub info: PoolInfo,
    pub venue: Venue,
    pub token_a: usize,
    pub token_b: usize,
    pub authority: String,
    /// Concentrated liquidity: tick arrays and oracle accounts.
    pub extra_accounts: Vec<String>,
    pub params: PriceParams,
    /// Price (A in B, raw atoms) at genesis; traders lean back towards it.
    pub genesis_raw_price: f64,
    /// Concentrated liquidity: virtual liquidity.
    pub liquidity: u128,
    /// Order book: mid price, ticks.
    pub mid_ticks: u64,
    pub state: PoolState,
}

/// A trader wallet with one token account per token.
#[derive(Debug, Clone)]
pub struct Trader {
    pub wallet: String,
    pub accounts: Vec<String>,
    pub balances: Vec<u64>,
}

/// Everything genesis creates.
#[derive(Debug, Clone)]
pub struct World {
    pub tokens: Vec<Token>,
    pub pools: Vec<Pool>,
    pub traders: Vec<Trader>,
    /// Pools by token index, for multi-hop routes.
    pub pools_of_token: Vec<Vec<usize>>,
    /// Programs Sluice does not know, and the "pools" they act on.
    pub unknown_programs: Vec<String>,
    pub unknown_pools: Vec<String>,
    /// Order-book log authority.
    pub clob_log_authority: String,
}

fn pow10(exp: u32) -> f64 {
    (0..exp).fold(1.0, |acc, _| acc * 10.0)
}

impl World {
    /// Builds the world of `config` from its seed.
    pub fn genesis(config: &ChainConfig, rng: &mut Rng) -> Self {
        let tokens = make_tokens(config.tokens.max(NAMED_TOKENS.len()), rng);
        let mut pools = Vec::with_capacity(config.pools);
        for i in 0..config.pools {
            let venue = [Venue::ConstantProduct, Venue::ConcentratedLiquidity, Venue::OrderBook][i % 3];
            // The first three pools are SOL/USDC, one per venue: the reference
            // pools the processor prices USD notionals with.
            let (a, b) = if i < 3 {
                (SOL, USDC)
            } else {
                let b = rng.below(QUOTE_TOKENS as u64) as usize;
                let mut a = rng.below(tokens.len() as u64) as usize;
                while a == b || a == USDC || a == 2 {
                    a = rng.below(tokens.len() as u64) as usize;
                }
                (a, b)
            };
            pools.push(make_pool(venue, a, b, &tokens, rng));
        }
        let mut pools_of_token = vec![Vec::new(); tokens.len()];
        for (i, pool) in pools.iter().enumerate() {
            pools_of_token[pool.token_a].push(i);
            pools_of_token[pool.token_b].push(i);
        }
        let traders = (0..config.traders.max(1))
            .map(|_| {
                let wallet = random_key(rng);
                let accounts = tokens.iter().map(|_| random_key(rng)).collect();
                // Ten million UI units of everything: traders trade, they do not run dry.
                let balances = tokens.iter().map(|t| (1e7 * pow10(t.meta.decimals)) as u64).collect();
                Trader { wallet, accounts, balances }
            })
            .collect();
        Self {
            tokens,
            pools,
            traders,
            pools_of_token,
            unknown_programs: (0..3).map(|_| random_key(rng)).collect(),
            unknown_pools: (0..16).map(|_| random_key(rng)).collect(),
            clob_log_authority: random_key(rng),
        }
    }
}

fn make_tokens(count: usize, rng: &mut Rng) -> Vec<Token> {
    (0..count)
        .map(|i| {
            let (symbol, name, decimals, usd_price) = match NAMED_TOKENS.get(i) {
                Some(&(s, n, d, p)) => (s.to_string(), n.to_string(), d, p),
                None => {
                    let decimals = *rng.pick(&[6, 8, 9]);
                    // Between $0.01 and $50.
                    let price = 0.01 + (rng.below(5_000_000) as f64) / 100_000.0;
                    (format!("TKN{i:03}"), format!("Synthetic token {i}"), decimals, price)
                }
            };
            Token { meta: TokenMetadata { mint: random_key(rng), symbol, name, decimals, created_slot: 0 }, usd_price }
        })
        .collect()
}

fn make_pool(venue: Venue, a: usize, b: usize, tokens: &[Token], rng: &mut Rng) -> Pool {
    let (ta, tb) = (&tokens[a], &tokens[b]);
    let (da, db) = (ta.meta.decimals, tb.meta.decimals);
    // $100k to $5M of value locked, half on each side.
    let tvl = 100_000.0 + rng.below(4_900_000) as f64;
    let reserve_a = (tvl / 2.0 / ta.usd_price * pow10(da)) as u64;
    let reserve_b = (tvl / 2.0 / tb.usd_price * pow10(db)) as u64;
    let raw_price = reserve_b as f64 / reserve_a as f64;
    let fee_bps = *rng.pick(&[1, 4, 5, 25, 30]);
    let address = random_key(rng);
    let vault_a = random_key(rng);
    let vault_b = random_key(rng);
    let authority = random_key(rng);
    let extra_accounts = (0..4).map(|_| random_key(rng)).collect();

    let mut state = PoolState { reserve_a, reserve_b, ..PoolState::default() };
    let (mut liquidity, mut mid_ticks, mut tick_size, mut base_lot_size) = (0u128, 0u64, 0u64, 0u64);
    match venue {
        Venue::ConcentratedLiquidity => {
            let sqrt = raw_price.sqrt();
            state.sqrt_price_x64 = (sqrt * 18_446_744_073_709_551_616.0) as u128;
            // Virtual liquidity four times the reserves' geometric mean: a
            // concentrated position moves price less than the same value in
            // a constant-product pool would.
            liquidity = ((reserve_a as f64 * reserve_b as f64).sqrt() * 4.0) as u128;
        }
        Venue::OrderBook => {
            base_lot_size = (pow10(da) / 1000.0).max(1.0) as u64;
            let quote_per_lot = raw_price * base_lot_size as f64;
            // About 1/10,000 of the price per tick.
            tick_size = (quote_per_lot / 10_000.0).max(1.0) as u64;
            mid_ticks = ((quote_per_lot / tick_size as f64) as u64).max(2);
            state.last_price_ticks = mid_ticks;
        }
        Venue::ConstantProduct | Venue::Unspecified => {}
    }
    let params = PriceParams { venue, decimals_a: da, decimals_b: db, tick_size, base_lot_size };
    Pool {
        info: PoolInfo {
            pool: address,
            venue: venue as i32,
            mint_a: ta.meta.mint.clone(),
            mint_b: tb.meta.mint.clone(),
            vault_a,
            vault_b,
            fee_bps,
            tick_size,
            base_lot_size,
            created_slot: 0,
        },
        venue,
        token_a: a,
        token_b: b,
        authority,
        extra_accounts,
        params,
        genesis_raw_price: raw_price,
        liquidity,
        mid_ticks,
        state,
    }
}
