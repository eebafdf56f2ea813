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
                },
            },
        },
    }
