"""What the provider needs in a member (kube/permissions.py) is deploy/rbac.yaml's Role, rule by rule."""

from __future__ import annotations

from pathlib import Path

import yaml

from airflow_provider_fedsched.kube.permissions import REQUIRED, missing_from

ROLE = next(
    doc
    for doc in yaml.safe_load_all((Path(__file__).parents[2] / "deploy" / "rbac.yaml").read_text())
    if doc and doc["kind"] == "Role"
)


def test_the_required_rules_are_the_shipped_role_s() -> None:
    shipped = {
        (group, resource, verb)
        for rule in ROLE["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    required = {(rule.group, rule.resource, verb) for rule in REQUIRED for verb in rule.verbs}
    assert required == shipped


def test_what_a_rules_review_does_not_grant_is_named_with_what_is_lost() -> None:
    assert missing_from(ROLE["rules"]) == []
    assert missing_from([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]) == []
    older = [rule for rule in ROLE["rules"] if rule["apiGroups"] != ["coordination.k8s.io"]]
    (line,) = missing_from(older)
    assert line.startswith("coordination.k8s.io leases: get, create, update (no placement ledger")
    no_job_deletes = [
        {**rule, "verbs": [v for v in rule["verbs"] if v != "delete"]}
        if rule["apiGroups"] == ["batch"]
        else rule
        for rule in ROLE["rules"]
    ]
    assert missing_from(no_job_deletes) == ["batch jobs: delete (Job tasks fail there)"]
