//! The `Chain` gRPC service, paced in real time.
//!
//! A head task produces each slot when the wall clock reaches its block
//! time and records pool states for `GetPool`. Every subscriber replays the
//! chain on its own copy of the generator (forked from the nearest
//! checkpoint), so a subscriber far behind costs CPU, not shared memory, and
//! always sees exactly the transactions the head produced.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::Stream;
use sluice_core::clock::now_ms;
use sluice_core::pool::PriceParams;
use sluice_proto::chain::v1::chain_server::{Chain as ChainApi, ChainServer};
use sluice_proto::chain::v1::{
    GetHeadRequest, GetHeadResponse, GetPoolRequest, ListPoolsRequest, ListPoolsResponse, ListTokensRequest,
    ListTokensResponse, SlotEnd, SubscribeRequest, SubscribeUpdate, subscribe_update,
};
use sluice_proto::dex::v1::{PoolInfo, PoolState, TokenMetadata};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};

use crate::generator::Chain;
use crate::history::{History, HistoryError};

/// A checkpoint of the generator is kept every this many slots.
const CHECKPOINT_EVERY: u64 = 256;
/// Updates buffered per subscriber before the stream waits for the client.
const SUBSCRIBER_BUFFER: usize = 4_096;

/// Server tuning that does not change the chain.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Pool states kept per pool for `GetPool` (one per slot that changed it).
    pub history_per_pool: usize,
    /// Added to every `GetPool` answer (a real node's query time).
    pub get_pool_latency: Duration,
    /// Pools whose `GetPool` takes `slow_factor` × the latency.
    pub slow_pools: Vec<String>,
    pub slow_factor: u32,
    /// Ends every subscription with an error after this many updates, as a
    /// dropped connection would (tests of reconnection).
    pub cut_streams_after: Option<u64>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            history_per_pool: 50_000,
            get_pool_latency: Duration::ZERO,
            slow_pools: Vec::new(),
            slow_factor: 100,
            cut_streams_after: None,
        }
    }
}

#[derive(Debug)]
struct Shared {
    tokens: Vec<TokenMetadata>,
    pools: Vec<PoolInfo>,
    params: Vec<PriceParams>,
    pool_index: std::collections::HashMap<String, usize>,
    /// Generators at slots 0, CHECKPOINT_EVERY, 2·CHECKPOINT_EVERY, …
    checkpoints: RwLock<Vec<Chain>>,
    history: RwLock<History>,
    /// Last slot produced, `None` before the first.
    head: watch::Sender<Option<u64>>,
    genesis_ms: i64,
    slot_ms: u64,
    get_pool_latency: Duration,
    slow_pools: std::collections::HashSet<String>,
    slow_latency: Duration,
    cut_streams_after: Option<u64>,
}

/// The running chain node.
#[derive(Debug, Clone)]
pub struct ChainNode {
    shared: Arc<Shared>,
}

impl ChainNode {
    /// Starts the head task for `chain` (at genesis) and returns the node.
    pub fn start(chain: Chain, options: &ServerOptions) -> Self {
        let (head, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            tokens: chain.tokens(),
            pools: chain.pool_infos(),
            params: chain.pools().iter().map(|p| p.params).collect(),
            pool_index: chain.pool_infos().iter().enumerate().map(|(i, p)| (p.pool.clone(), i)).collect(),
            checkpoints: RwLock::new(vec![chain.clone()]),
            history: RwLock::new(History::new(&chain, options.history_per_pool)),
            head,
            genesis_ms: chain.config().genesis_ms,
            slot_ms: chain.config().slot_ms,
            get_pool_latency: options.get_pool_latency,
            slow_pools: options.slow_pools.iter().cloned().collect(),
            slow_latency: options.get_pool_latency * options.slow_factor,
            cut_streams_after: options.cut_streams_after,
        });
        tokio::spawn(run_head(Arc::downgrade(&shared), chain));
        Self { shared }
    }

    /// Last slot produced.
    pub fn head(&self) -> Option<u64> {
        *self.shared.head.borrow()
    }

    /// Waits until the chain has produced `slot`.
    pub async fn wait_for_slot(&self, slot: u64) {
        let mut rx = self.shared.head.subscribe();
        let _ = rx.wait_for(|h| h.is_some_and(|h| h >= slot)).await;
    }

    /// The tonic service for this node.
    pub fn service(&self) -> ChainServer<ChainNode> {
        ChainServer::new(self.clone()).max_decoding_message_size(16 << 20)
    }

    /// Serves the node on `listener` until `shutdown` resolves.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), tonic::transport::Error> {
        tonic::transport::Server::builder()
            .add_service(self.service())
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
            .await
    }

    /// Binds `addr` and returns the listener and the address bound (port 0 picks one).
    pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        Ok((listener, local))
    }

    fn checkpoint_before(&self, slot: u64) -> Chain {
        let checkpoints = self.shared.checkpoints.read().unwrap_or_else(|e| e.into_inner());
        let i = checkpoints.partition_point(|c| c.next_slot() <= slot);
        checkpoints[i.saturating_sub(1)].clone()
    }
}

/// Produces each slot at its block time, forever (until the runtime stops).
/// Produces the chain's slots on time, for as long as the node exists (a
/// handle, its service or a subscription): a node dropped stops its head.
async fn run_head(node: std::sync::Weak<Shared>, mut chain: Chain) {
    loop {
        if node.strong_count() == 0 {
            return;
        }
        let slot = chain.next_slot();
        let due = chain.config().block_time_ms(slot);
        let wait = due - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let (next, block) = match tokio::task::spawn_blocking(move || {
            let block = chain.next_block();
            (chain, block)
        })
        .await
        {
            Ok(produced) => produced,
            Err(e) => {
                tracing::error!(error = %e, "Chain head task failed; the chain stops");
                return;
            }
        };
        chain = next;
        let Some(shared) = node.upgrade() else { return };
        shared.history.write().unwrap_or_else(|e| e.into_inner()).record(&block, &chain);
        if chain.next_slot().is_multiple_of(CHECKPOINT_EVERY) {
            shared.checkpoints.write().unwrap_or_else(|e| e.into_inner()).push(chain.clone());
        }
        shared.head.send_replace(Some(block.slot));
    }
}

/// Streams slots from `chain.next_slot()` on into `tx`, following the head.
async fn stream_slots(shared: Arc<Shared>, mut chain: Chain, tx: mpsc::Sender<Result<SubscribeUpdate, Status>>) {
    let mut head = shared.head.subscribe();
    let mut budget = shared.cut_streams_after.unwrap_or(u64::MAX);
    // Sends one update, or cuts the stream once the budget is spent; false
    // when the stream is over.
    let send = async |update: SubscribeUpdate, budget: &mut u64| {
        if *budget == 0 {
            let _ = tx.send(Err(Status::unavailable("stream cut (simulated)"))).await;
            return false;
        }
        *budget -= 1;
        tx.send(Ok(update)).await.is_ok()
    };
    loop {
        let slot = chain.next_slot();
        if head.wait_for(|h| h.is_some_and(|h| h >= slot)).await.is_err() {
            return;
        }
        let (next, block) = match tokio::task::spawn_blocking(move || {
            let block = chain.next_block();
            (chain, block)
        })
        .await
        {
            Ok(produced) => produced,
            Err(_) => return,
        };
        chain = next;
        let count = block.transactions.len() as u32;
        for generated in block.transactions {
            let update = SubscribeUpdate { update: Some(subscribe_update::Update::Transaction(generated.tx)) };
            if !send(update, &mut budget).await {
                return; // the client went away, or the stream was cut
            }
        }
        let end = SubscribeUpdate {
            update: Some(subscribe_update::Update::SlotEnd(SlotEnd {
                slot: block.slot,
                transaction_count: count,
                block_time_ms: block.block_time_ms,
            })),
        };
        if !send(end, &mut budget).await {
            return;
        }
    }
}

type UpdateStream = Pin<Box<dyn Stream<Item = Result<SubscribeUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl ChainApi for ChainNode {
    type SubscribeStream = UpdateStream;

    async fn subscribe(&self, request: Request<SubscribeRequest>) -> Result<Response<UpdateStream>, Status> {
        let from_slot = request.into_inner().from_slot;
        let mut chain = self.checkpoint_before(from_slot);
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            // Replaying up to `from_slot` is CPU work: keep it off the IO threads.
            let replayed = tokio::task::spawn_blocking(move || {
                chain.skip_to(from_slot);
                chain
            })
            .await;
            if let Ok(chain) = replayed {
                stream_slots(shared, chain, tx).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_pool(&self, request: Request<GetPoolRequest>) -> Result<Response<PoolState>, Status> {
        let GetPoolRequest { pool, at_slot } = request.into_inner();
        let latency = if self.shared.slow_pools.contains(&pool) {
            self.shared.slow_latency
        } else {
            self.shared.get_pool_latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let index = *self.shared.pool_index.get(&pool).ok_or_else(|| Status::not_found(format!("no pool {pool}")))?;
        let state = self.shared.history.read().unwrap_or_else(|e| e.into_inner()).state_at(index, at_slot).map_err(
            |e| match e {
                HistoryError::Future { .. } => Status::out_of_range(e.to_string()),
                HistoryError::Evicted { .. } => Status::failed_precondition(e.to_string()),
            },
        )?;
        let params = self.shared.params[index];
        Ok(Response::new(state.to_proto(&pool, at_slot, &params)))
    }

    async fn list_tokens(&self, _: Request<ListTokensRequest>) -> Result<Response<ListTokensResponse>, Status> {
        Ok(Response::new(ListTokensResponse {
            tokens: self.shared.tokens.clone(),
            head_slot: self.head().unwrap_or(0),
        }))
    }

    async fn list_pools(&self, _: Request<ListPoolsRequest>) -> Result<Response<ListPoolsResponse>, Status> {
        Ok(Response::new(ListPoolsResponse { pools: self.shared.pools.clone(), head_slot: self.head().unwrap_or(0) }))
    }

    async fn get_head(&self, _: Request<GetHeadRequest>) -> Result<Response<GetHeadResponse>, Status> {
        let head = self.head().ok_or_else(|| Status::unavailable("the chain has not produced a slot yet"))?;
        Ok(Response::new(GetHeadResponse {
            head_slot: head,
            head_block_time_ms: self.shared.genesis_ms + (head * self.shared.slot_ms) as i64,
        }))
    }
}
