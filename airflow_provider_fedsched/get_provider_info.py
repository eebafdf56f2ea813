"""What Airflow's ProvidersManager reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_provider_fedsched import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-fedsched",
        "name": "Federated Kubernetes scheduling",
        "description": "Run KubernetesPodOperator tasks across a federation of Kubernetes clusters: "
        "placement by a scoring engine, failover between clusters, data sovereignty.",
        "versions": [__version__],
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
