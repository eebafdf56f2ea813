"""Pod triggers that fail after their first look at the pod (test_contract.py, "trigger failure"): one
errors, as a bug or a lost triggerer dependency does; one fires an event the operator cannot read, as a
trigger of another version or a damaged metadata database row would. The Kubernetes client is the real one."""

from __future__ import annotations

from airflow.triggers.base import TriggerEvent

from airflow_provider_fedsched.triggers.pod import FederatedPodTrigger


class CrashingPodTrigger(FederatedPodTrigger):
    async def _watch(self) -> TriggerEvent:
        api, _ = await self._api()
        await api.read_namespaced_pod(self.pod_name, self.pod_namespace)  # the pod is there
        raise RuntimeError("the trigger broke while watching")


class GarbledEventTrigger(FederatedPodTrigger):
    async def _watch(self) -> TriggerEvent:
        api, _ = await self._api()
        await api.read_namespaced_pod(self.pod_name, self.pod_namespace)  # the pod is there
        self._fired = True
        return TriggerEvent({"status": "finished", "name": self.pod_name, "message": "all good"})
