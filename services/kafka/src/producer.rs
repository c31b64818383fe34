//! The pipelined producer.
//!
//! Sending one record and awaiting its acknowledgement before the next caps
//! throughput at one record per round trip. Instead every send enqueues the
//! record and keeps its delivery future in a bounded FIFO; the oldest is
//! awaited only when the FIFO is full or librdkafka's own queue is
//! (`QueueFull`). Acknowledgements are reported in send order, so a caller
//! can advance a cursor past everything acknowledged so far.
//!
//! A transactional producer ([`PipelinedProducer::transactional`]) sends
//! inside a transaction that [`PipelinedProducer::commit`] ends (and the next
//! begins), and reports acknowledgements only then: a record is acknowledged
//! to the caller once `read_committed` readers can see it. Creating it
//! fences every earlier producer with the same `transactional.id` at the
//! broker: their open transaction is aborted and their next send or commit
//! fails with [`ProduceError::Fenced`].

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
    /// A newer producer with the same `transactional.id` took over.
    #[error("fenced: a newer producer with this transactional.id took over ({0})")]
    Fenced(#[source] KafkaError),
    #[error("transaction: {0}")]
    Transaction(#[source] KafkaError),
}

impl ProduceError {
    /// A Kafka error as `ProduceError::Fenced` when a newer producer with
    /// the same transactional id fenced this one, else through `other`.
    fn classify(source: KafkaError, other: impl FnOnce(KafkaError) -> Self) -> Self {
        let fenced = matches!(
            source.rdkafka_error_code(),
            Some(RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch)
        );
        if fenced { Self::Fenced(source) } else { other(source) }
    }
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
    /// Transactional: the records acknowledged in the open transaction
    /// (reported at its commit), and how long a transaction call may take.
    transaction: Option<(Vec<Acked<T>>, Duration)>,
}

impl<T: Send + 'static> PipelinedProducer<T> {
    /// An idempotent, `acks=all` producer (see [`KafkaConfig::producer`]).
    pub fn new(config: &KafkaConfig, max_in_flight: usize) -> Result<Self, ProduceError> {
        let producer = config.producer().create().map_err(ProduceError::Create)?;
        Ok(Self {
            producer,
            in_flight: VecDeque::with_capacity(max_in_flight),
            max_in_flight: max_in_flight.max(1),
            transaction: None,
        })
    }

    /// A transactional producer with `transactional_id`, its first
    /// transaction begun. Its creation fences every earlier producer with
    /// that id. `timeout` bounds each transaction call and, as
    /// `transaction.timeout.ms`, how long the broker keeps a transaction of
    /// a producer that died open (until another producer with the id starts;
    /// `read_committed` readers wait at it meanwhile). A record not delivered
    /// within it fails (`message.timeout.ms`, which librdkafka requires to be
    /// no longer).
    pub async fn transactional(
        config: &KafkaConfig,
        max_in_flight: usize,
        transactional_id: &str,
        timeout: Duration,
    ) -> Result<Self, ProduceError> {
        let producer: FutureProducer = config
            .producer()
            .set("transactional.id", transactional_id)
            .set("transaction.timeout.ms", timeout.as_millis().to_string())
            .set("message.timeout.ms", timeout.as_millis().to_string())
            .create()
            .map_err(ProduceError::Create)?;
        let p = producer.clone();
        blocking(move || {
            p.init_transactions(Timeout::After(timeout))?;
            p.begin_transaction()
        })
        .await?;
        Ok(Self {
            producer,
            in_flight: VecDeque::with_capacity(max_in_flight),
            max_in_flight: max_in_flight.max(1),
            transaction: Some((Vec::new(), timeout)),
        })
    }

    /// Transactional: waits for every record in flight, commits the
    /// transaction, begins the next, and returns the acknowledgements of
    /// everything it committed. A failed commit is aborted (its records are
    /// never visible) and returned as the error. Not transactional: what
    /// [`PipelinedProducer::poll_acked`] returns.
    pub async fn commit(&mut self) -> Result<Vec<Acked<T>>, ProduceError> {
        let Some((_, timeout)) = self.transaction else { return self.poll_acked() };
        while !self.in_flight.is_empty() {
            let acked = self.await_oldest().await?;
            self.uncommitted().push(acked);
        }
        let p = self.producer.clone();
        let committed = blocking(move || {
            let result = p.commit_transaction(Timeout::After(timeout));
            if let Err(KafkaError::Transaction(e)) = &result
                && e.txn_requires_abort()
            {
                let _ = p.abort_transaction(Timeout::After(timeout));
            }
            result?;
            p.begin_transaction()
        })
        .await;
        let acked = std::mem::take(self.uncommitted());
        committed.map(|()| acked)
    }

    fn uncommitted(&mut self) -> &mut Vec<Acked<T>> {
        &mut self.transaction.as_mut().expect("transactional").0
    }

    /// Reports `acked` now, or at the commit if transactional.
    fn report(&mut self, acked: Acked<T>, out: &mut Vec<Acked<T>>) {
        match &mut self.transaction {
            Some((uncommitted, _)) => uncommitted.push(acked),
            None => out.push(acked),
        }
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
            let oldest = self.await_oldest().await?;
            self.report(oldest, &mut acked);
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
                        let oldest = self.await_oldest().await?;
                        self.report(oldest, &mut acked);
                    }
                }
                Err((source, _)) => {
                    return Err(ProduceError::classify(source, |source| ProduceError::Enqueue {
                        topic: topic.to_string(),
                        source,
                    }));
                }
            }
        }
    }

    /// Acknowledgements that have already arrived, in send order, without
    /// waiting (transactional: none before the commit).
    pub fn poll_acked(&mut self) -> Result<Vec<Acked<T>>, ProduceError> {
        let mut acked = Vec::new();
        while let Some((_, _, future)) = self.in_flight.front_mut() {
            let Some(result) = future.now_or_never() else { break };
            let (topic, tag, _) = self.in_flight.pop_front().expect("front exists");
            let arrived = resolve(topic, tag, result)?;
            self.report(arrived, &mut acked);
        }
        Ok(acked)
    }

    /// Waits for every record in flight; returns their acknowledgements
    /// (transactional: commits them).
    pub async fn flush(&mut self) -> Result<Vec<Acked<T>>, ProduceError> {
        if self.transaction.is_some() {
            return self.commit().await;
        }
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
        Ok(Err((source, _))) => Err(ProduceError::classify(source, |source| ProduceError::Delivery { topic, source })),
        Err(_) => Err(ProduceError::Cancelled { topic }),
    }
}

/// Runs a blocking transaction call off the async threads.
async fn blocking(call: impl FnOnce() -> Result<(), KafkaError> + Send + 'static) -> Result<(), ProduceError> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result.map_err(|e| ProduceError::classify(e, ProduceError::Transaction)),
        Err(_) => Err(ProduceError::Transaction(KafkaError::Canceled)),
    }
}
