"""Hostile input to the simulator's API: every bad request is a fast 4xx Status naming what is wrong."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from airflow_provider_fedsched.sim import SimFederation
from tests.sim.conftest import pod_body

PODS = "/api/v1/namespaces/default/pods"


def _pod(**spec: Any) -> bytes:
    body = pod_body("hostile")
    body["spec"].update(spec)
    return json.dumps(body).encode()


def _container(**fields: Any) -> bytes:
    body = pod_body("hostile")
    body["spec"]["containers"][0].update(fields)
    return json.dumps(body).encode()


# (method, path, body, content type, status, text the message must contain)
CASES: list[tuple[str, str, bytes | None, str, int, str]] = [
    ("GET", f"{PODS}?limit=-1", None, "", 400, "limit"),
    ("GET", f"{PODS}?limit=abc", None, "", 400, "limit"),
    ("GET", f"{PODS}?limit=99999999999999999999", None, "", 400, "limit"),
    ("GET", f"{PODS}?continue=not-a-token", None, "", 400, "continue"),
    ("GET", f"{PODS}?continue=eyJ4IjogMX0", None, "", 400, "continue"),  # valid base64 JSON, no position
    ("GET", f"{PODS}?labelSelector=a%20b%20c", None, "", 400, "unable to parse requirement"),
    ("GET", f"{PODS}?labelSelector=!a%20in%20(b)", None, "", 400, "unable to parse requirement"),
    ("GET", f"{PODS}?fieldSelector=spec.bogus%3Dx", None, "", 400, "field label not supported: spec.bogus"),
    ("GET", f"{PODS}?fieldSelector=%3D%3D%3D", None, "", 400, "invalid selector"),
    ("GET", f"{PODS}?watch=true&timeoutSeconds=abc", None, "", 400, "timeoutSeconds"),
    ("GET", f"{PODS}?watch=true&resourceVersion=abc", None, "", 400, "resource version"),
    ("GET", "/api/v1/nodes?labelSelector=x%20notin%20", None, "", 400, "unable to parse requirement"),
    ("POST", PODS, b"{not json", "application/json", 400, "could not be decoded"),
    ("POST", PODS, b"[1, 2]", "application/json", 400, "must be a JSON object"),
    ("POST", PODS, b'"a string"', "application/json", 400, "must be a JSON object"),
    ("POST", PODS, b"a: &x [1]\nb: *x\n", "application/yaml", 400, "aliases are not allowed"),
    ("POST", PODS, b"[" * 200 + b"]" * 200, "application/json", 400, "nested deeper"),
    ("POST", PODS, b"x" * (4 * 2**20), "application/json", 413, "Request entity too large"),
    ("POST", PODS, json.dumps({"metadata": "x"}).encode(), "application/json", 400, "metadata"),
    ("POST", PODS, json.dumps({"metadata": {"name": "x", "labels": {"a": 1}}}).encode(), "", 400, "labels"),
    ("POST", PODS, json.dumps({"metadata": {"name": "x"}, "spec": []}).encode(), "", 400, "spec"),
    ("POST", PODS, json.dumps({"metadata": {"name": 5}, "spec": {}}).encode(), "", 422, "metadata.name"),
    ("POST", PODS, _pod(containers="busybox"), "", 422, "spec.containers"),
    ("POST", PODS, _pod(containers=[1]), "", 422, "spec.containers[0]"),
    ("POST", PODS, _container(resources="lots"), "", 422, "spec.containers[0].resources"),
    ("POST", PODS, _container(resources={"requests": {"cpu": "lots"}}), "", 422, "requests[cpu]"),
    ("POST", PODS, _container(resources={"requests": {"cpu": "1e999999999"}}), "", 422, "too large"),
    ("POST", PODS, _container(resources={"requests": {"memory": "9" * 5000}}), "", 422, "too large"),
    ("POST", PODS, _container(env=[{"value": "x"}]), "", 422, "env[0].name"),
    (
        "POST",
        PODS,
        _pod(tolerations=[{"key": "a", "operator": "exists"}]),
        "",
        422,
        "tolerations[0].operator",
    ),
    ("POST", PODS, _pod(tolerations=[{"operator": "Equal", "value": "v"}]), "", 422, "must be Exists"),
    (
        "POST",
        PODS,
        _pod(tolerations=[{"key": "a", "tolerationSeconds": 5}]),
        "",
        422,
        "tolerations[0].effect",
    ),
    ("POST", PODS, _pod(tolerations="all"), "", 422, "spec.tolerations"),
    ("POST", PODS, _pod(nodeSelector=["a"]), "", 422, "spec.nodeSelector"),
    ("POST", PODS, _pod(affinity={"nodeAffinity": []}), "", 422, "spec.affinity.nodeAffinity"),
    ("POST", PODS, _pod(restartPolicy="Sometimes"), "", 422, "spec.restartPolicy"),
    ("POST", PODS, _pod(terminationGracePeriodSeconds="30"), "", 422, "terminationGracePeriodSeconds"),
    ("POST", PODS, _pod(priority=7), "", 403, "priority"),
    ("POST", PODS, _pod(priorityClassName="nope"), "", 403, "no PriorityClass with name nope"),
    (
        "POST",
        "/api/v1/nodes",
        json.dumps({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1e99999"}}}).encode(),
        "",
        422,
        "status.allocatable",
    ),
    (
        "POST",
        "/api/v1/nodes",
        json.dumps(
            {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "Never"}]}}
        ).encode(),
        "",
        422,
        "spec.taints[0].effect",
    ),
    (
        "POST",
        "/api/v1/namespaces",
        json.dumps({"metadata": {"name": "Bad_Name"}}).encode(),
        "",
        422,
        "metadata.name",
    ),
    (
        "POST",
        "/api/v1/namespaces/default/resourcequotas",
        json.dumps({"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "x"}}}).encode(),
        "",
        422,
        "spec.hard",
    ),
    (
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        json.dumps({"metadata": {"name": "l"}, "spec": {"renewTime": "yesterday"}}).encode(),
        "",
        400,
        "spec.renewTime",
    ),
    (
        "POST",
        "/apis/batch/v1/namespaces/default/jobs",
        json.dumps(
            {
                "metadata": {"name": "j"},
                "spec": {
                    "parallelism": -1,
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                    },
                },
            }
        ).encode(),
        "",
        422,
        "spec.parallelism",
    ),
    (
        "POST",
        "/apis/batch/v1/namespaces/default/jobs",
        json.dumps({"metadata": {"name": "j"}, "spec": {}}).encode(),
        "",
        422,
        "spec.template",
    ),
    (
        "PATCH",
        "/api/v1/nodes/NODE",
        b'{"spec": {}}',
        "application/json-patch+json",
        400,
        "json patch must be a list",
    ),
    (
        "PATCH",
        "/api/v1/nodes/NODE",
        b'[{"op": "remove", "path": "/nope"}]',
        "application/json-patch+json",
        422,
        "rejected",
    ),
    (
        "PATCH",
        "/api/v1/nodes/NODE",
        b"[1]",
        "application/merge-patch+json",
        400,
        "patch body must be a JSON object",
    ),
    ("PATCH", "/api/v1/nodes/NODE", b"{}", "text/plain", 415, "unknown format"),
    (
        "PATCH",
        "/api/v1/nodes/NODE",
        b'{"metadata": {"resourceVersion": 5}}',
        "application/merge-patch+json",
        400,
        "resourceVersion",
    ),
    ("PUT", "/api/v1/nodes/NODE", b"[]", "application/json", 400, "must be a JSON object"),
    (
        "DELETE",
        "/api/v1/namespaces/default/pods/nope?gracePeriodSeconds=abc",
        None,
        "",
        400,
        "gracePeriodSeconds",
    ),
    (
        "DELETE",
        "/api/v1/namespaces/default/pods/nope?gracePeriodSeconds=-5",
        None,
        "",
        400,
        "gracePeriodSeconds",
    ),
    (
        "DELETE",
        "/apis/batch/v1/namespaces/default/jobs/nope",
        b'{"propagationPolicy": "Sideways"}',
        "application/json",
        400,
        "propagationPolicy",
    ),
    ("DELETE", "/api/v1/namespaces/default/pods/nope", b"[]", "application/json", 400, "DeleteOptions"),
    ("GET", "/api/v1/namespaces/default/pods/nope/log?tailLines=abc", None, "", 400, "tailLines"),
    (
        "POST",
        "/api/v1/namespaces/default/pods/nope/binding",
        b'{"target": {"name": 5}}',
        "application/json",
        422,
        "target.name",
    ),
    ("GET", "/api/v1/namespaces/default/pods/a/b/c/d", None, "", 404, "could not find"),
    ("GET", "/apis/nope.example/v1/things", None, "", 404, "could not find"),
    ("POST", "/api/v1/namespaces/default/pods/x/status", b"{}", "application/json", 405, "does not allow"),
]


def request(url: str, token: str, method: str, path: str, body: bytes | None, ctype: str) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = ctype or "application/json"
    req = urllib.request.Request(url + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    ("method", "path", "body", "ctype", "status", "text"), CASES, ids=[f"{c[0]} {c[-1]}" for c in CASES]
)
def test_bad_request_is_a_fast_4xx_status(
    fed: SimFederation, method: str, path: str, body: bytes | None, ctype: str, status: int, text: str
) -> None:
    handle = fed["east-cpu"]
    path = path.replace("NODE", handle.nodes()[0]["metadata"]["name"])
    start = time.monotonic()
    code, answer = request(handle.url, handle.token, method, path, body, ctype)
    elapsed = time.monotonic() - start
    assert (code, answer["kind"], answer["status"], answer["code"]) == (
        status,
        "Status",
        "Failure",
        status,
    ), answer
    assert text in answer["message"], answer["message"]
    assert elapsed < 2.0, f"{method} {path} took {elapsed:.2f}s"


def test_the_cluster_still_serves_after_hostile_input(fed: SimFederation) -> None:
    handle = fed["east-cpu"]
    for method, path, body, ctype, _, _ in CASES[:20]:
        request(handle.url, handle.token, method, path.replace("NODE", "x"), body, ctype)
    pod = handle.create_pod("default", pod_body("after-hostile"))
    assert handle.wait_for_phase("default", pod["metadata"]["name"], "Succeeded")


FAULT_CASES = [
    ({"kind": "latency", "args": {"seconds": -1}}, "seconds=-1 must be a finite number in 0..3600"),
    ({"kind": "latency", "args": {"seconds": "nan"}}, "seconds='nan' must be a finite number"),
    ({"kind": "latency", "args": {"seconds": 1e300}}, "must be a finite number in 0..3600"),
    ({"kind": "latency", "args": {"seconds": True}}, "seconds=True is not a number"),
    ({"kind": "fail", "args": {"status": 999}}, "status=999 must be a finite number in 400..599"),
    ({"kind": "fail", "args": {"route": "("}}, "route='(' is not a regular expression"),
    ({"kind": "fail", "args": {"times": 1.5}}, "times=1.5 must be a whole number"),
    ({"kind": "latency", "args": {"secs": 1}}, "unknown argument 'secs' (it takes seconds)"),
    ({"kind": "clear", "args": {"x": 1}}, "unknown argument 'x' (it takes no arguments)"),
    ({"kind": "latency", "args": [1]}, "args must be a JSON object"),
]


@pytest.mark.parametrize(("body", "message"), FAULT_CASES, ids=[str(c[0]) for c in FAULT_CASES])
def test_a_bad_fault_is_a_400_naming_the_argument_and_changes_nothing(
    small_fed: SimFederation, body: dict[str, Any], message: str
) -> None:
    """Issue 27: negative, NaN and 1e300 latencies were accepted (the last stalled the member until
    ``clear``), as were status 999 and unknown keys; a bad route regex was a 500 with a traceback."""
    handle = small_fed["solo"]
    request = urllib.request.Request(
        f"{small_fed.control_url}/sim/v1/clusters/solo/faults",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {handle.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert message in json.loads(refused.value.read())["message"]
    assert handle.cluster.faults.latency_seconds == 0.0
