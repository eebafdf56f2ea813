"""The pod lifecycle as kwok Stages (pod-stages.yaml): jq selectors and delays, Go templates, patches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_provider_fedsched.sim.controllers import gotemplate
from airflow_provider_fedsched.sim.controllers import stages as st

FUNCS = {"NodeIPWith": lambda node: "10.0.0.1", "PodIPWith": lambda *args: "10.244.0.9"}


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": "0123456789",
            "annotations": {"sim.fedsched.io/startup-delay": "3", "sim.fedsched.io/exit-code": "2"},
        },
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Never",
            "containers": [{"name": "base", "image": "busybox:1.36"}],
        },
        "status": {"phase": "Pending", **status},
    }


def play(stage: st.Stage, obj: dict[str, Any]) -> dict[str, Any]:
    for step in stage.steps:
        if "patch" in step:
            obj = st.apply_patch(obj, step["patch"], st.render_patch(step["patch"], obj, FUNCS))
    return obj


def only_match(obj: dict[str, Any]) -> st.Stage | None:
    """The one stage that matches: kwok picks at random among several, so the stages exclude each other."""
    found = st.matching(st.load_stages(), obj)
    assert len(found) <= 1, [s.name for s in found]
    return found[0] if found else None


def test_the_lifecycle_is_read_from_the_kwok_stages() -> None:
    names = [s.name for s in st.load_stages()]
    assert names == [
        "fedsched-pod-start",
        "fedsched-pod-image-pull-error",
        "fedsched-pod-image-pull-backoff",
        "fedsched-pod-image-pull-retry",
        "fedsched-pod-run",
        "fedsched-pod-restart",
        "fedsched-pod-sidecar-killed",
        "fedsched-pod-evict",
        "fedsched-pod-kill",
        "fedsched-pod-remove",
    ]
    objects = st.read_stage_objects()
    assert all(o["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and o["kind"] == "Stage" for o in objects)


def test_a_pod_runs_ends_and_is_removed_stage_by_stage() -> None:
    bound = pod()
    start = only_match(bound)
    assert start is not None and start.name == "fedsched-pod-start"
    assert start.delay(st.document(bound)) == 3.0
    running = play(start, bound)
    [status] = running["status"]["containerStatuses"]
    assert running["status"]["phase"] == "Running" and running["status"]["podIP"] == "10.244.0.9"
    assert status["state"]["running"]["startedAt"] and status["containerID"] == "kwok://0123456789-base"
    assert {c["type"]: c["status"] for c in running["status"]["conditions"]}["Ready"] == "True"
    run = only_match(running)
    assert run is not None and run.name == "fedsched-pod-run" and run.delay(st.document(running)) == 1.0
    failed = play(run, running)
    [status] = failed["status"]["containerStatuses"]
    assert failed["status"]["phase"] == "Failed"
    assert (
        status["state"]["terminated"]["exitCode"] == 2 and status["state"]["terminated"]["reason"] == "Error"
    )
    assert only_match(failed) is None
    failed["metadata"].update(deletionTimestamp="t", deletionGracePeriodSeconds=30)
    remove = only_match(failed)
    assert remove is not None and remove.name == "fedsched-pod-remove"
    assert remove.delay(st.document(failed)) == 0.0  # it had ended: at once
    bound["metadata"].update(deletionTimestamp="t", deletionGracePeriodSeconds=30)
    assert remove.delay(st.document(bound)) == 0.0  # none ran: at once


def test_a_graceful_deletion_kills_what_runs() -> None:
    running = play(st.load_stages()[0], pod())
    running["metadata"].update(deletionTimestamp="t", deletionGracePeriodSeconds=30)
    kill = only_match(running)
    assert kill is not None and kill.name == "fedsched-pod-kill"
    killed = play(kill, running)
    terminated = killed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], killed["status"]["phase"]) == (
        137,
        "Error",
        "Failed",
    )
    remove = only_match(killed)
    assert remove is not None and remove.name == "fedsched-pod-remove"
    assert remove.delay(st.document(killed)) == 30.0  # the deletion killed it: the grace period


def test_restarts_back_off_as_the_kubelet_does() -> None:
    bound = pod()
    bound["spec"]["restartPolicy"] = "OnFailure"
    running = play(st.load_stages()[0], bound)
    delays = []
    for _ in range(7):
        crashed = play(st.load_stages()[4], running)
        [status] = crashed["status"]["containerStatuses"]
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert status["lastState"]["terminated"]["exitCode"] == 2 and crashed["status"]["phase"] == "Running"
        restart = only_match(crashed)
        assert restart is not None and restart.name == "fedsched-pod-restart"
        delays.append(restart.delay(st.document(crashed)))
        running = play(restart, crashed)
        assert "running" in running["status"]["containerStatuses"][0]["state"]
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert running["status"]["containerStatuses"][0]["restartCount"] == 7


def test_an_image_that_cannot_be_pulled_backs_off() -> None:
    bound = pod()
    bound["metadata"]["annotations"]["sim.fedsched.io/image-pull-error"] = "manifest unknown"
    error = only_match(bound)
    assert error is not None and error.name == "fedsched-pod-image-pull-error"
    pulling = play(error, bound)
    waiting = pulling["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "ErrImagePull", "message": "manifest unknown"}
    backoff = only_match(pulling)
    assert backoff is not None and backoff.name == "fedsched-pod-image-pull-backoff"
    backing_off = play(backoff, pulling)
    assert backing_off["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    retry = only_match(backing_off)
    assert retry is not None and retry.name == "fedsched-pod-image-pull-retry"
    # About 10 s after the first failure, then doubling (the time since the start, plus 10 s), at most 300.
    for elapsed, delay in [(1, 11), (100, 110), (1000, 300)]:
        started = (datetime.now(UTC) - timedelta(seconds=elapsed)).strftime("%Y-%m-%dT%H:%M:%SZ")
        backing_off["status"]["startTime"] = started
        assert retry.delay(st.document(backing_off)) == pytest.approx(delay, abs=1.5)


def test_the_sidecar_ends_once_killed_and_the_main_container_is_done() -> None:
    bound = pod()
    bound["spec"]["containers"].append({"name": "airflow-xcom-sidecar", "image": "alpine"})
    bound["metadata"]["annotations"]["sim.fedsched.io/exit-code"] = "0"
    running = play(st.load_stages()[0], bound)
    ended = play(st.load_stages()[4], running)
    assert ended["status"]["phase"] == "Running"  # the sidecar still runs
    assert only_match(ended) is None
    ended["metadata"]["annotations"]["sim.fedsched.io/sidecar-killed"] = "true"
    killed = only_match(ended)
    assert killed is not None and killed.name == "fedsched-pod-sidecar-killed"
    done = play(killed, ended)
    assert done["status"]["phase"] == "Succeeded"
    assert [s["state"]["terminated"]["exitCode"] for s in done["status"]["containerStatuses"]] == [0, 0]


def test_selectors_follow_kwok() -> None:
    doc = st.document({"a": {"b": [{"c": 1}, {"c": 2}], "x/y": "z", "t": True, "n": None}})
    assert st.Requirement(".a.b.[].c", "In", ("2",)).matches(doc)
    assert st.Requirement(".a.b.[].c", "NotIn", ("3",)).matches(doc)
    assert st.Requirement('.a["x/y"]', "In", ("z",)).matches(doc)
    assert st.Requirement(".a.t", "In", ("true",)).matches(doc)
    assert st.Requirement(".a.n", "DoesNotExist").matches(doc)  # null is no value
    assert st.Requirement(".a.missing.[]", "DoesNotExist").matches(doc)  # an error is no value
    assert not st.Requirement(".a.missing.[]", "In", ("x",)).matches(doc)
    assert st.go_duration("1m30s") == 90 and st.go_duration("250ms") == 0.25 and st.go_duration("x") is None


def test_go_templates() -> None:
    data = {"items": [{"name": "a"}, {"name": "b"}], "n": 0, "m": {"k": "v"}}
    text = (
        '{{ $seen := "" }}{{ range $i, $e := .items }}{{ if $i }},{{ end }}{{ $e.name }}{{ $seen = .name }}'
        "{{ end }} last={{ $seen }}"
    )
    assert gotemplate.render(text, data) == "a,b last=b"
    assert gotemplate.render('{{ if .n }}x{{ else if .m }}{{ index .m "k" }}{{ end }}', data) == "v"
    assert gotemplate.render('{{- " a " -}}  {{ printf "%s-%d" "x" 3 | printf "%q" }}', data) == ' a "x-3"'
    assert gotemplate.render("{{ .missing }} {{ (index .items 1).name }}", data) == "<no value> b"
    assert gotemplate.render("{{ range .none }}x{{ else }}empty{{ end }}", data) == "empty"
    with pytest.raises(gotemplate.TemplateError):
        gotemplate.render("{{ with .m }}{{ end }}", data)


def test_the_test_bed_plays_the_same_stages_gated_on_its_agent_and_scaled() -> None:
    from airflow_provider_fedsched.testbed.stages import PREPARED, kwok_stages

    objects = kwok_stages(0.25)
    assert [o["metadata"]["name"] for o in objects[:2]] == [
        "fedsched-node-initialize",
        "fedsched-node-heartbeat",
    ]
    played = [st.compile_stage(o) for o in objects[2:]]
    shared = st.load_stages()
    assert [s.name for s in played] == [s.name for s in shared]
    bound = pod()
    assert not played[0].matches(st.document(bound))  # the agent has not prepared it
    bound["metadata"]["annotations"][PREPARED] = "true"
    assert played[0].matches(st.document(bound)) and played[0].delay(st.document(bound)) == 0.75
    running = play(shared[0], bound)
    assert played[4].delay(st.document(running)) == 0.25 * shared[4].delay(st.document(running))
