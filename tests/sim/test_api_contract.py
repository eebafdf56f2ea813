"""The API through the official sync client: shapes, selectors, pagination, patches, watch and errors."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.sim.conftest import pod_body, unique


def _status(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_discovery_with_and_without_trailing_slash(east: client.CoreV1Api) -> None:
    assert client.VersionApi(east.api_client).get_code().git_version.startswith("v1.")
    assert client.CoreApi(east.api_client).get_api_versions().versions == ["v1"]
    groups = client.ApisApi(east.api_client).get_api_versions()
    assert "scheduling.k8s.io" in {g.name for g in groups.groups}
    resources = {r.name for r in east.get_api_resources().resources}
    assert {"pods", "pods/log", "pods/eviction", "nodes", "events", "resourcequotas"} <= resources
    for path in ("/healthz", "/readyz", "/livez", "/version/", "/api/", "/apis/"):
        east.api_client.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False)


def test_create_defaults_and_server_fields(east: client.CoreV1Api) -> None:
    name = unique("defaults")
    pod = east.create_namespaced_pod("default", pod_body(name))
    assert pod.metadata.uid and pod.metadata.resource_version and pod.metadata.creation_timestamp
    assert pod.metadata.namespace == "default"
    assert pod.spec.scheduler_name == "default-scheduler"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.priority == 0
    assert pod.status.qos_class == "Burstable"
    keys = {(t.key, t.effect, t.toleration_seconds) for t in pod.spec.tolerations}
    assert ("node.kubernetes.io/not-ready", "NoExecute", 300) in keys
    assert ("node.kubernetes.io/unreachable", "NoExecute", 300) in keys
    generated = east.create_namespaced_pod("default", {**pod_body(""), "metadata": {"generateName": "gen-"}})
    assert generated.metadata.name.startswith("gen-") and len(generated.metadata.name) == 9


def test_resource_versions_are_monotonic(east: client.CoreV1Api) -> None:
    first = int(east.create_namespaced_pod("default", pod_body(unique("rv"))).metadata.resource_version)
    second = int(east.create_namespaced_pod("default", pod_body(unique("rv"))).metadata.resource_version)
    assert second > first


def test_errors_are_status_objects(east: client.CoreV1Api, fed: SimFederation) -> None:
    with pytest.raises(ApiException) as missing_ns:
        east.create_namespaced_pod("nope", pod_body(unique()))
    assert missing_ns.value.status == 404
    assert _status(missing_ns.value)["message"] == 'namespaces "nope" not found'
    name = unique("dup")
    east.create_namespaced_pod("default", pod_body(name))
    with pytest.raises(ApiException) as dup:
        east.create_namespaced_pod("default", pod_body(name))
    assert dup.value.status == 409 and _status(dup.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as invalid:
        east.create_namespaced_pod("default", pod_body("Bad_Name"))
    body = _status(invalid.value)
    assert invalid.value.status == 422 and body["reason"] == "Invalid" and body["kind"] == "Status"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as gone:
        east.read_namespaced_pod("does-not-exist", "default")
    assert gone.value.status == 404 and _status(gone.value)["message"] == 'pods "does-not-exist" not found'
    with pytest.raises(ApiException) as bad_field:
        east.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert bad_field.value.status == 400
    assert _status(bad_field.value)["message"] == "field label not supported: spec.bogus"


def test_wrong_token_is_401(fed: SimFederation) -> None:
    configuration = client.Configuration()
    configuration.host = fed["east-cpu"].url
    configuration.api_key = {"authorization": "Bearer wrong"}
    api = client.CoreV1Api(client.ApiClient(configuration))
    with pytest.raises(ApiException) as exc:
        api.list_namespaced_pod("default")
    assert exc.value.status == 401 and _status(exc.value)["reason"] == "Unauthorized"


def test_label_selector_grammar_used_by_kpo(east: client.CoreV1Api) -> None:
    run = unique("run")
    base = {"dag_id": "x", "run_id": run}
    east.create_namespaced_pod("default", pod_body(unique("sel"), labels={**base, "tier": "a"}))
    east.create_namespaced_pod("default", pod_body(unique("sel"), labels={**base, "already_checked": "True"}))
    east.create_namespaced_pod("default", pod_body(unique("sel"), labels={**base, "airflow-worker": "1"}))
    east.create_namespaced_pod("default", pod_body(unique("sel"), labels={**base, "tier": "b"}))

    def names(selector: str) -> int:
        return len(east.list_namespaced_pod("default", label_selector=f"run_id={run},{selector}").items)

    assert names("dag_id=x,already_checked!=True,!airflow-worker") == 2
    assert names("dag_id==x,tier in (a, c)") == 1
    assert names("tier notin (a)") == 3
    assert names("tier") == 2
    assert names("!tier") == 2
    assert len(east.list_pod_for_all_namespaces(label_selector=f"run_id={run}").items) == 4


def test_field_selectors_and_pagination(east: client.CoreV1Api) -> None:
    run = unique("page")
    names = [unique("pg") for _ in range(5)]
    for name in names:
        east.create_namespaced_pod("default", pod_body(name, labels={"run": run}))
    one = east.list_namespaced_pod("default", field_selector=f"metadata.name={names[0]}")
    assert [p.metadata.name for p in one.items] == [names[0]]
    seen, token = [], None
    while True:
        page = east.list_namespaced_pod("default", label_selector=f"run={run}", limit=2, _continue=token)
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert sorted(seen) == sorted(names)


def test_patch_types_and_replace_conflict(east: client.CoreV1Api) -> None:
    name = unique("patch")
    # Never scheduled, so nothing but this test changes it (no resourceVersion races with the kubelet).
    east.create_namespaced_pod("default", pod_body(name, labels={"a": "1"}, schedulerName="manual"))
    patched = east.patch_namespaced_pod(
        name, "default", {"metadata": {"labels": {"already_checked": "True"}}}
    )
    assert patched.metadata.labels == {"a": "1", "already_checked": "True"}
    # Strategic merge keeps the other conditions (merge key: type).
    status = east.patch_namespaced_pod_status(
        name, "default", {"status": {"conditions": [{"type": "Custom", "status": "True"}]}}
    )
    types = {c.type for c in status.status.conditions}
    assert "Custom" in types
    east.patch_namespaced_pod(name, "default", [{"op": "add", "path": "/metadata/labels/b", "value": "2"}])
    api = east.api_client
    api.call_api(
        f"/api/v1/namespaces/default/pods/{name}",
        "PATCH",
        body={"metadata": {"labels": {"a": None}}},
        header_params={"Content-Type": "application/merge-patch+json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    labels = east.read_namespaced_pod(name, "default").metadata.labels
    assert labels == {"already_checked": "True", "b": "2"}
    current = east.read_namespaced_pod(name, "default")
    stale_rv = current.metadata.resource_version
    current.metadata.labels["c"] = "3"
    east.replace_namespaced_pod(name, "default", current)
    current.metadata.resource_version = stale_rv
    with pytest.raises(ApiException) as conflict:
        east.replace_namespaced_pod(name, "default", current)
    assert conflict.value.status == 409 and _status(conflict.value)["reason"] == "Conflict"


def test_watch_resumes_from_resource_version(east: client.CoreV1Api) -> None:
    run = unique("watch")
    start_rv = east.list_namespaced_pod("default").metadata.resource_version
    names = [unique("w") for _ in range(3)]
    for name in names:
        east.create_namespaced_pod("default", pod_body(name, labels={"run": run}))
    w = watch.Watch()
    seen: list[tuple[str, str]] = []
    for event in w.stream(
        east.list_namespaced_pod,
        "default",
        label_selector=f"run={run}",
        resource_version=start_rv,
        timeout_seconds=1,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if sum(1 for t, _ in seen if t == "ADDED") == 3:
            w.stop()
    assert [n for t, n in seen if t == "ADDED"] == names


def test_watch_ends_at_timeout_and_legacy_path(east: client.CoreV1Api) -> None:
    events = list(watch.Watch().stream(east.list_node, timeout_seconds=1, _request_timeout=5))
    assert len(events) == 3 and all(e["type"] == "ADDED" for e in events)
    response = east.api_client.call_api(
        "/api/v1/watch/nodes",
        "GET",
        query_params=[("timeoutSeconds", "1")],
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    lines = [json.loads(line) for line in response.data.decode().splitlines()]
    assert len(lines) == 3


def test_watch_too_old_resource_version_is_410(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    small_fed["solo"].call(small_fed["solo"].store.compact)
    response = solo.api_client.call_api(
        "/api/v1/namespaces/default/pods",
        "GET",
        query_params=[("watch", "true"), ("resourceVersion", "1")],
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    event = json.loads(response.data.decode().splitlines()[0])
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"
    assert event["object"]["message"].startswith("too old resource version: 1")


def test_watch_sees_live_changes(east: client.CoreV1Api) -> None:
    name = unique("live")
    rv = east.list_namespaced_pod("default").metadata.resource_version
    seen: list[str] = []

    def consume() -> None:
        w = watch.Watch()
        for event in w.stream(
            east.list_namespaced_pod,
            "default",
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=60,  # a bound, not a wait: the watch is stopped at DELETED
        ):
            seen.append(f"{event['type']}:{event['object'].status.phase}")
            if event["type"] == "DELETED":
                w.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    east.create_namespaced_pod("default", pod_body(name))
    # Bounds generous enough for a loaded machine (the test bed runs it against a real control plane).
    wait_for(lambda: any(s.endswith("Succeeded") for s in seen), 60)
    east.delete_namespaced_pod(name, "default")
    thread.join(60)
    assert seen[0] == "ADDED:Pending" and "MODIFIED:Running" in seen and seen[-1].startswith("DELETED")


def test_binding_and_namespaces(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("bind")
    handle = fed["east-cpu"]
    east.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=unique("ns"))))
    assert {"default", "kube-system"} <= {n.metadata.name for n in east.list_namespace().items}
    body = pod_body(name, schedulerName="manual")
    east.create_namespaced_pod("default", body)
    node = handle.nodes()[0]["metadata"]["name"]
    east.api_client.call_api(
        f"/api/v1/namespaces/default/pods/{name}/binding",
        "POST",
        body={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"kind": "Node", "name": node},
        },
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    assert east.read_namespaced_pod(name, "default").spec.node_name == node
    with pytest.raises(ApiException) as again:
        east.api_client.call_api(
            f"/api/v1/namespaces/default/pods/{name}/binding",
            "POST",
            body={"target": {"name": node}},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
    assert again.value.status == 409


def test_priority_classes(east: client.CoreV1Api) -> None:
    sched = client.SchedulingV1Api(east.api_client)
    assert "system-node-critical" in {p.metadata.name for p in sched.list_priority_class().items}
    pc_name = unique("prio")
    sched.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=pc_name), value=1234)
    )
    name = unique()

    def create_once_admission_knows_the_class() -> client.V1Pod | None:
        # kube-apiserver's Priority admission reads classes from an informer cache: a class just
        # created is refused (403 "no PriorityClass ... was found") until the cache has it.
        try:
            return east.create_namespaced_pod("default", pod_body(name, priorityClassName=pc_name))
        except ApiException as exc:
            if exc.status == 403 and f"no PriorityClass with name {pc_name}" in str(exc.body):
                return None
            raise

    pod = wait_for(create_once_admission_knows_the_class, timeout=30, interval=0.2, message=pc_name)
    assert pod.spec.priority == 1234
