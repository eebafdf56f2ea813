"""The simulator's API contract tests, run against the real kube-apiserver (imported, not copied).

Left out, because they reach into the simulator rather than the API: the 410 test compacts the simulator's
store directly. Left out because the real API server answers otherwise (docs/simulator.md, "Fidelity"):
the binding test (a second Binding without metadata.name is a 400, not a 409) and the patch test (the
PodTopologyLabels admission of v1.36 copies the node's topology.kubernetes.io/region label onto a bound
pod). The 401 test builds a client with no CA; over the test bed's TLS it gets a certificate error
first, so its test-bed form below keeps the CA and checks the same 401.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_provider_fedsched.testbed import TestbedFederation
from tests.sim.test_api_contract import (  # noqa: F401 - collected here, against the test bed
    test_create_defaults_and_server_fields,
    test_discovery_with_and_without_trailing_slash,
    test_errors_are_status_objects,
    test_field_selectors_and_pagination,
    test_label_selector_grammar_used_by_kpo,
    test_priority_classes,
    test_resource_versions_are_monotonic,
    test_watch_ends_at_timeout_and_legacy_path,
    test_watch_resumes_from_resource_version,
    test_watch_sees_live_changes,
)


def test_wrong_token_is_401_over_tls(fed: TestbedFederation) -> None:
    configuration = fed["east-cpu"].cluster.client_config(token="wrong")
    api = client.CoreV1Api(client.ApiClient(configuration))
    with pytest.raises(ApiException) as exc:
        api.list_namespaced_pod("default")
    assert exc.value.status == 401 and json.loads(exc.value.body)["reason"] == "Unauthorized"


def test_tls_verification_stays_on(fed: TestbedFederation) -> None:
    """A client that does not trust the member's CA is refused before any credential is sent."""
    import urllib3

    configuration = client.Configuration()
    configuration.host = fed["east-cpu"].url
    configuration.api_key = {"authorization": f"Bearer {fed['east-cpu'].token}"}
    configuration.retries = 0
    api = client.CoreV1Api(client.ApiClient(configuration))
    with pytest.raises(urllib3.exceptions.MaxRetryError) as exc:
        api.list_namespaced_pod("default")
    assert "CERTIFICATE_VERIFY_FAILED" in str(exc.value)
