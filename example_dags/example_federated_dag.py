"""The demo DAG: six federated tasks that each show one rule of the federation at work.

Run by ``make demo`` against the simulated federation (``fedsched sim up``). The ``sim.fedsched.io/*``
annotations only steer the simulated kubelet (how long a pod runs, what it logs); on real clusters they
are inert.

* ``train_model``: asks for a GPU, so it lands on the GPU pool.
* ``eu_customer_report``: reads sovereign EU data, so it stays in eu-west-1 although cn-east-1 is cheaper.
* ``clickstream_rollup``: reads a 2 TB dataset; moving compute to the data beats paying the egress.
* ``nightly_etl``: its cheapest cluster runs out of quota; it fails over within its allowed regions.
* ``resumable_backfill``: preemptible; evicted mid-run, it resumes from its checkpoint elsewhere.
* ``train_bert``: a 3-worker training Job (2 GPUs per worker, all three start together): the federation
  places the whole gang in the one cluster whose nodes can hold every worker at once.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset
from kubernetes.client import models as k8s

from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator
from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

# The data, as Airflow Assets: the spec's datasets name them (``assets`` patterns), so sovereignty, locality
# and egress follow from inlets and outlets. (``datasets=["eu-customers"]`` still names a dataset directly.)
EU_CUSTOMERS = Asset(uri="s3://eu-lake/customers/2026", name="eu-customers-2026")
EU_REPORT = Asset(uri="s3://eu-lake/customers/reports/daily", name="eu-customer-report")
CLICKSTREAM = Asset(uri="s3://archive/clickstream/2026", name="clickstream-2026")
USER_EVENTS = Asset(uri="s3://cn-lake/user-events/nightly", name="user-events-nightly")


def resources(cpu: str, memory: str, gpu: int = 0) -> k8s.V1ResourceRequirements:
    requests = {"cpu": cpu, "memory": memory}
    limits = {"nvidia.com/gpu": str(gpu)} if gpu else None
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    return k8s.V1ResourceRequirements(requests=requests, limits=limits)


def sim_behaviour(seconds: float, *lines: str) -> dict[str, str]:
    """How the simulated kubelet runs the pod: for how long, and which log lines it prints."""
    return {"sim.fedsched.io/duration": str(seconds), "sim.fedsched.io/logs": "\n".join(lines)}


with DAG(
    dag_id="example_federated",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["fedsched", "example"],
    default_args={"image": "python:3.12-slim", "get_logs": True, "unschedulable_grace_seconds": 0},
) as dag:
    train_model = FederatedKubernetesOperator(
        task_id="train_model",
        cmds=["python", "-m", "train"],
        container_resources=resources("4", "16Gi", gpu=2),
        tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        expected_duration=timedelta(hours=2),
        annotations=sim_behaviour(1, "epoch 1/2 loss=0.71", "epoch 2/2 loss=0.42"),
        do_xcom_push=True,
    )

    eu_customer_report = FederatedKubernetesOperator(
        task_id="eu_customer_report",
        cmds=["python", "-m", "report"],
        container_resources=resources("2", "4Gi"),
        inlets=[EU_CUSTOMERS],
        outlets=[EU_REPORT],  # written in the EU too: an outlet is a dataset as well
        expected_duration=timedelta(minutes=20),
        annotations=sim_behaviour(1, "report written for 1,204 EU customers"),
    )

    clickstream_rollup = FederatedKubernetesOperator(
        task_id="clickstream_rollup",
        cmds=["python", "-m", "rollup"],
        container_resources=resources("2", "8Gi"),
        inlets=[CLICKSTREAM],
        expected_duration=timedelta(minutes=30),
        annotations=sim_behaviour(1, "rolled up 2.0 TB of clickstream in place"),
    )

    nightly_etl = FederatedKubernetesOperator(
        task_id="nightly_etl",
        cmds=["python", "-m", "etl"],
        container_resources=resources("2", "4Gi"),
        inlets=[USER_EVENTS],
        namespace="etl",
        expected_duration=timedelta(minutes=10),
        annotations=sim_behaviour(1, "loaded 48M user events"),
    )

    resumable_backfill = FederatedKubernetesOperator(
        task_id="resumable_backfill",
        cmds=["python", "-m", "backfill"],
        container_resources=resources("2", "4Gi"),
        preemptible=True,
        checkpoint="s3://fedsched-demo/checkpoints/backfill",
        expected_duration=timedelta(minutes=5),
        annotations=sim_behaviour(
            6,
            "attempt ${FEDSCHED_CLUSTER_ATTEMPT} on ${FEDSCHED_CLUSTER}, resume=${FEDSCHED_RESUME}",
            "checkpoint at ${FEDSCHED_CHECKPOINT}",
            "backfill complete",
        ),
    )

    train_bert = FederatedKubernetesJobOperator(
        task_id="train_bert",
        name="train-bert",
        cmds=["python", "-m", "train", "--distributed"],
        container_resources=resources("4", "16Gi", gpu=2),
        tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        parallelism=3,
        completions=3,
        backoff_limit=0,
        job_poll_interval=0.5,
        expected_duration=timedelta(hours=4),
        annotations=sim_behaviour(1, "worker ready: 3/3 in the gang", "epoch 1/1 loss=0.38"),
    )

    nightly_etl >> [train_model, eu_customer_report, clickstream_rollup] >> resumable_backfill
    train_model >> train_bert
