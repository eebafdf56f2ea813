"""Placement in virtual time: replay a workload through the real FederationEngine and every baseline.

No Airflow import. ``replay(federation, policies, settings, workload)`` returns a :class:`ReplayReport`;
``fedsched replay`` (``cli/replay.py``) is the command line.
"""

from airflow_provider_fedsched.replay.run import ReplayReport, parse_policies, replay
from airflow_provider_fedsched.replay.simulator import Settings

__all__ = ["ReplayReport", "Settings", "parse_policies", "replay"]
