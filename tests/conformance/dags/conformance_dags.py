"""Airflow DAGs only the conformance suite needs, built with the operator suite's helpers."""

from __future__ import annotations

from tests.operators.dags.federated_dags import federated_dag, sim

# Least privilege: each runs on east-cpu only, with a connection that lacks one permission.
federated_dag("fed_rbac_create", clusters=["east-cpu"])
federated_dag("fed_rbac_xcom", clusters=["east-cpu"], do_xcom_push=True, annotations=sim(xcom='{"n": 1}'))
