"""Airflow DAGs of the scenarios only the test bed runs (a member connection with less RBAC).

Bound to module names: a DAG made by the imported helper is registered with the helper's module.
"""

from __future__ import annotations

from tests.operators.dags.federated_dags import federated_dag

# Least privilege: only east-cpu may run it, and it gives up quickly when that member cannot.
east_only = federated_dag("fed_east_only", clusters=["east-cpu"], wait_timeout=3)
