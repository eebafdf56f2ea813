"""What the provider's triggers tell the operator: one typed, versioned model of their events.

A trigger builds one of these classes and yields ``TriggerEvent(event.dump())``; Airflow stores the payload
in the metadata database (the task instance's ``next_kwargs``) until the task resumes, and the operator
reads it back with :func:`decode`, the one place an event is read. An event that is not one of these (an
unknown kind or version, a field missing or of the wrong type) is an :class:`UnreadableEvent` naming the
field, never taken for news it does not carry.

The kind of an event is its ``status`` key, as in format 1 (the events of the releases before versioning,
which share the key with KubernetesPodTrigger's). Format 2 adds ``version`` and keeps every other key, so
an event a task stored under the previous release still decodes, with the same meaning
(``tests/triggers/events_v1.json`` holds one of each). Keys a trigger was given as ``trigger_kwargs`` ride
along, as KubernetesPodTrigger's do.

The pod trigger's kinds (``triggers/pod.py``), each news the operator must act on; a timer alone never
judges an attempt, the operator reads the pod again:

=============== ==================================================================================
``done``        the pod ended (``phase``: Succeeded, Failed; or its base container terminated)
``evicted``     the pod was evicted or preempted
``unschedulable`` the pod stayed unschedulable past its grace, or was not scheduled in time
``gone``        the pod no longer exists
``lost``        the cluster (or the pod's node) did not answer past the grace (``unanswered_seconds``)
``timeout``     the task's ``execution_timeout`` passed
``fenced_done`` a pod the try left in a silent cluster Succeeded (``fenced_pod``, ``fenced_cluster``)
``error``       the trigger could not watch the pod: the operator deletes it and fails the try
``cancelled``   the task instance left ``deferred`` while the trigger waited (nobody resumes it)
=============== ==================================================================================

The wait trigger's (``triggers/wait.py``): ``changed`` (the waiting try's decision is no longer "wait")
and ``deadline`` (the wait's deadline passed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from airflow_provider_fedsched.federation._errors import PermanentError

__all__ = [
    "EVENT_VERSION",
    "KINDS",
    "AnyEvent",
    "Cancelled",
    "Changed",
    "Deadline",
    "Done",
    "Error",
    "Event",
    "Evicted",
    "FencedDone",
    "Gone",
    "Lost",
    "PodEvent",
    "Timeout",
    "UnreadableEvent",
    "Unschedulable",
    "WaitEvent",
    "decode",
]

EVENT_VERSION: Final = 2
"""The format triggers write. 1: the releases before versioning (no ``version`` key); 2: adds it."""


class UnreadableEvent(PermanentError, ValueError):
    """A payload that is not an event of the provider's triggers; the message names the field at fault."""


class Event(BaseModel):
    """What every event carries."""

    model_config = ConfigDict(extra="allow", frozen=True)

    version: Literal[1, 2] = EVENT_VERSION
    """The format the event was written in (a payload without the key is format 1)."""
    status: str
    """The kind of event (each class fixes it)."""
    message: str
    """What happened, for a person (logged and recorded as it is)."""

    def dump(self) -> dict[str, Any]:
        """The payload of the ``TriggerEvent``: JSON types only, as the metadata database stores it."""
        return self.model_dump(mode="json")


class PodEvent(Event):
    """News of the pod one attempt runs (``triggers/pod.py``)."""

    name: str
    """The pod's name."""
    namespace: str
    """The pod's namespace."""
    fedsched_cluster: str
    """The member cluster the pod runs in."""


class Done(PodEvent):
    status: Literal["done"] = "done"
    phase: str | None = None
    """The pod's phase when seen ended: Succeeded, Failed, or another phase (or none) when its base
    container terminated while a sidecar keeps the pod running."""


class Evicted(PodEvent):
    status: Literal["evicted"] = "evicted"


class Unschedulable(PodEvent):
    status: Literal["unschedulable"] = "unschedulable"


class Gone(PodEvent):
    status: Literal["gone"] = "gone"


class Lost(PodEvent):
    status: Literal["lost"] = "lost"
    unanswered_seconds: float | None = None
    """How long the API server did not answer (none when its node, not its cluster, went silent)."""


class Timeout(PodEvent):
    status: Literal["timeout"] = "timeout"


class FencedDone(PodEvent):
    status: Literal["fenced_done"] = "fenced_done"
    fenced_pod: str
    """The pod an earlier attempt of this try left in a cluster that stopped answering: it Succeeded."""
    fenced_cluster: str
    """The cluster that pod is in."""


class Error(PodEvent):
    status: Literal["error"] = "error"


class Cancelled(PodEvent):
    status: Literal["cancelled"] = "cancelled"


class WaitEvent(Event):
    """News for a try waiting for a compliant cluster (``triggers/wait.py``)."""


class Changed(WaitEvent):
    status: Literal["changed"] = "changed"


class Deadline(WaitEvent):
    status: Literal["deadline"] = "deadline"


AnyEvent = (
    Done
    | Evicted
    | Unschedulable
    | Gone
    | Lost
    | Timeout
    | FencedDone
    | Error
    | Cancelled
    | Changed
    | Deadline
)
"""Every kind of event, told apart by ``status``: the one list of kinds."""

KINDS: dict[str, type[Event]] = {kind.model_fields["status"].default: kind for kind in get_args(AnyEvent)}
"""Each kind of event by its ``status``."""

_ANY_EVENT: TypeAdapter[Event] = TypeAdapter(Annotated[AnyEvent, Field(discriminator="status")])
_TAGS = frozenset(KINDS)
_MAX_DETAIL = 300

_E = TypeVar("_E", bound=Event)


def decode(payload: object, expected: type[_E]) -> _E:
    """The event a trigger stored, of the kind ``expected`` (:class:`PodEvent`, :class:`WaitEvent` or one
    kind), in format 1 or 2; else :class:`UnreadableEvent` naming the field at fault."""
    if not isinstance(payload, Mapping):
        raise UnreadableEvent(f"the trigger's event is a {type(payload).__name__}, not a mapping of fields")
    data = dict(payload)
    data.setdefault("version", 1)  # written before events carried their format
    try:
        event = _ANY_EVENT.validate_python(data)
    except ValidationError as exc:
        raise UnreadableEvent(_describe(exc)) from None
    if not isinstance(event, expected):
        raise UnreadableEvent(
            f"the trigger's event is unreadable: status: {event.status!r} is not a {expected.__name__}"
        )
    return event


def _describe(exc: ValidationError) -> str:
    """The first field at fault and why, bounded (a payload may be large)."""
    first = exc.errors(include_url=False)[0]
    # A discriminated union puts the kind in the location (("done", "phase")): keep the field's path.
    where = ".".join(str(part) for part in first["loc"] if part not in _TAGS) or "the event"
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        where = "status"
    detail = f"the trigger's event is unreadable: {where}: {first['msg']}"
    return detail if len(detail) <= _MAX_DETAIL else detail[: _MAX_DETAIL - 3] + "..."
