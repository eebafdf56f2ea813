"""Turning validation errors into one SpecError naming each field path (reading files: ``documents.py``).

Every error a user can cause in a spec or snapshot file surfaces as one :class:`SpecError` whose message
starts with the field path (``datasets[2].allowed_regions[0]: ...``), so the CLI can print it as is.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from airflow_provider_fedsched.federation._errors import SpecError

__all__ = ["SpecError", "format_path", "join_path", "spec_error"]


def format_path(loc: Sequence[str | int]) -> str:
    """``("datasets", 2, "allowed_regions", 0)`` -> ``datasets[2].allowed_regions[0]``."""
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker of a mapping's key, after the key itself: the key says it
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


def join_path(prefix: str, suffix: str) -> str:
    if not prefix:
        return suffix
    if not suffix or suffix == "<root>":
        return prefix
    return prefix + suffix if suffix.startswith("[") else f"{prefix}.{suffix}"


def spec_error(exc: ValidationError, prefix: str = "") -> SpecError:
    """Convert a pydantic error into a SpecError naming each field path (at most five problems)."""
    messages: list[str] = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        loc = [part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-"))]
        if isinstance(cause, SpecError):
            # A model's own check raises SpecError with the path below that model already in the message.
            messages.append(join_path(join_path(prefix, format_path(loc) if loc else ""), str(cause)))
            continue
        message = error["msg"].removeprefix("Value error, ")  # a validator's own words say what is wrong
        if not loc and error["type"] == "value_error":  # a model's own check, whose message names the path
            messages.append(join_path(prefix, message))
            continue
        messages.append(f"{join_path(prefix, format_path(loc))}: {message}")
    extra = f" (and {len(messages) - 5} more)" if len(messages) > 5 else ""
    return SpecError("; ".join(messages[:5]) + extra)
