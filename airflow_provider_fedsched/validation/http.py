"""HTTP query parameters of the provider's APIs (the Federation page's JSON API), checked into 4xx.

A query parameter reaches SQL (``OFFSET``, ``map_index = ?``): a number beyond the database's integer is a
500 from the driver, so each one has a range. With FastAPI, declare the parameter with the bounds here
(``Annotated[int, Query(ge=0, le=MAX_OFFSET)]``: out of range is a 422 naming it); elsewhere call
:func:`query_int` / :func:`query_text`, which raise :class:`QueryError` carrying the 4xx status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from airflow_provider_fedsched.federation._errors import PermanentError

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_MAP_INDEX",
    "MAX_OFFSET",
    "MAX_TRY_NUMBER",
    "MapIndex",
    "Offset",
    "QueryError",
    "TryNumber",
    "query_int",
    "query_text",
]

MAX_OFFSET = 10**9
"""Rows to skip in a listing (a billion task tries)."""
MAX_MAP_INDEX = 2**31 - 1
"""Airflow's ``map_index`` column is a 32-bit integer (-1 = not mapped)."""
MAX_TRY_NUMBER = 2**31 - 1
MAX_ID_LENGTH = 250
"""Airflow's DAG, task and run ids are at most 250 characters."""

Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]
MapIndex = Annotated[int, Field(ge=-1, le=MAX_MAP_INDEX)]
TryNumber = Annotated[int, Field(ge=0, le=MAX_TRY_NUMBER)]


class QueryError(PermanentError, ValueError):
    """A bad query parameter: ``status`` (400) and a message naming the parameter and what is allowed."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def query_int(query: Mapping[str, Any], name: str, *, minimum: int, maximum: int, default: int) -> int:
    """An integer parameter in ``minimum..maximum`` (``1e20``, ``abc``, ``9223372036854775808`` refused)."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    text = str(raw).strip()
    digits = text.lstrip("+-")
    if not digits.isdigit() or not digits.isascii() or len(digits) > 20:
        raise QueryError(f"{name}: '{text[:40]}' is not an integer in {minimum}..{maximum}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise QueryError(f"{name}: {value} is outside {minimum}..{maximum}")
    return value


def query_text(query: Mapping[str, Any], name: str, *, max_length: int = MAX_ID_LENGTH) -> str | None:
    """A text parameter of at most ``max_length`` characters, without control characters."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    text = str(raw)
    if len(text) > max_length:
        raise QueryError(f"{name}: longer than {max_length} characters")
    if any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise QueryError(f"{name}: control characters are not allowed")
    return text
