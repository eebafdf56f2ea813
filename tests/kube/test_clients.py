"""The per-loop API clients: reused within a loop, closed when the loop ends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from airflow_provider_fedsched.kube.access import access_from_extras
from airflow_provider_fedsched.kube.clients import api_client
from tests.kube.test_access import kubeconfig


def test_a_loop_s_clients_are_reused_in_it_and_closed_when_it_ends() -> None:
    """``dag.test`` runs each trigger in its own ``asyncio.run``: the clients it made must be closed when
    that loop ends, not left to the garbage collector (which logged "Unclosed client session" for each,
    after the streams were closed, at the end of every test process)."""
    access = access_from_extras(
        "east", "k8s_east", "kubernetes", {"kube_config": json.dumps(kubeconfig("a"))}, None
    )

    async def twice() -> tuple[Any, Any]:
        return await api_client(access), await api_client(access)

    first, again = asyncio.run(twice())
    assert first is again
    assert first.rest_client.pool_manager.closed
    second, _ = asyncio.run(twice())
    assert second is not first and second.rest_client.pool_manager.closed
