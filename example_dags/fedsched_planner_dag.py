"""The fedsched planner: every 30 minutes, precompute placements for the next 24 hours of runs of every
scheduled DAG that uses FederatedKubernetesOperator (see docs/plans.md)."""

from __future__ import annotations

from datetime import timedelta

from airflow_provider_fedsched.plans.dag import planner_dag

dag = planner_dag(dag_id="fedsched_planner", schedule="*/30 * * * *", horizon=timedelta(hours=24))
