"""The federation engine: filter every member cluster, score the survivors, pick one deterministically."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, cast

from airflow_provider_fedsched.federation.decision import Candidate, Decision, Outcome, Rejection, ScoreTerm
from airflow_provider_fedsched.federation.framework import (
    SUCCESS,
    ClusterView,
    Code,
    CycleState,
    FilterPlugin,
    Skips,
    Status,
)
from airflow_provider_fedsched.federation.limits import check_time
from airflow_provider_fedsched.federation.plugins import Profile, profile
from airflow_provider_fedsched.federation.queue import queue_order
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import ResourceList
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError, spec_fingerprint
from airflow_provider_fedsched.federation.tenancy import TenantInputs

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.columns import (
        Batch,
        FederationColumns,
        Floats,
        Positions,
        SpecColumns,
    )
    from airflow_provider_fedsched.federation.framework import ScorePlugin

COLUMNAR_MIN_CLUSTERS = 32
"""From this many member clusters :meth:`FederationEngine.decide` works over the columnar snapshot index
(:mod:`federation.columns`); below, the per-cluster loop is as fast and a fresh process is spared numpy's
import (``benchmarks/bench_engine.py`` measures both)."""

_score_term = cast(
    "Callable[[tuple[float, float, float, float]], ScoreTerm]", partial(tuple.__new__, ScoreTerm)
)
"""A :class:`ScoreTerm` from its four values without a Python-level call (thousands per decision)."""


def _score_terms(raw: Floats, normalized: Floats, weight: float, weighted: Floats) -> list[ScoreTerm]:
    """One plugin's :class:`ScoreTerm` per candidate. A column of few distinct values (a constant
    Locality or Forecast, Proximity's 0/50/100) shares one term per value: the terms are immutable and
    equal, and thousands fewer objects to make and for the collector to scan."""
    import numpy as np

    count = len(raw)
    if count >= 256 and len(set(raw[:32].tolist())) <= 4:
        values, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
        columns = (raw, normalized, weighted)
        # Shared only where (normalized, weighted) follow from raw, and no -0.0 or NaN could be swapped
        # for an equal-looking value.
        if (
            len(values) * 4 <= count
            and (normalized == normalized[first][inverse]).all()
            and not any(np.isnan(c).any() or (np.signbit(c) & (c == 0)).any() for c in columns)
        ):
            shared = list(
                map(
                    _score_term,
                    zip(
                        raw[first].tolist(),
                        normalized[first].tolist(),
                        repeat(weight),
                        weighted[first].tolist(),
                    ),
                )
            )
            return [shared[i] for i in inverse.tolist()]
    return list(map(_score_term, zip(raw.tolist(), normalized.tolist(), repeat(weight), weighted.tolist())))


def _score_columns(
    plugin: ScorePlugin, state: CycleState, batch: Batch, positions: Positions, survivors: list[int]
) -> tuple[Floats, Floats]:
    """(raw, normalized) scores of the surviving clusters: by ``score_all``/``normalize_all`` where the
    plugin has them, else cluster by cluster."""
    import numpy as np

    score_all = getattr(plugin, "score_all", None)
    raw = score_all(state, batch, positions) if score_all is not None else None
    if raw is not None:
        return raw, plugin.normalize_all(raw)  # type: ignore[attr-defined]
    values = [float(plugin.score(state, batch.view(position))) for position in survivors]
    return np.array(values, np.float64), np.array(plugin.normalize(values), np.float64)


__all__ = ["FederationEngine"]


class FederationEngine:
    """Stateless apart from the spec: call :meth:`decide` as often as needed, from any thread."""

    def __init__(self, spec: FederationSpec, *, columnar: bool | None = None) -> None:
        """``columnar``: decide over the columnar snapshot index (:mod:`federation.columns`); None: when the
        request may use :data:`COLUMNAR_MIN_CLUSTERS` clusters or more. Both give the same decisions."""
        self.spec = spec
        self.fingerprint = spec_fingerprint(spec)
        # The spec's own policy's plugins, looked up once: most decisions use that policy.
        self._profile = profile(spec.policy.filters, spec.policy.scores)
        self._columnar = columnar
        self._spec_columns: SpecColumns | None = None
        self._columns: FederationColumns | None = None

    def order(
        self, waiting: Sequence[tuple[TaskRequest, float]], policy: PolicySpec | None = None
    ) -> list[int]:
        """Positions of the waiting (request, arrival) pairs in the order to decide them when capacity
        frees up, by ``policy.queue_order`` (:mod:`federation.queue`)."""
        return queue_order(waiting, (policy or self.spec.policy).queue_order)

    def decide(
        self,
        request: TaskRequest,
        snapshots: Mapping[str, ClusterSnapshot],
        *,
        now: datetime,
        cooldowns: Mapping[str, datetime] | None = None,
        reservations: Mapping[str, ResourceList] | None = None,
        forecast: Mapping[str, float] | None = None,
        exclude: Mapping[str, str] | None = None,
        policy: PolicySpec | None = None,
        tenancy: TenantInputs | None = None,
        in_flight: Mapping[str, Sequence[ResourceList]] | None = None,
    ) -> Decision:
        """Place ``request`` given the latest ``snapshots`` (cluster name -> snapshot) at time ``now``.

        ``cooldowns``: cluster -> until when it takes no new work. ``reservations``: cluster -> in-flight
        requests not yet visible in its snapshot. ``in_flight``: cluster -> the same requests pod by pod,
        oldest first, where known: the node fit then charges each to the node the cluster's scheduler
        would give it (``scoring_strategy``) instead of spreading the sum (a cluster missing from
        ``reservations`` is charged their sum). ``forecast``: cluster -> predicted idle fraction.
        ``exclude``: cluster -> reason (failover). ``policy``: a per-task policy replacing the spec's.
        ``tenancy``: federation-wide tenant usage, waiting tasks and spend (the tenant rules' inputs).
        Raises :class:`SpecError` naming the request field that refers to an unknown cluster, dataset,
        region or group.
        """
        if now.tzinfo is None:
            raise SpecError("now: must be timezone-aware")
        check_time(now, "now")
        return self._decide(
            request, snapshots, now, cooldowns, reservations, forecast, exclude, policy, tenancy, in_flight
        )

    def _decide(
        self,
        request: TaskRequest,
        snapshots: Mapping[str, ClusterSnapshot],
        now: datetime,
        cooldowns: Mapping[str, datetime] | None,
        reservations: Mapping[str, ResourceList] | None,
        forecast: Mapping[str, float] | None,
        exclude: Mapping[str, str] | None,
        policy: PolicySpec | None,
        tenancy: TenantInputs | None,
        in_flight: Mapping[str, Sequence[ResourceList]] | None,
    ) -> Decision:
        policy = policy or self.spec.policy
        datasets = self.spec.check_references(
            clusters=request.clusters,
            datasets=request.datasets,
            assets=request.assets,
            prefer_region=request.prefer_region,
            prefer_group=request.prefer_group,
            tenant=request.tenant,
            where="request",
        )
        state = CycleState(
            spec=self.spec,
            request=request,
            policy=policy,
            now=now,
            cooldowns=cooldowns or {},
            exclude=exclude or {},
            forecast=forecast,
            datasets=datasets,
            request_items=tuple(sorted(request.resources.items())),
            tenancy=tenancy,
        )
        plugins = self._profile if policy is self.spec.policy else profile(policy.filters, policy.scores)
        for plugin in plugins.preparers:
            plugin.prepare(state)
        reservations = reservations or {}
        in_flight = in_flight or {}
        filters = plugins.filters
        if plugins.skippers:  # a rule with nothing to check in this decision is not called per cluster
            filters = tuple(
                p for p in filters if p.name not in plugins.skippers or not cast(Skips, p).skip(state)
            )
        # By the clusters the request may use: a decision restricted to one (the ledger's check of a
        # placement) is cheaper cluster by cluster, and leaves the index of the whole federation in place.
        using = len(request.clusters) if request.clusters is not None else len(self.spec.clusters)
        if self._columnar or (self._columnar is None and using >= COLUMNAR_MIN_CLUSTERS):
            return self._decide_columns(state, plugins, filters, snapshots, reservations, in_flight)
        passed, success, never = SUCCESS, Code.SUCCESS, Code.UNSCHEDULABLE_AND_UNRESOLVABLE

        survivors: list[ClusterView] = []
        rejected: list[Rejection] = []
        ages: dict[str, float] = {}
        for cluster in self.spec.clusters:
            snapshot = snapshots.get(cluster.name)
            if snapshot is not None:
                ages[cluster.name] = (now - snapshot.observed_at).total_seconds()
            view = ClusterView.of(
                cluster,
                snapshot,
                request.namespace,
                reservations.get(cluster.name),
                in_flight.get(cluster.name),
            )
            for plugin in filters:
                status = plugin.filter(state, view)
                if status is not passed and status.code is not success:
                    reason = status.reason or f"rejected by {plugin.name} (no reason given)"
                    rejected.append(Rejection(cluster.name, plugin.name, reason, status.code is never))
                    break
            else:
                survivors.append(view)

        return self.decision(state, plugins, self._rank(state, survivors, plugins), rejected, ages)

    def decision(
        self,
        state: CycleState,
        plugins: Profile,
        candidates: list[Candidate],
        rejected: list[Rejection],
        ages: dict[str, float],
        ordered: bool = False,
    ) -> Decision:
        """The decision from the ranked candidates and the rejections (in any order, or ``ordered``: the
        permanent ones first, then by cluster name), with its reason."""
        if not ordered:
            rejected.sort(key=lambda r: (not r.permanent, r.cluster))
        outcome: Outcome
        extra: dict[str, object] = {}
        if candidates:
            outcome = "placed"
            best = candidates[0]
            reason = (
                f"placed on {best.cluster} (score {best.score:.1f}); "
                f"{len(candidates)} candidate(s), {len(rejected)} rejected"
            )
            node = next(filter(None, (p.hint(state, best.cluster) for p in plugins.hinters)), None)
            if node is not None:
                extra["preferred_node"] = node
                reason += f"; preferred node {node}"
        else:
            outcome = "impossible" if all(r.permanent for r in rejected) else "wait"
            reason = self._summarize(outcome, rejected, state, plugins)
        return Decision(
            outcome=outcome,
            cluster=candidates[0].cluster if candidates else None,
            candidates=candidates,
            rejected=rejected,
            snapshot_age_seconds=ages,
            reason=reason,
            decided_at=state.now,
            spec_fingerprint=self.fingerprint,
            extra=extra,
        )

    def _columns_of(self, snapshots: Mapping[str, ClusterSnapshot]) -> FederationColumns:
        """The columnar index of these snapshots, rebuilt only when a snapshot object changed (a thread
        may rebuild it concurrently: both results are the same)."""
        from airflow_provider_fedsched.federation.columns import FederationColumns, SpecColumns

        spec_columns = self._spec_columns
        if spec_columns is None:
            spec_columns = self._spec_columns = SpecColumns(self.spec.clusters)
        current = list(map(snapshots.get, spec_columns.names))
        columns = self._columns
        if columns is None or not columns.current(current):
            columns = self._columns = FederationColumns(spec_columns, current)
        return columns

    def _decide_columns(
        self,
        state: CycleState,
        plugins: Profile,
        filters: tuple[FilterPlugin, ...],
        snapshots: Mapping[str, ClusterSnapshot],
        reservations: Mapping[str, ResourceList],
        in_flight: Mapping[str, Sequence[ResourceList]],
    ) -> Decision:
        """The same decision as the per-cluster loop, over the columnar index: each filter judges every
        cluster still in the running at once (``filter_all``) or, without one, cluster by cluster."""
        from airflow_provider_fedsched.federation.columns import Batch

        batch = Batch(
            self._columns_of(snapshots), state.now, state.request.namespace, reservations, in_flight
        )
        import numpy as np

        names = batch.spec.names
        passed, success, never = SUCCESS, Code.SUCCESS, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        positions: list[int] = []
        plugin_names: list[str] = []
        reasons: list[str] = []
        permanent: list[bool] = []
        for plugin in filters:
            judge_all = getattr(plugin, "filter_all", None)
            verdicts: Iterable[tuple[int, Status]] | None = judge_all(state, batch) if judge_all else None
            if verdicts is None:
                verdicts = [
                    (position, status)
                    for position in batch.alive_positions()
                    if (status := plugin.filter(state, batch.view(position))) is not passed
                    and status.code is not success
                ]
            start = len(positions)
            for position, status in verdicts:
                positions.append(position)
                reasons.append(status.reason or f"rejected by {plugin.name} (no reason given)")
                permanent.append(status.code is never)
            plugin_names.extend(repeat(plugin.name, len(positions) - start))
            batch.alive[positions[start:]] = False
        candidates = self._rank_columns(state, batch, batch.alive_positions(), plugins)
        # The rejections in the decision's order (the permanent ones first, then by cluster name), made in
        # that order: sorting thousands of them by a Python key costs more than making them.
        order: list[int] = np.lexsort(
            (batch.spec.name_rank[positions], ~np.array(permanent, np.bool_))
        ).tolist()
        rejected = list(
            map(
                Rejection,
                [names[positions[i]] for i in order],
                [plugin_names[i] for i in order],
                [reasons[i] for i in order],
                [permanent[i] for i in order],
            )
        )
        return self.decision(state, plugins, candidates, rejected, batch.snapshot_ages(), ordered=True)

    @staticmethod
    def _rank(state: CycleState, survivors: list[ClusterView], plugins: Profile) -> list[Candidate]:
        if not survivors:
            return []
        weights = state.policy.weights
        columns: list[tuple[str, float, list[float], list[float]]] = []
        tie_break: list[float] | None = None
        for plugin, key in plugins.scores:
            raw = [float(plugin.score(state, view)) for view in survivors]
            columns.append((plugin.name, weights.of(key), raw, plugin.normalize(raw)))
            if plugin is plugins.tie_break:
                tie_break = raw
        if tie_break is None:
            breaker = plugins.tie_break
            tie_break = (
                [float(breaker.score(state, view)) for view in survivors]
                if breaker is not None
                else [0.0] * len(survivors)
            )
        ranked: list[tuple[float, float, str, Candidate]] = []
        for position, view in enumerate(survivors):
            breakdown: dict[str, ScoreTerm] = {}
            total = 0.0
            for name, weight, raw, normalized in columns:
                weighted = normalized[position] * weight
                total += weighted
                breakdown[name] = ScoreTerm(raw[position], normalized[position], weight, weighted)
            # Rounding keeps float noise from breaking ties differently depending on input order.
            total = round(total, 9)
            ranked.append(
                (
                    -total,
                    round(tie_break[position], 9),
                    view.spec.name,
                    Candidate(view.spec.name, total, breakdown),
                )
            )
        ranked.sort(key=lambda item: item[:3])
        return [item[3] for item in ranked]

    @staticmethod
    def _rank_columns(
        state: CycleState, batch: Batch, survivors: list[int], plugins: Profile
    ) -> list[Candidate]:
        """:meth:`_rank` over the columns: the same scores, totals, order and breakdowns."""
        import numpy as np

        from airflow_provider_fedsched.federation.columns import rounded

        if not survivors:
            return []
        positions = np.array(survivors, np.intp)
        weights = state.policy.weights
        totals = np.zeros(len(survivors), np.float64)
        names: list[str] = []
        terms: list[list[ScoreTerm]] = []
        tie_break = None
        for plugin, key in plugins.scores:
            raw, normalized = _score_columns(plugin, state, batch, positions, survivors)
            weight = weights.of(key)
            weighted = normalized * weight
            totals = totals + weighted  # in the plugins' order, as the per-cluster sum
            names.append(plugin.name)
            terms.append(_score_terms(raw, normalized, weight, weighted))
            if plugin is plugins.tie_break:
                tie_break = raw
        if tie_break is None:
            breaker = plugins.tie_break
            tie_break = (
                _score_columns(breaker, state, batch, positions, survivors)[0]
                if breaker is not None
                else np.zeros(len(survivors), np.float64)
            )
        # Python's round(), as _rank does (numpy's differs in the last bit now and then).
        scores = rounded(totals, 9)
        ties = rounded(tie_break, 9)
        cluster_names = [batch.spec.names[p] for p in survivors]
        keys = (batch.spec.name_rank[positions], np.array(ties), -np.array(scores))
        if np.isfinite(keys[1]).all() and np.isfinite(keys[2]).all():
            order: list[int] = np.lexsort(keys).tolist()  # stable; -0.0 == 0.0 as in Python's sort
        else:
            order = sorted(range(len(survivors)), key=lambda i: (-scores[i], ties[i], cluster_names[i]))
        # One dict per candidate without a Python frame each (columns all have one term per survivor).
        breakdowns = (
            list(map(dict, map(zip, repeat(names), zip(*terms, strict=True))))
            if terms
            else [{} for _ in survivors]
        )
        return list(
            map(
                Candidate,
                [cluster_names[i] for i in order],
                [scores[i] for i in order],
                [breakdowns[i] for i in order],
            )
        )

    @staticmethod
    def _summarize(outcome: Outcome, rejected: list[Rejection], state: CycleState, plugins: Profile) -> str:
        if not rejected:
            return "impossible: the federation has no clusters"
        counts: dict[str, int] = {}
        for rejection in rejected:
            counts[rejection.plugin] = counts.get(rejection.plugin, 0) + 1
        tally = ", ".join(
            f"{count} {plugin}" for plugin, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        detail = None
        explain_all = plugins.explainers.get(rejected[0].plugin) if len(counts) == 1 else None
        if explain_all is not None:
            # One rule rejected every cluster: it may say why better than any one example.
            detail = explain_all(state)
        if detail is None:
            # The most telling example: a "not now" reason for wait, a "never" reason for impossible.
            pick = next((r for r in rejected if r.permanent == (outcome == "impossible")), rejected[0])
            detail = f"e.g. {pick.cluster}: {pick.reason}"
        verdict = (
            "no cluster could ever take this task"
            if outcome == "impossible"
            else "no cluster can take it now"
        )
        return f"{outcome}: {verdict} (0/{len(rejected)} clusters: {tally}); {detail}"
