"""Hostile input: label keys and values, wherever a user gives them.

Kubernetes takes a label value of at most 63 characters matching
``(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`` and a key that is an optional DNS-subdomain prefix (at most
253 characters) and ``/``, then a name as a value but not empty. A cluster's labels and taints in the spec,
a task's ``cluster_selector``, ``node_selector`` and tolerations, and the labels of its pod or Job are
checked by these rules: a ``SpecError`` naming the field, a ``FederationError`` before anything is reserved
or created, exit 2 on the command line; never a 422 from the API server after the placement.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes.client import models as k8s

from airflow_provider_fedsched.federation import SpecError, load_spec
from airflow_provider_fedsched.federation.limits import label_key_problem, label_value_problem
from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.state import MemoryStateBackend
from tests.hostile.harness import check, cli_outcome, raised, run_bounded
from tests.hostile.test_files_and_cli import SNAPSHOTS, SPEC

LONG = "x" * 64
# (id, label key, label value, culprit): every surface below is handed {key: value}
LABEL_CASES: list[tuple[str, str, str, str]] = [
    ("value of 64 characters", "gpu", LONG, "not a Kubernetes label value"),
    ("value with a space", "gpu", "a 100", "'a 100' is not a Kubernetes label value"),
    ("value beginning with '-'", "gpu", "-a100", "'-a100'"),
    ("value ending with '.'", "gpu", "a100.", "'a100.'"),
    ("value with a slash", "gpu", "nvidia/a100", "'nvidia/a100'"),
    ("value with a newline", "gpu", "a\nb", "not a Kubernetes label value"),
    ("non-ASCII value", "gpu", "ä100", "'ä100'"),
    ("key of 64 characters", LONG, "a", "its name is not 1..63 characters"),
    ("empty key", "", "a", "label key ''"),
    ("key with a space", "gpu type", "a", "label key 'gpu type'"),
    ("upper-case prefix", "Example.com/gpu", "a", "its prefix is not a DNS subdomain"),
    ("empty prefix", "/gpu", "a", "its prefix is not a DNS subdomain"),
    ("two slashes", "a/b/c", "a", "label key 'a/b/c'"),
    ("prefix of 254 characters", "a" * 254 + "/gpu", "a", "its prefix is not a DNS subdomain"),
    ("empty name after a prefix", "example.com/", "a", "its name is not 1..63 characters"),
]
IDS = [case[0] for case in LABEL_CASES]
GOOD = [("gpu", ""), ("example.com/gpu", "a100"), ("a" * 63, "b" * 63), ("a.b_c-d", "X.y_z-9")]


def test_the_rules_are_kubernetes_rules() -> None:
    for key, value in GOOD:
        assert label_key_problem(key) is None and label_value_problem(value) is None, (key, value)
    assert label_key_problem("a" * 253 + "/gpu") is None
    for _, key, value, _ in LABEL_CASES:
        assert label_key_problem(key) is not None or label_value_problem(value) is not None


def _spec_with(cluster: dict[str, Any]) -> str:
    document = {"name": "labels", "clusters": [{"name": "a", "conn_id": "k", "region": "r", **cluster}]}
    return yaml.safe_dump(document, allow_unicode=True)


@pytest.mark.parametrize(("key", "value", "culprit"), [c[1:] for c in LABEL_CASES], ids=IDS)
def test_a_cluster_label_in_the_spec(key: str, value: str, culprit: str) -> None:
    text = _spec_with({"labels": {key: value}})
    outcome = run_bounded(lambda: raised(lambda: load_spec(text), SpecError))
    check(*outcome, "raised", "SpecError", f"clusters[0].labels.{key}: ")
    assert culprit in outcome[0].message


@pytest.mark.parametrize(("key", "value", "culprit"), [c[1:] for c in LABEL_CASES], ids=IDS)
def test_a_cluster_taint_in_the_spec(key: str, value: str, culprit: str) -> None:
    text = _spec_with({"taints": [{"key": key, "value": value, "effect": "NoSchedule"}]})
    field = "key" if label_key_problem(key) else "value"
    outcome = run_bounded(lambda: raised(lambda: load_spec(text), SpecError))
    check(*outcome, "raised", "SpecError", f"clusters[0].taints[0].{field}: ")
    assert culprit in outcome[0].message


@pytest.fixture(scope="module")
def operators() -> dict[str, Any]:
    from airflow_provider_fedsched.operators.federated_job import FederatedKubernetesJobOperator
    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    return {"pod": FederatedKubernetesOperator, "job": FederatedKubernetesJobOperator}


@pytest.mark.parametrize(
    "argument", ["cluster_selector", "labels", "node_selector", "tolerations", "full_pod_spec"]
)
@pytest.mark.parametrize(("key", "value", "culprit"), [c[1:] for c in LABEL_CASES], ids=IDS)
def test_pod_and_job_labels_are_refused_before_anything_is_reserved(
    operators: dict[str, Any], argument: str, key: str, value: str, culprit: str
) -> None:
    """The task's cluster selector, its pod's labels (``labels=``, or a ``full_pod_spec``'s, also the
    Job's), node selector and tolerations: built as a DAG file builds them (one bad task never breaks its
    file's import), refused at ``prepare``, before the placement reserves anything."""
    given: dict[str, Any] = {
        "cluster_selector": {"cluster_selector": {key: value}},
        "labels": {"labels": {key: value}},
        "node_selector": {"node_selector": {key: value}},
        "tolerations": {"tolerations": [k8s.V1Toleration(key=key, operator="Equal", value=value)]},
        "full_pod_spec": {"full_pod_spec": k8s.V1Pod(metadata=k8s.V1ObjectMeta(labels={key: value}))},
    }[argument]
    field = {"full_pod_spec": "labels", "tolerations": "tolerations[0]"}.get(argument, argument)
    for kind, operator_class in operators.items():
        backend = MemoryStateBackend()
        operator = operator_class(task_id="t", image="busybox", federation=SPEC, **given)

        def prepare(operator: Any = operator, backend: Any = backend) -> Any:
            return operator.prepare(None, FederationHook(SPEC, state=backend))

        outcome = run_bounded(lambda prepare=prepare: raised(prepare, Exception))
        check(*outcome, "raised", "FederationError", field)
        assert culprit in outcome[0].message or (key == "" and argument == "tolerations"), (kind, outcome)
        assert backend.keys("") == [], kind  # nothing reserved, no snapshot taken


@pytest.mark.parametrize("option", ["--cluster-selector", "--node-selector"])
@pytest.mark.parametrize(
    ("key", "value", "culprit"), [c[1:] for c in LABEL_CASES if c[1]], ids=IDS[:8] + IDS[9:]
)
def test_place_selectors_exit_2_naming_the_option(
    tmp_path: Any, option: str, key: str, value: str, culprit: str
) -> None:
    spec, snapshots = tmp_path / "spec.yaml", tmp_path / "snapshots.yaml"
    spec.write_text(SPEC)
    snapshots.write_text(SNAPSHOTS)
    argv = ["place", "--federation", str(spec), "--snapshots", str(snapshots), option, f"{key}={value}"]
    outcome = run_bounded(lambda: cli_outcome(argv))
    check(*outcome, "exit", 2, f"fedsched place: error: {option}: ")
    assert culprit in outcome[0].message


@pytest.mark.parametrize(("key", "value", "culprit"), [c[1:] for c in LABEL_CASES], ids=IDS)
def test_simulator_cluster_and_node_pool_labels(key: str, value: str, culprit: str) -> None:
    from airflow_provider_fedsched.sim.config import SimConfigError, parse_config

    for where, cluster in (
        ("clusters[0].labels", {"name": "a", "labels": {key: value}}),
        ("clusters[0].node_pools[0].labels", {"name": "a", "node_pools": [{"labels": {key: value}}]}),
    ):
        outcome = run_bounded(
            lambda cluster=cluster: raised(lambda: parse_config({"clusters": [cluster]}), SimConfigError)
        )
        check(*outcome, "raised", "SimConfigError", f"{where}.{key}: ")
        assert culprit in outcome[0].message
