"""A release's pods and a consumer group watched closely, for the tests and measurements that
disrupt pods on the cluster's node (helm/tests/test_pods.py, benches/pods/measure.py).

    Release(kube, namespace, release, helm, kubeconfig, containerd)  its pods, Deployments,
                                       evictions, the host PID of a pod's container
    Watcher(binary, brokers, group, logs)  a sluice-lag on the host polling a group every 500 ms
    longest_stalls(series)             how long each partition's commits stood still
"""
import json
import os
import socket
import subprocess
import urllib.request

from kube import ApiError, Kube


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Release:
    """A release's pods, Deployments and disruptions, through the API server."""

    def __init__(self, namespace, release, helm, kubeconfig, containerd):
        self.namespace, self.release, self.helm_bin, self.kubeconfig = namespace, release, helm, kubeconfig
        self.containerd, self.kube = containerd, Kube(kubeconfig)

    def pods(self, component):
        path = (f"/api/v1/namespaces/{self.namespace}/pods?labelSelector=app.kubernetes.io/instance%3D{self.release},"
                f"app.kubernetes.io/component%3D{component}")
        return self.kube.get(path)["items"]

    @staticmethod
    def ready(pod):
        return not pod["metadata"].get("deletionTimestamp") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))

    def serving(self, component):
        return [p for p in self.pods(component) if self.ready(p)]

    def replicas(self, component):
        d = self.kube.get(f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.release}-{component}")
        return d["spec"]["replicas"]

    def scale(self, component, replicas):
        """A Deployment's replicas through its scale subresource, as `kubectl scale` does."""
        self.kube.request("PATCH", f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.release}-{component}/scale",
                          {"spec": {"replicas": replicas}}, content_type="application/merge-patch+json")

    def evict(self, pod):
        """The Eviction API: (HTTP status, message)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": self.namespace}}
        try:
            self.kube.request("POST", f"/api/v1/namespaces/{self.namespace}/pods/{pod}/eviction", body)
            return 201, "evicted"
        except ApiError as e:
            return e.code, e.message

    def helm(self, *cmd):
        return subprocess.run([self.helm_bin, *cmd], capture_output=True, text=True,
                              env=os.environ | {"KUBECONFIG": self.kubeconfig})

    def host_pid(self, pod):
        """The host PID of a pod's (first) container, from containerd's task list."""
        cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        out = subprocess.run(["ctr", "--address", self.containerd, "--namespace", "k8s.io", "tasks", "ls"],
                             capture_output=True, text=True, check=True).stdout
        return next(int(line.split()[1]) for line in out.splitlines()[1:] if line.split()[0] == cid)


class Watcher:
    """A sluice-lag on the host watching the processors' group every 500 ms: each partition's
    committed offset and owner, to time what a disruption leaves unconsumed."""

    def __init__(self, binary, brokers, group, logs):
        self.port = free_port()
        env = {"PATH": os.environ["PATH"], "SLUICE_LAG_BROKERS": brokers, "SLUICE_LAG_GROUPS": group,
               "SLUICE_LAG_ADMIN_LISTEN": f"127.0.0.1:{self.port}", "SLUICE_LAG_POLL_INTERVAL_MS": "500",
               "SLUICE_LOG_FORMAT": "plain"}
        self.group, self.log = group, open(logs / "watcher.log", "w")
        self.proc = subprocess.Popen([binary], env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def picture(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/groups/{self.group}", timeout=2) as r:
                return json.load(r)
        except OSError:
            return None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def committed(picture):
    """partition → its committed offset (None while the group has none)."""
    return {p["partition"]: (p.get("lag") or {}).get("committed") for p in picture.get("partitions", [])}


def longest_stalls(series):
    """partition → the longest time (s) its committed offset stood still while records kept
    coming, from (t, {partition: (committed, log end)}) samples."""
    stalls = {}
    for partition in {p for _, offsets in series for p in offsets}:
        points = [(t, *offsets[partition]) for t, offsets in series if partition in offsets]
        longest, start = 0.0, None
        for (t0, c0, _), (t1, c1, end1) in zip(points, points[1:]):
            if c0 is not None and c1 == c0 and end1 is not None and end1 > c1:
                start = t0 if start is None else start
                longest = max(longest, t1 - start)
            else:
                start = None
        stalls[partition] = round(longest, 1)
    return stalls


def save_logs(c, component, logs):
    """Every pod's log of a release's component, and its previous container's, into `logs`."""
    for pod in c.pods(component):
        name = pod["metadata"]["name"]
        for previous in ("false", "true"):
            try:
                text = c.kube.request("GET", f"/api/v1/namespaces/{c.namespace}/pods/{name}/log?previous={previous}") or ""
            except ApiError:
                continue
            (logs / f"{name}{'.previous' if previous == 'true' else ''}.log").write_text(text)
