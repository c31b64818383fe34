//! The chain itself: a deterministic generator of blocks.
//!
//! [`Chain::next_block`] draws the next slot's transactions from the seed
//! and applies the successful ones to the pools, so the chain always knows
//! the true state of every pool. Cloning a `Chain` forks an identical future,
//! which is how a server replays any slot range.

use std::collections::HashMap;

use sluice_core::chain::{ChainTransaction, Instruction, TokenBalance};
use sluice_core::dex::{PoolInfo, TokenMetadata, Venue};
use sluice_core::keys::random_signature;
use sluice_core::rng::Rng;
use sluice_core::seq::Seq;

use crate::config::ChainConfig;
use crate::market::{self, Quote};
use crate::swap::Swap;
use crate::world::{Pool, World};

/// What a generated transaction is, for checkers; never sent on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxKind {
    /// A successful swap through `hops` pools.
    Swap { hops: u8 },
    /// A known venue's instruction that cannot be recognised; no effect.
    Malformed(Fault),
    /// A program Sluice does not know; no effect on Sluice's pools.
    UnknownVenue,
}

/// How a malformed transaction is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Instruction data cut short.
    TruncatedData,
    /// Instruction tag or discriminator of another instruction.
    BadTag,
    /// Fewer accounts than the instruction takes.
    MissingAccounts,
    /// Well-formed instruction, but no balance moved and no event was emitted.
    NoEffect,
}

/// A transaction and what it is.
#[derive(Debug, Clone)]
pub struct GeneratedTx {
    pub tx: ChainTransaction,
    pub kind: TxKind,
}

/// One slot's transactions.
#[derive(Debug, Clone)]
pub struct Block {
    pub slot: u64,
    pub block_time_ms: i64,
    pub transactions: Vec<GeneratedTx>,
    /// Indexes of the pools whose state the block changed.
    pub touched_pools: Vec<usize>,
}

/// A deterministic chain.
#[derive(Debug, Clone)]
pub struct Chain {
    config: ChainConfig,
    rng: Rng,
    world: World,
    pool_index: HashMap<String, usize>,
    next_slot: u64,
}

impl Chain {
    /// The chain of `config`, at genesis.
    pub fn new(config: ChainConfig) -> Result<Self, crate::config::InvalidConfig> {
        config.validate()?;
        let mut rng = Rng::seeded(config.seed);
        let world = World::genesis(&config, &mut rng.fork(0));
        let pool_index = world.pools.iter().enumerate().map(|(i, p)| (p.info.pool.clone(), i)).collect();
        Ok(Self { config, rng: rng.fork(1), world, pool_index, next_slot: 0 })
    }

    pub fn config(&self) -> &ChainConfig {
        &self.config
    }

    /// The slot [`Chain::next_block`] will produce.
    pub fn next_slot(&self) -> u64 {
        self.next_slot
    }

    /// The token registry.
    pub fn tokens(&self) -> Vec<TokenMetadata> {
        self.world.tokens.iter().map(|t| t.meta.clone()).collect()
    }

    /// Every pool's static parameters.
    pub fn pool_infos(&self) -> Vec<PoolInfo> {
        self.world.pools.iter().map(|p| p.info.clone()).collect()
    }

    pub fn pools(&self) -> &[Pool] {
        &self.world.pools
    }

    /// Index of the pool with address `pool`.
    pub fn pool_index(&self, pool: &str) -> Option<usize> {
        self.pool_index.get(pool).copied()
    }

    /// The current state of pool `index` on the wire, as of the last slot produced.
    pub fn pool_state(&self, index: usize) -> sluice_core::dex::PoolState {
        let pool = &self.world.pools[index];
        pool.state.to_proto(&pool.info.pool, self.next_slot.saturating_sub(1), &pool.params)
    }

    /// Advances the chain until `slot` is the next one, discarding blocks.
    pub fn skip_to(&mut self, slot: u64) {
        while self.next_slot < slot {
            self.next_block();
        }
    }

    /// Produces the next slot.
    pub fn next_block(&mut self) -> Block {
        let slot = self.next_slot;
        let block_time_ms = self.config.block_time_ms(slot);
        let count = self.config.transactions_in_slot(slot);
        let mut block =
            Block { slot, block_time_ms, transactions: Vec::with_capacity(count as usize), touched_pools: Vec::new() };
        for index in 0..count {
            let generated = self.next_transaction(slot, index, block_time_ms, &mut block.touched_pools);
            block.transactions.push(generated);
        }
        block.touched_pools.sort_unstable();
        block.touched_pools.dedup();
        self.next_slot += 1;
        block
    }

    fn next_transaction(&mut self, slot: u64, index: u32, block_time_ms: i64, touched: &mut Vec<usize>) -> GeneratedTx {
        let mut builder = TxBuilder::new(slot, index, block_time_ms, random_signature(&mut self.rng));
        let draw = self.rng.below(1_000_000) as u32;
        let kind = if draw < self.config.malformed_ppm {
            let fault = *self.rng.pick(&[Fault::TruncatedData, Fault::BadTag, Fault::MissingAccounts, Fault::NoEffect]);
            self.malformed(&mut builder, fault);
            TxKind::Malformed(fault)
        } else if draw < self.config.malformed_ppm + self.config.unknown_venue_ppm {
            self.unknown_venue(&mut builder);
            TxKind::UnknownVenue
        } else {
            let hops = self.swap(&mut builder, touched);
            TxKind::Swap { hops }
        };
        GeneratedTx { tx: builder.finish(), kind }
    }

    /// Draws a first hop: a pool, a direction leaning back towards the
    /// pool's genesis price (arbitrageurs), and a heavy-tailed size.
    fn draw_first_hop(&mut self, trader: usize) -> Option<(usize, Quote)> {
        for _ in 0..8 {
            let pool_idx = self.rng.below(self.world.pools.len() as u64) as usize;
            let pool = &self.world.pools[pool_idx];
            let drift = market::raw_price(pool) / pool.genesis_raw_price - 1.0;
            let sell_a_ppm = (500_000.0 + drift * 2_000_000.0).clamp(200_000.0, 800_000.0) as u32;
            let a_to_b = self.rng.chance_ppm(sell_a_ppm);
            let reserve_in = if a_to_b { pool.state.reserve_a } else { pool.state.reserve_b };
            // 80% of trades are 1–10 bps of the reserve, 18% 10–50, 2% 50–200.
            let (lo, hi) = match self.rng.below(100) {
                0..=79 => (100, 1_000),
                80..=97 => (1_000, 5_000),
                _ => (5_000, 20_000),
            };
            let size_ppm = self.rng.between(lo, hi);
            let token_in = if a_to_b { pool.token_a } else { pool.token_b };
            let wanted = (u128::from(reserve_in) * u128::from(size_ppm) / 1_000_000) as u64;
            let amount = wanted.min(self.world.traders[trader].balances[token_in]);
            if let Some(q) = market::quote(pool, a_to_b, amount) {
                return Some((pool_idx, q));
            }
        }
        None
    }

    /// A successful swap of one to three hops; returns the hop count.
    fn swap(&mut self, b: &mut TxBuilder, touched: &mut Vec<usize>) -> u8 {
        let trader = self.rng.below(self.world.traders.len() as u64) as usize;
        let Some((first_pool, first)) = self.draw_first_hop(trader) else {
            // No pool could quote (practically unreachable); an empty
            // transaction keeps the slot's count and changes nothing.
            return 0;
        };
        let max_hops = if self.rng.chance_ppm(self.config.multi_hop_ppm) { self.rng.between(2, 3) as usize } else { 1 };
        let mut route = vec![(first_pool, first)];
        while route.len() < max_hops {
            let &(last_pool, last) = route.last().expect("route starts with one hop");
            let pool = &self.world.pools[last_pool];
            let token = if last.a_to_b { pool.token_b } else { pool.token_a };
            let candidates: Vec<usize> = self.world.pools_of_token[token]
                .iter()
                .copied()
                .filter(|p| route.iter().all(|(used, _)| used != p))
                .collect();
            if candidates.is_empty() {
                break;
            }
            let next = *self.rng.pick(&candidates);
            let a_to_b = self.world.pools[next].token_a == token;
            match market::quote(&self.world.pools[next], a_to_b, last.amount_out) {
                Some(q) => route.push((next, q)),
                None => break,
            }
        }
        for (pool_idx, quote) in &route {
            let seq = Seq { slot: b.tx.slot, tx_index: b.tx.index, ix_index: b.instructions.len() as u32 };
            self.emit_hop(b, trader, *pool_idx, quote, true);
            self.commit(trader, *pool_idx, quote, seq);
            touched.push(*pool_idx);
        }
        route.len() as u8
    }

    fn commit(&mut self, trader: usize, pool_idx: usize, q: &Quote, seq: Seq) {
        let pool = &mut self.world.pools[pool_idx];
        let (token_in, token_out) = if q.a_to_b { (pool.token_a, pool.token_b) } else { (pool.token_b, pool.token_a) };
        pool.state = q.post;
        pool.state.swaps_applied += 1;
        pool.state.last_applied = Some(seq);
        if pool.venue == Venue::OrderBook {
            pool.mid_ticks = q.post_mid_ticks;
        }
        let balances = &mut self.world.traders[trader].balances;
        balances[token_in] = balances[token_in].saturating_sub(q.amount_in);
        balances[token_out] = balances[token_out].saturating_add(q.amount_out);
    }

    /// Writes one hop's instruction and balances. With `effective` false the
    /// hop failed on chain: no balance moves and no event is emitted.
    fn emit_hop(&self, b: &mut TxBuilder, trader: usize, pool_idx: usize, q: &Quote, effective: bool) {
        let pool = &self.world.pools[pool_idx];
        let t = &self.world.traders[trader];
        let s = pool.state;
        let (post_a, post_b) =
            if effective { (q.post.reserve_a, q.post.reserve_b) } else { (s.reserve_a, s.reserve_b) };
        let (tok_in, tok_out) = if q.a_to_b { (pool.token_a, pool.token_b) } else { (pool.token_b, pool.token_a) };
        let (in_acct, out_acct) = (t.accounts[tok_in].as_str(), t.accounts[tok_out].as_str());
        let (in_pre, out_pre) = (t.balances[tok_in], t.balances[tok_out]);
        let (in_post, out_post) = if effective {
            (in_pre.saturating_sub(q.amount_in), out_pre.saturating_add(q.amount_out))
        } else {
            (in_pre, out_pre)
        };
        let mint_in = self.world.tokens[tok_in].meta.mint.as_str();
        let mint_out = self.world.tokens[tok_out].meta.mint.as_str();
        let (mint_a, mint_b) = (pool.info.mint_a.as_str(), pool.info.mint_b.as_str());

        let ix = match pool.venue {
            Venue::ConcentratedLiquidity => Swap::clmm(pool, t, q),
            Venue::OrderBook => Swap::clob(pool, t, q, &self.world.clob_log_authority),
            Venue::ConstantProduct | Venue::Unspecified => Swap::cpamm(pool, t, q, in_acct, out_acct),
        };
        b.instruction(ix.program, &ix.accounts, ix.data, if effective { ix.event } else { None });
        b.balance(&pool.info.vault_a, mint_a, s.reserve_a, post_a);
        b.balance(&pool.info.vault_b, mint_b, s.reserve_b, post_b);
        b.balance(in_acct, mint_in, in_pre, in_post);
        b.balance(out_acct, mint_out, out_pre, out_post);
    }

    /// A single-hop swap that failed on chain, broken by `fault`.
    fn malformed(&mut self, b: &mut TxBuilder, fault: Fault) {
        let trader = self.rng.below(self.world.traders.len() as u64) as usize;
        let Some((pool_idx, quote)) = self.draw_first_hop(trader) else {
            return;
        };
        self.emit_hop(b, trader, pool_idx, &quote, false);
        let ix = b.instructions.last_mut().expect("emit_hop wrote an instruction");
        match fault {
            Fault::TruncatedData => {
                let keep = self.rng.below(ix.data.len() as u64) as usize;
                ix.data.truncate(keep);
            }
            Fault::BadTag => ix.data[0] ^= 0xA5,
            Fault::MissingAccounts => {
                let keep = self.rng.below(ix.accounts.len() as u64) as usize;
                ix.accounts.truncate(keep);
            }
            Fault::NoEffect => {}
        }
    }

    /// A call into a program Sluice does not know.
    fn unknown_venue(&mut self, b: &mut TxBuilder) {
        let program = self.rng.pick(&self.world.unknown_programs).clone();
        let pool = self.rng.pick(&self.world.unknown_pools).clone();
        let trader = &self.world.traders[self.rng.below(self.world.traders.len() as u64) as usize];
        let len = self.rng.between(8, 40) as usize;
        let data: Vec<u8> = (0..len).map(|_| self.rng.below(256) as u8).collect();
        b.instruction(&program, &[&pool, &trader.wallet.clone()], data, None);
    }
}

/// Assembles a transaction: account table, instructions, balances.
struct TxBuilder {
    tx: ChainTransaction,
    instructions: Vec<Instruction>,
}

impl TxBuilder {
    fn new(slot: u64, index: u32, block_time_ms: i64, signature: String) -> Self {
        Self {
            tx: ChainTransaction { slot, index, signature, block_time_ms, ..ChainTransaction::default() },
            instructions: Vec::new(),
        }
    }

    fn key(&mut self, key: &str) -> u32 {
        let keys = &mut self.tx.account_keys;
        match keys.iter().position(|k| k == key) {
            Some(i) => i as u32,
            None => {
                keys.push(key.to_string());
                (keys.len() - 1) as u32
            }
        }
    }

    fn instruction(&mut self, program: &str, accounts: &[&str], data: Vec<u8>, event: Option<Vec<u8>>) {
        let program_id_index = self.key(program);
        let accounts = accounts.iter().map(|a| self.key(a)).collect();
        self.instructions.push(Instruction { program_id_index, accounts, data, events: event.into_iter().collect() });
    }

    /// Records a balance change; the first touch of an account sets `pre`.
    fn balance(&mut self, account: &str, mint: &str, pre: u64, post: u64) {
        let account_index = self.key(account);
        match self.tx.token_balances.iter_mut().find(|b| b.account_index == account_index) {
            Some(existing) => existing.post_amount = post,
            None => self.tx.token_balances.push(TokenBalance {
                account_index,
                mint: mint.to_string(),
                pre_amount: pre,
                post_amount: post,
            }),
        }
    }

    fn finish(mut self) -> ChainTransaction {
        self.tx.instructions = self.instructions;
        self.tx
    }
}
