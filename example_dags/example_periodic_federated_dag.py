"""A periodic federated DAG: every hour, roll up user events and refresh a feature table.

Its runs are planned ahead by the planner DAG (``fedsched_planner_dag.py``): when a run starts, each task
first tries the precomputed placement for its logical date, validated against the current snapshots and
every hard rule, and scores afresh when the plan is set aside. The ``fedsched_placement`` XCom says which.
The ``sim.fedsched.io/*`` annotations only steer the simulated kubelet; on real clusters they are inert.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset
from kubernetes.client import models as k8s

from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator


def requests(cpu: str, memory: str) -> k8s.V1ResourceRequirements:
    return k8s.V1ResourceRequirements(requests={"cpu": cpu, "memory": memory})


with DAG(
    dag_id="example_periodic_federated",
    schedule="5 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["fedsched", "example"],
    default_args={"image": "python:3.12-slim", "get_logs": True, "unschedulable_grace_seconds": 0},
) as dag:
    hourly_rollup = FederatedKubernetesOperator(
        task_id="hourly_rollup",
        cmds=["python", "-m", "rollup", "--hour", "{{ logical_date }}"],
        container_resources=requests("1", "2Gi"),
        # sovereign (the spec's user-events: cn-east-1 and cn-north-1 only); datasets=["user-events"] says
        # the same without an Asset
        inlets=[Asset(uri="s3://cn-lake/user-events/hourly", name="user-events-hourly")],
        expected_duration=timedelta(minutes=10),
        annotations={"sim.fedsched.io/duration": "1", "sim.fedsched.io/logs": "rolled up one hour"},
    )

    refresh_features = FederatedKubernetesOperator(
        task_id="refresh_features",
        cmds=["python", "-m", "features"],
        container_resources=requests("2", "4Gi"),
        expected_duration=timedelta(minutes=20),
        annotations={"sim.fedsched.io/duration": "1", "sim.fedsched.io/logs": "features refreshed"},
    )

    hourly_rollup >> refresh_features
