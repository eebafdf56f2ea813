"""Kubeconfigs as untrusted input: read within limits, shape checked, TLS verification turned off reported.

A kubeconfig comes from a connection's extras (``kube_config`` text or ``kube_config_path``) or a file given
to the CLI. :func:`load_kubeconfig` reads it with the provider's one YAML reader (duplicate keys, alias
bombs, size, non-regular files refused) and checks the shape the Kubernetes clients rely on, so that
``contexts: "y"`` is an error naming ``contexts`` instead of an ``AttributeError`` deep in a client.
Messages name fields and names, never values: a kubeconfig holds credentials.

:func:`tls_verification_off` says why TLS verification is off for a context (``insecure-skip-tls-verify``
on its cluster, or the connection's ``disable_verify_ssl``), so that the caller can warn naming the
member cluster and apply the same setting to every client of that member.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from airflow_provider_fedsched.federation._loading import spec_error
from airflow_provider_fedsched.federation.documents import parse_yaml, read_text_file
from airflow_provider_fedsched.federation.limits import KUBECONFIG_LIMITS
from airflow_provider_fedsched.federation.spec import SpecError

__all__ = ["load_kubeconfig", "tls_verification_off", "tls_warning"]

MAX_ENTRIES = 10_000
"""Clusters, contexts or users in one kubeconfig."""


class _Open(BaseModel):
    # Kubeconfigs carry many fields this provider never reads (exec plugins, extensions, proxies): only
    # the ones it reads are checked; the rest pass through to the Kubernetes client untouched.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _Cluster(_Open):
    server: StrictStr = Field(min_length=1)
    insecure_skip_tls_verify: StrictBool = Field(False, alias="insecure-skip-tls-verify")
    certificate_authority: StrictStr | None = Field(None, alias="certificate-authority")
    certificate_authority_data: StrictStr | None = Field(None, alias="certificate-authority-data")


class _NamedCluster(_Open):
    name: StrictStr = Field(min_length=1)
    cluster: _Cluster


class _Context(_Open):
    cluster: StrictStr = Field(min_length=1)
    user: StrictStr | None = None
    namespace: StrictStr | None = None


class _NamedContext(_Open):
    name: StrictStr = Field(min_length=1)
    context: _Context


class _NamedUser(_Open):
    name: StrictStr = Field(min_length=1)
    user: dict[str, Any] | None = None


class _Kubeconfig(_Open):
    clusters: list[_NamedCluster] = Field(min_length=1, max_length=MAX_ENTRIES)
    contexts: list[_NamedContext] = Field(min_length=1, max_length=MAX_ENTRIES)
    users: list[_NamedUser] | None = Field(None, max_length=MAX_ENTRIES)
    current_context: StrictStr | None = Field(None, alias="current-context")


def load_kubeconfig(source: str | Path | Mapping[str, Any], where: str = "kubeconfig") -> dict[str, Any]:
    """The kubeconfig as a dict (what the Kubernetes clients load), from YAML/JSON text, a file or a
    mapping; else :class:`SpecError` starting with ``where`` (``connection k8s_east: kube_config``) and
    the field path (``contexts[1].context.cluster: unknown cluster 'x'``)."""
    if isinstance(source, Mapping):
        document: Any = dict(source)
    else:
        try:
            text = (
                read_text_file(source, "kubeconfig", KUBECONFIG_LIMITS)
                if isinstance(source, Path)
                else source
            )
            document = parse_yaml(text, "kubeconfig", KUBECONFIG_LIMITS)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    if not isinstance(document, dict):
        raise SpecError(f"{where}: a kubeconfig is a mapping, got {type(document).__name__}")
    try:
        parsed = _Kubeconfig.model_validate(document)
    except ValidationError as exc:
        raise SpecError(f"{where}: {spec_error(exc)}") from None
    _check_references(parsed, where)
    return document


def _check_references(config: _Kubeconfig, where: str) -> None:
    # A context naming a missing user is allowed (the clients then send no credentials, as kubectl does);
    # one naming a missing cluster cannot be used at all.
    clusters = {entry.name for entry in config.clusters}
    contexts = set()
    for position, entry in enumerate(config.contexts):
        contexts.add(entry.name)
        if entry.context.cluster not in clusters:
            raise SpecError(
                f"{where}: contexts[{position}].context.cluster: unknown cluster '{entry.context.cluster}' "
                f"(known: {', '.join(sorted(clusters))})"
            )
    if config.current_context and config.current_context not in contexts:
        raise SpecError(
            f"{where}: current-context: unknown context '{config.current_context}' "
            f"(known: {', '.join(sorted(contexts))})"
        )


def tls_verification_off(
    kubeconfig: Mapping[str, Any], context: str | None = None, *, disable_verify_ssl: bool = False
) -> str | None:
    """Why TLS verification is off for ``context`` (default: current-context) of a kubeconfig that
    :func:`load_kubeconfig` accepted, or None when it is on."""
    if disable_verify_ssl:
        return "the connection sets disable_verify_ssl: TLS verification is off for every client"
    name = context or kubeconfig.get("current-context")
    cluster_name = next(
        (
            entry["context"]["cluster"]
            for entry in kubeconfig.get("contexts") or []
            if entry.get("name") == name
        ),
        None,
    )
    for entry in kubeconfig.get("clusters") or []:
        if entry.get("name") == cluster_name and entry["cluster"].get("insecure-skip-tls-verify") is True:
            return (
                f"kubeconfig cluster '{cluster_name}' sets insecure-skip-tls-verify: TLS verification is off "
                "for every client"
            )
    return None


def tls_warning(cluster: str, reason: str) -> str:
    """The one warning text for a member whose TLS verification is off (log it once per member)."""
    return (
        f"cluster {cluster}: {reason}; its API server's identity is not checked (turn verification back on "
        "with a certificate-authority)"
    )
