"""The base of every store: a backend and the federation's key prefix (``<prefix>/<kind>/<cluster>/...``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from airflow_provider_fedsched.federation._loading import spec_error
from airflow_provider_fedsched.state.backend import StateBackend
from airflow_provider_fedsched.state.process import stored_value_reports

log = logging.getLogger(__name__)

T = TypeVar("T")


def read_stored(
    key: str, raw: Any, parse: Callable[[Any], T], *, logger: logging.Logger | None = None
) -> T | None:
    """``parse(raw)``, or None (logged once per key) when ``raw`` is not a value ``parse`` accepts.

    ``parse`` raises ``ValueError`` (``SpecError``, pydantic's ``ValidationError``), ``TypeError``,
    ``KeyError`` or ``RecursionError`` on bad input; the log line names the key and the problem, never
    the value (which may be large, or hold what it should not).
    """
    if raw is None:
        return None
    try:
        return parse(raw)
    except ValidationError as exc:
        problem = str(spec_error(exc))
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:200]}"
    if stored_value_reports.first(key):
        (logger or log).warning(
            "Ignoring unreadable stored value under %s (treated as absent): %s", key, problem
        )
    return None


def forget_logged() -> None:
    """Forget which keys were reported (tests; a long-lived process never needs it)."""
    stored_value_reports.clear()


def mapping(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
    return raw


class Store:
    def __init__(self, backend: StateBackend, prefix: str) -> None:
        self.backend = backend
        self.prefix = prefix

    def _key(self, kind: str, cluster: str, item: str | None = None) -> str:
        return f"{self.prefix}/{kind}/{cluster}" + (f"/{item}" if item else "")
