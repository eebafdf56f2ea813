"""The triggerer's janitor (``plugins/janitor.py``): a pod written down in a cluster that answers again
after the last try ended is deleted without waiting for another federated task (issue 10).

Real Airflow: the try runs through ``dag.test`` and gives up on its silent cluster; then a real ``airflow
triggerer`` process starts with the provider's plugin, as in any deployment, and no task runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from airflow_provider_fedsched.hooks.federation import FederationHook
from airflow_provider_fedsched.plugins import janitor
from airflow_provider_fedsched.sim import SimFederation, wait_for
from tests.operators.test_contract import Outage
from tests.operators.test_ended_while_deferred import triggerer_running
from tests.operators.test_federated_operator import pods_of, run

pytestmark = [pytest.mark.airflow]


def test_the_triggerer_deletes_a_pod_written_down_after_the_last_try_ended(
    sim_federation: SimFederation, federation: Path
) -> None:
    dag_id = "fed_outage_lost_sync"
    with Outage(sim_federation, dag_id, "east-cpu", "Running"):
        state, record, _ = run(dag_id)
        assert state == "failed" and record is not None
    (attempt,) = record["attempts"]
    # The try ended while east-cpu was silent: its pod is written down and still there, east-cpu answers.
    assert FederationHook().orphans("east-cpu") == [(attempt["namespace"], attempt["pod"])]
    assert pods_of(sim_federation, dag_id) == [f"east-cpu/{attempt['pod']}"]

    log_path = federation.parent / "triggerer.log"
    with triggerer_running(log_path, AIRFLOW__FEDSCHED__JANITOR_INTERVAL_SECONDS="1"):
        # A fresh process imports Airflow and the provider first: slow on a busy machine.
        wait_for(
            lambda: pods_of(sim_federation, dag_id) == [], timeout=300, interval=0.2, message=str(log_path)
        )
        # Taken off the list once a sweep confirms it gone: the one that deleted it, or the next (the pod
        # is deleted with a grace period, so its kubelet may confirm after that sweep's last look).
        wait_for(lambda: FederationHook().orphans("east-cpu") == [], timeout=30, interval=0.2)
    text = log_path.read_text()
    assert "Federation janitor: refreshed ['east-cpu']" in text, text[-3000:]


@pytest.mark.parametrize(("text", "expected"), [("5", 5.0), ("0.5", 0.5), ("0", None)])
def test_the_janitor_interval_option(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: float | None
) -> None:
    monkeypatch.setenv("AIRFLOW__FEDSCHED__JANITOR_INTERVAL_SECONDS", text)
    assert janitor.interval_seconds() == expected


@pytest.mark.parametrize("text", ["soon", "-1", "nan", "inf"])
def test_a_bad_janitor_interval_is_refused_naming_the_option_and_the_triggerer_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    monkeypatch.setenv("AIRFLOW__FEDSCHED__JANITOR_INTERVAL_SECONDS", text)
    with caplog.at_level(logging.ERROR, logger=janitor.__name__):
        assert janitor.interval_seconds() is None
    assert "[fedsched] janitor_interval_seconds" in caplog.text and repr(text) in caplog.text
