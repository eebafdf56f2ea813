"""Simulated Kubernetes clusters speaking the real Kubernetes HTTP API (see docs/simulator.md)."""

from airflow_provider_fedsched.sim.cluster import SimPortInUse
from airflow_provider_fedsched.sim.config import (
    SimConfig,
    SimConfigError,
    default_config,
    load_config,
    parse_config,
)
from airflow_provider_fedsched.sim.harness import ClusterHandle, SimFederation, SimTimeout, conn_id, wait_for

__all__ = [
    "ClusterHandle",
    "SimConfig",
    "SimConfigError",
    "SimFederation",
    "SimPortInUse",
    "SimTimeout",
    "conn_id",
    "default_config",
    "load_config",
    "parse_config",
    "wait_for",
]
