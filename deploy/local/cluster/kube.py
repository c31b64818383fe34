"""A small client of the Kubernetes API for cluster.sh and the chart's cluster tests.

Only the standard library and PyYAML (tools.sh's venv): the kubeconfig cluster.sh writes
(one cluster, a bearer token, a CA file), server-side apply of YAML documents with the
resource found by discovery, GET/DELETE/PATCH of one path, and waiting for a condition.

    kube.py --kubeconfig FILE apply FILE…         server-side apply of every document
    kube.py --kubeconfig FILE get PATH            print one object (JSON) or a plain-text answer
    kube.py --kubeconfig FILE wait PATH TYPE      wait until the object's condition TYPE is True
"""

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.request

import yaml


class ApiError(Exception):
    """An answer of the API server other than 2xx; `code` tells a caller which."""

    def __init__(self, code, method, path, body):
        self.code, self.method, self.path, self.body = code, method, path, body
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        self.message = message
        super().__init__(f"{method} {path}: {code} {message}")


class Kube:
    """One API server, as the kubeconfig names it."""

    FIELD_MANAGER = "sluice-tests"

    def __init__(self, kubeconfig):
        with open(kubeconfig, encoding="utf-8") as f:
            config = yaml.safe_load(f)
        cluster = config["clusters"][0]["cluster"]
        self.server = cluster["server"].rstrip("/")
        self.token = config["users"][0]["user"]["token"]
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self._resources = {}

    def request(self, method, path, body=None, content_type="application/json", timeout=30):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as r:
                text = r.read().decode()
                is_json = r.headers.get_content_type() == "application/json"
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, method, path, e.read().decode()) from None
        # Objects are JSON; the health endpoints (/readyz) answer plain text.
        return (json.loads(text) if is_json else text) if text else None

    def get(self, path):
        return self.request("GET", path)

    def get_or_none(self, path):
        try:
            return self.get(path)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def resource(self, api_version, kind):
        """(plural, namespaced) of a kind, from the server's discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in self.get(base)["resources"]:
                if "/" not in r["name"]:
                    self._resources[(api_version, r["kind"])] = (r["name"], r["namespaced"])
        if key not in self._resources:
            raise KeyError(f"the API server serves no {kind} in {api_version}")
        return self._resources[key]

    def path(self, api_version, kind, name=None, namespace=None):
        plural, namespaced = self.resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            base += f"/namespaces/{namespace or 'default'}"
        return f"{base}/{plural}" + (f"/{name}" if name else "")

    def apply(self, doc):
        """Server-side apply of one object (JSON is YAML, so the body is the object's JSON)."""
        meta = doc["metadata"]
        path = self.path(doc["apiVersion"], doc["kind"], meta["name"], meta.get("namespace"))
        return self.request(
            "PATCH",
            f"{path}?fieldManager={self.FIELD_MANAGER}&force=true",
            doc,
            content_type="application/apply-patch+yaml",
        )

    def list(self, api_version, kind, namespace=None):
        return self.get(self.path(api_version, kind, namespace=namespace))["items"]

    def host_service(self, namespace, name, port, host, target):
        """A Service NAME:PORT without a selector whose EndpointSlice names HOST:TARGET, as
        clusters reach a database or a broker outside them (kube-proxy routes it, DNS names it)."""
        self.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                    "spec": {"ports": [{"name": name, "port": port, "protocol": "TCP"}]}})
        self.apply({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": f"{name}-host", "namespace": namespace,
                                 "labels": {"kubernetes.io/service-name": name}},
                    "addressType": "IPv4", "ports": [{"name": name, "port": target, "protocol": "TCP"}],
                    "endpoints": [{"addresses": [host]}]})


def condition(obj, kind):
    """The status of condition `kind` of an object, or None."""
    for c in (obj or {}).get("status", {}).get("conditions", []) or []:
        if c.get("type") == kind:
            return c
    return None


def wait(what, probe, timeout, interval=0.5):
    """Calls probe() until it returns something true; fails naming `what` and the last reason."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (ApiError, OSError) as e:
            last = e
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout} s" + (f" (last: {last})" if last else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    sub = parser.add_subparsers(dest="command", required=True)
    apply = sub.add_parser("apply")
    apply.add_argument("files", nargs="+")
    get = sub.add_parser("get")
    get.add_argument("path")
    waits = sub.add_parser("wait")
    waits.add_argument("path")
    waits.add_argument("type")
    waits.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    kube = Kube(args.kubeconfig)
    try:
        if args.command == "apply":
            for file in args.files:
                with open(file, encoding="utf-8") as f:
                    for doc in yaml.safe_load_all(f):
                        if doc:
                            kube.apply(doc)
        elif args.command == "get":
            answer = kube.get(args.path)
            print(answer if isinstance(answer, str) else json.dumps(answer, indent=2))
        else:

            def true_now():
                c = condition(kube.get(args.path), args.type)
                if c and c["status"] != "True":
                    raise OSError(f"{c.get('reason')}: {c.get('message')}")
                return c

            wait(f"{args.path}: condition {args.type}", true_now, args.timeout)
    except (ApiError, TimeoutError, KeyError) as e:
        print(f"kube.py: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
