//! The pipelined producer.
//!
//! Sending one record and awaiting its acknowledgement before the next caps
//! throughput at one record per round trip. Instead every send enqueues the
//! record and keeps its delivery future in a bounded FIFO; the oldest is
//! awaited only when the FIFO is full or librdkafka's own queue is
//! (`QueueFull`). Acknowledgements are reported in send order, so a caller
//! can advance a cursor past everything acknowledged so far.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::FutureExt;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;

use crate::KafkaConfig;

/// A failed delivery.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("cannot create the producer: {0}")]
    Create(#[source] KafkaError),
    #[error("enqueueing a record for {topic} failed: {source}")]
    Enqueue {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("delivery to {topic} failed: {source}")]
    Delivery {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("delivery to {topic} was cancelled (producer shut down)")]
    Cancelled { topic: String },
    #[error("flushing the producer failed: {0}")]
    Flush(#[source] KafkaError),
    #[error("fetching topic metadata failed: {0}")]
    Metadata(#[source] KafkaError),
}

/// Where an acknowledged record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked<T> {
    pub partition: i32,
    pub offset: i64,
    /// The caller's tag for the record, handed back in send order.
    pub tag: T,
}

/// A producer with at most `max_in_flight` unacknowledged records.
#[allow(missing_debug_implementations)]
pub struct PipelinedProducer<T> {
    producer: FutureProducer,
    in_flight: VecDeque<(String, T, DeliveryFuture)>,
    max_in_flight: usize,
}

impl<T> PipelinedProducer<T> {
    /// An idempotent, `acks=all` producer (see [`KafkaConfig::producer`]).
    pub fn new(config: &KafkaConfig, max_in_flight: usize) -> Result<Self, ProduceError> {
        let producer = config.producer().create().map_err(ProduceError::Create)?;
        Ok(Self { producer, in_flight: VecDeque::with_capacity(max_in_flight), max_in_flight: max_in_flight.max(1) })
    }

    /// Connects and learns `topic`'s partitions now rather than on the
    /// first send (a paced sender then starts on time).
    pub fn warm_up(&self, topic: &str, timeout: Duration) -> Result<(), ProduceError> {
        use rdkafka::producer::Producer;
        self.producer.client().fetch_metadata(Some(topic), timeout).map(|_| ()).map_err(ProduceError::Metadata)
    }

    /// Records sent but not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Enqueues a record, partitioned by its key. Returns the
    /// acknowledgements this call had to wait for (oldest first) to make
    /// room; usually none.
    pub async fn send(
        &mut self,
        topic: &str,
        key: &[u8],
        payload: &[u8],
        tag: T,
    ) -> Result<Vec<Acked<T>>, ProduceError> {
        self.send_to(topic, None, key, payload, tag).await
    }

    /// [`send`](Self::send) to a chosen partition (`None`: by key).
    pub async fn send_to(
        &mut self,
        topic: &str,
        partition: Option<i32>,
        key: &[u8],
        payload: &[u8],
        tag: T,
    ) -> Result<Vec<Acked<T>>, ProduceError> {
        let mut acked = Vec::new();
        while self.in_flight.len() >= self.max_in_flight {
            acked.push(self.await_oldest().await?);
        }
        loop {
            let mut record = FutureRecord::to(topic).key(key).payload(payload);
            record.partition = partition;
            match self.producer.send_result(record) {
                Ok(future) => {
                    self.in_flight.push_back((topic.to_string(), tag, future));
                    return Ok(acked);
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    if self.in_flight.is_empty() {
                        // Nothing of ours to wait for: let librdkafka drain.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    } else {
                        acked.push(self.await_oldest().await?);
                    }
                }
                Err((source, _)) => {
                    return Err(ProduceError::Enqueue { topic: topic.to_string(), source });
                }
            }
        }
    }

    /// Acknowledgements that have already arrived, in send order, without waiting.
    pub fn poll_acked(&mut self) -> Result<Vec<Acked<T>>, ProduceError> {
        let mut acked = Vec::new();
        while let Some((_, _, future)) = self.in_flight.front_mut() {
            let Some(result) = future.now_or_never() else { break };
            let (topic, tag, _) = self.in_flight.pop_front().expect("front exists");
            acked.push(resolve(topic, tag, result)?);
        }
        Ok(acked)
    }

    /// Waits for every record in flight; returns their acknowledgements.
    pub async fn flush(&mut self) -> Result<Vec<Acked<T>>, ProduceError> {
        let mut acked = Vec::with_capacity(self.in_flight.len());
        while !self.in_flight.is_empty() {
            acked.push(self.await_oldest().await?);
        }
        self.producer.flush(Timeout::After(Duration::from_secs(30))).map_err(ProduceError::Flush)?;
        Ok(acked)
    }

    async fn await_oldest(&mut self) -> Result<Acked<T>, ProduceError> {
        let (topic, tag, future) = self.in_flight.pop_front().expect("called with records in flight");
        resolve(topic, tag, future.await)
    }
}

fn resolve<T, E>(topic: String, tag: T, result: Result<OwnedDeliveryResult, E>) -> Result<Acked<T>, ProduceError> {
    match result {
        Ok(Ok(delivery)) => Ok(Acked { partition: delivery.partition, offset: delivery.offset, tag }),
        Ok(Err((source, _))) => Err(ProduceError::Delivery { topic, source }),
        Err(_) => Err(ProduceError::Cancelled { topic }),
    }
}
