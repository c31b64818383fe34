#!/usr/bin/env python3
"""The chart's tests, with the real helm: lint and render the defaults and every
ci/*-values.yaml scenario, then check what the rendered objects must say.

Every rendered object is also validated: built-in kinds against the Kubernetes API
schemas that kubernetes-validate bundles (strict: unknown fields are errors), custom
kinds against the openAPIV3Schema of their own CRDs: KEDA's from its released Go module,
prometheus-operator's generated from its released API module (deploy/local/tools.sh).

The monitoring checks use the real promtool: the alert rules pass `promtool check rules`
and their unit tests (deploy/prometheus/sluice-rules.test.yaml, a firing and a quiet
case per alert), every dashboard query parses, and every metric name the rules and the
dashboard use is in what the running services exported (the demo smoke's scrapes).

Usage: test_chart.py --helm PATH --promtool PATH --crds DIR [--crds DIR…] --scrapes DIR
                     --prometheus URL --since UNIX_SECONDS [--kube-version 1.30.0 --kube-version 1.36.0]
Exits non-zero with every failed check listed.
"""
import argparse
import base64
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.parse
import urllib.request

import jsonschema
import kubernetes_validate
import yaml

CHART = pathlib.Path(__file__).resolve().parent.parent / "sluice"
DEPLOY = CHART.parent.parent / "deploy"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


def helm(args, *cmd):
    return subprocess.run([args.helm, *cmd], capture_output=True, text=True)


def render(args, *extra):
    out = helm(args, "template", "sluice", str(CHART), "--kube-version", args.kube_versions[0], *extra)
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
        # A Service sluice-lag would otherwise give the pods SLUICE_LAG_PORT=tcp://… and the like.
        check(pod.get("enableServiceLinks") is False, f"{scenario}: {name} gets no service variables (enableServiceLinks)")
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
                if c["name"] == "lag":  # a poller: nothing to drain, no deadline, no preStop
                    check(not deadline and grace <= 30, f"{scenario}: {name} stops within {grace} s (nothing to drain)")
                    continue
                check(deadline and grace * 1000 > deadline[0] + 5000,
                      f"{scenario}: {name}'s grace period ({grace} s) is above its drain deadline plus the preStop pause")


def container_env(deployment):
    return {e["name"]: e for c in deployment["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}


def kafka_security_checks(args, rendered):
    """SASL/TLS: the processors, the ingest and KEDA all authenticate from the same Secrets."""
    plain, secure = rendered.get("defaults", []), rendered.get("sasl-tls", [])
    check(not find(plain, "TriggerAuthentication")
          and not any("SLUICE_PROCESSOR_KAFKA_PROPERTIES" in container_env(d) for d in find(plain, "Deployment")),
          "defaults: plaintext Kafka, no TriggerAuthentication")
    auth = find(secure, "TriggerAuthentication")
    scaled = find(secure, "ScaledObject")
    check(len(auth) == 1 and len(scaled) == 1, "sasl-tls: a TriggerAuthentication beside the ScaledObject")
    if not (auth and scaled):
        return
    trigger = scaled[0]["spec"]["triggers"][0]
    check(trigger.get("authenticationRef", {}).get("name") == auth[0]["metadata"]["name"]
          and trigger["metadata"].get("tls") == "enable" and trigger["metadata"].get("sasl") == "scram_sha512",
          "sasl-tls: the kafka trigger uses it, with tls enabled and sasl scram_sha512")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth[0]["spec"]["secretTargetRef"]}
    check(refs == {"username": ("sluice-kafka-sasl", "username"), "password": ("sluice-kafka-sasl", "password"),
                   "ca": ("sluice-kafka-tls", "ca.crt"), "cert": ("sluice-kafka-tls", "tls.crt"),
                   "key": ("sluice-kafka-tls", "tls.key")},
          f"sasl-tls: KEDA reads the credentials and certificates from the Secrets ({sorted(refs)})")
    lag = find(secure, "Deployment", "-lag")
    lag_env = container_env(lag[0]) if lag else {}
    lag_props = dict(p.split("=", 1) for p in lag_env.get("SLUICE_LAG_KAFKA_PROPERTIES", {}).get("value", "=").split(","))
    lag_mounts = {m["mountPath"] for c in lag[0]["spec"]["template"]["spec"]["containers"] for m in c.get("volumeMounts", [])} if lag else set()
    check(lag_props.get("security.protocol") == "SASL_SSL" and lag_props.get("sasl.mechanism") == "SCRAM-SHA-512"
          and {lag_props.get(k, "").rsplit("/", 1)[0] for k in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")} <= lag_mounts
          and "client.rack" not in lag_props
          and all(lag_env.get(f"SLUICE_LAG_KAFKA_SASL_{k}", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "sluice-kafka-sasl"
                  for k in ("USERNAME", "PASSWORD")),
          f"sasl-tls: sluice-lag speaks SASL_SSL with the mounted certificates and the Secret's credentials, without librdkafka's tuning properties ({sorted(lag_props)})")
    for component in ("processor", "ingest"):
        deployment = find(secure, "Deployment", f"-{component}")[0]
        prefix = f"SLUICE_{component.upper()}_"
        env = container_env(deployment)
        props = dict(p.split("=", 1) for p in env.get(prefix + "KAFKA_PROPERTIES", {}).get("value", "").split(","))
        mounts = {m["mountPath"] for c in deployment["spec"]["template"]["spec"]["containers"] for m in c.get("volumeMounts", [])}
        check(props.get("security.protocol") == "SASL_SSL" and props.get("sasl.mechanism") == "SCRAM-SHA-512"
              and {props.get(k, "").rsplit("/", 1)[0] for k in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")} <= mounts
              and props.get("client.rack") == "zone-a",
              f"sasl-tls: the {component} speaks SASL_SSL with the mounted certificates ({sorted(props)})")
        check(all(env.get(prefix + f"KAFKA_SASL_{k}", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "sluice-kafka-sasl"
                  for k in ("USERNAME", "PASSWORD")),
              f"sasl-tls: the {component}'s SASL credentials are env from the Secret")
    refused_renders(args, [
        (["kafka.sasl.enabled=true"], "kafka.sasl.secret"),
        (["kafka.tls.enabled=true", "kafka.tls.clientCert=true"], "kafka.tls.secret"),
        (["kafka.properties.sasl\\.password=x"], "sasl.password"),
        (["kafka.properties.a=x\\,y"], "/kafka/properties/a"),
        (["processor.env.KAFKA_PROPERTIES=x"], "/processor/env"),
    ])


def refused_renders(args, cases):
    """Each case's `--set`s fail the render with a message naming what to fix."""
    for settings, expected in cases:
        try:
            render(args, *[a for s in settings for a in ("--set", s)])
            check(False, f"{settings} fails the render")
        except RuntimeError as e:
            check(expected in str(e), f"{settings} fails the render, naming {expected}")


def redis_security_checks(args, rendered):
    """TLS and an ACL user for Redis: every service that uses it gets the same files and Secret."""
    plain, secure = rendered.get("defaults", []), rendered.get("redis-tls", [])
    check(not any(k.startswith(p + "REDIS_TLS") or k.startswith(p + "REDIS_USERNAME")
                  for d in find(plain, "Deployment") for k in container_env(d)
                  for p in ("SLUICE_PROCESSOR_", "SLUICE_SCHEDULER_", "SLUICE_INGEST_")),
          "defaults: plain Redis, no TLS files or ACL user")
    pods = [(c, find(secure, "Deployment", f"-{c}")) for c in ("processor", "scheduler", "ingest")]
    pods.append(("ops", find(secure, "Job")))
    for component, found in pods:
        check(len(found) == 1, f"redis-tls: one {component} workload")
        if len(found) != 1:
            continue
        spec = found[0]["spec"]["template"]["spec"]
        prefix = "SLUICE_SCHEDULER_" if component == "scheduler" else f"SLUICE_{'PROCESSOR' if component == 'ops' else component.upper()}_"
        env = container_env(found[0])
        mounts = {m["mountPath"]: m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in spec.get("volumes", [])}
        files = [env.get(prefix + f"REDIS_TLS_{k}_FILE", {}).get("value", "") for k in ("CA", "CERT", "KEY")]
        check(env.get(prefix + "REDIS_URL", {}).get("value", "").startswith("rediss://")
              and all(f and volumes.get(mounts.get(f.rsplit("/", 1)[0])) == "sluice-redis-tls" for f in files),
              f"redis-tls: the {component} reaches rediss:// with the CA and client certificate mounted from the Secret ({files})")
        refs = {k: env.get(prefix + f"REDIS_{k}", {}).get("valueFrom", {}).get("secretKeyRef", {}) for k in ("USERNAME", "PASSWORD")}
        check(all(r.get("name") == "sluice-redis-acl" and r.get("key") == k.lower() for k, r in refs.items()),
              f"redis-tls: the {component}'s ACL user and password are env from the Secret")
    refused_renders(args, [
        (["redis.tls.clientCert=true"], "redis.tls.secret"),
        (["redis.tls.secret=x"], "rediss://"),
        (["redis.tls.secretName=x"], "/redis/tls"),
    ])


def runbook_checks(deployed):
    """Every alert links its runbook: a section of the chart's README saying what it means,
    what to look at and what to do."""
    base = yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["alerts"]["runbookUrl"]
    readme = (CHART / "README.md").read_text()
    sections = dict(re.findall(r"^### (\w+)\n(.*?)(?=^##)", readme + "\n##", re.M | re.S))
    for rule in (r for g in deployed["groups"] for r in g["rules"] if "alert" in r):
        alert, url = rule["alert"], rule["annotations"].get("runbook_url")
        section = sections.get(alert, "")
        check(url == f"{base}#{alert.lower()}" and all(f"**{part}**" in section for part in ("What it means", "Look at", "Do")),
              f"{alert} links its runbook ({url}), a README section with what it means, what to look at and what to do")


def workspace_binary(name):
    """The workspace's debug binary `name` (the demo smoke builds every binary first)."""
    meta = subprocess.run(["cargo", "metadata", "--locked", "--format-version", "1", "--no-deps"],
                          capture_output=True, text=True, cwd=CHART.parent.parent, check=True)
    return pathlib.Path(json.loads(meta.stdout)["target_directory"]) / "debug" / name


def sluice_lag_binary():
    return workspace_binary("sluice-lag")


LAG_LOCAL = {"SLUICE_LAG_ADMIN_LISTEN": "127.0.0.1:0", "SLUICE_LAG_BROKERS": "127.0.0.1:1"}


def run_with_chart_env(binary, deployment, local=LAG_LOCAL, secrets=None):
    """Starts the binary with the container's literal env, `secrets` (name → value) for the
    Secret-backed variables, and `local` over them (admin on a free port, dependencies on a
    closed one): None if it is still running after 2 s (its configuration was accepted),
    else its stderr."""
    env = {k: e["value"] for k, e in container_env(deployment).items() if "value" in e}
    env |= (secrets or {}) | local | {"PATH": os.environ["PATH"]}
    proc = subprocess.Popen([str(binary)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=2)
        return f"exit {proc.returncode}: {err.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.communicate()
        return None


def lag_checks(args, rendered):
    """sluice-lag: one replica watching the processors' group and the extra ones, settings the
    real binary accepts (and a bad one it refuses, naming it), and nothing of it when off."""
    lag = find(rendered.get("defaults", []), "Deployment", "-lag")
    env = container_env(lag[0]) if lag else {}
    check(len(lag) == 1 and lag[0]["spec"]["replicas"] == 1 and env.get("SLUICE_LAG_GROUPS", {}).get("value") == "sluice-processor"
          and "SLUICE_LAG_KAFKA_PROPERTIES" not in env,
          "sluice-lag: one replica (one poller per cluster) watching the processors' group, plaintext by default")
    custom = find(render(args, "--set", "lag.extraGroups={audit,billing}", "--set", "lag.groupsRegex=sluice-.*",
                         "--set", "lag.groupSettings.sluice-processor.stall_after_ms=30000",
                         "--set", "lag.groupSettings.sluice-processor.read_committed=true",
                         "--set", "lag.groupSettings.audit.warn_lag=5000"), "Deployment", "-lag")[0]
    values = {k: e.get("value") for k, e in container_env(custom).items()}
    check(values.get("SLUICE_LAG_GROUPS") == "sluice-processor,audit,billing" and values.get("SLUICE_LAG_GROUPS_REGEX") == "sluice-.*"
          and values.get("SLUICE_LAG_GROUP_SETTINGS") == "audit: warn_lag=5000; sluice-processor: read_committed=true stall_after_ms=30000",
          f"sluice-lag: extra groups, a pattern and per-group thresholds reach its env ({values.get('SLUICE_LAG_GROUP_SETTINGS')})")
    binary = sluice_lag_binary()
    check(binary.exists(), f"the sluice-lag binary is built ({binary})")
    if binary.exists():
        for name, deployment in [("defaults", lag[0]), ("groups and settings", custom)]:
            complaint = run_with_chart_env(binary, deployment)
            check(complaint is None, f"the real sluice-lag accepts the chart's settings ({name}){': ' + complaint if complaint else ''}")
        bad = find(render(args, "--set", "lag.groupsRegex=sluice-("), "Deployment", "-lag")[0]
        complaint = run_with_chart_env(binary, bad) or ""
        check(complaint.startswith("exit 2") and "SLUICE_LAG_GROUPS_REGEX" in complaint,
              f"a bad lag.groupsRegex stops sluice-lag naming the setting ({complaint[:120]})")
    off = render(args, "--set", "lag.enabled=false", "--set", "processor.autoscaling.trigger=kafka")
    rules = find(off, "PrometheusRule")
    texts = json.dumps(rules)
    selected = find(off, "PodMonitor")[0]["spec"]["selector"]["matchExpressions"][0]["values"]
    check(not [o for o in off if o["metadata"]["name"].endswith("-lag")] and "lag" not in selected
          and "sluice_lag_" not in texts and "kafka_consumergroup" not in texts,
          "lag.enabled=false: no sluice-lag objects, no scrape of it, no rule reading its series")
    for setting, where in [("lag.env.BROKERS=x", "/lag/env"), ("lag.extraGroups={a\\,b}", "/lag/extraGroups/0"),
                           ("lag.groupSettings.g.stall_after=1", "stall_after"), ("lag.pollIntervalMs=10", "/lag/pollIntervalMs")]:
        try:
            render(args, "--set", setting)
            check(False, f"values.schema.json refuses {setting}")
        except RuntimeError as e:
            check(where in str(e), f"values.schema.json refuses {setting}, naming {where}")


def external_scaler_checks(args, rendered):
    """Sluice's scaler: per trigger, KEDA's external trigger at sluice-lag's Service, metadata the
    real sluice-lag accepts, the scaler served there and admitted only from KEDA's operator;
    mutual TLS from one Secret; refused without sluice-lag or with a bad trigger."""
    binary = sluice_lag_binary()
    keda_from = yaml.safe_load((CHART / "values.yaml").read_text())["networkPolicy"]["kedaFrom"]
    for scenario, trigger in [("defaults", "timeLag"), ("trigger-offsetlag-tls", "offsetLag"),
                              ("trigger-timelag", "timeLag"), ("trigger-draintime", "drainTime")]:
        objects = rendered.get(scenario, [])
        scaled = find(objects, "ScaledObject")
        t = scaled[0]["spec"]["triggers"][0] if scaled else {}
        meta = t.get("metadata", {})
        service = find(objects, "Service", "-lag")
        lag = find(objects, "Deployment", "-lag")
        env = {k: e.get("value") for k, e in container_env(lag[0]).items()} if lag else {}
        port = service[0]["spec"]["ports"][0]["port"] if service else None
        check(t.get("type") == "external" and meta.get("trigger") == trigger and meta.get("group") == "sluice-processor"
              and bool(service) and meta.get("scalerAddress") == f"{service[0]['metadata']['name']}.default.svc:{port}"
              and env.get("SLUICE_LAG_SCALER_LISTEN") == f"0.0.0.0:{port}",
              f"{scenario}: KEDA's external trigger ({trigger}) points at sluice-lag's Service, whose pod serves the scaler")
        if binary.exists() and lag:
            out = subprocess.run([str(binary), "check-trigger", *[f"{k}={v}" for k, v in meta.items()]],
                                 capture_output=True, text=True)
            check(out.returncode == 0, f"{scenario}: the real sluice-lag reads the trigger's metadata ({(out.stdout or out.stderr).strip()})")
            if "SLUICE_LAG_SCALER_TLS_CERT" not in env:
                local = LAG_LOCAL | {"SLUICE_LAG_SCALER_LISTEN": "127.0.0.1:0"}
                complaint = run_with_chart_env(binary, lag[0], local)
                check(complaint is None, f"{scenario}: the real sluice-lag accepts the chart's settings{': ' + complaint if complaint else ''}")
        policies = find(objects, "NetworkPolicy", "-lag")
        ingress = policies[0]["spec"]["ingress"] if policies else []
        admitted = [r for r in ingress if any(p["port"] == port for p in r["ports"])]
        check(len(admitted) == 1 and admitted[0].get("from") == keda_from,
              f"{scenario}: the NetworkPolicy admits only KEDA's operator (networkPolicy.kedaFrom) to the scaler port")
    tls = rendered.get("trigger-offsetlag-tls", [])
    auth = find(tls, "TriggerAuthentication", "-scaler")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth[0]["spec"]["secretTargetRef"]} if auth else {}
    secret = "sluice-lag-scaler-tls"
    trigger = find(tls, "ScaledObject")[0]["spec"]["triggers"][0] if find(tls, "ScaledObject") else {}
    lag = find(tls, "Deployment", "-lag")
    env = {k: e.get("value") for k, e in container_env(lag[0]).items()} if lag else {}
    volumes = lag[0]["spec"]["template"]["spec"].get("volumes", []) if lag else []
    check(refs == {"caCert": (secret, "ca.crt"), "tlsClientCert": (secret, "tls.crt"), "tlsClientKey": (secret, "tls.key")}
          and trigger.get("metadata", {}).get("enableTLS") == "true"
          and trigger.get("authenticationRef", {}).get("name") == auth[0]["metadata"]["name"]
          and env.get("SLUICE_LAG_SCALER_TLS_CLIENT_CA", "").endswith("/ca.crt")
          and any(v.get("secret", {}).get("secretName") == secret for v in volumes),
          "lag.scaler.tls.secret: mutual TLS, sluice-lag serving with the Secret's certificate and CA, KEDA presenting the same Secret's")
    ahead = find(render(args, "--set", "processor.autoscaling.scaleAhead=true"), "ScaledObject")[0]["spec"]["triggers"][0]["metadata"]
    out = subprocess.run([str(binary), "check-trigger", *[f"{k}={v}" for k, v in ahead.items()]], capture_output=True, text=True)
    check(ahead.get("leadSeconds") == "30" and out.returncode == 0 and "leadSeconds" not in
          find(rendered.get("defaults", []), "ScaledObject")[0]["spec"]["triggers"][0]["metadata"],
          f"scaleAhead: the trigger sizes podStartupSeconds (30) ahead, and the real sluice-lag reads it; off by default ({(out.stdout or out.stderr).strip()[:100]})")
    kafka = rendered.get("trigger-kafka", [])
    check(not find(kafka, "Service", "-lag") and "SLUICE_LAG_SCALER_LISTEN" not in container_env(find(kafka, "Deployment", "-lag")[0]),
          "trigger kafka: no scaler served, no Service for it")
    try:
        render(args, "--set", "processor.autoscaling.trigger=timeLag", "--set", "lag.enabled=false")
        check(False, "a trigger of Sluice's scaler without sluice-lag is refused")
    except RuntimeError as e:
        check("lag.enabled" in str(e), f"a trigger of Sluice's scaler without sluice-lag is refused, naming lag.enabled")
    for setting, where in [("processor.autoscaling.trigger=cpu", "trigger"),
                           ("processor.autoscaling.timeLag.targetSeconds=0", "targetSeconds"),
                           ("lag.scaler.port=0", "port")]:
        try:
            render(args, "--set", setting)
            check(False, f"values.schema.json refuses {setting}")
        except RuntimeError as e:
            check(where in str(e), f"values.schema.json refuses {setting}, naming {where}")


def dockerfile_stages(text):
    """The stages of a Dockerfile: name → (FROM, the stage's lines), with ARG defaults applied."""
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    stages, name = {}, None
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        head = re.match(r"^FROM (\S+)(?: AS (\S+))?$", line)
        if head:
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), head.group(1))
            name = head.group(2) or f"stage{len(stages)}"
            stages[name] = (base, [])
        elif name and line.strip() and not line.startswith("#"):
            stages[name][1].append(line.strip())
    return stages


def dockerfile_checks(objects):
    """Every image the chart runs is a target of deploy/images/Dockerfile (the one definition
    users build with Docker and deploy/images/build.sh builds here): on the runtime stage,
    distroless nonroot by default, as the chart's user, exposing the chart's ports, running the
    workspace binary the source stage builds. (The built images' own configs are checked against
    the chart on the cluster: test_cluster.py.)"""
    root = CHART.parent.parent
    path = root / "deploy" / "images" / "Dockerfile"
    stages = dockerfile_stages(path.read_text())
    runtime_base, runtime = stages.get("runtime", ("", []))
    check(runtime_base.startswith("gcr.io/distroless/") and runtime_base.endswith(":nonroot"),
          f"{path.name}: the runtime stage is distroless nonroot by default ({runtime_base})")
    source = " ".join(stages.get("source", ("", []))[1])
    bins = {}
    for manifest in root.glob("services/*/Cargo.toml"):
        cargo = tomllib.loads(manifest.read_text())
        for b in cargo.get("bin", []):
            bins[b["name"]] = cargo["package"]["name"]
    for deployment in find(objects, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        for c in pod["containers"]:
            image = c["image"].rsplit("/", 1)[1].split(":")[0]
            target = image.removeprefix("sluice-")
            base, lines = stages.get(target, (None, []))
            if not check(base == "runtime", f"{image}: a target {target} of deploy/images/Dockerfile on the runtime stage"):
                continue
            user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
            check(f"USER {user}" in runtime, f"{target}: USER {user}, the chart's runAsUser/runAsGroup")
            exposed = {int(p) for line in lines if line.startswith("EXPOSE ") for p in line.split()[1:]}
            ports = {p["containerPort"] for p in c.get("ports", [])}
            check(ports and ports <= exposed, f"{target}: EXPOSEs the chart's ports {sorted(ports)} ({sorted(exposed)})")
            check(f'ENTRYPOINT ["/usr/local/bin/{image}"]' in lines
                  and f"COPY --from=binaries /out/{image} /usr/local/bin/{image}" in lines,
                  f"{target}: runs /usr/local/bin/{image}, the binaries stage's")
            built = [b for b in re.findall(r"--bin (\S+)", source)
                     if f"target/release/{b} /out/{image}" in source
                     or (f"/out/{image}" not in source and b == image and f"target/release/{b}" in source)]
            check(len(built) == 1 and built[0] in bins and f"-p {bins[built[0]]}" in source,
                  f"{target}: the source stage builds the workspace binary it runs ({built})")


def ops_job_checks(args, rendered, crd_schemas):
    """sluice-ops as a Job: off by default; when on, in the processor image (whose Dockerfile
    target carries the binary), with the processors' Kafka settings, credentials and TLS
    files and Redis, and the chain node's URL (rebuild), run once, egress to what the
    processors reach; an empty or unknown command refused at render.
    Not a ci/ scenario: a cluster install would run the Job against that file's made-up
    brokers (test_pods.py runs it against the real one)."""
    check(not find(rendered.get("defaults", []), "Job"), "ops.job: no Job by default")
    on = ["-f", str(CHART / "ci" / "sasl-tls-values.yaml"), "--set", "ops.job.enabled=true",
          "--set-json", 'ops.job.args=["dlq","redrive","--key","pool-1"]', "--set", "ops.job.json=true"]
    lint = helm(args, "lint", str(CHART), "--strict", *on)
    check(lint.returncode == 0, "ops.job: helm lint --strict" + ("" if lint.returncode == 0 else f"\n{lint.stdout}{lint.stderr}"))
    objects = render(args, *on)
    validate(args, crd_schemas, "ops.job", objects)
    jobs, processor = find(objects, "Job", "-ops-1"), find(objects, "Deployment", "-processor")
    if not check(len(jobs) == 1 and len(processor) == 1, "ops.job.enabled: one Job, named by the release revision"):
        return
    job = jobs[0]
    pod, deployment_pod = job["spec"]["template"]["spec"], processor[0]["spec"]["template"]["spec"]
    c, p = pod["containers"][0], deployment_pod["containers"][0]
    check(c["image"] == p["image"] and c["command"] == ["/usr/local/bin/sluice-ops"]
          and c["args"] == ["dlq", "redrive", "--key", "pool-1", "--json"],
          f"ops.job: sluice-ops in the processor's image with the args given ({c['image']} {c.get('args')})")
    env, penv = {e["name"]: e for e in c["env"]}, container_env(processor[0])
    shared = ["SLUICE_PROCESSOR_KAFKA_BROKERS", "SLUICE_PROCESSOR_GROUP_ID", "SLUICE_PROCESSOR_INPUT_TOPIC",
              "SLUICE_PROCESSOR_DLQ_TOPIC", "SLUICE_PROCESSOR_KAFKA_SASL_USERNAME", "SLUICE_PROCESSOR_KAFKA_SASL_PASSWORD",
              "SLUICE_PROCESSOR_REDIS_URL", "SLUICE_PROCESSOR_REDIS_PREFIX"]
    check(all(k in env and env.get(k) == penv.get(k) for k in shared)
          and "ssl.ca.location" in env["SLUICE_PROCESSOR_KAFKA_PROPERTIES"]["value"]
          and c.get("volumeMounts") == p.get("volumeMounts") and pod.get("volumes") == deployment_pod.get("volumes"),
          "ops.job: the processors' brokers, group, topics, SASL credentials, TLS files and Redis")
    scheduler_env = container_env(find(objects, "Deployment", "-scheduler")[0])
    check(env.get("SLUICE_OPS_CHAIN_URL", {}).get("value") == scheduler_env["SLUICE_SCHEDULER_CHAIN_URL"]["value"],
          "ops.job: the chain node the scheduler queries (rebuild)")
    check(job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
          and pod["securityContext"].get("runAsNonRoot") is True
          and c["securityContext"].get("readOnlyRootFilesystem") is True,
          "ops.job: runs once (no blind retry of a write), non-root, read-only root")
    def egress(component):
        policy = find(objects, "NetworkPolicy", f"-{component}")
        return policy, ({q["port"] for rule in policy[0]["spec"]["egress"] for q in rule["ports"]} if policy else set())
    (policy, outs), (_, processor_outs) = egress("ops"), egress("processor")
    check(len(policy) == 1 and policy[0]["spec"]["ingress"] == [] and outs == processor_outs and 9093 in outs,
          f"ops.job: a NetworkPolicy with nothing in and only DNS, Kafka, Redis and the chain node out ({sorted(outs)})")
    stages = dockerfile_stages((CHART.parent.parent / "deploy" / "images" / "Dockerfile").read_text())
    source, target = " ".join(stages["source"][1]), stages["processor"][1]
    check("--bin sluice-ops" in source and "target/release/sluice-ops" in source
          and "COPY --from=binaries /out/sluice-ops /usr/local/bin/sluice-ops" in target,
          "ops.job: the processor image carries /usr/local/bin/sluice-ops")
    for values, says in [('ops.job.args=[]', "ops.job.args is empty"), ('ops.job.args=["rebalance"]', "knows the commands")]:
        try:
            render(args, "--set", "ops.job.enabled=true", "--set-json", values)
            check(False, f"ops.job refuses {values}")
        except RuntimeError as e:
            check(says in str(e), f"ops.job refuses {values}: {str(e).splitlines()[0][-110:]}")
    try:
        render(args, "--set", "ops.job.command=dlq")
        check(False, "values.schema.json refuses ops.job.command")
    except RuntimeError as e:
        check("/ops/job" in str(e), "values.schema.json refuses ops.job.command, naming /ops/job")


def python_patterns(schema):
    """The CRD schema with its Go (RE2) patterns in Python's dialect: RE2 takes inline
    flags after `^` (prometheus-operator's `^(?i)(abort|warn)?$`), Python only first."""
    if isinstance(schema, dict):
        return {k: (re.sub(r"^\^\(\?(\w+)\)", r"(?\1)^", v) if k == "pattern" and isinstance(v, str) else python_patterns(v))
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [python_patterns(v) for v in schema]
    return schema


def promql_parses(args, exprs):
    """`promtool check rules` on the expressions as recording rules: None, or its complaint."""
    rules = {"groups": [{"name": "check", "rules": [{"record": f"check_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(rules, f)
        f.flush()
        out = subprocess.run([args.promtool, "check", "rules", f.name], capture_output=True, text=True)
    return None if out.returncode == 0 else (out.stdout + out.stderr).strip()


def metric_names(text):
    """Every Sluice (kafka_exporter-named, process_*) metric name and every Sluice recorded
    series a rule or a dashboard query mentions."""
    return set(re.findall(r"\b(?:(?:sluice|kafka|process)_[a-z0-9_]+|sluice:[a-z0-9_:]+)", text))


def rules_checks(args, rule):
    """The rules: deploy/ holds what the chart renders, promtool accepts them, each alert has
    a unit test where it fires and one where it does not, and links its runbook."""
    rules_file = DEPLOY / "prometheus" / "sluice-rules.yaml"
    deployed = yaml.safe_load(rules_file.read_text())
    unscoped = find(render(args, "--set", "monitoring.alerts.releaseNamespaceOnly=false"), "PrometheusRule")
    check(deployed == unscoped[0]["spec"],
          "the rules in deploy/prometheus are the chart's PrometheusRule (without the release-namespace matcher)")
    exprs = [r["expr"] for g in rule[0]["spec"]["groups"] for r in g["rules"]]
    bare = [m.group(0) for e in exprs for m in re.finditer(r"\b(?:sluice|kafka)_[a-z0-9_]+(?![a-z0-9_])(?!\{namespace=\"default\")", e)]
    check(not bare and exprs, f"in the chart, every selector of every rule matches the release's namespace (not: {bare})")
    out = subprocess.run([args.promtool, "check", "rules", str(rules_file)], capture_output=True, text=True)
    check(out.returncode == 0, "promtool check rules deploy/prometheus/sluice-rules.yaml" + ("" if out.returncode == 0 else f"\n{out.stdout}{out.stderr}"))
    tests_file = DEPLOY / "prometheus" / "sluice-rules.test.yaml"
    out = subprocess.run([args.promtool, "test", "rules", tests_file.name], capture_output=True, text=True, cwd=tests_file.parent)
    check(out.returncode == 0, "promtool test rules: every alert's unit tests pass" + ("" if out.returncode == 0 else f"\n{out.stdout}{out.stderr}"))
    alerts = {r["alert"] for g in deployed["groups"] for r in g["rules"] if "alert" in r}
    cases = [c for t in yaml.safe_load(tests_file.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    for alert in sorted(alerts):
        fires = any(c["alertname"] == alert and c.get("exp_alerts") for c in cases)
        quiet = any(c["alertname"] == alert and not c.get("exp_alerts") for c in cases)
        check(fires and quiet, f"{alert} has a unit test where it fires and one where it does not")
    wanted = {"SluiceConsumerLagHigh", "SluiceTimeLagBudgetBurn", "SluiceLagPartitionStalled", "SluiceScalingBlocked", "SluiceLagRetentionHeadroomLow",
              "SluiceLagRecordsLost", "SluiceProcessorsAbsent", "SluiceLagDown", "SluiceInputPartitionsDrift",
              "SluiceProcessorNotReady", "SluiceDeadLettersHigh", "SluicePartitionPaused",
              "SluiceSchedulerJobNoSuccess", "SluiceSchedulerStaleWrites", "SluiceSchedulerDown",
              "SluiceIngestCursorLost", "SluiceStateStoreReplaced", "SluiceFreshnessBudgetBurn", "SluiceCostPerRecordRising"}
    check(wanted <= alerts, f"the alerts cover lag, time lag, stalls, retention, absent processors, sluice-lag itself, readiness, dead letters, paused partitions, job success and stale writes ({sorted(wanted - alerts)} missing)")
    lag_from_processors = sorted(m for m in metric_names(rules_file.read_text()) if m.startswith("sluice_processor_") and "lag" in m)
    check(not lag_from_processors, f"no rule reads a processor's own lag ({lag_from_processors})")
    runbook_checks(deployed)

    # Per-job windows: each job gets its own rule, and the default rule leaves it out.
    per_job = render(args, "--show-only", "templates/monitoring.yaml",
                     "--set", "monitoring.alerts.schedulerJobNoSuccess.windowSecondsByJob.pool-reconcile=900")
    exprs = [r["expr"] for o in per_job if o["kind"] == "PrometheusRule" for g in o["spec"]["groups"] for r in g["rules"]
             if r.get("alert") == "SluiceSchedulerJobNoSuccess"]
    check(len(exprs) == 2 and 'job_name!~"pool-reconcile"' in exprs[0] and "> 1800" in exprs[0]
          and 'job_name="pool-reconcile"' in exprs[1] and "> 900" in exprs[1] and promql_parses(args, exprs) is None,
          "a per-job success window gets its own rule, and the default rule leaves that job out")
    return deployed


def monitoring_checks(args, rendered):
    on, off = rendered.get("defaults", []), rendered.get("monitoring-off", [])
    pod_monitor, rule = find(on, "PodMonitor"), find(on, "PrometheusRule")
    dashboard = find(on, "ConfigMap", "-dashboard")
    check(len(pod_monitor) == 1 and len(rule) == 1 and len(dashboard) == 1,
          "monitoring on: a PodMonitor, a PrometheusRule and a dashboard ConfigMap")
    check(not find(off, "PodMonitor") and not find(off, "PrometheusRule") and not find(off, "ConfigMap", "-dashboard"),
          "monitoring off: none of them")
    if not (pod_monitor and rule and dashboard):
        return
    endpoints = pod_monitor[0]["spec"]["podMetricsEndpoints"]
    selected = pod_monitor[0]["spec"]["selector"]["matchExpressions"][0]["values"]
    admin_ports = {c["name"]: {p["name"] for p in c["ports"]} for d in find(on, "Deployment")
                   for c in d["spec"]["template"]["spec"]["containers"] if c["name"] != "chainsim"}
    check([e["port"] for e in endpoints] == ["admin"] and all("admin" in ports for ports in admin_ports.values())
          and sorted(selected) == sorted(admin_ports),
          f"the PodMonitor scrapes the admin port of every workload ({sorted(admin_ports)})")

    deployed = rules_checks(args, rule)

    # The dashboard: the ConfigMap carries deploy/'s JSON for the sidecar, and every query parses.
    source = (CHART / "files" / "dashboards" / "sluice.json").read_text()
    model = json.loads(source)
    check(dashboard[0]["data"].get("sluice.json") == source and dashboard[0]["metadata"]["labels"].get("grafana_dashboard") == "1",
          "the dashboard ConfigMap carries the dashboard JSON, labelled for the Grafana sidecar")
    queries = [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
    titles = " / ".join(p["title"] for p in model["panels"])
    for needed in ["Time lag per group", "Time lag per partition", "lag per partition", "Time to drain", "Retention headroom",
                   "by status", "Records per second", "p99", "Processors", "Runs by job", "Dead-lettered"]:
        check(needed.lower() in titles.lower(), f"the dashboard shows {needed!r}")
    promql = [q.replace("$namespace", "x").replace("$consumergroup", ".+").replace("$swaps_topic", ".+")
              .replace("$__rate_interval", "5m") for q in queries]
    complaint = promql_parses(args, promql)
    check(complaint is None, f"all {len(queries)} dashboard queries are valid PromQL" + (f": {complaint}" if complaint else ""))

    # Every metric name the rules and the dashboard use is exported by a running service.
    scrapes = list(pathlib.Path(args.scrapes).glob("*.prom"))
    exported = set()
    for scrape in scrapes:
        exported |= {line.split("{")[0].split(" ")[0] for line in scrape.read_text().splitlines() if line and not line.startswith("#")}
    kinds = {s.name.split("-")[0] for s in scrapes}
    check({"processor", "scheduler", "ingest", "lag"} <= kinds, f"scrapes of running processors, schedulers, ingests and sluice-lag ({sorted(s.name for s in scrapes)})")
    # A series only present at times (a retention headroom while there is lag) counts when
    # the demo's Prometheus stored it at any point.
    exported |= set(prometheus_api(args, "label/__name__/values").get("data", []))
    rule_exprs = [r["expr"] for g in deployed["groups"] for r in g["rules"]]
    used = metric_names(" ".join(rule_exprs)) | metric_names(" ".join(queries))
    missing = sorted(used - exported)
    check(used and not missing, f"the {len(used)} metric names the rules and the dashboard use are all exported (missing: {missing})")


def prometheus_api(args, path, **params):
    url = f"{args.prometheus}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:  # a bad query: the body says why
        return json.load(e)


def prometheus_checks(args):
    """A real Prometheus scraped the running services (the demo smoke) with deploy/'s rules:
    every rule evaluated without error, and every dashboard query runs against the real
    series (a vector-matching error only shows at evaluation) and most return data."""
    groups = prometheus_api(args, "rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    deployed = yaml.safe_load((DEPLOY / "prometheus" / "sluice-rules.yaml").read_text())
    expected = sum(len(g["rules"]) for g in deployed["groups"])
    unhealthy = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    check(len(rules) == expected and not unhealthy,
          f"Prometheus evaluated all {expected} rules against the services' series without error ({len(rules)} loaded; unhealthy: {unhealthy})")
    start, end = args.since, time.time()
    up = prometheus_api(args, "query_range", query="count by (app_kubernetes_io_component) (up == 1)",
                        start=start, end=end, step=1)
    scraped = {series["metric"].get("app_kubernetes_io_component") for series in up["data"]["result"]}
    check(scraped == {"processor", "scheduler", "ingest", "lag"}, f"Prometheus scraped the running services ({sorted(map(str, scraped))})")
    fired = prometheus_api(args, "query_range", query='ALERTS{alertstate="firing"}', start=start, end=end, step=1)
    check(fired.get("status") == "success" and not fired["data"]["result"],
          f"no alert fired while the demo ran healthy ({[r['metric'].get('alertname') for r in fired['data']['result']]})")
    model = json.loads((CHART / "files" / "dashboards" / "sluice.json").read_text())
    empty, errors = [], []
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            query = (target["expr"].replace("$namespace", "sluice-demo").replace("$consumergroup", ".+")
                     .replace("$swaps_topic", ".+")
                     .replace("$__rate_interval", "10s"))
            out = prometheus_api(args, "query_range", query=query, start=start, end=end, step=2)
            if out.get("status") != "success":
                errors.append(f"{panel['title']}: {out.get('error')}")
            elif not any(series["values"] for series in out["data"]["result"]):
                empty.append(f"{panel['title']} [{target['refId']}]")
    queries = sum(len(p.get("targets", [])) for p in model["panels"])
    check(not errors, f"all {queries} dashboard queries run on the real Prometheus ({errors})")
    check(not empty, f"every one of the {queries} dashboard queries has data from the demo smoke (empty: {empty})")


def crd_schemas_from(args):
    """The openAPIV3Schema of every CRD in the --crds folders, by (apiVersion, kind)."""
    crd_schemas = {}
    for folder in args.crds:
        for path in pathlib.Path(folder).glob("*.yaml"):
            crd = yaml.safe_load(path.read_text())
            for version in crd["spec"]["versions"]:
                key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                crd_schemas[key] = python_patterns(version["schema"]["openAPIV3Schema"])
    for kind in [("keda.sh/v1alpha1", "ScaledObject"), ("keda.sh/v1alpha1", "TriggerAuthentication"),
                 ("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")]:
        check(kind in crd_schemas, f"the CRD schema of {kind[1]} is read from {args.crds}")
    return crd_schemas


def kube_version_checks(args):
    """Chart.yaml's kubeVersion is what the objects are validated against: the oldest version
    it claims renders, the one before it is refused."""
    claimed = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    oldest = args.kube_versions[0]
    major, minor, _ = (int(x) for x in oldest.split("."))
    check(claimed == f">={oldest}-0", f"Chart.yaml claims kubeVersion {claimed}: the schemas validated start at {oldest}")
    out = helm(args, "template", "sluice", str(CHART), "--kube-version", f"{major}.{minor - 1}.0")
    check(out.returncode != 0 and "kubeVersion" in out.stderr,
          f"Kubernetes {major}.{minor - 1} is refused by the chart's kubeVersion ({out.stderr.strip()[:120]})")


def render_scenarios(args, crd_schemas):
    """Lint and render the defaults and every ci/*-values.yaml; validate every object."""
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
        validate(args, crd_schemas, scenario, objects)
        workload_checks(scenario, objects)
        scaled = find(objects, "ScaledObject")
        check(all(s["spec"]["scaleTargetRef"]["name"].endswith("-processor") for s in scaled),
              f"{scenario}: the scheduler and the ingest are never KEDA targets")
    return rendered


def validate(args, crd_schemas, scenario, objects):
    """Every object against its schema: a CRD's, or the Kubernetes API's (strict)."""
    for obj in objects:
        what = f"{scenario}: {obj['kind']} {obj['metadata']['name']} is valid"
        key = (obj["apiVersion"], obj["kind"])
        try:
            if key in crd_schemas:
                jsonschema.validate(obj, crd_schemas[key])
                check(True, what + f" ({key[0]} CRD schema)")
            else:
                # The oldest Kubernetes the chart claims (Chart.yaml's kubeVersion) and the
                # newest it is run on (test.sh kubernetes): the objects fit both.
                for version in args.kube_versions:
                    kubernetes_validate.validate(obj, version, True)
                check(True, what + f" (Kubernetes {' and '.join(args.kube_versions)}, strict)")
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
            check(False, f"{what}: {str(e).splitlines()[0]}")
        except kubernetes_validate.SchemaNotFoundError as e:
            check(False, f"{what}: no schema ({e})")


def keda_checks(args, rendered):
    """KEDA on: a ScaledObject on the processor, sized by the values; KEDA off: replicas."""
    on, off = rendered.get("trigger-kafka", []), rendered.get("keda-off", [])
    default = find(rendered.get("defaults", []), "ScaledObject")
    check(len(default) == 1 and default[0]["spec"]["triggers"][0]["type"] == "external"
          and default[0]["spec"]["triggers"][0]["metadata"].get("trigger") == "timeLag",
          "defaults: sluice-lag's scaler keeps the time lag under its target (trigger timeLag)")
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
        check(meta.get("ensureEvenDistributionOfPartitions") == "true",
              "KEDA on: the kafka trigger asks only for divisors of the partition count (ensureEvenDistributionOfPartitions)")
        check(scaled[0]["spec"]["maxReplicaCount"] <= 12, "KEDA on: maxReplicaCount within the partition count")
        check("behavior" in scaled[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"],
              "KEDA on: the HPA behavior comes from the values")
        # One processor short of P partitions the capped lag is P/(P-1) of the target: the
        # scale-up tolerance must be below 1/(P-1), or the HPA stops there (keda#2908).
        up = scaled[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
        partitions = scaled[0]["spec"]["maxReplicaCount"]
        check(float(up.get("tolerance", "0.1")) * (partitions - 1) < 1,
              f"KEDA on: the scale-up tolerance ({up.get('tolerance')}) lets the HPA reach all {partitions} partitions")
        check(scaled[0]["spec"]["fallback"].get("behavior") == "currentReplicasIfHigher",
              "KEDA on: an unreadable lag never scales the processors down (fallback currentReplicasIfHigher)")
    off_processor = find(off, "Deployment", "-processor")
    check(len(off_processor) == 1 and off_processor[0]["spec"].get("replicas") == 3 and not find(off, "ScaledObject"),
          "KEDA off: replicas set from the values, no ScaledObject")


FORMER_BEHAVIOR = {"processor": {"autoscaling": {"behavior": {
    "scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                             {"type": "Percent", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}}}}}


def rendered_notes(args, *extra):
    """NOTES.txt as `helm install` prints it (helm template leaves it out): a copy of the chart
    in which a template renders it through `tpl`."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = pathlib.Path(tmp) / "sluice"
        subprocess.run(["cp", "-r", str(CHART), str(chart)], check=True)
        (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
        (chart / "templates" / "notes-rendered.yaml").write_text('notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n')
        out = helm(args, "template", "sluice", str(chart), "--kube-version", args.kube_versions[0],
                   "--show-only", "templates/notes-rendered.yaml", *extra)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip())
        return yaml.safe_load(out.stdout)["notes"]


def replica_count_checks(args, rendered):
    """Every count the HPA can apply relieves a processor (templates/_replicas.tpl): the rendered
    behavior is the one `sluice-lag simulate` derives and replays (services/scaling/tests/
    useful_counts.rs replays it for every trigger); a behavior, bound or fallback that could
    land on another count is refused, naming it, unless allowed, and then NOTES lists the counts."""
    binary = sluice_lag_binary()
    for scenario, objects in rendered.items():
        scaled = find(objects, "ScaledObject")
        if not scaled:
            continue
        behavior = scaled[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"].get("behavior")
        files = ["--values", str(CHART / "values.yaml")]
        if scenario != "defaults":
            files += ["--values", str(CHART / "ci" / f"{scenario}-values.yaml")]
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "simulation.json"
            run = subprocess.run([str(binary), "simulate", *files, "--trace", "synthetic:base=1000,length=60",
                                  "--startup", "5", "--json", str(out)], capture_output=True, text=True)
            derived = json.loads(out.read_text())["runs"][0]["behavior"] if run.returncode == 0 else run.stderr
        check(derived == behavior, f"{scenario}: the rendered HPA behavior is the one sluice-lag simulate replays"
              + ("" if derived == behavior else f" (rendered {behavior}, simulate {derived})"))
    up = find(rendered.get("defaults", []), "ScaledObject")[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
    check(up["policies"] == [{"type": "Pods", "value": 12, "periodSeconds": 15}] and up["tolerance"] == "0.05",
          f"defaults: scale-up policies derived from kafka.partitions (12), the values' tolerance kept ({up})")
    wide = find(render(args, "--set", "kafka.partitions=30", "--set", "processor.autoscaling.maxReplicas=30"), "ScaledObject")
    check(wide[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["policies"][0]["value"] == 30,
          "kafka.partitions=30: the derived scale-up policy follows it")

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as former:
        yaml.safe_dump(FORMER_BEHAVIOR, former)
        former.flush()
        for what, extra, named in [
            ("the chart's former behavior (+4 pods or +100 % per 15 s, -2 per 60 s)", ["-f", former.name],
             ["behavior.scaleUp policy Pods 4 per 15 s can land on 5 (from 1)",
              "behavior.scaleUp policy Percent 100 % per 15 s can land on 8 (from 4)",
              "behavior.scaleDown policy Pods 2 per 60 s can land on 10 (from 12)"]),
            ("maxReplicas 10 and fallback.replicas 5 of 12 partitions",
             ["--set", "processor.autoscaling.maxReplicas=10", "--set", "processor.autoscaling.fallback.replicas=5"],
             ["maxReplicas is 10", "fallback.replicas is 5"]),
            ("behavior: null (the HPA's own limit, max(2 × current, 4))", ["--set", "processor.autoscaling.behavior=null"],
             ["can land on 8 (from 4)"]),
            ("the kafka trigger without ensureEvenDistributionOfPartitions",
             ["--set", "processor.autoscaling.trigger=kafka", "--set", "processor.autoscaling.ensureEvenDistributionOfPartitions=false"],
             ["ensureEvenDistributionOfPartitions is false"]),
        ]:
            try:
                render(args, *extra)
                check(False, f"{what}: refused at render time")
            except RuntimeError as e:
                missing = [n for n in named if n not in str(e)]
                check(not missing and "allowUselessReplicaCounts" in str(e) and "1, 2, 3, 4, 6, 12" in str(e),
                      f"{what}: refused at render time, naming why and the way out ({str(e)[:90]}…; missing {missing})")
        allow = ["-f", former.name, "--set", "processor.autoscaling.allowUselessReplicaCounts=true"]
        policies = find(render(args, *allow), "ScaledObject")[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["policies"]
        check(len(policies) == 2, f"…unless explicitly allowed: the given policies are rendered ({policies})")
        notes = rendered_notes(args, *allow)
        check("the HPA can apply 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12\nprocessors" in notes
              and "can land on 5 (from 1)" in notes,
              f"…and NOTES lists the counts it can reach and why ({notes[notes.find('allowUseless'):][:200]!r})")
    halving = ["--set-json", 'processor.autoscaling.behavior.scaleDown.policies=[{"type":"Percent","value":50,"periodSeconds":60}]']
    check("allowUselessReplicaCounts" not in rendered_notes(args, *halving),
          "a behavior of the user's that lands only on useful counts (scale-down by half, 12 partitions) is accepted")
    nine = halving + ["--set", "kafka.partitions=9", "--set", "processor.autoscaling.maxReplicas=9"]
    try:
        render(args, *nine)
        check(False, "the same halving with 9 partitions (9 → 4) is refused")
    except RuntimeError as e:
        check("can land on 4 (from 9)" in str(e), f"the same halving with 9 partitions (9 → 4) is refused ({str(e)[-160:]})")


def workload_count_checks(rendered):
    """Replicas, disruption budgets and network policies per workload."""
    on = rendered.get("defaults", [])
    scheduler = find(on, "Deployment", "-scheduler")
    check(len(scheduler) == 1 and scheduler[0]["spec"]["replicas"] == 2, "the scheduler runs 2 replicas by default")
    ingest = find(on, "Deployment", "-ingest")
    check(len(ingest) == 1 and ingest[0]["spec"]["replicas"] == 2, "the ingest runs an active/standby pair")
    budgets = sorted(p["metadata"]["name"].rsplit("-", 1)[1] for p in find(on, "PodDisruptionBudget"))
    check(budgets == ["ingest", "processor", "scheduler"],
          f"a PodDisruptionBudget per replicated workload, none for the single sluice-lag (it would block drains) ({budgets})")
    policies = {p["metadata"]["name"]: p for p in find(on, "NetworkPolicy")}
    check(len(policies) == 4, "a NetworkPolicy per workload")
    for name, policy in policies.items():
        ins = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        outs = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        component = name.rsplit("-", 1)[1]
        # sluice-lag: its admin port, and the external scaler KEDA calls (the default trigger is its).
        admin = {"processor": {9090}, "scheduler": {9091, 50061}, "ingest": {9094}, "lag": {9096, 9097}}[component]
        allowed = {53, 9092} if component == "lag" else {53, 9092, 6379, 50051}
        check(ins == admin and outs == allowed,
              f"{name}: in only {sorted(admin)}, out only {sorted(allowed)} ({sorted(ins)} / {sorted(outs)})")


def scheduler_admin_checks(args, rendered):
    """The scheduler's admin API is closed by default: the chart makes a random token Secret
    when none is named (the real scheduler refuses to start without a token), takes the
    user's Secret or an explicit insecure switch instead, and its NetworkPolicy admits the
    admin gRPC only from pods with the documented label."""
    on = rendered.get("defaults", [])
    secrets = [o for o in on if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-scheduler-admin")]
    scheduler = find(on, "Deployment", "-scheduler")[0]
    env = container_env(scheduler)
    ref = env.get("SLUICE_SCHEDULER_ADMIN_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
    token = base64.b64decode(secrets[0]["data"]["admin-token"]).decode() if secrets else ""
    again = [o for o in render(args) if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-scheduler-admin")]
    check(len(secrets) == 1 and ref == {"name": secrets[0]["metadata"]["name"], "key": "admin-token"}
          and re.fullmatch(r"[A-Za-z0-9]{32}", token) and again and again[0]["data"] != secrets[0]["data"]
          and "SLUICE_SCHEDULER_ADMIN_INSECURE" not in env,
          "scheduler: with no Secret named, the chart makes one with a random 32-character token, which the scheduler reads")
    mine = render(args, "--set", "scheduler.adminTokenSecret=mine")
    mine_ref = container_env(find(mine, "Deployment", "-scheduler")[0])["SLUICE_SCHEDULER_ADMIN_TOKEN"]["valueFrom"]
    check(mine_ref["secretKeyRef"]["name"] == "mine" and not [o for o in mine if o["kind"] == "Secret"],
          "scheduler.adminTokenSecret: the user's Secret, and none made by the chart")
    open_ = render(args, "--set", "scheduler.adminInsecure=true")
    open_env = container_env(find(open_, "Deployment", "-scheduler")[0])
    check(open_env.get("SLUICE_SCHEDULER_ADMIN_INSECURE", {}).get("value") == "true"
          and "SLUICE_SCHEDULER_ADMIN_TOKEN" not in open_env and not [o for o in open_ if o["kind"] == "Secret"],
          "scheduler.adminInsecure=true: an open admin API only when asked, and no token")
    policy = next(p for p in find(on, "NetworkPolicy") if p["metadata"]["name"].endswith("-scheduler"))
    grpc = [r for r in policy["spec"]["ingress"] if {p["port"] for p in r["ports"]} == {50061}]
    peers = grpc[0].get("from") if grpc else None
    check(peers == [{"podSelector": {"matchLabels": {"sluice.io/scheduler-admin": "true"}}}],
          f"the scheduler's admin gRPC admits only pods labelled sluice.io/scheduler-admin=true ({peers})")
    binary = workspace_binary("sluice-scheduler")
    check(binary.exists(), f"the sluice-scheduler binary is built ({binary})")
    if binary.exists():
        local = {"SLUICE_SCHEDULER_REDIS_URL": "redis://127.0.0.1:1", "SLUICE_SCHEDULER_ADMIN_LISTEN": "127.0.0.1:0",
                 "SLUICE_SCHEDULER_GRPC_LISTEN": "127.0.0.1:0", "SLUICE_SCHEDULER_INSTANCE_ID": "chart-check"}
        accepted = run_with_chart_env(binary, scheduler, local, {"SLUICE_SCHEDULER_ADMIN_TOKEN": token})
        check(accepted is None, f"the real scheduler starts with the chart's settings and token{': ' + accepted if accepted else ''}")
        refused = run_with_chart_env(binary, scheduler, local) or ""
        check(refused.startswith("exit 2") and "SLUICE_SCHEDULER_ADMIN_TOKEN is required" in refused,
              f"without the token the real scheduler does not start, naming it ({refused[:160]})")
        insecure = run_with_chart_env(binary, find(open_, "Deployment", "-scheduler")[0], local)
        check(insecure is None, f"the real scheduler starts open with adminInsecure=true{': ' + insecure if insecure else ''}")


def exactly_once_checks(args, rendered):
    """processor.exactlyOnce: off by default; on, the three settings reach the processors, and the
    real processor accepts them."""
    env = container_env(find(rendered.get("defaults", []), "Deployment", "-processor")[0])
    check(env["SLUICE_PROCESSOR_EXACTLY_ONCE"]["value"] == "false", "exactly-once outputs are off by default")
    on = render(args, "--set", "processor.exactlyOnce.enabled=true", "--set", "processor.exactlyOnce.transactionIntervalMs=50")
    processor = find(on, "Deployment", "-processor")[0]
    env = {k: e.get("value") for k, e in container_env(processor).items()}
    wanted = {"SLUICE_PROCESSOR_EXACTLY_ONCE": "true", "SLUICE_PROCESSOR_TRANSACTION_INTERVAL_MS": "50",
              "SLUICE_PROCESSOR_TRANSACTION_TIMEOUT_MS": "10000"}
    check(all(env.get(k) == v for k, v in wanted.items()), f"processor.exactlyOnce reaches the processors ({ {k: env.get(k) for k in wanted} })")
    binary = workspace_binary("processor")
    check(binary.exists(), f"the processor binary is built ({binary})")
    if binary.exists():
        local = {"SLUICE_PROCESSOR_KAFKA_BROKERS": "127.0.0.1:1", "SLUICE_PROCESSOR_REDIS_URL": "redis://127.0.0.1:1",
                 "SLUICE_PROCESSOR_ADMIN_LISTEN": "127.0.0.1:0"}
        accepted = run_with_chart_env(binary, processor, local)
        check(accepted is None, f"the real processor accepts the chart's exactly-once settings{': ' + accepted if accepted else ''}")


def limit_and_schema_checks(args):
    """Settings that cannot work fail the render, naming them."""
    try:
        render(args, "--set", "processor.autoscaling.enabled=false", "--set", "processor.replicas=13")
        check(False, "KEDA off: more replicas than partitions fails the render")
    except RuntimeError as e:
        check("processor.replicas" in str(e) and "kafka.partitions" in str(e),
              f"KEDA off: more replicas than partitions fails the render, naming the settings ({str(e)[:80]}…)")
    try:
        render(args, "--set", "processor.autoscaling.maxReplicas=13")
        check(False, "maxReplicas above the partitions fails the render")
    except RuntimeError as e:
        check("kafka.partitions" in str(e) and "allowMoreReplicasThanPartitions" in str(e),
              f"maxReplicas above the partitions fails the render, naming the settings ({str(e)[:80]}…)")
    allowed = render(args, "--set", "processor.autoscaling.maxReplicas=13",
                     "--set", "processor.autoscaling.allowMoreReplicasThanPartitions=true")
    check(find(allowed, "ScaledObject")[0]["spec"]["maxReplicaCount"] == 13, "…unless explicitly allowed")

    try:
        render(args, "--set", "processor.exactlyOnce.enabled=true", "--set", "processor.exactlyOnce.transactionIntervalMs=2000")
        check(False, "exactly-once: a transaction timeout below 10 intervals fails the render")
    except RuntimeError as e:
        check("transactionTimeoutMs" in str(e) and "transactionIntervalMs" in str(e),
              f"exactly-once: a transaction timeout below 10 intervals fails the render, naming both ({str(e)[:80]}…)")

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


def readme_checks():
    """The chart's README names every value (or the block it belongs to)."""
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--helm", required=True)
    parser.add_argument("--kube-version", dest="kube_versions", action="append",
                        help="validate against these Kubernetes versions' schemas (default: the chart's oldest, 1.30.0, and 1.36.0)")
    parser.add_argument("--crds", required=True, action="append", help="a folder of CRD YAML files (KEDA's, prometheus-operator's)")
    parser.add_argument("--promtool", required=True)
    parser.add_argument("--scrapes", required=True, help="folder of /metrics texts of the running services (*.prom)")
    parser.add_argument("--prometheus", required=True, help="URL of a Prometheus that scraped the services with deploy/'s rules")
    parser.add_argument("--since", required=True, type=float, help="when that Prometheus started scraping (Unix seconds)")
    args = parser.parse_args()
    args.kube_versions = args.kube_versions or ["1.30.0", "1.36.0"]
    kube_version_checks(args)
    crd_schemas = crd_schemas_from(args)
    rendered = render_scenarios(args, crd_schemas)
    keda_checks(args, rendered)
    replica_count_checks(args, rendered)
    workload_count_checks(rendered)
    scheduler_admin_checks(args, rendered)
    exactly_once_checks(args, rendered)
    limit_and_schema_checks(args)
    kafka_security_checks(args, rendered)
    redis_security_checks(args, rendered)
    lag_checks(args, rendered)
    external_scaler_checks(args, rendered)
    dockerfile_checks(rendered.get("demo", []))
    ops_job_checks(args, rendered, crd_schemas)

    demo = rendered.get("demo", [])
    env = container_env(find(demo, "Deployment", "-scheduler")[0]) if demo else {}
    check(env.get("SLUICE_SCHEDULER_ADMIN_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "sluice-admin"
          and "valueFrom" in env.get("SLUICE_SCHEDULER_REDIS_URL", {}),
          "demo: secrets reach the scheduler as env from Secrets, never as values")
    check(len(find(demo, "Deployment", "-chainsim")) == 1, "demo: chainsim runs when enabled")

    readme_checks()

    monitoring_checks(args, rendered)
    prometheus_checks(args)

    print(f"\n{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
