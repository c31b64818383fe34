//! `HorizontalPodAutoscaler.spec.behavior` as the API server stores it (after its
//! defaulting), and the arithmetic of its policies.
//!
//! The API server fills a behavior that is present: scale-up `{window 0, selectPolicy Max,
//! policies [Pods 4/15 s, Percent 100/15 s]}`, scale-down `{window unset (the controller's
//! `--horizontal-pod-autoscaler-downscale-stabilization`, 300 s), selectPolicy Max, policies
//! [Percent 100/15 s]}`; a rule given replaces only the fields it sets. A tolerance left
//! unset is the controller's `--horizontal-pod-autoscaler-tolerance` (0.1).

use serde::{Deserialize, Serialize};

/// `type` of a scaling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyType {
    Pods,
    Percent,
}

/// One `policies` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(rename = "type")]
    pub kind: PolicyType,
    pub value: i32,
    #[serde(rename = "periodSeconds")]
    pub period_seconds: i32,
}

/// `selectPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SelectPolicy {
    #[default]
    Max,
    Min,
    Disabled,
}

/// A tolerance as the API takes it (a quantity such as `"0.05"` or `"50m"`), kept as
/// its decimal so it converts to a float exactly the way the controller does.
/// A tolerance that is not a decimal quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a tolerance (a decimal such as \"0.05\" or \"50m\")")]
pub struct BadTolerance(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tolerance {
    mantissa: i64,
    exponent: i32,
}

impl Tolerance {
    /// Parses `"0.05"`, `"50m"`, `"0"` or `"1"`.
    pub fn parse(text: &str) -> Result<Self, BadTolerance> {
        let bad = || BadTolerance(text.to_string());
        let (digits, mut exponent) = match text.strip_suffix('m') {
            Some(d) => (d, -3),
            None => (text, 0),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && fraction.is_empty()
            || !(whole.chars().chain(fraction.chars())).all(|c| c.is_ascii_digit())
        {
            return Err(bad());
        }
        exponent -= fraction.len() as i32;
        let mut mantissa: i64 = format!("{whole}{fraction}").parse().map_err(|_| bad())?;
        // The quantity keeps the smallest mantissa (trailing zeros move into the exponent).
        while mantissa != 0 && mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        if mantissa == 0 {
            exponent = 0;
        }
        Ok(Self { mantissa, exponent })
    }

    /// `Quantity.AsApproximateFloat64`: the mantissa times a power of ten.
    pub fn as_f64(self) -> f64 {
        match self.exponent {
            0 => self.mantissa as f64,
            e if e > 0 => self.mantissa as f64 * 10f64.powi(e),
            // Go's math.Pow10(-n) is 1 / 10ⁿ, correctly rounded; powi(-n) may not be.
            e => self.mantissa as f64 * (1.0 / 10f64.powi(-e)),
        }
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.as_f64())
    }
}

impl Serialize for Tolerance {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Tolerance {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(serde_json::Number),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Text(t) => t,
            Raw::Number(n) => n.to_string(),
        };
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One direction's rules as given (every field optional, as in the API).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RulesSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stabilization_window_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_policy: Option<SelectPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<Policy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<Tolerance>,
}

/// `spec.behavior` as given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BehaviorSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<RulesSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<RulesSpec>,
}

/// One direction's rules after the API server's defaulting.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// `None` only for scale-down: the controller's window applies.
    pub window_seconds: Option<i32>,
    pub select: SelectPolicy,
    pub policies: Vec<Policy>,
    pub tolerance: Option<Tolerance>,
}

/// `spec.behavior` after defaulting.
#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    pub scale_up: Rules,
    pub scale_down: Rules,
}

impl Rules {
    fn defaulted(given: Option<&RulesSpec>, defaults: Rules) -> Rules {
        let Some(g) = given else { return defaults };
        Rules {
            window_seconds: g.stabilization_window_seconds.or(defaults.window_seconds),
            select: g.select_policy.unwrap_or(defaults.select),
            policies: g.policies.clone().unwrap_or(defaults.policies),
            tolerance: g.tolerance.or(defaults.tolerance),
        }
    }

    /// The longest policy period, in seconds (0 without policies).
    pub fn longest_period(&self) -> i32 {
        self.policies.iter().map(|p| p.period_seconds).max().unwrap_or(0)
    }
}

impl Behavior {
    /// The API server's defaulting of a behavior that is present.
    pub fn from_spec(spec: &BehaviorSpec) -> Self {
        let up = Rules {
            window_seconds: Some(0),
            select: SelectPolicy::Max,
            policies: vec![
                Policy { kind: PolicyType::Pods, value: 4, period_seconds: 15 },
                Policy { kind: PolicyType::Percent, value: 100, period_seconds: 15 },
            ],
            tolerance: None,
        };
        let down = Rules {
            window_seconds: None,
            select: SelectPolicy::Max,
            policies: vec![Policy { kind: PolicyType::Percent, value: 100, period_seconds: 15 }],
            tolerance: None,
        };
        Self {
            scale_up: Rules::defaulted(spec.scale_up.as_ref(), up),
            scale_down: Rules::defaulted(spec.scale_down.as_ref(), down),
        }
    }
}

/// The replicas one policy allows from `period_start` (the replica count at the start of its
/// period), scaling up.
pub fn up_proposal(policy: &Policy, period_start: i32) -> i32 {
    match policy.kind {
        PolicyType::Pods => period_start + policy.value,
        // Rounded up so that a small percentage still adds a pod.
        PolicyType::Percent => (f64::from(period_start) * (1.0 + f64::from(policy.value) / 100.0)).ceil() as i32,
    }
}

/// The replicas one policy allows from `period_start`, scaling down.
pub fn down_proposal(policy: &Policy, period_start: i32) -> i32 {
    match policy.kind {
        PolicyType::Pods => period_start - policy.value,
        // Go's int32(float64) conversion truncates.
        PolicyType::Percent => (f64::from(period_start) * (1.0 - f64::from(policy.value) / 100.0)) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerances_parse_like_quantities() {
        assert_eq!(Tolerance::parse("0.05").map(Tolerance::as_f64), Ok(0.05));
        assert_eq!(Tolerance::parse("50m").map(Tolerance::as_f64), Ok(0.05));
        assert_eq!(Tolerance::parse("0.10").map(Tolerance::as_f64), Ok(0.1));
        assert_eq!(Tolerance::parse("0").map(Tolerance::as_f64), Ok(0.0));
        assert!(Tolerance::parse("five").is_err());
        assert!(Tolerance::parse("").is_err());
        assert!(Tolerance::parse("-0.1").is_err());
    }

    #[test]
    fn a_rule_given_replaces_only_the_fields_it_sets() {
        let spec: BehaviorSpec =
            serde_json::from_value(serde_json::json!({"scaleDown": {"stabilizationWindowSeconds": 60}}))
                .expect("a behavior");
        let b = Behavior::from_spec(&spec);
        assert_eq!(b.scale_down.window_seconds, Some(60));
        assert_eq!(b.scale_down.policies, vec![Policy { kind: PolicyType::Percent, value: 100, period_seconds: 15 }]);
        assert_eq!(b.scale_up.window_seconds, Some(0));
        assert_eq!(b.scale_up.policies.len(), 2);
        assert!(
            serde_json::from_value::<BehaviorSpec>(serde_json::json!({"scaleUp": {"window": 1}})).is_err(),
            "an unknown field is refused, not ignored"
        );
    }

    #[test]
    fn percent_policies_round_up_going_up_and_truncate_going_down() {
        let p = Policy { kind: PolicyType::Percent, value: 10, period_seconds: 15 };
        assert_eq!(up_proposal(&p, 3), 4, "3 × 1.1 = 3.3 rounds up");
        assert_eq!(down_proposal(&p, 3), 2, "3 × 0.9 = 2.7 truncates");
        let pods = Policy { kind: PolicyType::Pods, value: 2, period_seconds: 60 };
        assert_eq!((up_proposal(&pods, 3), down_proposal(&pods, 3)), (5, 1));
    }
}
