//! What the poller asks the cluster, each as few requests as the protocol
//! allows: one per leader or coordinator, sent to all of them at once.

use std::collections::{BTreeMap, HashMap};

use bytes::{Buf, Bytes};
use futures_util::future::join_all;
use kafka_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use kafka_protocol::messages::describe_configs_request::{DescribeConfigsRequest, DescribeConfigsResource};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestGroup};
use kafka_protocol::messages::{
    BrokerId, ConsumerProtocolAssignment, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::records::{RecordBatchDecoder, TimestampType};

use super::{Cluster, Tp, WireError};

/// `ListOffsets` timestamps with a special meaning.
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;
/// Record bytes fetched per partition to read one record's timestamp.
const FETCH_PARTITION_BYTES: i32 = 1 << 20;

/// Per partition, a value or why it could not be read.
pub type PerPartition<T> = HashMap<Tp, Result<T, WireError>>;

/// A group as `ListGroups` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group: String,
    pub state: String,
    /// `classic` or `consumer` (KIP-848); empty from brokers before 3.8.
    pub group_type: String,
}

/// A group's state and members (`DescribeGroups`, or `ConsumerGroupDescribe`
/// for KIP-848 groups).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupDescription {
    pub state: String,
    /// The assignor's or protocol's name (`cooperative-sticky`, `uniform`…).
    pub protocol: String,
    /// `consumer` for a group whose members join it (kept while it is empty); empty for
    /// a group that only commits offsets (e.g. Flink's, which assigns partitions itself).
    pub protocol_type: String,
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
    pub assignment: Vec<Tp>,
}

/// Offsets of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub earliest: i64,
    pub latest: i64,
    /// The last stable offset (what a `read_committed` reader reaches).
    pub stable: i64,
}

/// What a topic's configuration says about lag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicConfig {
    /// `retention.ms` (`None`: unlimited).
    pub retention_ms: Option<i64>,
    /// `message.timestamp.type=LogAppendTime`.
    pub log_append_time: bool,
}

/// The record at (or first after) an offset, and its timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordTime {
    pub offset: i64,
    pub timestamp_ms: i64,
    /// The broker's append time (topic `message.timestamp.type=LogAppendTime`);
    /// otherwise the producer's create time.
    pub log_append: bool,
}

fn kafka(api: &'static str, code: i16) -> Result<(), WireError> {
    if code == 0 { Ok(()) } else { Err(WireError::Kafka { api, code }) }
}

fn by_leader(leaders: &HashMap<Tp, i32>) -> BTreeMap<i32, Vec<Tp>> {
    let mut out: BTreeMap<i32, Vec<Tp>> = BTreeMap::new();
    for (tp, leader) in leaders {
        out.entry(*leader).or_default().push(tp.clone());
    }
    out
}

fn topic_name(name: &str) -> TopicName {
    StrBytes::from_string(name.to_string()).into()
}

fn group_id(name: &str) -> GroupId {
    StrBytes::from_string(name.to_string()).into()
}

/// Decodes a classic consumer member's assignment (a version, then the message).
fn assignment(bytes: &Bytes) -> Vec<Tp> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16();
    match ConsumerProtocolAssignment::decode(&mut buf, version.clamp(0, 3)) {
        Ok(a) => a
            .assigned_partitions
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| Tp::new(t.topic.0.as_str(), *p)))
            .collect(),
        Err(_) => Vec::new(),
    }
}

impl Cluster {
    /// `ListOffsets` at `timestamp` (or [`EARLIEST`], [`LATEST`]) for every
    /// partition, once per leader; `read_committed` gives the stable offset.
    pub async fn list_offsets(
        &self,
        leaders: &HashMap<Tp, i32>,
        timestamp: i64,
        read_committed: bool,
    ) -> PerPartition<i64> {
        let calls = by_leader(leaders).into_iter().map(|(leader, tps)| async move {
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in &tps {
                topics.entry(&tp.topic).or_default().push(tp.partition);
            }
            let build = |_| {
                let topics = topics.iter().map(|(name, parts)| {
                    let parts = parts.iter().map(|p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(*p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp)
                    });
                    ListOffsetsTopic::default().with_name(topic_name(name)).with_partitions(parts.collect())
                });
                ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_isolation_level(i8::from(read_committed))
                    .with_topics(topics.collect())
            };
            let mut out: PerPartition<i64> = HashMap::new();
            match self.call_broker(leader, 9, build).await {
                Ok(response) => {
                    for t in &response.topics {
                        for p in &t.partitions {
                            let value = kafka("ListOffsets", p.error_code).map(|()| p.offset);
                            out.insert(Tp::new(t.name.0.as_str(), p.partition_index), value);
                        }
                    }
                }
                Err(e) => out.extend(tps.iter().map(|tp| (tp.clone(), Err(e.clone())))),
            }
            out
        });
        join_all(calls).await.into_iter().flatten().collect()
    }

    /// Earliest, latest and stable offsets of every partition.
    pub async fn offsets(&self, leaders: &HashMap<Tp, i32>) -> PerPartition<Offsets> {
        let (earliest, latest, stable) = tokio::join!(
            self.list_offsets(leaders, EARLIEST, false),
            self.list_offsets(leaders, LATEST, false),
            self.list_offsets(leaders, LATEST, true),
        );
        let mut out = HashMap::new();
        for (tp, latest) in latest {
            let get = |m: &PerPartition<i64>| {
                m.get(&tp).cloned().unwrap_or_else(|| Err(WireError::Io(format!("{tp}: no answer"))))
            };
            let offsets = (|| Ok(Offsets { earliest: get(&earliest)?, latest: latest?, stable: get(&stable)? }))();
            out.insert(tp, offsets);
        }
        out
    }

    /// Every group of every broker (`ListGroups`, sent to all).
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>, WireError> {
        self.known_brokers().await?;
        let calls = self.brokers().into_iter().map(|id| self.call_broker(id, 5, |_| ListGroupsRequest::default()));
        let mut groups = Vec::new();
        for response in join_all(calls).await {
            let response = response?;
            kafka("ListGroups", response.error_code)?;
            groups.extend(response.groups.iter().map(|g| GroupListing {
                group: g.group_id.0.as_str().into(),
                state: g.group_state.as_str().into(),
                group_type: g.group_type.as_str().into(),
            }));
        }
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        groups.dedup_by(|a, b| a.group == b.group);
        Ok(groups)
    }

    /// The coordinator of every group, in one `FindCoordinator` (v4+).
    pub async fn coordinators(&self, groups: &[String]) -> HashMap<String, Result<i32, WireError>> {
        let fail = |e: WireError| groups.iter().map(|g| (g.clone(), Err(e.clone()))).collect();
        let any = match self.known_brokers().await {
            Ok(brokers) => brokers[0],
            Err(e) => return fail(e),
        };
        let build = |_| {
            let keys = groups.iter().map(|g| StrBytes::from_string(g.clone())).collect();
            FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(keys)
        };
        match self.call_broker(any, 6, build).await {
            Ok(response) => response
                .coordinators
                .iter()
                .map(|c| (c.key.as_str().to_string(), kafka("FindCoordinator", c.error_code).map(|()| c.node_id.0)))
                .collect(),
            Err(e) => fail(e),
        }
    }

    /// The brokers, from metadata if none is known yet (never empty on `Ok`).
    async fn known_brokers(&self) -> Result<Vec<i32>, WireError> {
        if self.brokers().is_empty() {
            self.metadata(Some(&[])).await?;
        }
        let brokers = self.brokers();
        if brokers.is_empty() { Err(WireError::Protocol("the metadata lists no broker".into())) } else { Ok(brokers) }
    }

    fn by_coordinator(coordinators: &HashMap<String, Result<i32, WireError>>) -> BTreeMap<i32, Vec<String>> {
        let mut out: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        for (group, coordinator) in coordinators {
            if let Ok(id) = coordinator {
                out.entry(*id).or_default().push(group.clone());
            }
        }
        out
    }

    /// Every group's committed offsets (`None`: no commit), one `OffsetFetch`
    /// (v8+, many groups) per coordinator.
    pub async fn committed(
        &self,
        coordinators: &HashMap<String, Result<i32, WireError>>,
    ) -> HashMap<String, Result<HashMap<Tp, i64>, WireError>> {
        let calls = Self::by_coordinator(coordinators).into_iter().map(|(id, groups)| async move {
            let build = |_| {
                let groups = groups.iter().map(|g| {
                    OffsetFetchRequestGroup::default()
                        .with_group_id(group_id(g))
                        .with_member_epoch(-1)
                        .with_topics(None)
                });
                OffsetFetchRequest::default().with_groups(groups.collect()).with_require_stable(false)
            };
            match self.call_broker(id, 9, build).await {
                Ok(response) => response
                    .groups
                    .iter()
                    .map(|g| {
                        let offsets = kafka("OffsetFetch", g.error_code).map(|()| {
                            g.topics
                                .iter()
                                .flat_map(|t| {
                                    t.partitions.iter().filter(|p| p.error_code == 0 && p.committed_offset >= 0).map(
                                        move |p| (Tp::new(t.name.0.as_str(), p.partition_index), p.committed_offset),
                                    )
                                })
                                .collect()
                        });
                        (g.group_id.0.as_str().to_string(), offsets)
                    })
                    .collect::<Vec<_>>(),
                Err(e) => groups.iter().map(|g| (g.clone(), Err(e.clone()))).collect(),
            }
        });
        let mut out: HashMap<String, Result<HashMap<Tp, i64>, WireError>> =
            join_all(calls).await.into_iter().flatten().collect();
        for (group, coordinator) in coordinators {
            if let Err(e) = coordinator {
                out.insert(group.clone(), Err(e.clone()));
            }
        }
        out
    }

    /// Every group's state and members: `ConsumerGroupDescribe` for KIP-848
    /// groups, `DescribeGroups` for the others, once per coordinator each.
    pub async fn describe(
        &self,
        coordinators: &HashMap<String, Result<i32, WireError>>,
    ) -> HashMap<String, Result<GroupDescription, WireError>> {
        let calls = Self::by_coordinator(coordinators).into_iter().map(|(id, groups)| self.describe_at(id, groups));
        let mut out: HashMap<_, _> = join_all(calls).await.into_iter().flatten().collect();
        for (group, coordinator) in coordinators {
            if let Err(e) = coordinator {
                out.insert(group.clone(), Err(e.clone()));
            }
        }
        out
    }

    async fn describe_at(&self, id: i32, groups: Vec<String>) -> Vec<(String, Result<GroupDescription, WireError>)> {
        let mut out = Vec::new();
        let build =
            |_| ConsumerGroupDescribeRequest::default().with_group_ids(groups.iter().map(|g| group_id(g)).collect());
        let mut classic = Vec::new();
        match self.call_broker(id, 1, build).await {
            Ok(response) => {
                for g in &response.groups {
                    let name = g.group_id.0.as_str().to_string();
                    // Not a KIP-848 group (GROUP_ID_NOT_FOUND): a classic one. So is every
                    // group on a broker that lists the API but has KIP-848 off (Kafka 3.9
                    // answers each group UNSUPPORTED_VERSION).
                    if g.error_code == 69 || g.error_code == 35 {
                        classic.push(name);
                        continue;
                    }
                    let members = g.members.iter().map(|m| Member {
                        member_id: m.member_id.as_str().into(),
                        client_id: m.client_id.as_str().into(),
                        host: m.client_host.as_str().into(),
                        assignment: m
                            .assignment
                            .topic_partitions
                            .iter()
                            .flat_map(|t| t.partitions.iter().map(|p| Tp::new(t.topic_name.0.as_str(), *p)))
                            .collect(),
                    });
                    let described = kafka("ConsumerGroupDescribe", g.error_code).map(|()| GroupDescription {
                        state: g.group_state.as_str().into(),
                        protocol: g.assignor_name.as_str().into(),
                        protocol_type: "consumer".into(),
                        members: members.collect(),
                    });
                    out.push((name, described));
                }
            }
            // A broker without KIP-848: every group is classic.
            Err(WireError::Unsupported(_)) => classic = groups.clone(),
            Err(e) => return groups.iter().map(|g| (g.clone(), Err(e.clone()))).collect(),
        }
        if classic.is_empty() {
            return out;
        }
        let build = |_| DescribeGroupsRequest::default().with_groups(classic.iter().map(|g| group_id(g)).collect());
        match self.call_broker(id, 5, build).await {
            Ok(response) => out.extend(response.groups.iter().map(|g| {
                let members = g.members.iter().map(|m| Member {
                    member_id: m.member_id.as_str().into(),
                    client_id: m.client_id.as_str().into(),
                    host: m.client_host.as_str().into(),
                    assignment: assignment(&m.member_assignment),
                });
                let described = kafka("DescribeGroups", g.error_code).map(|()| GroupDescription {
                    state: g.group_state.as_str().into(),
                    protocol: g.protocol_data.as_str().into(),
                    protocol_type: g.protocol_type.as_str().into(),
                    members: members.collect(),
                });
                (g.group_id.0.as_str().to_string(), described)
            })),
            Err(e) => out.extend(classic.iter().map(|g| (g.clone(), Err(e.clone())))),
        }
        out
    }

    /// `retention.ms` and the timestamp type of every topic, in one
    /// `DescribeConfigs`.
    pub async fn topic_configs(&self, topics: &[String]) -> HashMap<String, Result<TopicConfig, WireError>> {
        let fail = |e: WireError| topics.iter().map(|t| (t.clone(), Err(e.clone()))).collect();
        let any = match self.known_brokers().await {
            Ok(brokers) => brokers[0],
            Err(e) => return fail(e),
        };
        let keys = || {
            Some(vec![StrBytes::from_static_str("retention.ms"), StrBytes::from_static_str("message.timestamp.type")])
        };
        let build = |_| {
            let resources = topics.iter().map(|t| {
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_string(t.clone()))
                    .with_configuration_keys(keys())
            });
            DescribeConfigsRequest::default().with_resources(resources.collect())
        };
        match self.call_broker(any, 4, build).await {
            Ok(response) => response
                .results
                .iter()
                .map(|r| {
                    let get = |name: &str| {
                        r.configs
                            .iter()
                            .find(|c| c.name.as_str() == name)
                            .and_then(|c| c.value.as_ref())
                            .map(|v| v.as_str().to_string())
                    };
                    let config = kafka("DescribeConfigs", r.error_code).map(|()| TopicConfig {
                        retention_ms: get("retention.ms").and_then(|v| v.parse().ok()).filter(|ms: &i64| *ms >= 0),
                        log_append_time: get("message.timestamp.type").is_some_and(|v| v == "LogAppendTime"),
                    });
                    (r.resource_name.as_str().to_string(), config)
                })
                .collect(),
            Err(e) => fail(e),
        }
    }

    /// The record at each wanted offset (or the first after it: a compacted
    /// or control record), one `Fetch` per leader, from each partition's
    /// lowest wanted offset. What comes back answers every wanted offset it
    /// reaches, so groups close together on a partition cost one fetch; an
    /// offset beyond it (or with nothing there yet) is left out of the answer.
    pub async fn record_times(
        &self,
        leaders: &HashMap<Tp, i32>,
        wanted: &HashMap<Tp, Vec<i64>>,
    ) -> PerPartition<Vec<(i64, RecordTime)>> {
        let mut asked: HashMap<Tp, i32> = HashMap::new();
        for tp in wanted.keys() {
            if let Some(leader) = leaders.get(tp) {
                asked.insert(tp.clone(), *leader);
            }
        }
        let calls = by_leader(&asked).into_iter().map(|(leader, tps)| async move {
            let mut topics: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
            for tp in &tps {
                let lowest = wanted[tp].iter().copied().min().unwrap_or(0);
                topics.entry(&tp.topic).or_default().push((tp.partition, lowest));
            }
            let build = |_| {
                let topics = topics.iter().map(|(name, parts)| {
                    let parts = parts.iter().map(|(p, offset)| {
                        FetchPartition::default()
                            .with_partition(*p)
                            .with_current_leader_epoch(-1)
                            .with_fetch_offset(*offset)
                            .with_log_start_offset(-1)
                            .with_partition_max_bytes(FETCH_PARTITION_BYTES)
                    });
                    FetchTopic::default().with_topic(topic_name(name)).with_partitions(parts.collect())
                });
                FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(0)
                    .with_min_bytes(1)
                    .with_max_bytes(64 << 20)
                    .with_session_id(0)
                    .with_session_epoch(-1)
                    .with_topics(topics.collect())
            };
            let mut out: PerPartition<Vec<(i64, RecordTime)>> = HashMap::new();
            // v12 is the last version naming topics (v13+ uses topic ids).
            match self.call_broker(leader, 12, build).await {
                Ok(response) => {
                    for t in &response.responses {
                        for p in &t.partitions {
                            let tp = Tp::new(t.topic.0.as_str(), p.partition_index);
                            let at = wanted.get(&tp).map_or(&[][..], Vec::as_slice);
                            let value = kafka("Fetch", p.error_code).map(|()| records_at(p.records.clone(), at));
                            out.insert(tp, value);
                        }
                    }
                }
                Err(e) => out.extend(tps.iter().map(|tp| (tp.clone(), Err(e.clone())))),
            }
            out
        });
        join_all(calls).await.into_iter().flatten().collect()
    }
}

/// For each wanted offset, the first data record at or after it in fetched
/// record bytes (offsets beyond the last record decoded get none); a batch cut
/// short by the fetch size ends the search, and so does the last wanted offset.
fn records_at(records: Option<Bytes>, wanted: &[i64]) -> Vec<(i64, RecordTime)> {
    let mut wanted = wanted.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut pending = wanted.into_iter().peekable();
    let mut found = Vec::new();
    let Some(mut buf) = records else { return found };
    while pending.peek().is_some() && buf.has_remaining() {
        let Ok(set) = RecordBatchDecoder::decode(&mut buf) else { break };
        for r in set.records.iter().filter(|r| !r.control) {
            let time = RecordTime {
                offset: r.offset,
                timestamp_ms: r.timestamp,
                log_append: r.timestamp_type == TimestampType::LogAppend,
            };
            while let Some(at) = pending.next_if(|at| *at <= r.offset) {
                found.push((at, time));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

    use super::*;

    /// One batch of records at `offsets` (timestamp 1000 + offset), `control` or
    /// data (the encoder starts a new batch where offset − sequence changes).
    fn batch(buf: &mut BytesMut, offsets: std::ops::RangeInclusive<i64>, control: bool) {
        let records: Vec<Record> = offsets
            .map(|offset| Record {
                transactional: control,
                control,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset,
                sequence: offset as i32,
                timestamp: 1000 + offset,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: Default::default(),
            })
            .collect();
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(buf, &records, &options).expect("encoded");
    }

    #[test]
    fn one_fetch_answers_every_wanted_offset_it_reaches() {
        let mut buf = BytesMut::new();
        batch(&mut buf, 10..=14, false);
        batch(&mut buf, 15..=15, true);
        batch(&mut buf, 16..=19, false);
        let bytes = buf.freeze();
        let found = records_at(Some(bytes.clone()), &[19, 11, 15, 25, 12, 11]);
        let at: Vec<(i64, i64, i64)> = found.iter().map(|(o, r)| (*o, r.offset, r.timestamp_ms)).collect();
        // 15 is a transaction marker: its answer is the next data record.
        assert_eq!(at, [(11, 11, 1011), (12, 12, 1012), (15, 16, 1016), (19, 19, 1019)], "25 is beyond the records");
        // The last batch cut short by the fetch size: what it would answer is left out.
        let cut = records_at(Some(bytes.slice(..bytes.len() - 5)), &[12, 17]);
        assert_eq!(cut.iter().map(|(o, _)| *o).collect::<Vec<_>>(), [12]);
        assert!(records_at(None, &[3]).is_empty(), "nothing there yet");
    }
}
