//! One poller per cluster: every poll interval, everything the picture
//! needs, in as few requests as the protocol allows (see [`crate::wire`]).
//! A record's timestamp is fetched once per (partition, offset): a group
//! whose committed offsets do not move costs no fetch.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::config::LagConfig;
use crate::model::lag::{Lag, Log};
use crate::picture::{GroupReading, Picture, Readings, State};
use crate::wire::{Cluster, RecordTime, TopicConfig, Tp, WireError};

/// Topic configurations are read again after this long.
const CONFIG_REFRESH_MS: i64 = 300_000;
/// At most this many fetch rounds per poll (one fetch per leader each).
const FETCH_ROUNDS: usize = 4;

/// The stages of a poll, for its error counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    ListGroups,
    Coordinators,
    Committed,
    Describe,
    Metadata,
    Offsets,
    Fetch,
    Configs,
}

impl Stage {
    pub const ALL: [Stage; 8] = [
        Self::ListGroups,
        Self::Coordinators,
        Self::Committed,
        Self::Describe,
        Self::Metadata,
        Self::Offsets,
        Self::Fetch,
        Self::Configs,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ListGroups => "list_groups",
            Self::Coordinators => "coordinators",
            Self::Committed => "committed",
            Self::Describe => "describe",
            Self::Metadata => "metadata",
            Self::Offsets => "offsets",
            Self::Fetch => "fetch",
            Self::Configs => "configs",
        }
    }
}

/// What went wrong in a poll, by stage (empty: a clean poll).
pub type PollErrors = BTreeMap<Stage, Vec<String>>;

/// The poller of one cluster.
#[derive(Debug)]
pub struct Poller {
    cluster: Cluster,
    config: Arc<LagConfig>,
    state: State,
    times: HashMap<(Tp, i64), RecordTime>,
    configs: HashMap<String, TopicConfig>,
    configs_at: i64,
    /// Pattern-matched groups and when `ListGroups` last named them.
    seen: HashMap<String, i64>,
}

fn note(errors: &mut PollErrors, stage: Stage, error: impl ToString) {
    errors.entry(stage).or_default().push(error.to_string());
}

impl Poller {
    pub fn new(config: Arc<LagConfig>) -> Self {
        let cluster = Cluster::new(&config.brokers, config.security.clone(), config.request_timeout);
        Self {
            cluster,
            config,
            state: State::default(),
            times: HashMap::new(),
            configs: HashMap::new(),
            configs_at: i64::MIN,
            seen: HashMap::new(),
        }
    }

    /// Kafka requests sent so far, by API name.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.cluster.requests()
    }

    /// One poll at `now_ms`: the picture, and what failed.
    pub async fn poll(&mut self, now_ms: i64) -> (Picture, PollErrors) {
        let mut errors = PollErrors::new();
        let groups = self.groups(now_ms, &mut errors).await;
        let coordinators = self.cluster.coordinators(&groups).await;
        for (group, c) in &coordinators {
            if let Err(e) = c {
                note(&mut errors, Stage::Coordinators, format!("{group}: {e}"));
            }
        }
        let (committed, described) =
            tokio::join!(self.cluster.committed(&coordinators), self.cluster.describe(&coordinators));
        let mut readings = Readings { at_ms: now_ms, ..Readings::default() };
        for group in &groups {
            let missing = || WireError::Io("no answer".into());
            let reading = GroupReading {
                committed: committed.get(group).cloned().unwrap_or_else(|| Err(missing())),
                description: described.get(group).cloned().unwrap_or_else(|| Err(missing())),
            };
            if let Err(e) = &reading.committed {
                note(&mut errors, Stage::Committed, format!("{group}: {e}"));
            }
            if let Err(e) = &reading.description {
                note(&mut errors, Stage::Describe, format!("{group}: {e}"));
            }
            readings.groups.insert(group.clone(), reading);
        }
        let leaders = self.logs(&mut readings, &mut errors).await;
        self.record_times(&mut readings, &leaders, &mut errors).await;
        self.topic_configs(&mut readings, now_ms, &mut errors).await;
        (self.state.assemble(&readings, &self.config), errors)
    }

    /// The groups named, plus the pattern's matches not excluded (kept for the inactive
    /// TTL after they are last listed).
    async fn groups(&mut self, now_ms: i64, errors: &mut PollErrors) -> Vec<String> {
        let mut groups: BTreeSet<String> = self.config.groups.iter().cloned().collect();
        if let Some(pattern) = &self.config.groups_regex {
            match self.cluster.list_groups().await {
                Ok(listed) => {
                    let excluded = |g: &str| self.config.groups_exclude.as_ref().is_some_and(|e| e.is_match(g));
                    for g in listed.into_iter().filter(|g| pattern.is_match(&g.group) && !excluded(&g.group)) {
                        self.seen.insert(g.group, now_ms);
                    }
                }
                Err(e) => note(errors, Stage::ListGroups, e),
            }
            let ttl = self.config.inactive_ttl.as_millis() as i64;
            self.seen.retain(|_, at| now_ms - *at <= ttl);
            groups.extend(self.seen.keys().cloned());
        }
        groups.into_iter().collect()
    }

    /// Every topic's metadata, and the log offsets of every partition a group reads or the
    /// topic series cover; the partitions' leaders.
    async fn logs(&self, readings: &mut Readings, errors: &mut PollErrors) -> HashMap<Tp, i32> {
        let topology = match self.cluster.topology().await {
            Ok(t) => t,
            Err(e) => {
                note(errors, Stage::Metadata, e);
                return HashMap::new();
            }
        };
        let read = read_topics(readings);
        let (mut leaders, missing) = topology.leaders(read.iter().map(String::as_str));
        for (topic, e) in missing {
            note(errors, Stage::Metadata, format!("{topic}: {e}"));
        }
        let shown = topology.topics.keys().filter(|t| !read.contains(*t) && self.config.topics.shows(t));
        leaders.extend(topology.leaders(shown.map(String::as_str)).0);
        readings.topology = Some(topology);
        for (tp, offsets) in self.cluster.offsets(&leaders).await {
            if let Err(e) = &offsets {
                note(errors, Stage::Offsets, format!("{tp}: {e}"));
            }
            readings.logs.insert(tp, offsets.map(|o| Log { start: o.earliest, end: o.latest, stable: o.stable }));
        }
        leaders
    }

    /// The timestamps of the records at every oldest unconsumed offset: from
    /// the cache, or fetched. A fetch round asks each partition once, from its
    /// lowest missing offset; what comes back answers every missing offset it
    /// reaches, and a further round starts past it.
    async fn record_times(&mut self, readings: &mut Readings, leaders: &HashMap<Tp, i32>, errors: &mut PollErrors) {
        let wanted = self.wanted_times(readings);
        self.times.retain(|key, _| wanted.contains(key));
        let mut missing: HashMap<Tp, Vec<i64>> = HashMap::new();
        for (tp, offset) in wanted.iter().filter(|k| !self.times.contains_key(*k)) {
            missing.entry(tp.clone()).or_default().push(*offset);
        }
        for _ in 0..FETCH_ROUNDS {
            if missing.is_empty() {
                break;
            }
            let answers = self.cluster.record_times(leaders, &missing).await;
            let mut later = HashMap::new();
            for (tp, offsets) in missing {
                match answers.get(&tp) {
                    Some(Ok(found)) => {
                        let answered: HashSet<i64> = found.iter().map(|(at, _)| *at).collect();
                        self.times.extend(found.iter().map(|(at, record)| ((tp.clone(), *at), *record)));
                        let left: Vec<i64> = offsets.into_iter().filter(|o| !answered.contains(o)).collect();
                        // Nothing found at all: nothing there yet (until the next poll).
                        if !answered.is_empty() && !left.is_empty() {
                            later.insert(tp, left);
                        }
                    }
                    Some(Err(e)) => note(errors, Stage::Fetch, format!("{tp}: {e}")),
                    // No leader known: the metadata stage has said why.
                    None => {}
                }
            }
            missing = later;
        }
        readings.times = self.times.clone();
    }

    /// The (partition, offset) of every group's oldest unconsumed record.
    fn wanted_times(&self, readings: &Readings) -> HashSet<(Tp, i64)> {
        let mut wanted: HashSet<(Tp, i64)> = HashSet::new();
        for (group, reading) in &readings.groups {
            let Ok(committed) = &reading.committed else { continue };
            let read_committed = self.config.settings(group).read_committed;
            for (tp, offset) in committed {
                if let Some(Ok(log)) = readings.logs.get(tp)
                    && let Some(oldest) = Lag::of(*log, Some(*offset), read_committed).oldest_unconsumed(*log)
                {
                    wanted.insert((tp.clone(), oldest));
                }
            }
        }
        wanted
    }

    async fn topic_configs(&mut self, readings: &mut Readings, now_ms: i64, errors: &mut PollErrors) {
        // Retention serves the groups' headroom: the topics they read, not every topic shown.
        let read = read_topics(readings);
        let topics: BTreeSet<String> =
            readings.logs.keys().map(|tp| tp.topic.to_string()).filter(|t| read.contains(t)).collect();
        let unknown = topics.iter().any(|t| !self.configs.contains_key(t));
        if !topics.is_empty() && (unknown || now_ms - self.configs_at >= CONFIG_REFRESH_MS) {
            let topics: Vec<String> = topics.into_iter().collect();
            for (topic, config) in self.cluster.topic_configs(&topics).await {
                match config {
                    Ok(c) => {
                        self.configs.insert(topic, c);
                    }
                    Err(e) => note(errors, Stage::Configs, format!("{topic}: {e}")),
                }
            }
            self.configs_at = now_ms;
        }
        readings.configs = self.configs.clone();
    }
}

/// The topics the groups read: committed on or assigned.
fn read_topics(readings: &Readings) -> BTreeSet<String> {
    let mut topics = BTreeSet::new();
    for reading in readings.groups.values() {
        if let Ok(c) = &reading.committed {
            topics.extend(c.keys().map(|tp| tp.topic.to_string()));
        }
        if let Ok(d) = &reading.description {
            topics.extend(d.members.iter().flat_map(|m| m.assignment.iter().map(|tp| tp.topic.to_string())));
        }
    }
    topics
}

/// How long to wait for the next poll after one that took `took`.
pub fn next_wait(interval: Duration, took: Duration) -> Duration {
    interval.saturating_sub(took).max(Duration::from_millis(50))
}
