"""The pod lifecycle as data (after kwok's Stage API): stages read from ``pod-stages.yaml``.

A stage has a ``selector`` (expressions over the pod's fields), a ``delay`` (seconds, optionally read from
an annotation or a field, with an optional backoff) and a ``next``: a status patch (conditions by type,
container statuses by name), events, and what happens to the containers (``start``, ``stop``) or the pod
(``delete``). Strings in ``next`` are templates: ``{now}``, ``{node.ip}``, ``{pod.ip}``, ``{pod.uid8}``,
``{containers}``, ``{annotation.KEY}``, and per container ``{container.name}``, ``{container.image}``,
``{container.startedAt}``, ``{container.containerID}``.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_fedsched.federation.documents import parse_yaml, read_text_file
from airflow_provider_fedsched.sim.apiserver.objects import set_condition
from airflow_provider_fedsched.sim.apiserver.patch import strategic_merge
from airflow_provider_fedsched.sim.apiserver.store import Obj
from airflow_provider_fedsched.sim.controllers.runtime import PREFIX, float_annotation

STAGES_FILE = Path(__file__).with_name("pod-stages.yaml")
_TOKEN = re.compile(r"\[(\*|\d+|\"[^\"]*\")\]|\.([A-Za-z0-9_-]+)")
_VAR = re.compile(r"\{([A-Za-z0-9_.\-/]+)\}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Expression(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[Any] = Field(default_factory=list)


class Backoff(_Model):
    factor: float = Field(2.0, ge=1)
    max: float = Field(300.0, ge=0)


class Delay(_Model):
    seconds: float = Field(0.0, ge=0)
    fromAnnotation: str | None = None
    fromField: str | None = None
    backoff: Backoff | None = None


class Event(_Model):
    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    message: str
    forEach: Literal["container"] | None = None
    where: list[Expression] = Field(default_factory=list)


class Next(_Model):
    status: dict[str, Any] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    containers: Literal["start", "stop"] | None = None
    delete: bool = False


class Stage(_Model):
    name: str
    selector: list[Expression] = Field(default_factory=list)
    delay: Delay = Field(default_factory=Delay)
    next: Next


class StageFile(_Model):
    stages: list[Stage]


def load_stages(path: Path = STAGES_FILE) -> list[Stage]:
    return StageFile.model_validate(parse_yaml(read_text_file(path, "stage file"), str(path))).stages


# -- selectors -------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _tokens(key: str) -> tuple[tuple[str, str], ...]:
    return tuple(_TOKEN.findall(key))


def values_at(obj: Any, key: str) -> list[Any]:
    """Every value at a path like ``.status.containerStatuses[*].state.waiting.reason``."""
    current = [obj]
    for index, attr in _tokens(key):
        step: list[Any] = []
        for item in current:
            if attr:
                if isinstance(item, dict) and attr in item:
                    step.append(item[attr])
            elif index == "*":
                if isinstance(item, list):
                    step.extend(item)
            elif index.startswith('"'):
                if isinstance(item, dict) and index[1:-1] in item:
                    step.append(item[index[1:-1]])
            elif isinstance(item, list) and int(index) < len(item):
                step.append(item[int(index)])
        current = step
    return [v for v in current if v is not None]


def matches(obj: Any, expressions: list[Expression]) -> bool:
    for expr in expressions:
        found = values_at(obj, expr.key)
        if expr.operator == "Exists" and not found:
            return False
        if expr.operator == "DoesNotExist" and found:
            return False
        if expr.operator == "In" and not any(v in expr.values for v in found):
            return False
        if expr.operator == "NotIn" and any(v in expr.values for v in found):
            return False
    return True


def first_match(stages: list[Stage], pod: Obj) -> Stage | None:
    return next((s for s in stages if matches(pod, s.selector)), None)


def delay_of(stage: Stage, pod: Obj, repeats: int) -> float:
    delay = stage.delay
    seconds = delay.seconds
    if delay.fromAnnotation:
        seconds = float_annotation(pod, delay.fromAnnotation.removeprefix(PREFIX), seconds)
    if delay.fromField:
        found = values_at(pod, delay.fromField)
        if found and isinstance(found[0], int | float) and not isinstance(found[0], bool):
            seconds = float(found[0])
    if delay.backoff is not None:
        seconds = min(seconds * delay.backoff.factor**repeats, delay.backoff.max)
    return max(0.0, seconds)


# -- templates -------------------------------------------------------------------------------------------
def render(value: Any, lookup: Callable[[str], str | None]) -> Any:
    """Fill ``{var}`` in every string of a YAML value; unknown variables stay as written."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: lookup(m.group(1)) or m.group(0), value)
    if isinstance(value, list):
        return [render(v, lookup) for v in value]
    if isinstance(value, dict):
        return {k: render(v, lookup) for k, v in value.items()}
    return value


def container_vars(pod: Obj, name: str) -> dict[str, str]:
    spec: Obj = next((c for c in pod["spec"].get("containers") or [] if c.get("name") == name), {})
    status: Obj = next(
        (c for c in (pod.get("status") or {}).get("containerStatuses") or [] if c.get("name") == name), {}
    )
    running = (status.get("state") or {}).get("running") or {}
    return {
        "container.name": name,
        "container.image": str(spec.get("image", "")),
        "container.startedAt": str(running.get("startedAt") or ""),
        "container.containerID": str(status.get("containerID") or ""),
    }


def _scoped(lookup: Callable[[str], str | None], names: dict[str, str]) -> Callable[[str], str | None]:
    """Per-container variables first, then the pod's."""
    return lambda key: names.get(key) or lookup(key)


def _container_statuses(pod: Obj) -> list[Obj]:
    return list((pod.get("status") or {}).get("containerStatuses") or [])


def _for_each(pod: Obj, where: list[Expression]) -> list[str]:
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    if not where:
        return names
    statuses = {c.get("name"): c for c in _container_statuses(pod)}
    return [n for n in names if matches(statuses.get(n, {"name": n}), where)]


def apply_status(pod: Obj, template: Mapping[str, Any], lookup: Callable[[str], str | None]) -> None:
    """Write a stage's status template into ``pod`` (conditions via set_condition, the rest merged)."""
    status = copy.deepcopy(dict(template))
    conditions = status.pop("conditions", [])
    statuses = status.pop("containerStatuses", None)
    if status:
        pod["status"] = strategic_merge(pod.get("status") or {}, render(status, lookup))
    for cond in conditions:
        filled = render(cond, lookup)
        set_condition(pod, filled["type"], filled["status"], filled.get("reason"), filled.get("message"))
    if statuses is not None:
        patch: list[Obj] = []
        for entry in statuses:
            entry = dict(entry)
            if entry.pop("forEach", None) == "container":
                where = [Expression.model_validate(e) for e in entry.pop("where", [])]
                for name in _for_each(pod, where):
                    patch.append(render(entry, _scoped(lookup, container_vars(pod, name))))
            else:
                patch.append(render(entry, lookup))
        merged = strategic_merge(pod.get("status") or {}, {"containerStatuses": patch})
        pod["status"] = merged


def events_of(stage: Stage, pod: Obj, lookup: Callable[[str], str | None]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of every event the stage records, in order."""
    out: list[tuple[str, str, str]] = []
    for event in stage.next.events:
        if event.forEach == "container":
            for name in _for_each(pod, event.where):
                scoped = _scoped(lookup, container_vars(pod, name))
                out.append((event.type, event.reason, render(event.message, scoped)))
        else:
            out.append((event.type, event.reason, render(event.message, lookup)))
    return out


def annotation_var(pod: Obj, key: str) -> str | None:
    if not key.startswith("annotation."):
        return None
    value = (pod["metadata"].get("annotations") or {}).get(PREFIX + key.removeprefix("annotation."))
    return None if value is None else str(value)
