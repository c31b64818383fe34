#!/usr/bin/env python3
"""What a Helm deployer relies on at the pod level, on the cluster's node, under load.

`sluice-demo --kubernetes` runs the whole system as the chart's pods (steady traffic, three
processors and more if KEDA asks) while this script disrupts it the way a cluster does:

- a rolling upgrade (`helm upgrade` to another image tag): the processors roll one at a time
  (never fewer Ready than the replicas less the PDB's maxUnavailable), every pod ends on the
  new tag and the group rebalances onto the new members;
- an eviction through the Eviction API that the PodDisruptionBudget allows, then one it
  refuses (429) while the first pod's replacement is not Ready yet;
- a processor killed hard (its process SIGKILLed on the node, as a crash or an OOM kill
  would): the kubelet restarts the container, the group recovers, and the time the
  partitions it owned went without a commit is measured (a sluice-lag on the host watching
  the group every 500 ms);
- a hung container (sluice-lag's process stopped with SIGSTOP): its liveness probe fails and
  the kubelet restarts it;
- the operator's CLI as the chart's Job (`ops.job`), in the processor image on the node:
  `sluice-ops offsets show` reads the processors' group through the cluster's own path to
  Kafka, with the chart's settings.

The demo then checks what must hold through all of it: the lag drains, every pool matches the
chain, the outputs are exactly once (nothing lost, nothing applied twice), and every pod
removed gracefully (the rollout, the eviction) drained and committed inside its grace
period (its log).

Usage: test_pods.py --helm PATH --kubeconfig FILE --demo BIN --sluice-lag BIN --registry R
                    --tag TAG --upgrade-tag TAG2 --containerd-socket PATH --values FILE…
                    --out DIR [--json FILE] [--seconds S] [--set KEY=VALUE…] [--only kill]
The stack's variables (SLUICE_KAFKA_BROKERS, SLUICE_KAFKA_POD_BROKERS, …) come from the
environment, as test.sh exports them. Exits non-zero with every failed check listed.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent.parent / "deploy" / "local" / "cluster"))
from kube import ApiError, wait  # noqa: E402
from pods import Release, Watcher, longest_stalls, save_logs  # noqa: E402

NAMESPACE, RELEASE = "sluice-pods", "sluice"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def start_demo(args, logs):
    cmd = [args.demo, "--kubernetes", "--helm", args.helm, "--namespace", NAMESPACE, "--seconds", str(args.seconds),
           "--rate", "600", "--burst-every-seconds", "0", "--burst-seconds", "0", "--max-processors", "4", "--trigger", "offsetLag",
           "--lag-threshold", "20000", "--set", "processor.autoscaling.minReplicas=3",
           "--scale-down-window-seconds", "30", "--image-registry", args.registry, "--image-tag", args.tag,
           "--out", str(args.out / "report"), "--logs", str(logs / "demo")]
    for values in args.values:
        cmd += ["-f", values]
    for pair in args.set:
        cmd += ["--set", pair]
    out = open(logs / "demo.out", "w")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=os.environ | {"KUBECONFIG": args.kubeconfig})


def rolling_upgrade(c, args):
    """helm upgrade to another image tag under load, every pod on it, the PDB's budget kept."""
    replicas = c.replicas("processor")
    floor = replicas - 1  # the chart's processor PDB: maxUnavailable 1
    started = time.monotonic()
    out = c.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--set", f"image.tag={args.upgrade_tag}")
    if not check(out.returncode == 0, "rolling upgrade: helm upgrade --reuse-values --set image.tag=" + args.upgrade_tag
                 + ("" if out.returncode == 0 else f": {out.stderr.strip()}")):
        return
    lowest, done = replicas, False
    while time.monotonic() - started < 240 and not done:
        serving = c.serving("processor")
        lowest = min(lowest, len(serving))
        everything = [p for comp in ("processor", "ingest", "scheduler", "lag") for p in c.pods(comp)]
        done = all(p["spec"]["containers"][0]["image"].endswith(":" + args.upgrade_tag) and c.ready(p) for p in everything) \
            and len(serving) == c.replicas("processor")
        time.sleep(0.5)
    check(done, f"rolling upgrade: every pod on {args.upgrade_tag} and Ready in {time.monotonic() - started:.0f} s")
    check(lowest >= floor, f"rolling upgrade: never fewer than {floor} processors Ready of {replicas} "
          f"(the PDB's maxUnavailable 1; lowest {lowest})")


def eviction_refused(c):
    """One eviction the budget allows, then one it refuses while the first is not replaced."""
    serving = c.serving("processor")
    if not check(len(serving) >= 2, f"eviction: {len(serving)} processors Ready to evict from"):
        return
    first, second = serving[0]["metadata"]["name"], serving[1]["metadata"]["name"]
    code, message = c.evict(first)
    check(code == 201, f"eviction: {first} evicted (Eviction API: {code} {message})")
    code, message = c.evict(second)
    check(code == 429 and "disruption budget" in message,
          f"eviction: {second} refused while {first}'s replacement is not Ready ({code}: {message})")
    try:
        wait("eviction: the replacement Ready", lambda: len(c.serving("processor")) >= len(serving), 120, interval=1)
        check(True, "eviction: the evicted processor replaced and Ready")
    except TimeoutError as e:
        check(False, str(e))


def killed_hard(c, watcher, results, logs):
    """A processor's process killed with SIGKILL on the node (a crash, an OOM kill): nothing
    drains or commits, the kubelet restarts the container, the group recovers; measured: how
    long the partitions it owned went without a commit (the dead member keeps them until the
    group's session timeout expires)."""
    def owning():
        """A serving processor and the partitions it owns now (the one owning the most)."""
        picture = watcher.picture() or {}
        owners = [(p.get("owner") or "", p["partition"]) for p in picture.get("partitions", [])]
        best = max(((pod, sorted(n for o, n in owners if o.endswith("/" + pod["status"].get("podIP", "?"))))
                    for pod in c.serving("processor")), key=lambda x: len(x[1]), default=None)
        return best if best and best[1] else None

    # An owner is "<client id>/<host>": the pod's address, exactly. Right after a rebalance the
    # group may show no owners for a moment.
    victim, owned = wait("kill: a processor owning partitions", owning, 60, interval=0.5)
    name = victim["metadata"]["name"]
    restarts = victim["status"]["containerStatuses"][0]["restartCount"]
    before = watcher.picture() or {}
    os.kill(c.host_pid(victim), signal.SIGKILL)
    killed_at, series, back = time.monotonic(), [], None
    while time.monotonic() - killed_at < 120 and (back is None or time.monotonic() - killed_at < back + 10):
        picture = watcher.picture() or {}
        series.append((time.monotonic() - killed_at, {p["partition"]: ((p.get("lag") or {}).get("committed"),
                                                                      (p.get("log") or {}).get("end"))
                                                      for p in picture.get("partitions", [])}))
        pod = next((p for p in c.pods("processor") if p["metadata"]["name"] == name), None)
        if back is None and pod and pod["status"]["containerStatuses"][0]["restartCount"] > restarts and c.ready(pod):
            back = round(time.monotonic() - killed_at, 1)
        time.sleep(0.5)
    save_logs(c, "processor", logs)
    stalls = longest_stalls(series)
    window = max((stalls.get(p, 0.0) for p in owned), default=None)
    others = max((v for p, v in stalls.items() if p not in owned), default=0.0)
    results["kill"] = {"pod": name, "partitions": owned, "stalled_s": stalls, "unconsumed_s": window,
                       "restarted_ready_s": back, "members": before.get("members"), "protocol": before.get("protocol")}
    check(back is not None, f"kill: {name}'s process SIGKILLed on the node, its container restarted and Ready after {back} s")
    check(bool(owned) and window is not None and window > 0,
          f"kill: the partitions it owned {owned} went {window} s without a commit at the most "
          f"(the others at most {others} s; per partition: {stalls})")


def liveness_restart(c, results):
    """sluice-lag's process stopped (a hung container): the liveness probe fails and the kubelet
    restarts the container."""
    pod = wait("liveness: sluice-lag Ready", lambda: (s := c.serving("lag")) and s[0], 60, interval=1)
    name, restarts = pod["metadata"]["name"], pod["status"]["containerStatuses"][0]["restartCount"]
    os.kill(c.host_pid(pod), signal.SIGSTOP)
    stopped = time.monotonic()

    def restarted():
        p = next((p for p in c.pods("lag") if p["metadata"]["name"] == name), None)
        return p and p["status"]["containerStatuses"][0]["restartCount"] > restarts and c.ready(p) and p

    try:
        p = wait(f"liveness: {name} restarted", restarted, 150, interval=1)
        last = p["status"]["containerStatuses"][0].get("lastState", {}).get("terminated", {})
        events = c.kube.get(f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=involvedObject.name%3D{name}")["items"]
        unhealthy = [e["message"] for e in events if e["reason"] == "Unhealthy" and "Liveness" in e["message"]]
        results["liveness_restart_s"] = round(time.monotonic() - stopped, 1)
        check(bool(unhealthy), f"liveness: {name} stopped (SIGSTOP), its liveness probe failed ({unhealthy[:1]}), "
              f"the kubelet restarted it ({last.get('reason', '?')}, exit {last.get('exitCode')}) and it is Ready again "
              f"after {results['liveness_restart_s']} s")
    except TimeoutError as e:
        check(False, str(e))


CHART = pathlib.Path(__file__).resolve().parent.parent / "sluice"


def ops_job(c):
    """`helm upgrade --set ops.job.enabled=true`: the Job runs sluice-ops in the processor image
    with the chart's settings and reads the group (its members, a commit on every partition
    with the processors' generation)."""
    args = '["offsets","show"]'
    out = c.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--set", "ops.job.enabled=true",
                 "--set-json", f"ops.job.args={args}", "--set", "ops.job.json=true")
    if not check(out.returncode == 0, "ops job: helm upgrade --set ops.job.enabled=true" + ("" if out.returncode == 0 else f": {out.stderr.strip()}")):
        return
    revision = json.loads(c.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)["version"]
    name = f"{RELEASE}-ops-{revision}"
    path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}"

    def finished():
        status = (c.kube.get_or_none(path) or {}).get("status", {})
        return status.get("succeeded", 0) + status.get("failed", 0) > 0

    started = time.monotonic()
    try:
        wait(f"ops job: {name} finished", finished, 120, interval=1)
    except TimeoutError as e:
        job = c.kube.get_or_none(path)
        pods = c.kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=job-name%3D{name}")["items"]
        states = [(p["metadata"]["name"], p["status"].get("phase"), p["status"].get("containerStatuses")) for p in pods]
        check(False, f"{e}: the Job {'is missing' if job is None else job.get('status')}; its pods {states}")
        return
    pods = c.kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=job-name%3D{name}")["items"]
    log = c.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{pods[0]['metadata']['name']}/log") if pods else ""
    succeeded = c.kube.get(path)["status"].get("succeeded", 0) == 1
    try:
        text = str(log or "")
        shown = json.loads(text[text.find("{"):])  # stdout's JSON (stderr shares the pod's log)
    except json.JSONDecodeError:
        shown = {}
    partitions = shown.get("partitions", [])
    check(succeeded and shown.get("members", 0) >= 1 and len(partitions) == 12
          and all(p.get("metadata", "").startswith("generation=") for p in partitions),
          f"ops job: sluice-ops offsets show in the cluster read the group ({shown.get('members')} members, "
          f"{len(partitions)} partitions committed with their generation) in {time.monotonic() - started:.0f} s"
          + ("" if succeeded else f"; log: {str(log)[-400:]}"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--helm", "--kubeconfig", "--demo", "--sluice-lag", "--registry", "--tag", "--upgrade-tag",
                 "--containerd-socket"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--values", action="append", default=[])
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE over the chart's values (the demo's --set)")
    parser.add_argument("--only", choices=["kill"], help="only the kill (a measurement: GROUP_PROTOCOL, SESSION_TIMEOUT_MS…)")
    parser.add_argument("--seconds", type=int, default=200, help="the demo's traffic")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    c, results = Release(NAMESPACE, RELEASE, args.helm, args.kubeconfig, args.containerd_socket), {}
    demo = start_demo(args, logs)
    watcher = None
    try:
        def three_ready():
            if demo.poll() is not None:
                raise RuntimeError(f"the demo exited ({demo.returncode}) before its processors were up")
            return len(c.serving("processor")) >= 3

        wait("the demo's release: 3 processors Ready", three_ready, 240, interval=2)
        values = json.loads(c.helm("get", "values", RELEASE, "-n", NAMESPACE, "--all", "-o", "json").stdout)
        watcher = Watcher(args.sluice_lag, os.environ["SLUICE_KAFKA_BROKERS"], values["processor"]["groupId"], logs)
        time.sleep(10)  # the group settled, the watcher's rates warm
        if args.only != "kill":
            rolling_upgrade(c, args)
            eviction_refused(c)
        killed_hard(c, watcher, results, logs)
        if args.only != "kill":
            liveness_restart(c, results)
            ops_job(c)
    except (TimeoutError, RuntimeError, ApiError, OSError, KeyError, IndexError, StopIteration,
            subprocess.SubprocessError) as e:
        check(False, f"{type(e).__name__}: {e}")
    finally:
        if watcher:
            watcher.stop()
    try:
        code = demo.wait(args.seconds + 400)
    except subprocess.TimeoutExpired:
        demo.kill()
        code = None
    tail = (logs / "demo.out").read_text().splitlines()
    summary = tail[next((i for i, line in enumerate(tail) if line == "Sluice demo summary"), len(tail)):]
    print("\n".join(summary))
    check(code == 0, f"the demo through every disruption: exit {code} (its summary above; log {logs / 'demo.out'})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\n{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
