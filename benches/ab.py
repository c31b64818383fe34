#!/usr/bin/env python3
"""Two commits' cost per record, paired: each commit's sluice-bench is built (release) in a
worktree of its own, then the same `stress` run is made with the two binaries alternately,
run by run (A B A B …, or B A B A … every other pair, so neither build always runs first on
a warmer or cooler machine). Each run's JSON is kept; the pairs' ratios (after ÷ before) of
the processor's CPU per record in the open loop (a fixed rate, so both builds do the same
work), of the whole system's, and of the backlog drain rate, with their medians, go to
results/<UTC time>-ab.json.

Needs the local stack (deploy/local/stack.sh up; eval "$(deploy/local/stack.sh env)").

Usage: ab.py --before REV --after REV [--pairs 5] [--out results] -- STRESS ARGS…
  e.g. ab.py --before 78a4fe5 --after HEAD -- stress --mode kafka --rate 30000 --seconds 20
"""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "sluice" / "ab"


def build(rev):
    """The release sluice-bench of `rev` (a commit), built once per commit and kept."""
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", rev], capture_output=True, text=True,
                            check=True).stdout.strip()
    tree = CACHE / "trees" / commit[:12]
    if not tree.exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, commit], check=True)
    target = CACHE / "target"
    subprocess.run(["cargo", "build", "--release", "--locked", "-q", "-p", "sluice-benches", "--bin", "sluice-bench"],
                   cwd=tree, env={**os.environ, "CARGO_TARGET_DIR": str(target / commit[:12])}, check=True)
    return commit, target / commit[:12] / "release" / "sluice-bench"


def run(binary, args, out):
    """One stress run into `out`; its result JSON."""
    before = set(out.iterdir())
    subprocess.run([binary, *args, "--out", out], check=True)
    (new,) = set(out.iterdir()) - before
    return json.loads(new.read_text())


def figures(result):
    f = result["figures"]
    loop, drain = f["open_loop"], f["backlog"]
    cpu = loop["cost"]["cpu_us_per_record"]
    return {
        "open_loop_records_per_sec": loop["records_per_sec"],
        "processor_cpu_us_per_record": cpu["process"],
        "system_cpu_us_per_record": sum(cpu[k] for k in ("process", "broker", "redis", "feeder")),
        "drain_records_per_sec": drain["processor_records_per_sec"],
        "p99_ms": loop["latency"]["p99_ns"] / 1e6,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "results"))
    parser.add_argument("stress", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    args = [x for x in a.stress if x != "--"]
    builds = {"before": build(a.before), "after": build(a.after)}
    pairs, machine = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
            pair = {"order": order}
            for side in order:
                out = pathlib.Path(tmp) / f"{i}-{side}"
                out.mkdir()
                result = run(builds[side][1], args, out)
                machine = machine or result.get("machine")
                pair[side] = figures(result)
                print(f"pair {i + 1} {side}: {pair[side]}", flush=True)
            pair["ratio"] = {k: pair["after"][k] / pair["before"][k] for k in pair["after"]}
            pairs.append(pair)
    medians = {k: statistics.median(p["ratio"][k] for p in pairs) for k in pairs[0]["ratio"]}
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    report = {
        "mode": "ab",
        "before": builds["before"][0],
        "after": builds["after"][0],
        "machine": machine,
        "config": {"stress": args, "pairs": a.pairs, "profile": "release"},
        "figures": {"pairs": pairs, "median_ratio": medians},
    }
    path = pathlib.Path(a.out) / f"{stamp}-ab.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print("median after ÷ before:", {k: round(v, 3) for k, v in medians.items()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
