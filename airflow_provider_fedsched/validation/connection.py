"""A member's Airflow connection as untrusted input: its ``extra`` must be a JSON object within limits.

Airflow reads a connection's ``extra`` leniently: text that is not JSON is logged with a traceback and read
as no extras at all, so a member whose connection was typed by hand (``AIRFLOW_CONN_*``, a secrets backend,
a database row written by other means) would be reported as having no kubeconfig, and Airflow's traceback
would land in the output. :func:`extra_problem` says what is wrong with ``extra`` first, naming the field and
where in it, never its contents (it holds credentials).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_fedsched.federation.limits import KUBECONFIG_LIMITS

__all__ = ["MAX_EXTRA_BYTES", "extra_problem"]

MAX_EXTRA_BYTES = 2 * KUBECONFIG_LIMITS.max_bytes
"""A connection's ``extra``: room for an inline kubeconfig at its own limit, JSON-escaped."""


def extra_problem(extra: Any) -> str | None:
    """Why a connection's ``extra`` cannot be used (None when it is absent or a JSON object)."""
    if extra is None or (isinstance(extra, str) and not extra.strip()):
        return None
    if not isinstance(extra, str):
        return f"connection extra must be JSON text, got {type(extra).__name__}"
    if len(extra) > MAX_EXTRA_BYTES:
        return f"connection extra is {len(extra):,} characters; at most {MAX_EXTRA_BYTES:,}"
    try:
        value = json.loads(extra)
    except RecursionError:
        return "connection extra is nested too deeply"
    except ValueError as exc:
        where = f"line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        return f"connection extra is not valid JSON ({reason}{f' at {where}' if where else ''})"
    if not isinstance(value, dict):
        return f"connection extra must be a JSON object, got {type(value).__name__}"
    return None
