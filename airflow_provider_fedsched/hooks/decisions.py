"""A task's decision at run time: the engine's, with what the try learnt on the way.

* A cluster left earlier in the try (``exclude``) is considered again once a snapshot taken after it was
  left shows it answering: then the rules judge its room afresh.
* A cluster found at run time never to fit the task (``impossible``, e.g. a request above a hard quota)
  stays out; when only such clusters remain, the decision is ``impossible``, not a wait.
* A cooldown steers work elsewhere but never makes a task wait: when every compliant cluster with room is
  cooling down, the best of them is chosen, and the reason says so.
* A namespace quota whose *hard* limit is below the request can never admit it: such a cluster is out for
  good, and when only such clusters remain the decision is ``impossible``, not a 30-minute wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from airflow_provider_fedsched.federation.decision import Decision
from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.spec import PolicySpec
    from airflow_provider_fedsched.hooks.parts import HookParts

COOLDOWN_PLUGIN = "Cooldown"
QUOTA_PLUGIN = "Quota"


def answered_since(snapshot: ClusterSnapshot | None, moment: datetime | None) -> bool:
    return (
        snapshot is not None and snapshot.reachable and moment is not None and snapshot.observed_at > moment
    )


def decide(
    hook: HookParts,
    request: TaskRequest,
    *,
    exclude: Mapping[str, str],
    excluded_at: Mapping[str, datetime],
    impossible: Mapping[str, str],
    policy: PolicySpec | None,
    forecast: Mapping[str, float] | None,
    now: datetime | None,
) -> Decision:
    view = hook.view(request.clusters or [c.name for c in hook.spec.clusters], request.namespace, now)
    active = {
        cluster: reason
        for cluster, reason in exclude.items()
        if not answered_since(view.snapshots.get(cluster), excluded_at.get(cluster))
    }
    active.update(impossible)

    def run(cooldowns: Mapping[str, datetime]) -> Decision:
        return hook.engine.decide(
            request,
            view.snapshots,
            now=view.now,
            cooldowns=dict(cooldowns),
            reservations=view.reservations,
            forecast=forecast,
            exclude=active,
            policy=policy,
            tenancy=view.tenancy,
            in_flight=view.in_flight,
        )

    decision = _never_above_hard_quota(hook, request, run(view.cooldowns))
    if decision.outcome != "wait":
        return decision
    cooling = {r.cluster for r in decision.rejected if r.plugin == COOLDOWN_PLUGIN}
    if cooling:
        retry = run({c: until for c, until in view.cooldowns.items() if c not in cooling})
        if retry.outcome == "placed":
            retry.reason += (
                f"; {retry.cluster} is cooling down, but every compliant cluster with room is: "
                "a cooldown is not a reason to wait"
            )
            return _never_above_hard_quota(hook, request, retry)
    if all(r.permanent or r.cluster in impossible for r in decision.rejected) and decision.rejected:
        for rejection in decision.rejected:
            rejection.permanent = True
        decision.outcome = "impossible"
        never = "; ".join(f"{r.cluster}: {r.plugin}: {r.reason}" for r in decision.rejected)
        decision.reason = f"no member cluster can ever run this task: {never}"
    return decision


def _never_above_hard_quota(hook: HookParts, request: TaskRequest, decision: Decision) -> Decision:
    """A quota rejection is "never" (not "not now") where the request alone exceeds the namespace's hard
    limit, whatever the outcome: the explanation of a task placed elsewhere says so too."""
    for rejection in decision.rejected:
        if rejection.plugin == QUOTA_PLUGIN and not rejection.permanent:
            above = _above_hard_quota(hook, rejection.cluster, request)
            if above:
                rejection.permanent = True
                rejection.reason += (
                    f" (above the namespace's hard quota for {', '.join(above)}: it can never fit)"
                )
    return decision


def _above_hard_quota(hook: HookParts, cluster: str, request: TaskRequest) -> list[str]:
    """Resources whose request alone exceeds the hard quota of the task's namespace in ``cluster``."""
    namespace = hook.spec.cluster(cluster).namespace or request.namespace
    hard = hook.state.quota_limits.get(cluster).get(namespace, {})
    return sorted(name for name, amount in request.resources.items() if name in hard and amount > hard[name])
