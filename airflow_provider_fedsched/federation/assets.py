"""A task's Airflow Assets as its datasets: what an asset says of itself, and what a spec entry says of it.

An asset (an ``inlet`` or ``outlet``) is matched against the spec's ``datasets``: an entry whose ``name``
is the asset's name, or one of whose ``assets`` patterns (exact, or a glob such as
``s3://eu-lake/patients/*``) is the asset's URI or name. Its ``extra["fedsched"]`` may say where the data
lives (``cluster`` or ``region``), its ``size_gb`` and its ``allowed_regions``. Resolution itself is the
spec's one check of the names a task refers to (:meth:`FederationSpec.check_references`); this module holds
the asset's own fields and their validation, without Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from airflow_provider_fedsched.federation._loading import SpecError, spec_error
from airflow_provider_fedsched.federation.limits import SizeGb

__all__ = [
    "EXTRA_KEY",
    "MAX_ASSET_ID",
    "AssetDataset",
    "AssetFields",
    "WrittenEvent",
    "asset_dataset",
    "size_reported",
    "where_written",
    "written_event",
]

EXTRA_KEY = "fedsched"
"""The key of an Asset's ``extra`` under which its federation fields are."""
MAX_ASSET_ID = 1500
"""Airflow's own limit on an asset's URI and name."""
SHOWN = 200
"""How much of an asset's URI or name a message shows."""
AssetId = Annotated[str, Field(min_length=1, max_length=MAX_ASSET_ID)]
RegionName = Annotated[str, Field(min_length=1, max_length=253)]
Regions = Annotated[list[RegionName], Field(min_length=1, max_length=1000)]
SIZE_REPORT_KEY = "fedsched_size_gb"
"""The key of a pod's XCom result (a mapping) under which it reports the size it wrote: one number for
every outlet, or a mapping of outlet URI to number."""


class AssetFields(BaseModel):
    """``extra["fedsched"]`` of an Asset. ``allowed_regions`` may only narrow a spec entry's rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """The member cluster the data lives on (locality, egress)."""
    region: RegionName | None = None
    """The region the data lives in, when no one cluster holds it."""
    size_gb: SizeGb | None = None
    """Its size (more precise than a spec entry's, which it replaces)."""
    allowed_regions: Regions | None = None
    """Sovereignty: regions a task reading or writing it may run in."""


class AssetDataset(BaseModel):
    """One inlet or outlet of a task as its request carries it (and its placement record keeps it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: AssetId
    name: AssetId
    role: Literal["inlet", "outlet"] = "inlet"
    fedsched: AssetFields | None = None
    written_on: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """For an inlet: the cluster its latest asset event says it was written on (locality and egress follow
    the data there)."""
    written_region: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """Its region, as that event says (shown; the spec's member list decides)."""
    written_size_gb: SizeGb | None = None
    """For an inlet: the size the pod that wrote it reported (replaces the extra's and the spec's)."""
    inherited_regions: Regions | None = None
    """For an inlet: the rule its writer ran under (the inputs it was derived from): it only narrows."""

    @property
    def label(self) -> str:
        """How errors and decisions name it: its URI, and its name when that differs (each cut at
        :data:`SHOWN` characters, so a long URI never floods a message)."""
        uri, name = self.uri[:SHOWN], self.name[:SHOWN]
        return f"'{uri}'" if self.name == self.uri else f"'{uri}' (name '{name}')"


class WrittenEvent(BaseModel):
    """What an inlet's latest asset event says of the data: where it was written, its size, the rule its
    writer ran under."""

    model_config = ConfigDict(frozen=True)

    cluster: str | None = None
    region: str | None = None
    size_gb: float | None = None
    allowed_regions: list[str] | None = None


_SIZE: TypeAdapter[float] = TypeAdapter(SizeGb)
_REGIONS: TypeAdapter[list[str]] = TypeAdapter(Regions)


def _field_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
    return f"{place}: {first['msg']}" if place else f": {first['msg']}"


def written_event(event_extra: Any, at: str) -> WrittenEvent:
    """An asset event's ``extra[EXTRA_KEY]`` as :func:`where_written` put it. A cluster that cannot be read
    is ignored (it only steers locality); a ``region``, ``size_gb`` or ``allowed_regions`` that cannot be is
    a :class:`SpecError` naming ``at`` and the field: a rule is never dropped (that would widen it), and a
    stray size is hostile input."""
    fields = event_extra.get(EXTRA_KEY) if isinstance(event_extra, Mapping) else None
    if not isinstance(fields, Mapping):
        return WrittenEvent()
    cluster, region = fields.get("cluster"), fields.get("region")
    field = f"{at}: latest asset event's extra.{EXTRA_KEY}"
    size = fields.get("size_gb")
    allowed = fields.get("allowed_regions")
    if region is not None and not (isinstance(region, str) and 0 < len(region) <= 253):
        raise SpecError(f"{field}.region: a region's name, 1 to 253 characters (got {str(region)[:SHOWN]!r})")
    try:
        size = None if size is None else _SIZE.validate_python(size)
    except ValidationError as exc:
        raise SpecError(f"{field}.size_gb{_field_error(exc)} (got {str(size)[:SHOWN]!r})") from None
    try:
        allowed = None if allowed is None else _REGIONS.validate_python(allowed)
    except ValidationError as exc:
        raise SpecError(f"{field}.allowed_regions{_field_error(exc)}") from None
    return WrittenEvent(
        cluster=cluster if isinstance(cluster, str) and 0 < len(cluster) <= 253 else None,
        region=region,
        size_gb=size,
        allowed_regions=allowed,
    )


def where_written(cluster: str, region: str, allowed_regions: list[str] | None = None) -> dict[str, Any]:
    """What a succeeded task adds to its outlet asset events' ``extra[EXTRA_KEY]``: where it ran and, when
    its data had a rule, that rule (its outputs inherit it)."""
    written: dict[str, Any] = {"cluster": cluster, "region": region}
    if allowed_regions is not None:
        written["allowed_regions"] = sorted(allowed_regions)
    return written


def size_reported(result: Any, uri: str) -> float | None:
    """The size a pod's XCom result reports for the outlet ``uri`` (``{"fedsched_size_gb": 12.5}`` for every
    outlet, or ``{"fedsched_size_gb": {"s3://...": 12.5}}`` per outlet); None when it reports none. A value
    that is no size is a :class:`SpecError` naming the field."""
    if not isinstance(result, Mapping) or SIZE_REPORT_KEY not in result:
        return None
    value = result[SIZE_REPORT_KEY]
    field = f"the pod's result {SIZE_REPORT_KEY}"
    if isinstance(value, Mapping):
        if uri not in value:
            return None
        value, field = value[uri], f"{field}[{uri[:SHOWN]!r}]"
    try:
        return _SIZE.validate_python(value)
    except ValidationError as exc:
        raise SpecError(f"{field}{_field_error(exc)} (got {str(value)[:SHOWN]!r})") from None


def asset_dataset(
    uri: Any,
    name: Any,
    extra: Any,
    role: Literal["inlet", "outlet"],
    where: str,
    written: WrittenEvent | None = None,
) -> AssetDataset:
    """An asset's federation view; :class:`SpecError` naming ``where``, the asset's URI and the field."""
    shown = str(uri)[:SHOWN]
    if not isinstance(uri, str) or not isinstance(name, str):
        raise SpecError(f"{where} ({role} '{shown}'): an asset's uri and name are strings")
    if extra is not None and not isinstance(extra, Mapping):
        raise SpecError(f"{where} ({role} '{shown}'): extra must be a mapping (got {type(extra).__name__})")
    fields = (extra or {}).get(EXTRA_KEY)
    if fields is not None and not isinstance(fields, Mapping):
        raise SpecError(
            f"{where} ({role} '{shown}'): extra.{EXTRA_KEY} must be a mapping of cluster, region, size_gb, "
            f"allowed_regions (got {type(fields).__name__})"
        )
    try:
        return AssetDataset(
            uri=uri,
            name=name,
            role=role,
            fedsched=fields,
            written_on=written.cluster if written is not None else None,
            written_region=written.region if written is not None else None,
            written_size_gb=written.size_gb if written is not None else None,
            inherited_regions=written.allowed_regions if written is not None else None,
        )
    except ValidationError as exc:
        raise SpecError(
            str(spec_error(exc, f"{where} ({role} '{shown}')")).replace(").fedsched", f") extra.{EXTRA_KEY}")
        ) from None
