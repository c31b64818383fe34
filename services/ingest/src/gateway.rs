//! One ingest instance: standby until it holds the lease, then active.
//!
//! Active, it reads the cursor, subscribes to the chain from the slot after
//! it, and sends every transaction as one record per pool touched through
//! the pipelined producer (idempotent, `acks=all`, bounded in flight; a full
//! queue waits for the oldest delivery, never for each one). By default the
//! producer is transactional, with a `transactional.id` the active/standby
//! pair shares: becoming active fences the previous holder at the broker (a
//! paused ex-active instance cannot add a record once it wakes: its open
//! transaction is aborted, its next send or commit refused), and each
//! transaction interval commits what was sent. The cursor advances as slots
//! complete (every record acknowledged, and committed when transactional)
//! and is written to Redis fenced by the lease. A dropped stream is
//! re-opened with backoff and resumes exactly where sending stopped; a lost
//! lease or a fence stops sending at once and the instance goes back to
//! standby. A restart or a takeover resumes after the stored cursor, and
//! what was committed past it is found in the topic and not sent again
//! ([`crate::resent`]): the topic holds each record once. (Without
//! transactions it is sent again and counted.)

use std::time::{Duration, Instant};

use prost::Message;
use sluice_coord::Claim;
use sluice_coord::keeper::{self, Kept};
use sluice_core::route::record_keys;
use sluice_kafka::producer::Acked;
use sluice_kafka::tail::newest_records;
use sluice_kafka::{PipelinedProducer, ProduceError};
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::chain::v1::{GetHeadRequest, SubscribeRequest, SubscribeUpdate, subscribe_update::Update};
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::config::{IngestConfig, LostCursor, Start};
use crate::metrics::{Metrics, Operation, Reconnect};
use crate::resent::{AlreadySent, Position};
use crate::store::{Store, Written};
use crate::tracker::{Next, SlotTracker};

/// Why an active period ended.
#[derive(Debug)]
enum End {
    Shutdown,
    LeaseLost,
    /// Kafka refused this instance's producer: a newer active instance
    /// initialised the shared transactional id.
    Fenced,
    Failed(String),
}

impl From<ProduceError> for End {
    fn from(e: ProduceError) -> Self {
        if matches!(e, ProduceError::Fenced(_)) { Self::Fenced } else { Self::Failed(e.to_string()) }
    }
}

/// What a record carries through the producer: its sequence number, when it
/// was sent, and its place in the chain.
type Tag = (u64, Instant, Position);

/// How long reading the topic's newest records may take at a period's start.
const TAIL_TIMEOUT: Duration = Duration::from_secs(10);

/// One ingest instance.
#[derive(Debug, Clone)]
pub struct Gateway {
    config: IngestConfig,
    store: Store,
    metrics: Metrics,
    chain: ChainClient<Channel>,
}

/// `SLUICE_INGEST_CHAIN_URL` is not a URI.
#[derive(Debug, thiserror::Error)]
#[error("SLUICE_INGEST_CHAIN_URL={url:?}: {source}")]
pub struct BadChainUrl {
    pub url: String,
    #[source]
    pub source: tonic::codegen::http::uri::InvalidUri,
}

/// The chain client, connected lazily (the chain may come up later).
pub fn chain_client(url: &str) -> Result<ChainClient<Channel>, BadChainUrl> {
    sluice_service::connections::declare("chain", url);
    let endpoint = Channel::from_shared(url.to_string())
        .map_err(|source| BadChainUrl { url: url.to_string(), source })?
        .connect_timeout(Duration::from_secs(5));
    Ok(ChainClient::new(endpoint.connect_lazy()).max_decoding_message_size(64 << 20))
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// The keeper's verdict: `Some` once the lease must be given up.
type Lost = watch::Receiver<Option<keeper::Lost>>;

async fn lease_lost(rx: &mut Lost) {
    let _ = rx.wait_for(Option::is_some).await;
}

impl Gateway {
    pub fn new(config: IngestConfig, store: Store, metrics: Metrics, chain: ChainClient<Channel>) -> Self {
        Self { config, store, metrics, chain }
    }

    /// Runs until `shutdown` is set: standby, active, and back.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        tokio::spawn(self.clone().follow_head(shutdown.clone()));
        loop {
            let Some(claim) = self.acquire(&mut shutdown).await else { return };
            self.metrics.leases_acquired.inc();
            self.metrics.active.set(1);
            tracing::info!(instance = self.config.instance_id, token = claim.token, "Active: holding the ingest lease");
            let kept = self.keep(&claim);
            let end = self.active(&claim, kept.subscribe(), shutdown.clone()).await;
            drop(kept);
            self.metrics.active.set(0);
            match end {
                End::Shutdown => {
                    let _ = sluice_coord::release(&mut self.store.connection(), &claim).await;
                    tracing::info!("Lease released");
                    return;
                }
                End::LeaseLost => {
                    self.metrics.leases_lost.inc();
                    tracing::warn!("Lease lost: stopped sending; back to standby");
                }
                End::Fenced => {
                    self.metrics.fenced.inc();
                    tracing::warn!(
                        "Fenced by Kafka: a newer active instance initialised the shared transactional id, and this \
                         instance's open transaction was aborted; back to standby"
                    );
                }
                End::Failed(e) => {
                    self.metrics.error(Operation::Active);
                    tracing::error!(error = %e, "Streaming failed; releasing the lease and starting over from the cursor");
                    let _ = sluice_coord::release(&mut self.store.connection(), &claim).await;
                    tokio::select! {
                        () = tokio::time::sleep(self.config.reconnect_max) => {}
                        () = stopped(&mut shutdown) => return,
                    }
                }
            }
        }
    }

    /// Standby: tries for the lease every third of its time.
    async fn acquire(&self, shutdown: &mut watch::Receiver<bool>) -> Option<Claim> {
        let keys = &self.store.keys;
        let mut logged = false;
        loop {
            if *shutdown.borrow() {
                return None;
            }
            let mut conn = self.store.connection();
            match sluice_coord::acquire(
                &mut conn,
                &keys.lease,
                &keys.fence,
                &self.config.instance_id,
                self.config.lease_ttl,
            )
            .await
            {
                Ok(Some(claim)) => return Some(claim),
                Ok(None) if !logged => {
                    tracing::info!(instance = self.config.instance_id, "Standby: another instance is active");
                    logged = true;
                }
                Ok(None) => {}
                Err(e) => {
                    self.metrics.error(Operation::Lease);
                    tracing::warn!(error = %e, "Lease attempt failed (Redis)");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.lease_ttl / 3) => {}
                () = stopped(shutdown) => return None,
            }
        }
    }

    /// Keeps the lease alive with the one rule every holder follows
    /// ([`sluice_coord::keeper`]: bounded calls, given up at half the lease).
    fn keep(&self, claim: &Claim) -> Kept {
        let (store, renewed, ttl) = (self.store.clone(), claim.clone(), self.config.lease_ttl);
        let metrics = self.metrics.clone();
        keeper::keep(
            ttl,
            move || {
                let (mut conn, claim) = (store.connection(), renewed.clone());
                async move { sluice_coord::renew(&mut conn, &claim, ttl).await }
            },
            move |error| {
                metrics.error(Operation::Renew);
                tracing::warn!(error, "Lease renewal failed");
            },
        )
    }

    /// Keeps the head and lag gauges current.
    async fn follow_head(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            if let Ok(head) = self.chain.clone().get_head(GetHeadRequest {}).await {
                let head = head.into_inner().head_slot as i64;
                self.metrics.head_slot.set(head);
                if self.metrics.active.get() == 1 {
                    self.metrics.slots_behind.set((head - self.metrics.cursor_slot.get()).max(0));
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = stopped(&mut shutdown) => return,
            }
        }
    }

    /// The topic's newest records: what this period need not send again.
    /// Unreadable (`errors{operation="tail"}`), the period does not start:
    /// sending blind would add duplicates.
    async fn already_sent(&self) -> Result<AlreadySent, End> {
        let (kafka, topic) = (self.config.kafka.clone(), self.config.topic.clone());
        let read = tokio::task::spawn_blocking(move || newest_records(&kafka, &topic, TAIL_TIMEOUT)).await;
        match read.map_err(|e| e.to_string()).and_then(|tails| tails.map_err(|e| e.to_string())) {
            Ok(tails) => Ok(AlreadySent::from_tails(&tails)),
            Err(e) => {
                self.metrics.error(Operation::Tail);
                Err(End::Failed(format!("cannot read the topic's newest records, so what it holds already: {e}")))
            }
        }
    }

    async fn first_slot(&self, cursor: Option<u64>) -> Result<u64, tonic::Status> {
        Ok(match (cursor, self.config.start) {
            (Some(c), _) => c + 1,
            (None, Start::Genesis) => 0,
            (None, Start::Slot(s)) => s,
            (None, Start::Head) => {
                let head = self.chain.clone().get_head(GetHeadRequest {}).await?;
                head.into_inner().head_slot
            }
        })
    }

    /// Ends an active period on a store that is not the cursor's: nothing
    /// is sent until its generation is back (or the instance restarts on the
    /// new one, and meets the lost-cursor check).
    fn replaced(&self) -> End {
        self.metrics.state_store_replaced.set(1);
        End::Failed(format!(
            "the Redis state store was replaced ({}generation is not the generation this instance opened): not \
             streaming. Restore Redis (streaming resumes), or restart the ingest on the new store \
             (docs/deploying.md, \"When Redis loses its data\")",
            self.config.redis_prefix
        ))
    }

    /// One active period, until shutdown, a lost lease or a failure.
    async fn active(&self, claim: &Claim, lost: Lost, shutdown: watch::Receiver<bool>) -> End {
        let (producer, session) = match self.open(claim).await {
            Ok(opened) => opened,
            Err(end) => return end,
        };
        // Transactional: each tick commits what was sent, then records the cursor.
        let every = if self.config.transactional_id.is_some() {
            self.config.transaction_interval
        } else {
            self.config.cursor_interval
        };
        let tick = tokio::time::interval(every);
        self.stream(&mut Period { claim, producer, session, lost, shutdown, tick }).await
    }

    /// The period's start: the store is the cursor's, the first slot, the producer (which
    /// fences the previous active instance), what the topic holds already; a chosen start is
    /// recorded at once.
    async fn open(&self, claim: &Claim) -> Result<(PipelinedProducer<Tag>, Session), End> {
        match self.store.check_generation().await {
            Ok(Ok(())) => self.metrics.state_store_replaced.set(0),
            Ok(Err(_)) => return Err(self.replaced()),
            Err(e) => return Err(End::Failed(format!("reading the generation marker: {e}"))),
        }
        let cursor = self.store.position().await.map_err(|e| End::Failed(format!("reading the cursor: {e}")))?;
        let first = self
            .first_slot(cursor)
            .await
            .map_err(|e| End::Failed(format!("reading the chain head: {}", e.message())))?;
        // The producer first: a transactional one fences the previous active
        // instance at the broker (its open transaction aborted) before the
        // topic's newest records are read.
        let producer = self.producer().await?;
        let already = self.already_sent().await?;
        if let (None, Some(newest)) = (cursor, already.newest_slot()) {
            self.lost_cursor(newest)?;
        }
        self.metrics.cursor_lost.set(0);
        // A chosen start (head, a slot) is recorded at once, so a takeover
        // before the first slot completes starts from the same place.
        if cursor.is_none() && first > 0 {
            match self.store.advance(claim, first - 1).await {
                Ok(Written::Moved) => {}
                Ok(Written::Refused) => return Err(End::LeaseLost),
                Ok(Written::Replaced) => return Err(self.replaced()),
                Err(e) => return Err(End::Failed(format!("recording the start: {e}"))),
            }
        }
        tracing::info!(first_slot = first, ?cursor, partitions_written = already.partitions_written(), "Streaming");
        // Only a transactional writer leaves what a partition holds below its
        // newest record complete: an idempotent one may leave a gap after a
        // failed delivery (a later record landed, the failed one did not), so
        // without transactions what the topic may hold is sent again (counted).
        // A `partitioner` of the user's own decides partitions instead.
        let own_partitioner = self.config.kafka.properties.iter().any(|(k, _)| k == "partitioner");
        let already = if own_partitioner { already.client_partitions() } else { already };
        let skips = self.config.transactional_id.is_some() && !own_partitioner;
        Ok((producer, Session { tracker: SlotTracker::new(first), written: cursor, already, skips }))
    }

    /// No cursor, but the topic holds records up to `newest`: Redis was reset or replaced.
    /// `LOST_CURSOR=stop` ends the period; `resend` reads the chain again from `START`.
    fn lost_cursor(&self, newest: u64) -> Result<(), End> {
        if self.config.lost_cursor == LostCursor::Stop {
            self.metrics.cursor_lost.set(1);
            return Err(End::Failed(format!(
                "Redis holds no cursor ({}ingest:cursor), but {} already holds records up to slot {newest}: \
                 Redis was reset or replaced. Not streaming. Restore the cursor, or set \
                 SLUICE_INGEST_LOST_CURSOR=resend to read the chain again from START (what the topic holds \
                 is not sent again)",
                self.config.redis_prefix, self.config.topic
            )));
        }
        tracing::warn!(
            newest,
            "No cursor, but the topic holds records: reading the chain again from START, sending what the topic \
             lacks (LOST_CURSOR=resend)"
        );
        Ok(())
    }

    /// Subscribes to the chain from the resume slot and follows it, reconnecting with a
    /// backoff, until the period ends.
    async fn stream(&self, p: &mut Period<'_>) -> End {
        let mut backoff = self.config.reconnect_min;
        loop {
            let from = p.session.tracker.resume_slot();
            let mut chain = self.chain.clone();
            let opened = tokio::select! {
                opened = chain.subscribe(SubscribeRequest { from_slot: from }) => opened,
                () = lease_lost(&mut p.lost) => return End::LeaseLost,
                () = stopped(&mut p.shutdown) => return self.drain(p.claim, &mut p.producer, &mut p.session).await,
            };
            match opened {
                Ok(stream) => match self.follow(p, &mut stream.into_inner()).await {
                    Ok(true) => backoff = self.config.reconnect_min,
                    Ok(false) => {}
                    Err(end) => return end,
                },
                Err(status) => {
                    self.metrics.reconnect(Reconnect::Connect);
                    tracing::warn!(error = %status.message(), "Cannot subscribe to the chain; retrying");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = lease_lost(&mut p.lost) => return End::LeaseLost,
                () = stopped(&mut p.shutdown) => return self.drain(p.claim, &mut p.producer, &mut p.session).await,
            }
            backoff = (backoff * 2).min(self.config.reconnect_max);
        }
    }

    /// One chain stream, sent on and ticked, until it must be reopened (`Ok`: whether it
    /// delivered anything) or the period ends (`Err`).
    async fn follow(&self, p: &mut Period<'_>, stream: &mut tonic::Streaming<SubscribeUpdate>) -> Result<bool, End> {
        let mut delivered = false;
        loop {
            tokio::select! {
                biased;
                () = lease_lost(&mut p.lost) => return Err(End::LeaseLost),
                () = stopped(&mut p.shutdown) => return Err(self.drain(p.claim, &mut p.producer, &mut p.session).await),
                _ = p.tick.tick() => self.tick(p).await?,
                message = stream.message() => match message {
                    Ok(Some(update)) => {
                        delivered = true;
                        if !self.update(p, update).await? {
                            return Ok(delivered);
                        }
                    }
                    Ok(None) => {
                        self.metrics.reconnect(Reconnect::Ended);
                        tracing::warn!(resume = p.session.tracker.resume_slot(), "Chain stream ended; reconnecting");
                        return Ok(delivered);
                    }
                    Err(status) => {
                        self.metrics.reconnect(Reconnect::Error);
                        tracing::warn!(error = %status.message(), resume = p.session.tracker.resume_slot(), "Chain stream failed; reconnecting");
                        return Ok(delivered);
                    }
                }
            }
        }
    }

    /// A tick: commit what was sent, then record the cursor (a failed write is retried at
    /// the next tick).
    async fn tick(&self, p: &mut Period<'_>) -> Result<(), End> {
        let acked = p.producer.commit().await?;
        self.acked(&mut p.session, acked);
        match self.write_cursor(p.claim, &mut p.session).await {
            Ok(Written::Moved) => Ok(()),
            Ok(Written::Refused) => Err(End::LeaseLost),
            Ok(Written::Replaced) => Err(self.replaced()),
            Err(e) => {
                self.metrics.error(Operation::Cursor);
                tracing::warn!(error = %e, "Cursor write failed (Redis); will retry");
                Ok(())
            }
        }
    }

    /// One update of the chain sent on; `Ok(false)`: the stream skipped updates and must
    /// be reopened.
    async fn update(&self, p: &mut Period<'_>, update: SubscribeUpdate) -> Result<bool, End> {
        let ended = matches!(update.update, Some(Update::SlotEnd(_)));
        if let Next::Gap = self.handle(update.update, &mut p.producer, &mut p.session).await? {
            self.metrics.reconnect(Reconnect::Gap);
            tracing::warn!(resume = p.session.tracker.resume_slot(), "The chain stream skipped updates; reconnecting");
            return Ok(false);
        }
        // A send may have waited on a full queue: look again.
        if p.lost.borrow().is_some() {
            return Err(End::LeaseLost);
        }
        if ended && let Some(end) = self.slot_ended(p.claim, &mut p.session).await {
            return Err(end);
        }
        Ok(true)
    }

    /// This period's producer: transactional (fencing every earlier holder
    /// of the shared id) unless transactions are off.
    async fn producer(&self) -> Result<PipelinedProducer<Tag>, ProduceError> {
        let (kafka, max) = (&self.config.kafka, self.config.max_in_flight);
        match &self.config.transactional_id {
            Some(id) => PipelinedProducer::transactional(kafka, max, id, self.config.transaction_timeout).await,
            None => PipelinedProducer::new(kafka, max),
        }
    }

    /// Sends one stream update; `Next::Gap` if the stream skipped something.
    async fn handle(
        &self,
        update: Option<Update>,
        producer: &mut PipelinedProducer<Tag>,
        session: &mut Session,
    ) -> Result<Next, ProduceError> {
        match update {
            Some(Update::Transaction(tx)) => {
                match session.tracker.check(tx.slot, tx.index) {
                    Next::Send => {}
                    other => return Ok(other), // sent before the stream dropped, or a gap
                }
                let payload = tx.encode_to_vec();
                let keys = record_keys(&tx);
                let first = session.tracker.next_seq();
                let (mut acked, mut sent) = (Vec::new(), 0);
                for (i, key) in keys.iter().enumerate() {
                    let at = Position { slot: tx.slot, index: tx.index, key: i as u32 };
                    let partition = session.already.partition(key);
                    if session.skips && partition.is_some_and(|p| session.already.contains(p, at)) {
                        self.metrics.skipped_records.inc();
                        continue;
                    }
                    let tag = (first + sent, Instant::now(), at);
                    acked.extend(producer.send_to(&self.config.topic, partition, key.as_bytes(), &payload, tag).await?);
                    sent += 1;
                }
                session.tracker.sent(tx.index, sent);
                self.acked(session, acked);
                self.metrics.produced_transactions.inc();
                self.metrics.in_flight.set(session.tracker.in_flight() as i64);
            }
            Some(Update::SlotEnd(end)) => return Ok(session.tracker.slot_end(end.slot, end.transaction_count)),
            None => {}
        }
        Ok(Next::Send)
    }

    /// At a slot's end: records the cursor, so a takeover resumes close
    /// behind where this instance got.
    async fn slot_ended(&self, claim: &Claim, session: &mut Session) -> Option<End> {
        match self.write_cursor(claim, session).await {
            Ok(Written::Refused) => Some(End::LeaseLost),
            Ok(Written::Replaced) => Some(self.replaced()),
            Ok(Written::Moved) => None,
            Err(e) => {
                self.metrics.error(Operation::Cursor);
                tracing::warn!(error = %e, "Cursor write failed (Redis); will retry");
                None
            }
        }
    }

    fn acked(&self, session: &mut Session, acked: Vec<Acked<Tag>>) {
        let mut again = 0;
        for a in &acked {
            self.metrics.delivery_latency.observe(a.tag.1.elapsed().as_secs_f64());
            again += u64::from(session.already.contains(a.partition, a.tag.2));
        }
        self.metrics.resent_records.inc_by(again);
        if let Some(last) = acked.last() {
            session.tracker.acked(last.tag.0);
            self.metrics.produced_records.inc_by(acked.len() as u64);
            self.metrics.in_flight.set(session.tracker.in_flight() as i64);
        }
    }

    /// Writes the cursor if it moved.
    async fn write_cursor(&self, claim: &Claim, session: &mut Session) -> redis::RedisResult<Written> {
        let Some(cursor) = session.tracker.cursor() else { return Ok(Written::Moved) };
        if session.written.is_some_and(|w| w >= cursor) {
            return Ok(Written::Moved);
        }
        let written = self.store.advance(claim, cursor).await?;
        if written == Written::Moved {
            session.written = Some(cursor);
            self.metrics.cursor_slot.set(cursor as i64);
            self.metrics.slots_behind.set((self.metrics.head_slot.get() - cursor as i64).max(0));
        }
        Ok(written)
    }

    /// Shutdown: waits for what is in flight (within the deadline), records
    /// the cursor, and ends.
    async fn drain(&self, claim: &Claim, producer: &mut PipelinedProducer<Tag>, session: &mut Session) -> End {
        match tokio::time::timeout(self.config.shutdown_deadline, producer.flush()).await {
            Ok(Ok(acked)) => self.acked(session, acked),
            Ok(Err(e)) => tracing::warn!(error = %e, "Flushing on shutdown failed; the cursor stays behind"),
            Err(_) => tracing::warn!("Flushing on shutdown timed out; the cursor stays behind"),
        }
        if let Err(e) = self.write_cursor(claim, session).await {
            tracing::warn!(error = %e, "Writing the final cursor failed");
        }
        tracing::info!(cursor = ?session.tracker.cursor(), "Drained");
        End::Shutdown
    }
}

/// An active period's state: what it writes with, where it is, and what ends it.
struct Period<'c> {
    claim: &'c Claim,
    producer: PipelinedProducer<Tag>,
    session: Session,
    lost: Lost,
    shutdown: watch::Receiver<bool>,
    tick: tokio::time::Interval,
}

/// One active period's position.
#[derive(Debug)]
struct Session {
    tracker: SlotTracker,
    /// The cursor as last written to Redis.
    written: Option<u64>,
    /// What the topic held when the period started.
    already: AlreadySent,
    /// Whether records the topic holds are skipped (transactional only).
    skips: bool,
}
