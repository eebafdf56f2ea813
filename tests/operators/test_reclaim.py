"""Giving borrowed capacity back, end to end: real Airflow, the real hook and clients over HTTP, the
simulated API server's Eviction API (issue 15). The borrowing pods stand for another tenant's preemptible
tasks (their operators' move on eviction is tested in test_federated_operator.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_provider_fedsched.federation.resources import parse_resource_list, pod_requests
from airflow_provider_fedsched.kube.labels import PREEMPTIBLE_LABEL, TENANT_LABEL
from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.operators.test_federated_operator import path, pods_of, run

pytestmark = [pytest.mark.airflow]

TENANTS = [
    {"name": "team-a", "quota": {"cpu": "4"}, "guaranteed": {"cpu": "4"}},
    {"name": "team-b", "quota": {"cpu": "2"}, "reclaimable": True},
]


def borrow_every_cpu(fed: SimFederation, cluster: str) -> list[str]:
    """team-b's preemptible pods on every cpu of the cluster (2 cpu each), far beyond its 2-cpu quota."""
    handle = fed[cluster]
    names = []
    allocatable = sum(parse_resource_list(n["status"]["allocatable"])["cpu"] for n in handle.nodes())
    requested = sum(
        pod_requests(p["spec"]).get("cpu", 0)
        for p in handle.pods()
        if p["status"].get("phase") in ("Pending", "Running")
    )
    free = (allocatable - requested) // 1000
    for index in range(free // 2):
        name = f"team-b-borrowed-{index}"
        handle.create_pod(
            "default",
            {
                "metadata": {
                    "name": name,
                    "labels": {TENANT_LABEL: "team-b", PREEMPTIBLE_LABEL: "true"},
                    "annotations": {"sim.fedsched.io/duration": "36000"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "base",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                        }
                    ],
                },
            },
        )
        names.append(name)
    wait_for(
        lambda: all(
            (handle.pod("default", n) or {}).get("status", {}).get("phase") == "Running" for n in names
        ),
        timeout=60,
        interval=0.1,
    )
    return names


def test_a_tenant_within_its_guarantee_gets_borrowed_capacity_back(
    sim_federation: SimFederation, federation: Path
) -> None:
    spec = yaml.safe_load(federation.read_text())
    federation.write_text(yaml.safe_dump({**spec, "tenants": TENANTS}))
    borrowed = borrow_every_cpu(sim_federation, "east-cpu")
    try:
        state, record, _ = run("fed_reclaim")
        assert state == "success" and record is not None
        assert path(record) == [("east-cpu", "succeeded")]
        reclaims = [d["extra"]["reclaim"] for d in record["decisions"] if "reclaim" in d.get("extra", {})]
        assert len(reclaims) == 1, json.dumps(record["decisions"])[:3000]
        assert "team-a is within its guaranteed cpu" in reclaims[0] and "1 pod(s) of team-b" in reclaims[0]
        handle = sim_federation["east-cpu"]
        left = [n for n in borrowed if handle.pod("default", n) is not None]
        assert len(left) == len(borrowed) - 1  # just enough was given back: one 2-cpu pod for 2 cpu
    finally:
        for name in borrowed:
            if sim_federation["east-cpu"].pod("default", name) is not None:
                sim_federation["east-cpu"].delete_pod("default", name, grace=0)
    assert pods_of(sim_federation, "fed_reclaim") == []
