"""Precomputed placements for periodic DAGs, and the idle-capacity forecast they assume.

* :mod:`.runtime`: what the operator calls at run time (:func:`planned_decision`, :func:`forecast_idle`).
* :mod:`.planner`: finds scheduled DAGs with federated tasks, computes and stores their plans.
* :mod:`.dag`: :func:`planner_dag`, the DAG factory that runs the planner on a schedule.
"""

from __future__ import annotations

from airflow_provider_fedsched.plans.runtime import forecast_idle, planned_decision

__all__ = ["forecast_idle", "planned_decision"]
