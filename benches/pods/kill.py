#!/usr/bin/env python3
"""How long a killed processor's partitions go without a commit, per consumer-group setting:
helm/tests/test_pods.py --only kill (the demo's steady traffic on three processor pods, one
process SIGKILLed on the node) run RUNS times for each variant, the figures gathered into one
result (results/<UTC time>-pod-kill.json; deploy/local/results.sh renders it).

Usage: kill.py --runs N --out FILE.json -- TEST_PODS_ARGS…   (everything test_pods.py needs
       but --out, --json, --only and --set)
"""
import argparse
import datetime
import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
TEST_PODS = HERE.parent.parent / "helm" / "tests" / "test_pods.py"

# The settings compared (the processors' SLUICE_PROCESSOR_* through the chart's processor.env).
VARIANTS = [
    ("classic protocol, 45 s session timeout (Kafka's default)", ["processor.env.SESSION_TIMEOUT_MS=45000"]),
    ("classic protocol, 15 s session timeout (the default)", []),
    ("KIP-848 consumer protocol (the broker's 45 s session)", ["processor.env.GROUP_PROTOCOL=consumer"]),
]


def run(args, sets, folder):
    cmd = [sys.executable, str(TEST_PODS), *args.rest, "--only", "kill", "--seconds", "100",
           "--out", str(folder), "--json", str(folder / "kill.json")]
    for pair in sets:
        cmd += ["--set", pair]
    done = subprocess.run(cmd, capture_output=True, text=True)
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:], flush=True)
    kill = json.loads((folder / "kill.json").read_text())["kill"] if (folder / "kill.json").exists() else {}
    return {"passed": done.returncode == 0, "unconsumed_s": kill.get("unconsumed_s"),
            "restarted_ready_s": kill.get("restarted_ready_s"), "partitions": kill.get("partitions"),
            "others_max_stall_s": max((v for p, v in (kill.get("stalled_s") or {}).items()
                                       if int(p) not in (kill.get("partitions") or [])), default=None)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", required=True)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    args.rest = [a for a in args.rest if a != "--"]
    result = {"mode": "pod-kill", "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "deploy/local/measure-pods.sh kill", "variants": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, sets) in enumerate(VARIANTS):
            runs = [run(args, sets, pathlib.Path(tmp) / f"{i}-{r}") for r in range(args.runs)]
            result["variants"].append({"name": name, "set": sets, "runs": runs})
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
