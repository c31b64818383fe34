//! Swap recognition: one Kafka record (a transaction keyed by one pool) →
//! the swaps it made on that pool, or a typed reason why it cannot be read.
//!
//! Only the instructions that route to the record's key are looked at, so a
//! multi-hop transaction, published once per pool, is recognised hop by hop
//! in each pool's own partition. Amounts come from the pool vaults' token
//! balances; price state (sqrt price, last fill) from the venue's event.
//! Nothing here allocates per swap: facts borrow from the transaction.

use crate::chain::ChainTransaction;
use crate::dex::Venue;
use crate::keys;
use crate::seq::Seq;
use crate::txview::{BalanceView, InstructionView, TxView};
use crate::venue::{self, LayoutError, clmm, clob, cpamm};

/// One swap on one pool, as the chain recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SwapFact<'a> {
    pub venue: Venue,
    pub seq: Seq,
    pub pool: &'a str,
    pub signature: &'a str,
    pub trader: &'a str,
    /// True when token A was sold for token B.
    pub a_to_b: bool,
    pub mint_a: &'a str,
    pub mint_b: &'a str,
    /// Raw atoms the pool received and paid out.
    pub amount_in: u64,
    pub amount_out: u64,
    /// Vault balances after the swap.
    pub post_reserve_a: u64,
    pub post_reserve_b: u64,
    pub post_sqrt_price_x64: Option<u128>,
    pub last_price_ticks: Option<u64>,
    pub block_time_ms: i64,
}

impl<'a> SwapFact<'a> {
    /// Mint of the token the trader sold.
    pub fn mint_in(&self) -> &'a str {
        if self.a_to_b { self.mint_a } else { self.mint_b }
    }

    /// Mint of the token the trader bought.
    pub fn mint_out(&self) -> &'a str {
        if self.a_to_b { self.mint_b } else { self.mint_a }
    }
}

/// What one record holds for its pool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recognized<'a> {
    pub swaps: Vec<SwapFact<'a>>,
    /// Instructions of programs Sluice does not know (counted, skipped).
    pub unknown_venue: u32,
}

/// Why a record cannot be recognised; every variant is dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecognizeError {
    #[error("instruction {ix}: program index {index} outside {len} account keys")]
    ProgramOutOfRange { ix: u32, index: u32, len: usize },
    #[error("instruction {ix}: {venue} takes {need} accounts, got {have}")]
    MissingAccounts { ix: u32, venue: &'static str, have: usize, need: usize },
    #[error("instruction {ix}: account index {index} outside the account keys")]
    AccountOutOfRange { ix: u32, index: u32 },
    #[error("instruction {ix}: {source}")]
    Layout {
        ix: u32,
        #[source]
        source: LayoutError,
    },
    #[error("instruction {ix}: no {event} event")]
    MissingEvent { ix: u32, event: &'static str },
    #[error("instruction {ix}: no token balance for the {role}")]
    MissingBalance { ix: u32, role: &'static str },
    #[error("instruction {ix}: {reason}")]
    Inconsistent { ix: u32, reason: String },
}

impl RecognizeError {
    /// A short, stable label for metrics and dead-letter headers.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ProgramOutOfRange { .. } | Self::AccountOutOfRange { .. } => "account_index",
            Self::MissingAccounts { .. } => "missing_accounts",
            Self::Layout { .. } => "layout",
            Self::MissingEvent { .. } => "missing_event",
            Self::MissingBalance { .. } => "missing_balance",
            Self::Inconsistent { .. } => "inconsistent",
        }
    }
}

/// Recognises the swaps a record keyed by `key` made on that pool.
pub fn recognize<'a>(tx: &'a ChainTransaction, key: &str) -> Result<Recognized<'a>, RecognizeError> {
    recognize_view(&TxView::of(tx), key)
}

/// [`recognize`] on a borrowed decode (what the processor uses: no owned
/// transaction is ever built).
pub fn recognize_view<'a>(tx: &TxView<'a>, key: &str) -> Result<Recognized<'a>, RecognizeError> {
    let mut out = Recognized::default();
    for (ix_index, ix) in tx.instructions.iter().enumerate() {
        if tx.instruction_key(ix) != key {
            continue;
        }
        let ctx = Ctx { tx, ix, ix_index: ix_index as u32 };
        let program = *tx.account_keys.get(ix.program_id_index as usize).ok_or(RecognizeError::ProgramOutOfRange {
            ix: ctx.ix_index,
            index: ix.program_id_index,
            len: tx.account_keys.len(),
        })?;
        match venue::venue_of_program(program) {
            None => out.unknown_venue += 1,
            Some(Venue::ConstantProduct) => out.swaps.push(ctx.constant_product()?),
            Some(Venue::ConcentratedLiquidity) => out.swaps.push(ctx.concentrated()?),
            Some(Venue::OrderBook) => out.swaps.push(ctx.order_book()?),
            Some(Venue::Unspecified) => out.unknown_venue += 1,
        }
    }
    Ok(out)
}

/// One instruction being recognised.
struct Ctx<'v, 'a> {
    tx: &'v TxView<'a>,
    ix: &'v InstructionView<'a>,
    ix_index: u32,
}

/// A vault's balance change.
struct Movement<'a> {
    balance: BalanceView<'a>,
    delta: i128,
}

impl<'a> Ctx<'_, 'a> {
    fn require_accounts(&self, venue: &'static str, need: usize) -> Result<(), RecognizeError> {
        let have = self.ix.accounts.as_slice().len();
        if have < need {
            return Err(RecognizeError::MissingAccounts { ix: self.ix_index, venue, have, need });
        }
        Ok(())
    }

    fn account_index(&self, position: usize) -> u32 {
        self.ix.accounts.as_slice()[position]
    }

    fn account(&self, position: usize) -> Result<&'a str, RecognizeError> {
        let index = self.account_index(position);
        self.tx
            .account_keys
            .get(index as usize)
            .copied()
            .ok_or(RecognizeError::AccountOutOfRange { ix: self.ix_index, index })
    }

    fn movement(&self, position: usize, role: &'static str) -> Result<Movement<'a>, RecognizeError> {
        let index = self.account_index(position);
        let balance = self
            .tx
            .token_balances
            .iter()
            .find(|b| b.account_index == index)
            .copied()
            .ok_or(RecognizeError::MissingBalance { ix: self.ix_index, role })?;
        let delta = i128::from(balance.post_amount) - i128::from(balance.pre_amount);
        Ok(Movement { balance, delta })
    }

    fn layout<T>(&self, result: Result<T, LayoutError>) -> Result<T, RecognizeError> {
        result.map_err(|source| RecognizeError::Layout { ix: self.ix_index, source })
    }

    fn event(&self, event: &'static str) -> Result<&'a [u8], RecognizeError> {
        self.ix.first_event.ok_or(RecognizeError::MissingEvent { ix: self.ix_index, event })
    }

    fn inconsistent(&self, reason: String) -> RecognizeError {
        RecognizeError::Inconsistent { ix: self.ix_index, reason }
    }

    /// Checks that an event's raw pool key is the instruction's pool.
    fn check_pool(&self, pool: &str, raw: &[u8; 32]) -> Result<(), RecognizeError> {
        if keys::key_bytes(pool).as_ref() != Some(raw) {
            return Err(self.inconsistent(format!("event names another pool than {pool}")));
        }
        Ok(())
    }

    /// Reads direction and amounts from the two vaults: one must receive
    /// what the other pays out.
    fn direction(&self, a: &Movement<'_>, b: &Movement<'_>) -> Result<(bool, u64, u64), RecognizeError> {
        match (a.delta.signum(), b.delta.signum()) {
            (1, -1) => Ok((true, a.delta as u64, (-b.delta) as u64)),
            (-1, 1) => Ok((false, b.delta as u64, (-a.delta) as u64)),
            _ => Err(self.inconsistent(format!(
                "vault balances moved by {} and {}, not in opposite directions",
                a.delta, b.delta
            ))),
        }
    }

    fn fact(&self, venue: Venue, pool: &'a str, trader: &'a str, a: &Movement<'a>, b: &Movement<'a>) -> SwapFact<'a> {
        SwapFact {
            venue,
            seq: Seq { slot: self.tx.slot, tx_index: self.tx.index, ix_index: self.ix_index },
            pool,
            signature: self.tx.signature,
            trader,
            mint_a: a.balance.mint,
            mint_b: b.balance.mint,
            post_reserve_a: a.balance.post_amount,
            post_reserve_b: b.balance.post_amount,
            block_time_ms: self.tx.block_time_ms,
            ..SwapFact::default()
        }
    }

    fn constant_product(&self) -> Result<SwapFact<'a>, RecognizeError> {
        use cpamm::accounts as acc;
        self.require_accounts("constant-product swap", acc::COUNT)?;
        let data = self.layout(cpamm::SwapBaseIn::decode(self.ix.data))?;
        let pool = self.account(acc::POOL)?;
        let trader = self.account(acc::USER_OWNER)?;
        let a = self.movement(acc::VAULT_A, "token A vault")?;
        let b = self.movement(acc::VAULT_B, "token B vault")?;
        let (a_to_b, amount_in, amount_out) = self.direction(&a, &b)?;
        if amount_in != data.amount_in {
            return Err(self.inconsistent(format!("pool received {amount_in}, instruction sold {}", data.amount_in)));
        }
        if amount_out < data.minimum_amount_out {
            return Err(
                self.inconsistent(format!("pool paid {amount_out}, below the minimum {}", data.minimum_amount_out))
            );
        }
        Ok(SwapFact { a_to_b, amount_in, amount_out, ..self.fact(Venue::ConstantProduct, pool, trader, &a, &b) })
    }

    fn concentrated(&self) -> Result<SwapFact<'a>, RecognizeError> {
        use clmm::accounts as acc;
        self.require_accounts("concentrated-liquidity swap", acc::COUNT)?;
        let data = self.layout(clmm::Swap::decode(self.ix.data))?;
        let traded = self.layout(clmm::Traded::decode(self.event("Traded")?))?;
        let pool = self.account(acc::POOL)?;
        let trader = self.account(acc::TOKEN_AUTHORITY)?;
        self.check_pool(pool, &traded.pool)?;
        let a = self.movement(acc::VAULT_A, "token A vault")?;
        let b = self.movement(acc::VAULT_B, "token B vault")?;
        let (a_to_b, amount_in, amount_out) = self.direction(&a, &b)?;
        if a_to_b != data.a_to_b || a_to_b != traded.a_to_b {
            return Err(self.inconsistent("direction differs between instruction, event and vaults".into()));
        }
        if (amount_in, amount_out) != (traded.input_amount, traded.output_amount) {
            return Err(self.inconsistent(format!(
                "vaults moved {amount_in} in / {amount_out} out, event says {} / {}",
                traded.input_amount, traded.output_amount
            )));
        }
        Ok(SwapFact {
            a_to_b,
            amount_in,
            amount_out,
            post_sqrt_price_x64: Some(traded.post_sqrt_price),
            ..self.fact(Venue::ConcentratedLiquidity, pool, trader, &a, &b)
        })
    }

    fn order_book(&self) -> Result<SwapFact<'a>, RecognizeError> {
        use clob::accounts as acc;
        self.require_accounts("order-book swap", acc::COUNT)?;
        let order = self.layout(clob::SwapOrder::decode(self.ix.data))?;
        let fill = self.layout(clob::FillSummary::decode(self.event("FillSummary")?))?;
        let market = self.account(acc::MARKET)?;
        let trader = self.account(acc::TRADER)?;
        self.check_pool(market, &fill.market)?;
        let base = self.movement(acc::BASE_VAULT, "base vault")?;
        let quote = self.movement(acc::QUOTE_VAULT, "quote vault")?;
        let (a_to_b, amount_in, amount_out) = self.direction(&base, &quote)?;
        // An ask sells base (token A) into the book.
        if order.side != fill.side || a_to_b != (fill.side == clob::Side::Ask) {
            return Err(self.inconsistent("side differs between order, fill and vaults".into()));
        }
        let (base_atoms, quote_atoms) = if a_to_b { (amount_in, amount_out) } else { (amount_out, amount_in) };
        let expected_quote = match fill.side {
            clob::Side::Bid => fill.quote_atoms_filled.checked_add(fill.fee_in_quote_atoms),
            clob::Side::Ask => fill.quote_atoms_filled.checked_sub(fill.fee_in_quote_atoms),
        };
        if fill.base_lots_filled == 0 || base_atoms % fill.base_lots_filled != 0 || expected_quote != Some(quote_atoms)
        {
            return Err(self.inconsistent(format!(
                "vaults moved {base_atoms} base / {quote_atoms} quote atoms, fill says {} lots / {} quote atoms",
                fill.base_lots_filled, fill.quote_atoms_filled
            )));
        }
        Ok(SwapFact {
            a_to_b,
            amount_in,
            amount_out,
            last_price_ticks: Some(fill.last_price_in_ticks),
            ..self.fact(Venue::OrderBook, market, trader, &base, &quote)
        })
    }
}
