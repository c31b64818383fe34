#!/usr/bin/env python3
"""The chart's tests, with the real helm: lint and render the defaults and every
ci/*-values.yaml scenario, then check what the rendered objects must say.

Every rendered object is also validated: built-in kinds against the Kubernetes API
schemas that kubernetes-validate bundles (strict: unknown fields are errors), KEDA's
kinds against the openAPIV3Schema of KEDA's own CRDs (from its released Go module).

Usage: test_chart.py --helm PATH --keda-crds DIR [--kube-version 1.31.0]
Exits non-zero with every failed check listed.
"""
import argparse
import pathlib
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

CHART = pathlib.Path(__file__).resolve().parent.parent / "sluice"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def helm(args, *cmd):
    return subprocess.run([args.helm, *cmd], capture_output=True, text=True)


def render(args, *extra):
    out = helm(args, "template", "sluice", str(CHART), "--kube-version", args.kube_version, *extra)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(objects, kind, name_suffix=None):
    return [
        o for o in objects
        if o["kind"] == kind and (name_suffix is None or o["metadata"]["name"].endswith(name_suffix))
    ]


def workload_checks(scenario, objects):
    for deploy in find(objects, "Deployment"):
        name = deploy["metadata"]["name"]
        pod = deploy["spec"]["template"]["spec"]
        sec = pod.get("securityContext", {})
        check(sec.get("runAsNonRoot") is True and sec.get("seccompProfile", {}).get("type") == "RuntimeDefault",
              f"{scenario}: {name} runs as non-root with seccomp RuntimeDefault")
        for c in pod["containers"]:
            cs = c.get("securityContext", {})
            check(cs.get("readOnlyRootFilesystem") is True and cs.get("allowPrivilegeEscalation") is False
                  and cs.get("capabilities", {}).get("drop") == ["ALL"],
                  f"{scenario}: {name}/{c['name']} has a read-only root, no escalation, no capabilities")
            check("resources" in c and "requests" in c["resources"], f"{scenario}: {name}/{c['name']} has resources")
            if c["name"] != "chainsim":
                probes = {p: c.get(p, {}).get("httpGet", {}).get("path") for p in ("livenessProbe", "readinessProbe")}
                check(probes == {"livenessProbe": "/live", "readinessProbe": "/ready"},
                      f"{scenario}: {name} probes /live and /ready")
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                deadline = [int(v) for k, v in env.items() if k.endswith("_SHUTDOWN_DEADLINE_MS")]
                grace = pod.get("terminationGracePeriodSeconds", 30)
                check(deadline and grace * 1000 > deadline[0] + 5000,
                      f"{scenario}: {name}'s grace period ({grace} s) is above its drain deadline plus the preStop pause")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--helm", required=True)
    parser.add_argument("--kube-version", default="1.31.0")
    parser.add_argument("--keda-crds", required=True, help="folder of KEDA's CRD YAML files")
    args = parser.parse_args()
    crd_schemas = {}
    for path in pathlib.Path(args.keda_crds).glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            crd_schemas[key] = version["schema"]["openAPIV3Schema"]
    check(("keda.sh/v1alpha1", "ScaledObject") in crd_schemas, f"KEDA's CRDs read from {args.keda_crds}")

    scenarios = {"defaults": []}
    for values in sorted((CHART / "ci").glob("*-values.yaml")):
        scenarios[values.name.removesuffix("-values.yaml")] = ["-f", str(values)]
    rendered = {}
    for scenario, extra in scenarios.items():
        lint = helm(args, "lint", str(CHART), "--strict", *extra)
        check(lint.returncode == 0, f"{scenario}: helm lint --strict" + ("" if lint.returncode == 0 else f"\n{lint.stdout}{lint.stderr}"))
        try:
            rendered[scenario] = render(args, *extra)
            check(True, f"{scenario}: helm template")
        except RuntimeError as e:
            check(False, f"{scenario}: helm template: {e}")
    for scenario, objects in rendered.items():
        for obj in objects:
            what = f"{scenario}: {obj['kind']} {obj['metadata']['name']} is valid"
            key = (obj["apiVersion"], obj["kind"])
            try:
                if key in crd_schemas:
                    jsonschema.validate(obj, crd_schemas[key])
                    check(True, what + " (KEDA CRD schema)")
                else:
                    kubernetes_validate.validate(obj, args.kube_version, True)
                    check(True, what + f" (Kubernetes {args.kube_version}, strict)")
            except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
                check(False, f"{what}: {str(e).splitlines()[0]}")
            except kubernetes_validate.SchemaNotFoundError as e:
                check(False, f"{what}: no schema ({e})")
        workload_checks(scenario, objects)
        scaled = find(objects, "ScaledObject")
        check(all(s["spec"]["scaleTargetRef"]["name"].endswith("-processor") for s in scaled),
              f"{scenario}: the scheduler and the ingest are never KEDA targets")

    on, off = rendered.get("defaults", []), rendered.get("keda-off", [])
    processor = find(on, "Deployment", "-processor")
    scaled = find(on, "ScaledObject")
    check(len(processor) == 1 and "replicas" not in processor[0]["spec"],
          "KEDA on: the processor Deployment leaves replicas to the HPA")
    check(len(scaled) == 1 and scaled[0]["spec"]["scaleTargetRef"]["name"] == processor[0]["metadata"]["name"],
          "KEDA on: one ScaledObject points at the processor Deployment")
    if scaled:
        trigger = scaled[0]["spec"]["triggers"][0]
        meta = trigger["metadata"]
        check(trigger["type"] == "kafka" and meta["allowIdleConsumers"] == "false"
              and meta["topic"] == "chain.transactions" and meta["consumerGroup"] == "sluice-processor",
              "KEDA on: a kafka trigger on the processors' group and topic, idle consumers not allowed")
        check(scaled[0]["spec"]["maxReplicaCount"] <= 12, "KEDA on: maxReplicaCount within the partition count")
        check("behavior" in scaled[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"],
              "KEDA on: the HPA behavior comes from the values")
    off_processor = find(off, "Deployment", "-processor")
    check(len(off_processor) == 1 and off_processor[0]["spec"].get("replicas") == 3 and not find(off, "ScaledObject"),
          "KEDA off: replicas set from the values, no ScaledObject")
    scheduler = find(on, "Deployment", "-scheduler")
    check(len(scheduler) == 1 and scheduler[0]["spec"]["replicas"] == 2, "the scheduler runs 2 replicas by default")
    ingest = find(on, "Deployment", "-ingest")
    check(len(ingest) == 1 and ingest[0]["spec"]["replicas"] == 2, "the ingest runs an active/standby pair")
    check(len(find(on, "PodDisruptionBudget")) == 3, "a PodDisruptionBudget per workload")
    policies = {p["metadata"]["name"]: p for p in find(on, "NetworkPolicy")}
    check(len(policies) == 3, "a NetworkPolicy per workload")
    for name, policy in policies.items():
        ins = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        outs = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        admin = {"processor": {9090}, "scheduler": {9091, 50061}, "ingest": {9094}}[name.rsplit("-", 1)[1]]
        check(ins == admin and outs == {53, 9092, 6379, 50051},
              f"{name}: in only {sorted(admin)}, out only DNS, Kafka, Redis and the chain ({sorted(ins)} / {sorted(outs)})")

    try:
        render(args, "--set", "processor.autoscaling.maxReplicas=13")
        check(False, "maxReplicas above the partitions fails the render")
    except RuntimeError as e:
        check("kafka.partitions" in str(e) and "allowMoreReplicasThanPartitions" in str(e),
              f"maxReplicas above the partitions fails the render, naming the settings ({str(e)[:80]}…)")
    allowed = render(args, "--set", "processor.autoscaling.maxReplicas=13",
                     "--set", "processor.autoscaling.allowMoreReplicasThanPartitions=true")
    check(find(allowed, "ScaledObject")[0]["spec"]["maxReplicaCount"] == 13, "…unless explicitly allowed")

    # values.schema.json: a wrong value or a typo stops the render, naming where.
    for setting, where in [
        ("processor.autoscaling.offsetResetPolicy=oldest", "/processor/autoscaling/offsetResetPolicy"),
        ("processor.autoscaling.lagThreshold=0", "/processor/autoscaling/lagThreshold"),
        ("kafka.partitions=0", "/kafka/partitions"),
        ("redis.url=localhost:6379", "/redis/url"),
        ("processor.autoscling.enabled=false", "autoscling"),
    ]:
        try:
            render(args, "--set", setting)
            check(False, f"values.schema.json refuses {setting}")
        except RuntimeError as e:
            check(where in str(e), f"values.schema.json refuses {setting}, naming {where}")

    demo = rendered.get("demo", [])
    env = {e["name"]: e for c in find(demo, "Deployment", "-scheduler")[0]["spec"]["template"]["spec"]["containers"]
           for e in c["env"]} if demo else {}
    check(env.get("SLUICE_SCHEDULER_ADMIN_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "sluice-admin"
          and "valueFrom" in env.get("SLUICE_SCHEDULER_REDIS_URL", {}),
          "demo: secrets reach the scheduler as env from Secrets, never as values")
    check(len(find(demo, "Deployment", "-chainsim")) == 1, "demo: chainsim runs when enabled")

    # The chart's README names every value (or the block it belongs to).
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()

    def leaves(node, path):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from leaves(v, path + [k])
        else:
            yield path

    undocumented = [
        ".".join(p) for p in leaves(values, [])
        if not any(f"`{'.'.join(p[:i])}`" in readme for i in range(len(p), 0, -1))
    ]
    check(not undocumented, f"the chart README documents every value (missing: {undocumented})")

    print(f"\n{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
