"""What Airflow's ProvidersManager reads through the ``apache_airflow_provider`` entry point: every surface
of the provider, declared the way the cncf.kubernetes provider declares its own (and validated by
Airflow against its provider-info schema).

Member clusters are Airflow connections of cncf.kubernetes' ``kubernetes`` type, which that provider
declares; this one adds no connection type (declaring ``kubernetes`` again would make every Airflow
process warn that it is registered twice). The operator defers to its own ``FederatedPodTrigger``
(``triggers/pod.py``), which builds its client from the member's connection alone, and waits for a compliant
cluster with its ``FederationWaitTrigger`` (``triggers/wait.py``).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched import __version__

INTEGRATION = "Kubernetes federation"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-fedsched",
        "name": "Federated Kubernetes scheduling",
        "description": "Run KubernetesPodOperator tasks across a federation of Kubernetes clusters: "
        "placement by a scoring engine, failover between clusters, data sovereignty.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://kubernetes.io/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                # The two operators; a try's states and transitions (try_states) are theirs.
                "python-modules": [
                    "airflow_provider_fedsched.operators.federated_pod",
                    "airflow_provider_fedsched.operators.federated_job",
                    "airflow_provider_fedsched.operators.try_states",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_fedsched.hooks.federation"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_fedsched.triggers.pod",
                    "airflow_provider_fedsched.triggers.wait",
                ],
            }
        ],
        "connection-types": [],
        "extra-links": [
            "airflow_provider_fedsched.operators.links.FederatedClusterLink",
            "airflow_provider_fedsched.operators.links.ClusterDashboardLink",
        ],
        "plugins": [
            {"name": "fedsched", "plugin-class": "airflow_provider_fedsched.plugins.FederationPlugin"},
        ],
        "config": {
            "fedsched": {
                "description": "Federation scheduling for FederatedKubernetesOperator.",
                "options": {
                    "federation_spec": {
                        "description": "Default federation spec: a path to a YAML file, or YAML text.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/airflow/federation.yaml",
                        "default": "",
                    },
                    "min_deferral_seconds": {
                        "description": "No deferral of a federated task (waiting for a cluster, watching "
                        "its pod) resumes sooner: a shorter one races the scheduler and loses the task.",
                        "version_added": "0.2.0",
                        "type": "float",
                        "example": "15",
                        "default": "15",
                    },
                    "wait_check_seconds": {
                        "description": "While a federated task waits for a compliant cluster, every "
                        "this many seconds it looks at the federation's shared state (snapshot times, "
                        "placements ended) and decides again when its candidate clusters show news.",
                        "version_added": "0.2.0",
                        "type": "float",
                        "example": "3",
                        "default": "3",
                    },
                    "janitor_interval_seconds": {
                        "description": "Every this many seconds the triggerer deletes the pods written "
                        "down in member clusters of the configured federation that answer again (a try "
                        "that gave up on a silent cluster leaves its pod to be deleted later). 0 turns "
                        "it off.",
                        "version_added": "0.2.0",
                        "type": "float",
                        "example": "60",
                        "default": "60",
                    },
                    "placement_ledger": {
                        "description": "Hold each placement in the chosen member cluster's ledger (a "
                        "coordination.k8s.io Lease changed by compare-and-set), so that reservations hold "
                        "across worker processes and hosts. Needs get/create/update on leases in the "
                        "member's namespace; without it, reservations live in Airflow Variables only.",
                        "version_added": "0.2.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "True",
                    },
                },
            },
        },
    }
