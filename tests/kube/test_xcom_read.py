"""Reading the XCom sidecar: an exec session that brings back no output is read again, never parsed.

The provider's ``PodManager.extract_xcom_json`` (one exec of the sidecar) is replaced by a scripted
sequence of answers: what is under test is the federated manager's handling of them, not the exec itself
(the operator tests read real sidecars of simulated pods; the conformance suite, of the test bed's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager, XComRetrievalError
from kubernetes import client
from kubernetes.client import models as k8s

from airflow_provider_fedsched.kube.pods import XCOM_READS, FederatedPodManager

POD = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="work-1", namespace="default"))


def manager(monkeypatch: pytest.MonkeyPatch, answers: list[str]) -> tuple[FederatedPodManager, list[str]]:
    left: Iterator[str] = iter(answers)
    read: list[str] = []

    def one_read(self: PodManager, pod: k8s.V1Pod) -> str:
        answer = next(left)
        read.append(answer)
        return answer

    monkeypatch.setattr(PodManager, "extract_xcom_json", one_read)
    core = client.CoreV1Api(client.ApiClient(client.Configuration(host="https://127.0.0.1:1")))
    return FederatedPodManager(core, cluster="east", server="https://127.0.0.1:1"), read


def test_an_empty_answer_is_read_again_and_the_next_answer_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    pods, read = manager(monkeypatch, ["", '{"rows": 7}'])
    assert pods.extract_xcom_json(POD) == '{"rows": 7}'
    assert read == ["", '{"rows": 7}']


def test_the_empty_result_marker_is_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    pods, read = manager(monkeypatch, ["__airflow_xcom_result_empty__\n"])
    assert pods.extract_xcom_json(POD) == "__airflow_xcom_result_empty__\n"
    assert len(read) == 1


def test_no_answer_at_every_read_fails_naming_the_pod_and_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    pods, read = manager(monkeypatch, [""] * XCOM_READS)
    with pytest.raises(XComRetrievalError, match="sidecar of pod default/work-1 in cluster east answered"):
        pods.extract_xcom_json(POD)
    assert len(read) == XCOM_READS
