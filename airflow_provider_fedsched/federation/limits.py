"""Limits on everything a user, a file or a stored value can hand the provider, and the checks that keep them.

Each limit is far beyond what a real deployment reaches (docs/reliability.md, "Limits and bad input", lists
them with the reasoning), yet bounds the time and memory one bad input can cost: a quantity with a huge
exponent, a duration that overflows a datetime, a file that never ends, a YAML alias bomb. Pure functions
and pydantic field types, no I/O: the spec, the snapshot file, the CLI and the run-time layer (operator,
hook, kube access, UI) all validate with these, so that one rule has one definition.

Every check raises :class:`SpecError` (a ``ValueError``) whose message starts with the field, option or
argument it was given and says what is allowed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from airflow_provider_fedsched.federation._errors import SpecError

__all__ = [
    "CONFIG_LIMITS",
    "EARLIEST_TIME",
    "KUBECONFIG_LIMITS",
    "LATEST_TIME",
    "MAX_CLUSTERS",
    "MAX_DATASETS",
    "MAX_LABEL_VALUE",
    "MAX_NODES_PER_CLUSTER",
    "MAX_PRICE",
    "MAX_QUANTITY",
    "MAX_SECONDS",
    "MAX_SIZE_GB",
    "MAX_TENANTS",
    "MAX_WEIGHT",
    "NOT_BOOL",
    "SNAPSHOT_LIMITS",
    "SPEC_LIMITS",
    "DocumentLimits",
    "LabelKey",
    "LabelValue",
    "Labels",
    "Price",
    "Seconds",
    "SizeGb",
    "check_int",
    "check_seconds",
    "check_time",
    "describe",
    "label_key_problem",
    "label_value_problem",
]

MAX_QUANTITY = 2**63 - 1
"""Kubernetes' own quantity range: no ``resource.Quantity`` may exceed 2^63-1 in magnitude. The same bound
holds here for the scheduler units (millicores for cpu), so every amount fits a signed 64-bit integer."""

MAX_SECONDS = 10 * 365 * 86400.0
"""Any duration (cooldown, snapshot TTL, expected run time, plan horizon, wait timeout): ten years."""

EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(9000, 1, 1, tzinfo=UTC)
"""Any timestamp (``--now``, ``observed_at``, a stored cooldown): in these bounds, a time plus or minus a few
durations of :data:`MAX_SECONDS` still fits a ``datetime`` (year 1 to 9999)."""

MAX_CLUSTERS = 10_000
"""Member clusters in a spec and clusters in a snapshot file (the engine is benchmarked at 1,000)."""
MAX_DATASETS = 100_000
MAX_TENANTS = 10_000
"""Tenants in a spec (each is a quota, a weight and a budget the engine reads for every decision)."""
MAX_NODES_PER_CLUSTER = 100_000
"""Nodes in one cluster's snapshot (the largest managed Kubernetes clusters allow 65,000)."""
MAX_WEIGHT = 1_000_000.0
"""A score weight (weights are usually 0..1; a candidate's score stays a finite float)."""
MAX_PRICE = 1e9
"""A price per unit-hour or per GB (in any currency); keeps every estimated cost a finite float."""
MAX_SIZE_GB = 1e12
"""A dataset's size: a zettabyte."""


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {value} (write 1 or 0 if that is meant)")
    return value


NOT_BOOL = BeforeValidator(_not_bool)
"""For every numeric pydantic field: a boolean is refused, never read as 1 or 0 (``max_cost: true`` is a
typo, not a budget of 1)."""

Seconds = Annotated[float, NOT_BOOL, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Price = Annotated[float, NOT_BOOL, Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)]
SizeGb = Annotated[float, NOT_BOOL, Field(ge=0, le=MAX_SIZE_GB, allow_inf_nan=False)]


MAX_LABEL_VALUE = 63
"""A Kubernetes label value, and the name part of a label key."""
MAX_LABEL_PREFIX = 253
"""The DNS-subdomain prefix of a label key (``example.com/`` in ``example.com/gpu``)."""
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE_RULE = "at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"


def label_value_problem(value: Any) -> str | None:
    """Why ``value`` is not a Kubernetes label value (None when it is; the empty string is one)."""
    if not isinstance(value, str):
        return f"a label value is a string, got {type(value).__name__} {describe(value)}"
    if len(value) > MAX_LABEL_VALUE or not _LABEL_VALUE.fullmatch(value):
        return f"{describe(value)} is not a Kubernetes label value ({_LABEL_VALUE_RULE})"
    return None


def label_key_problem(key: Any) -> str | None:
    """Why ``key`` is not a Kubernetes label key (None when it is): an optional DNS-subdomain prefix of at
    most 253 characters and ``/``, then a name as a label value, not empty."""
    if not isinstance(key, str):
        return f"a label key is a string, got {type(key).__name__} {describe(key)}"
    prefix, slash, name = key.partition("/") if "/" in key else ("", "", key)
    if slash and (len(prefix) > MAX_LABEL_PREFIX or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            f"label key {describe(key)}: its prefix is not a DNS subdomain (lowercase letters, digits, '-' "
            f"and '.', at most {MAX_LABEL_PREFIX} characters)"
        )
    if not name or len(name) > MAX_LABEL_VALUE or not _LABEL_VALUE.fullmatch(name):
        return f"label key {describe(key)}: its name is not 1..63 characters ({_LABEL_VALUE_RULE})"
    return None


def _label_key(key: str) -> str:
    problem = label_key_problem(key)
    if problem is not None:
        raise ValueError(problem)
    return key


def _label_value(value: str) -> str:
    problem = label_value_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
Labels = dict[LabelKey, LabelValue]
"""Labels or a label selector as Kubernetes takes them: a cluster's labels in the spec, a task's
``cluster_selector`` and ``node_selector``."""


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """What one YAML/JSON document may cost to read: bytes on disk, YAML nodes once aliases are expanded
    (an alias bomb is a few hundred bytes that expand to billions of nodes), nesting depth, and entries of
    the lists named in ``max_items`` (by their path without positions: ``clusters[].nodes``). All are
    checked while the document is read, so an input past one costs only the reading up to that point."""

    max_bytes: int
    max_nodes: int
    max_depth: int = 64
    max_items: tuple[tuple[str, int], ...] = ()


SPEC_LIMITS = DocumentLimits(
    max_bytes=8 * 2**20,
    max_nodes=2_000_000,
    max_items=(
        ("clusters", MAX_CLUSTERS),
        ("regions", MAX_CLUSTERS),
        ("datasets", MAX_DATASETS),
        ("tenants", MAX_TENANTS),
    ),
)
"""A federation spec: 8 MiB (a 10,000-cluster spec is about 3 MiB)."""
SNAPSHOT_LIMITS = DocumentLimits(
    max_bytes=64 * 2**20,
    max_nodes=4_000_000,
    max_items=(("clusters", MAX_CLUSTERS), ("clusters[].nodes", MAX_NODES_PER_CLUSTER)),
)
"""A snapshot file: 64 MiB (50,000 nodes with their labels are about 20 MiB)."""
KUBECONFIG_LIMITS = DocumentLimits(max_bytes=4 * 2**20, max_nodes=200_000)
"""A kubeconfig (file or connection extra): 4 MiB."""
CONFIG_LIMITS = DocumentLimits(max_bytes=4 * 2**20, max_nodes=500_000)
"""Any other configuration file the provider reads (the simulator's YAML, its stage files)."""


def describe(value: Any, limit: int = 60) -> str:
    """A short, printable rendering of a bad value for an error message (never the whole of a huge one)."""
    try:
        text = repr(value)
    except ValueError:  # an integer of more than 4,300 digits has no repr
        return (
            f"an integer of {value.bit_length():,} bits" if isinstance(value, int) else type(value).__name__
        )
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_seconds(value: Any, field: str, *, maximum: float = MAX_SECONDS) -> float:
    """A duration given as seconds (int or float) or a ``timedelta``: finite, non-negative, at most
    ``maximum``. Strings and booleans are refused (``"30"`` is a typo waiting to happen)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(
            f"{field}: expected a number of seconds or a timedelta, got {type(value).__name__} "
            f"{describe(value)}"
        )
    else:
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0 or seconds > maximum:
        raise SpecError(
            f"{field}: {describe(value)} is not a duration in 0..{maximum:g} seconds (finite, non-negative)"
        )
    return seconds


def check_int(value: Any, field: str, *, minimum: int, maximum: int) -> int:
    """An integer in ``minimum..maximum``; strings, floats and booleans are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(
            f"{field}: expected an integer in {minimum}..{maximum}, "
            f"got {type(value).__name__} {describe(value)}"
        )
    if not minimum <= value <= maximum:
        raise SpecError(f"{field}: {describe(value)} is outside {minimum}..{maximum}")
    return value


def check_time(value: datetime, field: str) -> datetime:
    """A timezone-aware timestamp between :data:`EARLIEST_TIME` and :data:`LATEST_TIME` (naive = UTC)."""
    if not isinstance(value, datetime):
        raise SpecError(f"{field}: expected a timestamp, got {type(value).__name__} {describe(value)}")
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    if not EARLIEST_TIME <= aware <= LATEST_TIME:
        raise SpecError(
            f"{field}: {aware.isoformat()} is outside {EARLIEST_TIME.date()}..{LATEST_TIME.date()}"
        )
    return aware
