"""Values read back from shared state (Airflow Variables) and XComs, treated as untrusted input.

Anyone with Variable or XCom write access, an older or newer provider version, or a half-written value
can put anything under a ``fedsched/...`` key. A value that does not parse is **logged once with its key
and treated as absent**: it never stops a decision, a page or another user's rows.
``state/base.read_stored`` does that for any parser; the parsers below cover the kinds the provider
stores. :func:`loads_bounded` and :func:`check_depth` keep a deeply nested document from becoming a
``RecursionError`` (an HTTP 500).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)

from airflow_provider_fedsched.federation.limits import (
    MAX_CLUSTERS,
    MAX_QUANTITY,
    NOT_BOOL,
    check_time,
    describe,
)
from airflow_provider_fedsched.federation.spec import SpecError

__all__ = [
    "MAX_STORED_AMOUNT",
    "MAX_STORED_BYTES",
    "MAX_STORED_DEPTH",
    "StoredCharge",
    "StoredCooldown",
    "StoredDeferred",
    "StoredLease",
    "StoredOrphan",
    "StoredReservation",
    "StoredSample",
    "StoredSwept",
    "StoredWaiting",
    "check_depth",
    "loads_bounded",
    "parse_as",
    "parse_model",
    "parse_snapshot",
    "stored_time",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

MAX_STORED_BYTES = 16 * 2**20
"""A stored value's JSON text (a 5,000-node snapshot is about 2 MiB)."""
MAX_STORED_DEPTH = 32
"""Nesting of a stored value (a placement record is 5 levels deep)."""
MAX_STORED_NODES = 2_000_000


def stored_time(raw: Any, field: str = "time") -> datetime:
    """An ISO 8601 string (naive = UTC) between 1970 and 9000, as UTC."""
    if not isinstance(raw, str) or len(raw) > 64:
        raise SpecError(f"{field}: expected an ISO 8601 timestamp string, got {type(raw).__name__}")
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise SpecError(f"{field}: {describe(raw)} is not an ISO 8601 timestamp") from None
    return check_time(moment, field).astimezone(UTC)


class _Stored(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _bounded_time(value: Any, field: str) -> datetime:
    """For a model's field validator: pydantic names the field, so the message does not again."""
    try:
        if isinstance(value, datetime):
            return check_time(value, field).astimezone(UTC)
        return stored_time(value, field)
    except SpecError as exc:
        raise ValueError(str(exc).removeprefix(f"{field}: ")) from None


class StoredCooldown(_Stored):
    """``fedsched/<federation>/cooldown/<cluster>[@namespace]``: ``{"until": ISO, "reason": str}``."""

    until: datetime
    reason: str = Field("", max_length=4096)

    @field_validator("until", mode="before")
    @classmethod
    def _until(cls, value: Any) -> datetime:
        return _bounded_time(value, "until")


Amount = Annotated[int, Strict(), Field(ge=0, le=MAX_QUANTITY)]
"""A stored resource amount (scheduler units): an integer in Kubernetes' range; a boolean, a float or a
string is malformed (``True`` is not one millicore)."""
MAX_STORED_AMOUNT = 1e18
"""A stored charge's cost or egress GB: a bound no real attempt reaches that keeps any sum of stored charges
a finite float (two charges of 1e308 would add up to infinity)."""
Charged = Annotated[float, NOT_BOOL, Field(ge=0, le=MAX_STORED_AMOUNT, allow_inf_nan=False)]
Text = Annotated[str, Field(max_length=253)]
MAX_HOLDS_SEEN = 100_000
"""The holds a stored reservation may name as seen before it (far more than ever pend at once)."""


class StoredReservation(_Stored):
    """``fedsched/<federation>/reservation/<cluster>/<id>``: requests held for a pod not yet observed."""

    requests: dict[str, Amount]
    at: datetime
    placement_id: Text = ""
    tenant: Text | None = None
    """The tenant the reservation counts against meanwhile (tenant quota), when the task has one."""
    write: Text = ""
    """A token of this write (admission across workers, ``federation/cycle.counted_holds``)."""
    after: list[Text] = Field(default_factory=list, max_length=MAX_HOLDS_SEEN)
    """The ``write`` tokens of the holds its writer saw before writing it."""

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> datetime:
        return _bounded_time(value, "at")


class StoredLease(_Stored):
    """``fedsched/<federation>/lease/<cluster>``: the worker refreshing the snapshot, and until when."""

    owner: Annotated[str, Field(min_length=1, max_length=253)]
    until: datetime

    @field_validator("until", mode="before")
    @classmethod
    def _until(cls, value: Any) -> datetime:
        return _bounded_time(value, "until")


class StoredWaiting(_Stored):
    """``fedsched/<federation>/waiting/<placement id>``: a tenant's task waiting for a cluster (fair
    share)."""

    placement_id: Annotated[str, Field(min_length=1, max_length=253)]
    tenant: Annotated[str, Field(min_length=1, max_length=253)]
    resources: dict[str, Amount]
    clusters: Annotated[list[Text], Field(max_length=MAX_CLUSTERS)] = Field(default_factory=list)
    since: datetime
    seen_at: datetime

    @field_validator("since", "seen_at", mode="before")
    @classmethod
    def _times(cls, value: Any, info: ValidationInfo) -> datetime:
        return _bounded_time(value, str(info.field_name))


class StoredCharge(_Stored):
    """``fedsched/<federation>/spend/<placement id>``: what one cluster attempt cost (budgets, cost report).

    A negative, non-finite or huge cost is malformed: skipped, never subtracted from a tenant's spend."""

    at: datetime
    tenant: Text | None = None
    cost: Charged = 0.0
    egress_gb: Charged = 0.0
    dag_id: Text | None = None
    task_id: Text | None = None
    run_id: Text | None = None
    cluster: Text | None = None
    outcome: Text | None = None

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> datetime:
        return _bounded_time(value, "at")


OrphanKind = Literal["pod", "job"]


class StoredOrphan(_Stored):
    """``fedsched/<federation>/orphan/<cluster>/[job:]<namespace>.<name>``: a pod or Job not confirmed
    deleted; an entry without ``kind`` (written before Jobs were) is a pod."""

    namespace: Annotated[str, Field(min_length=1, max_length=253)]
    pod: Annotated[str, Field(min_length=1, max_length=253)]
    kind: OrphanKind = "pod"


class StoredDeferred(StoredOrphan):
    """``fedsched/<federation>/deferred/<cluster>/...``: the pod or Job of a deferred try, with its task
    instance, so that the sweep deletes it when the try ended with no trigger watching."""

    dag_id: Annotated[str, Field(min_length=1, max_length=253)]
    run_id: Annotated[str, Field(min_length=1, max_length=253)]
    task_id: Annotated[str, Field(min_length=1, max_length=253)]
    map_index: Annotated[int, Strict(), Field(ge=-1, le=2**31 - 1)]
    since: Annotated[float, NOT_BOOL, Field(ge=0, allow_inf_nan=False)]
    ended: Text | None = None
    """The phase a pod trigger saw the pod end in, when it did."""


class StoredSwept(_Stored):
    """``fedsched/<federation>/swept/<cluster>/<namespace>.<pod>``: an orphan pod the sweep found
    Succeeded (``.../swept/<cluster>/job:<namespace>.<name>``: an orphan Job it found complete)."""

    phase: Literal["Succeeded"]


class StoredSample(_Stored):
    """``fedsched/<federation>/history-<kind>/<cluster>/<sequence>``: one history sample. Its time is checked
    here; the other fields differ by kind and their readers check what they use."""

    model_config = ConfigDict(extra="allow", frozen=True)

    at: datetime

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> datetime:
        return _bounded_time(value, "at")


def parse_model(model: type[M]) -> Callable[[Any], M]:
    """A parser for :func:`read_stored`: JSON text or a decoded document, validated by ``model``."""

    def parse(raw: Any) -> M:
        return model.model_validate(_document(raw))

    return parse


def parse_as(kind: Any) -> Callable[[Any], Any]:
    """A parser for :func:`read_stored` of a JSON object that is not a model (``dict[str, dict[str, int]]``),
    validated as ``kind``."""
    adapter: TypeAdapter[Any] = TypeAdapter(kind)

    def parse(raw: Any) -> Any:
        return adapter.validate_python(_document(raw))

    return parse


def _document(raw: Any) -> Mapping[str, Any]:
    document = loads_bounded(raw) if isinstance(raw, str | bytes) else raw
    check_depth(document, MAX_STORED_DEPTH)
    if not isinstance(document, Mapping):
        raise SpecError(f"expected a JSON object, got {type(document).__name__}")
    return document


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def loads_bounded(
    text: str | bytes, *, max_depth: int = MAX_STORED_DEPTH, max_bytes: int = MAX_STORED_BYTES
) -> Any:
    """``json.loads`` that refuses text over ``max_bytes`` or nested deeper than ``max_depth`` with a
    ``ValueError`` before parsing (``json`` would raise ``RecursionError`` at about 1,000 levels)."""
    if len(text) > max_bytes:
        raise SpecError(f"JSON document of {len(text):,} bytes, more than the {max_bytes:,} allowed")
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="strict")
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    # Each pass removes the innermost pairs (at C speed): a document of depth d is empty after d passes.
    for _ in range(max_depth):
        if not brackets:
            break
        reduced = _INNERMOST.sub("", brackets)
        if reduced == brackets:
            break  # unbalanced: json.loads below says where
        brackets = reduced
    else:
        if brackets:
            raise SpecError(f"JSON document nested deeper than {max_depth} levels")
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def _no_constant(name: str) -> Any:
    raise SpecError(f"JSON has no {name} (a stored number must be finite)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise SpecError(f"the number {describe(text)} is beyond a float (a stored number must be finite)")
    return value


def check_depth(value: Any, max_depth: int = MAX_STORED_DEPTH, max_nodes: int = MAX_STORED_NODES) -> None:
    """Raise ``ValueError`` when a decoded document nests deeper than ``max_depth`` or holds more than
    ``max_nodes`` values (walked without recursion, so any depth is safe to check)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > max_nodes:
            raise SpecError(f"document holds more than {max_nodes:,} values")
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            raise SpecError(f"document nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


def parse_snapshot(raw: Any) -> Any:
    """A stored ``ClusterSnapshot`` (JSON text or a decoded document), bounded in depth and size."""
    from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot

    return ClusterSnapshot.model_validate(_document(raw))
