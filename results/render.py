#!/usr/bin/env python3
"""Regenerates the figures in results/README.md and the plots in results/plots/
from the newest results/<UTC timestamp>-<mode>.json of each mode.

Run it through deploy/local/results.sh (which installs matplotlib when it is
missing). Only the blocks between `<!-- generated: NAME -->` and
`<!-- end generated -->` in the README are rewritten; the prose around them
(what the figures mean, what was missed and why) is written by hand.

    results/render.py [--results DIR] [--check]

--check renders into a temporary copy and fails if a generated block or a
plot could not be produced (the CI smoke uses it on its own short runs).
"""

import argparse
import glob
import json
import os
import re
import shutil
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_pods  # noqa: E402
import render_stress  # noqa: E402
from render_common import dist_of, ms, n0, percentile_axis, save, source, table, us  # noqa: E402


def newest(results, mode, where=None):
    """The newest result of `mode` (file names sort by their UTC stamp) that `where` accepts."""
    for path in sorted(glob.glob(os.path.join(results, f"*-{mode}.json")), reverse=True):
        with open(path) as f:
            report = json.load(f)
        if where is None or where(report):
            return os.path.basename(path), report
    return None, None


# lag-scale at today's scale and at ten times it (issue 27): two blocks from one mode.
TEN_TIMES = 100_000


def at_scale(report):
    return report["figures"]["group_partitions"] < TEN_TIMES


def at_ten_times(report):
    return report["figures"]["group_partitions"] >= TEN_TIMES


def contention(name, r):
    rows, reference = [], ""
    for c in r["figures"]:
        if c["what"] == "machine_reference":
            reference = (
                f"\n\nMachine reference (the same work on a thread-local `HashMap`, nothing shared): "
                f"2-thread ÷ 1-thread {c['before']['scaling']:.2f} ({c['before']['name']}) and "
                f"{c['after']['scaling']:.2f} ({c['after']['name']})."
            )
            continue
        b, a = c["before"], c["after"]
        rows.append([
            c["what"], f"{b['name']}: {n0(b['runs'][1]['ops_per_sec'])}", f"{a['name']}: {n0(a['runs'][1]['ops_per_sec'])}",
            f"{c['speedup_2_threads']:.1f}×", f"{us(b['runs'][1]['latency']['p99_ns'])} → {us(a['runs'][1]['latency']['p99_ns'])}",
            f"{b['scaling']:.2f}", f"{a['scaling']:.2f}",
        ])
    head = ["comparison", "before (2 threads, ops/s)", "after (2 threads, ops/s)", "after ÷ before",
            "p99 before → after", "before 2t ÷ 1t", "after 2t ÷ 1t"]
    return table(head, rows) + reference + "\n\n" + source(name, r)


def barrier(name, r):
    rows = []
    for p in r["figures"]:
        c, q = p["cohort"], p["pipeline"]
        rows.append([
            p["concurrency"], n0(c["items_per_sec"]), n0(q["items_per_sec"]), f"{q['utilization'] * 100:.1f}%",
            f"{p['measured_ratio']:.2f}×", f"{p['theoretical_ratio']:.2f}×",
        ])
    head = ["concurrency", "cohort items/s", "pipeline items/s", "pipeline ÷ Little's-law bound",
            "pipeline ÷ cohort", "theory"]
    io = r["config"]["io"]
    return (
        table(head, rows)
        + f"\n\n{io['base_ms']} ms base latency, {io['slow_ppm'] / 1e4:g}% of items ×{io['slow_factor']}, "
        f"{r['config']['window_seconds']:.0f} s window.\n\n" + source(name, r)
    )


def drain(name, r):
    c = r["config"]
    rows = [[
        x["instances"], n0(x["records"]), f"{x['drain_seconds']:.2f} s", n0(x["records_per_sec"]),
        f"{x['speedup']:.2f}×", n0(x["bound_records_per_sec"]), f"{x['mean_record_ms']:.2f} ms",
    ] for x in r["figures"]]
    head = ["instances", "records", "drain time", "records/s", "speedup", "Little's-law bound", "record time"]
    return (
        table(head, rows)
        + f"\n\n{c['partitions']} partitions, {c['io_ms']} ms simulated IO per record, handler concurrency "
        f"{c['concurrency']} per instance, production handler on Redis and Kafka.\n\n" + source(name, r)
    )


def ingest(name, r):
    c, f = r["config"], r["figures"]
    rows = [[
        x["mode"], n0(x["records"]), f"{x['seconds']:.2f} s", n0(x["records_per_sec"]),
        f"{x['cost']['cpu_us_per_record']['process']:.2f}", f"{x['cost']['cpu_us_per_record']['broker']:.2f}",
    ] for x in f["rounds"]]
    head = ["mode", "records", "time", "records/s", "CPU-µs/record, process", "broker"]
    return (
        table(head, rows)
        + f"\n\nMedians: idempotent {n0(f['idempotent_records_per_sec'])} records/s, transactional "
        f"{n0(f['transactional_records_per_sec'])}: transactional ÷ idempotent = **{f['throughput_ratio']:.3f}**; "
        f"CPU-µs per record (process + broker) {f['idempotent_cpu_us_per_record']:.2f} vs "
        f"{f['transactional_cpu_us_per_record']:.2f}. {n0(c['transactions'])} chain transactions a round, "
        f"{c['partitions']} partitions, transactions committed every {c['interval_ms']} ms; the process figure "
        "includes chainsim generating the chain (the same in both modes).\n\n" + source(name, r)
    )


def chain(name, r):
    f = r["figures"]
    rows = [[n0(f["generate_tx_per_sec"]), f"{f['generate_us_per_tx']:.2f} µs", n0(f["recognise_records_per_sec"]),
             f"{f['recognise_ns_per_record']:.0f} ns", f"{f['encoded_bytes_per_tx']:.0f} B"]]
    head = ["generated tx/s", "per tx", "recognised records/s", "per record", "encoded tx"]
    return table(head, rows) + "\n\n" + source(name, r)


def requests_text(requests):
    total = sum(requests.values())
    return f"{total} (" + ", ".join(f"{api} {n}" for api, n in sorted(requests.items())) + ")"


def lag_scale(name, r):
    f, c = r["figures"], r["config"]
    shape = c["shape"]
    rows = []
    for x in f["runs"]:
        steady = x["steady"]
        durations = sorted(p["duration_ms"] for p in steady)
        cpu = sum(p["cpu_ms"] for p in steady) / len(steady)
        broker = sum(p["broker_cpu_ms"] for p in steady) / len(steady)
        rows.append([
            x["selection"], f"{x['cold']['duration_ms']:,.0f} ms ({x['cold']['cpu_ms']:,.0f} CPU-ms, "
            f"{x['cold']['timed']:,} timestamps)", f"{durations[len(durations) // 2]:,.0f} ms",
            f"{durations[-1]:,.0f} ms", f"{cpu:,.0f}", f"{broker:,.0f}", requests_text(steady[-1]["requests"]),
            f"{x['rss_mib']:.0f} MiB", f"{x['scrape']['metrics_bytes'] / 1e6:.1f} MB, {x['scrape']['cpu_ms']:.0f} CPU-ms",
        ])
    head = ["groups by", "cold poll", "steady p50", "steady max", "CPU-ms/poll", "broker CPU-ms/poll",
            "requests/poll (steady)", "RSS", "/metrics scrape"]
    d = f["steady_duration"]
    worst = max(d["max"], f["cold_duration_max_ms"])
    verdict = "met" if f["target_met"] else "**missed**"
    periods = [p["period_ms"] for x in f["runs"] for p in x["steady"] if p.get("period_ms")]
    return (
        table(head, rows)
        + f"\n\n{f['groups']} groups × {shape['partitions']} partitions = {f['group_partitions']:,} group-partitions "
        f"({shape['groups_per_topic']} groups on each of {shape['topics']} topics, each group at an offset of its own; "
        f"{f['broker_partitions']:,} partitions on the broker), poll interval {c['poll_interval_ms']:,} ms, "
        f"{d['count']} steady polls over {len(f['runs'])} runs (a fresh sluice-lag each). "
        f"Every poll within the interval: {verdict} (largest {worst:,.0f} ms); "
        f"polls started every {min(periods):,}–{max(periods):,} ms. "
        f"sluice-lag: {f['cpu_us_per_group_partition']:.1f} CPU-µs per group-partition per poll; the broker: "
        f"{f['broker_cpu_ms_per_poll']:,.0f} CPU-ms per poll window ({f['broker_idle_cpu_ms']:,.0f} with no poller). "
        "The broker, sluice-lag and the harness share the machine's cores.\n\n" + source(name, r)
    )


def plot_lag_scale(r, path):
    f = r["figures"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, x in enumerate(f["runs"]):
        polls = [x["cold"]] + x["steady"]
        marker = "o" if x["selection"] == "list" else "s"
        first = i < 2
        ax.plot(range(len(polls)), [p["duration_ms"] for p in polls], marker + "-", color="C0", alpha=0.6,
                label=f"poll duration, groups by {x['selection']}" if first else None)
        ax.plot(range(len(polls)), [p["cpu_ms"] for p in polls], marker + ":", color="C1", alpha=0.6,
                label=f"sluice-lag CPU, groups by {x['selection']}" if first else None)
    ax.axhline(r["config"]["poll_interval_ms"], color="red", linestyle="--", label="poll interval")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("poll (0: the cold first poll)")
    ax.set_ylabel("ms")
    ax.set_title(f"sluice-lag: {f['group_partitions']:,} group-partitions, {len(f['runs'])} runs")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.9), ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    save(fig, path)


SECTIONS = {
    "stress-in-process": render_stress.stress_in_process,
    "stress-kafka": render_stress.stress_broker,
    "stress-full": render_stress.stress_broker,
    "stress-kafka-exactly-once": render_stress.stress_exactly_once,
    "stress-full-exactly-once": render_stress.stress_exactly_once,
    "contention": contention,
    "barrier": barrier,
    "drain": drain,
    "ingest": ingest,
    "chain": chain,
    "lag-scale": lag_scale,
    "lag-scale-10x": lag_scale,
}

# Blocks read from another mode's files, or only some of them: block → (mode, which).
SOURCES = {
    "lag-scale": ("lag-scale", at_scale),
    "lag-scale-10x": ("lag-scale", at_ten_times),
}


def plot_contention(r, path):
    comps = [c for c in r["figures"] if c["what"] != "machine_reference"]
    fig, axes = plt.subplots(1, len(comps), figsize=(4.2 * len(comps), 3.8), squeeze=False)
    for ax, c in zip(axes[0], comps):
        for variant, style in ((c["before"], "o-"), (c["after"], "s-")):
            dist = dist_of(variant["runs"][1]["latency"])
            qs = [q for q, _ in dist]
            ax.plot([1 / max(1 - q, 1e-5) for q in qs], [ns / 1e3 for _, ns in dist], style, label=variant["name"])
        percentile_axis(ax, "latency per operation, µs (2 threads)")
        ax.set_title(c["what"], fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("Contention: latency distribution before → after")
    save(fig, path)


def plot_barrier(r, path):
    pairs = r["figures"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    xs = range(len(pairs))
    w = 0.27
    ax.bar([x - w for x in xs], [p["cohort"]["items_per_sec"] for p in pairs], w, label="cohort barrier")
    ax.bar(list(xs), [p["pipeline"]["items_per_sec"] for p in pairs], w, label="bounded pipeline")
    ax.bar([x + w for x in xs], [p["pipeline"]["littles_bound_per_sec"] for p in pairs], w,
           label="Little's-law bound", alpha=0.5)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"concurrency {p['concurrency']}" for p in pairs])
    ax.set_ylabel("items/s")
    ax.set_yscale("log")
    ax.set_title("Barrier vs pipeline, 1% of items 100× slower")
    ax.legend()
    save(fig, path)


def plot_drain(r, path):
    rounds = r["figures"]
    fig, ax = plt.subplots(figsize=(6, 4))
    k = [x["instances"] for x in rounds]
    one = rounds[0]["records_per_sec"]
    ax.plot(k, [x["records_per_sec"] for x in rounds], "o-", label="measured")
    ax.plot(k, [one * i for i in k], "--", label="linear (from 1 instance)")
    ax.plot(k, [x["bound_records_per_sec"] for x in rounds], ":", label="Little's-law bound")
    ax.set_xticks(k)
    ax.set_xlabel("processor instances")
    ax.set_ylabel("records/s draining the backlog")
    ax.set_title("Lag drain")
    ax.legend()
    ax.grid(True, alpha=0.3)
    save(fig, path)


def policy_label(name):
    """A policy's label: the chart's defaults, or its override file's name."""
    base = os.path.basename(name)
    return "chart defaults" if base == "values.yaml" else base.removesuffix(".yaml")


def useful_counts(partitions):
    """The replica counts that relieve a processor (services/scaling/src/partitions.rs)."""
    return {-(-partitions // -(-partitions // n)) for n in range(1, partitions + 1)}


def counts_applied(run):
    """The counts the HPA applied, in order of first use; one that relieves no processor in bold."""
    seen = []
    for row in run["samples"]:
        if row[5] not in seen:
            seen.append(row[5])
    if "partitions" not in run:
        return ", ".join(map(str, seen))
    useful = useful_counts(run["partitions"]) | {0}
    return ", ".join(str(n) if n in useful else f"**{n}**" for n in seen)


def autoscaling(name, r):
    m = r["model"]
    head = ["policy", "peak time lag", f"time over {m['objective_s']:.0f} s", "rebalances", "replica-minutes",
            "peak replicas", "peak lag (records)", "counts applied"]
    rows = [[policy_label(x["summary"]["policy"]), f"{x['summary']['peak_time_lag_s']:.1f} s",
             f"{x['summary']['seconds_over_objective']:.0f} s", str(x["summary"]["rebalances"]),
             f"{x['summary']['replica_minutes']:.1f}", str(x["summary"]["peak_replicas"]),
             n0(x["summary"]["peak_lag"]), counts_applied(x)] for x in r["runs"]]
    useless = [c for x in r["runs"] for c in counts_applied(x).split(", ") if c.startswith("**")]
    if any("partitions" in x for x in r["runs"]):
        partitions = r["runs"][0]["partitions"]
        model_counts = (f" Counts applied: in bold, one that relieves no processor (for {partitions} partitions the "
                        f"useful ones are {', '.join(map(str, sorted(useful_counts(partitions))))})"
                        + ("." if useless else "; there are none."))
    else:
        model_counts = ""
    commits = (f", the processors commit every {m['commit_interval_s']:.0f} s" if m.get("commit_interval_s")
               else ", commits at once")
    model = (f"Trace `{r['trace']}`; model: {n0(m['per_pod_rate'])} records/s per processor, "
             f"{m['rebalance_pause_s']:.0f} s without consumption per rebalance, {m['startup_s']:.0f} s start-up, "
             f"sluice-lag polls every {m['lag_poll_s']:.0f} s, the HPA syncs every {m['sync_s']:.0f} s{commits}."
             + model_counts)
    return "\n".join([table(head, rows), "", model, "", f"Source: `{name}` (sluice-lag simulate; the command is above)."])


SECTIONS["autoscaling"] = autoscaling


def kubernetes(name, r):
    real, sim, m = r["real"], r["simulated"], r["model"]
    seconds = lambda v: "-" if v is None else f"{v:.0f} s"  # noqa: E731
    steps = lambda s: ", ".join(f"{n} at {t} s" for t, n in s)  # noqa: E731
    head = ["", "the real HPA and KEDA", "sluice-lag simulate"]
    rows = [["peak replicas", str(real["peak"]), str(sim["peak"])],
            ["replica-minutes", f"{real['replica_minutes']:.2f}", f"{sim['replica_minutes']:.2f}"],
            ["first scale-up", seconds(real["first_scale_up_s"]), seconds(sim["first_scale_up_s"])],
            ["back at minReplicas", seconds(real["back_at_min_s"]), seconds(sim["back_at_min_s"])],
            ["replicas", steps(real["steps"]), steps(sim["steps"])]]
    text = (f"Second by second over {r['seconds_compared']} s: the replica counts are equal in "
            f"{r['share_of_seconds_equal']:.0%} of the seconds, {r['mean_abs_replica_difference']:.2f} apart on "
            f"average. Simulator model: {n0(m['per_pod_rate'])} records/s per processor (the best the run showed), "
            f"{m['startup_s']:.0f} s start-up, {m['rebalance_pause_s']:.0f} s per rebalance, commits every "
            f"{m.get('commit_interval_s', 0):.0f} s.")
    return "\n".join([table(head, rows), "", text, "", f"Source: `{name}` ({r['command']})."])


SECTIONS["kubernetes"] = kubernetes
SECTIONS.update(render_pods.SECTIONS)


def plot_kubernetes(r, path):
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for label, key, style in (("the real HPA and KEDA", "real_timeline", "-"), ("sluice-lag simulate", "simulated_timeline", "--")):
        rows = r[key]
        ax.step([t for t, _ in rows], [n for _, n in rows], style, where="post", label=label)
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("processors")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("The same burst: the real HPA against the simulator")
    ax.legend()
    ax.grid(True, alpha=0.3)
    save(fig, path)


def plot_autoscaling(r, path):
    cols = r["columns"]
    t, produce, ready, lag_s = (cols.index(c) for c in ("t_s", "produce_rate", "ready", "time_lag_s"))
    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    first = r["runs"][0]["samples"]
    axes[0].plot([row[t] for row in first], [row[produce] / 1000 for row in first], color="black")
    axes[0].set_ylabel("produced, k records/s")
    for run in r["runs"]:
        label = policy_label(run["summary"]["policy"])
        axes[1].step([row[t] for row in run["samples"]], [row[ready] for row in run["samples"]], where="post", label=label)
        axes[2].plot([row[t] for row in run["samples"]], [row[lag_s] for row in run["samples"]], label=label)
    axes[1].set_ylabel("processors ready")
    axes[2].set_ylabel("time lag, s")
    axes[2].axhline(r["model"]["objective_s"], color="grey", linestyle=":", label="objective")
    axes[2].set_xlabel("seconds")
    axes[1].legend(fontsize=8, ncol=2)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    axes[0].set_title("Autoscaling policies on the same recorded trace (sluice-lag simulate)")
    save(fig, path)


def plot_autoscaling_startup(r, path):
    """Peak time lag and cost of each policy against the processors' start-up (the sweep)."""
    startups = [run["startup_s"] for run in r["runs"]]
    policies = [x["policy"] for x in r["runs"][0]["summaries"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, policy in enumerate(policies):
        style = "--" if "ahead" in policy_label(policy) else "-"
        peak = [run["summaries"][i]["peak_time_lag_s"] for run in r["runs"]]
        cost = [run["summaries"][i]["replica_minutes"] for run in r["runs"]]
        axes[0].plot(startups, peak, style, marker="o", label=policy_label(policy))
        axes[1].plot(startups, cost, style, marker="o", label=policy_label(policy))
    axes[0].axhline(r["runs"][0]["summaries"][0]["objective_s"], color="grey", linestyle=":", label="objective")
    axes[0].set_ylabel("peak time lag, s")
    axes[1].set_ylabel("replica-minutes")
    for ax in axes:
        ax.set_xlabel("processor start-up, s")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Each policy over start-up times (sluice-lag simulate, the committed trace)")
    save(fig, path)


def render(results, readme_path):
    with open(readme_path) as f:
        readme = f.read()
    found = {}
    for mode, fn in SECTIONS.items():
        name, report = newest(results, *SOURCES.get(mode, (mode, None)))
        if report is None:
            continue
        found[mode] = report
        block = fn(name, report)
        pattern = re.compile(rf"(<!-- generated: {re.escape(mode)} -->\n).*?(<!-- end generated -->)", re.S)
        if not pattern.search(readme):
            sys.exit(f"{readme_path} has no '<!-- generated: {mode} -->' block")
        readme = pattern.sub(lambda m: m.group(1) + block + "\n" + m.group(2), readme)
    with open(readme_path, "w") as f:
        f.write(readme)
    plots = os.path.join(results, "plots")
    os.makedirs(plots, exist_ok=True)
    made = []
    if "contention" in found:
        plot_contention(found["contention"], os.path.join(plots, "contention-latency.png"))
        made.append("contention-latency.png")
    if "barrier" in found:
        plot_barrier(found["barrier"], os.path.join(plots, "barrier-vs-pipeline.png"))
        made.append("barrier-vs-pipeline.png")
    if "drain" in found:
        plot_drain(found["drain"], os.path.join(plots, "lag-drain.png"))
        made.append("lag-drain.png")
    for block in ("lag-scale", "lag-scale-10x"):
        if block in found:
            plot_lag_scale(found[block], os.path.join(plots, f"{block}.png"))
            made.append(f"{block}.png")
    if "autoscaling" in found:
        plot_autoscaling(found["autoscaling"], os.path.join(plots, "autoscaling.png"))
        made.append("autoscaling.png")
    if "autoscaling-startup" in found:
        plot_autoscaling_startup(found["autoscaling-startup"], os.path.join(plots, "autoscaling-startup.png"))
        made.append("autoscaling-startup.png")
    if "kubernetes" in found:
        plot_kubernetes(found["kubernetes"], os.path.join(plots, "kubernetes.png"))
        made.append("kubernetes.png")
    stress = [(m, found[m]) for m in ("stress-in-process", "stress-kafka", "stress-full") if m in found]
    if stress:
        render_stress.plot_stress(stress, os.path.join(plots, "stress-latency.png"))
        made.append("stress-latency.png")
    loads = [(m, r) for m, r in stress if "cost_by_load" in r["figures"]]
    if loads:
        render_stress.plot_cost_vs_load(loads, os.path.join(plots, "cost-vs-load.png"))
        made.append("cost-vs-load.png")
    return sorted(found), made


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--results", default=here, help="folder of result JSON files (default: this folder)")
    parser.add_argument("--check", action="store_true", help="render into a temporary copy; fail on any error")
    parser.add_argument("--sim-plot", nargs=2, metavar=("SIMULATION.json", "OUT.png"),
                        help="plot one `sluice-lag simulate --json` run instead")
    args = parser.parse_args()
    if args.sim_plot:
        with open(args.sim_plot[0]) as f:
            plot_autoscaling(json.load(f), args.sim_plot[1])
        print(f"wrote {args.sim_plot[1]}")
        return
    readme = os.path.join(here, "README.md")
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            for path in glob.glob(os.path.join(args.results, "*.json")):
                shutil.copy(path, tmp)
            shutil.copy(readme, os.path.join(tmp, "README.md"))
            modes, plots = render(tmp, os.path.join(tmp, "README.md"))
            for p in plots:
                if os.path.getsize(os.path.join(tmp, "plots", p)) < 1000:
                    sys.exit(f"plot {p} is empty")
    else:
        modes, plots = render(args.results, readme)
    print(f"rendered {len(modes)} sections ({', '.join(modes)}) and {len(plots)} plots ({', '.join(plots)})")


if __name__ == "__main__":
    main()
