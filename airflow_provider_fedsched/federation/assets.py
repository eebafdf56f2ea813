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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airflow_provider_fedsched.federation._loading import SpecError, spec_error
from airflow_provider_fedsched.federation.limits import SizeGb

__all__ = [
    "EXTRA_KEY",
    "MAX_ASSET_ID",
    "AssetDataset",
    "AssetFields",
    "asset_dataset",
    "where_written",
    "written_on",
]

EXTRA_KEY = "fedsched"
"""The key of an Asset's ``extra`` under which its federation fields are."""
MAX_ASSET_ID = 1500
"""Airflow's own limit on an asset's URI and name."""
SHOWN = 200
"""How much of an asset's URI or name a message shows."""
AssetId = Annotated[str, Field(min_length=1, max_length=MAX_ASSET_ID)]
RegionName = Annotated[str, Field(min_length=1, max_length=253)]


class AssetFields(BaseModel):
    """``extra["fedsched"]`` of an Asset. ``allowed_regions`` may only narrow a spec entry's rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """The member cluster the data lives on (locality, egress)."""
    region: RegionName | None = None
    """The region the data lives in, when no one cluster holds it."""
    size_gb: SizeGb | None = None
    """Its size (more precise than a spec entry's, which it replaces)."""
    allowed_regions: Annotated[list[RegionName], Field(min_length=1, max_length=1000)] | None = None
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
    the data there; its sovereignty rule does not change)."""

    @property
    def label(self) -> str:
        """How errors and decisions name it: its URI, and its name when that differs (each cut at
        :data:`SHOWN` characters, so a long URI never floods a message)."""
        uri, name = self.uri[:SHOWN], self.name[:SHOWN]
        return f"'{uri}'" if self.name == self.uri else f"'{uri}' (name '{name}')"


def written_on(event_extra: Any) -> str | None:
    """The cluster an asset event's ``extra`` says the data was written on (as :func:`where_written` put
    it), None when it says nothing readable: it only steers locality, so a stray value is ignored."""
    fields = event_extra.get(EXTRA_KEY) if isinstance(event_extra, Mapping) else None
    cluster = fields.get("cluster") if isinstance(fields, Mapping) else None
    return cluster if isinstance(cluster, str) and 0 < len(cluster) <= 253 else None


def where_written(cluster: str, region: str) -> dict[str, str]:
    """What a succeeded task adds to its outlet asset events' ``extra[EXTRA_KEY]``."""
    return {"cluster": cluster, "region": region}


def asset_dataset(
    uri: Any,
    name: Any,
    extra: Any,
    role: Literal["inlet", "outlet"],
    where: str,
    written: str | None = None,
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
        return AssetDataset(uri=uri, name=name, role=role, fedsched=fields, written_on=written)
    except ValidationError as exc:
        raise SpecError(
            str(spec_error(exc, f"{where} ({role} '{shown}')")).replace(").fedsched", f") extra.{EXTRA_KEY}")
        ) from None
