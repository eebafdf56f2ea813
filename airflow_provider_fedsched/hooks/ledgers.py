"""Reservations that hold across worker processes and hosts: the member cluster's own ledger.

``FederationHook.place`` decides on shared state, then holds the request in the chosen cluster's ledger
(``kube/ledger.py``, a Lease changed by compare-and-set), checking with the engine that the request still
fits next to every placement the ledger holds. When it does not (other workers took the room since the
snapshot), the cluster is left out and the decision made again. A cluster without a usable ledger falls
back to the reservations in shared state (Variables: last writer wins), remembered for a while so that
it is not asked on every placement.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.federation.resources import ResourceList, add
from airflow_provider_fedsched.kube.clients import shared_sync_client
from airflow_provider_fedsched.kube.ledger import LedgerUnavailable, PlacementLedger, lease_name
from airflow_provider_fedsched.state import RESERVATION_TTL
from airflow_provider_fedsched.state.process import ledgers_unavailable

if TYPE_CHECKING:
    from collections.abc import Iterable

    from airflow_provider_fedsched.federation.audit import LedgerReading
    from airflow_provider_fedsched.federation.request import TaskRequest
    from airflow_provider_fedsched.federation.spec import PolicySpec
    from airflow_provider_fedsched.hooks.parts import HookParts

RETRY_UNAVAILABLE = 600.0
"""Seconds before a cluster whose ledger was unavailable is asked again."""


def enabled() -> bool:
    """``[fedsched] placement_ledger`` (default on)."""
    from airflow.configuration import conf

    return conf.getboolean("fedsched", "placement_ledger", fallback=True)


def _ledger(hook: HookParts, cluster: str) -> PlacementLedger | None:
    if not enabled():
        return None
    if ledgers_unavailable.marked((hook.spec.name, cluster)):
        return None
    access = hook.access(cluster)
    return PlacementLedger(shared_sync_client(access), access.namespace, hook.spec.name)


def _give_up(hook: HookParts, cluster: str, exc: BaseException) -> None:
    hook.log.warning(
        "Cluster %s keeps no placement ledger (%s): reservations in shared state only", cluster, exc
    )
    ledgers_unavailable.mark((hook.spec.name, cluster), RETRY_UNAVAILABLE)


def hold(
    hook: HookParts, cluster: str, request: TaskRequest, placement_id: str, policy: PolicySpec | None
) -> bool | None:
    """True: held in the cluster's ledger; False: no room next to what the ledger holds; None: the
    cluster has no usable ledger (shared state must do)."""
    ledger = _ledger(hook, cluster)
    if ledger is None:
        return None
    snapshot = hook.state.snapshots.newest([cluster]).get(cluster)
    if snapshot is None:
        return None
    only_here = request.model_copy(update={"clusters": [cluster]})

    def fits(held: list[ResourceList]) -> bool:
        from datetime import UTC, datetime

        # The held placements as pods in flight, as the hook's decision passes its reservations: charged
        # as one sum instead, they would take room on nodes their pods cannot use, and the ledger would
        # refuse the cluster the decision found room on.
        again = hook.engine.decide(
            only_here,
            {cluster: snapshot},
            now=datetime.now(UTC),
            reservations={cluster: reduce(add, held, ResourceList())},
            in_flight={cluster: held},
            policy=policy,
        )
        return again.outcome == "placed"

    def landed(other: str, at: float) -> bool:
        return other in snapshot.placements and snapshot.observed_at.timestamp() > at

    try:
        return ledger.reserve(
            placement_id,
            request.resources,
            fits=fits,
            landed=landed,
            ttl=RESERVATION_TTL.total_seconds(),
            roles=[(role.count, role.resources) for role in request.gang],
        )
    except LedgerUnavailable as exc:
        _give_up(hook, cluster, exc)
    except Exception as exc:  # no answer: the placement proceeds on shared state, the create will tell
        hook.log.warning("Placement ledger of %s not reached: %s", cluster, exc)
    return None


def release(hook: HookParts, cluster: str, placement_id: str) -> None:
    ledger = _ledger(hook, cluster)
    if ledger is None:
        return
    try:
        ledger.release(placement_id)
    except LedgerUnavailable as exc:
        _give_up(hook, cluster, exc)
    except Exception as exc:  # its entry expires on its own (RESERVATION_TTL)
        hook.log.debug("Placement ledger of %s not reached: %s", cluster, exc)


def held(hook: HookParts, cluster: str) -> dict[str, Any]:
    """What the cluster's ledger holds now (for tests and the benchmark)."""
    ledger = _ledger(hook, cluster)
    return {} if ledger is None else {pid: e.requests for pid, e in ledger.held().items()}


AUDIT_READERS = 8
"""Members whose ledgers the audit reads at once (each read is bounded by the client's timeouts)."""


def readings(hook: HookParts, clusters: Iterable[str]) -> dict[str, LedgerReading]:
    """Each member's ledger for the audit, read now (never created, no cached unavailability): the
    placement ids it holds, or why they cannot be told (``federation/audit.py`` judges with them)."""
    from concurrent.futures import ThreadPoolExecutor

    from airflow_provider_fedsched.federation.audit import LedgerReading

    names = list(clusters)
    if not enabled():
        off = LedgerReading(None, "placement ledgers are off ([fedsched] placement_ledger = False)")
        return dict.fromkeys(names, off)

    def read(cluster: str) -> LedgerReading:
        from airflow_provider_fedsched.kube.access import ClusterAccessError

        try:
            access = hook.access(cluster)
            entries = PlacementLedger(shared_sync_client(access), access.namespace, hook.spec.name).peek()
        except ClusterAccessError as exc:
            return LedgerReading(None, f"cannot be reached: {exc}")
        except LedgerUnavailable as exc:
            return LedgerReading(None, str(exc))
        except Exception as exc:  # no answer in time, TLS, DNS...: the reason, never the exception's text
            return LedgerReading(None, f"did not answer ({type(exc).__name__})")
        if entries is None:
            return LedgerReading(
                None,
                f"keeps no ledger for federation '{hook.spec.name}' (no Lease {lease_name(hook.spec.name)})",
            )
        return LedgerReading(frozenset(entries))

    with ThreadPoolExecutor(max_workers=max(1, min(AUDIT_READERS, len(names)))) as pool:
        return dict(zip(names, pool.map(read, names), strict=True))
