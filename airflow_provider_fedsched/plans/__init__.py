"""Precomputed placements for periodic DAGs.

* :mod:`.planner`: finds scheduled DAGs with federated tasks, computes and stores their plans through the
  federation hook (which also serves them to tasks at run time: ``FederationHook.planned_decision``).
* :mod:`.dag`: :func:`planner_dag`, the DAG factory that runs the planner on a schedule.
"""
