//! The broker stress run (`stress --mode kafka|full`) as a table on stdout.

use crate::broker::{Backlog, ExactlyOnceDrains, Figures};
use crate::cost::Cost;

#[allow(clippy::print_stdout)]
fn cost_line(label: &str, c: &Cost) {
    let (cpu, cs) = (&c.cpu_us_per_record, &c.context_switches_per_record);
    println!(
        "  {label:<18} CPU-µs/record process {:.2}  broker {:.2}  redis {:.2}  feeder {:.2};  \
         switches/record {:.2} / {:.2} / {:.2}",
        cpu.process, cpu.broker, cpu.redis, cpu.feeder, cs.process, cs.broker, cs.redis
    );
    let b = &c.broker;
    let per_request = if b.produce_requests > 0 { format!("{:.1}", b.records_per_produce_request) } else { "-".into() };
    println!(
        "  {:<18} broker: {:.0} produce + {:.0} fetch requests/s, {per_request} records/produce request, {} requests in all",
        "", b.produce_per_sec, b.fetch_per_sec, b.all_requests
    );
    let top = |threads: &[(String, f64)]| -> String {
        threads.iter().take(6).map(|(name, us)| format!("{name} {us:.2}")).collect::<Vec<_>>().join(", ")
    };
    println!("  {:<18} process threads (CPU-µs/record): {}", "", top(&c.threads_cpu_us_per_record));
    if !c.broker_threads_cpu_us_per_record.is_empty() {
        println!("  {:<18} broker threads (CPU-µs/record): {}", "", top(&c.broker_threads_cpu_us_per_record));
    }
}

#[allow(clippy::print_stdout)]
pub fn print(f: &Figures) {
    println!("mode stress/{:?} ({} distinct records)", f.mode, f.distinct_records);
    backlog_lines(&f.backlog);
    if let Some(max) = f.max_sustained_rate {
        println!("  max sustained      {max:>10.0} records/s (feeder running; {} trials)", f.ramp.len());
    }
    open_loop_lines(f);
    load_lines(f);
}

/// Cost against load, and each headline open loop's tail and worst stall.
#[allow(clippy::print_stdout)]
fn load_lines(f: &Figures) {
    let warm = if f.warmed_up { "warmed up" } else { "cold (no warm-up)" };
    let uptime =
        f.broker_uptime_seconds.map_or(String::new(), |s| format!(", broker up {:.1} min at the start", s / 60.0));
    let heap = f.broker_heap.as_ref().map_or(String::new(), |h| format!(", its heap {h}"));
    println!("  cost against load ({warm}{uptime}{heap}):");
    println!(
        "  {:<12} {:>10} {:>10} {:>26} {:>8} {:>8} {:>20} {:>16} {:>14}",
        "load",
        "offered",
        "achieved",
        "CPU-µs/rec proc/brk/redis",
        "system",
        "÷ drain",
        "produce/fetch per rec",
        "p50/p99 ms",
        "best loop, ÷"
    );
    for p in &f.cost_by_load {
        let latency = p.p50_ms.zip(p.p99_ms).map_or("-".to_string(), |(a, b)| format!("{a:.1}/{b:.1}"));
        let best = p
            .best_system_cpu_us_per_record
            .zip(p.over_best)
            .map_or("-".to_string(), |(b, r)| format!("{b:.2}, {r:.2}"));
        println!(
            "  {:<12} {:>10} {:>10.0} {:>26} {:>8.2} {:>8.2} {:>20} {:>16} {:>14}",
            p.label,
            p.offered.map_or("-".to_string(), |r| format!("{r:.0}")),
            p.records_per_sec,
            format!(
                "{:.2}/{:.2}/{:.2}",
                p.process_cpu_us_per_record, p.broker_cpu_us_per_record, p.redis_cpu_us_per_record
            ),
            p.system_cpu_us_per_record,
            p.over_drain,
            format!("{:.3}/{:.4}", p.produce_requests_per_record, p.fetch_requests_per_record),
            latency,
            best
        );
    }
    for (i, o) in std::iter::once(&f.open_loop).chain(&f.open_loop_repeats).enumerate() {
        let stall = o.worst_stall.as_ref().map_or("-".to_string(), |s| {
            format!(
                "{:.0} ms in second {} (window {}-{}): {}",
                s.latency_ms, s.second, s.window.0, s.window.1, s.verdict
            )
        });
        println!(
            "  headline run {}: p50 {:.2} ms p99 {:.2} ms (p99/p50 {:.2}); worst stall {stall}",
            i + 1,
            o.latency.p50_ns as f64 / 1e6,
            o.latency.p99_ns as f64 / 1e6,
            o.p99_over_p50
        );
    }
}

/// The backlog drains: the bare consumer, the fair ceiling, the processor, exactly-once.
#[allow(clippy::print_stdout)]
fn backlog_lines(b: &Backlog) {
    println!("  backlog produce    {:>10.0} records/s", b.produce.records_per_sec);
    println!("  bare consumer      {:>10.0} records/s (the client's own ceiling)", b.bare_consumer.records_per_sec);
    cost_line("", &b.bare_consumer_cost);
    println!(
        "  fair ceiling       {:>10.0} records/s ({}, {} batches)",
        b.ceiling.records_per_sec, b.ceiling.variant, b.ceiling.batches
    );
    cost_line("", &b.ceiling_cost);
    if let Some(best) = &b.best {
        println!(
            "  best loop          {:>10.0} records/s ({}, {} threads; the processor drains at {:.3} × it)",
            best.ceiling.records_per_sec, best.ceiling.variant, best.threads, best.processor_over_best
        );
        cost_line("", &best.cost);
    }
    if let Some(t) = &b.ceiling_transactional {
        println!(
            "  ceiling, txn {:>4} ms {:>7.0} records/s  = {:.3} × fair ceiling ({}, {} batches)",
            t.interval_ms, t.ceiling.records_per_sec, t.over_plain, t.ceiling.variant, t.ceiling.batches
        );
        cost_line("", &t.cost);
    }
    println!(
        "  processor          {:>10.0} records/s  = {:.3} × fair ceiling, {:.3} × bare consumer",
        b.processor_records_per_sec, b.processor_over_ceiling, b.processor_over_bare
    );
    cost_line("", &b.processor_cost);
    if b.processor_drains.len() > 1 {
        let each: Vec<String> = b
            .processor_drains
            .iter()
            .map(|d| format!("{:.0} at {:.2}", d.records_per_sec, d.cost.cpu_us_per_record.system()))
            .collect();
        println!(
            "    the median of {} drains (records/s at whole-system CPU-µs/record): {}",
            each.len(),
            each.join(", ")
        );
    }
    if let Some(e) = &b.exactly_once {
        exactly_once_lines(e);
    }
}

/// The exactly-once drains against the at-least-once ones.
#[allow(clippy::print_stdout)]
fn exactly_once_lines(e: &ExactlyOnceDrains) {
    let rates = |d: &[crate::broker::Drain]| {
        d.iter().map(|d| format!("{:.0}", d.records_per_sec)).collect::<Vec<_>>().join(", ")
    };
    let (a, x) = (&e.at_least_once_median, &e.exactly_once_median);
    println!(
        "  exactly-once {:>4} ms: median {:.0} records/s = {:.3} × at-least-once's {:.0} (paired: {:.3}; drains {} vs {}); \
         system CPU-µs/record {:.2} vs {:.2}, processor {:.2} vs {:.2}; {} transactions committed, {} aborted",
        e.interval_ms,
        x.records_per_sec,
        e.over_at_least_once,
        a.records_per_sec,
        e.over_at_least_once_paired,
        rates(&e.exactly_once),
        rates(&e.at_least_once),
        x.system_cpu_us_per_record,
        a.system_cpu_us_per_record,
        x.process_cpu_us_per_record,
        a.process_cpu_us_per_record,
        e.transactions_committed,
        e.transactions_aborted
    );
    for d in &e.exactly_once {
        cost_line("exactly-once", &d.cost);
    }
}

/// The open loop at its target rate: latency, cost, batching; the exactly-once open loop.
#[allow(clippy::print_stdout)]
fn open_loop_lines(f: &Figures) {
    let (b, o) = (&f.backlog, &f.open_loop);
    let l = &o.latency;
    let ms = |ns: u64| ns as f64 / 1e6;
    println!("  open loop          {:>10.0} records/s target, {:.0} achieved", o.target_rate, o.records_per_sec);
    println!(
        "  latency (due → done) p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  p999 {:.2} ms  max {:.2} ms  (p99/p50 {:.2})",
        ms(l.p50_ns),
        ms(l.p95_ns),
        ms(l.p99_ns),
        ms(l.p999_ns),
        ms(l.max_ns),
        o.p99_over_p50
    );
    cost_line("open loop", &o.cost);
    if let Some(e) = &f.open_loop_exactly_once {
        let l = &e.latency;
        println!(
            "  open loop, exactly-once {:.0} records/s achieved; due → handled p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            e.records_per_sec,
            ms(l.p50_ns),
            ms(l.p99_ns),
            ms(l.max_ns)
        );
        cost_line("", &e.cost);
        if let Some(t) = &e.transactions {
            println!(
                "  {:<18} {} transactions committed, {} aborted; ending one took {:.1} ms on average, {:.1}% over 50 ms",
                "",
                t.committed,
                t.aborted,
                t.end_mean_ms,
                t.ends_over_50ms * 100.0
            );
        }
    }
    println!("  peak RSS           {:.0} MiB (bench process)", o.peak_rss_mib);
    println!(
        "  redis              {:.2} round trips/1000 records, {:.1} commands/round trip, {} connections",
        o.redis.round_trips_per_1000_records,
        o.redis.commands_per_round_trip,
        o.redis.connections.unwrap_or_default()
    );
    let kafka_connections = o.kafka.connections.map_or(String::new(), |n| format!(", {n} connections"));
    println!(
        "  kafka              {:.1} processor records/produce request{kafka_connections}",
        o.kafka.records_per_produce_request
    );
    let sat = &b.saturated;
    println!(
        "  saturated (backlog) {:.1} Redis commands/round trip, {:.1} Kafka records/produce request",
        sat.redis.commands_per_round_trip, sat.kafka.records_per_produce_request
    );
}
