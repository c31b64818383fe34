//! One way to define and register a service's metrics: a [`Registrar`] names each series
//! `<prefix>_<thing>` and registers it in the service's registry as it is made.
//!
//! A bad definition (an invalid name or label, a name registered twice) is a programming
//! error: it panics naming the series, and every test that builds the service's metrics
//! finds it. Label values come from each crate's label enums (`as_str()`), never from
//! free strings at the call sites.

use prometheus::core::Collector;
use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Declares a label's values as an enum with `as_str()` (the label value) and `ALL`.
#[macro_export]
macro_rules! label {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $value:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            pub const ALL: &[Self] = &[$(Self::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value),+
                }
            }
        }
    };
}

/// Makes and registers series named `<prefix>_<thing>`.
#[derive(Debug, Clone)]
pub struct Registrar<'r> {
    registry: &'r Registry,
    prefix: &'r str,
}

impl<'r> Registrar<'r> {
    /// Series named `<prefix>_<thing>` (`prefix` empty: `<thing>`) in `registry`.
    pub fn new(registry: &'r Registry, prefix: &'r str) -> Self {
        Self { registry, prefix }
    }

    fn name(&self, thing: &str) -> String {
        if self.prefix.is_empty() { thing.to_string() } else { format!("{}_{thing}", self.prefix) }
    }

    fn register<C: Collector + Clone + 'static>(&self, name: &str, made: prometheus::Result<C>) -> C {
        let metric = made.unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.registry.register(Box::new(metric.clone())).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        metric
    }

    pub fn counter(&self, thing: &str, help: &str) -> IntCounter {
        let name = self.name(thing);
        self.register(&name, IntCounter::new(&name, help))
    }

    pub fn counters(&self, thing: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        let name = self.name(thing);
        self.register(&name, IntCounterVec::new(Opts::new(&name, help), labels))
    }

    pub fn gauge(&self, thing: &str, help: &str) -> IntGauge {
        let name = self.name(thing);
        self.register(&name, IntGauge::new(&name, help))
    }

    pub fn gauges(&self, thing: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        let name = self.name(thing);
        self.register(&name, IntGaugeVec::new(Opts::new(&name, help), labels))
    }

    pub fn float_gauges(&self, thing: &str, help: &str, labels: &[&str]) -> GaugeVec {
        let name = self.name(thing);
        self.register(&name, GaugeVec::new(Opts::new(&name, help), labels))
    }

    pub fn histogram(&self, thing: &str, help: &str, buckets: &[f64]) -> Histogram {
        let name = self.name(thing);
        self.register(&name, Histogram::with_opts(HistogramOpts::new(&name, help).buckets(buckets.to_vec())))
    }

    pub fn histograms(&self, thing: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
        let name = self.name(thing);
        self.register(&name, HistogramVec::new(HistogramOpts::new(&name, help).buckets(buckets.to_vec()), labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_named_with_the_prefix_and_registered() {
        let registry = Registry::new();
        let r = Registrar::new(&registry, "sluice_thing");
        r.counters("events_total", "Events", &["kind"]).with_label_values(&["a"]).inc();
        r.gauge("up", "Up").set(1);
        let names: Vec<String> = registry.gather().iter().map(|f| f.name().to_string()).collect();
        assert_eq!(names, ["sluice_thing_events_total", "sluice_thing_up"]);
    }

    #[test]
    #[should_panic(expected = "metric sluice_thing_up")]
    fn a_name_registered_twice_panics_naming_it() {
        let registry = Registry::new();
        let r = Registrar::new(&registry, "sluice_thing");
        r.gauge("up", "Up");
        r.gauge("up", "Up again");
    }
}
