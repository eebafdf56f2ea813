"""Reading the XCom sidecar: an answer that is empty or not JSON fails naming the pod, cluster and answer.

The provider's ``PodManager.extract_xcom_json`` (one exec of the sidecar) is replaced by a scripted
answer: what is under test is the federated manager's handling of it, not the exec itself (the operator
tests read real sidecars of simulated pods; the conformance suite, of the test bed's)."""

from __future__ import annotations

import pytest
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager, XComRetrievalError
from kubernetes import client
from kubernetes.client import models as k8s

from airflow_provider_fedsched.kube.pods import FederatedPodManager

POD = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))


def manager(monkeypatch: pytest.MonkeyPatch, answer: str) -> FederatedPodManager:
    monkeypatch.setattr(PodManager, "extract_xcom_json", lambda self, pod: answer)
    core = client.CoreV1Api(client.ApiClient(client.Configuration(host="https://127.0.0.1:1")))
    return FederatedPodManager(core, cluster="east", server="https://127.0.0.1:1")


def test_a_json_answer_and_the_empty_result_marker_are_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert manager(monkeypatch, '{"rows": 7}').extract_xcom_json(POD) == '{"rows": 7}'
    marker = "__airflow_xcom_result_empty__\n"
    assert manager(monkeypatch, marker).extract_xcom_json(POD) == marker


def test_no_answer_fails_naming_the_pod_and_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(XComRetrievalError, match="sidecar of pod default/work-1 in cluster east answered"):
        manager(monkeypatch, "").extract_xcom_json(POD)
