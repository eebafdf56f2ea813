"""A pod trigger that errors after its first look at the pod: what a bug or a lost triggerer dependency
does (test_contract.py, "trigger failure"). The Kubernetes client it uses is the real one."""

from __future__ import annotations

from airflow.triggers.base import TriggerEvent

from airflow_provider_fedsched.triggers.pod import FederatedPodTrigger


class CrashingPodTrigger(FederatedPodTrigger):
    async def _watch(self) -> TriggerEvent:
        api, _ = await self._api()
        await api.read_namespaced_pod(self.pod_name, self.pod_namespace)  # the pod is there
        raise RuntimeError("the trigger broke while watching")
