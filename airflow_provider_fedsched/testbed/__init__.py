"""Real Kubernetes control planes with kwok nodes, from the simulator's config (see docs/testbed.md)."""

from airflow_provider_fedsched.testbed.binaries import KUBERNETES_VERSION, TestbedUnavailable
from airflow_provider_fedsched.testbed.federation import TestbedFederation
from airflow_provider_fedsched.testbed.handles import TestbedClusterHandle

__all__ = ["KUBERNETES_VERSION", "TestbedClusterHandle", "TestbedFederation", "TestbedUnavailable"]
