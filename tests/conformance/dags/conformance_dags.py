"""DAGs only the conformance suite needs, built with the operator suite's helpers."""

from __future__ import annotations

from kubernetes.client import models as k8s

from tests.operators.dags.federated_dags import federated_dag, sim

# The node's kubelet stops answering: the taint manager evicts the pod 2 s after the node is tainted.
SHORT_UNREACHABLE = [
    k8s.V1Toleration(
        key=f"node.kubernetes.io/{t}", operator="Exists", effect="NoExecute", toleration_seconds=2
    )
    for t in ("unreachable", "not-ready")
]

federated_dag(
    "fed_not_ready_resumes",
    preemptible=True,
    checkpoint="s3://bucket/ckpt",
    tolerations=SHORT_UNREACHABLE,
    annotations=sim(duration=60, logs=["attempt ${FEDSCHED_CLUSTER_ATTEMPT} resume=${FEDSCHED_RESUME}"]),
)

# Least privilege: each runs on east-cpu only, with a connection that lacks one permission.
federated_dag("fed_rbac_create", clusters=["east-cpu"])
federated_dag("fed_rbac_xcom", clusters=["east-cpu"], do_xcom_push=True, annotations=sim(xcom='{"n": 1}'))
