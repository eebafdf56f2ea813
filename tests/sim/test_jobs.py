"""batch/v1 Jobs through the official client: pods and labels, completions, parallelism, backoff, deletion."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.sim.conftest import unique


@pytest.fixture
def batch(solo: client.CoreV1Api) -> Iterator[client.BatchV1Api]:
    yield client.BatchV1Api(solo.api_client)


def job_body(
    name: str,
    completions: int | None = 1,
    parallelism: int | None = 1,
    duration: str = "1",
    exit_code: str = "0",
    backoff_limit: int | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            **({"completions": completions} if completions is not None else {}),
            **({"parallelism": parallelism} if parallelism is not None else {}),
            **({"backoffLimit": backoff_limit} if backoff_limit is not None else {}),
            **spec,
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {
                        "sim.fedsched.io/duration": duration,
                        "sim.fedsched.io/exit-code": exit_code,
                    },
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "base", "image": "busybox:1.36", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                },
            },
        },
    }


def pods_of(handle: Any, job: str) -> list[dict[str, Any]]:
    return [p for p in handle.pods("default") if (p["metadata"].get("labels") or {}).get("job-name") == job]


def condition(job: client.V1Job, ctype: str) -> client.V1JobCondition | None:
    return next((c for c in job.status.conditions or [] if c.type == ctype and c.status == "True"), None)


def test_job_runs_completions_with_parallelism(small_fed: SimFederation, batch: client.BatchV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("job")
    created = batch.create_namespaced_job(
        "default", job_body(name, completions=3, parallelism=2, duration="2")
    )
    uid = created.metadata.uid
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert created.spec.backoff_limit == 6 and created.spec.completion_mode == "NonIndexed"
    # Never more than `parallelism` pods at once.
    active = wait_for(lambda: [p for p in pods_of(handle, name) if p["status"].get("phase") == "Running"])
    assert len(active) <= 2
    pod = active[0]
    assert {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
        "app": name,
    }.items() <= pod["metadata"]["labels"].items()
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Job", name, uid, True)
    done = wait_for(
        lambda: condition(j := batch.read_namespaced_job_status(name, "default"), "Complete") and j, 15
    )
    assert (done.status.succeeded, done.status.active, done.status.failed) == (3, None, None)
    assert done.status.start_time and done.status.completion_time
    assert len(pods_of(handle, name)) == 3
    # The pods' ends are recorded: no tracking finalizer left.
    assert all(not p["metadata"].get("finalizers") for p in pods_of(handle, name))
    peak = max(
        sum(1 for r in runs if r["started_at"] <= t < (r["ended_at"] or float("inf")))
        for runs in [[r for r in handle.journal("default") if r["labels"].get("job-name") == name]]
        for t in (r["started_at"] for r in runs)
    )
    assert peak <= 2
    reasons = [e["reason"] for e in handle.events("default", name) if e["involvedObject"]["kind"] == "Job"]
    assert reasons.count("SuccessfulCreate") == 3 and "Completed" in reasons


def test_backoff_limit_fails_the_job(small_fed: SimFederation, batch: client.BatchV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("jobfail")
    batch.create_namespaced_job("default", job_body(name, exit_code="2", backoff_limit=1))
    failed = wait_for(lambda: condition(j := batch.read_namespaced_job(name, "default"), "Failed") and j, 15)
    assert condition(failed, "Failed").reason == "BackoffLimitExceeded"
    assert failed.status.failed == 2 and not failed.status.succeeded
    assert [p["status"]["phase"] for p in pods_of(handle, name)] == ["Failed", "Failed"]


def test_indexed_job_and_suspend(small_fed: SimFederation, batch: client.BatchV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("jobidx")
    batch.create_namespaced_job(
        "default", job_body(name, completions=3, parallelism=3, completionMode="Indexed", suspend=True)
    )
    suspended = wait_for(
        lambda: condition(j := batch.read_namespaced_job(name, "default"), "Suspended") and j
    )
    assert not pods_of(handle, name) and not suspended.status.active
    batch.patch_namespaced_job(name, "default", {"spec": {"suspend": False}})
    done = wait_for(lambda: condition(j := batch.read_namespaced_job(name, "default"), "Complete") and j, 15)
    assert done.status.completed_indexes == "0-2"
    indexes = sorted(
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods_of(handle, name)
    )
    assert indexes == ["0", "1", "2"]


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_deleting_a_job_deletes_its_pods(
    small_fed: SimFederation, batch: client.BatchV1Api, policy: str
) -> None:
    handle = small_fed["solo"]
    name = unique("jobdel")
    batch.create_namespaced_job("default", job_body(name, completions=2, parallelism=2, duration="3600"))
    wait_for(lambda: len([p for p in pods_of(handle, name) if p["status"].get("phase") == "Running"]) == 2)
    batch.delete_namespaced_job(name, "default", propagation_policy=policy)
    if policy == "Foreground":
        # The Job stays, terminating, until its pods are gone.
        job = batch.read_namespaced_job(name, "default")
        assert job.metadata.deletion_timestamp and "foregroundDeletion" in job.metadata.finalizers
    wait_for(lambda: not pods_of(handle, name), 15, message="pods deleted with the job")
    wait_for(lambda: name not in {j.metadata.name for j in batch.list_namespaced_job("default").items})
    runs = [r for r in handle.journal("default") if r["labels"].get("job-name") == name]
    assert (
        len(runs) == 2 and {r["outcome"] for r in runs} == {"deleted"} and not any(r["running"] for r in runs)
    )


def test_default_deletion_orphans_the_pods(small_fed: SimFederation, batch: client.BatchV1Api) -> None:
    handle = small_fed["solo"]
    name = unique("joborphan")
    batch.create_namespaced_job("default", job_body(name, duration="3600"))
    wait_for(lambda: [p for p in pods_of(handle, name) if p["status"].get("phase") == "Running"])
    batch.delete_namespaced_job(name, "default")  # batch/v1's default propagation: Orphan
    wait_for(lambda: name not in {j.metadata.name for j in batch.list_namespaced_job("default").items})
    [pod] = wait_for(lambda: [p for p in pods_of(handle, name) if not p["metadata"].get("ownerReferences")])
    assert pod["status"]["phase"] == "Running" and not pod["metadata"].get("finalizers")


def test_job_validation_and_listing(small_fed: SimFederation, batch: client.BatchV1Api) -> None:
    with pytest.raises(ApiException) as always:
        body = job_body(unique("jobbad"))
        body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
        batch.create_namespaced_job("default", body)
    assert always.value.status == 422
    assert "spec.template.spec.restartPolicy" in json.loads(always.value.body)["message"]
    name = unique("joblist")
    batch.create_namespaced_job("default", job_body(name))
    assert name in {j.metadata.name for j in batch.list_job_for_all_namespaces().items}
    with pytest.raises(ApiException) as immutable:
        batch.patch_namespaced_job(
            name, "default", {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}
        )
    assert immutable.value.status == 422 and "immutable" in json.loads(immutable.value.body)["message"]


def test_quota_refusals_are_retried(small_fed: SimFederation, batch: client.BatchV1Api) -> None:
    handle = small_fed["solo"]
    handle.set_quota("default", {"pods": "1"})
    name = unique("jobquota")
    batch.create_namespaced_job("default", job_body(name, completions=2, parallelism=2))
    done = wait_for(lambda: condition(j := batch.read_namespaced_job(name, "default"), "Complete") and j, 15)
    assert done.status.succeeded == 2
    failed_creates = [e for e in handle.events("default", name) if e["reason"] == "FailedCreate"]
    assert failed_creates and "exceeded quota: compute" in failed_creates[0]["message"]
    runs = sorted(
        (r for r in handle.journal("default") if r["labels"].get("job-name") == name),
        key=lambda r: r["started_at"],
    )
    assert (
        len(runs) == 2 and runs[0]["ended_at"] <= runs[1]["started_at"]
    )  # never two at once under the quota
