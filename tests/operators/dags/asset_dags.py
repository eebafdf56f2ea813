"""DAGs whose tasks name their data as Airflow Assets (inlets and outlets), against the simulated federation
with the ``assets`` patterns ``tests/operators/test_assets.py`` adds to its spec."""

from __future__ import annotations

import json

from airflow.sdk import Asset

from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator
from tests.operators.dags.federated_dags import dag_named, federated_dag, pod_args, sim

CUSTOMERS = Asset(uri="s3://eu-lake/customers/2026.parquet", name="customers-2026")
"""eu-customers by the spec's glob: eu-west-1 only."""
EVENTS_DAY = Asset(
    "s3://cn-lake/user-events/day=1",
    extra={"fedsched": {"allowed_regions": ["cn-north-1"], "size_gb": 2}},
)
"""user-events (cn-east-1, cn-north-1) by the spec's glob, narrowed by its extra to cn-north-1."""

# Tempted towards China by its preferred region; its inlet keeps it in eu-west-1.
federated_dag("fed_asset_sovereign", inlets=[CUSTOMERS], prefer_region="cn-east-1")
# Writes its output as a sovereign asset: an outlet is a dataset too.
federated_dag(
    "fed_asset_outlet",
    outlets=[Asset("s3://eu-lake/customers/scores", extra={"fedsched": {"size_gb": 1}})],
    prefer_region="cn-east-1",
)
# Where user-events lives (east-cpu) would be local; the asset's narrower rule wins.
federated_dag("fed_asset_narrowed", inlets=[EVENTS_DAY])
# The explicit datasets= still works beside an asset: both rules hold (no region in common here).
federated_dag("fed_asset_and_datasets", inlets=[CUSTOMERS], datasets=["user-events"])
# An extra widening its entry's rule fails the try before anything is reserved or created.
federated_dag(
    "fed_asset_widening",
    inlets=[Asset("s3://eu-lake/customers/all", extra={"fedsched": {"allowed_regions": ["cn-east-1"]}})],
)


def lineage_dag(dag_id: str, features: Asset, *, write: bool) -> None:
    """``write`` (pinned to west-general) writes ``features``; ``read`` reads it, placed where it was
    written. Without ``write``, ``read`` has no event to follow."""
    with dag_named(dag_id):
        read = FederatedKubernetesOperator(task_id="read", inlets=[features], **pod_args())
        if write:
            (
                FederatedKubernetesOperator(
                    task_id="write", outlets=[features], clusters=["west-general"], **pod_args()
                )
                >> read
            )


# Features no spec entry names, 300 GB: where the latest event says they were written, locality follows.
lineage_dag(
    "fed_asset_lineage",
    Asset(uri="s3://scratch/features/v1", extra={"fedsched": {"size_gb": 300}}),
    write=True,
)
lineage_dag(
    "fed_asset_never_written",
    Asset(uri="s3://scratch/features/never-written", extra={"fedsched": {"size_gb": 300}}),
    write=False,
)


def acceptance_dag() -> None:
    """``write`` writes a sovereign Asset (eu-customers: eu-west-1 only); ``read`` reads it, tempted
    towards China; ``read_steered`` may only run on west-general or east-cpu and prefers east-cpu. Both
    follow the data to west-general: never outside its region."""
    with dag_named("fed_asset_acceptance"):
        write = FederatedKubernetesOperator(task_id="write", outlets=[EU_SCORES], **pod_args())
        read = FederatedKubernetesOperator(
            task_id="read", inlets=[EU_SCORES], **pod_args(prefer_region="cn-east-1")
        )
        steered = FederatedKubernetesOperator(
            task_id="read_steered",
            inlets=[EU_SCORES],
            **pod_args(clusters=["west-general", "east-cpu"], prefer_region="cn-east-1"),
        )
        write >> [read, steered]


EU_SCORES = Asset(uri="s3://eu-lake/customers/derived/scores", extra={"fedsched": {"size_gb": 300}})
"""eu-customers by the spec's glob (eu-west-1 only), written by ``fed_asset_acceptance``'s ``write``."""
acceptance_dag()
# Its reader allowed only members outside eu-west-1: no member may run it; it fails, nothing created.
federated_dag("fed_asset_acceptance_excluded", inlets=[EU_SCORES], clusters=["east-cpu", "north-gpu"])


def derived_dag(dag_id: str, *, deferrable: bool) -> None:
    """``derive`` reads EU customers and writes a report no spec entry names, reporting its size from the
    pod; ``read`` reads the report, tempted towards China: the report inherits its input's rule (eu-west-1)
    and its reported size pulls locality to where it was written."""
    with dag_named(dag_id):
        (
            FederatedKubernetesOperator(
                task_id="derive",
                inlets=[CUSTOMERS],
                outlets=[DERIVED_REPORT],
                **pod_args(
                    do_xcom_push=True,
                    deferrable=deferrable,
                    annotations=sim(xcom=json.dumps({"fedsched_size_gb": 120, "rows": 10})),
                ),
            )
            >> FederatedKubernetesOperator(
                task_id="read", inlets=[DERIVED_REPORT], **pod_args(prefer_region="cn-east-1")
            )
        )


DERIVED_REPORT = Asset(uri="s3://scratch/reports/customer-summary")
"""No spec entry names it and its extra says nothing: its rule is only what it inherits."""
derived_dag("fed_asset_derived", deferrable=False)
derived_dag("fed_asset_derived_deferrable", deferrable=True)  # the size read after the pod trigger fires
