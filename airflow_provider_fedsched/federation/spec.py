"""The federation spec: member clusters, where data lives and may go, and the placement policy.

Validated once, at load time, by pydantic; the engine trusts a :class:`FederationSpec` afterwards.
See ``docs/federation-spec.md`` for every field.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_provider_fedsched.federation._loading import SpecError, spec_error
from airflow_provider_fedsched.federation.assets import EXTRA_KEY, MAX_ASSET_ID, AssetDataset
from airflow_provider_fedsched.federation.documents import load_document
from airflow_provider_fedsched.federation.limits import (
    MAX_CLUSTERS,
    MAX_DATASETS,
    MAX_SECONDS,
    MAX_TENANTS,
    MAX_WEIGHT,
    NOT_BOOL,
    SPEC_LIMITS,
    LabelKey,
    Labels,
    LabelValue,
    Price,
    Seconds,
    SizeGb,
)
from airflow_provider_fedsched.federation.registry import (
    FILTER_PLUGINS,
    MANDATORY_FILTERS,
    SCORE_PLUGINS,
    default_weights,
)
from airflow_provider_fedsched.federation.tenancy import TenantMapping, TenantSpec

__all__ = [
    "ClusterSpec",
    "DatasetSpec",
    "FederationSpec",
    "PolicySpec",
    "Prices",
    "ResolvedDataset",
    "ScoringStrategy",
    "SpecError",
    "Taint",
    "TaintEffect",
    "Weights",
    "load_spec",
    "spec_fingerprint",
]

Weight = Annotated[float, NOT_BOOL, Field(ge=0, le=MAX_WEIGHT, allow_inf_nan=False)]
QueueOrder = Literal["arrival", "longest-first"]
"""How tasks waiting at the federation are ordered when capacity frees up (:mod:`federation.queue`)."""
NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
Name = Annotated[str, Field(min_length=1, max_length=253, pattern=NAME_PATTERN)]
"""A cluster or dataset name (the federation's too): letters, digits, '-', '_', '.'."""
CONN_ID_PATTERN = r"^[\w#!()\-.:/\\]+$"
ConnId = Annotated[str, Field(min_length=1, max_length=250, pattern=CONN_ID_PATTERN)]
"""An Airflow connection id, as Airflow accepts them (``airflow.models.connection.sanitize_conn_id``)."""
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
"""A Kubernetes namespace name (an RFC 1123 label): it becomes part of API paths."""
Region = Annotated[str, Field(min_length=1, max_length=253)]
MAX_DASHBOARD_URL = 2048
DASHBOARD_PLACEHOLDERS = frozenset({"cluster", "namespace", "pod"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Taint(_Model):
    """A Kubernetes taint (on a node, or on a whole cluster in the spec)."""

    key: LabelKey
    """A qualified name: an optional DNS prefix (253) and '/', then a name (63)."""
    value: LabelValue = ""
    effect: TaintEffect

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


class Prices(_Model):
    """Prices in one currency. Compute prices are per hour of *requested* capacity."""

    cpu_hour: Price = 0.0
    memory_gib_hour: Price = 0.0
    gpu_hour: Price = 0.0
    egress_gb: Price = 0.0
    extended: dict[str, Price] = Field(default_factory=dict)
    """Other resources: price per scheduler unit per hour (for example ``example.com/fpga: 1.2``)."""


RESOURCE_NAME_PATTERN = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
ResourceName = Annotated[str, Field(min_length=1, max_length=317, pattern=RESOURCE_NAME_PATTERN)]
"""A Kubernetes resource name (``cpu``, ``memory``, ``nvidia.com/gpu``)."""


class ScoringStrategy(_Model):
    """How the cluster's own scheduler picks a node among those that fit (the kube-scheduler's
    ``NodeResourcesFit`` ``scoringStrategy``). The engine uses it to predict where pods in flight land,
    so that it does not see room they have already taken.

    ``LeastAllocated`` (the kube-scheduler's default): the node with the largest share of ``resources``
    left. ``MostAllocated`` (bin packing, as GPU clusters configure it so whole nodes stay free): the
    node with the smallest share left. A resource other than cpu and memory that the pod does not
    request is left out of its score, as the kube-scheduler does for extended resources; a pod requesting
    none of ``resources`` goes to the node with the largest share of cpu and memory left.
    """

    type: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    resources: Annotated[tuple[ResourceName, ...], Field(min_length=1, max_length=16)] = ("cpu", "memory")

    @field_validator("resources")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"resource(s) {repeated} listed more than once")
        return value

    def packs(self, resource: str) -> bool:
        """Pods requesting ``resource`` go to the fitting node with the least of it left."""
        return self.type == "MostAllocated" and resource in self.resources


class ClusterSpec(_Model):
    name: Name
    conn_id: ConnId
    region: Region
    group: Region | None = None
    """Proximity group (same metro); defaults to the region."""
    labels: Labels = Field(default_factory=dict)
    """Matched by a task's ``cluster_selector``; keys and values as Kubernetes labels."""
    taints: list[Taint] = Field(default_factory=list)
    prices: Prices = Field(default_factory=Prices)
    namespace: Namespace | None = None
    """Namespace pods are created in on this cluster; None = the task's namespace."""
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy)
    """How this cluster's scheduler scores nodes (default: the kube-scheduler's, least allocated)."""
    dashboard_url: Annotated[str, Field(max_length=MAX_DASHBOARD_URL)] | None = None
    """URL template for an operator extra link (http or https); placeholders ``{cluster}``, ``{namespace}``,
    ``{pod}``, without format specs or conversions."""

    @model_validator(mode="after")
    def _default_group(self) -> ClusterSpec:
        if self.group is None:
            object.__setattr__(self, "group", self.region)
        return self

    @field_validator("dashboard_url")
    @classmethod
    def _known_placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            parts = list(string.Formatter().parse(value))
        except ValueError as exc:
            raise ValueError(f"not a valid URL template: {exc}") from None
        fields = {field for _, field, _, _ in parts if field is not None}
        unknown = sorted(fields - DASHBOARD_PLACEHOLDERS)
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {unknown} (allowed: {{cluster}}, {{namespace}}, {{pod}})"
            )
        # A format spec ({pod:>99999999999}) would let a spec allocate gigabytes when the link is rendered.
        fancy = [f"{{{f}{'!' + c if c else ''}{':' + p if p else ''}}}" for _, f, p, c in parts if p or c]
        if fancy:
            raise ValueError(
                f"placeholder(s) {fancy} take a format spec or conversion; write plain {{cluster}}, "
                "{namespace} or {pod}"
            )
        url = urlsplit(value.format(cluster="c", namespace="n", pod="p"))
        if url.scheme.lower() not in ("http", "https") or not url.netloc:
            raise ValueError(
                f"must be an http:// or https:// URL with a host (got scheme '{url.scheme or 'none'}')"
            )
        return value

    def dashboard_link(self, namespace: str, pod: str) -> str | None:
        """The extra link's URL for a pod on this cluster (placeholders URL-quoted), None without a
        ``dashboard_url``."""
        if self.dashboard_url is None:
            return None
        return self.dashboard_url.format(
            cluster=quote(self.name, safe=""), namespace=quote(namespace, safe=""), pod=quote(pod, safe="")
        )

    @property
    def proximity_group(self) -> str:
        return self.group or self.region


AssetPattern = Annotated[str, Field(min_length=1, max_length=MAX_ASSET_ID)]
GLOB_CHARACTERS = frozenset("*?[")


class DatasetSpec(_Model):
    name: Name
    cluster: str | None
    """The cluster the data lives on (required in a spec; None only for an asset that names a region)."""
    size_gb: SizeGb
    allowed_regions: list[Region] | None = None
    """Sovereignty: regions a task reading this dataset may run in; None = anywhere."""
    assets: Annotated[list[AssetPattern], Field(max_length=1000)] = Field(default_factory=list)
    """Airflow Assets that are this dataset: URIs or names, exact or globs (``s3://eu-lake/patients/*``).
    An asset whose name is this entry's ``name`` is it too."""

    @property
    def label(self) -> str:
        """How decisions and errors name it."""
        return f"'{self.name}'"


class ResolvedDataset(DatasetSpec):
    """A dataset a task reads or writes through an Airflow Asset: its spec entry's rule, narrowed by the
    asset's ``extra``; or the asset's own fields when no entry matches it."""

    name: str
    """The spec entry's name, or the asset's URI when no entry matches it."""
    asset: str
    """The asset's URI."""
    entry: str | None = None
    """The spec entry it matched (None: its ``extra`` alone says what it is)."""
    written_on: str | None = None
    """The member its latest asset event says it was written on: ``cluster`` is that one then."""
    written_region: str | None = None
    """That member's region."""
    written_size_gb: float | None = None
    """The size its writer's pod reported (``size_gb`` is that one then)."""
    inherited_regions: list[str] | None = None
    """The rule its writer ran under (the inputs it was derived from), which ``allowed_regions`` narrows."""

    @property
    def label(self) -> str:
        written = ""
        if self.written_on is not None:
            written = f", written on '{self.written_on}' ({self.written_region})"
            if self.written_size_gb is not None:
                written += f", {self.written_size_gb:g} GB"
        if self.inherited_regions is not None:
            written += f", inherited rule: {', '.join(self.inherited_regions)}"
        if self.entry is None:
            return f"'{self.asset[:200]}' (asset{written})"
        return f"'{self.name}' (asset '{self.asset[:200]}'{written})"


class Weights(_Model):
    """Score plugin -> weight (``cost: 1.5``), keyed by the plugin's name in lower case; the registry says
    which keys exist and their defaults. Read one with :meth:`of` (or as an attribute: ``weights.cost``)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, Weight] = Field(init=False)

    @model_validator(mode="before")
    @classmethod
    def _known_with_defaults(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        defaults = default_weights()
        for key in value:
            if key not in defaults:
                raise SpecError(f"{key}: Extra inputs are not permitted (known: {', '.join(defaults)})")
        return {**defaults, **value}

    def of(self, key: str) -> float:
        """The weight under ``key`` (:func:`registry.weight_key` of a score plugin's name)."""
        extra = self.__pydantic_extra__
        return extra[key] if extra is not None else 0.0


class PolicySpec(_Model):
    weights: Weights = Field(default_factory=Weights)
    snapshot_ttl_seconds: Annotated[float, NOT_BOOL, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)] = 15.0
    cooldown_seconds: Seconds = 120.0
    queue_order: QueueOrder = "longest-first"
    """Which waiting task is decided first when capacity frees up (:mod:`federation.queue`)."""
    filters: list[str] = Field(default_factory=lambda: list(FILTER_PLUGINS))
    """Enabled filter plugins (default all); the mandatory ones cannot be left out."""
    scores: list[str] = Field(default_factory=lambda: list(SCORE_PLUGINS))
    """Enabled score plugins (default all)."""

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in FILTER_PLUGINS]
        if unknown:
            raise ValueError(f"unknown filter plugin(s) {unknown} (known: {', '.join(FILTER_PLUGINS)})")
        missing = sorted(MANDATORY_FILTERS - set(value))
        if missing:
            raise ValueError(f"filter plugin(s) {missing} are mandatory and cannot be disabled")
        return value

    @field_validator("scores")
    @classmethod
    def _known_scores(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in SCORE_PLUGINS]
        if unknown:
            raise ValueError(f"unknown score plugin(s) {unknown} (known: {', '.join(SCORE_PLUGINS)})")
        return value

    def merged(self, overrides: Mapping[str, Any]) -> PolicySpec:
        """A copy with ``overrides`` (a per-task partial policy) deep-merged in and re-validated."""
        if not overrides:
            return self
        base = self.model_dump()
        for key, value in overrides.items():
            if isinstance(value, Mapping) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        try:
            return PolicySpec.model_validate(base)
        except ValidationError as exc:
            raise spec_error(exc, "policy") from None


class FederationSpec(_Model):
    name: Name = "default"
    """Names this federation's shared state (cooldowns, snapshots) in an Airflow deployment."""
    clusters: Annotated[list[ClusterSpec], Field(min_length=1, max_length=MAX_CLUSTERS)]
    datasets: Annotated[list[DatasetSpec], Field(max_length=MAX_DATASETS)] = Field(default_factory=list)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    regions: Annotated[list[Region], Field(max_length=MAX_CLUSTERS)] = Field(default_factory=list)
    """Extra known regions (with no member cluster yet) that ``allowed_regions`` may name."""
    tenants: Annotated[list[TenantSpec], Field(max_length=MAX_TENANTS)] = Field(default_factory=list)
    """The teams sharing the federation: quotas, fair-share weights, budgets (``docs/tenants.md``)."""
    tenant_mapping: TenantMapping = Field(default_factory=TenantMapping)
    """The tenant of a task that names none, by its owner or its DAG's tags."""

    @model_validator(mode="after")
    def _cross_references(self) -> FederationSpec:
        seen: set[str] = set()
        for index, cluster in enumerate(self.clusters):
            if cluster.name in seen:
                raise SpecError(f"clusters[{index}].name: duplicate cluster name '{cluster.name}'")
            seen.add(cluster.name)
        known_regions = self.known_regions()
        datasets: set[str] = set()
        for index, dataset in enumerate(self.datasets):
            if dataset.name in datasets:
                raise SpecError(f"datasets[{index}].name: duplicate dataset name '{dataset.name}'")
            datasets.add(dataset.name)
            if dataset.cluster is None:
                raise SpecError(f"datasets[{index}].cluster: required (the cluster the data lives on)")
            if dataset.cluster not in seen:
                known = ", ".join(sorted(seen))
                raise SpecError(
                    f"datasets[{index}].cluster: unknown cluster '{dataset.cluster}' (known: {known})"
                )
            for position, region in enumerate(dataset.allowed_regions or []):
                if region not in known_regions:
                    raise SpecError(
                        f"datasets[{index}].allowed_regions[{position}]: unknown region '{region}' "
                        f"(known: {', '.join(sorted(known_regions))})"
                    )
        tenants: set[str] = set()
        for index, tenant in enumerate(self.tenants):
            if tenant.name in tenants:
                raise SpecError(f"tenants[{index}].name: duplicate tenant name '{tenant.name}'")
            tenants.add(tenant.name)
        mapping = self.tenant_mapping
        for where, names in (("owners", mapping.owners), ("tags", mapping.tags)):
            for key, name in names.items():
                _check_known([name], tenants, f"tenant_mapping.{where}.{key}", "tenant", False)
        if mapping.default is not None:
            _check_known([mapping.default], tenants, "tenant_mapping.default", "tenant", False)
        return self

    def known_regions(self) -> set[str]:
        return {cluster.region for cluster in self.clusters} | set(self.regions)

    @cached_property
    def highest_prices(self) -> Prices:
        """Each price at its highest over the members: what no cluster's estimate can exceed."""
        clusters = [cluster.prices for cluster in self.clusters]
        extended: dict[str, float] = {}
        for prices in clusters:
            for name, price in prices.extended.items():
                extended[name] = max(extended.get(name, 0.0), price)
        return Prices(
            cpu_hour=max((p.cpu_hour for p in clusters), default=0.0),
            memory_gib_hour=max((p.memory_gib_hour for p in clusters), default=0.0),
            gpu_hour=max((p.gpu_hour for p in clusters), default=0.0),
            egress_gb=max((p.egress_gb for p in clusters), default=0.0),
            extended=extended,
        )

    @cached_property
    def _names(self) -> _Names:
        return _Names(
            clusters={cluster.name: cluster for cluster in self.clusters},
            datasets={dataset.name: dataset for dataset in self.datasets},
            asset_names=_asset_names(self.datasets),
            asset_globs=[
                (pattern, dataset)
                for dataset in self.datasets
                for pattern in dict.fromkeys(dataset.assets)
                if GLOB_CHARACTERS & set(pattern)
            ],
            regions=frozenset(self.known_regions()),
            groups=frozenset(cluster.proximity_group for cluster in self.clusters),
            tenants={tenant.name: tenant for tenant in self.tenants},
        )

    @cached_property
    def region_groups(self) -> dict[str, str]:
        """Region -> the proximity group of its first cluster (computed once: decisions read it)."""
        groups: dict[str, str] = {}
        for cluster in self.clusters:
            groups.setdefault(cluster.region, cluster.proximity_group)
        return groups

    def cluster(self, name: str) -> ClusterSpec:
        found = self._names.clusters.get(name)
        if found is None:
            raise SpecError(f"unknown cluster '{name}'")
        return found

    def tenant(self, name: str) -> TenantSpec:
        """The tenant named ``name``; :class:`SpecError` naming the known tenants otherwise."""
        found = self._names.tenants.get(name)
        if found is None:
            _check_known([name], self._names.tenants, "tenant", "tenant", False)
            raise AssertionError("unreachable")
        return found

    def check_clusters(self, names: Iterable[str], field: str, *, indexed: bool = True) -> None:
        """Every name is a member cluster, else :class:`SpecError` naming ``field`` (``field[i]`` when
        ``indexed``) and the members. For command-line options, pass ``indexed=False``."""
        _check_known(names, self._names.clusters, field, "cluster", indexed)

    def check_references(
        self,
        *,
        clusters: Iterable[str] | None = None,
        datasets: Iterable[str] = (),
        assets: Iterable[AssetDataset] = (),
        prefer_region: str | None = None,
        prefer_group: str | None = None,
        tenant: str | None = None,
        where: str = "",
    ) -> list[DatasetSpec]:
        """The one check of the names a task refers to: member clusters, datasets, a region, a group, a
        tenant.

        Raises :class:`SpecError` naming the field (under ``where``, e.g. ``request.datasets[0]``) and
        what is known; returns the datasets, resolved: those named, then those of the task's Airflow
        Assets (:meth:`resolve_asset`). The engine, the operator and the CLI call this.
        """
        assets = list(assets)
        if (
            clusters is None
            and not datasets
            and not assets
            and prefer_region is None
            and prefer_group is None
            and tenant is None
        ):
            return []  # most requests name nothing: one check per decision, so the common case is cheap
        names = self._names
        prefix = f"{where}." if where else ""
        if clusters is not None:
            _check_known(clusters, names.clusters, f"{prefix}clusters", "cluster", True)
        resolved = []
        for position, name in enumerate(datasets):
            dataset = names.datasets.get(name)
            if dataset is None:
                _check_known([name], names.datasets, f"{prefix}datasets[{position}]", "dataset", False)
            else:
                resolved.append(dataset)
        for position, asset in enumerate(assets):
            found = self.resolve_asset(asset, f"{prefix}assets[{position}]")
            if found is not None:
                resolved.append(found)
        if prefer_region is not None and prefer_region not in names.regions:
            _check_known([prefer_region], names.regions, f"{prefix}prefer_region", "region", False)
        if prefer_group is not None and prefer_group not in names.groups:
            _check_known([prefer_group], names.groups, f"{prefix}prefer_group", "group", False)
        if tenant is not None and tenant not in names.tenants:
            _check_known([tenant], names.tenants, f"{prefix}tenant", "tenant", False)
        return resolved

    def resolve_asset(self, asset: AssetDataset, where: str) -> ResolvedDataset | None:
        """The dataset an Airflow Asset is: the one spec entry matching its URI or name, narrowed by its
        ``extra``; its ``extra`` alone when no entry matches; None when neither says anything (it is not a
        restricted dataset). Two matching entries, an ``extra`` widening the entry's allowed regions or
        contradicting where the entry says the data lives, an unknown cluster or region: :class:`SpecError`
        naming ``where``, the asset and the field."""
        at = f"{where} ({asset.role} {asset.label})"
        names = self._names
        matched: dict[str, DatasetSpec] = {}
        for key in (asset.uri, asset.name):
            for dataset in names.asset_names.get(key, ()):
                matched.setdefault(dataset.name, dataset)
        for pattern, dataset in names.asset_globs:
            if dataset.name not in matched and (
                fnmatchcase(asset.uri, pattern) or fnmatchcase(asset.name, pattern)
            ):
                matched[dataset.name] = dataset
        if len(matched) > 1:
            entries = ", ".join(f"'{name}'" for name in sorted(matched))
            raise SpecError(
                f"{at}: matched by spec datasets {entries}; an asset is one dataset: make the spec's "
                "`assets` patterns disjoint"
            )
        fields = asset.fedsched
        extra = f"extra.{EXTRA_KEY}"
        if fields is not None:
            if fields.cluster is not None and fields.cluster not in names.clusters:
                listed = ", ".join(sorted(names.clusters))
                raise SpecError(
                    f"{at}: {extra}.cluster: unknown cluster '{fields.cluster}' (known: {listed})"
                )
            for region, field in [(fields.region, "region")] + [
                (r, f"allowed_regions[{i}]") for i, r in enumerate(fields.allowed_regions or ())
            ]:
                if region is not None and region not in names.regions:
                    listed = ", ".join(sorted(names.regions))
                    raise SpecError(f"{at}: {extra}.{field}: unknown region '{region}' (known: {listed})")
        entry = next(iter(matched.values()), None)
        # Where its latest event says it was written (an inlet's): locality and egress go there. A member
        # the spec no longer has is ignored: the event only steers a preference, never a rule.
        written = asset.written_on if asset.role == "inlet" else None
        written = written if written in names.clusters else None
        # What its writer reported and ran under: the size replaces the others (it is measured); the
        # inherited rule narrows every other rule, and an unknown region in it is an error (dropping it
        # would widen the rule).
        reported = asset.written_size_gb if asset.role == "inlet" else None
        inherited = asset.inherited_regions if asset.role == "inlet" else None
        event = f"latest asset event's {extra}"
        for i, region in enumerate(inherited or ()):
            if region not in names.regions:
                listed = ", ".join(sorted(names.regions))
                raise SpecError(
                    f"{at}: {event}.allowed_regions[{i}]: unknown region '{region}' (known: {listed})"
                )
        if written is not None and asset.written_region is not None:
            home = names.clusters[written].region
            if asset.written_region != home:
                raise SpecError(
                    f"{at}: {event}.region: '{asset.written_region}' contradicts cluster '{written}', which "
                    f"is in '{home}'"
                )
        where_from = {
            "written_on": written,
            "written_region": names.clusters[written].region if written is not None else None,
            "written_size_gb": reported,
            "inherited_regions": inherited,
        }
        if entry is None:
            if (
                written is None
                and inherited is None
                and (
                    fields is None
                    or (fields.cluster is None and fields.region is None and fields.allowed_regions is None)
                )
            ):
                return None  # no spec entry and nothing said of it: not a restricted dataset
            cluster = fields.cluster if fields is not None else None
            if fields is not None and cluster is not None and fields.region is not None:
                self._check_home(at, f"{extra}.region", fields.region, cluster, f"{extra}.cluster")
            own = fields.allowed_regions if fields is not None else None
            return ResolvedDataset(
                name=asset.uri,
                asset=asset.uri,
                cluster=written or cluster,
                size_gb=reported if reported is not None else (fields.size_gb if fields else None) or 0.0,
                allowed_regions=_narrowed(at, own, f"{extra}.allowed_regions", inherited),
                **where_from,
            )
        allowed = entry.allowed_regions
        size = entry.size_gb
        if fields is not None:
            source = f"spec dataset '{entry.name}'"
            if fields.cluster is not None and fields.cluster != entry.cluster:
                raise SpecError(
                    f"{at}: {extra}.cluster: '{fields.cluster}' contradicts {source}, which lives on "
                    f"'{entry.cluster}'"
                )
            if fields.region is not None and entry.cluster is not None:
                self._check_home(at, f"{extra}.region", fields.region, entry.cluster, source)
            if fields.allowed_regions is not None:
                wider = sorted(set(fields.allowed_regions) - set(allowed)) if allowed is not None else []
                if wider:
                    raise SpecError(
                        f"{at}: {extra}.allowed_regions: {wider} widen {source} (allowed: "
                        f"{', '.join(allowed or ())}); an asset's extra may narrow a rule, never widen it"
                    )
                allowed = fields.allowed_regions
            if fields.size_gb is not None:
                size = fields.size_gb
        source = f"spec dataset '{entry.name}'"
        if fields is not None and fields.allowed_regions is not None:
            source = f"{extra}.allowed_regions"
        return ResolvedDataset(
            name=entry.name,
            asset=asset.uri,
            entry=entry.name,
            cluster=written or entry.cluster,
            size_gb=reported if reported is not None else size,
            allowed_regions=_narrowed(at, allowed, source, inherited),
            **where_from,
        )

    @staticmethod
    def rule_of(datasets: Iterable[DatasetSpec]) -> list[str] | None:
        """The regions every one of ``datasets`` allows at once (sorted; None: they place no rule)."""
        allowed: set[str] | None = None
        for dataset in datasets:
            if dataset.allowed_regions is not None:
                mine = set(dataset.allowed_regions)
                allowed = mine if allowed is None else allowed & mine
        return sorted(allowed) if allowed is not None else None

    def _check_home(self, at: str, field: str, region: str, cluster: str, source: str) -> None:
        home = self._names.clusters[cluster].region
        if region != home:
            raise SpecError(
                f"{at}: {field}: '{region}' contradicts {source}: cluster '{cluster}' is in '{home}'"
            )


def _narrowed(at: str, own: list[str] | None, source: str, inherited: list[str] | None) -> list[str] | None:
    """``own`` (a spec entry's or an extra's rule) narrowed by the rule ``inherited`` from the data it was
    derived from: the narrower always wins; none in common is an error (no cluster may run the task)."""
    if inherited is None:
        return own
    if own is None:
        return list(inherited)
    both = [region for region in own if region in inherited]
    if not both:
        raise SpecError(
            f"{at}: the rule it inherited from the data it was derived from (allowed: "
            f"{', '.join(inherited)}) and {source} (allowed: {', '.join(own)}) have no region in common: "
            "no cluster may run a task reading it"
        )
    return both


def _asset_names(datasets: Iterable[DatasetSpec]) -> dict[str, list[DatasetSpec]]:
    """Asset URI or name -> the entries naming it exactly (by ``name`` or a pattern without a glob)."""
    index: dict[str, list[DatasetSpec]] = {}
    for dataset in datasets:
        keys = [dataset.name, *(p for p in dataset.assets if not GLOB_CHARACTERS & set(p))]
        for key in dict.fromkeys(keys):
            index.setdefault(key, []).append(dataset)
    return index


@dataclass(frozen=True, slots=True)
class _Names:
    clusters: dict[str, ClusterSpec]
    datasets: dict[str, DatasetSpec]
    asset_names: dict[str, list[DatasetSpec]]
    asset_globs: list[tuple[str, DatasetSpec]]
    regions: frozenset[str]
    groups: frozenset[str]
    tenants: dict[str, TenantSpec]


def _check_known(names: Iterable[str], known: Collection[str], field: str, kind: str, indexed: bool) -> None:
    for position, name in enumerate(names):
        if name not in known:
            at = f"{field}[{position}]" if indexed else field
            listed = ", ".join(sorted(known)) or "none"
            raise SpecError(f"{at}: unknown {kind} '{name}' (known: {listed})")


def load_spec(source: str | Path | Mapping[str, Any]) -> FederationSpec:
    """Load and validate a federation spec from a path, YAML text or a mapping.

    Raises :class:`SpecError` whose message starts with the field path, e.g.
    ``datasets[2].allowed_regions[0]: unknown region 'x' (known: ...)``.
    """
    if isinstance(source, FederationSpec):
        return source
    document = load_document(source, "federation spec", SPEC_LIMITS)
    _check_sizes(document)
    if not isinstance(source, Mapping):
        _check_empty_allowed_regions(document)
    try:
        return FederationSpec.model_validate(document)
    except ValidationError as exc:
        raise spec_error(exc) from None


def _check_sizes(document: Mapping[str, Any]) -> None:
    """Refuse oversized lists before validating any item (654,000 clusters would cost gigabytes)."""
    for key, limit in SPEC_LIMITS.max_items:
        items = document.get(key)
        if isinstance(items, list) and len(items) > limit:
            raise SpecError(f"{key}: {len(items):,} entries, more than the {limit:,} allowed")


def _check_empty_allowed_regions(document: Mapping[str, Any]) -> None:
    """In a file, ``allowed_regions:`` with nothing after it is null, which would mean "anywhere": a list
    forgotten under the key must not lift a dataset's restriction. Omitting the key says "anywhere"."""
    datasets = document.get("datasets")
    for position, dataset in enumerate(datasets if isinstance(datasets, list) else []):
        if (
            isinstance(dataset, Mapping)
            and "allowed_regions" in dataset
            and dataset["allowed_regions"] is None
        ):
            raise SpecError(
                f"datasets[{position}].allowed_regions: empty; list the regions the data may go to, or "
                "leave the key out to allow every region"
            )


def spec_fingerprint(spec: FederationSpec) -> str:
    """A stable sha256 of the spec's canonical JSON, used to version plans made against it."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
