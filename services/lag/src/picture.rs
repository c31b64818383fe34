//! The current picture of every watched group, assembled from one poll's
//! readings and the state kept across polls (histories, rebalances). Pure:
//! the readings and the time come in as arguments.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::config::LagConfig;
use crate::model::cause::{self, Attribution};
use crate::model::group::{GroupPoll, GroupTracker, RebalancePause, rebalancing};
use crate::model::history::{History, Sample};
use crate::model::lag::{Lag, Log, time_lag_ms};
use crate::model::retention_headroom_ms;
use crate::model::status::{self, Evidence, Ownership, Status, Verdict};
use crate::wire::{Broker, GroupDescription, Placement, RecordTime, TopicConfig, Topology, Tp, WireError};

/// What one poll read of one group.
#[derive(Debug, Clone)]
pub struct GroupReading {
    pub committed: Result<HashMap<Tp, i64>, WireError>,
    pub description: Result<GroupDescription, WireError>,
}

/// Everything one poll read.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    pub at_ms: i64,
    pub groups: BTreeMap<String, GroupReading>,
    pub logs: HashMap<Tp, Result<Log, WireError>>,
    /// The record at each partition's oldest unconsumed offset, by (partition, offset).
    pub times: HashMap<(Tp, i64), RecordTime>,
    pub configs: HashMap<String, TopicConfig>,
    /// Every topic's metadata; `None` when it could not be read.
    pub topology: Option<Topology>,
}

/// Whose a record's timestamp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampType {
    /// The producer's, when it sent the record (the default).
    Create,
    /// The broker's, when it appended the record.
    LogAppend,
}

/// A committed offset as a poll saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub offset: i64,
    pub at_ms: i64,
    pub lag: Option<i64>,
}

/// One partition of one group, now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionPicture {
    pub topic: String,
    pub partition: i32,
    /// The member that owns it (its client id and host), if one does.
    pub owner: Option<String>,
    pub log: Option<Log>,
    pub lag: Option<Lag>,
    /// Age of the oldest unconsumed record, ms (0: nothing unconsumed).
    pub time_lag_ms: Option<i64>,
    /// The oldest unconsumed record's timestamp, ms, and whose it is
    /// (`create`: the producer's, `log_append`: the broker's).
    pub oldest_timestamp_ms: Option<i64>,
    pub timestamp_type: Option<TimestampType>,
    pub produce_rate: Option<f64>,
    pub consume_rate: Option<f64>,
    pub velocity: Option<f64>,
    /// Seconds to consume the lag at the current rates; `None`: never.
    pub drain_seconds: Option<f64>,
    /// ms until the oldest unconsumed record is due for deletion by retention.
    pub retention_headroom_ms: Option<i64>,
    pub status: Verdict,
    /// The first and last committed offsets seen within the status window.
    #[serde(default)]
    pub window_start: Option<Seen>,
    #[serde(default)]
    pub window_end: Option<Seen>,
}

/// One group, now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupPicture {
    pub group: String,
    pub state: Option<String>,
    pub protocol: Option<String>,
    pub members: Option<usize>,
    pub status: Verdict,
    /// What more consumers can do about the lag ([`crate::model::cause`]).
    #[serde(default)]
    pub cause: Attribution,
    pub lag: Option<i64>,
    pub time_lag_ms: Option<i64>,
    pub rebalances: u64,
    pub last_rebalance_pause_ms: Option<i64>,
    /// Since when the member set has been unchanged (as far as sluice-lag has seen), ms.
    #[serde(default)]
    pub stable_since_ms: Option<i64>,
    /// The newest rebalances whose consumption resumed, oldest first: how
    /// long consumption stopped for each (to a poll interval).
    pub recent_rebalances: Vec<RebalancePause>,
    /// Pauses that ended at this poll (for the histogram; not in the JSON).
    #[serde(skip)]
    pub pauses_ended_ms: Vec<i64>,
    pub error: Option<String>,
    pub partitions: Vec<PartitionPicture>,
}

/// One partition of a topic the topic series cover: where it is placed and its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicPartition {
    #[serde(flatten)]
    pub placement: Placement,
    /// `None`: its offsets could not be read (or it has no leader).
    pub log: Option<Log>,
}

/// A topic the topic series cover ([`crate::config::TopicFilter`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicPicture {
    pub topic: String,
    pub partitions: Vec<TopicPartition>,
}

/// Every watched group, and the cluster's brokers and topics, as of one poll.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Picture {
    pub at_ms: i64,
    pub groups: Vec<GroupPicture>,
    /// `None` when the metadata could not be read (then `topics` is empty too).
    #[serde(default)]
    pub brokers: Option<Vec<Broker>>,
    #[serde(default)]
    pub topics: Vec<TopicPicture>,
}

impl Picture {
    pub fn group(&self, name: &str) -> Option<&GroupPicture> {
        self.groups.iter().find(|g| g.group == name)
    }
}

/// What is kept across polls.
#[derive(Debug, Default)]
pub struct State {
    histories: HashMap<(String, Tp), History>,
    trackers: HashMap<String, GroupTracker>,
}

fn owners(description: &Result<GroupDescription, WireError>) -> HashMap<Tp, String> {
    let Ok(d) = description else { return HashMap::new() };
    d.members
        .iter()
        .flat_map(|m| m.assignment.iter().map(move |tp| (tp.clone(), format!("{}/{}", m.client_id, m.host))))
        .collect()
}

/// The partitions a group is known to read: committed or assigned, and every other
/// partition of those topics (`uncommitted` until the group commits there, so a scaler
/// sees the whole topic, as KEDA does).
fn partitions_of(
    reading: &GroupReading,
    owners: &HashMap<Tp, String>,
    logs: &HashMap<Tp, Result<Log, WireError>>,
) -> BTreeSet<Tp> {
    let mut tps: BTreeSet<Tp> = owners.keys().cloned().collect();
    if let Ok(committed) = &reading.committed {
        tps.extend(committed.keys().cloned());
    }
    let topics: BTreeSet<&str> = tps.iter().map(|tp| &*tp.topic).collect();
    let others: Vec<Tp> = logs.keys().filter(|tp| topics.contains(&*tp.topic)).cloned().collect();
    tps.extend(others);
    tps
}

impl State {
    /// The picture of every group in `readings`.
    pub fn assemble(&mut self, readings: &Readings, config: &LagConfig) -> Picture {
        let groups =
            readings.groups.iter().map(|(name, reading)| self.group(name, reading, readings, config)).collect();
        let live: BTreeSet<&String> = readings.groups.keys().collect();
        self.histories.retain(|(g, _), _| live.contains(g));
        self.trackers.retain(|g, _| live.contains(g));
        Picture {
            at_ms: readings.at_ms,
            groups,
            brokers: readings.topology.as_ref().map(|t| t.brokers.clone()),
            topics: topics(readings, config),
        }
    }

    fn group(&mut self, name: &str, reading: &GroupReading, readings: &Readings, config: &LagConfig) -> GroupPicture {
        let owners = owners(&reading.description);
        let partitions: Vec<PartitionPicture> = partitions_of(reading, &owners, &readings.logs)
            .into_iter()
            .map(|tp| self.partition(name, &tp, reading, &owners, readings, config))
            .collect();
        let names: Vec<String> = partitions.iter().map(|p| format!("{}-{}", p.topic, p.partition)).collect();
        let verdict = status::group(
            names.iter().cloned().zip(partitions.iter().map(|p| &p.status)),
            reading.committed.as_ref().err().map(ToString::to_string),
        );
        // Members by id: two consumers on one host with one client id are still two.
        let member_of: HashMap<(&str, i32), &str> = reading
            .description
            .as_ref()
            .map(|d| {
                d.members
                    .iter()
                    .flat_map(|m| m.assignment.iter().map(move |tp| ((&*tp.topic, tp.partition), m.member_id.as_str())))
                    .collect()
            })
            .unwrap_or_default();
        let cause = cause::attribute(
            partitions.iter().zip(&names).map(|(p, name)| cause::Part {
                name,
                lag: p.lag.and_then(|l| l.records()),
                status: p.status.status,
                owner: member_of.get(&(p.topic.as_str(), p.partition)).copied(),
            }),
            reading.description.as_ref().ok().map(|d| d.members.len()),
        );
        let lags: Vec<i64> = partitions.iter().filter_map(|p| p.lag.and_then(|l| l.records())).collect();
        let lag = (!lags.is_empty()).then(|| lags.iter().sum());
        let time_lag_ms = partitions.iter().filter_map(|p| p.time_lag_ms).max();
        let description = reading.description.as_ref().ok();
        let tracker = self.trackers.entry(name.to_string()).or_default();
        let mut pauses_ended_ms = Vec::new();
        if let Some(d) = description {
            let committed = reading.committed.as_ref().ok().map(|c| c.values().sum());
            let members = d.members.iter().map(|m| m.member_id.clone()).collect();
            pauses_ended_ms.extend(tracker.observe(GroupPoll {
                at_ms: readings.at_ms,
                state: &d.state,
                members,
                committed,
                lag,
            }));
        }
        let errors: Vec<String> = [reading.committed.as_ref().err(), reading.description.as_ref().err()]
            .into_iter()
            .flatten()
            .map(ToString::to_string)
            .collect();
        GroupPicture {
            group: name.to_string(),
            state: description.map(|d| d.state.clone()),
            protocol: description.map(|d| d.protocol.clone()),
            members: description.map(|d| d.members.len()),
            status: verdict,
            cause,
            lag,
            time_lag_ms,
            rebalances: tracker.rebalances,
            last_rebalance_pause_ms: tracker.last_pause_ms,
            stable_since_ms: tracker.members_since_ms,
            recent_rebalances: tracker.recent.iter().copied().collect(),
            pauses_ended_ms,
            error: (!errors.is_empty()).then(|| errors.join("; ")),
            partitions,
        }
    }

    fn partition(
        &mut self,
        group: &str,
        tp: &Tp,
        reading: &GroupReading,
        owners: &HashMap<Tp, String>,
        readings: &Readings,
        config: &LagConfig,
    ) -> PartitionPicture {
        let settings = config.settings(group);
        let now = readings.at_ms;
        let owner = owners.get(tp).cloned();
        let base = |status: Verdict| PartitionPicture {
            topic: tp.topic.to_string(),
            partition: tp.partition,
            owner: owner.clone(),
            log: None,
            lag: None,
            time_lag_ms: None,
            oldest_timestamp_ms: None,
            timestamp_type: None,
            produce_rate: None,
            consume_rate: None,
            velocity: None,
            drain_seconds: None,
            retention_headroom_ms: None,
            status,
            window_start: None,
            window_end: None,
        };
        let log = match readings.logs.get(tp) {
            Some(Ok(log)) => *log,
            Some(Err(e)) => return base(Verdict { status: Status::Err, reason: format!("offsets unreadable: {e}") }),
            None => return base(Verdict { status: Status::Err, reason: "no leader known for the partition".into() }),
        };
        let committed = reading.committed.as_ref().ok().and_then(|c| c.get(tp).copied());
        let lag = Lag::of(log, committed, settings.read_committed);
        let record = lag.oldest_unconsumed(log).and_then(|o| readings.times.get(&(tp.clone(), o)));
        let time_lag = time_lag_ms(&lag, record.map(|r| r.timestamp_ms), now);
        let end = if settings.read_committed { log.stable } else { log.end };
        let history = self
            .histories
            .entry((group.to_string(), tp.clone()))
            .or_insert_with(|| History::new(config_keep_ms(config)));
        history.push(Sample { at_ms: now, end, committed, lag: lag.records() });
        let rates = history.rates(config.rate_window.as_millis() as i64);
        let retention = readings.configs.get(tp.topic.as_ref()).and_then(|c| c.retention_ms);
        let ownership = match &reading.description {
            _ if owner.is_some() => Ownership::Owned,
            // Members join this group, none is assigning now, and none has the partition.
            Ok(d) if !d.protocol_type.is_empty() && !rebalancing(&d.state) => Ownership::Unowned,
            _ => Ownership::Unknown,
        };
        let evidence = Evidence { history, lag: &lag, time_lag_ms: time_lag, ownership };
        let verdict = status::partition(&evidence, &settings.thresholds);
        let seen = |s: Sample| s.committed.map(|offset| Seen { offset, at_ms: s.at_ms, lag: s.lag });
        let ends = history.committed_ends(settings.thresholds.window.as_millis() as i64);
        PartitionPicture {
            log: Some(log),
            lag: Some(lag),
            time_lag_ms: time_lag,
            oldest_timestamp_ms: record.map(|r| r.timestamp_ms),
            timestamp_type: record.map(|r| if r.log_append { TimestampType::LogAppend } else { TimestampType::Create }),
            produce_rate: rates.map(|r| r.produce),
            consume_rate: rates.and_then(|r| r.consume),
            velocity: rates.and_then(|r| r.velocity()),
            drain_seconds: rates
                .and_then(|r| r.drain_seconds(lag.records().unwrap_or(0), config.poll_interval.as_secs_f64())),
            retention_headroom_ms: retention_headroom_ms(record.map(|r| r.timestamp_ms), retention, now),
            window_start: ends.and_then(|(first, _)| seen(first)),
            window_end: ends.and_then(|(_, last)| seen(last)),
            ..base(verdict)
        }
    }
}

/// The topics the topic series cover, with their partitions' logs.
fn topics(readings: &Readings, config: &LagConfig) -> Vec<TopicPicture> {
    let Some(topology) = &readings.topology else { return Vec::new() };
    topology
        .topics
        .iter()
        .filter(|(name, _)| config.topics.shows(name))
        .filter_map(|(name, partitions)| {
            let partitions = partitions.as_ref().ok()?;
            let partitions = partitions
                .iter()
                .map(|p| TopicPartition {
                    placement: p.clone(),
                    log: readings.logs.get(&Tp::new(name, p.partition)).and_then(|l| l.as_ref().ok().copied()),
                })
                .collect();
            Some(TopicPicture { topic: name.clone(), partitions })
        })
        .collect()
}

/// How long a partition's samples are kept: the longest window asked of them.
fn config_keep_ms(config: &LagConfig) -> i64 {
    let longest = config.per_group.values().map(|s| s.thresholds.window.max(s.thresholds.stall_after)).max();
    let defaults = config.defaults.thresholds.window.max(config.defaults.thresholds.stall_after);
    longest.unwrap_or(defaults).max(defaults).max(config.rate_window).as_millis() as i64
}
