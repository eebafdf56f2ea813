"""The federation scoring engine: pure Python (pydantic), no Airflow import, no I/O beyond loading files.

Load a :class:`FederationSpec` and snapshots, build a :class:`TaskRequest`, and ask
``FederationEngine(spec).decide(request, snapshots, now=...)`` for a :class:`Decision`.
"""

from airflow_provider_fedsched.federation.decision import Candidate, Decision, Outcome, Rejection, ScoreTerm
from airflow_provider_fedsched.federation.engine import FederationEngine
from airflow_provider_fedsched.federation.framework import (
    ClusterView,
    Code,
    CycleState,
    FilterPlugin,
    ScorePlugin,
    Status,
)
from airflow_provider_fedsched.federation.registry import FILTER_PLUGINS, MANDATORY_FILTERS, SCORE_PLUGINS
from airflow_provider_fedsched.federation.request import TaskRequest, Toleration
from airflow_provider_fedsched.federation.resources import (
    QuantityError,
    ResourceList,
    format_quantity,
    parse_quantity,
    parse_resource_list,
    pod_requests,
)
from airflow_provider_fedsched.federation.snapshot import (
    ClusterSnapshot,
    NodeSnapshot,
    dump_snapshots,
    load_snapshots,
)
from airflow_provider_fedsched.federation.spec import (
    ClusterSpec,
    DatasetSpec,
    FederationSpec,
    PolicySpec,
    Prices,
    SpecError,
    Taint,
    Weights,
    load_spec,
    spec_fingerprint,
)

__all__ = [
    "FILTER_PLUGINS",
    "MANDATORY_FILTERS",
    "SCORE_PLUGINS",
    "Candidate",
    "ClusterSnapshot",
    "ClusterSpec",
    "ClusterView",
    "Code",
    "CycleState",
    "DatasetSpec",
    "Decision",
    "FederationEngine",
    "FederationSpec",
    "FilterPlugin",
    "NodeSnapshot",
    "Outcome",
    "PolicySpec",
    "Prices",
    "QuantityError",
    "Rejection",
    "ResourceList",
    "ScorePlugin",
    "ScoreTerm",
    "SpecError",
    "Status",
    "Taint",
    "TaskRequest",
    "Toleration",
    "Weights",
    "dump_snapshots",
    "format_quantity",
    "load_snapshots",
    "load_spec",
    "parse_quantity",
    "parse_resource_list",
    "pod_requests",
    "spec_fingerprint",
]
