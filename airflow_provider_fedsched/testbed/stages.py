"""kwok Stages: the pod and node lifecycle of the test bed, as data (kwok plays them as the kubelet).

Bare pods are steered by the same ``sim.fedsched.io/*`` annotations as the simulator's kubelet, so one DAG
runs unchanged on both: ``duration`` run seconds (default 1), ``exit-code`` (default 0; ``exit-code.NAME``
for one container), ``startup-delay`` (default 0.2), ``logs`` and ``xcom`` (served by the pod agent through
kwok's Logs and Exec objects). Durations are multiplied by the federation's ``time_scale``.
A pod starts only once the agent has prepared its logs and exec answers (``PREPARED``); the XCom sidecar
stops when the sidecar's kill reached it (``SIDECAR_KILLED``); ``EVICT`` plays a node-pressure eviction.
"""

from __future__ import annotations

from typing import Any

SIM = "sim.fedsched.io/"
TESTBED = "testbed.fedsched.io/"
PREPARED = TESTBED + "prepared"
SIDECAR_KILLED = TESTBED + "sidecar-killed"
EVICT = TESTBED + "evict"
MANAGED_LABEL = "fedsched.io/kwok-managed"
SIDECAR = "airflow-xcom-sidecar"


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


def _seconds(annotation: str, default: float, scale: float) -> dict[str, Any]:
    """A delay read from a seconds annotation, scaled; a missing or non-numeric one is the default."""
    expr = (
        f'((.metadata.annotations["{SIM}{annotation}"] // "{default}") | tonumber * {scale} | tostring) + "s"'
    )
    return {
        "durationMilliseconds": round(default * scale * 1000),
        "durationFrom": {"jq": {"expression": expr}},
    }


def _status_patch(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "type": "merge", "template": template}}


def _event(reason: str, message: str, kind: str = "Normal") -> dict[str, Any]:
    return {"event": {"type": kind, "reason": reason, "message": message}}


_ANN = "{{ $ann := or .metadata.annotations dict }}"
# The exit code of container .name: its own annotation, else the pod's, else 0.
_CODE = (
    '{{ $code := default (default "0" (index $ann "' + SIM + 'exit-code")) '
    '(index $ann (printf "' + SIM + 'exit-code.%s" .name)) }}'
)
_CONDITION = """
- type: {type}
  status: "{status}"
  lastProbeTime: null
  lastTransitionTime: {{{{ $now | Quote }}}}{extra}"""


def _conditions(ready: bool, reason: str = "") -> str:
    status = "True" if ready else "False"
    extra = "" if ready else f"\n  reason: {reason}"
    return "conditions:" + "".join(
        _CONDITION.format(type=t, status=s, extra=e)
        for t, s, e in [
            ("PodReadyToStartContainers", "True", ""),
            ("Initialized", "True", ""),
            ("Ready", status, extra),
            ("ContainersReady", status, extra),
            ("PodScheduled", "True", ""),
        ]
    )


_RUNNING = """
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: {{ printf "docker.io/library/%s" .image | Quote }}
  containerID: {{ printf "kwok://%s-%s" $uid .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}"""

_TERMINATED = """
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: {{ printf "docker.io/library/%s" .image | Quote }}
  containerID: {{ printf "kwok://%s-%s" $uid .name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: {{ $code }}
      reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}
      startedAt: {{ $started | Quote }}
      finishedAt: {{ $now | Quote }}
      containerID: {{ printf "kwok://%s-%s" $uid .name | Quote }}"""

_HEAD = (
    "{{ $now := Now }}{{ $uid := .metadata.uid }}" + _ANN + "{{ $started := or .status.startTime $now }}"
    '{{ $failed := false }}{{ range .spec.containers }}{{ if ne .name "'
    + SIDECAR
    + '" }}'
    + _CODE
    + '{{ if ne $code "0" }}{{ $failed = true }}{{ end }}{{ end }}{{ end }}\n'
)

_START = (
    "{{ $now := Now }}{{ $uid := .metadata.uid }}\n"
    + _conditions(True)
    + "\ncontainerStatuses:{{ range .spec.containers }}"
    + _RUNNING
    + "{{ end }}\n"
    + "{{ if .spec.initContainers }}initContainerStatuses:{{ range .spec.initContainers }}"
    + _TERMINATED.replace("{{ $code }}", "0")
    .replace('{{ if eq $code "0" }}Completed{{ else }}Error{{ end }}', "Completed")
    .replace("{{ $started | Quote }}", "{{ $now | Quote }}")
    + "{{ end }}{{ end }}\n"
    + "hostIP: {{ NodeIPWith .spec.nodeName | Quote }}\n"
    + "hostIPs:\n- ip: {{ NodeIPWith .spec.nodeName | Quote }}\n"
    + 'podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) '
    + '( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}\n'
    + "phase: Running\nstartTime: {{ $now | Quote }}\n"
)

# The main containers end; the XCom sidecar (if any) keeps running until it is killed.
_RUN_END = (
    _HEAD
    + '{{ $sidecar := false }}{{ range .spec.containers }}{{ if eq .name "'
    + SIDECAR
    + '" }}'
    + "{{ $sidecar = true }}{{ end }}{{ end }}\n"
    + 'containerStatuses:{{ range .spec.containers }}{{ if eq .name "'
    + SIDECAR
    + '" }}'
    + _RUNNING.replace("startedAt: {{ $now | Quote }}", "startedAt: {{ $started | Quote }}")
    + "{{ else }}"
    + _CODE
    + _TERMINATED
    + "{{ end }}{{ end }}\n"
    + "{{ if not $sidecar }}"
    + _conditions(False, "PodCompleted")
    + "\nphase: {{ if $failed }}Failed{{ else }}Succeeded{{ end }}\n"
    + "{{ else }}"
    + _conditions(False, "ContainersNotReady")
    + "\n{{ end }}"
)

_SIDECAR_END = (
    _HEAD
    + 'containerStatuses:{{ range .spec.containers }}{{ if eq .name "'
    + SIDECAR
    + '" }}{{ $code := "0" }}'
    + _TERMINATED
    + "{{ else }}"
    + _CODE
    + _TERMINATED
    + "{{ end }}{{ end }}\n"
    + _conditions(False, "PodCompleted")
    + "\nphase: {{ if $failed }}Failed{{ else }}Succeeded{{ end }}\n"
)

_EVICTED = (
    "{{ $now := Now }}{{ $uid := .metadata.uid }}{{ $started := or .status.startTime $now }}"
    + _ANN
    + '{{ $resource := index $ann "'
    + EVICT
    + '" }}{{ $code := "137" }}\n'
    + "phase: Failed\nreason: Evicted\n"
    + 'message: {{ printf "The node was low on resource: %s. Threshold quantity: 100Mi, available: 10Mi. " '
    + "$resource | Quote }}\n"
    + "containerStatuses:{{ range .spec.containers }}"
    + _TERMINATED.replace('{{ if eq $code "0" }}Completed{{ else }}Error{{ end }}', "ContainerStatusUnknown")
    + "{{ end }}\n"
    + _conditions(False, "PodFailed")
    + _CONDITION.format(type="DisruptionTarget", status="True", extra="\n  reason: TerminationByKubelet")
    + '\n  message: {{ printf "The node was low on resource: %s." $resource | Quote }}\n'
)

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

_ALIVE: Match = (".metadata.deletionTimestamp", "DoesNotExist", [])
_NODE_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def _phase(*phases: str) -> Match:
    return (".status.phase", "In", list(phases))


def _annotation(key: str, op: str = "Exists", *values: str) -> Match:
    return (f'.metadata.annotations["{key}"]', op, list(values))


def _running(sidecar: bool, op: str = "Exists") -> Match:
    which = "==" if sidecar else "!="
    return (
        f'.status.containerStatuses.[] | select( .name {which} "{SIDECAR}" ) | .state.running.startedAt',
        op,
        [],
    )


def kwok_stages(time_scale: float = 1.0) -> list[dict[str, Any]]:
    """Every Stage the test bed's kwok plays, for one ``time_scale``."""
    not_evicted = _annotation(EVICT, "DoesNotExist")
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
        _stage(
            "fedsched-pod-start",
            "Pod",
            [
                _ALIVE,
                _phase("Pending"),
                _annotation(PREPARED, "In", "true"),
                (".status.containerStatuses.[].state.running.startedAt", "DoesNotExist", []),
                (".status.containerStatuses.[].state.terminated", "DoesNotExist", []),
            ],
            [
                _event("Pulling", "Pulling image"),
                _event("Pulled", "Successfully pulled image"),
                _event("Created", "Created container"),
                _event("Started", "Started container"),
                _status_patch(_START),
            ],
            delay=_seconds("startup-delay", 0.2, time_scale),
        ),
        _stage(
            "fedsched-pod-run",
            "Pod",
            [
                _ALIVE,
                not_evicted,
                _phase("Running"),
                (".spec.restartPolicy", "NotIn", ["Always"]),
                _running(False),
            ],
            [_status_patch(_RUN_END)],
            delay=_seconds("duration", 1, time_scale),
        ),
        _stage(
            "fedsched-pod-sidecar-killed",
            "Pod",
            [
                _ALIVE,
                not_evicted,
                _phase("Running"),
                _annotation(SIDECAR_KILLED, "In", "true"),
                _running(True),
                _running(False, "DoesNotExist"),
            ],
            [_event("Killing", f"Stopping container {SIDECAR}"), _status_patch(_SIDECAR_END)],
        ),
        _stage(
            "fedsched-pod-evict",
            "Pod",
            [_ALIVE, _annotation(EVICT), _phase("Running")],
            [
                _event("Evicted", "The node was low on resource.", "Warning"),
                _status_patch(_EVICTED),
            ],
        ),
        _stage(
            "fedsched-pod-delete",
            "Pod",
            [(".metadata.deletionTimestamp", "Exists", []), (".metadata.finalizers", "DoesNotExist", [])],
            [{"delete": True}],
            delay={"durationMilliseconds": 200},
        ),
    ]
