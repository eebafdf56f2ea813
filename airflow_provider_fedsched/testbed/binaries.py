"""Where the test bed's binaries are (built by ``make testbed`` from testbed/go.mod) and their versions."""

from __future__ import annotations

import os
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
COMMANDS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
_REPO = Path(__file__).resolve().parents[2]


class TestbedUnavailable(RuntimeError):
    """The binaries are missing: the message says how to build them."""


def bin_dir() -> Path:
    """``$FEDSCHED_TESTBED_BIN``, else the checkout's ``.testbed/bin``."""
    return Path(os.environ.get("FEDSCHED_TESTBED_BIN") or _REPO / ".testbed" / "bin")


def binary(name: str) -> Path:
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        raise TestbedUnavailable(
            f"test bed binary {name!r} not found in {bin_dir()}: "
            "run `make testbed` (or set FEDSCHED_TESTBED_BIN)"
        )
    return path


def check() -> None:
    for name in COMMANDS:
        binary(name)


def kwok_crds() -> Path:
    """kwok's CRD manifests, copied next to the binaries by the build from the pinned kwok module."""
    path = bin_dir().parent / "kwok-crds"
    if not path.is_dir():
        raise TestbedUnavailable(f"kwok CRDs not found in {path}: run `make testbed`")
    return path
