"""results/README.md's blocks for the stress harness (render.py imports this):
`stress-in-process`, `stress-kafka` and `stress-full` (the backlog drains, the rate search,
the open loops with their worst stalls, cost against load), the exactly-once comparison, and
the plots `stress-latency.png` and `cost-vs-load.png`."""

import matplotlib.pyplot as plt

from render_common import dist_of, ms, n0, percentile_axis, save, source, table, us


def stress_in_process(name, r):
    f = r["figures"]
    lat = f["latency"]
    rows = [[
        n0(f["records_per_sec"]), us(lat["p50_ns"]), us(lat["p95_ns"]), us(lat["p99_ns"]),
        us(lat["p999_ns"]), us(lat["max_ns"]), f"{f['cpu_us_per_record']:.2f}", f"{f['peak_rss_mib']:.0f} MiB",
    ]]
    head = ["records/s", "p50", "p95", "p99", "p999", "max", "CPU-µs/record", "peak RSS"]
    return (
        table(head, rows)
        + f"\n\n{f['workers']} workers, {f['seconds']:.0f} s, {f['distinct_records']:,} distinct records "
        f"replayed; {f['swaps_published']:,} swaps handed to the (in-memory) publisher.\n\n" + source(name, r)
    )


def system_us(cpu):
    """Whole-system CPU-µs per record: processor + broker + Redis (the feeder left out)."""
    return cpu["process"] + cpu["broker"] + cpu["redis"]


def cost_cells(c):
    """CPU-µs per record of the process / broker / Redis, context switches per record
    of the process, the broker's produce and fetch requests/s and records per produce request."""
    cpu, cs, b = c["cpu_us_per_record"], c["context_switches_per_record"], c["broker"]
    return [
        f"{cpu['process']:.1f} / {cpu['broker']:.1f} / {cpu['redis']:.1f}",
        f"{system_us(cpu):.1f}",
        f"{cs['process']:.2f}",
        f"{n0(b['produce_per_sec'])} / {n0(b['fetch_per_sec'])}",
        f"{b['records_per_produce_request']:.1f}" if b["produce_requests"] else "—",
    ]


COST_HEAD = ["CPU-µs/record (process / broker / Redis)", "whole system", "switches/record",
             "broker produce / fetch req/s", "records/produce req"]


def trial_text(t):
    """One trial of the rate search; `end_ms` (the verdict's figure since
    2026-12-07) is missing from older runs, judged by p99."""
    end = f", {t['end_ms']:.0f} ms at the end" if "end_ms" in t else ""
    return f"{t['rate']:,.0f} {'✓' if t['sustained'] else '✗'} (p99 {t['p99_ms']:.0f} ms{end})"


def drains_text(b):
    """The processor's drains, when there were several: the median one is in the table."""
    drains = b.get("processor_drains", [])
    if len(drains) < 2:
        return ""
    each = ", ".join(f"{n0(d['records_per_sec'])} at {system_us(d['cost']['cpu_us_per_record']):.2f}" for d in drains)
    return (f" The processor drained the backlog {len(drains)} times; its row is the drain of the median "
            f"whole-system cost (records/s at CPU-µs/record: {each}).")


def threads_text(c, top=5, key="threads_cpu_us_per_record"):
    return ", ".join(f"{name} {us:.1f}" for name, us in c.get(key, [])[:top])


def stress_broker(name, r):
    f = r["figures"]
    b, o = f["backlog"], f["open_loop"]
    lat, c = o["latency"], o["cost"]
    ceiling = b["ceiling"]
    rows = [
        ["bare rdkafka consume + commit (the client's ceiling)", n0(b["bare_consumer"]["records_per_sec"]),
         f"{b['bare_consumer']['records_per_sec'] / ceiling['records_per_sec']:.2f}", *cost_cells(b["bare_consumer_cost"])],
        [f"fair ceiling: {ceiling['variant']}", n0(ceiling["records_per_sec"]), "1.00", *cost_cells(b["ceiling_cost"])],
        *([[f"best loop: {best['ceiling']['variant']}, {best['threads']} threads on one producer",
            n0(best["ceiling"]["records_per_sec"]),
            f"{best['ceiling']['records_per_sec'] / ceiling['records_per_sec']:.2f}", *cost_cells(best["cost"])]]
          if (best := b.get("best")) else []),
        *([[f"fair ceiling in transactions, committed every {t['interval_ms']} ms", n0(t["ceiling"]["records_per_sec"]),
            f"{t['over_plain']:.3f}", *cost_cells(t["cost"])]] if (t := b.get("ceiling_transactional")) else []),
        ["processor", n0(b["processor_records_per_sec"]), f"{b['processor_over_ceiling']:.3f}",
         *cost_cells(b["processor_cost"])],
    ]
    lines = [
        table(["backlog drain", "records/s", "÷ fair ceiling", *COST_HEAD], rows),
        "",
        (f"Processor ÷ best loop **{b['best']['processor_over_best']:.3f}**; " if b.get("best") else "")
        + f"Processor ÷ fair ceiling **{b['processor_over_ceiling']:.3f}**; processor ÷ bare consumer "
        f"{b['processor_over_bare']:.3f}. Backlog of {f['distinct_records']:,} records, produced at "
        f"{n0(b['produce']['records_per_sec'])} records/s before the drains. Saturated, the processor sent "
        + (f"{b['saturated']['redis']['commands_per_round_trip']:.1f} Redis commands per round trip and "
           if r["figures"]["mode"] == "full" else "")
        + f"{b['saturated']['kafka']['records_per_produce_request']:.1f} records per produce request; its "
        f"threads, CPU-µs/record: {threads_text(b['processor_cost'])}. The ceiling runs on one thread (and "
        f"librdkafka's) and sent {n0(b['ceiling']['batches'])} batches." + drains_text(b),
        "",
        table(
            ["rate search (5 s trials, feeder running)", "value"],
            [
                ["trials", ", ".join(trial_text(t) for t in f.get("ramp", [])) or "— (rate given)"],
                ["max sustained rate", n0(f["max_sustained_rate"]) + " records/s" if f.get("max_sustained_rate")
                 else "—"],
            ],
        ),
        "",
        table(
            ["open loop", "value"],
            [
                ["rate (target → achieved)", f"{n0(o['target_rate'])} → {n0(o['records_per_sec'])} records/s"],
                ["latency p50 / p95 / p99", f"{ms(lat['p50_ns'])} / {ms(lat['p95_ns'])} / {ms(lat['p99_ns'])}"],
                ["latency p999 / max", f"{ms(lat['p999_ns'])} / {ms(lat['max_ns'])}"],
                ["p99 ÷ p50", f"{o['p99_over_p50']:.2f}"],
                ["CPU-µs/record: processor / broker / Redis (whole system)",
                 f"{cost_cells(c)[0]} ({cost_cells(c)[1]})"],
                ["CPU-µs/record: the feeder (own process, not in the whole system)",
                 f"{c['cpu_us_per_record']['feeder']:.1f}"],
                ["context switches/record: processor / broker / Redis",
                 " / ".join(f"{c['context_switches_per_record'][k]:.2f}" for k in ("process", "broker", "redis"))],
                ["processor threads, CPU-µs/record", threads_text(c, 6)],
                *([["broker threads, CPU-µs/record (the JVM's names, cut at 15 characters)",
                    threads_text(c, 6, "broker_threads_cpu_us_per_record")]]
                  if c.get("broker_threads_cpu_us_per_record") else []),
                ["broker: produce / fetch requests/s (all clients)", cost_cells(c)[3]],
                ["broker: records per produce request (all producers)", cost_cells(c)[4]],
                ["processor: records per produce request", f"{o['kafka']['records_per_produce_request']:.1f}"],
                ["Redis commands per round trip", f"{o['redis']['commands_per_round_trip']:.1f}"],
                ["Redis round trips per 1,000 records", f"{o['redis']['round_trips_per_1000_records']:.1f}"],
                ["Redis connections held", str(o["redis"]["connections"])],
                ["peak RSS (bench process)", f"{o['peak_rss_mib']:.0f} MiB"],
            ],
        ),
        "",
        f"Open loop {r['config']['seconds']:.0f} s ({o['records']:,} records, replayed past the distinct set), "
        "fed by a feeder in its own process. Latency runs from when each record was due to when the processor "
        "finished it (coordinated omission corrected).",
        "",
        *load_lines(f, r["config"]),
        source(name, r),
    ]
    return "\n".join(lines)


def load_lines(f, config):
    """The load range (issue 31): cost against load, the headline open loops with their worst
    stalls, and whether the broker was warm. Results from before it have none of these."""
    if "cost_by_load" not in f:
        return []
    opt = lambda v, fmt: "—" if v is None else fmt.format(v)
    rows = [[p["label"], opt(p["offered"], "{:,.0f}"), n0(p["records_per_sec"]),
             f"{p['process_cpu_us_per_record']:.1f} / {p['broker_cpu_us_per_record']:.1f} / "
             f"{p['redis_cpu_us_per_record']:.1f}",
             f"**{p['system_cpu_us_per_record']:.1f}**", f"{p['over_drain']:.2f}",
             f"{p['produce_requests_per_record']:.3f} / {p['fetch_requests_per_record']:.4f}",
             f"{opt(p['p50_ms'], '{:.1f}')} / {opt(p['p99_ms'], '{:.1f}')}"] for p in f["cost_by_load"]]
    head = ["load", "offered records/s", "achieved", "CPU-µs/record (processor / broker / Redis)", "whole system",
            "÷ drain", "broker produce / fetch requests per record", "p50 / p99 ms"]
    if any(p.get("best_system_cpu_us_per_record") for p in f["cost_by_load"]):
        head.append("best loop at the same rate (the drain row: its own drain): whole system, the processor's ÷ it")
        for row, p in zip(rows, f["cost_by_load"]):
            best, over = p.get("best_system_cpu_us_per_record"), p.get("over_best")
            row.append("—" if best is None or over is None else f"{best:.1f}, {over:.2f} ×")
    runs = [f["open_loop"], *f.get("open_loop_repeats", [])]
    stalls = [[str(i + 1), ms(o["latency"]["p50_ns"]), ms(o["latency"]["p99_ns"]), f"{o['p99_over_p50']:.2f}",
               stall_text(o.get("worst_stall"))] for i, o in enumerate(runs)]
    uptime = f.get("broker_uptime_seconds")
    warm = ("warmed up first" if f.get("warmed_up") else "**not warmed up (a cold run)**") + (
        f"; the broker had run {uptime / 60:,.1f} min when the run began" if uptime is not None else "") + (
        f", on a {f['broker_heap']} heap" if f.get("broker_heap") else "")
    return [
        table(head, rows),
        "",
        f"Every open loop of the run ({config.get('load_seconds', 0):.0f} s for the further loads), against the "
        "backlog drain. Whole system: processor + broker + Redis; the feeder, which stands in for the ingest, is "
        f"left out, but the broker's work for its produce requests is not. Broker: {warm}.",
        "",
        table(["open loop at the headline rate", "p50", "p99", "p99 ÷ p50", "worst stall, and what stood out in it"],
              stalls),
        "",
    ]


def stall_text(stall):
    if not stall:
        return "—"
    a, b = stall["window"]
    return f"{stall['latency_ms']:,.0f} ms, done in second {stall['second']} (waited through {a}–{b}): " \
        + stall["verdict"]


def plot_cost_vs_load(reports, path):
    """Whole-system (and processor) CPU-µs per record against the achieved rate, per mode."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (label, r) in enumerate(reports):
        points = sorted(r["figures"]["cost_by_load"], key=lambda p: p["records_per_sec"])
        x = [p["records_per_sec"] for p in points]
        ax.plot(x, [p["system_cpu_us_per_record"] for p in points], "o-", color=f"C{i}",
                label=f"{label}: whole system")
        ax.plot(x, [p["process_cpu_us_per_record"] for p in points], "s:", color=f"C{i}",
                label=f"{label}: processor")
        # The drain row's best figure is the best loop's own, faster drain: not at this rate.
        best = [p for p in points if p.get("best_system_cpu_us_per_record") and p["label"] != "drain"]
        if best:
            ax.plot([p["records_per_sec"] for p in best], [p["best_system_cpu_us_per_record"] for p in best], "^--",
                    color=f"C{i}", alpha=0.6, label=f"{label}: the best loop, whole system")
        for p in points:
            if p["label"] == "drain":
                ax.annotate("drain", (p["records_per_sec"], p["system_cpu_us_per_record"]),
                            textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.set_xlabel("records/s")
    ax.set_ylabel("CPU-µs per record")
    ax.set_ylim(bottom=0)
    ax.set_title("Cost per record against load")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    save(fig, path)


def stress_exactly_once(name, r):
    """`stress --exactly-once-ms N`, a run of its own: exactly-once against at-least-once in it."""
    f = r["figures"]
    rows = [
        ["rate search: max sustained (at-least-once)", n0(f["max_sustained_rate"]) + " records/s" if f.get("max_sustained_rate") else "—"],
        ["fair ceiling (backlog drain)", n0(f["backlog"]["ceiling"]["records_per_sec"]) + " records/s"],
    ]
    return "\n".join([*exactly_once_lines(f), table(["the same run", "value"], rows), "", source(name, r)])


def exactly_once_lines(f):
    """`--exactly-once-ms`: the backlog drained alternately at-least-once and exactly-once, and the
    open loop again at the same rate exactly-once."""
    e, eo = f["backlog"].get("exactly_once"), f.get("open_loop_exactly_once")
    if not e or not eo:
        return []
    o = f["open_loop"]

    def system(c):
        cpu = c["cpu_us_per_record"]
        return cpu["process"] + cpu["broker"] + cpu["redis"]

    a, x = e["at_least_once_median"], e["exactly_once_median"]
    rates = lambda drains: ", ".join(n0(d["records_per_sec"]) for d in drains)
    rows = [
        ["backlog drain, records/s (median)", f"{n0(a['records_per_sec'])} ({rates(e['at_least_once'])})",
         f"{n0(x['records_per_sec'])} ({rates(e['exactly_once'])})", f"{e['over_at_least_once']:.3f}"],
        *([["backlog drain, each exactly-once drain ÷ the at-least-once one before it",
             "", ", ".join(f"{x:.3f}" for x in e["pair_ratios"]), f"{e['over_at_least_once_paired']:.3f} (median)"]]
          if "pair_ratios" in e else []),
        ["backlog drain, whole-system CPU-µs/record (median)", f"{a['system_cpu_us_per_record']:.2f}",
         f"{x['system_cpu_us_per_record']:.2f}", f"{x['system_cpu_us_per_record'] / a['system_cpu_us_per_record']:.3f}"],
        ["backlog drain, processor CPU-µs/record (median)", f"{a['process_cpu_us_per_record']:.2f}",
         f"{x['process_cpu_us_per_record']:.2f}", f"{x['process_cpu_us_per_record'] / a['process_cpu_us_per_record']:.3f}"],
        [f"open loop at {n0(o['target_rate'])} records/s: processor / broker / Redis CPU-µs/record",
         cost_cells(o["cost"])[0], cost_cells(eo["cost"])[0], f"{system(eo['cost']) / system(o['cost']):.3f} (whole system)"],
        ["open loop: latency to the handler's completion p50 / p99",
         f"{ms(o['latency']['p50_ns'])} / {ms(o['latency']['p99_ns'])}",
         f"{ms(eo['latency']['p50_ns'])} / {ms(eo['latency']['p99_ns'])}", ""],
        ["open loop: broker produce requests/s", n0(o["cost"]["broker"]["produce_per_sec"]),
         n0(eo["cost"]["broker"]["produce_per_sec"]), ""],
    ]
    return [
        table(["exactly-once outputs (same run)", "at-least-once", f"exactly-once, {e['interval_ms']} ms transactions",
               "÷"], rows),
        "",
        f"The backlog was drained {len(e['at_least_once'])} times at-least-once and {len(e['exactly_once'])} times "
        f"exactly-once, alternately; {e['transactions_committed']} transactions committed and "
        f"{e['transactions_aborted']} aborted over the exactly-once drains. An exactly-once output is visible to a "
        "`read_committed` reader only when its transaction commits, up to one interval after the completion "
        "measured here.",
        "",
    ]


def plot_stress(reports, path):
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, r in reports:
        lat = r["figures"]["open_loop"]["latency"] if "open_loop" in r["figures"] else r["figures"]["latency"]
        dist = dist_of(lat)
        ax.plot([1 / max(1 - q, 1e-5) for q, _ in dist], [ns / 1e6 for _, ns in dist], "o-", label=label)
    percentile_axis(ax, "latency, ms")
    ax.set_title("Stress harness: latency distribution per mode")
    ax.legend()
    save(fig, path)
