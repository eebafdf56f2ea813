"""Tenants: the teams sharing a federation, their quotas, fair-share weights and budgets.

A tenant sees how much of the federation it asked for and uses, never the clusters underneath. Quotas are
federation-wide (over every member), in Kubernetes quantities (``nvidia.com/gpu: 64``, ``memory: 2Ti``,
``pods: 200`` for concurrent pods). Usage is counted from the federation's own records: the pods its
snapshots show with the tenant label plus the placements reserved and not yet seen (:class:`TenantInputs`,
built by the hook from shared state, so every worker counts the same).

The plugins that apply these rules are in :mod:`federation.plugins.tenancy`; see ``docs/tenants.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from airflow_provider_fedsched.federation._loading import SpecError
from airflow_provider_fedsched.federation.limits import NOT_BOOL
from airflow_provider_fedsched.federation.resources import (
    QuantityError,
    ResourceList,
    format_quantity,
    parse_resource_list,
)

__all__ = [
    "BudgetSpec",
    "TenantInputs",
    "TenantMapping",
    "TenantSpec",
    "WaitingTask",
    "dominant_share",
    "period_start",
    "quota_text",
]

NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
TenantName = Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]
"""A tenant's name is also a label value on its pods: at most 63 characters."""
Quantities = dict[str, Annotated[str | int | float, NOT_BOOL]]
"""Resource name -> quantity; a boolean is refused (``cpu: true`` is not one cpu)."""
Period = Literal["day", "week", "month"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_quantities(value: Quantities) -> Quantities:
    try:
        parse_resource_list(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return value


class BudgetSpec(_Model):
    """What a tenant may spend per period (UTC calendar day, ISO week or month)."""

    period: Period = "month"
    max_cost: Annotated[float, NOT_BOOL, Field(ge=0, allow_inf_nan=False)] | None = None
    """Estimated compute and egress cost, in the prices' currency."""
    max_egress_gb: Annotated[float, NOT_BOOL, Field(ge=0, allow_inf_nan=False)] | None = None


class TenantSpec(_Model):
    """One team: what it may use of the federation and how it shares it with the others."""

    name: TenantName
    quota: Quantities = Field(default_factory=dict)
    """Federation-wide cap per resource; a resource not named is not capped. ``pods``: concurrent pods."""
    guaranteed: Quantities = Field(default_factory=dict)
    """The part of its quota held for it: others borrow it only with reclaimable, preemptible tasks."""
    weight: Annotated[float, NOT_BOOL, Field(gt=0, allow_inf_nan=False)] = 1.0
    """Fair share: among waiting tasks, the tenant furthest below ``weight`` x its share goes first."""
    reclaimable: bool = False
    """Its preemptible tasks may borrow the idle quota of other tenants beyond its own quota; what they
    borrow is given back (the task moved) when the lender needs it."""
    budget: BudgetSpec | None = None

    @field_validator("quota", "guaranteed")
    @classmethod
    def _quantities(cls, value: Quantities) -> Quantities:
        return _check_quantities(value)

    @model_validator(mode="after")
    def _guaranteed_within_quota(self) -> TenantSpec:
        quota = self.quota_units
        for name, amount in self.guaranteed_units.items():
            if name in quota and amount > quota[name]:
                raise SpecError(
                    f"guaranteed.{name}: {format_quantity(name, amount)} is above the quota "
                    f"({format_quantity(name, quota[name])})"
                )
        return self

    @cached_property
    def quota_units(self) -> ResourceList:
        return parse_resource_list(self.quota)

    @cached_property
    def guaranteed_units(self) -> ResourceList:
        return parse_resource_list(self.guaranteed)


class TenantMapping(_Model):
    """A DAG-level default tenant for tasks that name none: by the task's owner, then by DAG tag."""

    owners: dict[str, TenantName] = Field(default_factory=dict)
    tags: dict[str, TenantName] = Field(default_factory=dict)
    default: TenantName | None = None
    """The tenant of a task no rule maps; None = such a task belongs to no tenant (no quota applies)."""

    def tenant_for(self, owner: str | None, tags: Iterable[str] = ()) -> str | None:
        """The mapped tenant: the owner's, else the first tag's in sorted order, else the default."""
        if owner is not None and owner in self.owners:
            return self.owners[owner]
        for tag in sorted(tags):
            if tag in self.tags:
                return self.tags[tag]
        return self.default


@dataclass(frozen=True, slots=True)
class WaitingTask:
    """A task waiting for a cluster, as shared state holds it (fair share decides who goes first)."""

    placement_id: str
    tenant: str
    resources: ResourceList
    clusters: frozenset[str]
    """The clusters it could take once they have room (its last decision's non-permanent rejections)."""
    since: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "placement_id": self.placement_id,
            "tenant": self.tenant,
            "resources": dict(self.resources),
            "clusters": sorted(self.clusters),
            "since": self.since.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class TenantInputs:
    """What the tenant rules need from shared state, federation-wide, for one decision."""

    usage: Mapping[str, ResourceList] = field(default_factory=dict)
    """Tenant -> requests of its running pods and its in-flight placements (``pods``: their count)."""
    borrowed: Mapping[str, ResourceList] = field(default_factory=dict)
    """Tenant -> the part of its usage above its quota (reclaimable, preemptible pods)."""
    waiting: tuple[WaitingTask, ...] = ()
    spent: Mapping[str, float] = field(default_factory=dict)
    """Tenant -> estimated cost of its cluster attempts this budget period."""
    egress_gb: Mapping[str, float] = field(default_factory=dict)
    """Tenant -> gigabytes its tasks moved this budget period."""
    capacity: ResourceList = field(default_factory=dict)
    """The federation's allocatable resources (schedulable nodes of every member answering)."""


def quota_text(tenant: str, resource: str, used: int, quota: int) -> str:
    """``team-ml uses 60/64 nvidia.com/gpu``: the reason a task of the tenant waits."""
    return f"{tenant} uses {format_quantity(resource, used)}/{format_quantity(resource, quota)} {resource}"


def dominant_share(usage: Mapping[str, int], capacity: Mapping[str, int]) -> float:
    """The tenant's largest fraction of any resource of the federation (dominant resource fairness)."""
    share = 0.0
    for name, amount in usage.items():
        total = capacity.get(name, 0)
        if total > 0 and amount > 0:
            share = max(share, amount / total)
    return share


def period_start(period: Period, now: datetime) -> datetime:
    """The start (UTC) of the budget period containing ``now``."""
    moment = now.astimezone(UTC)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)
