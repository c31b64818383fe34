#!/usr/bin/env python3
"""The chart on a real cluster (deploy/local/cluster.sh: kube-apiserver, kube-controller-manager,
kube-scheduler, KEDA's operator, metrics adapter and admission webhook, CoreDNS, and a node: a
kubelet on containerd and runc), with the real helm, installing a release as a user would: the
chart's package and the images deploy/release.sh built, tagged with the chart's appVersion and
pushed to the cluster's registry, which the node pulls from: `helm install` of the defaults
(only `image.registry` set, and the CPU requests lowered to fit the node) and every
ci/*-values.yaml scenario, each pod Running and Ready through its own probes,
the running containers as the chart and the images say (uid 65532, no capabilities, read-only
root, seccomp), KEDA's HPA checked against the values, `helm upgrade` (the HPA follows, the
scheduler's admin token is kept), `helm uninstall` (nothing left behind), and bad values refused
by the chart's schema, its own checks or KEDA's webhook, each naming the value.

The pods reach the test stack on the host through Services of the chart's default names
(`kafka`, `redis`, `chain-node`) without selectors, whose EndpointSlices name the host: the
defaults install unchanged but for the images' registry and tag and the CPU requests
(deploy/local/cluster/node-values.yaml). The sasl-tls scenario points `kafka.bootstrapServers` at the broker's
address itself: its certificate names that address, not a Service. KEDA runs on the host and
reaches sluice-lag's scaler by the Service name the chart renders, through the cluster's DNS.
The redis-tls scenario points `redis.url` at the stack's Redis TLS port by address (its
certificate names the address), with its CA, the client certificate it requires and its ACL
user in Secrets: every Redis user of the chart is Ready only if it got all three right.

Usage: test_cluster.py --helm PATH --kubeconfig FILE --chart PACKAGE.tgz --registry HOST:PORT/PATH
                       --node-ip IP --pod-brokers HOST:PORT --pod-secure-brokers HOST:PORT
                       --pod-redis URL --chainsim BIN --containerd-socket PATH
                       --secure-ca FILE --sasl-username U --sasl-password P
                       --pod-secure-redis URL --redis-tls-dir DIR --redis-acl-username U --redis-acl-password P
Exits non-zero with every failed check listed.
"""
import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import yaml

CHART = pathlib.Path(__file__).resolve().parent.parent / "sluice"
NODE_VALUES = CHART.parent.parent / "deploy" / "local" / "cluster" / "node-values.yaml"
sys.path.insert(0, str(CHART.parent.parent / "deploy" / "local" / "cluster"))
from kube import ApiError, Kube, condition, wait  # noqa: E402

failures = []
# Namespaced kinds a release may leave behind: (apiVersion, kind).
KINDS = [("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet"), ("v1", "Pod"), ("v1", "Service"),
         ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "ServiceAccount"), ("networking.k8s.io/v1", "NetworkPolicy"),
         ("policy/v1", "PodDisruptionBudget"), ("autoscaling/v2", "HorizontalPodAutoscaler"),
         ("keda.sh/v1alpha1", "ScaledObject"), ("keda.sh/v1alpha1", "TriggerAuthentication"),
         ("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule"),
         ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding")]
# What a namespace holds without any release: its default ServiceAccount, our Secrets and the
# Services of the host's services (HOST_SERVICES).
SECRETS = ["sluice-redis", "sluice-admin", "sluice-kafka-tls", "sluice-kafka-sasl", "sluice-lag-scaler-tls",
           "sluice-redis-tls", "sluice-redis-acl"]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The host's services the pods reach, as Services of the chart's default names without a
# selector: name → (the Service's port, the Env attribute holding the host's "address:port").
HOST_SERVICES = {"kafka": (9092, "pod_brokers"), "redis": (6379, "pod_redis"), "chain-node": (50051, "chain")}


def host_port(address):
    host, port = address.rsplit(":", 1)
    return host.rsplit("/", 1)[-1], int(port)


class Env:
    """The cluster, helm, the host's services, and what the scenarios' Secrets hold."""

    def __init__(self, args, certs, chain):
        self.args, self.certs = args, certs
        self.kube = Kube(args.kubeconfig)
        self.pod_brokers, self.pod_redis, self.chain = args.pod_brokers, args.pod_redis, chain

    def helm(self, *cmd):
        return subprocess.run([self.args.helm, *cmd], capture_output=True, text=True,
                              env=os.environ | {"KUBECONFIG": self.args.kubeconfig})

    def images(self):
        """The sets that make the chart run the release's images: their registry (the tag is
        the chart's appVersion, as for a user), and CPU requests that fit the node."""
        return ["--set", f"image.registry={self.args.registry}", "-f", str(NODE_VALUES)]

    def namespace(self, ns):
        """A fresh namespace with the host's Services and the Secrets the scenarios name."""
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for name, (port, attr) in HOST_SERVICES.items():
            self.kube.host_service(ns, name, port, *host_port(getattr(self, attr)))
        read = lambda name: (self.certs / name).read_text()  # noqa: E731
        redis_tls = pathlib.Path(self.args.redis_tls_dir)
        data = {
            "sluice-redis": {"redis-url": "redis://redis:6379"},
            "sluice-admin": {"admin-token": "an-admin-token-of-the-test-0123456789"},
            "sluice-kafka-tls": {"ca.crt": pathlib.Path(self.args.secure_ca).read_text(),
                                 "tls.crt": read("client.crt"), "tls.key": read("client.key")},
            "sluice-kafka-sasl": {"username": self.args.sasl_username, "password": self.args.sasl_password},
            "sluice-lag-scaler-tls": {"ca.crt": read("ca.crt"), "tls.crt": read("scaler.crt"),
                                      "tls.key": read("scaler.key")},
            # The stack's Redis TLS port: its CA, the client certificate it requires, its ACL user.
            "sluice-redis-tls": {key: (redis_tls / name).read_text()
                                 for key, name in (("ca.crt", "ca.crt"), ("tls.crt", "client.crt"), ("tls.key", "client.key"))},
            "sluice-redis-acl": {"username": self.args.redis_acl_username, "password": self.args.redis_acl_password},
        }
        for name, values in data.items():
            self.kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
                             "stringData": values})


def make_certs(folder, namespaces):
    """A CA, the scaler's certificate (its Service's names in each namespace: KEDA reaches it by
    name and presents the same certificate as its client) and a client certificate for the
    brokers' mutual-TLS setting."""
    def run(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, cwd=folder)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=sluice-test-ca", "-addext", "basicConstraints=critical,CA:TRUE")
    names = ",".join(f"DNS:sluice-lag.{ns}.svc,DNS:sluice-lag.{ns}.svc.cluster.local" for ns in namespaces)
    for name in ("scaler", "client"):
        run("openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN=sluice-test-{name}")
        (folder / f"{name}.ext").write_text(f"subjectAltName=IP:127.0.0.1,DNS:localhost,{names}\n"
                                            "extendedKeyUsage=serverAuth,clientAuth\n")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")


def deployment(env, ns, name):
    return env.kube.get_or_none(env.kube.path("apps/v1", "Deployment", name, ns))


def start_chain(args, folder):
    """chainsim on the host, where the pods reach it (the node's address), at a low rate: the
    scenarios need a chain to stream from, not load."""
    port = free_port()
    log = open(folder / "chainsim.log", "w")
    proc = subprocess.Popen([args.chainsim, "serve", "--listen", f"{args.node_ip}:{port}", "--rate", "50"],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, f"{args.node_ip}:{port}"


SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def quantity(q):
    """A Kubernetes quantity as a number ("50m" → 0.05, "1k" → 1000)."""
    q = str(q)
    for suffix, factor in sorted(SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * factor
    return float(q)


def behavior_equal(hpa_behavior, values_behavior):
    """The HPA's behavior (API-defaulted) against the values' for the fields the values set."""
    for direction, want in (values_behavior or {}).items():
        got = hpa_behavior.get(direction, {})
        for key, value in want.items():
            if key == "tolerance":
                same = abs(quantity(got.get(key, "nan")) - quantity(value)) < 1e-9
            elif key == "policies":
                same = [(p["type"], p["value"], p["periodSeconds"]) for p in got.get(key, [])] == \
                       [(p["type"], p["value"], p["periodSeconds"]) for p in value]
            else:
                same = got.get(key) == value
            if not same:
                return f"{direction}.{key}: HPA {got.get(key)!r}, values {value!r}"
    return None


def hpa_name(fullname):
    """The name the chart gives KEDA's HPA (within the 63 characters KEDA's webhook allows)."""
    return f"keda-hpa-{fullname[:44].rstrip('-')}-processor"


def hpa_checks(env, scenario, ns, values, fullname, so):
    """KEDA made an HPA whose bounds, behavior and metric are the values'."""
    a = values["processor"]["autoscaling"]
    name = hpa_name(fullname)
    path = env.kube.path("autoscaling/v2", "HorizontalPodAutoscaler", name, ns)
    so_path = env.kube.path("keda.sh/v1alpha1", "ScaledObject", so, ns)
    try:
        hpa = wait(f"{scenario}: KEDA's HPA {name}", lambda: env.kube.get_or_none(path), 60)
        ready = wait(f"{scenario}: ScaledObject Ready",
                     lambda: (c := condition(env.kube.get(so_path), "Ready")) and c["status"] == "True" and c, 60)
    except TimeoutError as e:
        so_status = env.kube.get_or_none(so_path) or {}
        check(False, f"{e}; ScaledObject conditions: {json.dumps(so_status.get('status', {}).get('conditions'))}")
        return None
    check(bool(ready), f"{scenario}: KEDA reconciled the ScaledObject (Ready: {ready.get('message', '')})")
    spec = hpa["spec"]
    check((spec.get("minReplicas"), spec["maxReplicas"]) == (max(a["minReplicas"], 1), a["maxReplicas"]),
          f"{scenario}: HPA min/max {spec.get('minReplicas')}/{spec['maxReplicas']} are the values' "
          f"{a['minReplicas']}/{a['maxReplicas']}")
    # The chart derives the policies the values leave out (templates/_replicas.tpl): the
    # HPA's behavior is the ScaledObject's as rendered, and that is the values' where they set it.
    rendered = env.kube.get(so_path)["spec"]["advanced"]["horizontalPodAutoscalerConfig"].get("behavior")
    for want, what in ((rendered, "the ScaledObject's"), (a.get("behavior"), "the values'")):
        differs = behavior_equal(spec.get("behavior", {}), want)
        check(differs is None, f"{scenario}: HPA behavior is {what}" + (f" ({differs})" if differs else ""))
    up = (rendered or {}).get("scaleUp", {}).get("policies", [])
    if "policies" not in ((a.get("behavior") or {}).get("scaleUp") or {}):
        check([(p["type"], p["value"]) for p in up] == [("Pods", max(values["kafka"]["partitions"], a["maxReplicas"]))],
              f"{scenario}: scale-up policies derived from kafka.partitions ({up})")
    metric = (spec.get("metrics") or [{}])[0]
    target = metric.get("external", {}).get("target", {})
    want = str(a["lagThreshold"]) if a["trigger"] == "kafka" else "1"
    check(metric.get("type") == "External" and target.get("type") == "AverageValue"
          and quantity(target.get("averageValue", "nan")) == quantity(want),
          f"{scenario}: HPA metric External AverageValue {target.get('averageValue')} "
          f"({'lagThreshold' if a['trigger'] == 'kafka' else 'replicas served by sluice-lag'}: {want})")
    check(spec["scaleTargetRef"]["name"] == f"{fullname}-processor", f"{scenario}: the HPA scales the processors")
    return hpa


def leftovers(env, ns, release):
    """Objects still in the namespace that the release made (or that its objects made)."""
    left = []
    for api_version, kind in KINDS:
        for obj in env.kube.list(api_version, kind, ns):
            meta = obj["metadata"]
            name = meta["name"]
            if (kind == "Secret" and name in SECRETS) or (kind == "ServiceAccount" and name == "default") \
                    or (kind == "ConfigMap" and name == "kube-root-ca.crt") or (kind == "Service" and name in HOST_SERVICES):
                continue
            left.append(f"{kind}/{name}")
    return left


def pod_report(env, ns):
    """One line per pod: phase, readiness, restarts, what a waiting container waits for, and the
    last lines of the log of any container not ready."""
    lines = []
    for pod in env.kube.list("v1", "Pod", ns):
        name, status = pod["metadata"]["name"], pod.get("status", {})
        for c in status.get("containerStatuses", []) or [{}]:
            waiting = (c.get("state") or {}).get("waiting") or {}
            lines.append(f"  {name}: {status.get('phase')} ready={c.get('ready')} restarts={c.get('restartCount')}"
                         + (f" waiting={waiting.get('reason')}: {waiting.get('message', '')[:200]}" if waiting else ""))
            if c and not c.get("ready"):
                try:
                    log = env.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}/log?tailLines=3"
                                           + ("&previous=true" if c.get("restartCount") else ""))
                    lines += [f"    | {line[:300]}" for line in (log or "").splitlines()]
                except ApiError as e:
                    lines.append(f"    (no log: {e.message})")
        for cond in status.get("conditions", []):
            if cond.get("status") != "True" and cond.get("message"):
                lines.append(f"    {cond['type']}: {cond['message'][:200]}")
    return "\n".join(lines)


def pods_ready(env, scenario, ns, timeout=180):
    """Every Deployment's pods Running and Ready through their own probes (the readiness probe
    on /ready), none restarted; the time it took."""
    started = time.monotonic()

    def all_ready():
        deployments = env.kube.list("apps/v1", "Deployment", ns)
        for d in deployments:
            want, status = d["spec"].get("replicas", 1), d.get("status", {})
            if status.get("readyReplicas", 0) < want or status.get("updatedReplicas", 0) < want \
                    or status.get("replicas", 0) != want:
                return False
        return bool(deployments)

    try:
        wait(f"{scenario}: every pod Ready", all_ready, timeout, interval=1)
    except TimeoutError as e:
        check(False, f"{e}\n{pod_report(env, ns)}")
        return False
    pods = env.kube.list("v1", "Pod", ns)
    restarted = [p["metadata"]["name"] for p in pods
                 for c in p["status"].get("containerStatuses", []) if c.get("restartCount")]
    return check(not restarted, f"{scenario}: {len(pods)} pods Running and Ready on the node in "
                 f"{time.monotonic() - started:.0f} s, none restarted" + (f" (restarted: {restarted})" if restarted else ""))


def scenario_run(env, scenario, extra, tmp):
    """install → every pod Ready → HPA checks → upgrade → uninstall → nothing left."""
    ns, release = f"chart-{scenario}", "sluice"
    env.namespace(ns)
    sets = env.images()
    if scenario == "sasl-tls":
        # The broker's certificate names its address, not a Service: TLS clients must use the address.
        sets += ["--set", f"kafka.bootstrapServers={env.args.pod_secure_brokers}"]
    elif scenario == "redis-tls":
        # Every Redis user of the chart on the stack's TLS port, as its ACL user, whose keys
        # must start with tls- (stack.sh); the certificate names the address, not a Service.
        port = env.args.pod_secure_redis.rsplit(":", 1)[1]
        # Its own consumer group too: the shared one's offsets record the other scenarios' store
        # (the plain port's `sluice:` keys), which a processor would refuse as replaced.
        sets += ["--set", f"redis.url={env.args.pod_secure_redis}", "--set", "redis.prefix=tls-chart:",
                 "--set", "processor.groupId=tls-chart-processor", "--set", f"networkPolicy.redisPorts={{{port}}}"]
    elif scenario == "trigger-kafka":
        # KEDA's operator reads Kafka itself, from its own namespace: "kafka" would not resolve there
        # (the chart's NOTES say so).
        sets += ["--set", f"kafka.bootstrapServers=kafka.{ns}.svc:9092"]
    env.helm("uninstall", release, "-n", ns, "--wait")  # what an interrupted run left
    out = env.helm("install", release, env.args.chart, "-n", ns, *extra, *sets)
    if not check(out.returncode == 0, f"{scenario}: helm install" + ("" if out.returncode == 0 else f": {out.stderr.strip()}")):
        return
    try:
        values = json.loads(env.helm("get", "values", release, "-n", ns, "--all", "-o", "json").stdout)
        fullname = release
        keda = values["processor"]["autoscaling"]["enabled"]
        if pods_ready(env, scenario, ns) and scenario == "defaults":
            security_checks(env, scenario, ns)
        if keda:
            hpa_checks(env, scenario, ns, values, fullname, f"{fullname}-processor")
        else:
            dep = deployment(env, ns, f"{fullname}-processor")
            check(dep["spec"]["replicas"] == values["processor"]["replicas"]
                  and not env.kube.list("keda.sh/v1alpha1", "ScaledObject", ns),
                  f"{scenario}: KEDA off: no ScaledObject, the Deployment keeps processor.replicas")
        upgrade_checks(env, scenario, ns, release, extra, sets, keda)
    finally:
        uninstall_checks(env, scenario, ns, release)


def crashloop_checks(env):
    """Bad input at deploy time: a wrong SLUICE_* value and a misspelt one given through --set
    leave the processor pod in CrashLoopBackOff, its log the service's own error naming both."""
    ns, release = "chart-bad-config", "bad"
    env.namespace(ns)
    env.helm("uninstall", release, "-n", ns, "--wait")
    out = env.helm("install", release, env.args.chart, "-n", ns, *env.images(),
                   "--set", "processor.env.SESSION_TIMEOUT_MS=fifteen-seconds", "--set", "processor.env.SESION_TIMEOUT_MS=15000")
    if not check(out.returncode == 0, "bad config: helm install" + ("" if out.returncode == 0 else f": {out.stderr.strip()}")):
        return
    selector = f"app.kubernetes.io/instance%3D{release},app.kubernetes.io/component%3Dprocessor"

    def crashlooping():
        for pod in env.kube.get(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]:
            for c in pod["status"].get("containerStatuses", []):
                if ((c.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff":
                    return pod["metadata"]["name"], c["restartCount"]
        return None

    try:
        name, restarts = wait("bad config: the processor in CrashLoopBackOff", crashlooping, 120, interval=1)
        log = env.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}/log?previous=true") or ""
        named = [v for v in ("SLUICE_PROCESSOR_SESSION_TIMEOUT_MS", "SLUICE_PROCESSOR_SESION_TIMEOUT_MS") if v in log]
        check(len(named) == 2 and "invalid configuration" in log,
              f"bad config: {name} in CrashLoopBackOff after {restarts} restarts, its log naming {named}: "
              f"{' '.join(log.split())[:300]}")
    except TimeoutError as e:
        check(False, f"{e}\n{pod_report(env, ns)}")
    finally:
        env.helm("uninstall", release, "-n", ns, "--wait")


def container_process(env, container_id):
    """The host PID of a running container's first process (containerd's task list)."""
    out = subprocess.run(["ctr", "--address", env.args.containerd_socket, "--namespace", "k8s.io", "tasks", "ls"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return int(fields[1])
    return None


def security_checks(env, scenario, ns):
    """Each running container as its pod spec says, read from the kernel on the node: the
    chart's user, no capabilities, no new privileges, seccomp filtering, a read-only root."""
    for pod in env.kube.list("v1", "Pod", ns):
        spec, name = pod["spec"], pod["metadata"]["name"]
        user = spec["securityContext"]["runAsUser"]
        for c in pod["status"].get("containerStatuses", []):
            pid = container_process(env, c["containerID"].split("://", 1)[1])
            if not check(pid is not None, f"{scenario}: {name}: its container runs on the node"):
                continue
            status = dict(line.split(":", 1) for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines())
            uids = {int(u) for u in status["Uid"].split()}
            root = next((line.split() for line in pathlib.Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                         if line.split()[4] == "/"), [])
            check(uids == {user} and int(status["CapEff"], 16) == 0 and status["NoNewPrivs"].strip() == "1"
                  and status["Seccomp"].strip() == "2" and "ro" in root[5].split(","),
                  f"{scenario}: {name}: runs as uid {sorted(uids)} (chart: {user}), CapEff {status['CapEff'].strip()}, "
                  f"NoNewPrivs {status['NoNewPrivs'].strip()}, Seccomp {status['Seccomp'].strip()} (filter), "
                  f"root {root[5] if root else '?'}")


def image_checks(env):
    """The images the node pulled are what the chart runs: each one's user, entrypoint and
    ports (its config, read from the registry) against the pod the chart renders."""
    rendered = env.helm("template", "sluice", env.args.chart, *env.images(), "--set", "chainsim.enabled=true",
                        "--kube-version", "1.36.0")
    if rendered.returncode != 0:
        check(False, f"helm template for the image checks: {rendered.stderr.strip()}")
        return
    registry, path = env.args.registry.split("/", 1)
    for doc in yaml.safe_load_all(rendered.stdout):
        if not doc or doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        for c in pod["containers"]:
            repo, tag = c["image"].split("/", 1)[1].rsplit(":", 1)
            manifest = registry_get(registry, f"/v2/{repo}/manifests/{tag}")
            config = registry_get(registry, f"/v2/{repo}/blobs/{manifest['config']['digest']}")["config"]
            user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
            ports = {f"{p['containerPort']}/tcp" for p in c.get("ports", [])}
            name = repo.rsplit("/", 1)[1]
            check(config.get("User") == user and config.get("Entrypoint") == [f"/usr/local/bin/{name}"]
                  and not c.get("command") and ports <= set(config.get("ExposedPorts", {})),
                  f"image {name}:{tag}: user {config.get('User')} (chart {user}), entrypoint {config.get('Entrypoint')}, "
                  f"ports {sorted(config.get('ExposedPorts', {}))} (chart {sorted(ports)})")


def registry_get(registry, path):
    """A JSON document from the registry's HTTP API (manifests in the OCI or Docker media type)."""
    import urllib.request
    request = urllib.request.Request(f"http://{registry}{path}", headers={"Accept": ", ".join([
        "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"])})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.load(r)


def uninstall_checks(env, scenario, ns, release):
    out = env.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "60s")
    check(out.returncode == 0, f"{scenario}: helm uninstall" + ("" if out.returncode == 0 else f": {out.stderr.strip()}"))
    try:
        wait(f"{scenario}: nothing left", lambda: not leftovers(env, ns, release), 60)
        check(True, f"{scenario}: helm uninstall left nothing behind (KEDA's HPA, ReplicaSets and pods included)")
    except TimeoutError:
        check(False, f"{scenario}: left behind after helm uninstall: {leftovers(env, ns, release)}")


def admin_token(env, ns, name):
    secret = env.kube.get_or_none(env.kube.path("v1", "Secret", name, ns))
    return secret and secret["data"].get("admin-token")


# Made by the release's objects, not by helm: KEDA's HPA, the Deployments' ReplicaSets and pods.
DERIVED = {"HorizontalPodAutoscaler", "ReplicaSet", "Pod"}


def strays(env, ns, release):
    """Objects in the namespace that the release's current manifest does not hold."""
    manifest = env.helm("get", "manifest", release, "-n", ns).stdout
    held = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(manifest) if d}
    # Helm's own record of each revision is a Secret too (sh.helm.release.v1.<release>.v<N>).
    return [f"{kind}/{name}" for kind, name in (o.split("/", 1) for o in leftovers(env, ns, release))
            if kind not in DERIVED and (kind, name) not in held
            and not (kind == "Secret" and name.startswith(f"sh.helm.release.v1.{release}."))]


def upgrade_checks(env, scenario, ns, release, extra, sets, keda):
    """An upgrade: the HPA follows the new maxReplicas, the chart-made admin token stays, and
    what the new values drop is deleted (the defaults upgrade to monitoring off)."""
    token_before = admin_token(env, ns, f"{release}-scheduler-admin")
    dropped = ["-f", str(CHART / "ci" / "monitoring-off-values.yaml")] if scenario == "defaults" else []
    before = set(leftovers(env, ns, release))
    out = env.helm("upgrade", release, env.args.chart, "-n", ns, *extra, *dropped, *sets,
                   "--set", "processor.autoscaling.maxReplicas=6")
    if not check(out.returncode == 0, f"{scenario}: helm upgrade" + ("" if out.returncode == 0 else f": {out.stderr.strip()}")):
        return
    left = strays(env, ns, release)
    check(not left, f"{scenario}: helm upgrade left no object its new manifest lacks" + (f": {left}" if left else ""))
    if dropped:
        gone = {f"PodMonitor/{release}", f"PrometheusRule/{release}", f"ConfigMap/{release}-dashboard"}
        after = set(leftovers(env, ns, release))
        check(gone <= before and not gone & after,
              f"{scenario}: helm upgrade to monitoring off deleted {sorted(gone & before)} (left: {sorted(gone & after)})")
    if keda:
        path = env.kube.path("autoscaling/v2", "HorizontalPodAutoscaler", hpa_name(release), ns)
        try:
            wait(f"{scenario}: the HPA after the upgrade", lambda: env.kube.get(path)["spec"]["maxReplicas"] == 6, 60)
            check(True, f"{scenario}: helm upgrade: KEDA moved the HPA's maxReplicas to 6")
        except TimeoutError as e:
            check(False, str(e))
    if token_before:
        check(admin_token(env, ns, f"{release}-scheduler-admin") == token_before,
              f"{scenario}: helm upgrade kept the chart-made admin token (lookup against the API server)")


def refusal_checks(env):
    """Bad values are refused before anything is created, each naming what is wrong."""
    ns = "chart-refusals"
    env.namespace(ns)
    cases = [
        ("the schema", ["--set", "processor.autoscaling.trigger=cpu"], "trigger"),
        ("the chart", ["--set", "processor.autoscaling.minReplicas=5", "--set", "processor.autoscaling.maxReplicas=3"],
         "processor.autoscaling.minReplicas (5) is above processor.autoscaling.maxReplicas (3)"),
        ("the chart", ["--set", "processor.autoscaling.maxReplicas=13"], "processor.autoscaling.maxReplicas (13)"),
    ]
    for by, sets, names in cases:
        out = env.helm("install", "bad", env.args.chart, "-n", ns, *sets)
        check(out.returncode != 0 and names in out.stderr,
              f"refused by {by}: {' '.join(sets[1::2])} ({out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'accepted'})")
    # KEDA's webhook: a hand-made HPA already scales the processors (a migration to KEDA).
    env.kube.apply({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "hand-made", "namespace": ns},
                    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bad-sluice-processor"},
                             "minReplicas": 1, "maxReplicas": 3,
                             "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}})
    out = env.helm("install", "bad", env.args.chart, "-n", ns, "--set", "processor.autoscaling.trigger=kafka")
    check(out.returncode != 0 and "admission webhook" in out.stderr and "hand-made" in out.stderr,
          f"refused by KEDA's admission webhook: the processors already scaled by HPA hand-made "
          f"({out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'accepted'})")
    env.helm("uninstall", "bad", "-n", ns)
    # A release name of 53 characters: KEDA's default HPA name would be 71, over its limit.
    long = "a-release-name-long-enough-to-overflow-keda-hpa-names"
    out = env.helm("install", long, env.args.chart, "-n", ns, "--set", "processor.autoscaling.trigger=kafka", *env.images())
    check(out.returncode == 0, f"a {len(long)}-character release name is accepted by KEDA's webhook"
          + ("" if out.returncode == 0 else f": {out.stderr.strip()}"))
    env.helm("uninstall", long, "-n", ns, "--wait")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--helm", "--kubeconfig", "--chart", "--registry", "--node-ip", "--pod-brokers", "--pod-secure-brokers",
                 "--pod-redis", "--chainsim", "--containerd-socket", "--secure-ca", "--sasl-username", "--sasl-password",
                 "--pod-secure-redis", "--redis-tls-dir", "--redis-acl-username", "--redis-acl-password"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--only", action="append", help="run only these scenarios (bad-config: the CrashLoop check)")
    args = parser.parse_args()
    scenarios = {"defaults": []}
    for values in sorted((CHART / "ci").glob("*-values.yaml")):
        scenarios[values.name.removesuffix("-values.yaml")] = ["-f", str(values)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        make_certs(tmp, [f"chart-{s}" for s in scenarios])
        chain, address = start_chain(args, tmp)
        try:
            env = Env(args, tmp, address)
            version = env.kube.get("/version")["gitVersion"]
            print(f"API server {version}; chart {args.chart}, images {args.registry}/sluice-*; scenarios: {', '.join(scenarios)}")
            image_checks(env)
            for scenario, extra in scenarios.items():
                if args.only and scenario not in args.only:
                    continue
                try:
                    scenario_run(env, scenario, extra, tmp)
                except (ApiError, OSError, KeyError, subprocess.SubprocessError) as e:
                    check(False, f"{scenario}: {type(e).__name__}: {e}")
            if not args.only:
                refusal_checks(env)
            if not args.only or "bad-config" in args.only:
                crashloop_checks(env)
        finally:
            chain.terminate()
            chain.wait(10)
    print(f"\n{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
