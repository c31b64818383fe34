"""results/README.md's blocks for the measurements on real pods (render.py imports this):
`pods` (deploy/local/measure-pods.sh: start-up, rebalance pause, the per-pod rate) and
`pod-kill` (deploy/local/measure-pods.sh kill: a killed processor's partitions without a
commit, per group setting), `autoscaling-startup` (benches/pods/sweep.py: the autoscaling
comparison over a sweep of start-up times)."""


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def seconds(v):
    return "-" if v is None else f"{v:.1f} s"


def spread(values):
    """min–max of the values present (one value: itself)."""
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    lo, hi = min(v), max(v)
    return f"{lo:.1f} s" if lo == hi else f"{lo:.1f}–{hi:.1f} s"


def pods(name, r):
    rates = [[x["limit"], f"{x['records_per_s']:,}", f"{x['cpu_us_per_record']:.2f}", f"{x['cores_used']:.2f}",
              f"{x['window_s']:.0f} s"] for x in r["rates"]]
    rate_table = table(["CPU limit", "records/s", "CPU-µs per record", "cores used", "window"], rates)
    ups = [s for s in r["steps"] if s.get("stages_s")]
    stage = lambda s, k: seconds((s["stages_s"] or {}).get(k))  # noqa: E731
    steps = [[f"→ {s['to']}" + (" (pulled)" if s.get("pulled") else ""), stage(s, "scheduled"), stage(s, "running"),
              stage(s, "ready"), stage(s, "consuming"), seconds(s["pause_s"])] for s in r["steps"]]
    step_table = table(["step", "scheduled", "running", "Ready", "consuming", "longest pause of a partition"], steps)
    cached = [s["stages_s"].get("consuming") for s in ups if not s.get("pulled")]
    text = (f"Start-up (the Deployment scaled → the new pod's first commit), image cached: {spread(cached)}; "
            f"rebalance pause per step: {spread([s['pause_s'] for s in r['steps']])}. Kubernetes {r['kubernetes']}, "
            f"images `{r['images']}`.")
    return "\n".join([rate_table, "", step_table, "", text, "", f"Source: `{name}` ({r['command']})."])


def pod_kill(name, r):
    rows = []
    for v in r["variants"]:
        runs = v["runs"]
        rows.append([v["name"], spread([x["unconsumed_s"] for x in runs]), spread([x["restarted_ready_s"] for x in runs]),
                     spread([x["others_max_stall_s"] for x in runs]), f"{sum(x['passed'] for x in runs)}/{len(runs)}"])
    head = ["setting", "its partitions without a commit", "container restarted and Ready", "other partitions' longest stall",
            "runs passing"]
    return "\n".join([table(head, rows), "", f"Source: `{name}` ({r['command']})."])


def autoscaling_startup(name, r):
    """Per policy, per start-up: peak time lag, seconds over the objective, replica-minutes."""
    startups = [run["startup_s"] for run in r["runs"]]
    policies = [s["policy"] for s in r["runs"][0]["summaries"]]
    label = lambda p: "chart defaults" if p.endswith("values.yaml") else p.rsplit("/", 1)[-1].removesuffix(".yaml")  # noqa: E731
    rows = []
    for i, policy in enumerate(policies):
        cells = []
        for run in r["runs"]:
            s = run["summaries"][i]
            cells.append(f"{s['peak_time_lag_s']:.0f} s, {s['seconds_over_objective']:.0f} s over, {s['replica_minutes']:.0f}")
        rows.append([label(policy), *cells])
    head = ["policy", *[f"start-up {x:.0f} s" for x in startups]]
    objective = r["runs"][0]["summaries"][0]["objective_s"]
    text = (f"Each cell: peak time lag, seconds over the {objective:.0f} s objective, replica-minutes. Trace "
            f"`{r['trace']}`; {r['per_pod_rate']:,.0f} records/s per processor, {r['rebalance_pause_s']:.0f} s per "
            "rebalance.")
    return "\n".join([table(head, rows), "", text, "", f"Source: `{name}` ({r['command']})."])


SECTIONS = {"pods": pods, "pod-kill": pod_kill, "autoscaling-startup": autoscaling_startup}
