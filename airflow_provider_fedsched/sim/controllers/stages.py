"""kwok Stages, played as kwok plays them: ``pod-stages.yaml`` is the one pod lifecycle of both grounds.

A stage's ``selector.matchExpressions`` keys and ``delay.durationFrom`` expressions are jq, evaluated with
the ``jq`` binding under kwok's rules (an expression that fails yields nothing; ``null`` results are dropped;
``In`` compares strings, booleans and integers as strings). Its ``steps`` are kwok's: an ``event``, a
``patch`` (a Go template rendered by :mod:`gotemplate`, parsed as YAML, put under ``root`` and applied as a
merge or strategic-merge patch) or ``delete``. What the template calls that only a kubelet knows (the
node's and the pod's IPs) comes from the player, as kwok's own functions do.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jq
import yaml

from airflow_provider_fedsched.federation.documents import read_text_file
from airflow_provider_fedsched.sim.apiserver.patch import strategic_merge
from airflow_provider_fedsched.sim.apiserver.store import Obj
from airflow_provider_fedsched.sim.controllers import gotemplate
from airflow_provider_fedsched.sim.util import now_iso

STAGES_FILE = Path(__file__).with_name("pod-stages.yaml")
OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}
STEP_KINDS = {"event", "patch", "delete"}
_GO_DURATION = re.compile(r"([-+]?)((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")
_GO_UNIT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class StageError(ValueError):
    pass


@functools.lru_cache(maxsize=256)
def _program(expression: str) -> Any:
    try:
        return jq.compile(expression)
    except ValueError as exc:
        raise StageError(f"jq expression {expression!r}: {exc}") from None


def jq_values(expression: str, document: str) -> list[Any] | None:
    """What a jq expression yields for a JSON document, as kwok reads it: ``None`` when it fails."""
    try:
        return [v for v in _program(expression).input_text(document).all() if v is not None]
    except ValueError:
        return None


def _has_value(found: list[Any], values: list[str]) -> bool:
    for value in found:
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int):
            value = str(value)
        if isinstance(value, str) and value in values:
            return True
    return False


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, document: str) -> bool:
        found = jq_values(self.key, document)
        if found is None:
            return self.operator in ("NotIn", "DoesNotExist")
        if self.operator == "In":
            return _has_value(found, list(self.values))
        if self.operator == "NotIn":
            return not _has_value(found, list(self.values))
        exists = bool(found)
        return exists if self.operator == "Exists" else not exists


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration (``1.5s``, ``300ms``, ``1m30s``); ``None`` if it is not one."""
    if text == "0":
        return 0.0
    if not _GO_DURATION.fullmatch(text):
        return None
    seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _GO_UNIT.findall(text))
    return -seconds if text.startswith("-") else seconds


def _rfc3339(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str
    requirements: tuple[Requirement, ...]
    steps: tuple[Mapping[str, Any], ...]
    delay_milliseconds: int | None = None
    delay_from: str | None = None
    """A jq expression yielding a Go duration or an RFC 3339 time; when it yields neither, the
    milliseconds."""

    def matches(self, document: str) -> bool:
        return all(r.matches(document) for r in self.requirements)

    def delay(self, document: str, now: datetime | None = None) -> float:
        """Seconds to wait before the stage is played (kwok's ``delay``; jitter is not modelled)."""
        default = (self.delay_milliseconds or 0) / 1000
        if self.delay_from is None:
            return default
        found = jq_values(self.delay_from, document)
        if not found or not isinstance(found[0], str):
            return default
        if found[0] == "":
            return 0.0
        seconds = go_duration(found[0])
        if seconds is not None:
            return seconds
        when = _rfc3339(found[0])
        if when is not None:
            return (when - (now or datetime.now(UTC))).total_seconds()
        return default


def compile_stage(obj: Mapping[str, Any]) -> Stage:
    """One kwok Stage object, checked for what this player knows."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec") or {}
    if obj.get("kind") != "Stage" or not name:
        raise StageError(f"not a named kwok Stage: {obj.get('kind')!r} {name!r}")
    selector = spec.get("selector") or {}
    if set(selector) - {"matchExpressions"}:
        raise StageError(f"{name}: only selector.matchExpressions is played")
    requirements = []
    for expr in selector.get("matchExpressions") or []:
        if expr.get("operator") not in OPERATORS or not isinstance(expr.get("key"), str):
            raise StageError(f"{name}: unknown match expression {expr!r}")
        _program(expr["key"])
        requirements.append(Requirement(expr["key"], expr["operator"], tuple(expr.get("values") or ())))
    steps = tuple(spec.get("steps") or ())
    for step in steps:
        if len(step) != 1 or next(iter(step)) not in STEP_KINDS:
            raise StageError(f"{name}: a step is one of {sorted(STEP_KINDS)}, not {sorted(step)}")
        patch = step.get("patch")
        if patch is not None and patch.get("type", "merge") not in ("merge", "strategic"):
            raise StageError(f"{name}: patch type {patch.get('type')!r} is not played")
    delay = spec.get("delay") or {}
    if set(delay) - {"durationMilliseconds", "durationFrom", "jitterDurationMilliseconds"}:
        raise StageError(f"{name}: unknown delay fields {sorted(delay)}")
    delay_from = ((delay.get("durationFrom") or {}).get("jq") or {}).get("expression")
    if delay_from is not None:
        _program(delay_from)
    return Stage(
        name=name,
        kind=str((spec.get("resourceRef") or {}).get("kind") or ""),
        requirements=tuple(requirements),
        steps=steps,
        delay_milliseconds=delay.get("durationMilliseconds"),
        delay_from=delay_from,
    )


def read_stage_objects(path: Path = STAGES_FILE) -> list[dict[str, Any]]:
    """The kwok Stage objects of a multi-document YAML file, as written (the test bed applies them)."""
    text = read_text_file(path, "stage file")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def load_stages(path: Path = STAGES_FILE, kind: str = "Pod") -> list[Stage]:
    return [s for s in map(compile_stage, read_stage_objects(path)) if s.kind == kind]


def document(obj: Obj) -> str:
    """The object as the JSON text jq reads (once per look at the object)."""
    return json.dumps(obj, separators=(",", ":"), default=str)


def matching(stages: list[Stage], obj: Obj) -> list[Stage]:
    text = document(obj)
    return [s for s in stages if s.matches(text)]


# -- templates: kwok's functions, Sprig's the stages use, and the player's own -------------------------
def _quote(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if text.startswith('"') else json.dumps(text)


def _default(fallback: Any, given: Any = None) -> Any:
    return given if gotemplate.truth(given) else fallback


def _dict(*pairs: Any) -> dict[str, Any]:
    return {str(pairs[i]): pairs[i + 1] if i + 1 < len(pairs) else "" for i in range(0, len(pairs), 2)}


def _set(target: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    target[key] = value
    return target


def _to_string(value: Any) -> str:
    return "" if value is None else gotemplate.text_of(value)


TEMPLATE_FUNCS: dict[str, gotemplate.Func] = {
    "Now": now_iso,
    "Quote": _quote,
    "default": _default,
    "dict": _dict,
    "set": _set,
    "add1": lambda n: int(n or 0) + 1,
    "toString": _to_string,
    "toJson": lambda v: json.dumps(v, separators=(",", ":"), default=str),
    "list": lambda *items: list(items),
    "has": lambda item, items: item in (items or []),
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, ``null`` removes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def render_patch(patch: Mapping[str, Any], obj: Obj, funcs: Mapping[str, gotemplate.Func]) -> Obj:
    """The patch a ``patch`` step makes of ``obj``, under its ``root`` (kwok's ``computeMergePatch``)."""
    text = gotemplate.render(str(patch.get("template", "")).strip(), obj, {**TEMPLATE_FUNCS, **funcs})
    try:
        body = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise StageError(f"a stage template rendered invalid YAML: {exc}\n{text}") from None
    if not isinstance(body, dict):
        raise StageError(f"a stage template rendered {type(body).__name__}, not a map:\n{text}")
    root = patch.get("root")
    return {str(root): body} if root else body


def apply_patch(obj: Obj, patch: Mapping[str, Any], rendered: Obj) -> Obj:
    strategic = patch.get("type", "merge") == "strategic"
    result: Obj = strategic_merge(obj, rendered) if strategic else merge_patch(obj, rendered)
    return result
