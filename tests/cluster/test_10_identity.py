"""Kubernetes identities (`server.identity`, and the operator's `auth.inference.from:
Identity` and `auth.controlAPIs.from: Identity`, each with its verb) against the real API server: a sidecar serves the
APIs it names only to callers with an audience-bound ServiceAccount token, checked by the
sidecar itself against the cluster's issuer keys (OIDC discovery, with nothing but its own
ServiceAccount's token and the default discovery role) or by a TokenReview; and, where asked,
only to callers a Role grants the `infer` verb on the InferenceService (a
LocalSubjectAccessReview).

Tried as a caller would: no token, the API server's own token, a token for the right audience
with its claims rewritten, a stranger's valid token without the Role; over REST and gRPC. A
RoleBinding deleted takes effect once the remembered answer expires."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import Process, _env_path
from controlplane import free_port, wait_for

NAME = "fraud"
CACHE_SECONDS = 3


def audience(namespace: str) -> str:
    return f"infergate.dev/{namespace}/{NAME}"


def token(cluster, namespace, account, aud=None) -> str:
    args = ["create", "token", account, "-n", namespace, "--duration=10m"]
    if aud:
        args.append(f"--audience={aud}")
    return cluster.kubectl(*args).stdout.strip()


def infer_body() -> bytes:
    return json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
    ]}).encode()


def call(http: str, path: str, bearer: str | None = None, body: bytes | None = None):
    headers = {"Content-Type": "application/json"}
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    request = urllib.request.Request(f"http://{http}{path}", data=body, headers=headers,
                                     method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=15) as r:
            return r.status, json.loads(r.read() or b"{}"), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), e.headers


def forged(real: str, subject: str) -> str:
    """`real` with its subject rewritten and its signature kept."""
    header, payload, signature = real.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = subject
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{header}.{payload}.{signature}"


def grpc_code(grpc_address: str, bearer: str | None):
    """The status of a gRPC ModelInfer of `simple` with the token as `authorization` metadata."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(grpc_address)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
              grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    headers = {"authorization": f"Bearer {bearer}"} if bearer else None
    try:
        client.infer("simple", inputs, headers=headers)
        return "OK"
    except InferenceServerException as e:
        return e.status()
    finally:
        client.close()


def verb_granted(ns: str, role: str, verb: str, account: str) -> list[dict]:
    """A Role granting `verb` on this test's InferenceService, bound to `account`."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": role, "namespace": ns},
         "rules": [{"apiGroups": ["infergate.dev"], "resources": ["inferenceservices"],
                    "resourceNames": [NAME], "verbs": [verb]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": role, "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]},
    ]


def apply_list(cluster, docs: list[dict]):
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": docs}))


def setup_accounts(cluster, namespace):
    """The sidecar's ServiceAccount (allowed to ask LocalSubjectAccessReviews, and, bound to
    `system:auth-delegator`, TokenReviews), a caller granted `infer` on the InferenceService by
    a Role, and a stranger without it."""
    ns = namespace
    docs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": ns}}
        for n in ("sidecar", "caller", "stranger")
    ] + [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "sidecar-reviews", "namespace": ns},
         "rules": [{"apiGroups": ["authorization.k8s.io"],
                    "resources": ["localsubjectaccessreviews"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "sidecar-reviews", "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "sidecar-reviews"},
         "subjects": [{"kind": "ServiceAccount", "name": "sidecar", "namespace": ns}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{ns}-sidecar-auth-delegator"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:auth-delegator"},
         "subjects": [{"kind": "ServiceAccount", "name": "sidecar", "namespace": ns}]},
    ] + verb_granted(ns, f"{NAME}-infer", "infer", "caller")
    apply_list(cluster, docs)


def start_sidecar(cluster, namespace, workdir, verify: str, role: str = "",
                  extra: tuple[str, ...] = ()) -> dict:
    kubeconfig = cluster.token_kubeconfig(workdir / f"{namespace}-{verify}{role}.kubeconfig",
                                          token(cluster, namespace, "sidecar"))
    config = workdir / f"{namespace}-{verify}{role}.yaml"
    config.write_text(json.dumps({"server": {"identity": {
        "apis": ["inference", "model-repository"], "audience": audience(namespace),
        "verify": verify, "cache_seconds": CACHE_SECONDS,
        "authorize": {"namespace": namespace, "name": NAME, "verb": "infer"}}}}))
    http, grpc = free_port(), free_port()
    log = workdir / f"{namespace}-{verify}{role}.log"
    process = Process(f"sidecar-{verify}{role}", [
        str(_env_path("INFERGATE_SIDECAR_BIN")), "--host", "127.0.0.1",
        "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", "0",
        "--admin-port", "0", "--log-format", "json", "--config", str(config), *extra,
    ], log, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    address = f"127.0.0.1:{http}"
    wait_for("the sidecar", lambda: call(address, "/v2/health/ready")[0] == 200, timeout=30)
    return {"http": address, "grpc": f"127.0.0.1:{grpc}", "process": process, "log": log}


@pytest.mark.parametrize("verify", ["Jwks", "TokenReview"])
def test_callers_need_a_token_and_the_verb(cluster, namespace, workdir, verify):
    """Only callers with a ServiceAccount token for the audience and the `infer` verb are
    served (the namespace's name holds the verification, so the two runs do not meet)."""
    ns = namespace
    setup_accounts(cluster, ns)
    sidecar = start_sidecar(cluster, ns, workdir, verify)
    try:
        http, infer = sidecar["http"], "/v2/models/simple/infer"
        caller = token(cluster, ns, "caller", audience(ns))
        stranger = token(cluster, ns, "stranger", audience(ns))
        for_the_api_server = token(cluster, ns, "caller")
        impostor = forged(stranger, f"system:serviceaccount:{ns}:caller")

        # Health and metadata are not guarded: served without a token.
        assert call(http, "/v2/health/ready")[0] == 200
        assert call(http, "/v2/models/simple")[0] == 200

        status, answer, headers = call(http, infer, caller, infer_body())
        assert status == 200, answer
        assert answer["outputs"][0]["data"] == [i + 1 for i in range(16)]

        # Every unauthenticated refusal reads the same: nothing says which part failed.
        refusals = set()
        for bearer in (None, "", "not-a-token", for_the_api_server, impostor):
            status, answer, headers = call(http, infer, bearer, infer_body())
            assert status == 401, (bearer and bearer[:20], answer)
            assert headers.get("WWW-Authenticate") == "Bearer"
            refusals.add(answer["error"])
        assert len(refusals) == 1, refusals
        status, answer, _ = call(http, infer, stranger, infer_body())
        assert status == 403, answer

        # A guarded control API, and its audit line: the caller's identity, never its token.
        status, _, _ = call(http, "/v2/repository/index", caller, b"{}")
        assert status == 200
        status, _, _ = call(http, "/v2/repository/index", None, b"{}")
        assert status == 401

        # gRPC, with the token as `authorization` metadata.
        grpc = sidecar["grpc"]
        assert grpc_code(grpc, caller) == "OK"
        assert grpc_code(grpc, None) == "StatusCode.UNAUTHENTICATED"
        assert grpc_code(grpc, impostor) == "StatusCode.UNAUTHENTICATED"
        assert grpc_code(grpc, stranger) == "StatusCode.PERMISSION_DENIED"

        # The Role taken away: refused once the remembered answer expires.
        cluster.kubectl("delete", "rolebinding", f"{NAME}-infer", "-n", ns)
        time.sleep(CACHE_SECONDS + 1)
        status, answer, _ = call(http, infer, caller, infer_body())
        assert status == 403, answer

        log = sidecar["log"].read_text()
        lines = []
        for line in log.splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("target") == "audit":
                lines.append(doc)
        credentials = {(f["call"], f["credential"], f["allowed"]) for f in lines}
        assert ("POST /v2/repository/index", f"kubernetes identity system:serviceaccount:{ns}:caller",
                True) in credentials, lines
        assert ("POST /v2/repository/index", "kubernetes identity (none proven)",
                False) in credentials, lines
        for secret in (caller, stranger, impostor):
            assert secret not in log and secret.split(".")[2] not in log
    finally:
        sidecar["process"].stop()
        cluster.kubectl("delete", "clusterrolebinding", f"{ns}-sidecar-auth-delegator",
                        check=False)


def served(http: str, bearer: str) -> int:
    """Inferences of `simple` the sidecar at `http` ran itself."""
    status, stats, _ = call(http, "/v2/models/simple/stats", bearer)
    assert status == 200, stats
    return sum(s["inference_count"] for s in stats["model_stats"])


def test_a_call_given_to_a_canary_carries_the_callers_token(cluster, namespace, workdir):
    """A sidecar that gives every call to its canary's sidecar (which checks identities too)
    passes the caller's token on: the caller is served by the canary, a caller without a token
    is refused by the first sidecar and never reaches the canary."""
    ns = namespace
    setup_accounts(cluster, ns)
    canary = start_sidecar(cluster, ns, workdir, "Jwks", "-canary")
    stable = start_sidecar(cluster, ns, workdir, "Jwks", "-stable", extra=(
        "--canary-peers", canary["grpc"], "--canary-traffic-percent", "100"))
    try:
        caller = token(cluster, ns, "caller", audience(ns))
        wait_for("the canary probed ready", lambda: b'"to":"Ready"' in
                 stable["log"].read_bytes().replace(b" ", b""), timeout=15)
        before = served(canary["http"], caller)
        infer = "/v2/models/simple/infer"
        status, answer, _ = call(stable["http"], infer, caller, infer_body())
        assert status == 200, answer
        assert answer["outputs"][0]["data"] == [i + 1 for i in range(16)]
        assert grpc_code(stable["grpc"], caller) == "OK"
        assert served(canary["http"], caller) == before + 2
        assert served(stable["http"], caller) == 0
        status, answer, _ = call(stable["http"], infer, None, infer_body())
        assert status == 401, answer
        assert grpc_code(stable["grpc"], None) == "StatusCode.UNAUTHENTICATED"
        assert served(canary["http"], caller) == before + 2
    finally:
        stable["process"].stop()
        canary["process"].stop()
        cluster.kubectl("delete", "clusterrolebinding", f"{ns}-sidecar-auth-delegator",
                        check=False)


@contextlib.contextmanager
def rendered_sidecar(workdir, ns: str, identity: dict, kubeconfig):
    """A real sidecar with the identity settings the operator rendered and the pods' token (its
    backend the built-in models in place of the model container); yields its REST address."""
    config = workdir / f"{ns}-rendered.yaml"
    config.write_text(json.dumps({"server": {"identity": identity}}))
    http = free_port()
    process = Process("sidecar-rendered", [
        str(_env_path("INFERGATE_SIDECAR_BIN")), "--host", "127.0.0.1",
        "--http-port", str(http), "--grpc-port", "0", "--metrics-port", "0",
        "--admin-port", "0", "--config", str(config),
    ], workdir / f"{ns}-rendered-{http}.log", env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    try:
        address = f"127.0.0.1:{http}"
        wait_for("the sidecar", lambda: call(address, "/v2/health/ready")[0] == 200, timeout=30)
        yield address
    finally:
        process.stop()


def test_the_operator_renders_inference_by_identity(cluster, operator, namespace, workdir):
    """`auth.inference.from: Identity`: the operator (with the chart's RBAC, which must hold
    what it grants) gives the pods an account of their own, with a token, allowed to ask
    LocalSubjectAccessReviews and nothing else; the settings it renders, given to a real sidecar
    with that account's token, serve a caller a Role grants `infer` and refuse the others."""
    ns = namespace
    doc = {
        "apiVersion": "infergate.dev/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": NAME, "namespace": ns},
        "spec": {"replicas": 0, "model": {"image": "registry.example/model:1"},
                 "auth": {"inference": {"from": "Identity"}}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    account = f"{NAME}-identity"
    wait_for("the identity objects", lambda: cluster.kubectl(
        "get", "rolebinding", account, "-n", ns, check=False).returncode == 0, timeout=60)
    deploy = wait_for("the Deployment", lambda: cluster.get_json("deployment", NAME, "-n", ns))
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account
    # The token is the sidecar's alone: a volume of its own at the standard path; the model
    # container gets none.
    assert pod["automountServiceAccountToken"] is False
    mounts = {c["name"]: [m["mountPath"] for m in c.get("volumeMounts", [])]
              for c in pod["containers"] + pod.get("initContainers", [])}
    holders = [name for name, paths in mounts.items()
               if "/var/run/secrets/kubernetes.io/serviceaccount" in paths]
    assert holders == ["infergate"], mounts
    user = f"system:serviceaccount:{ns}:{account}"
    for verb, resource, want in (("create", "localsubjectaccessreviews.authorization.k8s.io", "yes"),
                                 ("get", "secrets", "no"), ("list", "pods", "no")):
        got = cluster.kubectl("auth", "can-i", verb, resource, "-n", ns, f"--as={user}",
                              check=False).stdout.strip()
        assert got == want, (verb, resource, got)

    # The rendered settings, in a sidecar with the pods' token (its backend the built-in models
    # in place of the model container).
    config_map = cluster.get_json("configmap", f"{NAME}-sidecar", "-n", ns)
    rendered = yaml.safe_load(config_map["data"]["config.yaml"])["server"]["identity"]
    assert rendered["audience"] == audience(ns) and rendered["apis"] == ["inference"]
    apply_list(cluster, [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": ns}}
        for n in ("caller", "stranger")
    ] + verb_granted(ns, "infer", "infer", "caller"))
    kubeconfig = cluster.token_kubeconfig(workdir / f"{ns}-pods.kubeconfig",
                                          token(cluster, ns, account))
    infer = "/v2/models/simple/infer"
    with rendered_sidecar(workdir, ns, rendered, kubeconfig) as address:
        status, answer, _ = call(address, infer, token(cluster, ns, "caller", audience(ns)),
                                 infer_body())
        assert status == 200, answer
        assert call(address, infer, token(cluster, ns, "stranger", audience(ns)),
                    infer_body())[0] == 403
        assert call(address, infer, None, infer_body())[0] == 401

    # The control APIs by identity too, with a verb of their own: the caller a Role grants
    # `infer` may not change the log settings; an operator of the service granted `control` may.
    cluster.kubectl("patch", "infsvc", NAME, "-n", ns, "--type=merge",
                    "-p", '{"spec":{"auth":{"controlAPIs":{"from":"Identity"}}}}')

    def both_rendered():
        cm = cluster.get_json("configmap", f"{NAME}-sidecar", "-n", ns)
        got = yaml.safe_load(cm["data"]["config.yaml"])["server"]
        return got if len(got["identity"]["apis"]) == 2 else None
    server = wait_for("the control APIs' identity settings", both_rendered, timeout=60)
    assert "pod_only_api" not in server or not server["pod_only_api"], server
    apply_list(cluster, [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "service-owner", "namespace": ns}},
    ] + verb_granted(ns, "control", "control", "service-owner"))
    quiet = json.dumps({"log_info": False}).encode()
    with rendered_sidecar(workdir, ns, server["identity"], kubeconfig) as address:
        caller = token(cluster, ns, "caller", audience(ns))
        assert call(address, infer, caller, infer_body())[0] == 200
        assert call(address, "/v2/logging", caller, quiet)[0] == 403
        assert call(address, "/v2/logging", None, quiet)[0] == 401
        owner = token(cluster, ns, "service-owner", audience(ns))
        status, answer, _ = call(address, "/v2/logging", owner, quiet)
        assert status == 200 and answer["log_info"] is False, answer
        # The owner's `control` is not `infer`.
        assert call(address, infer, owner, infer_body())[0] == 403

    # Back to Anyone: the objects go.
    cluster.kubectl("patch", "infsvc", NAME, "-n", ns, "--type=merge",
                    "-p", '{"spec":{"auth":{"inference":{"from":"Anyone"},'
                          '"controlAPIs":{"from":"Pod"}}}}')
    wait_for("the identity objects to go", lambda: all(
        cluster.kubectl("get", kind, account, "-n", ns, check=False).returncode != 0
        for kind in ("role", "rolebinding", "serviceaccount")), timeout=60)
    # And the pods no longer run as that account, which is gone: the API server keeps the
    # deprecated `serviceAccount` field of a template, and fills `serviceAccountName` back from
    # it, unless the operator sets both.
    def account_of_the_template():
        spec = cluster.get_json("deployment", NAME, "-n", ns)["spec"]["template"]["spec"]
        return spec.get("serviceAccountName"), spec.get("serviceAccount")
    wait_for("the pods' account to be the namespace's default", lambda: (
        account_of_the_template() == ("default", "default")), timeout=60)
