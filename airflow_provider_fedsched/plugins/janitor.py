"""The janitor: a thread of the triggerer that deletes the pods written down in member clusters that answer
again, when no federated task is left to do it.

A try that gives up on a silent cluster writes its pod down (the orphan list in shared state); the next
snapshot of that cluster that answers deletes it. Every decision and every try's end takes such
snapshots, so a deployment that keeps running federated tasks keeps cleaning up; one whose last try ended
while the cluster was silent would keep the pod until its next federated task. The triggerer is always
running, already talks to the member clusters (the pod triggers) and reads the connections, so it hosts
this: every ``[fedsched] janitor_interval_seconds`` it calls :meth:`FederationHook.sweep_orphans` for the
configured federation (one key listing when nothing is written down).

It is an Airflow listener: ``on_starting`` is called by every job's constructor (scheduler, triggerer,
dag-processor); the runner names the job's type right after, so the thread starts, waits for that name and
ends unless it is the triggerer's. The first sweep comes one interval after the start: by then the
triggerer has started its trigger-runner subprocess (forked from this process: better not mid-request).
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from airflow.listeners import hookimpl

from airflow_provider_fedsched.state.process import janitor_stop

log = logging.getLogger(__name__)

OPTION = "janitor_interval_seconds"
DEFAULT_INTERVAL = 60.0
HOST_JOB = "TriggererJob"
NAMING_WAIT = 60.0
"""Seconds the thread waits for the runner to name its job (it does so right after the constructor)."""


def interval_seconds() -> float | None:
    """The configured interval; None when the janitor is off (0) or the option is not a number (logged,
    naming the option: a bad value must not stop the triggerer)."""
    from airflow.configuration import conf

    text = conf.get("fedsched", OPTION, fallback=str(DEFAULT_INTERVAL))
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        log.error(
            "[fedsched] %s must be a number of seconds >= 0 (0 turns the janitor off), not %r: the "
            "janitor is off",
            OPTION,
            text,
        )
        return None
    return value or None


def sweep_once() -> list[str]:
    """One sweep of the configured federation: the members refreshed (their orphans deleted if they
    answered)."""
    from airflow_provider_fedsched.hooks.federation import FederationHook

    return FederationHook().sweep_orphans()


def _run(job: Any, interval: float) -> None:
    from airflow.configuration import conf

    if janitor_stop.wait(0) or not _named(job):
        return
    if not conf.get("fedsched", "federation_spec", fallback=""):
        log.info("Federation janitor: no [fedsched] federation_spec configured, nothing to sweep")
        return
    log.info("Federation janitor: sweeping written-down pods every %gs", interval)
    while not janitor_stop.wait(interval):
        try:
            swept = sweep_once()
        except Exception as exc:  # a spec or a cluster that cannot be read now: try again next time
            log.warning("Federation janitor: sweep failed: %s", exc)
            continue
        if swept:
            log.info(
                "Federation janitor: refreshed %s (their written-down pods deleted if they answered)", swept
            )


def _named(job: Any) -> bool:
    """Whether ``job`` turns out to be the triggerer's (its runner names it right after construction)."""
    waited = 0.0
    while not getattr(job, "job_type", None) and waited < NAMING_WAIT:
        if janitor_stop.wait(0.1):
            return False
        waited += 0.1
    return getattr(job, "job_type", None) == HOST_JOB


@hookimpl
def on_starting(component: Any) -> None:
    from airflow.jobs.job import Job

    if not isinstance(component, Job):
        return  # a task runner: it sweeps at its try's end anyway
    interval = interval_seconds()
    if interval is None:
        return
    janitor_stop.clear()
    threading.Thread(target=_run, args=(component, interval), name="fedsched-janitor", daemon=True).start()


@hookimpl
def before_stopping(component: Any) -> None:
    janitor_stop.set()
