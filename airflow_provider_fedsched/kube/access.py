"""How to reach one member cluster: its kubeconfig, context and namespace, resolved per cluster.

Every member gets its own client configuration object; nothing here touches the process-wide default
``kubernetes.client.Configuration``, so concurrent clients for different clusters never cross. Error
messages name the cluster and the connection, never the kubeconfig's contents (it holds credentials).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.federation._errors import PermanentError
from airflow_provider_fedsched.federation.documents import read_text_file
from airflow_provider_fedsched.federation.limits import KUBECONFIG_LIMITS
from airflow_provider_fedsched.federation.spec import SpecError
from airflow_provider_fedsched.state.process import tls_warnings
from airflow_provider_fedsched.validation.kubeconfig import load_kubeconfig, tls_verification_off, tls_warning

KUBERNETES_CONN_TYPE = "kubernetes"
log = logging.getLogger(__name__)


class ClusterAccessError(PermanentError, ValueError):
    """A member cluster whose connection or kubeconfig cannot be used."""

    def __init__(self, cluster: str, conn_id: str | None, problem: str) -> None:
        self.cluster = cluster
        self.conn_id = conn_id
        self.problem = problem
        where = f"cluster {cluster!r}" + (f" (connection {conn_id!r})" if conn_id else "")
        super().__init__(f"{where}: {problem}")


class MissingConnection(ClusterAccessError):
    """A member whose connection id no secrets backend, environment variable or metadata database holds:
    a mistake in the spec or a connection never added, not a cluster that is down."""

    PROBLEM = "connection does not exist"

    def __init__(self, cluster: str, conn_id: str, problem: str = PROBLEM) -> None:
        super().__init__(cluster, conn_id, problem)


class MalformedConnection(ClusterAccessError):
    """A member whose connection exists but cannot be read as a connection (its ``extra`` not a JSON
    object, a secrets backend failing on it): a configuration mistake to fix, not a cluster that is down."""


@dataclass(frozen=True)
class ClusterAccess:
    """Everything needed to build a client for one member cluster."""

    cluster: str
    conn_id: str | None
    kubeconfig: Mapping[str, Any] = field(repr=False)  # holds credentials: never logged
    context: str | None
    namespace: str
    verify_ssl: bool = True

    @property
    def server(self) -> str:
        """The API server URL of the selected context (no credentials)."""
        return _server_of(self.kubeconfig, self.context)

    async def async_configuration(self) -> Any:
        """A fresh ``kubernetes_asyncio.client.Configuration`` for this cluster only."""
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        await config.load_kube_config_from_dict(
            dict(self.kubeconfig), context=self.context, client_configuration=configuration
        )
        configuration.verify_ssl = self.verify_ssl and configuration.verify_ssl
        return configuration


def _server_of(kubeconfig: Mapping[str, Any], context: str | None) -> str:
    name = context or kubeconfig.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster") or {} for c in kubeconfig.get("clusters") or []}
    cluster_name = contexts.get(name, {}).get("cluster")
    return str(clusters.get(cluster_name, {}).get("server", ""))


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def parse_kubeconfig(cluster: str, conn_id: str | None, raw: Any) -> dict[str, Any]:
    """Parse kubeconfig text (YAML or JSON) or a mapping within limits (duplicate keys, alias bombs and
    a wrong shape such as ``contexts: "y"`` refused), without echoing its contents on error."""
    try:
        return load_kubeconfig(raw if isinstance(raw, Mapping) else str(raw), "kubeconfig")
    except SpecError as exc:
        problem = str(exc).removeprefix("kubeconfig: ")
        kind = "is not valid YAML or JSON" if "malformed YAML" in problem else "is malformed"
        raise ClusterAccessError(cluster, conn_id, f"kubeconfig {kind}: {problem}") from None


def _read_kubeconfig(cluster: str, conn_id: str | None, path: Any, what: str) -> str:
    try:
        return read_text_file(Path(str(path)).expanduser(), what, KUBECONFIG_LIMITS)
    except SpecError as exc:
        raise ClusterAccessError(cluster, conn_id, f"{what} {str(path)!r} cannot be read: {exc}") from None


def _tls_verified(
    cluster: str, kubeconfig: Mapping[str, Any], context: str, disable_verify_ssl: bool
) -> bool:
    """Whether this member's clients verify TLS; when they do not, warn once naming the cluster. The
    answer goes into ``ClusterAccess.verify_ssl``, which every client of the member (sensing, the pod's
    own client, the trigger) applies alike."""
    reason = tls_verification_off(kubeconfig, context, disable_verify_ssl=disable_verify_ssl)
    if reason is None:
        return True
    if tls_warnings.first((cluster, reason)):
        log.warning("%s", tls_warning(cluster, reason))
    return False


def select_context(
    cluster: str, conn_id: str | None, kubeconfig: Mapping[str, Any], context: str | None
) -> str:
    """The context to use: the one asked for, else the kubeconfig's current-context; it must exist."""
    names = [str(c.get("name")) for c in kubeconfig.get("contexts") or []]
    chosen = context or kubeconfig.get("current-context")
    if not chosen:
        if len(names) == 1:
            return names[0]
        raise ClusterAccessError(
            cluster, conn_id, f"kubeconfig has no current-context; name one of: {', '.join(names)}"
        )
    if chosen not in names:
        raise ClusterAccessError(
            cluster, conn_id, f"kubeconfig context {chosen!r} does not exist (contexts: {', '.join(names)})"
        )
    if not _server_of(kubeconfig, str(chosen)):
        raise ClusterAccessError(cluster, conn_id, f"kubeconfig context {chosen!r} names no cluster server")
    return str(chosen)


def access_from_extras(
    cluster: str,
    conn_id: str,
    conn_type: str | None,
    extras: Mapping[str, Any],
    default_namespace: str | None,
) -> ClusterAccess:
    """Resolve a cncf.kubernetes ``kubernetes`` connection's extras, as KubernetesHook reads them."""
    if conn_type != KUBERNETES_CONN_TYPE:
        raise ClusterAccessError(
            cluster, conn_id, f"connection type is {conn_type!r}; expected {KUBERNETES_CONN_TYPE!r}"
        )

    def field_value(name: str) -> Any:
        # Bare key first, then the pre-2.3 prefixed form, as KubernetesHook._get_field does.
        if name in extras:
            return extras[name] or None
        return extras.get(f"extra__kubernetes__{name}") or None

    if _truthy(field_value("in_cluster")):
        raise ClusterAccessError(
            cluster, conn_id, "in_cluster connections cannot be federation members: give a kubeconfig"
        )
    inline, path = field_value("kube_config"), field_value("kube_config_path")
    if inline and path:
        raise ClusterAccessError(cluster, conn_id, "set either kube_config or kube_config_path, not both")
    if inline:
        kubeconfig = parse_kubeconfig(cluster, conn_id, inline)
    elif path:
        text = _read_kubeconfig(cluster, conn_id, path, "kube_config_path")
        kubeconfig = parse_kubeconfig(cluster, conn_id, text)
    else:
        raise ClusterAccessError(cluster, conn_id, "connection has neither kube_config nor kube_config_path")
    context = select_context(cluster, conn_id, kubeconfig, field_value("cluster_context"))
    namespace = field_value("namespace") or default_namespace or _context_namespace(kubeconfig, context)
    return ClusterAccess(
        cluster=cluster,
        conn_id=conn_id,
        kubeconfig=kubeconfig,
        context=context,
        namespace=str(namespace),
        verify_ssl=_tls_verified(cluster, kubeconfig, context, _truthy(field_value("disable_verify_ssl"))),
    )


def access_from_kubeconfig_file(
    cluster: str, context: str, kubeconfig_path: str | Path, namespace: str | None = None
) -> ClusterAccess:
    """Resolve a member from a context of a kubeconfig file (the CLI outside Airflow)."""
    text = _read_kubeconfig(cluster, None, kubeconfig_path, "kubeconfig")
    kubeconfig = parse_kubeconfig(cluster, None, text)
    chosen = select_context(cluster, None, kubeconfig, context)
    return ClusterAccess(
        cluster=cluster,
        conn_id=None,
        kubeconfig=kubeconfig,
        context=chosen,
        namespace=namespace or _context_namespace(kubeconfig, chosen),
        verify_ssl=_tls_verified(cluster, kubeconfig, chosen, False),
    )


def _context_namespace(kubeconfig: Mapping[str, Any], context: str) -> str:
    for entry in kubeconfig.get("contexts") or []:
        if entry.get("name") == context:
            return str((entry.get("context") or {}).get("namespace") or "default")
    return "default"
