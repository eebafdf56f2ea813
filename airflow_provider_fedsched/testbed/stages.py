"""kwok Stages of the test bed: its two node stages, and the pod lifecycle it shares with the simulator.

The pod stages are not written here: they are ``sim/controllers/pod-stages.yaml``, the simulator's
kubelet's own, which kwok plays as they are but for two things the test bed adds: a pod starts only once
the pod agent has prepared its logs and exec answers (``PREPARED``), and every pod stage's delay (the
``sim.fedsched.io/*`` durations, the kubelet's back-offs and grace periods) is multiplied by the
federation's ``time_scale``. ``EVICT`` plays a node-pressure eviction (its stage is in the shared file).
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_provider_fedsched.sim.controllers.runtime import SIDECAR, SIDECAR_KILLED
from airflow_provider_fedsched.sim.controllers.stages import read_stage_objects

TESTBED = "testbed.fedsched.io/"
PREPARED = TESTBED + "prepared"
EVICT = TESTBED + "evict"
MANAGED_LABEL = "fedsched.io/kwok-managed"
STARTING_STAGES = ("fedsched-pod-start", "fedsched-pod-image-pull-error")
"""The stages that first act on a new pod: they wait for the pod agent."""

__all__ = ["EVICT", "MANAGED_LABEL", "PREPARED", "SIDECAR", "SIDECAR_KILLED", "kwok_stages", "pod_stages"]

Match = tuple[str, str, list[str]]  # a jq key, an operator (In, NotIn, Exists, DoesNotExist), values


def _stage(
    name: str, kind: str, match: list[Match], steps: list[dict[str, Any]], delay: Any = None
) -> dict[str, Any]:
    expressions = [
        {"key": key, "operator": op, **({"values": values} if values else {})} for key, op, values in match
    ]
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": expressions},
        "steps": steps,
    }
    if delay is not None:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _status_patch(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "type": "merge", "template": template}}


_NODE_INIT = """{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ .metadata.name | Quote }}
  type: Hostname
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ NodePort }}
nodeInfo:
  architecture: amd64
  bootID: ""
  containerRuntimeVersion: {{ printf "kwok://%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: ""
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  machineID: ""
  operatingSystem: linux
  osImage: kwok
  systemUUID: ""
phase: Running
"""

_NODE_HEARTBEAT = """{{ $now := Now }}
conditions:
{{ range .status.conditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ .lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_NODE_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def _scaled(delay: dict[str, Any], scale: float) -> dict[str, Any]:
    """A pod stage's delay times ``scale``: its milliseconds, and the Go duration its expression yields
    (an expression that fails yields nothing either way, and kwok falls back on the milliseconds)."""
    out = dict(delay)
    if "durationMilliseconds" in out:
        out["durationMilliseconds"] = round(out["durationMilliseconds"] * scale)
    expression = ((out.get("durationFrom") or {}).get("jq") or {}).get("expression")
    if expression is not None:
        seconds = f'(({expression}) | rtrimstr("s") | tonumber * {scale})'
        out["durationFrom"] = {"jq": {"expression": f'({seconds} | tostring) + "s"'}}
    return out


def pod_stages(time_scale: float = 1.0) -> list[dict[str, Any]]:
    """The shared pod lifecycle as the test bed's kwok plays it: gated on the agent, scaled."""
    stages = copy.deepcopy(read_stage_objects())
    for stage in stages:
        spec = stage["spec"]
        if stage["metadata"]["name"] in STARTING_STAGES:
            spec["selector"]["matchExpressions"].append(
                {"key": f'.metadata.annotations["{PREPARED}"]', "operator": "In", "values": ["true"]}
            )
        if "delay" in spec and time_scale != 1.0:
            spec["delay"] = _scaled(spec["delay"], time_scale)
    return stages


def kwok_stages(time_scale: float = 1.0) -> list[dict[str, Any]]:
    """Every Stage the test bed's kwok plays, for one ``time_scale``."""
    return [
        _stage(
            "fedsched-node-initialize",
            "Node",
            [(_NODE_READY, "NotIn", ["True"])],
            [_status_patch(_NODE_INIT)],
        ),
        _stage(
            "fedsched-node-heartbeat",
            "Node",
            [(_NODE_READY, "In", ["True"])],
            [_status_patch(_NODE_HEARTBEAT)],
            delay={"durationMilliseconds": 20000, "jitterDurationMilliseconds": 25000},
        ),
        *pod_stages(time_scale),
    ]
