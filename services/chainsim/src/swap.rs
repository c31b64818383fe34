//! One swap hop as an instruction of its venue's program: the instruction's
//! accounts and data, and the event the program logs when the hop succeeds.

use sluice_core::keys;
use sluice_core::venue::{self, clmm, clob, cpamm};

use crate::market::Quote;
use crate::world::{Pool, TOKEN_PROGRAM, Trader};

/// A hop's instruction, borrowed from the world it was drawn from.
#[derive(Debug)]
pub struct Swap<'w> {
    pub program: &'w str,
    pub accounts: Vec<&'w str>,
    pub data: Vec<u8>,
    /// What the program logs (none for the constant-product venue, whose
    /// swaps are read from balances).
    pub event: Option<Vec<u8>>,
}

impl<'w> Swap<'w> {
    /// A concentrated-liquidity swap and its `Traded` event.
    pub fn clmm(pool: &'w Pool, t: &'w Trader, q: &Quote) -> Self {
        let data = clmm::Swap {
            amount: q.amount_in,
            other_amount_threshold: q.amount_out - q.amount_out / 100,
            sqrt_price_limit: if q.a_to_b { 4_295_048_016 } else { 79_226_673_515_401_279_992_447_579_055 },
            amount_specified_is_input: true,
            a_to_b: q.a_to_b,
        };
        let event = clmm::Traded {
            pool: keys::key_bytes(&pool.info.pool).unwrap_or([0; 32]),
            a_to_b: q.a_to_b,
            pre_sqrt_price: q.pre_sqrt_price_x64,
            post_sqrt_price: q.post.sqrt_price_x64,
            input_amount: q.amount_in,
            output_amount: q.amount_out,
            lp_fee: q.amount_in * u64::from(pool.info.fee_bps) / 10_000,
        };
        let (acct_a, acct_b) = (t.accounts[pool.token_a].as_str(), t.accounts[pool.token_b].as_str());
        let x = &pool.extra_accounts;
        Swap {
            program: venue::CLMM_PROGRAM,
            accounts: vec![
                TOKEN_PROGRAM,
                &t.wallet,
                &pool.info.pool,
                acct_a,
                &pool.info.vault_a,
                acct_b,
                &pool.info.vault_b,
                &x[0],
                &x[1],
                &x[2],
                &x[3],
            ],
            data: data.encode(),
            event: Some(event.encode()),
        }
    }

    /// An order-book swap order and its `FillSummary` event.
    pub fn clob(pool: &'w Pool, t: &'w Trader, q: &Quote, log_authority: &'w str) -> Self {
        let side = if q.a_to_b { clob::Side::Ask } else { clob::Side::Bid };
        let limit = if q.a_to_b { q.price_ticks - q.price_ticks / 20 } else { q.price_ticks + q.price_ticks / 20 };
        let data =
            clob::SwapOrder { side, price_in_ticks: limit, num_base_lots: q.lots, min_base_lots_to_fill: q.lots };
        let event = clob::FillSummary {
            market: keys::key_bytes(&pool.info.pool).unwrap_or([0; 32]),
            side,
            base_lots_filled: q.lots,
            quote_atoms_filled: q.quote_atoms,
            last_price_in_ticks: q.price_ticks,
            fee_in_quote_atoms: q.fee,
        };
        let (acct_a, acct_b) = (t.accounts[pool.token_a].as_str(), t.accounts[pool.token_b].as_str());
        Swap {
            program: venue::CLOB_PROGRAM,
            accounts: vec![
                venue::CLOB_PROGRAM,
                log_authority,
                &pool.info.pool,
                &t.wallet,
                acct_a,
                acct_b,
                &pool.info.vault_a,
                &pool.info.vault_b,
                TOKEN_PROGRAM,
            ],
            data: data.encode(),
            event: Some(event.encode()),
        }
    }

    /// A constant-product swap (base in); `in_acct` and `out_acct` are the
    /// trader's accounts of the tokens it sells and buys.
    pub fn cpamm(pool: &'w Pool, t: &'w Trader, q: &Quote, in_acct: &'w str, out_acct: &'w str) -> Self {
        let data = cpamm::SwapBaseIn { amount_in: q.amount_in, minimum_amount_out: q.amount_out - q.amount_out / 100 };
        Swap {
            program: venue::CPAMM_PROGRAM,
            accounts: vec![
                TOKEN_PROGRAM,
                &pool.info.pool,
                &pool.authority,
                &pool.info.vault_a,
                &pool.info.vault_b,
                in_acct,
                out_acct,
                &t.wallet,
            ],
            data: data.encode(),
            event: None,
        }
    }
}
