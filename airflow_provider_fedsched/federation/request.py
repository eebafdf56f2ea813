"""What a task asks of the federation: resources, node constraints, data it reads and preferences."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_provider_fedsched.federation._loading import SpecError, spec_error
from airflow_provider_fedsched.federation.assets import AssetDataset
from airflow_provider_fedsched.federation.limits import (
    MAX_QUANTITY,
    MAX_SECONDS,
    NOT_BOOL,
    Labels,
    LabelValue,
    label_key_problem,
)
from airflow_provider_fedsched.federation.resources import QuantityError, ResourceList, pod_requests
from airflow_provider_fedsched.federation.spec import Namespace, Taint, TaintEffect

__all__ = ["GangRole", "TaskRequest", "Toleration", "gang_total", "tolerates_all"]


class Toleration(BaseModel):
    """A Kubernetes toleration, with the API's validation and matching rules (``ToleratesTaint``).

    An empty key matches every taint key and requires operator ``Exists`` (``Equal`` with an empty key is
    rejected, as the API server rejects such a pod); ``Exists`` takes no value; no effect matches every
    effect. The one toleration matcher of the package: the engine's filters and the simulator use it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue = ""
    effect: TaintEffect | None = None
    """None tolerates every effect."""

    @model_validator(mode="after")
    def _empty_key_needs_exists(self) -> Toleration:
        # SpecError names the field: spec_error() prefixes it with where the toleration sits.
        if self.key and (problem := label_key_problem(self.key)) is not None:
            raise SpecError(f"key: {problem}")
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


def _requests(value: ResourceList) -> ResourceList:
    """Requests as a request holds them: never negative; zero requests ask for nothing, and dropping
    them keeps fit checks short."""
    for name, amount in value.items():
        if amount < 0:
            raise ValueError(f"{name}: {amount} is negative")
        if amount > MAX_QUANTITY:
            raise ValueError(f"{name}: {amount} is beyond Kubernetes' quantity range (2^63-1)")
    return {name: amount for name, amount in value.items() if amount}


class GangRole(BaseModel):
    """Pods of one shape in a gang (a Job's workers, an MPI launcher): all of them start together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="worker", min_length=1)
    count: Annotated[int, NOT_BOOL, Field(ge=1)]
    resources: ResourceList = Field(default_factory=dict)
    """One pod's requests, in scheduler units."""

    _non_negative = field_validator("resources")(lambda value: _requests(value))


def gang_total(roles: Iterable[GangRole]) -> ResourceList:
    """What the whole gang requests: the sum over its pods."""
    total: ResourceList = {}
    for role in roles:
        for name, amount in role.resources.items():
            total[name] = total.get(name, 0) + amount * role.count
    return total


class TaskRequest(BaseModel):
    """One task's placement request. ``resources`` are scheduler units (see :mod:`resources`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resources: ResourceList = Field(default_factory=dict)
    node_selector: Labels = Field(default_factory=dict)
    """Must match the labels of a node that fits."""
    cluster_selector: Labels = Field(default_factory=dict)
    """Must match the cluster's labels in the spec."""
    tolerations: list[Toleration] = Field(default_factory=list)
    datasets: list[str] = Field(default_factory=list)
    """Names of spec datasets the task reads (sovereignty, locality and egress)."""
    assets: list[AssetDataset] = Field(default_factory=list, max_length=1000)
    """Its Airflow Assets (inlets and outlets): datasets too, resolved against the spec's entries."""
    prefer_region: str | None = None
    prefer_group: str | None = None
    clusters: list[str] | None = None
    """Restrict placement to these clusters; None = any member."""
    namespace: Namespace = "default"
    expected_duration_seconds: Annotated[
        float, NOT_BOOL, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    ] = 3600.0
    preemptible: bool = False
    """It may be evicted and retried elsewhere; only such a task may run on borrowed tenant quota."""
    gang: tuple[GangRole, ...] = ()
    """Pods that must all fit real nodes of one cluster at the same time (a Job); empty for one pod.
    ``resources`` is then the whole gang's sum (:meth:`for_gang`), which cost, quota and headroom use."""
    tenant: str | None = None
    """The tenant it runs for (its quota, fair share and budget); None = no tenant rule applies."""
    max_cost: Annotated[float, NOT_BOOL, Field(ge=0, allow_inf_nan=False)] | None = None
    """Budget: a cluster where its estimated cost (compute and egress) is above this is out."""
    max_egress_gb: Annotated[float, NOT_BOOL, Field(ge=0, allow_inf_nan=False)] | None = None
    """Budget: a cluster it would have to move more than this many GB of data to is out."""

    _non_negative = field_validator("resources")(lambda value: _requests(value))

    @model_validator(mode="after")
    def _gang_sum(self) -> TaskRequest:
        if self.gang and self.resources != gang_total(self.gang):
            raise ValueError("resources: a gang request's resources are the sum of its pods' (use for_gang)")
        return self

    @property
    def gang_size(self) -> int:
        """How many pods the request places at once (1 for a pod task)."""
        return sum(role.count for role in self.gang) or 1

    @classmethod
    def build(cls, where: str = "request", **fields: Any) -> TaskRequest:
        """A validated request from ``fields``; raises :class:`SpecError` naming ``where.<field>``."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise spec_error(exc, where) from None

    @classmethod
    def for_gang(cls, gang: Iterable[GangRole], **federation_args: Any) -> TaskRequest:
        """A gang request: every role's pods, and ``resources`` their sum."""
        roles = tuple(gang)
        if not roles:
            raise SpecError("request.gang: a gang has at least one role")
        try:
            return cls(resources=gang_total(roles), gang=roles, **federation_args)
        except ValidationError as exc:
            raise spec_error(exc, "request") from None

    @classmethod
    def from_pod_spec(
        cls, pod_spec: Mapping[str, Any], *, gang_of: int | None = None, **federation_args: Any
    ) -> TaskRequest:
        """Build a request from a Kubernetes pod spec dict (camelCase or snake_case).

        Requests are computed as the scheduler does (:func:`resources.pod_requests`); ``nodeSelector`` and
        ``tolerations`` are read from the spec; everything else comes from ``federation_args``.
        ``gang_of``: the request is a gang of that many pods of this spec (a Job's parallelism).
        """
        selector = pod_spec.get("nodeSelector") or pod_spec.get("node_selector") or {}
        tolerations = [
            Toleration.from_k8s(t, f"request.tolerations[{position}]")
            for position, t in enumerate(pod_spec.get("tolerations") or [])
        ]
        try:
            requests = pod_requests(pod_spec)
        except QuantityError as exc:
            raise SpecError(f"request.resources.{exc} (in the pod's containers or overhead)") from None
        except (AttributeError, TypeError):
            raise SpecError(
                "request.resources: a container's resources must be a mapping of requests and limits"
            ) from None
        if gang_of is not None:
            try:
                role = GangRole(count=gang_of, resources=requests)
            except ValidationError as exc:
                raise spec_error(exc, "request.gang[0]") from None
            federation_args["gang"] = (role,)
            requests = gang_total((role,))
        try:
            return cls(
                resources=requests,
                node_selector=dict(selector),
                tolerations=[*tolerations, *federation_args.pop("tolerations", [])],
                **federation_args,
            )
        except ValidationError as exc:
            raise spec_error(exc, "request") from None
