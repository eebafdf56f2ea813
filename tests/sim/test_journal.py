"""The execution journal: every pod run, how it ended, kept after deletion; node loads and over-commits."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client, watch

from airflow_provider_fedsched.sim import SimFederation, wait_for
from airflow_provider_fedsched.sim.apiserver.store import Store
from airflow_provider_fedsched.sim.controllers.journal import Journal
from airflow_provider_fedsched.sim.util import Clock
from tests.sim.conftest import pod_body, unique

LONG = {"sim.fedsched.io/duration": "3600"}


def entry(fed: SimFederation, cluster: str, name: str) -> dict[str, Any]:
    runs = [r for r in fed[cluster].journal("default") if r["name"] == name]
    assert len(runs) == 1, runs
    return runs[0]


def ended(fed: SimFederation, cluster: str, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: next(
            (r for r in fed[cluster].journal("default") if r["name"] == name and r["ended_at"]), None
        ),
        message=f"journal entry of {name} ended",
    )


def test_a_pod_run_is_recorded_and_kept_after_deletion(east: client.CoreV1Api, fed: SimFederation) -> None:
    name = unique("jr")
    east.create_namespaced_pod("default", pod_body(name, labels={"dag_id": "etl", "try_number": "1"}))
    done = fed["east-cpu"].wait_for_phase("default", name, "Succeeded")
    east.delete_namespaced_pod(name, "default")
    fed["east-cpu"].wait_for_gone("default", name)
    run = entry(fed, "east-cpu", name)
    assert run["cluster"] == "east-cpu" and run["uid"] == done["metadata"]["uid"]
    assert run["labels"] == {"dag_id": "etl", "try_number": "1"}
    assert run["node"] == done["spec"]["nodeName"]
    assert run["requests"] == {"cpu": "100m", "memory": "64Mi"}
    assert run["created_at"] <= run["bound_at"] <= run["started_at"] <= run["ended_at"] <= run["removed_at"]
    assert (run["phase"], run["exit_code"], run["outcome"], run["running"]) == (
        "Succeeded",
        0,
        "succeeded",
        False,
    )


def test_failure_deletion_and_never_started(east: client.CoreV1Api, fed: SimFederation) -> None:
    failed, deleted, pending = unique("jf"), unique("jd"), unique("jp")
    east.create_namespaced_pod("default", pod_body(failed, annotations={"sim.fedsched.io/exit-code": "3"}))
    east.create_namespaced_pod("default", pod_body(deleted, annotations=LONG))
    east.create_namespaced_pod("default", pod_body(pending, nodeSelector={"nowhere": "true"}))
    fed["east-cpu"].wait_for_phase("default", deleted, "Running")
    east.delete_namespaced_pod(deleted, "default")
    east.delete_namespaced_pod(pending, "default")
    run = ended(fed, "east-cpu", failed)
    assert (run["outcome"], run["exit_code"], run["exit_codes"]) == ("failed", 3, {"base": 3})
    run = ended(fed, "east-cpu", deleted)
    assert (run["outcome"], run["exit_code"]) == ("deleted", 137)
    assert run["started_at"] <= run["deletion_requested_at"] <= run["ended_at"]
    run = ended(fed, "east-cpu", pending)
    assert (run["outcome"], run["node"], run["started_at"]) == ("deleted", None, None)


def test_evictions_and_preemption(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    pressure, api = unique("jev"), unique("japi")
    for name in (pressure, api):
        solo.create_namespaced_pod("default", pod_body(name, annotations=LONG))
        handle.wait_for_phase("default", name, "Running")
    handle.faults.evict_pod("default", pressure)
    handle.faults.api_evict("default", api)
    run = ended(small_fed, "solo", pressure)
    assert (run["outcome"], run["reason"], run["phase"]) == ("evicted", "Evicted", "Failed")
    run = ended(small_fed, "solo", api)
    assert (run["outcome"], run["reason"]) == ("evicted", "EvictionByEvictionAPI")

    low = [unique("jlow") for _ in range(2)]
    for name in low:
        solo.create_namespaced_pod("default", pod_body(name, cpu="1500m", annotations=LONG))
        handle.wait_for_phase("default", name, "Running")
    handle.priority_pod(unique("jvip"), cpu="1500m", memory="64Mi")
    victim = wait_for(
        lambda: next((r for r in handle.journal("default") if r["outcome"] == "preempted"), None)
    )
    assert victim["name"] in low and victim["reason"] == "PreemptionByScheduler"
    wait_for(lambda: ended(small_fed, "solo", victim["name"]))


def test_force_deleted_pod_on_an_unreachable_node_runs_until_the_node_is_back(
    small_fed: SimFederation, solo: client.CoreV1Api
) -> None:
    handle = small_fed["solo"]
    name = unique("jorphan")
    solo.create_namespaced_pod("default", pod_body(name, annotations=LONG))
    node = handle.wait_for_phase("default", name, "Running")["spec"]["nodeName"]
    handle.faults.node_not_ready(node)
    solo.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    handle.wait_for_gone("default", name)
    run = entry(small_fed, "solo", name)
    # Gone from the API, but its containers may still run on the partitioned node.
    assert run["removed_at"] and run["running"] and run["ended_at"] is None
    assert handle.node_loads()[node]["used"]["cpu"] == "100m"
    back = time.time()
    handle.faults.node_ready(node)
    run = entry(small_fed, "solo", name)
    assert not run["running"] and run["ended_at"] >= back and run["outcome"] == "deleted"
    assert "cpu" not in handle.node_loads()[node]["used"]


def test_control_endpoint_serves_the_journal_through_an_outage(
    small_fed: SimFederation, solo: client.CoreV1Api
) -> None:
    handle = small_fed["solo"]
    name = unique("jctl")
    solo.create_namespaced_pod("default", pod_body(name, labels={"team": "a"}))
    handle.wait_for_phase("default", name, "Succeeded")
    handle.faults.down()
    try:
        url = f"{small_fed.control_url}/sim/v1/clusters/solo/journal"

        def get(query: str = "", token: str | None = handle.token) -> Any:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            request = urllib.request.Request(url + query, headers=headers)
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())

        report = get("?labelSelector=team%3Da")
        assert [p["name"] for p in report["pods"]] == [name]
        assert report["cluster"] == "solo" and report["dropped"] == 0
        assert set(report["nodes"]) == {n["metadata"]["name"] for n in handle.nodes()}
        assert get("?labelSelector=team%3Db")["pods"] == []
        for query, token, status in (
            ("", None, 401),
            ("", "wrong", 401),
            ("?labelSelector=a%20b", handle.token, 400),
        ):
            with pytest.raises(urllib.error.HTTPError) as exc:
                get(query, token)
            assert exc.value.code == status and json.loads(exc.value.read())["kind"] == "Status"
    finally:
        handle.faults.up()


def test_node_loads_show_peaks_and_no_overcommit(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    names = [unique("jload") for _ in range(3)]
    for name in names:
        solo.create_namespaced_pod("default", pod_body(name, cpu="1", annotations=LONG))
    for name in names:
        handle.wait_for_phase("default", name, "Running")
    loads = handle.node_loads()
    assert sum(int(load["used"].get("pods", "0")) for load in loads.values()) == 3
    assert all(not load["overcommitted"] and load["overcommits"] == [] for load in loads.values())
    assert {load["allocatable"]["cpu"] for load in loads.values()} == {"2"}
    assert sorted(load["peak"]["cpu"] for load in loads.values()) == ["1", "2"]  # least-allocated spreads


def _pod(name: str, node: str, cpu: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": phase, "startTime": "2025-01-01T00:00:00Z"},
    }


def test_overcommit_detection() -> None:
    store = Store()
    journal = Journal("c", store, Clock())
    store.create("nodes", {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "2", "pods": "110"}}})
    store.create("pods", _pod("a", "n", "1500m"))
    assert journal.node_loads()["n"]["overcommits"] == []
    store.create("pods", _pod("b", "n", "1"))
    load = journal.node_loads()["n"]
    assert load["overcommitted"] and load["peak"]["cpu"] == "2500m"
    [incident] = load["overcommits"]
    assert incident["resources"] == {"cpu": {"used": "2500m", "allocatable": "2"}}
    assert incident["pods"] == ["default/a", "default/b"]
    store.mutate("pods", "default", "b", lambda p: p["status"].update(phase="Succeeded"))
    load = journal.node_loads()["n"]
    assert not load["overcommitted"] and load["used"]["cpu"] == "1500m" and len(load["overcommits"]) == 1


def test_who_was_sent_a_pod_after_it_ended_is_recorded(east: client.CoreV1Api, fed: SimFederation) -> None:
    """``end_seen``: the first time each client (User-Agent) was sent the pod in a terminal phase, by any
    read: a get, a list, a watch event. A read before the end, or a list whose selector leaves the ended
    pod out, tells nobody that it ended."""
    name = unique("js")
    east.api_client.user_agent = "early-reader"
    # 100 s of pod time run in 2 s at the tests' time scale: read while it runs, then wait for its end
    # through the simulator's own store (no API call).
    east.create_namespaced_pod("default", pod_body(name, annotations={"sim.fedsched.io/duration": "100"}))
    fed["east-cpu"].wait_for_phase("default", name, "Running")
    assert east.read_namespaced_pod(name, "default").status.phase == "Running"
    fed["east-cpu"].wait_for_phase("default", name, "Succeeded")
    assert entry(fed, "east-cpu", name)["end_seen"] == {}

    east.api_client.user_agent = "running-lister"
    running = east.list_namespaced_pod("default", field_selector="status.phase=Running")
    assert name not in {p.metadata.name for p in running.items}
    assert entry(fed, "east-cpu", name)["end_seen"] == {}

    before = time.time()
    east.api_client.user_agent = "lister"
    east.list_namespaced_pod("default", label_selector="")
    east.api_client.user_agent = "getter"
    east.read_namespaced_pod(name, "default")
    east.read_namespaced_pod(name, "default")
    east.api_client.user_agent = "watcher"
    events = watch.Watch().stream(
        east.list_namespaced_pod, "default", field_selector=f"metadata.name={name}", timeout_seconds=5
    )
    assert next(events)["object"].status.phase == "Succeeded"
    events.close()
    seen = entry(fed, "east-cpu", name)["end_seen"]
    assert set(seen) == {"lister", "getter", "watcher"}
    assert before <= seen["lister"] <= seen["getter"] <= time.time()
    east.delete_namespaced_pod(name, "default")
