"""What the provider needs in a member's task namespace (``deploy/rbac.yaml``), checked by asking the member.

A member that forbids something the provider needs is reported, naming the missing rule and what is lost
without it, in each snapshot of it (``fedsched snapshot``, the Federation page) and at the start of each
task's log: a Role applied from an older ``deploy/rbac.yaml`` (no Leases: no placement ledger; no Jobs: no
Job tasks) must not go unnoticed. The question is a ``SelfSubjectRulesReview``, which every authenticated
identity may ask; an authorizer that cannot list its rules (``incomplete``) gets no report rather than a
wrong one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow_provider_fedsched.state.process import permission_reviews

__all__ = ["REQUIRED", "Rule", "grants", "missing_from", "missing_permissions"]


@dataclass(frozen=True)
class Rule:
    group: str
    resource: str
    verbs: tuple[str, ...]
    without: str
    """What is lost without it."""


REQUIRED: tuple[Rule, ...] = (
    Rule("", "pods", ("create", "get", "list", "watch", "patch", "delete"), "no pod task runs there"),
    Rule("", "pods/log", ("get",), "no pod task runs there"),
    Rule("", "pods/exec", ("create", "get"), "tasks with do_xcom_push fail"),
    Rule("", "events", ("get", "list", "watch"), "failures are reported without the cluster's reason"),
    Rule("", "resourcequotas", ("get", "list", "watch"), "the namespace's quota headroom is unknown"),
    Rule("batch", "jobs", ("create", "get", "delete"), "Job tasks fail there"),
    Rule(
        "coordination.k8s.io",
        "leases",
        ("get", "create", "update"),
        "no placement ledger: reservations in shared state only, where two workers may take the same room",
    ),
)
"""deploy/rbac.yaml's Role, rule by rule (``tests/kube/test_permissions.py`` keeps them the same)."""

log = logging.getLogger(__name__)
CHECK_EVERY_SECONDS = 300.0


def grants(rules: Iterable[Any], group: str, resource: str, verb: str) -> bool:
    """Whether RBAC ``rules`` (dicts, the API's or the manifests' field names) allow ``verb`` on
    ``resource`` (with its subresource, ``pods/log``) of API ``group``."""
    for rule in rules:
        groups = rule.get("apiGroups") or rule.get("api_groups") or []
        resources = rule.get("resources") or []
        verbs = rule.get("verbs") or []
        if (
            (group in groups or "*" in groups)
            and (resource in resources or "*" in resources)
            and (verb in verbs or "*" in verbs)
        ):
            return True
    return False


def missing_from(rules: Iterable[Any]) -> list[str]:
    """What of :data:`REQUIRED` ``rules`` (a rules review's ``resourceRules``, as dicts) do not grant, one
    line per rule: ``coordination.k8s.io leases: create, update (no placement ledger: ...)``."""
    granted = list(rules)
    found = []
    for rule in REQUIRED:
        verbs = [v for v in rule.verbs if not grants(granted, rule.group, rule.resource, v)]
        if verbs:
            found.append(f"{rule.group or 'core'} {rule.resource}: {', '.join(verbs)} ({rule.without})")
    return found


async def missing_permissions(api: Any, cluster: str, namespace: str) -> list[str]:
    """:func:`missing_from` the member's own answer for ``namespace`` (a ``kubernetes_asyncio`` ApiClient),
    asked at most every :data:`CHECK_EVERY_SECONDS` per process; [] when it cannot tell."""
    from kubernetes_asyncio import client

    key = (cluster, namespace, id(api))  # per client: another identity may be granted otherwise
    known = permission_reviews.get(key)
    if known is not None and time.monotonic() - known[0] < CHECK_EVERY_SECONDS:
        return known[1]
    body = client.V1SelfSubjectRulesReview(spec=client.V1SelfSubjectRulesReviewSpec(namespace=namespace))
    found: list[str] = []
    try:
        review = await client.AuthorizationV1Api(api).create_self_subject_rules_review(body)
        status = review.status
        if status is not None and not status.incomplete:
            found = missing_from(api.sanitize_for_serialization(status.resource_rules or []))
    except Exception as exc:  # a member that cannot say (no such API): asked again later, not each time
        log.debug("cluster %s: its permissions could not be reviewed: %s", cluster, exc)
    permission_reviews[key] = (time.monotonic(), found)
    return found
