"""The batch/v1 Job strategy: the defaults, the generated selector and the validation of the apiserver."""

from __future__ import annotations

import copy
from typing import Any

from airflow_provider_fedsched.sim.apiserver.store import Obj
from airflow_provider_fedsched.sim.apiserver.validation import invalid

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
# Jobs are the one kind whose default deletion leaves its pods (batch/v1 compatibility): clients that
# want them gone pass propagationPolicy Background or Foreground, as kubectl and KubernetesJobOperator do.
DEFAULT_PROPAGATION = "Orphan"


def _int_field(
    spec: Obj, key: str, causes: list[tuple[str, str, str]], minimum: int = 0, required: bool = False
) -> None:
    value = spec.get(key)
    if value is None:
        if required:
            causes.append((f"spec.{key}", "FieldValueRequired", "Required value"))
        return
    if isinstance(value, bool) or not isinstance(value, int):
        causes.append((f"spec.{key}", "FieldValueInvalid", f"Invalid value: {value!r}: must be an integer"))
    elif value < minimum:
        causes.append(
            (
                f"spec.{key}",
                "FieldValueInvalid",
                f"Invalid value: {value}: must be greater than or equal to {minimum}",
            )
        )


def prepare_job(job: Obj, uid: str) -> None:
    """Defaults and the generated selector/labels (``manualSelector`` unset), then validation (422)."""
    meta = job["metadata"]
    name = meta["name"]
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise invalid("Job", name, [("spec", "FieldValueRequired", "Required value")])
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise invalid("Job", name, [("spec.template.spec", "FieldValueRequired", "Required value")])
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    spec.setdefault("manualSelector", False)
    template_meta = template.setdefault("metadata", {}) or {}
    template["metadata"] = template_meta
    labels = template_meta.setdefault("labels", {}) or {}
    template_meta["labels"] = labels
    if not spec.get("manualSelector"):
        generated = {
            CONTROLLER_UID: uid,
            JOB_NAME: name,
            LEGACY_CONTROLLER_UID: uid,
            LEGACY_JOB_NAME: name,
        }
        labels.update(generated)
        spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
    if not meta.get("labels"):
        meta["labels"] = dict(labels)  # batch/v1 defaulting: a Job without labels takes its template's
    validate_job(job)


def validate_job(job: Obj) -> None:
    spec, name = job["spec"], job["metadata"]["name"]
    causes: list[tuple[str, str, str]] = []
    for key in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ):
        _int_field(spec, key, causes, minimum=1 if key == "activeDeadlineSeconds" else 0)
    policy = (spec["template"]["spec"] or {}).get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy or "Always"}": supported values: "OnFailure", "Never"',
            )
        )
    if spec.get("completionMode") not in ("NonIndexed", "Indexed"):
        causes.append(
            (
                "spec.completionMode",
                "FieldValueNotSupported",
                f'Unsupported value: "{spec.get("completionMode")}": supported values: '
                '"NonIndexed", "Indexed"',
            )
        )
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        causes.append(
            ("spec.completions", "FieldValueRequired", "Required value: when completion mode is Indexed")
        )
    selector = spec.get("selector") or {}
    template_labels = (spec["template"].get("metadata") or {}).get("labels") or {}
    wanted = selector.get("matchLabels") or {}
    if not wanted and not selector.get("matchExpressions"):
        causes.append(("spec.selector", "FieldValueRequired", "Required value"))
    elif any(template_labels.get(k) != v for k, v in wanted.items()):
        causes.append(
            (
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                "Invalid value: `selector` does not match template `labels`",
            )
        )
    if causes:
        raise invalid("Job", name, causes)


def check_update(old: Obj, new: Obj) -> None:
    """The selector and the pod template of a Job are immutable."""
    causes: list[tuple[str, str, str]] = []
    for key in ("selector", "template", "completionMode"):
        if (new.get("spec") or {}).get(key) != (old.get("spec") or {}).get(key):
            causes.append((f"spec.{key}", "FieldValueInvalid", "Invalid value: field is immutable"))
    if causes:
        raise invalid("Job", old["metadata"]["name"], causes)
    validate_job(new)


def pod_from_template(job: Obj, index: int | None) -> dict[str, Any]:
    """The pod the Job controller creates: the template, named after the Job, owned by it."""
    meta, spec = job["metadata"], job["spec"]
    template = copy.deepcopy(spec["template"])
    pod_meta = template.get("metadata") or {}
    pod_meta.pop("name", None)
    pod_meta["generateName"] = f"{meta['name']}-" if index is None else f"{meta['name']}-{index}-"
    pod_meta["labels"] = dict(pod_meta.get("labels") or {})
    pod_meta["annotations"] = dict(pod_meta.get("annotations") or {})
    if index is not None:
        pod_meta["labels"]["batch.kubernetes.io/job-completion-index"] = str(index)
        pod_meta["annotations"]["batch.kubernetes.io/job-completion-index"] = str(index)
    pod_meta["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pod_meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}
