"""Simulator configuration (YAML or dict), validated with pydantic; errors name the field path."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_provider_fedsched.federation._loading import spec_error
from airflow_provider_fedsched.federation.documents import parse_yaml, read_text_file
from airflow_provider_fedsched.federation.limits import NOT_BOOL, Labels, Price, SizeGb
from airflow_provider_fedsched.federation.resources import QuantityError, parse_quantity
from airflow_provider_fedsched.federation.spec import SpecError
from airflow_provider_fedsched.sim.util import quantity_too_large

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SimConfigError(ValueError):
    """A bad simulator config; the message names the field path (``clusters[1].node_pools[0].cpu: ...``)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _quantity(value: Any) -> str:
    too_large = quantity_too_large(value)
    if too_large:
        raise ValueError(too_large)
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return str(value)


class Taint(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Prices(_Model):
    cpu_hour: Price = 0.0
    memory_gib_hour: Price = 0.0
    gpu_hour: Price = 0.0
    egress_gb: Price = 0.0


class NodePool(_Model):
    name: str = "pool"
    count: Annotated[int, NOT_BOOL, Field(ge=0, le=1000)] = 1
    cpu: str = "4"
    memory: str = "16Gi"
    pods: Annotated[int, NOT_BOOL, Field(ge=1)] = 110
    extra: dict[str, str] = Field(default_factory=dict, description="extended resources, e.g. nvidia.com/gpu")
    labels: Labels = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _check_quantity(cls, value: Any) -> str:
        return _quantity(value)

    @field_validator("extra", mode="before")
    @classmethod
    def _check_extra(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): _quantity(v) for k, v in value.items()}
        return value

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(f"{value!r} must be a DNS label (lower-case letters, digits, '-')")
        return value


class ClusterConfig(_Model):
    name: str
    region: str = "local-1"
    group: str = "local"
    labels: Labels = Field(default_factory=dict)
    taints: list[Taint] = Field(
        default_factory=list, description="cluster-level taints for the placement engine"
    )
    prices: Prices = Field(default_factory=Prices)
    node_pools: list[NodePool] = Field(default_factory=lambda: [NodePool()])
    quotas: dict[str, dict[str, str]] = Field(default_factory=dict, description="namespace -> hard limits")
    namespaces: list[str] = Field(
        default_factory=list, description="extra namespaces besides default/kube-system"
    )
    namespace: str | None = Field(
        None,
        description="the namespace tasks run in on this member: the generated spec's and connection's "
        "(created with the member); default: `default`",
    )
    port: Annotated[int, NOT_BOOL, Field(ge=0, le=65535)] = 0
    token: str | None = None

    @property
    def task_namespace(self) -> str:
        return self.namespace or "default"

    @property
    def all_namespaces(self) -> list[str]:
        """Every namespace created with the member besides the system ones: default, the task
        namespace, the extra ones and those with a quota."""
        wanted = ["default", self.task_namespace, *self.namespaces, *self.quotas]
        return list(dict.fromkeys(wanted))

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _DNS_LABEL.match(value) or len(value) > 40:
            raise ValueError(f"{value!r} must be a DNS label of at most 40 characters")
        return value

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str | None) -> str | None:
        if value is not None and (not _DNS_LABEL.match(value) or len(value) > 63):
            raise ValueError(f"{value!r} must be a namespace name (a DNS label of at most 63 characters)")
        return value

    @field_validator("quotas", mode="before")
    @classmethod
    def _check_quotas(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                str(ns): {str(k): _quantity(v) for k, v in (hard or {}).items()} for ns, hard in value.items()
            }
        return value

    @model_validator(mode="after")
    def _unique_pools(self) -> ClusterConfig:
        names = [p.name for p in self.node_pools]
        if len(names) != len(set(names)):
            raise ValueError("node_pools: pool names must be unique")
        return self


class DatasetConfig(_Model):
    name: str
    cluster: str
    size_gb: SizeGb
    allowed_regions: list[str] | None = None
    assets: list[str] = Field(default_factory=list)
    """Airflow Assets that are this dataset (URIs or names, globs): as the spec's ``assets``."""


class SimConfig(_Model):
    time_scale: Annotated[float, NOT_BOOL, Field(gt=0, le=100, allow_inf_nan=False)] = 1.0
    clusters: list[ClusterConfig] = Field(min_length=1)
    datasets: list[DatasetConfig] = Field(default_factory=list)
    policy: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check_refs(self) -> SimConfig:
        names = [c.name for c in self.clusters]
        if len(names) != len(set(names)):
            raise ValueError("clusters: cluster names must be unique")
        for i, ds in enumerate(self.datasets):
            if ds.cluster not in names:
                raise ValueError(f"datasets[{i}].cluster: unknown cluster {ds.cluster!r}")
        return self


def parse_config(data: Any, source: str = "config") -> SimConfig:
    """Validate a config mapping; raise :class:`SimConfigError` naming the first bad field."""
    if not isinstance(data, dict):
        raise SimConfigError(f"{source}: expected a mapping with a 'clusters' list")
    try:
        config = SimConfig.model_validate(data)
    except ValidationError as exc:
        raise SimConfigError(f"{source}: {spec_error(exc)}") from None
    _check_generated_spec(config, source)
    return config


def _check_generated_spec(config: SimConfig, source: str) -> None:
    """The federation spec the simulator writes must be one the provider reads (an unknown region in a
    dataset's ``allowed_regions``, a policy the spec refuses): refused now, naming the field, rather than
    by every task later."""
    from airflow_provider_fedsched.federation.spec import FederationSpec

    try:
        FederationSpec.model_validate(federation_spec(config))
    except ValidationError as exc:
        raise SimConfigError(f"{source}: {spec_error(exc)}") from None
    except SpecError as exc:
        raise SimConfigError(f"{source}: {exc}") from None


def load_config(path: str | Path) -> SimConfig:
    path = Path(path)
    try:  # the provider's one YAML reader: duplicate keys, alias bombs, non-regular files refused
        data = parse_yaml(read_text_file(path, "simulator configuration"), "simulator configuration")
    except SpecError as exc:
        raise SimConfigError(f"{path}: {exc}") from None
    return parse_config(data, str(path))


DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")


def default_config(time_scale: float = 1.0) -> SimConfig:
    """The default federation of ``defaults.yaml`` (three clusters; see its header)."""
    config = load_config(DEFAULTS_FILE)
    return config.model_copy(update={"time_scale": time_scale})


def resolve_config(
    config: SimConfig | Mapping[str, Any] | str | Path | None, time_scale: float | None = None
) -> SimConfig:
    """A federation's config from a :class:`SimConfig`, a mapping, a YAML path, or ``None`` for the default
    three clusters; ``time_scale``, when given, overrides the config's."""
    if config is None:
        cfg = default_config()
    elif isinstance(config, SimConfig):
        cfg = config
    elif isinstance(config, Mapping):
        cfg = parse_config(dict(config))
    else:
        cfg = load_config(config)
    if time_scale is not None:
        cfg = cfg.model_copy(update={"time_scale": time_scale})
    return cfg


def conn_id(cluster: str) -> str:
    """The Airflow connection id of a simulated cluster: ``k8s_`` + its name with ``-`` as ``_``."""
    return "k8s_" + cluster.replace("-", "_")


def default_policy() -> dict[str, Any]:
    policy = parse_yaml(DEFAULTS_FILE.read_text(), str(DEFAULTS_FILE))["policy"]
    assert isinstance(policy, dict)
    return policy


def federation_spec(cfg: SimConfig) -> dict[str, Any]:
    """The federation spec of a simulated federation (what ``fedsched sim up`` writes as federation.yaml)."""
    return {
        "clusters": [
            {
                "name": c.name,
                "conn_id": conn_id(c.name),
                "region": c.region,
                "group": c.group,
                "labels": dict(c.labels),
                "taints": [t.model_dump() for t in c.taints],
                "prices": c.prices.model_dump(),
                **({"namespace": c.namespace} if c.namespace else {}),
            }
            for c in cfg.clusters
        ],
        "datasets": [{k: v for k, v in d.model_dump().items() if v is not None} for d in cfg.datasets],
        "policy": cfg.policy or default_policy(),
    }
