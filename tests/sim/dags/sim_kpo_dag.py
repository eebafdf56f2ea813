"""Plain KubernetesPodOperator DAGs run against the simulator by tests/sim/test_kpo.py."""

from __future__ import annotations

import json
from datetime import datetime

from airflow.providers.cncf.kubernetes.operators.job import KubernetesDeleteJobOperator, KubernetesJobOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

with DAG("sim_kpo_success", start_date=datetime(2024, 1, 1), schedule=None, catchup=False):
    KubernetesPodOperator(
        task_id="run",
        name="sim-kpo-ok",
        namespace="default",
        kubernetes_conn_id="k8s_east_cpu",
        image="busybox:1.36",
        cmds=["sh", "-c", "echo hello"],
        annotations={
            "sim.fedsched.io/logs": json.dumps(["hello from the sim", "second line"]),
            "sim.fedsched.io/duration": "2",
            "sim.fedsched.io/xcom": json.dumps({"answer": 42}),
        },
        do_xcom_push=True,
        get_logs=True,
        startup_check_interval_seconds=1,
        on_finish_action="delete_pod",
    )

with DAG("sim_kpo_unschedulable", start_date=datetime(2024, 1, 1), schedule=None, catchup=False):
    KubernetesPodOperator(
        task_id="too_big",
        name="sim-kpo-big",
        namespace="default",
        kubernetes_conn_id="k8s_east_cpu",
        image="busybox:1.36",
        container_resources={"requests": {"cpu": "64"}},
        schedule_timeout_seconds=3,
        startup_timeout_seconds=3,
        startup_check_interval_seconds=1,
        get_logs=False,
        retries=0,
    )

with DAG("sim_job_two_workers", start_date=datetime(2024, 1, 1), schedule=None, catchup=False):
    # KubernetesJobOperator as users write it: the simulator's Job controller runs the pods.
    job = KubernetesJobOperator(
        task_id="train",
        name="sim-job",
        namespace="default",
        kubernetes_conn_id="k8s_east_cpu",
        image="busybox:1.36",
        cmds=["sh", "-c", "echo training"],
        annotations={"sim.fedsched.io/logs": json.dumps(["worker says hi"]), "sim.fedsched.io/duration": "2"},
        parallelism=2,
        completions=2,
        backoff_limit=0,
        wait_until_job_complete=True,
        job_poll_interval=0.2,
        get_logs=True,
        startup_check_interval_seconds=1,
    )
    job >> KubernetesDeleteJobOperator(
        task_id="clean_up",
        name="{{ ti.xcom_pull(task_ids='train', key='job_name') }}",
        namespace="default",
        kubernetes_conn_id="k8s_east_cpu",
    )

with DAG("sim_job_deferrable", start_date=datetime(2024, 1, 1), schedule=None, catchup=False):
    KubernetesJobOperator(
        task_id="train_deferred",
        name="sim-job-deferred",
        namespace="default",
        kubernetes_conn_id="k8s_east_cpu",
        image="busybox:1.36",
        annotations={"sim.fedsched.io/duration": "2"},
        parallelism=1,
        completions=1,
        wait_until_job_complete=True,
        deferrable=True,
        job_poll_interval=0.2,
        startup_check_interval_seconds=1,
    )
