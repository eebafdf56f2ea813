"""The pod lifecycle as data: pod-stages.yaml, its selectors, delays and templates."""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched.sim.controllers import stages as st


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "0123456789", "annotations": {"sim.fedsched.io/startup-delay": "3"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "base", "image": "busybox:1.36"}]},
        "status": {"phase": "Pending", **status},
    }


def test_the_lifecycle_is_read_from_yaml_in_order() -> None:
    names = [s.name for s in st.load_stages()]
    assert names == [
        "pod-delete",
        "pod-remove-killed",
        "pod-remove",
        "pod-create",
        "pod-image-pull-error",
        "pod-image-pull-backoff",
        "pod-image-pull-retry",
        "pod-ready",
    ]


def test_each_phase_of_a_pod_matches_its_stage() -> None:
    stages = st.load_stages()
    bound = pod()
    assert st.first_match(stages, bound).name == "pod-create"  # type: ignore[union-attr]
    creating = pod(
        startTime="t",
        containerStatuses=[{"name": "base", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    )
    ready = st.first_match(stages, creating)
    assert ready is not None and ready.name == "pod-ready" and st.delay_of(ready, creating, 0) == 3.0
    running = pod(
        startTime="t", phase="Running", containerStatuses=[{"name": "base", "state": {"running": {}}}]
    )
    assert st.first_match(stages, running) is None  # containers run; the kubelet waits for their exit
    running["metadata"]["deletionTimestamp"] = "t"
    running["metadata"]["deletionGracePeriodSeconds"] = 30
    assert st.first_match(stages, running).name == "pod-delete"  # type: ignore[union-attr]
    killed = pod(containerStatuses=[{"name": "base", "state": {"terminated": {"exitCode": 137}}}])
    killed["metadata"].update(deletionTimestamp="t", deletionGracePeriodSeconds=30)
    remove = st.first_match(stages, killed)
    assert remove is not None and remove.name == "pod-remove-killed" and st.delay_of(remove, killed, 0) == 30


def test_backoff_and_templates() -> None:
    stages = {s.name: s for s in st.load_stages()}
    retry = stages["pod-image-pull-retry"]
    assert [st.delay_of(retry, pod(), n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    target = pod(
        startTime="t",
        containerStatuses=[{"name": "base", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    )

    def lookup(key: str) -> str | None:
        return {"now": "NOW", "pod.ip": "10.0.0.9", "pod.uid8": "01234567"}.get(key)

    st.apply_status(target, stages["pod-ready"].next.status, lookup)
    [status] = target["status"]["containerStatuses"]
    assert (
        status["state"] == {"running": {"startedAt": "NOW"}}
        and status["containerID"] == "sim://01234567-base"
    )
    assert target["status"]["phase"] == "Running" and target["status"]["podIP"] == "10.0.0.9"
    assert {c["type"]: c["status"] for c in target["status"]["conditions"]}["Ready"] == "True"
    events = st.events_of(stages["pod-ready"], target, lookup)
    assert ("Normal", "Started", "Started container base") in events


def test_selector_paths() -> None:
    obj = {"a": {"b": [{"c": 1}, {"c": 2}], "x/y": "z"}}
    assert st.values_at(obj, ".a.b[*].c") == [1, 2]
    assert st.values_at(obj, ".a.b[1].c") == [2]
    assert st.values_at(obj, '.a["x/y"]') == ["z"]
    assert st.values_at(obj, ".a.missing") == []
    expr = st.Expression(key=".a.b[*].c", operator="In", values=[2])
    assert st.matches(obj, [expr]) and not st.matches(obj, [expr.model_copy(update={"operator": "NotIn"})])
