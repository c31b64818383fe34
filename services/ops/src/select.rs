//! Which dead letters an operator means (by reason, time range, key), and what they add up to.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::letters::DeadLetter;

/// A selection: every condition given must hold (an empty list or bound selects all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Any of these `sluice.error.kind`s.
    pub reasons: Vec<String>,
    /// Any of these keys.
    pub keys: Vec<String>,
    /// Dead-lettered at or after (epoch ms).
    pub since_ms: Option<i64>,
    /// Dead-lettered before (epoch ms).
    pub until_ms: Option<i64>,
}

impl Selection {
    pub fn matches(&self, l: &DeadLetter) -> bool {
        let t = l.timestamp_ms.unwrap_or(0);
        (self.reasons.is_empty() || self.reasons.contains(&l.kind))
            && (self.keys.is_empty() || self.keys.iter().any(|k| k.as_bytes() == l.key.as_slice()))
            && self.since_ms.is_none_or(|s| t >= s)
            && self.until_ms.is_none_or(|u| t < u)
    }
}

/// A reason's (or a key's) count and time range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    pub name: String,
    pub count: usize,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// One message of the reason, as an example.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

/// What `dlq inspect` reports of the selected dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub topic: String,
    /// Every dead letter in the topic.
    pub total: usize,
    pub selected: usize,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// By reason, the most first.
    pub reasons: Vec<Group>,
    /// By key, the most first, at most `top_keys`.
    pub keys: Vec<Group>,
    /// Distinct keys among the selected.
    pub distinct_keys: usize,
}

/// Sums up the letters of `topic` that `selection` selects.
pub fn summarize(topic: &str, letters: &[DeadLetter], selection: &Selection, top_keys: usize) -> Summary {
    let chosen: Vec<&DeadLetter> = letters.iter().filter(|l| selection.matches(l)).collect();
    let reasons = groups(&chosen, |l| l.kind.clone(), true);
    let mut keys = groups(&chosen, DeadLetter::key_text, false);
    let distinct_keys = keys.len();
    keys.truncate(top_keys);
    let times = chosen.iter().filter_map(|l| l.timestamp_ms);
    Summary {
        topic: topic.to_string(),
        total: letters.len(),
        selected: chosen.len(),
        first_ms: times.clone().min(),
        last_ms: times.max(),
        reasons,
        keys,
        distinct_keys,
    }
}

fn groups(chosen: &[&DeadLetter], by: impl Fn(&DeadLetter) -> String, example: bool) -> Vec<Group> {
    let mut map: BTreeMap<String, Group> = BTreeMap::new();
    for l in chosen {
        let name = by(l);
        let g =
            map.entry(name.clone()).or_insert(Group { name, count: 0, first_ms: None, last_ms: None, example: None });
        g.count += 1;
        if let Some(t) = l.timestamp_ms {
            g.first_ms = Some(g.first_ms.map_or(t, |f| f.min(t)));
            g.last_ms = Some(g.last_ms.map_or(t, |f| f.max(t)));
        }
        if example && g.example.is_none() && !l.message.is_empty() {
            g.example = Some(l.message.clone());
        }
    }
    let mut out: Vec<Group> = map.into_values().collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::letters::Coordinates;

    fn letter(offset: i64, kind: &str, key: &str, t: i64) -> DeadLetter {
        DeadLetter {
            at: Coordinates { topic: "dlq".into(), partition: 0, offset },
            timestamp_ms: Some(t),
            key: key.as_bytes().to_vec(),
            payload: Vec::new(),
            kind: kind.into(),
            message: format!("{kind} failed"),
            origin: None,
            group: None,
        }
    }

    #[test]
    fn selects_by_every_condition_given_and_sums_by_reason_and_key() {
        let letters = vec![
            letter(0, "decode", "a", 1_000),
            letter(1, "decode", "b", 2_000),
            letter(2, "invalid", "a", 3_000),
            letter(3, "decode", "a", 4_000),
        ];
        let all = summarize("dlq", &letters, &Selection::default(), 10);
        assert_eq!((all.total, all.selected, all.first_ms, all.last_ms), (4, 4, Some(1_000), Some(4_000)));
        assert_eq!(all.reasons[0].name, "decode");
        assert_eq!(
            (all.reasons[0].count, all.reasons[0].first_ms, all.reasons[0].last_ms),
            (3, Some(1_000), Some(4_000))
        );
        assert_eq!(all.reasons[0].example.as_deref(), Some("decode failed"));
        assert_eq!((all.keys[0].name.as_str(), all.keys[0].count, all.distinct_keys), ("a", 3, 2));
        let some = Selection {
            reasons: vec!["decode".into()],
            keys: vec!["a".into()],
            since_ms: Some(1_000),
            until_ms: Some(4_000),
        };
        let s = summarize("dlq", &letters, &some, 10);
        assert_eq!(s.selected, 1, "decode, key a, in [1000, 4000): only offset 0");
        assert_eq!(summarize("dlq", &letters, &Selection::default(), 1).keys.len(), 1);
    }
}
