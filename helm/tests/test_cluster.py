#!/usr/bin/env python3
"""The chart against a real control plane (deploy/local/cluster.sh: kube-apiserver,
kube-controller-manager's HPA controller, KEDA's operator, metrics adapter and admission
webhook), with the real helm: `helm install` of the defaults and every ci/*-values.yaml
scenario, KEDA's HPA checked against the values, `helm upgrade` (the HPA follows, the
scheduler's admin token is kept), `helm uninstall` (nothing left behind), and bad values
refused by the chart's schema, its own checks or KEDA's webhook, each naming the value.

No kubelet runs: for the scenarios whose trigger is Sluice's scaler, sluice-lag runs here
with its pod's environment (Secrets and Secret volumes materialised), so KEDA reaches it at
`lag.scaler.address`; for the kafka trigger KEDA reads the real broker itself (SASL/SCRAM
over TLS in the sasl-tls scenario).

Usage: test_cluster.py --helm PATH --kubeconfig FILE --sluice-lag BIN --brokers HOST:PORT
                       --secure-brokers HOST:PORT --secure-ca FILE --sasl-username U --sasl-password P
Exits non-zero with every failed check listed.
"""
import argparse
import base64
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
# What a namespace holds without any release: its default ServiceAccount and our Secrets.
SECRETS = ["sluice-redis", "sluice-admin", "sluice-kafka-tls", "sluice-kafka-sasl", "sluice-lag-scaler-tls"]


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Env:
    """The cluster, helm, and what the scenarios' Secrets hold."""

    def __init__(self, args, certs):
        self.args, self.certs = args, certs
        self.kube = Kube(args.kubeconfig)

    def helm(self, *cmd):
        return subprocess.run([self.args.helm, *cmd], capture_output=True, text=True,
                              env=os.environ | {"KUBECONFIG": self.args.kubeconfig})

    def namespace(self, ns):
        """A fresh namespace with the Secrets the scenarios name."""
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        read = lambda name: (self.certs / name).read_text()  # noqa: E731
        data = {
            "sluice-redis": {"redis-url": "redis://127.0.0.1:1"},
            "sluice-admin": {"admin-token": "an-admin-token-of-the-test-0123456789"},
            "sluice-kafka-tls": {"ca.crt": pathlib.Path(self.args.secure_ca).read_text(),
                                 "tls.crt": read("client.crt"), "tls.key": read("client.key")},
            "sluice-kafka-sasl": {"username": self.args.sasl_username, "password": self.args.sasl_password},
            "sluice-lag-scaler-tls": {"ca.crt": read("ca.crt"), "tls.crt": read("scaler.crt"),
                                      "tls.key": read("scaler.key")},
        }
        for name, values in data.items():
            self.kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
                             "stringData": values})


def make_certs(folder):
    """A CA, the scaler's certificate (127.0.0.1; KEDA presents the same one as its client) and a
    client certificate for the brokers' mutual-TLS setting."""
    def run(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, cwd=folder)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=sluice-test-ca", "-addext", "basicConstraints=critical,CA:TRUE")
    for name in ("scaler", "client"):
        run("openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN=sluice-test-{name}")
        (folder / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                            "extendedKeyUsage=serverAuth,clientAuth\n")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")


def deployment(env, ns, name):
    return env.kube.get_or_none(env.kube.path("apps/v1", "Deployment", name, ns))


def pod_env(env, ns, dep, folder):
    """The first container's environment as a pod would get it, with its Secret volumes
    written under `folder` and the paths into them rewritten."""
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    mounts = {}
    for m in container.get("volumeMounts", []):
        vol = next((v for v in spec.get("volumes", []) if v["name"] == m["name"]), {})
        if "secret" in vol:
            secret = env.kube.get(env.kube.path("v1", "Secret", vol["secret"]["secretName"], ns))
            local = folder / m["name"]
            local.mkdir(parents=True, exist_ok=True)
            for key, value in secret.get("data", {}).items():
                (local / key).write_bytes(base64.b64decode(value))
            mounts[m["mountPath"].rstrip("/")] = str(local)
    out = {}
    for e in container.get("env", []):
        if "value" in e:
            value = e["value"]
            for mount, local in mounts.items():
                value = value.replace(mount + "/", local + "/")
            out[e["name"]] = value
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            secret = env.kube.get(env.kube.path("v1", "Secret", ref["name"], ns))
            out[e["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
    return out


def start_lag(env, ns, fullname, scaler_port, folder):
    """sluice-lag with its pod's environment, on local ports."""
    dep = deployment(env, ns, f"{fullname}-lag")
    variables = pod_env(env, ns, dep, folder)
    variables |= {"SLUICE_LAG_ADMIN_LISTEN": f"127.0.0.1:{free_port()}",
                  "SLUICE_LAG_SCALER_LISTEN": f"127.0.0.1:{scaler_port}", "SLUICE_LOG_FORMAT": "plain",
                  "PATH": os.environ["PATH"]}
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "sluice-lag.log", "w")
    return subprocess.Popen([env.args.sluice_lag], env=variables, stdout=log, stderr=subprocess.STDOUT)


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
    differs = behavior_equal(spec.get("behavior", {}), a.get("behavior"))
    check(differs is None, f"{scenario}: HPA behavior is the values'" + (f" ({differs})" if differs else ""))
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
                    or (kind == "ConfigMap" and name == "kube-root-ca.crt"):
                continue
            left.append(f"{kind}/{name}")
    return left


def scenario_run(env, scenario, extra, tmp):
    """install → HPA checks → upgrade → uninstall → nothing left."""
    ns, release = f"chart-{scenario}", "sluice"
    env.namespace(ns)
    port = free_port()
    brokers = env.args.secure_brokers if scenario == "sasl-tls" else env.args.brokers
    sets = ["--set", f"kafka.bootstrapServers={brokers}", "--set", f"lag.scaler.address=127.0.0.1:{port}"]
    env.helm("uninstall", release, "-n", ns, "--wait")  # what an interrupted run left
    out = env.helm("install", release, str(CHART), "-n", ns, *extra, *sets)
    if not check(out.returncode == 0, f"{scenario}: helm install" + ("" if out.returncode == 0 else f": {out.stderr.strip()}")):
        return
    lag = None
    try:
        values = json.loads(env.helm("get", "values", release, "-n", ns, "--all", "-o", "json").stdout)
        fullname = release
        a = values["processor"]["autoscaling"]
        keda = a["enabled"]
        if keda and a["trigger"] != "kafka":
            lag = start_lag(env, ns, fullname, port, tmp / scenario)
        if keda:
            hpa_checks(env, scenario, ns, values, fullname, f"{fullname}-processor")
        else:
            dep = deployment(env, ns, f"{fullname}-processor")
            check(dep["spec"]["replicas"] == values["processor"]["replicas"]
                  and not env.kube.list("keda.sh/v1alpha1", "ScaledObject", ns),
                  f"{scenario}: KEDA off: no ScaledObject, the Deployment keeps processor.replicas")
        upgrade_checks(env, scenario, ns, release, extra, sets, keda)
    finally:
        if lag:
            lag.terminate()
            lag.wait(10)
        uninstall_checks(env, scenario, ns, release)


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
    out = env.helm("upgrade", release, str(CHART), "-n", ns, *extra, *dropped, *sets,
                   "--set", "processor.autoscaling.maxReplicas=5")
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
            wait(f"{scenario}: the HPA after the upgrade", lambda: env.kube.get(path)["spec"]["maxReplicas"] == 5, 60)
            check(True, f"{scenario}: helm upgrade: KEDA moved the HPA's maxReplicas to 5")
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
        out = env.helm("install", "bad", str(CHART), "-n", ns, *sets)
        check(out.returncode != 0 and names in out.stderr,
              f"refused by {by}: {' '.join(sets[1::2])} ({out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'accepted'})")
    # KEDA's webhook: a hand-made HPA already scales the processors (a migration to KEDA).
    env.kube.apply({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "hand-made", "namespace": ns},
                    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bad-sluice-processor"},
                             "minReplicas": 1, "maxReplicas": 3,
                             "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}})
    out = env.helm("install", "bad", str(CHART), "-n", ns, "--set", "processor.autoscaling.trigger=kafka")
    check(out.returncode != 0 and "admission webhook" in out.stderr and "hand-made" in out.stderr,
          f"refused by KEDA's admission webhook: the processors already scaled by HPA hand-made "
          f"({out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'accepted'})")
    env.helm("uninstall", "bad", "-n", ns)
    # A release name of 53 characters: KEDA's default HPA name would be 71, over its limit.
    long = "a-release-name-long-enough-to-overflow-keda-hpa-names"
    out = env.helm("install", long, str(CHART), "-n", ns, "--set", "processor.autoscaling.trigger=kafka",
                   "--set", f"kafka.bootstrapServers={env.args.brokers}")
    check(out.returncode == 0, f"a {len(long)}-character release name is accepted by KEDA's webhook"
          + ("" if out.returncode == 0 else f": {out.stderr.strip()}"))
    env.helm("uninstall", long, "-n", ns, "--wait")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--helm", "--kubeconfig", "--sluice-lag", "--brokers", "--secure-brokers", "--secure-ca",
                 "--sasl-username", "--sasl-password"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--only", action="append", help="run only these scenarios")
    args = parser.parse_args()
    scenarios = {"defaults": []}
    for values in sorted((CHART / "ci").glob("*-values.yaml")):
        scenarios[values.name.removesuffix("-values.yaml")] = ["-f", str(values)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        make_certs(tmp)
        env = Env(args, tmp)
        version = env.kube.get("/version")["gitVersion"]
        print(f"API server {version}; scenarios: {', '.join(scenarios)}")
        for scenario, extra in scenarios.items():
            if args.only and scenario not in args.only:
                continue
            try:
                scenario_run(env, scenario, extra, tmp)
            except (ApiError, OSError, KeyError, subprocess.SubprocessError) as e:
                check(False, f"{scenario}: {type(e).__name__}: {e}")
        if not args.only:
            refusal_checks(env)
    print(f"\n{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
