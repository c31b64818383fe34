//! `DexHandler`: the swap workload on the Sluice runtime.

use std::sync::Arc;

use prost::Message;
use sluice_coord::generation::Expect;
use sluice_core::cache::BatchEvictingCache;
use sluice_core::chain::ChainTransaction;
use sluice_core::dex::Venue;
use sluice_core::pool::{PoolState, PoolUpdate, PriceParams};
use sluice_core::prices::PriceBoard;
use sluice_core::recognize::{RecognizeError, Recognized, SwapFact, recognize, recognize_view};
use sluice_core::txview::TxView;
use sluice_runtime::sink::SinkError;
use sluice_runtime::sink::{RedisConfig, RedisSink, StateStore};
use sluice_runtime::{Batching, HandleError, Handled, Handler, Publish, Record};
use sluice_runtime::{Dependency, Identity, MessageOutcome, RuntimeMetrics, WorkloadDefaults};
use sluice_service::admin::NotReady;

use crate::config::DexConfig;
use crate::metrics::{DexDependency, DexMetrics, DexOutcome, InvalidKind};
use crate::outputs::{Live, Outputs};
use crate::registry::{self, TokenInfo};
use crate::state::{self, Apply};
use crate::swap_wire::SwapFields;

/// The DEX workload runs as the processor: its series are `sluice_processor_*` (the
/// runtime's and [`crate::metrics::DexMetrics`]'), its admin endpoints and logs say `processor`.
pub const IDENTITY: Identity = Identity { service: "processor", metric_prefix: "sluice_processor", workload: "dex" };

/// What the processor consumes unless told otherwise: its group, the chain's transactions and
/// their dead-letter topic.
pub const DEFAULTS: WorkloadDefaults = WorkloadDefaults {
    group_id: "sluice-processor",
    input_topic: "chain.transactions",
    dlq_topic: "chain.transactions.dlq",
};

/// Recognises swaps, applies pool state to `O` (Redis in production) and
/// hands the runtime the `Swap`s to publish.
#[derive(Debug)]
pub struct DexHandler<O: Outputs = Live> {
    config: DexConfig,
    swaps_topic: Arc<str>,
    outputs: O,
    tokens: Arc<BatchEvictingCache<String, TokenInfo>>,
    board: PriceBoard,
    metrics: DexMetrics,
    invalidations: Option<tokio::task::JoinHandle<()>>,
}

impl<O: Outputs> Drop for DexHandler<O> {
    fn drop(&mut self) {
        if let Some(task) = &self.invalidations {
            task.abort();
        }
    }
}

/// Lua scripts the handler runs (its Redis sink loads them on every connection).
pub fn scripts() -> Vec<String> {
    vec![state::APPLY_SCRIPT.to_string(), state::APPLY_MANY_SCRIPT.to_string()]
}

fn pow10(exp: u32) -> f64 {
    10f64.powi(exp as i32)
}

/// Why the handler could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("redis: {0}")]
    Endpoint(#[from] sluice_coord::endpoint::EndpointError),
    #[error("redis sink: {0}")]
    Sink(#[from] SinkError),
}

impl DexHandler<Live> {
    /// Builds the handler on its own Redis sink (started here, with the
    /// runtime's metrics, writing only into a store that carries `expect`:
    /// [`sluice_runtime::Runtime::recorded_generation`]) and follows token
    /// invalidations.
    pub fn new(
        config: DexConfig,
        redis: &RedisConfig,
        metrics: &RuntimeMetrics,
        expect: Expect,
    ) -> Result<Self, StartError> {
        let client = redis.endpoint.client()?;
        let state = StateStore { prefix: config.redis_prefix.clone(), expect };
        let sink = RedisSink::start(redis, scripts(), metrics, state)?;
        let outputs = Live::new(&config, sink);
        let mut handler = DexHandler::with_outputs(config, outputs, &metrics.registry);
        handler.invalidations = Some(tokio::spawn(registry::follow_invalidations(
            client,
            handler.config.redis_prefix.clone(),
            handler.tokens.clone(),
        )));
        Ok(handler)
    }
}

impl<O: Outputs> DexHandler<O> {
    /// The handler on any outputs (benchmarks use in-memory ones).
    pub fn with_outputs(config: DexConfig, outputs: O, registry: &prometheus::Registry) -> Self {
        let metrics = DexMetrics::new(registry, IDENTITY.metric_prefix);
        Self {
            board: PriceBoard::new(config.reference_tokens.iter().cloned()),
            swaps_topic: Arc::from(config.swaps_topic.as_str()),
            tokens: Arc::new(BatchEvictingCache::new(config.token_cache_capacity)),
            config,
            outputs,
            metrics,
            invalidations: None,
        }
    }

    /// The outputs (benchmarks read what landed).
    pub fn outputs(&self) -> &O {
        &self.outputs
    }

    /// Decimals and symbol of `mint`, from the cache or the registry.
    /// Hits are counted into `hits`, which the caller adds to the metric
    /// once per record: the counter is shared by every worker thread, and
    /// two increments per swap kept its cache line moving between cores.
    async fn token(&self, mint: &str, hits: &mut u64) -> Result<TokenInfo, HandleError> {
        if let Some(info) = self.tokens.get(mint) {
            *hits += 1;
            return Ok(info);
        }
        self.metrics.cache_misses.inc();
        let raw = self.outputs.token(mint).await.map_err(|e| HandleError::transient(Dependency::Redis.as_str(), e))?;
        // A token missing from the registry is waited for (the refresh job
        // adds new tokens), never guessed: the record retries.
        let info = raw.as_deref().and_then(registry::decode).ok_or_else(|| {
            HandleError::transient(DexDependency::Registry.as_str(), format!("token {mint} not in the registry yet"))
        })?;
        let evicted = self.tokens.insert(mint.to_string(), info);
        self.metrics.cache_evictions.inc_by(evicted as u64);
        Ok(info)
    }

    fn is_stable(&self, symbol: &str) -> bool {
        self.config.usd_stables.iter().any(|s| s == symbol)
    }

    /// USD value of a swap: the stable side at 1, else a reference token at
    /// its board price, else 0 (unknown).
    fn notional(&self, a: &TokenInfo, b: &TokenInfo, amount_a: f64, amount_b: f64) -> f64 {
        if self.is_stable(b.symbol.as_str()) {
            amount_b
        } else if self.is_stable(a.symbol.as_str()) {
            amount_a
        } else if let Some(p) = self.board.load(a.symbol.as_str()) {
            amount_a * p
        } else if let Some(p) = self.board.load(b.symbol.as_str()) {
            amount_b * p
        } else {
            0.0
        }
    }

    /// Everything about one swap but its apply: the `Swap` record and the
    /// pool update. Cache hits are counted into `hits` (the metric is bumped
    /// once per record).
    async fn prepare_swap<'a>(&self, fact: &SwapFact<'a>, hits: &mut u64) -> Result<Prepared<'a>, HandleError> {
        let a = self.token(fact.mint_a, hits).await?;
        let b = self.token(fact.mint_b, hits).await?;
        let (in_info, out_info) = if fact.a_to_b { (&a, &b) } else { (&b, &a) };
        let amount_in_ui = fact.amount_in as f64 / pow10(in_info.decimals);
        let amount_out_ui = fact.amount_out as f64 / pow10(out_info.decimals);
        let (amount_a, amount_b) =
            if fact.a_to_b { (amount_in_ui, amount_out_ui) } else { (amount_out_ui, amount_in_ui) };
        let price = match fact.venue {
            // The fill price; an order book's state has no reserves ratio.
            Venue::OrderBook => amount_b / amount_a.max(f64::MIN_POSITIVE),
            venue => PoolState {
                reserve_a: fact.post_reserve_a,
                reserve_b: fact.post_reserve_b,
                sqrt_price_x64: fact.post_sqrt_price_x64.unwrap_or(0),
                ..PoolState::default()
            }
            .price(&PriceParams {
                venue,
                decimals_a: a.decimals,
                decimals_b: b.decimals,
                tick_size: 0,
                base_lot_size: 0,
            }),
        };
        let swap = SwapFields {
            pool: fact.pool,
            venue: fact.venue as i32,
            sequence: (fact.seq.slot, fact.seq.tx_index, fact.seq.ix_index),
            signature: fact.signature,
            trader: fact.trader,
            mint_in: fact.mint_in(),
            mint_out: fact.mint_out(),
            amount_in: fact.amount_in,
            amount_out: fact.amount_out,
            amount_in_ui,
            amount_out_ui,
            price,
            notional_usd: self.notional(&a, &b, amount_a, amount_b),
            block_time_ms: fact.block_time_ms,
        };
        // Only a swap that moves a reference pool (e.g. SOL/USDC) moves the board.
        let moves_board = self.is_stable(b.symbol.as_str()) && self.board.tracks(a.symbol.as_str());
        Ok(Prepared {
            apply: Apply { pool: fact.pool, update: PoolUpdate::from(fact), price, venue: fact.venue as i32 },
            venue: fact.venue,
            payload: swap.encode(),
            board: moves_board.then_some(a.symbol),
        })
    }

    /// A prepared swap whose apply returned `applied`: the `Swap` record to
    /// publish. Redis first, then Kafka (the runtime publishes after the
    /// handler returns): if Redis is down nothing is published, so a retry
    /// after an outage writes no duplicate to dex.swaps. A replay finds the
    /// state already applied (`false`) and publishes the swap again:
    /// dex.swaps is at-least-once (each Swap carries its sequence, for
    /// consumers that deduplicate); the pool state is exactly-once.
    fn finish_swap(&self, prepared: Prepared<'_>, applied: bool) -> Publish {
        if !applied {
            self.metrics.stale_swaps.inc();
        } else if let Some(symbol) = &prepared.board {
            // A replayed old swap must not set a stale price.
            self.board.store(symbol.as_str(), prepared.apply.price);
        }
        self.metrics.swap_counter(prepared.venue).inc();
        Publish {
            topic: self.swaps_topic.clone(),
            key: prepared.apply.pool.as_bytes().to_vec(),
            payload: prepared.payload,
        }
    }
}

/// One swap ready to apply and publish.
struct Prepared<'a> {
    apply: Apply<'a>,
    venue: Venue,
    payload: Vec<u8>,
    /// The reference token whose board price this swap sets, if it does.
    board: Option<registry::Symbol>,
}

/// A recognised record whose swaps are prepared, waiting for their applies.
struct Ready<'a> {
    swaps: Vec<Prepared<'a>>,
    outcome: &'static str,
    block_time_ms: i64,
}

/// Records a batch takes at most: one Redis round trip for all their swaps.
const BATCH_RECORDS: usize = 512;

impl<O: Outputs> DexHandler<O> {
    /// The swaps of one recognised record, prepared in order (a record's
    /// swaps on its pool are a sequence), and the record's outcome.
    async fn prepare<'a>(
        &self,
        recognised: Result<Recognized<'a>, RecognizeError>,
        block_time_ms: i64,
    ) -> Result<Ready<'a>, HandleError> {
        let recognised = recognised.map_err(|e| HandleError::invalid(e.kind(), e.to_string()))?;
        if recognised.unknown_venue > 0 {
            self.metrics.unknown_venue.inc_by(u64::from(recognised.unknown_venue));
        }
        let mut swaps = Vec::with_capacity(recognised.swaps.len());
        let mut hits = 0;
        let mut result = Ok(());
        for fact in &recognised.swaps {
            match self.prepare_swap(fact, &mut hits).await {
                Ok(p) => swaps.push(p),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if hits > 0 {
            self.metrics.cache_hits.inc_by(hits);
        }
        result?;
        let outcome = match (recognised.swaps.is_empty(), recognised.unknown_venue > 0) {
            (false, _) => MessageOutcome::Ok.as_str(),
            (true, true) => DexOutcome::UnknownVenue.as_str(),
            (true, false) => DexOutcome::NoSwap.as_str(),
        };
        Ok(Ready { swaps, outcome, block_time_ms })
    }

    fn finish(&self, ready: Ready<'_>, applied: impl IntoIterator<Item = bool>) -> Handled {
        let publish = ready.swaps.into_iter().zip(applied).map(|(p, applied)| self.finish_swap(p, applied)).collect();
        Handled { outcome: ready.outcome, event_time_ms: Some(ready.block_time_ms), publish }
    }

    /// Applies the swaps of `waiting` records (in order, one round trip for
    /// all) and sets each record's result. A key whose record failed is
    /// added to `failed`.
    async fn apply_waiting<'a>(
        &self,
        waiting: &mut Vec<(usize, Ready<'a>)>,
        results: &mut [Option<Result<Handled, HandleError>>],
        failed: &mut Vec<&'a [u8]>,
        records: &'a [Record],
    ) {
        if waiting.is_empty() {
            return;
        }
        let applies: Vec<Apply<'a>> =
            waiting.iter().flat_map(|(_, r)| r.swaps.iter().map(|s| s.apply.clone())).collect();
        let replies = self.outputs.apply_all(&applies).await;
        let replies: &[Result<bool, SinkError>] = match &replies {
            Ok(replies) => replies,
            Err(e) => &vec![Err(e.clone()); applies.len()],
        };
        let mut at = 0;
        for (i, ready) in waiting.drain(..) {
            let mine = replies.get(at..at + ready.swaps.len());
            at += ready.swaps.len();
            let failure = match mine {
                None => Some(SinkError::NoReply("an apply of the batch")),
                Some(mine) => mine.iter().find_map(|r| r.as_ref().err()).cloned(),
            };
            results[i] = Some(match (failure, mine) {
                (None, Some(mine)) => Ok(self.finish(ready, mine.iter().map(|r| matches!(r, Ok(true))))),
                (e, _) => {
                    failed.extend(records[i].key.as_deref());
                    Err(HandleError::transient(
                        Dependency::Redis.as_str(),
                        e.unwrap_or(SinkError::NoReply("the record's applies")),
                    ))
                }
            });
        }
    }

    /// One record: decode, recognise, prepare, apply (one round trip for
    /// its swaps), finish.
    async fn handle_one(&self, record: &Record) -> Result<Handled, HandleError> {
        let payload = record.payload.as_deref().unwrap_or_default();
        // The borrowed decode accepts exactly what prost accepts; on a bad
        // payload prost decodes it again for the dead letter's reason.
        match TxView::decode(payload) {
            Ok(tx) => {
                let key = record_key(record)?;
                let ready = self.prepare(recognize_view(&tx, key), tx.block_time_ms).await?;
                self.apply_ready(ready).await
            }
            Err(_) => {
                let tx = ChainTransaction::decode(payload)
                    .map_err(|e| HandleError::invalid(InvalidKind::Decode.as_str(), e.to_string()))?;
                // Unreachable while the two decoders agree (tests/txview.rs in
                // sluice-core); if they ever did not, prost's verdict wins.
                let key = record_key(record)?;
                let ready = self.prepare(recognize(&tx, key), tx.block_time_ms).await?;
                self.apply_ready(ready).await
            }
        }
    }

    async fn apply_ready(&self, ready: Ready<'_>) -> Result<Handled, HandleError> {
        if ready.swaps.is_empty() {
            return Ok(self.finish(ready, []));
        }
        let applies: Vec<Apply<'_>> = ready.swaps.iter().map(|s| s.apply.clone()).collect();
        let replies = self
            .outputs
            .apply_all(&applies)
            .await
            .map_err(|e| HandleError::transient(Dependency::Redis.as_str(), e))?;
        let applied = replies
            .into_iter()
            .collect::<Result<Vec<bool>, SinkError>>()
            .map_err(|e| HandleError::transient(Dependency::Redis.as_str(), e))?;
        Ok(self.finish(ready, applied))
    }

    /// A batch: every record decoded, recognised and prepared in order, then
    /// all their swaps applied in one round trip. A record the borrowed
    /// decoder refuses goes alone, after what came before it has landed; a
    /// key whose record failed keeps its later records out of the batch.
    async fn handle_many(&self, records: &[Record]) -> Vec<Result<Handled, HandleError>> {
        let mut results: Vec<Option<Result<Handled, HandleError>>> = (0..records.len()).map(|_| None).collect();
        let mut waiting: Vec<(usize, Ready<'_>)> = Vec::new();
        let mut failed: Vec<&[u8]> = Vec::new();
        // One view for the batch: its vectors are allocated once.
        let mut view = TxView::default();
        for (i, record) in records.iter().enumerate() {
            let key = record.key.as_deref();
            if key.is_some_and(|k| failed.contains(&k)) {
                results[i] = Some(Err(HandleError::transient(
                    Dependency::Redis.as_str(),
                    "an earlier record of this pool failed",
                )));
                continue;
            }
            let payload = record.payload.as_deref().unwrap_or_default();
            let prepared = match (view.decode_into(payload), record_key(record)) {
                (Ok(()), Ok(k)) => self.prepare(recognize_view(&view, k), view.block_time_ms).await,
                (Ok(_), Err(e)) => Err(e),
                (Err(_), _) => {
                    self.apply_waiting(&mut waiting, &mut results, &mut failed, records).await;
                    let result = self.handle_one(record).await;
                    if matches!(result, Err(HandleError::Transient { .. })) {
                        failed.extend(key);
                    }
                    results[i] = Some(result);
                    continue;
                }
            };
            match prepared {
                Ok(ready) if ready.swaps.is_empty() => results[i] = Some(Ok(self.finish(ready, []))),
                Ok(ready) => waiting.push((i, ready)),
                Err(e) => {
                    if matches!(e, HandleError::Transient { .. }) {
                        failed.extend(key);
                    }
                    results[i] = Some(Err(e));
                }
            }
        }
        self.apply_waiting(&mut waiting, &mut results, &mut failed, records).await;
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(HandleError::transient(Dependency::Handler.as_str(), "record left without a result"))
                })
            })
            .collect()
    }
}

fn record_key(record: &Record) -> Result<&str, HandleError> {
    record
        .key
        .as_deref()
        .and_then(|k| std::str::from_utf8(k).ok())
        .ok_or_else(|| HandleError::invalid(InvalidKind::Key.as_str(), "record key is missing or not UTF-8"))
}

impl<O: Outputs> Handler for DexHandler<O> {
    async fn handle(&self, record: &Record) -> Result<Handled, HandleError> {
        self.handle_one(record).await
    }

    fn handle_batch<'a>(
        &'a self,
        records: &'a [Record],
    ) -> impl Future<Output = Vec<Result<Handled, HandleError>>> + Send + 'a {
        self.handle_many(records)
    }

    /// In batches: a batch's swaps cost one Redis round trip, like one record's.
    fn batching(&self) -> Batching {
        Batching::Batch { max_records: BATCH_RECORDS }
    }

    fn ready(&self) -> Result<(), NotReady> {
        self.outputs.ready()
    }

    fn state_generation(&self) -> Option<String> {
        self.outputs.state_generation()
    }
}
