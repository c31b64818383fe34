#!/usr/bin/env python3
"""What the autoscaling assumes, measured on real pods (deploy/local/measure-pods.sh runs this):

- start-up: a processor pod asked for (the Deployment scaled up) → scheduled → its container
  running → Ready → consuming (the first commit on a partition it owns), with the image cached
  on the node and, once, pulled from the cluster's registry;
- the rebalance pause: per scale step, the longest time a partition's commits stood still
  while records kept coming;
- the records/s one processor pod sustains draining a backlog, limited to its CPU request
  (the chart's 500m) and with no CPU limit (the chart's default), and its CPU per record
  (the container's cgroup).

These are lower bounds for production: the node exists, the image is local, the registry is
on the same machine, the broker and Redis share the node's 2 cores. Traffic comes from
chainsim on the host (`feed`: a backlog, or paced); the release runs the chart's defaults
but for the images, the autoscaling (off: the script sets the replicas), the CPU requests
(deploy/local/cluster/node-values.yaml) and a CPU limit where measured with one.

Usage: measure.py --helm PATH --kubeconfig FILE --registry R --tag TAG --chainsim BIN
                  --sluice-lag BIN --containerd-socket PATH --node-ip IP --out FILE.json
The stack's variables (SLUICE_KAFKA_BROKERS, SLUICE_KAFKA_POD_BROKERS, SLUICE_REDIS_POD_URL)
come from the environment.
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "deploy" / "local" / "cluster"))
from kube import wait  # noqa: E402
from pods import Release, Watcher, free_port, longest_stalls  # noqa: E402

NAMESPACE, RELEASE = "sluice-measure", "sluice"
PARTITIONS = 12


def host(address):
    """(host, port) of "host:port" or "scheme://host:port"."""
    h, port = address.rsplit(":", 1)
    return h.rsplit("/", 1)[-1], int(port)


def feed(args, topic, transactions=None, paced_seconds=None, rate=2000):
    """chainsim feed into the topic: a backlog as fast as it goes, or paced traffic."""
    cmd = [args.chainsim, "feed", "--brokers", os.environ["SLUICE_KAFKA_BROKERS"], "--topic", topic,
           "--create-topic-partitions", str(PARTITIONS), "--rate", str(rate), "--burst-every-slots", "0", "--json"]
    cmd += ["--transactions", str(transactions)] if transactions else ["--paced", "--seconds", str(paced_seconds)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def install(c, args, group, topic, extra):
    """The chart with the images, the host's services behind the default names, autoscaling off."""
    c.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    c.kube.host_service(NAMESPACE, "kafka", 9092, *host(os.environ["SLUICE_KAFKA_POD_BROKERS"]))
    c.kube.host_service(NAMESPACE, "redis", 6379, *host(os.environ["SLUICE_REDIS_POD_URL"]))
    c.kube.host_service(NAMESPACE, "chain-node", 50051, *host(args.chain))
    sets = {"image.registry": args.registry, "image.tag": args.tag, "processor.autoscaling.enabled": "false",
            "processor.replicas": "0", "processor.groupId": group, "kafka.topic": topic,
            "scheduler.env.JOB_TOKEN_REFRESH_SCHEDULE": "*/5 * * * * *", "podDisruptionBudget.enabled": "false"}
    sets.update(extra)
    cmd = ["upgrade", "--install", RELEASE, str(ROOT / "helm" / "sluice"), "-n", NAMESPACE, "--wait", "--timeout", "180s",
           "-f", str(ROOT / "deploy" / "local" / "cluster" / "node-values.yaml")]
    for k, v in sets.items():
        cmd += ["--set-string" if not v.replace(".", "").isdigit() and v not in ("true", "false") else "--set", f"{k}={v}"]
    out = c.helm(*cmd)
    if out.returncode != 0:
        raise RuntimeError(f"helm install: {out.stderr.strip()}")


def sample(watcher):
    """(t, {partition: (committed, log end)}, {partition: owner}) now."""
    picture = watcher.picture() or {}
    parts = picture.get("partitions", [])
    return (time.monotonic(), {p["partition"]: ((p.get("lag") or {}).get("committed"), (p.get("log") or {}).get("end"))
                               for p in parts}, {p["partition"]: p.get("owner") or "" for p in parts})


def container_cpu_ns(c, pod):
    """CPU time the pod's container has used, ns (cgroup v1 cpuacct, read on the node)."""
    pid = c.host_pid(pod)
    path = next(line.split(":", 2)[2] for line in pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                if "cpuacct" in line.split(":")[1].split(","))
    return int(pathlib.Path(f"/sys/fs/cgroup/cpuacct{path}/cpuacct.usage").read_text())


def per_pod_rate(c, args, watcher_binary, limit, logs):
    """One processor draining a backlog: records/s over its steady part, and CPU per record."""
    group, topic = f"measure-rate-{int(time.time())}", f"measure-rate-{int(time.time())}"
    install(c, args, group, topic, {"processor.resources.limits.cpu": limit} if limit else {})
    backlog = feed(args, topic, transactions=args.backlog)
    produced = json.loads(backlog.communicate(timeout=600)[0] or "{}")
    watcher = Watcher(watcher_binary, os.environ["SLUICE_KAFKA_BROKERS"], group, logs)
    try:
        c.scale("processor", 1)
        pod = wait("the processor Ready", lambda: (s := c.serving("processor")) and s[0], 180, interval=0.5)
        wait("its first commit", lambda: any(v[0] for v in sample(watcher)[1].values()), 120, interval=0.5)
        time.sleep(3)  # past its start (caches, the first fetches)
        t0, first, _ = sample(watcher)
        cpu0 = container_cpu_ns(c, pod)
        backlog0 = sum((e or 0) - (k or 0) for k, e in first.values())
        # Until the backlog is nearly gone (a drained pod idles) or the window is over.
        while True:
            time.sleep(1)
            t1, last, _ = sample(watcher)
            behind = sum((e or 0) - (k or 0) for k, e in last.values())
            if t1 - t0 >= args.window or behind < backlog0 * 0.05:
                break
        cpu1 = container_cpu_ns(c, pod)
        records = sum((last[p][0] or 0) - (first[p][0] or 0) for p in last if p in first)
        return {"limit": limit or "none", "records_per_s": round(records / (t1 - t0)), "window_s": round(t1 - t0, 1),
                "records": records, "backlog_at_start": backlog0, "backlog_left": behind,
                "cpu_us_per_record": round((cpu1 - cpu0) / 1000 / max(records, 1), 2),
                "cores_used": round((cpu1 - cpu0) / 1e9 / (t1 - t0), 3), "fed": produced}
    finally:
        watcher.stop()
        c.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait")


def step(c, watcher, replicas):
    """Scales the processors to `replicas`; with one more, times the new pod's stages. The
    rebalance pause: the longest stall of a partition's commits within 30 s of the step."""
    before = {p["metadata"]["name"] for p in c.pods("processor")}
    asked = time.monotonic()
    c.scale("processor", replicas)
    seen, series, new = {}, [], None
    while time.monotonic() - asked < 30:
        t, offsets, owners = sample(watcher)
        series.append((t - asked, offsets))
        pods = [p for p in c.pods("processor") if p["metadata"]["name"] not in before]
        new = new or (pods[0] if pods else None)
        if new:
            current = next((p for p in pods if p["metadata"]["name"] == new["metadata"]["name"]), new)
            status = current.get("status", {})
            now = t - asked
            conditions = {x["type"]: x["status"] for x in status.get("conditions", [])}
            running = any("running" in (s.get("state") or {}) for s in status.get("containerStatuses", []))
            for stage, done in (("scheduled", conditions.get("PodScheduled") == "True"), ("running", running),
                                ("ready", Release.ready(current))):
                if done:
                    seen.setdefault(stage, round(now, 2))
            ip = status.get("podIP")
            if ip and "consuming" not in seen:
                mine = [p for p, owner in owners.items() if owner.endswith("/" + ip)]
                if mine and any(offsets[p][0] is not None for p in mine) and len(series) > 1 \
                        and any(offsets[p][0] != series[-2][1].get(p, (None,))[0] for p in mine):
                    seen["consuming"] = round(now, 2)
        time.sleep(0.25)
    stalls = longest_stalls(series)
    return {"to": replicas, "pause_s": max(stalls.values(), default=0.0), "stages_s": seen if new else None}


def startup_and_rebalance(c, args, watcher_binary, logs):
    """Paced traffic; the processors stepped 1→2→3→4→3→2→1, the image removed from the node
    before one step up (pulled from the registry)."""
    group, topic = f"measure-steps-{int(time.time())}", f"measure-steps-{int(time.time())}"
    install(c, args, group, topic, {})
    traffic = feed(args, topic, paced_seconds=400, rate=args.steady_rate)
    watcher = Watcher(watcher_binary, os.environ["SLUICE_KAFKA_BROKERS"], group, logs)
    steps = []
    try:
        c.scale("processor", 1)
        wait("one processor Ready", lambda: c.serving("processor"), 180, interval=0.5)
        time.sleep(15)
        for replicas in (2, 3, 4, 3, 2, 1):
            steps.append(step(c, watcher, replicas))
            time.sleep(5)
        # Once more up, with the image gone from the node: the kubelet pulls it.
        image = f"{args.registry}/sluice-processor:{args.tag}"
        subprocess.run(["ctr", "--address", args.containerd_socket, "-n", "k8s.io", "images", "rm", image],
                       capture_output=True, check=False)
        pulled = step(c, watcher, 2)
        pulled["pulled"] = True
        steps.append(pulled)
    finally:
        traffic.kill()
        watcher.stop()
        c.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--helm", "--kubeconfig", "--registry", "--tag", "--chainsim", "--sluice-lag", "--containerd-socket",
                 "--node-ip", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--backlog", type=int, default=1_500_000, help="transactions fed before the rate is measured")
    parser.add_argument("--window", type=float, default=60.0,
                        help="seconds the rate is measured over at most (less when the backlog is drained sooner)")
    parser.add_argument("--only", choices=["rate", "steps"], help="measure only the per-pod rate or only the steps")
    parser.add_argument("--steady-rate", type=int, default=2000, help="transactions/s during the scale steps")
    args = parser.parse_args()
    c = Release(NAMESPACE, RELEASE, args.helm, args.kubeconfig, args.containerd_socket)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="measure-pods-"))
    port = free_port()
    chain = subprocess.Popen([args.chainsim, "serve", "--listen", f"{args.node_ip}:{port}", "--rate", "1"],
                             stdout=open(logs / "chainsim.log", "w"), stderr=subprocess.STDOUT)
    args.chain = f"{args.node_ip}:{port}"
    try:
        version = c.kube.get("/version")["gitVersion"]
        result = {"mode": "pods", "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "kubernetes": version, "images": f"{args.registry}/sluice-*:{args.tag}",
                  "command": "deploy/local/measure-pods.sh", "rates": [], "steps": []}
        for limit in ("500m", None) if args.only != "steps" else ():
            result["rates"].append(per_pod_rate(c, args, args.sluice_lag, limit, logs))
            print(json.dumps({k: v for k, v in result["rates"][-1].items() if k != "fed"}), flush=True)
        if args.only != "rate":
            result["steps"] = startup_and_rebalance(c, args, args.sluice_lag, logs)
        for s in result["steps"]:
            print(json.dumps(s), flush=True)
    finally:
        chain.terminate()
        chain.wait(10)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {args.out} (logs: {logs})")


if __name__ == "__main__":
    main()
