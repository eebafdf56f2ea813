"""Hostile input, table-driven: operator arguments, pod resources, member connections and kubeconfigs,
values read back from shared state, and the HTTP query parameters of the Federation API.

Each case asserts the exception type (``FederationError`` at construction, before anything is reserved or
created; ``ClusterAccessError`` naming cluster and connection), the log line naming a corrupted stored key,
or the HTTP status, with the culprit named, no traceback, under 2 s and bounded memory.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_fedsched.federation import SpecError, TaskRequest, load_spec
from airflow_provider_fedsched.kube.access import ClusterAccessError, access_from_extras
from airflow_provider_fedsched.state import FederationState, MemoryStateBackend
from airflow_provider_fedsched.state.base import forget_logged
from tests.hostile.harness import Outcome, check, raised, run_bounded
from tests.hostile.test_files_and_cli import ALIAS_BOMB, SPEC

# -- operator arguments ----------------------------------------------------------------------------------
# (id, arguments, culprit): FederatedKubernetesOperator(...) raises FederationError naming the argument
OPERATOR_CASES: list[tuple[str, dict[str, Any], str]] = [
    ('max_cluster_attempts="3"', {"max_cluster_attempts": "3"}, "max_cluster_attempts"),
    ("max_cluster_attempts=0", {"max_cluster_attempts": 0}, "max_cluster_attempts"),
    ("max_cluster_attempts=1.5", {"max_cluster_attempts": 1.5}, "max_cluster_attempts"),
    ("max_cluster_attempts=True", {"max_cluster_attempts": True}, "max_cluster_attempts"),
    ('policy="cost"', {"policy": "cost"}, "policy"),
    ('policy=["cost"]', {"policy": ["cost"]}, "policy"),
    ("wait_timeout=nan", {"wait_timeout": math.nan}, "wait_timeout"),
    ("wait_timeout=inf", {"wait_timeout": math.inf}, "wait_timeout"),
    ("wait_timeout=-1", {"wait_timeout": -1}, "wait_timeout"),
    ('wait_timeout="30"', {"wait_timeout": "30"}, "wait_timeout"),
    ("wait_timeout=1e300", {"wait_timeout": 1e300}, "wait_timeout"),
    ("wait_timeout=timedelta(days=99999)", {"wait_timeout": timedelta(days=99999)}, "wait_timeout"),
    (
        "unschedulable_grace_seconds=nan",
        {"unschedulable_grace_seconds": math.nan},
        "unschedulable_grace_seconds",
    ),
    (
        "unschedulable_grace_seconds=inf",
        {"unschedulable_grace_seconds": math.inf},
        "unschedulable_grace_seconds",
    ),
    ("unreachable_grace=nan", {"unreachable_grace": math.nan}, "unreachable_grace"),
    ("expected_duration=nan", {"expected_duration": math.nan}, "expected_duration"),
    ('datasets="eu-customers"', {"datasets": "eu-customers"}, "datasets"),
    ("datasets=[1]", {"datasets": [1]}, "datasets[0]"),
    ('datasets=[""]', {"datasets": [""]}, "datasets[0]"),
    ('clusters="eu-a"', {"clusters": "eu-a"}, "clusters"),
    ("clusters=[]", {"clusters": []}, "clusters"),
    ('preemptible="yes"', {"preemptible": "yes"}, "preemptible"),
    ('cluster_selector="gpu"', {"cluster_selector": "gpu"}, "cluster_selector"),
    ("cluster_selector={gpu: 1}", {"cluster_selector": {"gpu": 1}}, "cluster_selector"),
    ("prefer_region=5", {"prefer_region": 5}, "prefer_region"),
    ("checkpoint=5", {"checkpoint": 5}, "checkpoint"),
]


@pytest.fixture(scope="module")
def operator_class() -> Any:
    from airflow_provider_fedsched.operators.federated_pod import FederatedKubernetesOperator

    return FederatedKubernetesOperator


@pytest.mark.parametrize(
    ("arguments", "culprit"), [case[1:] for case in OPERATOR_CASES], ids=[c[0] for c in OPERATOR_CASES]
)
def test_bad_operator_argument_is_a_federation_error_before_anything_is_reserved(
    operator_class: Any, arguments: dict[str, Any], culprit: str
) -> None:
    """Built as a DAG file builds it (one bad task never breaks its file's import), then prepared as a try
    starts: the argument check comes before any member is resolved, reserved or created."""
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.operators.arguments import FederationError

    backend = MemoryStateBackend()
    hook = FederationHook(SPEC, state=backend)
    operator = operator_class(task_id="hostile", image="busybox", federation=SPEC, **arguments)

    def prepare() -> Any:
        return operator.prepare(None, hook)

    check(*run_bounded(lambda: raised(prepare, FederationError)), "raised", "FederationError", culprit)
    assert backend.keys("") == []  # nothing reserved, no snapshot taken


def test_a_lone_string_is_never_split_into_letters(operator_class: Any) -> None:
    operator = operator_class(
        task_id="templated", image="busybox", federation=SPEC, datasets="{{ params.d }}"
    )
    assert operator.datasets == "{{ params.d }}"  # rendered first, checked in prepare()


# (id, policy overrides, culprit): checked against the spec in prepare(), before any reservation
POLICY_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("weights.cost=1e308", {"weights": {"cost": 1e308}}, "weights.cost"),
    ("cooldown_seconds=nan", {"cooldown_seconds": math.nan}, "cooldown_seconds"),
    ("unknown policy key", {"colour": "blue"}, "colour"),
]


@pytest.mark.parametrize(
    ("policy", "culprit"), [c[1:] for c in POLICY_CASES], ids=[c[0] for c in POLICY_CASES]
)
def test_bad_policy_override_is_a_federation_error(policy: dict[str, Any], culprit: str) -> None:
    from airflow_provider_fedsched.operators.arguments import check_arguments

    spec = load_spec(SPEC)

    def call() -> Any:
        return check_arguments(
            spec,
            conflicting=[],
            max_cluster_attempts=3,
            durations={},
            clusters=None,
            datasets=[],
            prefer_region=None,
            prefer_group=None,
            cluster_selector={},
            policy=policy,
        )

    check(*run_bounded(lambda: raised(call, Exception)), "raised", "FederationError", culprit)


def _pod(resources: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "base", "image": "busybox", "resources": resources or {}}
    return {"containers": [container], **spec}


# (id, pod spec, culprit): TaskRequest.from_pod_spec (what prepare() calls) raises SpecError
POD_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("cpu 1e999999999", _pod({"requests": {"cpu": "1e999999999"}}), "cpu"),
    ('cpu "lots"', _pod({"requests": {"cpu": "lots"}}), "cpu"),
    ("memory 5000 digits", _pod({"limits": {"memory": "9" * 5000}}), "memory"),
    ("cpu negative", _pod({"requests": {"cpu": "-1"}}), "cpu"),
    ('resources "lots"', _pod("lots"), "request.resources"),  # type: ignore[arg-type]
    ('toleration operator "exists"', _pod(tolerations=[{"key": "a", "operator": "exists"}]), "operator"),
    ("toleration effect Never", _pod(tolerations=[{"key": "a", "effect": "Never"}]), "effect"),
]


@pytest.mark.parametrize(("pod", "culprit"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES])
def test_bad_pod_resources_are_a_spec_error_naming_the_field(pod: dict[str, Any], culprit: str) -> None:
    outcome = run_bounded(lambda: raised(lambda: TaskRequest.from_pod_spec(pod), SpecError))
    check(*outcome, "raised", "SpecError", culprit)


# -- member connections and kubeconfigs ------------------------------------------------------------------
def kubeconfig(**cluster: Any) -> dict[str, Any]:
    return {
        "clusters": [{"name": "a", "cluster": {"server": "https://127.0.0.1:1", **cluster}}],
        "contexts": [{"name": "a", "context": {"cluster": "a", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "s3cr3t-token"}}],
        "current-context": "a",
    }


GOOD = json.dumps(kubeconfig())
# (id, connection extras, culprit): access_from_extras raises ClusterAccessError naming cluster + connection
KUBECONFIG_CASES: list[tuple[str, dict[str, Any], str]] = [
    ('contexts: "y"', {"kube_config": GOOD.replace('"contexts": [', '"contexts": "y", "x": [')}, "contexts"),
    ("alias bomb", {"kube_config": ALIAS_BOMB}, "YAML nodes"),
    (
        "duplicate key",
        {"kube_config": "current-context: a\ncurrent-context: b\n"},
        "current-context: duplicate",
    ),
    ("no clusters", {"kube_config": json.dumps({**kubeconfig(), "clusters": []})}, "clusters"),
    (
        "unknown cluster",
        {"kube_config": GOOD.replace('"cluster": "a", "user"', '"cluster": "z", "user"')},
        "unknown cluster 'z'",
    ),
    (
        "unknown current-context",
        {"kube_config": json.dumps({**kubeconfig(), "current-context": "q"})},
        "current-context",
    ),
    ("no server", {"kube_config": GOOD.replace('"server": "https://127.0.0.1:1"', '"server": ""')}, "server"),
    (
        'insecure-skip-tls-verify: "yes"',
        {"kube_config": json.dumps(kubeconfig(**{"insecure-skip-tls-verify": "yes"}))},
        "insecure-skip-tls-verify",
    ),
    ("kube_config_path /dev/zero", {"kube_config_path": "/dev/zero"}, "character device"),
    ("kube_config_path a directory", {"kube_config_path": "/"}, "directory"),
    ("not a mapping", {"kube_config": "[1, 2]"}, "mapping"),
]


@pytest.mark.parametrize(
    ("extras", "culprit"), [c[1:] for c in KUBECONFIG_CASES], ids=[c[0] for c in KUBECONFIG_CASES]
)
def test_bad_member_connection_names_cluster_and_connection(extras: dict[str, Any], culprit: str) -> None:
    def resolve() -> Any:
        return access_from_extras("eu-a", "k8s_eu_a", "kubernetes", extras, None)

    outcome, elapsed, peak = run_bounded(lambda: raised(resolve, ClusterAccessError))
    check(outcome, elapsed, peak, "raised", "ClusterAccessError", culprit)
    assert outcome.message.startswith("cluster 'eu-a' (connection 'k8s_eu_a'): ")
    assert "s3cr3t-token" not in outcome.message


# (id, the connection's extra as text, culprit): the hook's lookup raises MalformedConnection naming it
EXTRA_CASES: list[tuple[str, str, str]] = [
    ("not JSON", "{not json", "extra is not valid JSON"),
    ("a list", "[1, 2]", "extra must be a JSON object, got list"),
    ("a string", '"kube_config"', "extra must be a JSON object, got str"),
    ("nested too deeply", "[" * 100_000 + "]" * 100_000, "extra"),
    ("huge integer", "1" * 5000, "extra is not valid JSON"),
]


@pytest.mark.parametrize(("extra", "culprit"), [c[1:] for c in EXTRA_CASES], ids=[c[0] for c in EXTRA_CASES])
def test_a_member_connection_extra_that_is_no_json_object_is_named(
    extra: str, culprit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read as Airflow reads it (an ``AIRFLOW_CONN_*`` variable), before Airflow reads it as no extras."""
    from airflow_provider_fedsched.hooks.federation import _access_from_connection
    from airflow_provider_fedsched.kube.access import MalformedConnection

    monkeypatch.setenv("AIRFLOW_CONN_K8S_EU_A", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    outcome, elapsed, peak = run_bounded(
        lambda: raised(lambda: _access_from_connection("eu-a", "k8s_eu_a", None), MalformedConnection)
    )
    check(outcome, elapsed, peak, "raised", "MalformedConnection", culprit)
    assert outcome.message.startswith("cluster 'eu-a' (connection 'k8s_eu_a'): ")


def test_a_connection_extra_is_bounded_before_it_is_parsed() -> None:
    """Beyond an environment variable's size (Linux: 128 KiB), as a secrets backend or a database holds."""
    from airflow_provider_fedsched.validation.connection import MAX_EXTRA_BYTES, extra_problem

    extra = '{"a": "' + "x" * MAX_EXTRA_BYTES + '"}'
    outcome, elapsed, peak = run_bounded(lambda: Outcome("raised", None, str(extra_problem(extra))))
    check(outcome, elapsed, peak, "raised", None, f"connection extra is {len(extra):,} characters; at most")


@pytest.mark.parametrize(
    ("extras", "reason"),
    [
        (
            {"kube_config": json.dumps(kubeconfig(**{"insecure-skip-tls-verify": True}))},
            "insecure-skip-tls-verify",
        ),
        ({"kube_config": GOOD, "disable_verify_ssl": True}, "disable_verify_ssl"),
    ],
    ids=["insecure-skip-tls-verify", "disable_verify_ssl"],
)
def test_tls_verification_off_warns_naming_the_cluster_and_holds_for_every_client(
    extras: dict[str, Any], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_provider_fedsched.kube.clients import run_in_background, sync_api_client

    with caplog.at_level(logging.WARNING):
        access = access_from_extras(f"tls-{reason}", "k8s_tls", "kubernetes", extras, None)
    warnings = [r.getMessage() for r in caplog.records if f"cluster tls-{reason}" in r.getMessage()]
    assert len(warnings) == 1 and reason in warnings[0], caplog.text
    assert access.verify_ssl is False
    assert sync_api_client(access).configuration.verify_ssl is False  # the pod's own client
    assert run_in_background(access.async_configuration(), timeout=10).verify_ssl is False  # sensing, trigger


def test_tls_verification_stays_on_by_default() -> None:
    access = access_from_extras("tls-default", "k8s_tls", "kubernetes", {"kube_config": GOOD}, None)
    assert access.verify_ssl is True


# -- values read back from shared state -------------------------------------------------------------------
PREFIX = "fedsched/hostile"
# (id, key, stored value, read): a corrupted value is logged once with its key and read as absent
STORED_CASES: list[tuple[str, str, Any, Callable[[FederationState], Any]]] = [
    (
        "cooldown until garbage",
        f"{PREFIX}/cooldown/eu-a",
        {"until": "soon", "reason": "x"},
        lambda s: s.cooldowns.in_force(["eu-a"], _now()),
    ),
    (
        "cooldown until 9999",
        f"{PREFIX}/cooldown/eu-a",
        {"until": "9999-12-31T23:59:59+00:00"},
        lambda s: s.cooldowns.get("eu-a", _now()),
    ),
    ("cooldown a list", f"{PREFIX}/cooldown/eu-a", [1, 2], lambda s: s.cooldowns.details("eu-a", _now())),
    ("cooldown a number", f"{PREFIX}/cooldown/eu-a", 7, lambda s: s.cooldowns.get("eu-a", _now())),
    (
        "reservation cpu lots",
        f"{PREFIX}/reservation/eu-a/p1",
        {"requests": {"cpu": "lots"}, "at": "2025-06-01T08:00:00+00:00"},
        lambda s: s.reservations.pending({}, _now()),
    ),
    (
        "reservation cpu 2^70",
        f"{PREFIX}/reservation/eu-a/p1",
        {"requests": {"cpu": 2**70}, "at": "2025-06-01T08:00:00+00:00"},
        lambda s: s.reservations.pending({}, _now()),
    ),
    ("freed at garbage", f"{PREFIX}/freed-index", {"eu-a": "soon"}, lambda s: s.reservations.freed(["eu-a"])),
    ("freed a list", f"{PREFIX}/freed-index", [1, 2], lambda s: s.reservations.freed(["eu-a"])),
    ("snapshot not a snapshot", f"{PREFIX}/snapshot/eu-a", {"cluster": 5}, lambda s: s.snapshots.get("eu-a")),
    (
        "snapshot nested 10,000 deep",
        f"{PREFIX}/snapshot/eu-a",
        "[" * 10_000 + "]" * 10_000,
        lambda s: s.snapshots.get("eu-a"),
    ),
    (
        "lease until garbage",
        f"{PREFIX}/lease/eu-a",
        {"owner": "other", "until": "never"},
        lambda s: (
            None if s.leases.claim(["eu-a"], "me", _now(), timedelta(seconds=5)) == ["eu-a"] else "lost"
        ),
    ),
    (
        "orphan without pod",
        f"{PREFIX}/orphan/eu-a/ns.p",
        {"namespace": "ns"},
        lambda s: s.orphans.of("eu-a") or None,
    ),
    (
        "orphan of kind vm",
        f"{PREFIX}/orphan/eu-a/vm:ns.p",
        {"namespace": "ns", "pod": "p", "kind": "vm"},
        lambda s: [n for names in s.orphans.by_kind("eu-a").values() for n in names],
    ),
    (
        "deferred without dag_id",
        f"{PREFIX}/deferred/eu-a/ns.p",
        {"namespace": "ns", "pod": "p", "run_id": "r", "task_id": "t", "map_index": -1, "since": 1.0},
        lambda s: s.deferred.of("eu-a"),
    ),
    (
        "deferred map_index true",
        f"{PREFIX}/deferred/eu-a/ns.p",
        {
            "namespace": "ns",
            "pod": "p",
            "dag_id": "d",
            "run_id": "r",
            "task_id": "t",
            "map_index": True,
            "since": 1.0,
        },
        lambda s: s.deferred.get("eu-a", "ns", "p"),
    ),
    (
        "swept phase Failed",
        f"{PREFIX}/swept/eu-a/ns.p",
        {"phase": "Failed"},
        lambda s: s.orphans.was_swept_succeeded("eu-a", "ns", "p") or None,
    ),
    (
        "quota limits cpu lots",
        f"{PREFIX}/quota-limits/eu-a",
        {"ns": {"cpu": "lots"}},
        lambda s: s.quota_limits.get("eu-a"),
    ),
    (
        "quota limits a list",
        f"{PREFIX}/quota-limits/eu-a",
        {"ns": [1, 2]},
        lambda s: s.quota_limits.get("eu-a"),
    ),
    (
        "history sample without at",
        f"{PREFIX}/history-outcome/eu-a/0001",
        {"outcome": "succeeded"},
        lambda s: s.history.samples("eu-a", "outcome"),
    ),
    (
        "plan not a plan",
        f"{PREFIX}/plan/d/t/20250601T080000.000000Z",
        {"clusters": "nonsense"},
        lambda s: s.plans.all(),
    ),
    (
        "forecast models a list",
        f"{PREFIX}/forecast-models",
        [1, 2],
        lambda s: s.forecasts.get_models(),
    ),
    (
        "lease owner a number",
        f"{PREFIX}/lease/eu-a",
        {"owner": 5, "until": "2099-01-01T00:00:00Z"},
        lambda s: (
            None if s.leases.claim(["eu-a"], "me", _now(), timedelta(seconds=5)) == ["eu-a"] else "lost"
        ),
    ),
]


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime(2025, 6, 1, 8, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "value", "read"), [c[1:] for c in STORED_CASES], ids=[c[0] for c in STORED_CASES]
)
def test_corrupted_stored_value_is_logged_once_with_its_key_and_read_as_absent(
    key: str, value: Any, read: Callable[[FederationState], Any], caplog: pytest.LogCaptureFixture
) -> None:
    forget_logged()
    backend = MemoryStateBackend()
    backend.set(key, value)
    state = FederationState(backend, "hostile")

    def twice() -> Outcome:
        with caplog.at_level(logging.WARNING):
            results = [read(state), read(state)]
        lines = [r.getMessage() for r in caplog.records if key in r.getMessage()]
        absent = all(result in (None, {}, []) for result in results)
        return Outcome(
            "read", "absent" if absent else results, "\n".join(lines) if len(lines) == 1 else str(lines)
        )

    check(*run_bounded(twice), "read", "absent", f"Ignoring unreadable stored value under {key}")


@pytest.mark.parametrize(
    "allocatable",
    [{"cpu": "1e999999999"}, {"cpu": "lots"}, {"memory": "9" * 5000}, "x"],
    ids=["cpu 1e999999999", "cpu lots", "memory 5000 digits", "a string"],
)
def test_a_member_node_advertising_nonsense_is_left_out_naming_it(
    allocatable: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """In the shared sensing loop: fast, and the cluster's other nodes still count."""
    from airflow_provider_fedsched.kube.snapshots import condense

    def node(name: str, capacity: Any) -> dict[str, Any]:
        ready = [{"type": "Ready", "status": "True"}]
        return {"metadata": {"name": name}, "status": {"allocatable": capacity, "conditions": ready}}

    nodes = [node("bad", allocatable), node("good", {"cpu": "4", "memory": "8Gi"})]

    def sense() -> Outcome:
        with caplog.at_level(logging.WARNING):
            snapshot = condense("eu-a", nodes, [], [], _now())
        kept = [n.name for n in snapshot.nodes]
        return Outcome("kept", kept, caplog.text)

    check(*run_bounded(sense), "kept", ["good"], "cluster eu-a: node bad left out")


@pytest.mark.parametrize(
    ("url", "link"),
    [("https://d/{cluster}/{namespace}/{pod}", "https://d/eu-a/ns/a%2Fb%3F"), (None, None)],
)
def test_the_dashboard_link_quotes_its_values(url: str | None, link: str | None) -> None:
    spec = load_spec(
        SPEC
        if url is None
        else SPEC.replace("region: eu-west-1}", f'region: eu-west-1, dashboard_url: "{url}"}}')
    )
    assert spec.cluster("eu-a").dashboard_link("ns", "a/b?") == link
