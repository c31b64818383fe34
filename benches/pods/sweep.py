#!/usr/bin/env python3
"""The committed autoscaling comparison (results/README.md, "Autoscaling policies") replayed
over a sweep of pod start-up times: from the bound measured on this project's node
(benches/pods/measure.py) to the 180 s a production cluster can take (a new node, a cold
image pull). Each start-up is one `sluice-lag simulate` run of every policy on the same trace;
the summaries are gathered into results/<UTC time>-autoscaling-startup.json
(deploy/local/results.sh renders it).

Usage: sweep.py --sluice-lag BIN --startups 9,30,60,120,180 [--per-pod-rate R]
                [--rebalance-pause S] --out FILE.json
"""
import argparse
import datetime
import json
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
POLICIES = ["results/autoscaling/chart-timelag-ahead.yaml", "results/autoscaling/plain-keda.yaml", "results/autoscaling/chart-kafka.yaml",
            "results/autoscaling/chart-offsetlag.yaml", "results/autoscaling/chart-draintime.yaml"]
TRACE = ["--trace", "demo:results/demo/example.json", "--stretch", "10", "--rate-factor", "10"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sluice-lag", required=True)
    parser.add_argument("--startups", required=True, help="seconds, comma-separated")
    parser.add_argument("--per-pod-rate", type=float, default=40000.0)
    parser.add_argument("--rebalance-pause", type=float, default=3.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    startups = [float(s) for s in args.startups.split(",")]
    result = {"mode": "autoscaling-startup", "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "benches/pods/sweep.py --startups " + args.startups, "trace": " ".join(TRACE[1:]),
              "per_pod_rate": args.per_pod_rate, "rebalance_pause_s": args.rebalance_pause, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for startup in startups:
            out = pathlib.Path(tmp) / f"{startup}.json"
            cmd = [args.sluice_lag, "simulate", "--values", "helm/sluice/values.yaml"]
            for p in POLICIES:
                cmd += ["--compare", p]
            cmd += [*TRACE, "--rebalance-pause", str(args.rebalance_pause), "--startup", str(startup),
                    "--per-pod-rate", str(args.per_pod_rate), "--json", str(out)]
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
            sim = json.loads(out.read_text())
            result["runs"].append({"startup_s": startup, "summaries": [r["summary"] for r in sim["runs"]]})
            print(f"start-up {startup:.0f} s: " + ", ".join(
                f"{s['policy'].rsplit('/', 1)[-1]} {s['peak_time_lag_s']:.0f} s/{s['replica_minutes']:.0f} rm"
                for s in result["runs"][-1]["summaries"]), flush=True)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
