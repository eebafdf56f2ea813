"""The triggers' events (``triggers/events.py``): one typed, versioned model, read by one function.

An event a task stored under the previous release (format 1, ``events_v1.json``: one per kind and call
site of that release's triggers) still decodes, into the kind its ``status`` named, with every field it
carried; what the triggers write now (format 2) is the same payload with its ``version``; anything else is
an error naming the field at fault, never news the operator acts on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.triggers.events import (
    EVENT_VERSION,
    KINDS,
    Changed,
    Done,
    Event,
    FencedDone,
    Lost,
    PodEvent,
    UnreadableEvent,
    WaitEvent,
    decode,
)
from airflow_provider_fedsched.triggers.pod import FederatedPodTrigger

FIXTURE = json.loads((Path(__file__).parent / "events_v1.json").read_text(encoding="utf-8"))["events"]
POD_TRIGGER = "airflow_provider_fedsched.triggers.pod.FederatedPodTrigger"


def without(payload: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k != key}


def expected_kind(trigger: str) -> type[Event]:
    return PodEvent if trigger == POD_TRIGGER else WaitEvent


def test_the_fixture_holds_every_kind_of_both_triggers() -> None:
    assert set(KINDS) == {
        "done", "evicted", "unschedulable", "gone", "lost", "timeout", "fenced_done", "error", "cancelled",
        "changed", "deadline",
    }  # fmt: skip
    assert {entry["payload"]["status"] for entry in FIXTURE.values()} == set(KINDS)


@pytest.mark.parametrize("case", sorted(FIXTURE))
def test_an_event_of_the_previous_release_decodes_with_the_same_meaning(case: str) -> None:
    trigger, payload = FIXTURE[case]["trigger"], FIXTURE[case]["payload"]
    assert "version" not in payload  # format 1 carried none

    event = decode(payload, expected_kind(trigger))

    assert type(event) is KINDS[payload["status"]] and event.version == 1
    fields = event.model_dump()
    assert {key: fields[key] for key in payload} == payload  # every field, same value
    # Fields format 1 left out are the ones it never wrote for this kind (optional, empty).
    assert all(fields[key] is None for key in set(fields) - set(payload) - {"version"})
    assert decode(event.dump(), expected_kind(trigger)) == event


def test_the_fields_the_operator_acts_on_read_as_format_1_wrote_them() -> None:
    done = decode(FIXTURE["done_succeeded"]["payload"], PodEvent)
    assert isinstance(done, Done) and done.phase == "Succeeded" and done.fedsched_cluster == "east-cpu"
    assert (done.name, done.namespace) == ("fed-train-abc123", "default")
    running = decode(FIXTURE["done_base_terminated_sidecar_running"]["payload"], PodEvent)
    assert isinstance(running, Done) and running.phase == "Running"
    lost = decode(FIXTURE["lost_unanswered"]["payload"], PodEvent)
    assert isinstance(lost, Lost) and lost.unanswered_seconds == pytest.approx(302.4)
    assert lost.message == "connection refused at https://127.0.0.1:6443 for 302s"
    node = decode(FIXTURE["lost_node_not_ready"]["payload"], PodEvent)
    assert isinstance(node, Lost) and node.unanswered_seconds is None
    fenced = decode(FIXTURE["fenced_done"]["payload"], PodEvent)
    assert isinstance(fenced, FencedDone)
    assert (fenced.fenced_cluster, fenced.fenced_pod) == ("west-general", "fed-train-abc122")
    changed = decode(FIXTURE["wait_changed"]["payload"], WaitEvent)
    assert isinstance(changed, Changed) and changed.message.startswith("east-cpu has room")


@pytest.mark.parametrize("case", sorted(c for c in FIXTURE if FIXTURE[c]["trigger"] == POD_TRIGGER))
def test_the_pod_trigger_writes_format_1s_payload_with_its_version(case: str) -> None:
    """Rebuilt through the trigger's own ``_event`` from format 1's fields: the same keys and values,
    plus ``version`` (and an optional field format 1 left out, empty)."""
    old = FIXTURE[case]["payload"]
    trigger = FederatedPodTrigger(
        federation="/fed.yaml",
        cluster=old["fedsched_cluster"],
        conn_id="k8s_east",
        pod_name=old["name"],
        pod_namespace=old["namespace"],
        not_before=0.0,
        deferred_at=0.0,
    )
    extra = {
        k: v
        for k, v in old.items()
        if k not in ("status", "name", "namespace", "message", "fedsched_cluster")
    }

    payload = trigger._event(KINDS[old["status"]], old["message"], **extra).payload  # type: ignore[arg-type]

    assert payload["version"] == EVENT_VERSION == 2
    assert {key: payload[key] for key in old} == old
    assert all(payload[key] is None for key in set(payload) - set(old) - {"version"})
    json.dumps(payload)  # what the metadata database stores


def test_keys_given_as_trigger_kwargs_ride_along() -> None:
    trigger = FederatedPodTrigger(
        federation="/fed.yaml", cluster="east-cpu", conn_id=None, pod_name="p", pod_namespace="default",
        trigger_kwargs={"team": "ml"},
    )  # fmt: skip
    payload = trigger._event(Done, "pod Succeeded", phase="Succeeded").payload
    assert payload["team"] == "ml"
    assert decode(payload, PodEvent).model_dump()["team"] == "ml"


GOOD: dict[str, Any] = FIXTURE["done_succeeded"]["payload"]
LOST: dict[str, Any] = FIXTURE["lost_unanswered"]["payload"]


@pytest.mark.parametrize(
    ("payload", "expected", "named"),
    [
        ({**GOOD, "status": "finished"}, PodEvent, "status: Input tag 'finished'"),
        (without(GOOD, "status"), PodEvent, "status:"),
        ({**GOOD, "status": 7}, PodEvent, "status:"),
        (
            {key: value for key, value in GOOD.items() if key != "fedsched_cluster"},
            PodEvent,
            "fedsched_cluster:",
        ),
        (without(GOOD, "message"), PodEvent, "message:"),
        ({**GOOD, "name": ["p"]}, PodEvent, "name:"),
        ({**GOOD, "version": 3}, PodEvent, "version:"),
        (
            {**FIXTURE["lost_unanswered"]["payload"], "unanswered_seconds": "a while"},
            PodEvent,
            "unanswered_seconds:",
        ),
        (
            {k: v for k, v in FIXTURE["fenced_done"]["payload"].items() if k != "fenced_pod"},
            PodEvent,
            "fenced_pod:",
        ),
        (FIXTURE["wait_changed"]["payload"], PodEvent, "status: 'changed' is not a PodEvent"),
        (GOOD, WaitEvent, "status: 'done' is not a WaitEvent"),
        (["done"], PodEvent, "a list, not a mapping"),
        (None, WaitEvent, "a NoneType, not a mapping"),
    ],
)
def test_an_event_that_is_not_one_is_an_error_naming_the_field(
    payload: object, expected: type[Event], named: str
) -> None:
    with pytest.raises(UnreadableEvent) as caught:
        decode(payload, expected)
    assert named in str(caught.value)
    assert str(caught.value).startswith("the trigger's event ")
    assert len(str(caught.value)) <= 300
