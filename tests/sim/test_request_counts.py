"""Per-cluster request counters (``ClusterHandle.request_count`` / ``reset_request_counts``)."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from airflow_provider_fedsched.sim import SimFederation
from tests.sim.conftest import pod_body, unique


def test_counts_by_method_and_path(small_fed: SimFederation, solo: client.CoreV1Api) -> None:
    handle = small_fed["solo"]
    handle.reset_request_counts()
    assert handle.request_count() == 0
    solo.list_node()
    solo.list_node(label_selector="a=b")  # the query string is not part of the path
    name = unique("count")
    solo.create_namespaced_pod("default", pod_body(name))
    solo.read_namespaced_pod(name, "default")
    with pytest.raises(ApiException):
        solo.read_namespaced_pod("missing", "default")  # a 404 was still served
    assert handle.request_count("GET", "/api/v1/nodes") == 2
    assert handle.request_count("get", "/api/v1/nodes") == 2
    assert handle.request_count(path="/api/v1/nodes") == 2
    assert handle.request_count("POST", "/api/v1/namespaces/default/pods") == 1
    assert handle.request_count("GET", "/api/v1/namespaces/default/pods") == 0
    assert handle.request_count("GET", f"/api/v1/namespaces/default/pods/{name}") == 1
    assert handle.request_count("GET", "/api/v1/namespaces/default/pods/*") == 2
    assert handle.request_count(path="/api/v1/namespaces/*") == 3
    assert handle.request_count(path="/api/v1/node") == 0  # exact without a trailing *
    assert handle.request_count("GET") == 4
    assert handle.request_count("DELETE") == 0
    assert handle.request_count() == 5
    assert handle.request_counts()[("GET", "/api/v1/nodes")] == 2
    handle.reset_request_counts()
    assert handle.request_count() == 0
    solo.list_node()
    assert handle.request_count() == 1


def test_clusters_count_separately(fed: SimFederation) -> None:
    east, west = fed["east-cpu"], fed["west-general"]
    east.reset_request_counts()
    west.reset_request_counts()
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=east.url)))
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: api.list_node(), range(8)))
    finally:
        api.api_client.close()
    assert east.request_count("GET", "/api/v1/nodes") == 8
    assert west.request_count() == 0


def test_failed_and_rejected_requests_count_but_control_calls_and_outages_do_not(
    small_fed: SimFederation, solo: client.CoreV1Api
) -> None:
    handle = small_fed["solo"]
    handle.reset_request_counts()
    handle.faults.fail(503, times=1, route=r"/pods", method="POST")
    with pytest.raises(ApiException) as injected:
        solo.create_namespaced_pod("default", pod_body(unique("count")))
    assert injected.value.status == 503
    assert handle.request_count("POST", "/api/v1/namespaces/default/pods") == 1
    # A wrong token: 401, counted.
    bad = client.Configuration(host=handle.url, api_key={"authorization": "Bearer wrong"})
    bad_api = client.CoreV1Api(client.ApiClient(bad))
    with pytest.raises(ApiException) as unauthorized:
        bad_api.list_node()
    bad_api.api_client.close()
    assert unauthorized.value.status == 401
    assert handle.request_count("GET", "/api/v1/nodes") == 1
    # The control endpoint (its own port) never shows up in a cluster's counts.
    request = urllib.request.Request(
        f"{small_fed.control_url}/sim/v1/clusters/solo/faults",
        data=json.dumps({"kind": "clear"}).encode(),
        headers={"Authorization": f"Bearer {handle.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
    assert handle.request_count() == 2
    # While down, nothing is served, so nothing is counted.
    handle.faults.down()
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        solo.list_node(_request_timeout=2)
    handle.faults.up()
    assert handle.request_count() == 2
    solo.list_node()
    assert handle.request_count("GET", "/api/v1/nodes") == 2
