"""The federation engine: filter every member cluster, score the survivors, pick one deterministically."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import reduce
from typing import cast

from airflow_provider_fedsched.federation.decision import Candidate, Decision, Outcome, Rejection, ScoreTerm
from airflow_provider_fedsched.federation.framework import SUCCESS, ClusterView, Code, CycleState, Skips
from airflow_provider_fedsched.federation.limits import check_time
from airflow_provider_fedsched.federation.plugins import Profile, profile
from airflow_provider_fedsched.federation.queue import queue_order
from airflow_provider_fedsched.federation.request import TaskRequest
from airflow_provider_fedsched.federation.resources import ResourceList, add
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
from airflow_provider_fedsched.federation.spec import FederationSpec, PolicySpec, SpecError, spec_fingerprint
from airflow_provider_fedsched.federation.tenancy import TenantInputs

__all__ = ["FederationEngine"]


class _CollectorPause:
    """Pause Python's cyclic garbage collector while any thread is inside :meth:`FederationEngine.decide`.

    A decision creates thousands of short-lived objects and no reference cycles. With the collector on,
    the ones alive when a young-generation collection runs get promoted and, every few dozen decisions,
    trigger a full collection that walks every snapshot object (about 200 ms at 50,000 nodes): that, not
    the engine, was the p99. Reference counting still frees everything; the lock makes nested and
    concurrent decisions restore the collector only once, and only if it was enabled.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._was_enabled = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._was_enabled:
                    gc.enable()


_collector_paused = _CollectorPause()


class FederationEngine:
    """Stateless apart from the spec: call :meth:`decide` as often as needed, from any thread."""

    def __init__(self, spec: FederationSpec) -> None:
        self.spec = spec
        self.fingerprint = spec_fingerprint(spec)
        # The spec's own policy's plugins, looked up once: most decisions use that policy.
        self._profile = profile(spec.policy.filters, spec.policy.scores)

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
        with _collector_paused():
            return self._decide(
                request,
                snapshots,
                now,
                cooldowns,
                reservations,
                forecast,
                exclude,
                policy,
                tenancy,
                in_flight,
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
        passed, success, never = SUCCESS, Code.SUCCESS, Code.UNSCHEDULABLE_AND_UNRESOLVABLE

        survivors: list[ClusterView] = []
        rejected: list[Rejection] = []
        ages: dict[str, float] = {}
        for cluster in self.spec.clusters:
            snapshot = snapshots.get(cluster.name)
            if snapshot is not None:
                ages[cluster.name] = (now - snapshot.observed_at).total_seconds()
            pods = tuple(in_flight.get(cluster.name) or ())
            view = ClusterView(
                cluster,
                snapshot,
                snapshot.index if snapshot is not None else None,
                reservations.get(cluster.name) or reduce(add, pods, ResourceList()),
                cluster.namespace or request.namespace,
                pods,
            )
            for plugin in filters:
                status = plugin.filter(state, view)
                if status is not passed and status.code is not success:
                    reason = status.reason or f"rejected by {plugin.name} (no reason given)"
                    rejected.append(Rejection(cluster.name, plugin.name, reason, status.code is never))
                    break
            else:
                survivors.append(view)

        candidates = self._rank(state, survivors, plugins)
        rejected.sort(key=lambda r: (not r.permanent, r.cluster))
        outcome: Outcome
        if candidates:
            outcome = "placed"
            best = candidates[0]
            reason = (
                f"placed on {best.cluster} (score {best.score:.1f}); "
                f"{len(candidates)} candidate(s), {len(rejected)} rejected"
            )
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
            decided_at=now,
            spec_fingerprint=self.fingerprint,
        )

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
