"""Divided jobs: one Indexed Job's indices split over the members that may run it, and moved, when a member
rejects its slice, without ever running an index twice.

An Indexed Job of ``completions`` independent pods (shards of a batch: files, days, parameters) need not wait
for one member with room for all of it, as a gang must. :func:`divide` splits the global index range
``0..completions-1`` into contiguous slices, one per member, by weight (largest remainder, exact), never
giving a member more indices than it has room for now (``capacity``) while the others have room left; the
rest, once every member is full, goes by weight too (those pods wait in their member), or, with
``overflow=False``, waits in the federation (``Division.waiting``) for :func:`rebalance` to deal it as room
frees (``benchmarks/bench_divided.py`` measures both). The job's ``parallelism`` is split over the slices
in proportion to their sizes.

Where the weights come from (:func:`divide_placement`): the engine's decision for *one pod* of the job.
Every rule of the engine holds for every slice, because only members that passed it get one: sovereignty,
selectors and taints, tenant quota and budget (each judged for one pod), cooldowns, exclusions. A member
that passed every rule has room for ``capacity`` more pods now (its ready nodes packed with the pod's
requests, in-flight reservations charged, :func:`~federation.plugins.gang.pods_fitting`); its weight is
that room tilted by its score (:data:`SCORE_TILT`: the best-scored member counts its room whole, a member
that scored 0 half). A member whose only objection was room now (``NodeFit``) gets weight 0; any other
rejection excludes it, with its reason.

:func:`rebalance` moves the indices of a rejected slice that have not succeeded and are not fenced: an index
whose pod may still be running in a silent member stays where it is until that member answers or the grace
ends (the caller decides which are fenced), so that no index ever runs twice.

Pure (no Airflow, no I/O). Bad input raises :class:`SpecError` naming the field; the operator reports it as
its ``FederationError`` before anything is created.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from airflow_provider_fedsched.federation._errors import SpecError
from airflow_provider_fedsched.federation._loading import spec_error
from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.framework import ClusterView
from airflow_provider_fedsched.federation.limits import NOT_BOOL, check_int, describe
from airflow_provider_fedsched.federation.plugins.gang import pods_fitting
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec

__all__ = [
    "MAX_COMPLETIONS",
    "NO_ROOM_PLUGIN",
    "SCORE_TILT",
    "Division",
    "IndexSlice",
    "Rebalance",
    "Share",
    "divide",
    "divide_placement",
    "format_ranges",
    "parse_ranges",
    "rebalance",
    "shares_of",
]

MAX_COMPLETIONS = 100_000
"""Kubernetes' own limit on an Indexed Job's ``completions`` (and ``parallelism``)."""
SCORE_TILT = 0.5
"""How much a member's score moves its weight: weight = room x (1 - tilt + tilt x score / best score). At
0.5 the best-scored member's room counts whole and a member scored 0 still counts half: cost steers the
split without starving a member with room (which would make the job wait for the cheap one)."""
NO_ROOM_PLUGIN = "NodeFit"
"""The one rejection that leaves a member in the division (weight 0): it passed every rule but room now."""
MAX_WEIGHT = 1e15
_WEIGHT = Annotated[float, NOT_BOOL, Field(ge=0, le=MAX_WEIGHT, allow_inf_nan=False)]
_M = TypeVar("_M", bound=BaseModel)
_COUNT = Annotated[int, NOT_BOOL, Field(ge=0)]


class Share(BaseModel):
    """What one member may take of a divided job: its weight, its room now, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(min_length=1)
    weight: _WEIGHT
    """Relative: the split follows it (0: the member gets nothing)."""
    capacity: _COUNT
    """How many of the job's pods it can run now: it gets no more while another member has room."""
    reason: str = ""
    """Why this weight and room (the decision detail shows it)."""


class IndexSlice(BaseModel):
    """The global indices one member runs (one Job there), and how many of them at a time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(min_length=1)
    indices: tuple[Annotated[int, NOT_BOOL, Field(ge=0)], ...] = Field(min_length=1)
    """Ascending, each once: the pods see these as their ``JOB_COMPLETION_INDEX``."""
    parallelism: Annotated[int, NOT_BOOL, Field(ge=1)]

    @model_validator(mode="after")
    def _ascending(self) -> IndexSlice:
        if any(a >= b for a, b in zip(self.indices, self.indices[1:], strict=False)):
            raise ValueError("indices: must be ascending, each index once")
        if self.parallelism > len(self.indices):
            raise ValueError(f"parallelism: {self.parallelism} is more than its {len(self.indices)} indices")
        return self

    @property
    def ranges(self) -> str:
        """``0-19,25,30-31``: the indices as Kubernetes writes completed indexes."""
        return format_ranges(self.indices)


def format_ranges(indices: Iterable[int]) -> str:
    """Indices (any order, repeats ignored) as ranges, ``0-19,25,30-31``; "" for none."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_ranges(text: str, field: str, *, below: int = MAX_COMPLETIONS) -> tuple[int, ...]:
    """``0-19,25`` (:attr:`IndexSlice.ranges`, Kubernetes' ``completedIndexes``) -> the indices, ascending,
    each once; "" -> none. Anything else, or an index at or above ``below``, is a :class:`SpecError`
    naming ``field``."""
    if not isinstance(text, str):
        raise SpecError(f"{field}: expected index ranges such as '0-19,25', got {type(text).__name__}")
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        first, dash, last = part.partition("-")
        if len(part) > 24 or not first.isdigit() or (dash and not last.isdigit()):
            raise SpecError(f"{field}: {describe(part)} is not an index or a range such as 3-7")
        start, end = int(first), int(last) if dash else int(first)
        if start > end or end >= below:
            raise SpecError(f"{field}: range {describe(part)} is empty or reaches beyond {below - 1}")
        found.update(range(start, end + 1))
    return tuple(sorted(found))


class Division(BaseModel):
    """Which member runs which indices of one Indexed Job; every index in exactly one slice or waiting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    completions: Annotated[int, NOT_BOOL, Field(ge=1, le=MAX_COMPLETIONS)]
    parallelism: Annotated[int, NOT_BOOL, Field(ge=1, le=MAX_COMPLETIONS)]
    slices: tuple[IndexSlice, ...] = ()
    """One per member, in the order the indices were dealt (best weight first)."""
    waiting: tuple[Annotated[int, NOT_BOOL, Field(ge=0)], ...] = ()
    """Indices no member may take now (no member has a weight): the job waits for them."""
    reasons: dict[str, str] = Field(default_factory=dict)
    """Member -> why it got what it got (its room and score, or why it was left out)."""

    @model_validator(mode="after")
    def _partition(self) -> Division:
        if self.parallelism > self.completions:
            raise ValueError(f"parallelism: {self.parallelism} is more than completions {self.completions}")
        seen: set[int] = set()
        clusters: set[str] = set()
        for position, piece in enumerate(self.slices):
            if piece.cluster in clusters:
                raise ValueError(f"slices[{position}].cluster: '{piece.cluster}' holds two slices")
            clusters.add(piece.cluster)
            for index in piece.indices:
                _check_index(index, self.completions, f"slices[{position}].indices")
                if index in seen:
                    raise ValueError(f"slices[{position}].indices: index {index} is in two slices")
                seen.add(index)
        for index in self.waiting:
            _check_index(index, self.completions, "waiting")
            if index in seen:
                raise ValueError(f"waiting: index {index} is also in a slice (or twice)")
            seen.add(index)
        if len(seen) != self.completions:
            missing = next(i for i in range(self.completions) if i not in seen)
            raise ValueError(f"slices: index {missing} is in no slice and not waiting")
        return self

    @property
    def placed(self) -> bool:
        """Every index has a member."""
        return not self.waiting

    def slice_of(self, cluster: str) -> IndexSlice | None:
        return next((piece for piece in self.slices if piece.cluster == cluster), None)

    def cluster_of(self) -> dict[int, str]:
        """Index -> the member running it."""
        return {index: piece.cluster for piece in self.slices for index in piece.indices}


class Rebalance(BaseModel):
    """What :func:`rebalance` did: the new division, the new slices to create, and what stayed put."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    division: Division
    moved: tuple[IndexSlice, ...]
    """Per receiving member, the indices it receives (a new Job there) and their parallelism."""
    source: str | None
    fenced: tuple[int, ...]
    """Indices of the rejected slice that may still run there: left in place, never started elsewhere."""
    kept: tuple[int, ...]
    """Indices of the rejected slice that succeeded there: done, never run again."""


def _check_index(index: int, completions: int, field: str) -> None:
    if not 0 <= index < completions:
        raise ValueError(f"{field}: index {index} is outside 0..{completions - 1}")


def _build(model: type[_M], where: str, **fields: Any) -> _M:
    try:
        return model(**fields)
    except ValidationError as exc:
        raise spec_error(exc, where) from None


# Apportioning ---------------------------------------------------------------------------------------------
def _apportion(total: int, weights: Sequence[float], caps: Sequence[int] | None) -> list[int]:
    """``total`` split in proportion to ``weights`` by largest remainder (exact: fractions), none above its
    cap: members whose proportional part reaches their cap are filled to it and the rest split again among
    the others. Ties go to the earlier member. Needs ``total <= sum(caps)`` over positive weights."""
    result = [0] * len(weights)
    exact = [Fraction(weight) for weight in weights]
    active = [i for i, weight in enumerate(exact) if weight > 0 and (caps is None or caps[i] > 0)]
    left = total
    while left > 0 and active:
        whole = sum(exact[i] for i in active)
        quotas = {i: left * exact[i] / whole for i in active}
        if caps is not None:
            full = [i for i in active if quotas[i] >= caps[i] - result[i]]
            if full:
                for i in full:
                    left -= caps[i] - result[i]
                    result[i] = caps[i]
                active = [i for i in active if i not in full]
                continue
        floors = {i: math.floor(quotas[i]) for i in active}
        for i in active:
            result[i] += floors[i]
        remainder = left - sum(floors.values())
        by_fraction = sorted(active, key=lambda i: (-(quotas[i] - floors[i]), i))
        for i in by_fraction[:remainder]:
            result[i] += 1
        left = 0
    return result


def _split_parallelism(parallelism: int, sizes: Sequence[int]) -> list[int]:
    """``parallelism`` over slices of these sizes: at least 1 and at most its size each, in proportion."""
    base = [1] * len(sizes)
    extra = _apportion(
        parallelism - len(sizes), [float(size) for size in sizes], [size - 1 for size in sizes]
    )
    return [a + b for a, b in zip(base, extra, strict=True)]


def _checked_shares(shares: Iterable[Share | Mapping[str, Any]], field: str) -> list[Share]:
    """Shares as given (a mapping is validated as one, naming ``shares[i].<field>``), each member once."""
    if isinstance(shares, str | bytes | Mapping) or not isinstance(shares, Iterable):
        raise SpecError(f"{field}: expected a list of shares, got {type(shares).__name__}")
    out: list[Share] = []
    seen: set[str] = set()
    for position, given in enumerate(shares):
        if isinstance(given, Mapping):
            share = _build(Share, f"{field}[{position}]", **given)
        elif isinstance(given, Share):
            share = given
        else:
            raise SpecError(f"{field}[{position}]: expected a share, got {type(given).__name__}")
        if share.cluster in seen:
            raise SpecError(f"{field}[{position}].cluster: '{share.cluster}' has two shares")
        seen.add(share.cluster)
        out.append(share)
    # The order indices are dealt in: best weight first, then by name (independent of the input's order).
    out.sort(key=lambda share: (-share.weight, share.cluster))
    return out


def _deal(
    count: int, shares: list[Share], parallelism: int, overflow: bool
) -> tuple[list[tuple[Share, int]], dict[str, str]]:
    """How many of ``count`` indices each share gets (at most ``parallelism`` members, each needs a pod;
    beyond their room only with ``overflow``), and why the others get none."""
    reasons: dict[str, str] = {}
    eligible = [share for share in shares if share.weight > 0]
    for share in shares:
        if share.weight <= 0:
            reasons[share.cluster] = f"no indices: weight 0 ({share.reason or 'no room'})"
    if len(eligible) > parallelism:
        for share in eligible[parallelism:]:
            reasons[share.cluster] = (
                f"no indices: parallelism {parallelism} runs on at most {parallelism} member(s), "
                "the better-weighted ones"
            )
        eligible = eligible[:parallelism]
    weights = [share.weight for share in eligible]
    capacities = [share.capacity for share in eligible]
    room = min(count, sum(capacities))
    counts = _apportion(room, weights, capacities)
    if count > room and overflow:  # every member is full: the rest by weight, to wait in its member
        counts = [a + b for a, b in zip(counts, _apportion(count - room, weights, None), strict=True)]
    return list(zip(eligible, counts, strict=True)), reasons


def _describe(share: Share, count: int, of: int) -> str:
    room = "no room now" if share.capacity == 0 else f"room for {share.capacity} pod(s) now"
    detail = f"; {share.reason}" if share.reason else ""
    over = (
        f", {count - share.capacity} beyond its room (every member is full)" if count > share.capacity else ""
    )
    return f"{count} of {of} indices: {room}, weight {share.weight:.4g}{over}{detail}"


# Dividing ---------------------------------------------------------------------------------------------------
def divide(
    completions: int,
    shares: Iterable[Share | Mapping[str, Any]],
    *,
    parallelism: int | None = None,
    excluded: Mapping[str, str] | None = None,
    overflow: bool = True,
) -> Division:
    """Split indices ``0..completions-1`` over the members by ``shares`` (module docstring).

    ``parallelism`` (default ``completions``): how many pods of the job run at once, split over the slices.
    ``excluded``: member -> why it may not run the job (kept in the division's reasons). When no member has
    a weight, every index is ``waiting``; ``overflow`` False: so is every index beyond the members' room
    (they wait for room in the federation, placed later by :func:`rebalance`, instead of in a member)."""
    completions = check_int(completions, "completions", minimum=1, maximum=MAX_COMPLETIONS)
    parallelism = check_int(
        completions if parallelism is None else parallelism, "parallelism", minimum=1, maximum=completions
    )
    ordered = _checked_shares(shares, "shares")
    counts, reasons = _deal(completions, ordered, parallelism, overflow)
    given = [(share, count) for share, count in counts if count > 0]
    pods = _split_parallelism(parallelism, [count for _, count in given]) if given else []
    slices: list[IndexSlice] = []
    start = 0
    for (share, count), pods_at_once in zip(given, pods, strict=True):
        slices.append(
            IndexSlice(
                cluster=share.cluster, indices=tuple(range(start, start + count)), parallelism=pods_at_once
            )
        )
        reasons[share.cluster] = _describe(share, count, completions)
        start += count
    for cluster, why in (excluded or {}).items():
        reasons.setdefault(cluster, f"excluded: {why}")
    return _build(
        Division,
        "division",
        completions=completions,
        parallelism=parallelism,
        slices=tuple(slices),
        waiting=tuple(range(start, completions)),
        reasons=reasons,
    )


def shares_of(
    decision: Decision,
    request: TaskRequest,
    spec: FederationSpec,
    snapshots: Mapping[str, ClusterSnapshot],
    *,
    reservations: Mapping[str, ResourceList] | None = None,
    in_flight: Mapping[str, Sequence[ResourceList]] | None = None,
) -> tuple[list[Share], dict[str, str]]:
    """Each member's share of a divided job from the engine's (or the placement cycle's) ``decision`` for
    one of its pods, ``request``, over the same inputs; and member -> why it is excluded.

    A candidate's room is how many such pods its ready nodes hold now; its weight that room tilted by its
    score (:data:`SCORE_TILT`). A member rejected only for room now (``NodeFit``) gets weight 0; any other
    rejection excludes it."""
    if request.gang:
        raise SpecError("request.gang: a divided job is judged for one of its pods, not as a gang")
    reservations = reservations or {}
    in_flight = in_flight or {}
    best = max((candidate.score for candidate in decision.candidates), default=0.0)
    shares: list[Share] = []
    for candidate in decision.candidates:
        cluster = spec.cluster(candidate.cluster)
        snapshot = snapshots.get(cluster.name)
        view = ClusterView.of(
            cluster, snapshot, request.namespace, reservations.get(cluster.name), in_flight.get(cluster.name)
        )
        room = pods_fitting(request, view)
        tilt = 1.0 - SCORE_TILT + SCORE_TILT * candidate.score / best if best > 0 else 1.0
        shares.append(
            Share(
                cluster=cluster.name,
                weight=room * tilt,
                capacity=room,
                reason=f"score {candidate.score:.1f} of the best {best:.1f} (x{tilt:.2f})",
            )
        )
    excluded: dict[str, str] = {}
    for rejection in decision.rejected:
        if rejection.plugin == NO_ROOM_PLUGIN and not rejection.permanent:
            shares.append(
                Share(
                    cluster=rejection.cluster,
                    weight=0.0,
                    capacity=0,
                    reason=f"no room now: {rejection.reason}",
                )
            )
        else:
            excluded[rejection.cluster] = f"{rejection.plugin}: {rejection.reason}"
    return shares, excluded


def divide_placement(
    decision: Decision,
    request: TaskRequest,
    spec: FederationSpec,
    snapshots: Mapping[str, ClusterSnapshot],
    completions: int,
    *,
    parallelism: int | None = None,
    reservations: Mapping[str, ResourceList] | None = None,
    in_flight: Mapping[str, Sequence[ResourceList]] | None = None,
    overflow: bool = True,
) -> Division:
    """:func:`divide` over :func:`shares_of`: the division of a job whose pod is ``request``, from the
    decision for that pod (``PlacementCycle.decide`` or ``FederationEngine.decide``) over ``snapshots``."""
    completions = check_int(completions, "completions", minimum=1, maximum=MAX_COMPLETIONS)
    shares, excluded = shares_of(
        decision, request, spec, snapshots, reservations=reservations, in_flight=in_flight
    )
    return divide(completions, shares, parallelism=parallelism, excluded=excluded, overflow=overflow)


# Rebalancing ------------------------------------------------------------------------------------------------
def _indices(values: Iterable[int], completions: int, field: str) -> set[int]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise SpecError(f"{field}: expected a collection of indices, got {type(values).__name__}")
    out: set[int] = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{field}: expected whole-number indices, got {describe(value)}")
        if not 0 <= value < completions:
            raise SpecError(f"{field}: index {describe(value)} is outside 0..{completions - 1}")
        out.add(value)
    return out


def rebalance(
    division: Division,
    *,
    succeeded: Iterable[int],
    may_be_running: Iterable[int],
    rejected_cluster: str | None,
    shares: Iterable[Share | Mapping[str, Any]],
    overflow: bool = True,
) -> Rebalance:
    """Move the indices of ``rejected_cluster``'s slice that have not ``succeeded`` (anywhere) and are not
    fenced (``may_be_running`` there), and any ``waiting`` index, to the other members by ``shares`` (as
    :func:`divide` deals them: room first, then weight). ``rejected_cluster`` None only places waiting
    indices (``overflow``: as in :func:`divide`). Nothing else moves: a succeeded index is never run again,
    a fenced one stays until its member answers or the grace ends (the caller's call: pass it again then,
    without it in ``may_be_running``).

    The rejected member keeps the indices that succeeded or are fenced there (what it ran, and what it may
    still be running); what no member may take now waits."""
    if not isinstance(division, Division):
        raise SpecError(f"division: expected a Division, got {type(division).__name__}")
    completions = division.completions
    done = _indices(succeeded, completions, "succeeded")
    fenced_all = _indices(may_be_running, completions, "may_be_running")
    if done & fenced_all:
        raise SpecError(f"may_be_running: index {min(done & fenced_all)} also succeeded")
    source = division.slice_of(rejected_cluster) if rejected_cluster is not None else None
    if rejected_cluster is not None and source is None:
        holders = ", ".join(piece.cluster for piece in division.slices) or "none"
        raise SpecError(
            f"rejected_cluster: '{rejected_cluster}' holds no slice of this division (holders: {holders})"
        )
    ordered = [share for share in _checked_shares(shares, "shares") if share.cluster != rejected_cluster]
    known = {share.cluster for share in ordered} | {piece.cluster for piece in division.slices}
    holder_of = division.cluster_of()
    for index in fenced_all:
        if index not in holder_of:
            raise SpecError(f"may_be_running: index {index} is waiting: no member was given it")
    source_indices = set(source.indices) if source is not None else set()
    fenced = tuple(sorted(source_indices & fenced_all))
    kept = tuple(sorted(source_indices & done))
    unfinished = source_indices - done - fenced_all
    movable = sorted(unfinished | (set(division.waiting) - done))
    pods = source.parallelism if source is not None else division.parallelism
    counts, reasons = _deal(len(movable), ordered, pods, overflow)
    moved: list[IndexSlice] = []
    receiving: dict[str, list[int]] = {}
    start = 0
    given = [(share, count) for share, count in counts if count > 0]
    at_once = _split_parallelism(min(pods, len(movable)), [c for _, c in given]) if given else []
    for (share, count), pods_at_once in zip(given, at_once, strict=True):
        indices = movable[start : start + count]
        start += count
        receiving[share.cluster] = indices
        moved.append(IndexSlice(cluster=share.cluster, indices=tuple(indices), parallelism=pods_at_once))
    still_waiting = tuple(movable[start:])
    slices: list[IndexSlice] = []
    for piece in division.slices:
        indices = list(piece.indices)
        parallelism = piece.parallelism
        if piece.cluster == rejected_cluster:
            indices = sorted(set(fenced) | set(kept))
            parallelism = min(parallelism, len(indices))
        extra = receiving.pop(piece.cluster, [])
        if extra:
            added = next(m for m in moved if m.cluster == piece.cluster)
            indices = sorted(indices + extra)
            parallelism += added.parallelism
        if indices:
            slices.append(
                IndexSlice(cluster=piece.cluster, indices=tuple(indices), parallelism=max(1, parallelism))
            )
    for piece in moved:
        if piece.cluster in receiving:
            slices.append(piece)
    notes = dict(division.reasons)
    for piece in moved:
        notes[piece.cluster] = f"received {len(piece.indices)} moved index(es) ({piece.ranges})" + (
            f" from {rejected_cluster}" if rejected_cluster else ""
        )
    for cluster, why in reasons.items():
        if cluster in known and cluster not in receiving:
            notes.setdefault(cluster, why)
    if rejected_cluster is not None:
        left = len(unfinished & set(still_waiting))
        notes[rejected_cluster] = (
            f"rejected: {len(unfinished) - left} unfinished index(es) moved off, {left} waiting for room; "
            f"kept {len(kept)} succeeded there and {len(fenced)} fenced (may still be running there)"
        )
    new = _build(
        Division,
        "division",
        completions=completions,
        parallelism=division.parallelism,
        slices=tuple(slices),
        waiting=still_waiting,
        reasons=notes,
    )
    return Rebalance(division=new, moved=tuple(moved), source=rejected_cluster, fenced=fenced, kept=kept)
