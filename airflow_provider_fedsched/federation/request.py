"""What a task asks of the federation: resources, node constraints, data it reads and preferences."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_provider_fedsched.federation._loading import SpecError, spec_error
from airflow_provider_fedsched.federation.resources import ResourceList, pod_requests
from airflow_provider_fedsched.federation.spec import Taint, TaintEffect

__all__ = ["TaskRequest", "Toleration", "tolerates_all"]


class Toleration(BaseModel):
    """A Kubernetes toleration, with the API's validation and matching rules (``ToleratesTaint``).

    An empty key matches every taint key and requires operator ``Exists`` (``Equal`` with an empty key is
    rejected, as the API server rejects such a pod); ``Exists`` takes no value; no effect matches every
    effect. The one toleration matcher of the package: the engine's filters and the simulator use it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: TaintEffect | None = None
    """None tolerates every effect."""

    @model_validator(mode="after")
    def _empty_key_needs_exists(self) -> Toleration:
        # SpecError names the field: spec_error() prefixes it with where the toleration sits.
        if not self.key and self.operator != "Exists":
            raise SpecError(
                "operator: an empty key requires operator 'Exists' (it then tolerates every taint)"
            )
        if self.operator == "Exists" and self.value:
            raise SpecError("value: operator 'Exists' takes no value")
        return self

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value

    @classmethod
    def from_k8s(cls, toleration: Mapping[str, Any], field: str = "toleration") -> Toleration:
        """From an API (camelCase) or client (snake_case) dict; ``tolerationSeconds`` is not modelled.

        Raises :class:`SpecError` naming ``field`` (e.g. ``spec.tolerations[1]``) when the toleration is
        not one the API server would accept.
        """
        if not isinstance(toleration, Mapping):
            raise SpecError(f"{field}: expected a mapping, got {type(toleration).__name__}")
        try:
            return cls(
                key=toleration.get("key") or "",
                operator=toleration.get("operator") or "Equal",
                value=toleration.get("value") or "",
                effect=toleration.get("effect") or None,
            )
        except ValidationError as exc:
            raise spec_error(exc, field) from None


def tolerates_all(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    """True when every taint is tolerated by at least one toleration."""
    tolerations = tuple(tolerations)
    return all(any(t.tolerates(taint) for t in tolerations) for taint in taints)


class TaskRequest(BaseModel):
    """One task's placement request. ``resources`` are scheduler units (see :mod:`resources`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resources: ResourceList = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Must match the labels of a node that fits."""
    cluster_selector: dict[str, str] = Field(default_factory=dict)
    """Must match the cluster's labels in the spec."""
    tolerations: list[Toleration] = Field(default_factory=list)
    datasets: list[str] = Field(default_factory=list)
    """Names of spec datasets the task reads (sovereignty, locality and egress)."""
    prefer_region: str | None = None
    prefer_group: str | None = None
    clusters: list[str] | None = None
    """Restrict placement to these clusters; None = any member."""
    namespace: str = "default"
    expected_duration_seconds: float = Field(default=3600.0, ge=0, allow_inf_nan=False)
    preemptible: bool = False
    """It may be evicted and retried elsewhere; only such a task may run on borrowed tenant quota."""
    tenant: str | None = None
    """The tenant it runs for (its quota, fair share and budget); None = no tenant rule applies."""
    max_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Budget: a cluster where its estimated cost (compute and egress) is above this is out."""
    max_egress_gb: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Budget: a cluster it would have to move more than this many GB of data to is out."""

    @field_validator("resources")
    @classmethod
    def _non_negative(cls, value: ResourceList) -> ResourceList:
        for name, amount in value.items():
            if amount < 0:
                raise ValueError(f"{name}: {amount} is negative")
        # Zero requests ask for nothing; dropping them keeps fit checks short.
        return {name: amount for name, amount in value.items() if amount}

    @classmethod
    def from_pod_spec(cls, pod_spec: Mapping[str, Any], **federation_args: Any) -> TaskRequest:
        """Build a request from a Kubernetes pod spec dict (camelCase or snake_case).

        Requests are computed as the scheduler does (:func:`resources.pod_requests`); ``nodeSelector`` and
        ``tolerations`` are read from the spec; everything else comes from ``federation_args``.
        """
        selector = pod_spec.get("nodeSelector") or pod_spec.get("node_selector") or {}
        tolerations = [
            Toleration.from_k8s(t, f"request.tolerations[{position}]")
            for position, t in enumerate(pod_spec.get("tolerations") or [])
        ]
        try:
            return cls(
                resources=pod_requests(pod_spec),
                node_selector=dict(selector),
                tolerations=[*tolerations, *federation_args.pop("tolerations", [])],
                **federation_args,
            )
        except ValidationError as exc:
            raise spec_error(exc, "request") from None
