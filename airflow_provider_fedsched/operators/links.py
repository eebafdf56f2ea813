"""Operator extra link: the cluster a federated task try ran on (its dashboard, from the spec)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from airflow_provider_fedsched.federation.record import XCOM_KEY, PlacementRecord


class FederatedClusterLink(BaseOperatorLink):
    """Links a task try to the dashboard of the cluster its pod ran on (``dashboard_url`` in the spec)."""

    name = "Federation cluster"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        record = getattr(operator, "placement", None)
        if record is None:
            from airflow.sdk.execution_time.xcom import XCom

            raw = XCom.get_value(ti_key=ti_key, key=XCOM_KEY)
            try:
                record = PlacementRecord.model_validate(raw) if raw else None
            except ValueError:
                record = None
        attempt = record.current if record is not None else None
        if attempt is None:
            return ""
        try:
            member = operator.federation_hook.spec.cluster(attempt.cluster)
        except Exception:
            return ""
        # Checked at spec load (http(s) only, plain placeholders); the values are URL-quoted.
        return member.dashboard_link(attempt.namespace, attempt.pod) or ""
