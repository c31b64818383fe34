//! What a simulation replays: the records produced per second over time (and the lag at
//! the start), from one of three sources:
//!
//! - `synthetic:base=2000,burst=20000@300+120,length=1800`: a base rate with bursts (peak
//!   rate `@` start second `+` duration), for `length` seconds; `ramp=R@S+D` rises linearly
//!   from the base to R over D seconds and falls back;
//! - `prometheus:FILE`: a `query_range` export (`/api/v1/query_range` JSON) of a produce-rate
//!   query, e.g. `sum(rate(kafka_topic_partition_current_offset{topic="chain.transactions"}[1m]))`;
//!   every series is summed per timestamp;
//! - `demo:FILE`: a sluice-demo report (`results/demo/*.json`): the records produced, per
//!   sample, and the lag at its start.

use serde::Deserialize;

/// The produce rate over time, one value per `step_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub name: String,
    pub step_s: f64,
    /// Records per second produced during each step.
    pub produce: Vec<f64>,
    /// Records already behind at the start.
    pub initial_lag: f64,
}

impl Trace {
    /// The trace's length, seconds.
    pub fn length_s(&self) -> f64 {
        self.produce.len() as f64 * self.step_s
    }

    /// The same trace on a clock `stretch` times slower, its rates `factor` times higher
    /// (its initial lag with them).
    pub fn scaled(self, stretch: f64, factor: f64) -> Self {
        Self {
            name: format!("{} (time ×{stretch}, rate ×{factor})", self.name),
            step_s: self.step_s * stretch,
            produce: self.produce.iter().map(|r| r * factor).collect(),
            initial_lag: self.initial_lag * factor * stretch,
        }
    }

    /// The produce rate at `t_s`.
    pub fn rate_at(&self, t_s: f64) -> f64 {
        let i = (t_s / self.step_s).floor().max(0.0) as usize;
        self.produce.get(i).copied().unwrap_or(0.0)
    }

    /// Reads `synthetic:…`, `prometheus:FILE` or `demo:FILE`, the files through `read`.
    pub fn parse(spec: &str, read: impl Fn(&str) -> std::io::Result<String>) -> Result<Self, BadTrace> {
        let (kind, rest) = spec
            .split_once(':')
            .ok_or_else(|| BadTrace::Spec(format!("{spec:?}: expected synthetic:…, prometheus:FILE or demo:FILE")))?;
        let file = |path: &str| read(path).map_err(|source| BadTrace::Read { path: path.to_string(), source });
        match kind {
            "synthetic" => synthetic(rest),
            "prometheus" => prometheus(rest, &file(rest)?),
            "demo" => demo(rest, &file(rest)?),
            other => Err(BadTrace::Spec(format!("{other:?}: a trace is synthetic:…, prometheus:FILE or demo:FILE"))),
        }
    }
}

/// A trace that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BadTrace {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A file that is not what its kind says (a query_range response, a sluice-demo report).
    #[error("{path}: not a {expected}: {source}")]
    NotJson {
        path: String,
        expected: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A specification or a file's content that makes no trace.
    #[error("{0}")]
    Spec(String),
}

/// `PEAK@START+DURATION`.
fn shape(text: &str) -> Result<(f64, f64, f64), BadTrace> {
    let bad = || BadTrace::Spec(format!("{text:?}: expected RATE@START+DURATION"));
    let (peak, when) = text.split_once('@').ok_or_else(bad)?;
    let (start, duration) = when.split_once('+').ok_or_else(bad)?;
    let n = |s: &str| s.trim().parse::<f64>().map_err(|_| bad());
    Ok((n(peak)?, n(start)?, n(duration)?))
}

fn synthetic(spec: &str) -> Result<Trace, BadTrace> {
    let (mut base, mut length) = (1000.0, 1800.0);
    let (mut bursts, mut ramps) = (Vec::new(), Vec::new());
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) =
            part.split_once('=').ok_or_else(|| BadTrace::Spec(format!("{part:?}: expected key=value")))?;
        let number = || value.parse::<f64>().map_err(|_| BadTrace::Spec(format!("{key}={value:?} is not a number")));
        match key {
            "base" => base = number()?,
            "length" => length = number()?,
            "burst" => bursts.push(shape(value)?),
            "ramp" => ramps.push(shape(value)?),
            other => {
                return Err(BadTrace::Spec(format!(
                    "synthetic trace: unknown key {other:?} (base, burst, ramp, length)"
                )));
            }
        }
    }
    if !(length >= 1.0 && base >= 0.0) {
        return Err(BadTrace::Spec("synthetic trace: length must be at least 1 and base at least 0".into()));
    }
    let produce = (0..length as usize)
        .map(|t| {
            let t = t as f64;
            let mut rate = base;
            for &(peak, start, duration) in &bursts {
                if t >= start && t < start + duration {
                    rate = rate.max(peak);
                }
            }
            for &(peak, start, duration) in &ramps {
                let half = duration / 2.0;
                if t >= start && t < start + duration && half > 0.0 {
                    let x = if t < start + half { (t - start) / half } else { (start + duration - t) / half };
                    rate = rate.max(base + (peak - base) * x);
                }
            }
            rate
        })
        .collect();
    Ok(Trace { name: format!("synthetic:{spec}"), step_s: 1.0, produce, initial_lag: 0.0 })
}

#[derive(Deserialize)]
struct PromResponse {
    data: PromData,
}

#[derive(Deserialize)]
struct PromData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<PromSeries>,
}

#[derive(Deserialize)]
struct PromSeries {
    values: Vec<(f64, String)>,
}

/// A file's JSON as what its kind says it is (`expected`, named in the error).
fn json<T: serde::de::DeserializeOwned>(path: &str, text: &str, expected: &'static str) -> Result<T, BadTrace> {
    serde_json::from_str(text).map_err(|source| BadTrace::NotJson { path: path.to_string(), expected, source })
}

fn prometheus(path: &str, text: &str) -> Result<Trace, BadTrace> {
    let r: PromResponse = json(path, text, "query_range response")?;
    if r.data.result_type != "matrix" {
        return Err(BadTrace::Spec(format!(
            "{path}: resultType {:?}, expected matrix (a query_range export)",
            r.data.result_type
        )));
    }
    let mut sums: std::collections::BTreeMap<i64, f64> = std::collections::BTreeMap::new();
    for series in &r.data.result {
        for (at, value) in &series.values {
            let v: f64 = value.parse().map_err(|_| BadTrace::Spec(format!("{path}: {value:?} is not a number")))?;
            *sums.entry((at * 1000.0).round() as i64).or_default() += if v.is_finite() { v } else { 0.0 };
        }
    }
    let times: Vec<i64> = sums.keys().copied().collect();
    if times.len() < 2 {
        return Err(BadTrace::Spec(format!("{path}: fewer than two samples")));
    }
    let step_ms = times.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(1000).max(1);
    let produce: Vec<f64> = (0..=((times[times.len() - 1] - times[0]) / step_ms))
        .map(|i| step_value(&sums, times[0] + i * step_ms))
        .collect();
    Ok(Trace { name: format!("prometheus:{path}"), step_s: step_ms as f64 / 1000.0, produce, initial_lag: 0.0 })
}

/// The sample at `at_ms`, or the last before it (a gap holds the last value).
fn step_value(sums: &std::collections::BTreeMap<i64, f64>, at_ms: i64) -> f64 {
    sums.range(..=at_ms).next_back().map_or(0.0, |(_, v)| *v)
}

#[derive(Deserialize)]
struct DemoReport {
    timeline: Vec<DemoSample>,
}

#[derive(Deserialize)]
struct DemoSample {
    t: f64,
    records_produced: f64,
    lag: Option<f64>,
}

fn demo(path: &str, text: &str) -> Result<Trace, BadTrace> {
    let r: DemoReport = json(path, text, "sluice-demo report")?;
    if r.timeline.len() < 2 {
        return Err(BadTrace::Spec(format!("{path}: fewer than two samples")));
    }
    let mut produce = Vec::new();
    for w in r.timeline.windows(2) {
        let dt = w[1].t - w[0].t;
        let rate = if dt > 0.0 { ((w[1].records_produced - w[0].records_produced) / dt).max(0.0) } else { 0.0 };
        // One value per second of the sample's span.
        for _ in 0..dt.round().max(1.0) as usize {
            produce.push(rate);
        }
    }
    let initial_lag = r.timeline[0].lag.unwrap_or(0.0);
    Ok(Trace { name: format!("demo:{path}"), step_s: 1.0, produce, initial_lag })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(_: &str) -> std::io::Result<String> {
        Err(std::io::Error::other("no files here"))
    }

    #[test]
    fn synthetic_bursts_and_ramps() {
        let t = Trace::parse("synthetic:base=100,burst=1000@10+5,ramp=500@20+10,length=40", no_files).expect("a trace");
        assert_eq!(t.produce.len(), 40);
        assert_eq!((t.rate_at(9.0), t.rate_at(10.0), t.rate_at(14.9), t.rate_at(15.0)), (100.0, 1000.0, 1000.0, 100.0));
        assert_eq!((t.rate_at(25.0), t.rate_at(20.0)), (500.0, 100.0), "the ramp peaks halfway");
        assert!(Trace::parse("synthetic:burst=5", no_files).is_err());
        assert!(Trace::parse("synthetic:speed=5", no_files).is_err());
        assert!(Trace::parse("csv:x", no_files).is_err());
    }

    #[test]
    fn a_prometheus_export_is_summed_per_timestamp_and_gaps_hold() {
        let json = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"partition":"0"},"values":[[100,"10"],[115,"20"],[145,"40"]]},
            {"metric":{"partition":"1"},"values":[[100,"1"],[115,"2"],[145,"4"]]}]}}"#;
        let t = Trace::parse("prometheus:x.json", |_| Ok(json.to_string())).expect("a trace");
        assert_eq!(t.step_s, 15.0);
        assert_eq!(t.produce, vec![11.0, 22.0, 22.0, 44.0]);
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(Trace::parse("prometheus:v.json", |_| Ok(vector.to_string())).is_err());
    }

    #[test]
    fn a_demo_report_gives_rates_per_second_and_the_starting_lag() {
        let json = r#"{"timeline":[{"t":0.0,"records_produced":0,"lag":50},{"t":2.0,"records_produced":400,"lag":10},{"t":3.0,"records_produced":700,"lag":null}]}"#;
        let t = Trace::parse("demo:r.json", |_| Ok(json.to_string())).expect("a trace");
        assert_eq!((t.produce.clone(), t.initial_lag), (vec![200.0, 200.0, 300.0], 50.0));
        let s = t.scaled(10.0, 2.0);
        assert_eq!((s.length_s(), s.rate_at(25.0), s.initial_lag), (30.0, 600.0, 1_000.0));
    }
}
