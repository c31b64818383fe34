//! What a unit's results mean, record by record: done (handled, with its
//! outputs, or bound for the dead-letter topic with the reason) or to be
//! retried. Once a key's record fails transiently, the key's later records
//! of the unit are retried with it, whatever their results say: a key's
//! records take effect in offset order.

use std::collections::HashMap;
use std::sync::Arc;

use rdkafka::message::{Header, OwnedHeaders};

use crate::handler::{HandleError, Handled, Record};
use crate::metrics::{DeadLetterKind, Dependency, MessageOutcome};
use crate::output::Output;

/// A record that needs nothing more than its outputs' acknowledgements.
#[derive(Debug)]
pub(crate) struct Done {
    pub offset: i64,
    pub size: usize,
    pub outcome: &'static str,
    /// The dead letter's kind, when it is one.
    pub dead_letter: Option<&'static str>,
    pub event_time_ms: Option<i64>,
    pub outputs: Vec<Output>,
}

/// Records of one key (or one record without a key), in offset order, to
/// run again after a backoff, and why the first of them failed.
#[derive(Debug)]
pub(crate) struct Retry {
    pub records: Vec<Record>,
    pub dependency: &'static str,
    pub message: String,
}

#[derive(Debug, Default)]
pub(crate) struct Settled {
    pub done: Vec<Done>,
    pub retry: Vec<Retry>,
}

/// Where dead letters go and what they say about their origin.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetters {
    pub topic: Arc<str>,
    pub group: String,
}

pub(crate) fn settle(records: Vec<Record>, results: Vec<Result<Handled, HandleError>>, dlq: &DeadLetters) -> Settled {
    let mut settled = Settled::default();
    let mut failed: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut results = results.into_iter();
    for record in records {
        // A handler that returned too few results failed the rest.
        let result = results.next().unwrap_or_else(|| {
            Err(HandleError::transient(Dependency::Handler.as_str(), "handle_batch returned no result for this record"))
        });
        if let Some(&i) = record.key.as_ref().and_then(|k| failed.get(k)) {
            settled.retry[i].records.push(record);
            continue;
        }
        let size = record.size();
        match result {
            Ok(handled) => settled.done.push(Done {
                offset: record.offset,
                size,
                outcome: handled.outcome,
                dead_letter: None,
                event_time_ms: handled.event_time_ms,
                outputs: handled
                    .publish
                    .into_iter()
                    .map(|p| Output {
                        topic: p.topic,
                        key: p.key,
                        payload: p.payload,
                        headers: None,
                        event_time_ms: handled.event_time_ms,
                    })
                    .collect(),
            }),
            Err(HandleError::Invalid { kind, message }) => {
                let output = dead_letter(&record, dlq, kind, &message);
                settled.done.push(Done {
                    offset: record.offset,
                    size,
                    outcome: MessageOutcome::DeadLettered.as_str(),
                    dead_letter: Some(kind),
                    event_time_ms: None,
                    outputs: vec![output],
                });
            }
            Err(HandleError::Transient { dependency, message }) => {
                if let Some(key) = &record.key {
                    failed.insert(key.clone(), settled.retry.len());
                }
                settled.retry.push(Retry { records: vec![record], dependency, message });
            }
        }
    }
    settled
}

/// A record of a key whose retries ran out
/// ([`crate::retry::Exhausted::DeadLetterKey`]), done as a dead letter,
/// unhandled, with `message` saying why.
pub(crate) fn exhausted(record: &Record, dlq: &DeadLetters, message: &str) -> Done {
    let kind = DeadLetterKind::RetryExhausted.as_str();
    Done {
        offset: record.offset,
        size: record.size(),
        outcome: MessageOutcome::DeadLettered.as_str(),
        dead_letter: Some(kind),
        event_time_ms: None,
        outputs: vec![dead_letter(record, dlq, kind, message)],
    }
}

/// The record as it came, to the dead-letter topic, with headers naming
/// where it came from and why.
fn dead_letter(record: &Record, dlq: &DeadLetters, kind: &str, message: &str) -> Output {
    let partition = record.partition.to_string();
    let offset = record.offset.to_string();
    let headers = OwnedHeaders::new()
        .insert(Header { key: "sluice.original.topic", value: Some(record.topic.as_bytes()) })
        .insert(Header { key: "sluice.original.partition", value: Some(partition.as_bytes()) })
        .insert(Header { key: "sluice.original.offset", value: Some(offset.as_bytes()) })
        .insert(Header { key: "sluice.error.kind", value: Some(kind.as_bytes()) })
        .insert(Header { key: "sluice.error.message", value: Some(message.as_bytes()) })
        .insert(Header { key: "sluice.consumer.group", value: Some(dlq.group.as_bytes()) });
    let headers = match &record.key {
        Some(key) => headers.insert(Header { key: "sluice.original.key", value: Some(key.as_slice()) }),
        None => headers,
    };
    Output {
        topic: dlq.topic.clone(),
        key: record.key.clone().unwrap_or_default(),
        payload: record.payload.clone().unwrap_or_default(),
        headers: Some(headers),
        event_time_ms: record.timestamp_ms,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rdkafka::message::Headers;

    use super::*;
    use crate::handler::Publish;

    fn record(offset: i64, key: Option<&str>) -> Record {
        Record {
            topic: Arc::from("in"),
            partition: 3,
            offset,
            key: key.map(|k| k.as_bytes().to_vec()),
            payload: Some(b"p".to_vec()),
            timestamp_ms: None,
            redriven: false,
        }
    }

    fn ok(n: usize) -> Result<Handled, HandleError> {
        let publish =
            (0..n).map(|i| Publish { topic: Arc::from("out"), key: vec![i as u8], payload: vec![] }).collect();
        Ok(Handled { outcome: "ok", event_time_ms: Some(5), publish })
    }

    #[test]
    fn a_failed_key_keeps_its_later_records_and_the_others_go_on() {
        let dlq = DeadLetters { topic: Arc::from("dlq"), group: "g".into() };
        let records = vec![
            record(0, Some("a")),
            record(1, Some("b")),
            record(2, Some("a")),
            record(3, None),
            record(4, Some("b")),
        ];
        let results = vec![
            Err(HandleError::transient("redis", "down")),
            ok(2),
            ok(1), // a's later record: retried with the failed one, whatever it says
            Err(HandleError::invalid("decode", "bad")),
            ok(0),
        ];
        let settled = settle(records, results, &dlq);
        let done: Vec<(i64, usize, &str)> =
            settled.done.iter().map(|d| (d.offset, d.outputs.len(), d.outcome)).collect();
        assert_eq!(done, [(1, 2, "ok"), (3, 1, "dead_lettered"), (4, 0, "ok")]);
        assert_eq!(settled.retry.len(), 1);
        let retry = &settled.retry[0];
        assert_eq!(retry.records.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 2]);
        assert_eq!((retry.dependency, retry.message.as_str()), ("redis", "down"));
        let letter = &settled.done[1].outputs[0];
        assert_eq!(&*letter.topic, "dlq");
        let headers = letter.headers.as_ref().unwrap();
        let kind = headers.iter().find(|h| h.key == "sluice.error.kind").and_then(|h| h.value).unwrap();
        assert_eq!(kind, b"decode");
    }

    #[test]
    fn missing_results_are_retried_not_lost() {
        let dlq = DeadLetters { topic: Arc::from("dlq"), group: "g".into() };
        let settled = settle(vec![record(0, Some("a")), record(1, Some("b"))], vec![ok(0)], &dlq);
        assert_eq!(settled.done.len(), 1);
        assert_eq!(settled.retry[0].records[0].offset, 1);
    }
}
