"""Operator extra links: "Ran on <cluster>" to the try's decision detail on the Federation page, and the
dashboard of the cluster the try ran on (``dashboard_url`` in the spec).

Airflow names a link once per task (when the DAG is parsed) and stores each link's URL when the try ends,
so a link that names the cluster is one link per member cluster: only the one the try ran on gets a URL,
and the UI shows only links with a URL.
"""

from __future__ import annotations

from typing import Any

import attrs
from airflow.sdk import BaseOperatorLink

from airflow_provider_fedsched.federation.record import XCOM_KEY, PlacementRecord

GENERIC_NAME = "Federation decision"
"""The decision link's name when the member clusters cannot be read where the DAG is parsed."""


def _record(operator: Any, ti_key: Any) -> PlacementRecord | None:
    record = getattr(operator, "placement", None)
    if record is None:
        from airflow.sdk.execution_time.xcom import XCom

        raw = XCom.get_value(ti_key=ti_key, key=XCOM_KEY)
        try:
            record = PlacementRecord.model_validate(raw) if raw else None
        except ValueError:
            record = None
    return record


def _ui_root() -> str:
    """The path of ``[api] base_url`` (the UI and the page live under it)."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


@attrs.define()
class FederatedClusterLink(BaseOperatorLink):
    """ "Ran on <cluster>": the Federation page opened on the try's decision detail, for a try whose pod
    ran (or runs) on ``cluster``; with no cluster, for any try."""

    cluster: str | None = None

    @property
    def name(self) -> str:
        return f"Ran on {self.cluster}" if self.cluster else GENERIC_NAME

    @property
    def xcom_key(self) -> str:
        return f"_link_{type(self).__name__}" + (f"_{self.cluster}" if self.cluster else "")

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow_provider_fedsched.plugins.paths import decision_path

        record = _record(operator, ti_key)
        attempt = record.current if record is not None else None
        if record is None or attempt is None or (self.cluster and attempt.cluster != self.cluster):
            return ""
        return decision_path(
            record.dag_id, record.run_id, record.task_id, record.map_index, record.try_number, _ui_root()
        )


class ClusterDashboardLink(BaseOperatorLink):
    """Links a task try to the dashboard of the cluster its pod ran on (``dashboard_url`` in the spec)."""

    name = "Cluster dashboard"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        record = _record(operator, ti_key)
        attempt = record.current if record is not None else None
        if attempt is None:
            return ""
        try:
            member = operator.federation_hook.spec.cluster(attempt.cluster)
        except Exception:
            return ""
        # Checked at spec load (http(s) only, plain placeholders); the values are URL-quoted.
        return member.dashboard_link(attempt.namespace, attempt.pod) or ""


_LINKS = "_fedsched_extra_links"


class FederationLinks:
    """The ``operator_extra_links`` of a federated operator: on the class (a mapped task's view), the
    generic decision link and the dashboard; on a task, one "Ran on" link per member of its federation."""

    def __get__(self, operator: Any, owner: type | None = None) -> tuple[BaseOperatorLink, ...]:
        dashboard = ClusterDashboardLink()
        # A mapped task's links were named from the class: its expanded tries keep those names.
        if operator is None or getattr(operator, "_BaseOperator__from_mapped", False):
            return (FederatedClusterLink(), dashboard)
        links: tuple[BaseOperatorLink, ...] | None = operator.__dict__.get(_LINKS)
        if links is None:
            # Serializing one task asks several times: its spec is read once per task and parse.
            links = operator.__dict__[_LINKS] = self._named(operator, dashboard)
        return links

    @staticmethod
    def _named(operator: Any, dashboard: BaseOperatorLink) -> tuple[BaseOperatorLink, ...]:
        try:
            # The task's hook when it has one (a running try); else a passing one, so that parsing the DAG
            # leaves nothing cached on the task.
            hook = operator.__dict__.get("federation_hook")
            if hook is None:
                from airflow_provider_fedsched.hooks.federation import FederationHook

                hook = FederationHook(operator.federation)
            names = [member.name for member in hook.spec.clusters]
        except Exception:  # a spec not readable where the DAG is parsed: the link cannot name the cluster
            return (FederatedClusterLink(), dashboard)
        return (*(FederatedClusterLink(name) for name in names), dashboard)
