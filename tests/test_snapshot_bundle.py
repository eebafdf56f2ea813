"""The snapshot bundle (every snapshot of a small federation in one key, for a fresh worker's one read) is
stored compressed; the old plain form is still read, and a bundle that cannot be read, or unpacks beyond
the bound on stored values, leaves the snapshots to be read from their own keys."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_fedsched.state import FederationState, MemoryStateBackend
from airflow_provider_fedsched.state.stores import SnapshotStore
from airflow_provider_fedsched.validation.stored import MAX_STORED_BYTES
from tests.federation.helpers import node, snapshot


class CountingBackend(MemoryStateBackend):
    """Counts the reads of each key."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def get(self, key: str) -> Any | None:
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().get(key)


@pytest.fixture
def state() -> Iterator[FederationState]:
    state = FederationState(CountingBackend(), federation="bundled")
    state.snapshots.embed = True
    yield state
    SnapshotStore._decoded.clear()


def _snapshots() -> list[Any]:
    return [
        snapshot(f"c{i}", [node(f"c{i}-n{j}", labels={"disk": "ssd"}) for j in range(20)]) for i in range(5)
    ]


def _fresh_read(state: FederationState) -> tuple[dict[str, Any], dict[str, int]]:
    """What a fresh worker reads: no snapshot decoded yet in the process."""
    SnapshotStore._decoded.clear()
    backend = state.backend
    assert isinstance(backend, CountingBackend)
    backend.reads.clear()
    found = state.snapshots.newest([f"c{i}" for i in range(5)])
    return found, dict(backend.reads)


def test_the_bundle_is_stored_packed_and_read_in_one_call(state: FederationState) -> None:
    written = _snapshots()
    state.snapshots.put(written)
    bundle = state.backend.get("fedsched/bundled/snapshot-bundle")
    assert set(bundle) == {"zlib"}
    assert len(bundle["zlib"]) * 5 < sum(len(s.model_dump_json()) for s in written)  # well under a fifth
    found, reads = _fresh_read(state)
    assert found == {s.cluster: s for s in written}
    assert not any("/snapshot/" in key for key in reads)  # no cluster's own key was read


def test_a_plain_bundle_written_before_is_still_read(state: FederationState) -> None:
    written = _snapshots()
    state.snapshots.put(written)
    plain = {s.cluster: s.model_dump(mode="json") for s in written}
    state.backend.set("fedsched/bundled/snapshot-bundle", plain)
    found, reads = _fresh_read(state)
    assert found == {s.cluster: s for s in written}
    assert not any("/snapshot/" in key for key in reads)


@pytest.mark.parametrize(
    "bundle",
    [
        {"zlib": base64.b64encode(zlib.compress(b"0" * (MAX_STORED_BYTES + 10))).decode()},  # a bomb
        {"zlib": "not base64 at all!"},
        {"zlib": base64.b64encode(b"not zlib").decode()},
        {"zlib": base64.b64encode(zlib.compress(b"[1, 2]")).decode()},  # not a mapping
    ],
    ids=["beyond-the-bound", "not-base64", "not-zlib", "not-a-mapping"],
)
def test_an_unreadable_bundle_leaves_each_snapshot_to_its_own_key(
    state: FederationState, bundle: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    written = _snapshots()
    state.snapshots.put(written)
    state.backend.set("fedsched/bundled/snapshot-bundle", bundle)
    found, reads = _fresh_read(state)
    assert found == {s.cluster: s for s in written}
    assert all(reads.get(f"fedsched/bundled/snapshot/c{i}") == 1 for i in range(5))
    # A later refresh writes a good bundle again over the bad one.
    state.snapshots.put(written[:1])
    assert set(state.backend.get("fedsched/bundled/snapshot-bundle")) == {"zlib"}
