//! The `Chain` gRPC API over a real socket: `Subscribe` from any slot
//! streams exactly the seeded chain, twice the same; `GetPool(pool, S)`
//! equals the state rebuilt by applying the stream's swaps up to S.

use std::collections::HashMap;
use std::time::Duration;

use prost::Message;
use sluice_chainsim::server::{ChainNode, ServerOptions};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::clock::now_ms;
use sluice_core::pool::PoolState;
use sluice_core::recognize::recognize;
use sluice_core::route::record_keys;
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::chain::v1::{
    ChainTransaction, GetHeadRequest, GetPoolRequest, ListPoolsRequest, ListTokensRequest, SubscribeRequest,
    subscribe_update::Update,
};
use tonic::transport::Channel;

/// A fast chain whose first 60 slots are already due when it starts.
fn config() -> ChainConfig {
    ChainConfig {
        seed: 99,
        genesis_ms: now_ms() - 60 * 50,
        slot_ms: 50,
        tx_per_sec: 4_000, // 200 per slot
        pools: 12,
        ..ChainConfig::default()
    }
}

async fn start(config: ChainConfig) -> ChainClient<Channel> {
    let chain = Chain::new(config).expect("valid config");
    let (listener, addr) = ChainNode::bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let node = ChainNode::start(chain, &ServerOptions::default());
    tokio::spawn(node.serve(listener, std::future::pending()));
    ChainClient::connect(format!("http://{addr}")).await.expect("connect")
}

/// Collects the transactions of `slots` slots from `from_slot`, checking
/// each slot's end marker.
async fn subscribe(client: &mut ChainClient<Channel>, from_slot: u64, slots: u64) -> Vec<ChainTransaction> {
    let mut stream = client.subscribe(SubscribeRequest { from_slot }).await.expect("subscribe").into_inner();
    let (mut out, mut in_slot, mut next_slot) = (Vec::new(), 0u32, from_slot);
    while next_slot < from_slot + slots {
        let update = tokio::time::timeout(Duration::from_secs(30), stream.message())
            .await
            .expect("stream stalled")
            .expect("stream error")
            .expect("stream ended");
        match update.update.expect("an update") {
            Update::Transaction(tx) => {
                assert_eq!(tx.slot, next_slot, "transactions arrive slot by slot");
                assert_eq!(tx.index, in_slot, "in index order");
                in_slot += 1;
                out.push(tx);
            }
            Update::SlotEnd(end) => {
                assert_eq!((end.slot, end.transaction_count), (next_slot, in_slot));
                next_slot += 1;
                in_slot = 0;
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_is_deterministic_from_any_slot() {
    let config = config();
    let mut client = start(config.clone()).await;
    let mut local = Chain::new(config).expect("valid config");
    let expected: Vec<Vec<u8>> =
        (0..40).flat_map(|_| local.next_block().transactions).map(|g| g.tx.encode_to_vec()).collect();

    let first: Vec<Vec<u8>> = subscribe(&mut client, 0, 40).await.iter().map(Message::encode_to_vec).collect();
    let second: Vec<Vec<u8>> = subscribe(&mut client, 0, 40).await.iter().map(Message::encode_to_vec).collect();
    assert!(first.len() > 7_000, "{} transactions", first.len());
    assert_eq!(first, expected, "the stream is the seeded chain");
    assert_eq!(first, second, "same seed, same stream");

    // From a later slot: exactly the tail of the same chain.
    let from_17: Vec<Vec<u8>> = subscribe(&mut client, 17, 10).await.iter().map(Message::encode_to_vec).collect();
    let offset = first.iter().position(|b| ChainTransaction::decode(b.as_slice()).expect("decodes").slot == 17);
    let offset = offset.expect("slot 17 in the first stream");
    assert_eq!(from_17, first[offset..offset + from_17.len()]);

    // The stream follows the head: slots beyond it arrive as they are produced.
    let head = client.get_head(GetHeadRequest {}).await.expect("head").into_inner().head_slot;
    let beyond = subscribe(&mut client, head + 5, 2).await;
    assert!(beyond.iter().all(|tx| tx.slot >= head + 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pool_equals_the_stream_replayed_up_to_that_slot() {
    let config = config();
    let mut client = start(config.clone()).await;
    let genesis = Chain::new(config).expect("valid config");
    let pools = client.list_pools(ListPoolsRequest {}).await.expect("pools").into_inner().pools;
    assert_eq!(pools.len(), 12);
    let tokens = client.list_tokens(ListTokensRequest {}).await.expect("tokens").into_inner().tokens;
    assert!(tokens.iter().any(|t| t.symbol == "SOL" && t.decimals == 9));

    let mut states: HashMap<String, PoolState> =
        genesis.pools().iter().map(|p| (p.info.pool.clone(), p.state)).collect();
    let stream = subscribe(&mut client, 0, 30).await;
    let mut by_slot: Vec<Vec<ChainTransaction>> = vec![Vec::new(); 30];
    for tx in stream {
        let slot = tx.slot as usize;
        by_slot[slot].push(tx);
    }
    for (slot, txs) in by_slot.iter().enumerate() {
        for tx in txs {
            for key in record_keys(tx) {
                if let Ok(recognised) = recognize(tx, key) {
                    for swap in &recognised.swaps {
                        states.get_mut(swap.pool).expect("known pool").apply(swap);
                    }
                }
            }
        }
        if slot % 7 == 3 || slot == 29 {
            for (i, info) in pools.iter().enumerate() {
                let truth = client
                    .get_pool(GetPoolRequest { pool: info.pool.clone(), at_slot: slot as u64 })
                    .await
                    .expect("get_pool")
                    .into_inner();
                let replayed = states[&info.pool].to_proto(&info.pool, slot as u64, &genesis.pools()[i].params);
                assert_eq!(truth, replayed, "pool {i} at slot {slot}");
            }
        }
    }
    let moved = pools.iter().filter(|p| states[&p.pool].swaps_applied > 0).count();
    assert_eq!(moved, pools.len(), "every pool traded within 30 slots");

    let unknown = client.get_pool(GetPoolRequest { pool: "nope".into(), at_slot: 1 }).await.expect_err("unknown pool");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    let future = client
        .get_pool(GetPoolRequest { pool: pools[0].pool.clone(), at_slot: 1 << 40 })
        .await
        .expect_err("future slot");
    assert_eq!(future.code(), tonic::Code::OutOfRange);
}
