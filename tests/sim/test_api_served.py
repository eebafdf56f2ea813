"""What kubectl and controllers need beyond pods: Tables, OpenAPI, discovery, Leases, disruption budgets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_provider_fedsched.sim import SimFederation, wait_for
from airflow_provider_fedsched.sim.apiserver.tables import human_duration
from tests.sim.conftest import pod_body, unique

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def get(
    api: client.CoreV1Api, path: str, accept: str = "application/json"
) -> tuple[int, dict[str, str], Any]:
    response = api.api_client.call_api(
        path, "GET", header_params={"Accept": accept}, auth_settings=["BearerToken"], _preload_content=False
    )
    return response.status, dict(response.headers), response.data


def test_tables_for_pods_nodes_and_events(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("table")
    east.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/duration": "3600"}))
    pod = fed["east-cpu"].wait_for_phase("default", name, "Running")
    _, _, body = get(east, f"/api/v1/namespaces/default/pods/{name}", TABLE)
    table = json.loads(body)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    columns = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert columns == ["Name", "Ready", "Status", "Restarts", "Age"]
    [row] = table["rows"]
    assert row["cells"][:4] == [name, "1/1", "Running", "0"]
    assert row["cells"][6] == pod["spec"]["nodeName"]  # the -o wide Node column
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == name
    nodes = json.loads(get(east, "/api/v1/nodes", TABLE)[2])
    assert [c["name"] for c in nodes["columnDefinitions"] if c["priority"] == 0] == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
    ]
    assert {r["cells"][1] for r in nodes["rows"]} == {"Ready"} and len(nodes["rows"]) == 3
    events = json.loads(
        get(east, f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={name}", TABLE)[2]
    )
    cells = {r["cells"][2]: r["cells"] for r in events["rows"]}
    assert cells["Scheduled"][1] == "Normal" and cells["Scheduled"][3] == f"pod/{name}"
    east.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_age_is_printed_like_kubectl() -> None:
    cases = {
        0: "0s",
        119: "119s",
        125: "2m5s",
        600: "10m",
        3 * 3600 + 60: "3h1m",
        9 * 3600: "9h",
        3 * 86400: "3d",
    }
    assert {s: human_duration(s) for s in cases} == cases


def test_openapi_documents(east: client.CoreV1Api) -> None:
    status, _, body = get(east, "/openapi/v3")
    root = json.loads(body)["paths"]
    assert status == 200 and {
        "api/v1",
        "apis/batch/v1",
        "apis/coordination.k8s.io/v1",
        "apis/policy/v1",
    } <= set(root)
    doc = json.loads(get(east, root["api/v1"]["serverRelativeURL"])[2])
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "io.k8s.api.core.v1.Pod" in doc["components"]["schemas"]
    status, headers, body = get(
        east, "/openapi/v2", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    )
    assert status == 200 and headers["Content-Type"].endswith("+protobuf") and body[:1] == b"\x0a"  # field 1
    swagger = json.loads(get(east, "/openapi/v2")[2])
    assert swagger["swagger"] == "2.0" and "/apis/batch/v1/namespaces/{namespace}/jobs" in swagger["paths"]


def test_discovery_is_complete(east: client.CoreV1Api) -> None:
    groups = {g.name: g for g in client.ApisApi(east.api_client).get_api_versions().groups}
    assert {"batch", "coordination.k8s.io", "policy", "scheduling.k8s.io"} <= set(groups)
    policy = client.PolicyV1Api(east.api_client).get_api_resources()
    assert "poddisruptionbudgets" in {r.name for r in policy.resources}
    core = {r.name: r for r in east.get_api_resources().resources}
    assert core["pods/eviction"].group == "policy" and core["pods/eviction"].version == "v1"


def test_leases_use_optimistic_concurrency(east: client.CoreV1Api) -> None:
    leases = client.CoordinationV1Api(east.api_client)
    name = unique("lease")
    spec = client.V1LeaseSpec(holder_identity="host-a", lease_duration_seconds=15)
    created = leases.create_namespaced_lease(
        "default", client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec)
    )
    with pytest.raises(ApiException) as taken:
        leases.create_namespaced_lease(
            "default", client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec)
        )
    assert taken.value.status == 409 and json.loads(taken.value.body)["reason"] == "AlreadyExists"
    mine = leases.read_namespaced_lease(name, "default")
    theirs = leases.read_namespaced_lease(name, "default")
    mine.spec.holder_identity = "host-b"
    updated = leases.replace_namespaced_lease(name, "default", mine)
    assert updated.spec.holder_identity == "host-b"
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    theirs.spec.holder_identity = "host-c"
    with pytest.raises(ApiException) as stale:
        leases.replace_namespaced_lease(name, "default", theirs)
    assert stale.value.status == 409 and json.loads(stale.value.body)["reason"] == "Conflict"
    assert leases.read_namespaced_lease(name, "default").spec.holder_identity == "host-b"
    with pytest.raises(ApiException) as bad:
        leases.create_namespaced_lease(
            "default",
            {"metadata": {"name": unique("lease")}, "spec": {"leaseDurationSeconds": -1}},
        )
    assert bad.value.status == 422
    leases.delete_namespaced_lease(name, "default")
    assert name not in {item.metadata.name for item in leases.list_namespaced_lease("default").items}


def test_eviction_respects_disruption_budgets(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    policy = client.PolicyV1Api(solo.api_client)
    names = [unique("pdb") for _ in range(2)]
    for name in names:
        solo.create_namespaced_pod(
            "default",
            pod_body(name, labels={"app": "guarded"}, annotations={"sim.fedsched.io/duration": "3600"}),
        )
        handle.wait_for_phase("default", name, "Running")
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    budget = wait_for(
        lambda: (
            (b := policy.read_namespaced_pod_disruption_budget("guard", "default")).status
            and b.status.current_healthy == 2
            and b
        )
    )
    assert (budget.status.desired_healthy, budget.status.disruptions_allowed) == (1, 1)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=names[0], namespace="default"))
    solo.create_namespaced_pod_eviction(names[0], "default", eviction)
    wait_for(
        lambda: (
            policy.read_namespaced_pod_disruption_budget("guard", "default").status.disruptions_allowed == 0
        )
    )
    with pytest.raises(ApiException) as refused:
        solo.create_namespaced_pod_eviction(
            names[1],
            "default",
            client.V1Eviction(metadata=client.V1ObjectMeta(name=names[1], namespace="default")),
        )
    assert refused.value.status == 429
    assert json.loads(refused.value.body)["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert handle.pod("default", names[1])["metadata"].get("deletionTimestamp") is None


def test_delete_collection_by_label(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    for name in ("sweep-a", "sweep-b", "keep-c"):
        labels = {"sweep": "yes"} if name.startswith("sweep") else {}
        solo.create_namespaced_pod("default", pod_body(name, labels=labels, schedulerName="manual"))
    solo.delete_collection_namespaced_pod("default", label_selector="sweep=yes")
    wait_for(lambda: {p["metadata"]["name"] for p in handle.pods("default")} == {"keep-c"})


def test_watch_as_table_for_kubectl_get_watch(east: client.CoreV1Api) -> None:
    name = unique("watchtable")
    east.create_namespaced_pod("default", pod_body(name))
    _, _, body = get(
        east,
        f"/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1&fieldSelector=metadata.name={name}",
        TABLE,
    )
    events = [json.loads(line) for line in body.decode().splitlines()]
    assert events and all(e["object"]["kind"] == "Table" for e in events)
    assert events[0]["object"]["rows"][0]["cells"][0] == name
