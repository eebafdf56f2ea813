"""The federation spec: member clusters, where data lives and may go, and the placement policy.

Validated once, at load time, by pydantic; the engine trusts a :class:`FederationSpec` afterwards.
See ``docs/federation-spec.md`` for every field.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_provider_fedsched.federation._loading import SpecError, load_document, spec_error

__all__ = [
    "FILTER_PLUGINS",
    "MANDATORY_FILTERS",
    "SCORE_PLUGINS",
    "ClusterSpec",
    "DatasetSpec",
    "FederationSpec",
    "PolicySpec",
    "Prices",
    "SpecError",
    "Taint",
    "TaintEffect",
    "Weights",
    "load_spec",
    "spec_fingerprint",
]

NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Name = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

# Filter order matters: permanent rules run first so a cluster's first rejection is the most decisive one,
# and "impossible" can be told apart from "wait" (see engine.py).
FILTER_PLUGINS: tuple[str, ...] = (
    "ClusterSubset",
    "Sovereignty",
    "ClusterTaints",
    "ClusterLabels",
    "Capacity",
    "Excluded",
    "Reachable",
    "Freshness",
    "Cooldown",
    "Quota",
    "NodeFit",
)
# Hard rules: a policy may not switch these off, so no override can place a task where it must not run.
MANDATORY_FILTERS: frozenset[str] = frozenset(
    {"ClusterSubset", "Sovereignty", "ClusterTaints", "Capacity", "Excluded", "Reachable", "NodeFit"}
)
SCORE_PLUGINS: tuple[str, ...] = ("Cost", "Locality", "Proximity", "Headroom", "Forecast")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Taint(_Model):
    """A Kubernetes taint (on a node, or on a whole cluster in the spec)."""

    key: Annotated[str, Field(min_length=1)]
    value: str = ""
    effect: TaintEffect

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


class Prices(_Model):
    """Prices in one currency. Compute prices are per hour of *requested* capacity."""

    cpu_hour: NonNegativeFloat = 0.0
    memory_gib_hour: NonNegativeFloat = 0.0
    gpu_hour: NonNegativeFloat = 0.0
    egress_gb: NonNegativeFloat = 0.0
    extended: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    """Other resources: price per scheduler unit per hour (for example ``example.com/fpga: 1.2``)."""


class ClusterSpec(_Model):
    name: Name
    conn_id: Annotated[str, Field(min_length=1)]
    region: Annotated[str, Field(min_length=1)]
    group: str | None = None
    """Proximity group (same metro); defaults to the region."""
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    prices: Prices = Field(default_factory=Prices)
    namespace: str | None = None
    """Namespace pods are created in on this cluster; None = the task's namespace."""
    dashboard_url: str | None = None
    """URL template for an operator extra link; placeholders ``{cluster}``, ``{namespace}``, ``{pod}``."""

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
            fields = {field for _, field, _, _ in string.Formatter().parse(value) if field is not None}
        except ValueError as exc:
            raise ValueError(f"not a valid URL template: {exc}") from None
        unknown = sorted(fields - {"cluster", "namespace", "pod"})
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {unknown} (allowed: {{cluster}}, {{namespace}}, {{pod}})"
            )
        return value

    @property
    def proximity_group(self) -> str:
        return self.group or self.region


class DatasetSpec(_Model):
    name: Name
    cluster: str
    """The cluster the data lives on."""
    size_gb: NonNegativeFloat
    allowed_regions: list[str] | None = None
    """Sovereignty: regions a task reading this dataset may run in; None = anywhere."""


class Weights(_Model):
    cost: NonNegativeFloat = 1.0
    locality: NonNegativeFloat = 1.0
    proximity: NonNegativeFloat = 0.5
    headroom: NonNegativeFloat = 0.5
    forecast: NonNegativeFloat = 0.2

    def of(self, plugin: str) -> float:
        value: float = getattr(self, plugin.lower())
        return value


class PolicySpec(_Model):
    weights: Weights = Field(default_factory=Weights)
    snapshot_ttl_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 15.0
    cooldown_seconds: NonNegativeFloat = 120.0
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
    clusters: Annotated[list[ClusterSpec], Field(min_length=1)]
    datasets: list[DatasetSpec] = Field(default_factory=list)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    regions: list[str] = Field(default_factory=list)
    """Extra known regions (with no member cluster yet) that ``allowed_regions`` may name."""

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
        return self

    def known_regions(self) -> set[str]:
        return {cluster.region for cluster in self.clusters} | set(self.regions)

    def cluster(self, name: str) -> ClusterSpec:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise SpecError(f"unknown cluster '{name}'")


def load_spec(source: str | Path | Mapping[str, Any]) -> FederationSpec:
    """Load and validate a federation spec from a path, YAML text or a mapping.

    Raises :class:`SpecError` whose message starts with the field path, e.g.
    ``datasets[2].allowed_regions[0]: unknown region 'x' (known: ...)``.
    """
    if isinstance(source, FederationSpec):
        return source
    document = load_document(source, "federation spec")
    try:
        return FederationSpec.model_validate(document)
    except ValidationError as exc:
        raise spec_error(exc) from None


def spec_fingerprint(spec: FederationSpec) -> str:
    """A stable sha256 of the spec's canonical JSON, used to version plans made against it."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
