//! The cluster's topology from one `Metadata` request for every topic: its brokers, and each
//! partition's leader, replicas and in-sync replicas. It serves kafka_exporter's broker and
//! topic series and gives the poller every partition's leader.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::MetadataResponse;
use serde::{Deserialize, Serialize};

use super::{Cluster, Tp, WireError};

/// A broker as the metadata names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Broker {
    pub id: i32,
    /// `host:port`, as advertised.
    pub address: String,
}

/// One partition's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub partition: i32,
    /// `None`: no leader (offline, or an election under way).
    pub leader: Option<i32>,
    /// The replicas, the preferred leader first.
    pub replicas: Vec<i32>,
    pub in_sync: Vec<i32>,
}

impl Placement {
    /// Led by its preferred replica (the first of the replicas).
    pub fn leader_is_preferred(&self) -> bool {
        self.leader.is_some() && self.leader == self.replicas.first().copied()
    }

    /// Fewer replicas in sync than assigned.
    pub fn under_replicated(&self) -> bool {
        self.in_sync.len() < self.replicas.len()
    }
}

/// Every topic's partitions (or why the metadata has none for it), and the brokers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub brokers: Vec<Broker>,
    pub topics: BTreeMap<String, Result<Vec<Placement>, WireError>>,
}

impl Topology {
    /// Reads one metadata answer.
    pub fn from_metadata(metadata: &MetadataResponse) -> Self {
        let mut brokers: Vec<Broker> = metadata
            .brokers
            .iter()
            .map(|b| Broker { id: b.node_id.0, address: format!("{}:{}", b.host.as_str(), b.port) })
            .collect();
        brokers.sort_by_key(|b| b.id);
        let mut topics = BTreeMap::new();
        for topic in &metadata.topics {
            let Some(name) = topic.name.as_ref().map(|n| n.0.as_str().to_string()) else { continue };
            if topic.error_code != 0 {
                topics.insert(name, Err(WireError::Kafka { api: "Metadata", code: topic.error_code }));
                continue;
            }
            let mut partitions: Vec<Placement> = topic
                .partitions
                .iter()
                .map(|p| Placement {
                    partition: p.partition_index,
                    leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    in_sync: p.isr_nodes.iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            topics.insert(name, Ok(partitions));
        }
        Self { brokers, topics }
    }

    /// The leader of every partition of `topics` that has one; a topic the metadata does not
    /// name, or names with an error, is in the second map with why.
    pub fn leaders<'a>(
        &self,
        topics: impl IntoIterator<Item = &'a str>,
    ) -> (HashMap<Tp, i32>, HashMap<String, WireError>) {
        let (mut leaders, mut missing) = (HashMap::new(), HashMap::new());
        for topic in topics {
            match self.topics.get(topic) {
                Some(Ok(partitions)) => {
                    for p in partitions {
                        if let Some(leader) = p.leader {
                            leaders.insert(Tp::new(topic, p.partition), leader);
                        }
                    }
                }
                Some(Err(e)) => {
                    missing.insert(topic.to_string(), e.clone());
                }
                None => {
                    // UNKNOWN_TOPIC_OR_PARTITION: what a topic-scoped request would have said.
                    missing.insert(topic.to_string(), WireError::Kafka { api: "Metadata", code: 3 });
                }
            }
        }
        (leaders, missing)
    }
}

impl Cluster {
    /// Every topic's metadata in one request.
    pub async fn topology(&self) -> Result<Topology, WireError> {
        self.metadata(None).await.map(|m| Topology::from_metadata(&m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(leader: Option<i32>, replicas: &[i32], in_sync: &[i32]) -> Placement {
        Placement { partition: 0, leader, replicas: replicas.to_vec(), in_sync: in_sync.to_vec() }
    }

    #[test]
    fn preferred_leader_and_under_replication_follow_the_replica_lists() {
        assert!(placement(Some(1), &[1, 2, 3], &[1, 2, 3]).leader_is_preferred());
        assert!(!placement(Some(2), &[1, 2, 3], &[2, 3]).leader_is_preferred());
        assert!(!placement(None, &[1], &[]).leader_is_preferred());
        assert!(placement(Some(2), &[1, 2, 3], &[2, 3]).under_replicated());
        assert!(!placement(Some(1), &[1], &[1]).under_replicated());
    }

    #[test]
    fn leaders_name_the_topics_without_metadata() {
        let mut topics = BTreeMap::new();
        topics.insert(
            "a".to_string(),
            Ok(vec![placement(Some(1), &[1], &[1]), Placement { partition: 1, ..placement(None, &[1], &[]) }]),
        );
        topics.insert("b".to_string(), Err(WireError::Kafka { api: "Metadata", code: 29 }));
        let t = Topology { brokers: vec![], topics };
        let (leaders, missing) = t.leaders(["a", "b", "c"]);
        assert_eq!(leaders, HashMap::from([(Tp::new("a", 0), 1)]));
        assert_eq!(missing.len(), 2);
        assert_eq!(missing["c"], WireError::Kafka { api: "Metadata", code: 3 });
    }
}
