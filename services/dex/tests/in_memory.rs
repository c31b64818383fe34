//! The DEX handler's whole path (decode → recognise → token cache → apply →
//! publish) with in-memory outputs: replaying a seeded chain record by
//! record rebuilds every pool's true state, a replay changes nothing, and
//! malformed records are classified for the dead-letter topic.

use std::sync::Arc;

use prost::Message;
use sluice_chainsim::{Chain, ChainConfig, TxKind};
use sluice_core::route::record_keys;
use sluice_dex::outputs::InMemory;
use sluice_dex::{DexConfig, DexHandler};
use sluice_runtime::{HandleError, Handler, Record};
use sluice_service::env::EnvReader;

fn handler(chain: &Chain) -> DexHandler<InMemory> {
    let tokens = sluice_dex::registry::entries(&chain.tokens());
    let config = DexConfig::read(&mut EnvReader::from_vars("X_", Vec::new()));
    DexHandler::with_outputs(config, InMemory::new(tokens), &prometheus::Registry::new())
}

#[tokio::test]
async fn replaying_the_chain_in_memory_rebuilds_every_pool_and_replays_are_no_ops() {
    let mut chain = Chain::new(ChainConfig { seed: 21, tx_per_sec: 5_000, ..ChainConfig::default() }).expect("valid");
    let handler = handler(&chain);
    let topic: Arc<str> = Arc::from("t");
    let (mut offset, mut invalid, mut malformed, mut published) = (0i64, 0u64, 0u64, 0usize);
    let mut records = Vec::new();
    while offset < 20_000 {
        for g in chain.next_block().transactions {
            malformed += u64::from(matches!(g.kind, TxKind::Malformed(_)));
            let payload = g.tx.encode_to_vec();
            for key in record_keys(&g.tx) {
                let record = Record {
                    topic: topic.clone(),
                    partition: 0,
                    offset,
                    key: Some(key.as_bytes().to_vec()),
                    payload: Some(payload.clone()),
                    timestamp_ms: None,
                    redriven: false,
                };
                offset += 1;
                match handler.handle(&record).await {
                    Ok(handled) => published += handled.publish.len(),
                    Err(HandleError::Invalid { .. }) => invalid += 1,
                    Err(e) => panic!("unexpected transient error: {e}"),
                }
                records.push(record);
            }
        }
    }
    assert_eq!(invalid, malformed, "every malformed transaction, and only those, is invalid");
    for pool in chain.pools() {
        let got = handler.outputs().pool(&pool.info.pool);
        match got {
            Some(state) => assert_eq!(state, pool.state, "pool {}", pool.info.pool),
            None => assert_eq!(pool.state.swaps_applied, 0),
        }
    }
    // Replaying every record (at-least-once delivery) changes no state.
    let mut republished = 0;
    for record in records.iter().take(5_000) {
        republished += handler.handle(record).await.map_or(0, |h| h.publish.len());
    }
    for pool in chain.pools() {
        if let Some(state) = handler.outputs().pool(&pool.info.pool) {
            assert_eq!(state, pool.state, "a replay changed pool {}", pool.info.pool);
        }
    }
    assert!(published > 0, "swaps are published");
    assert!(republished > 0, "replays publish again (dex.swaps is at-least-once)");
}
