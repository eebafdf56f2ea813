"""Shared loading helpers: read a path / YAML text / mapping, and turn validation errors into SpecError.

Every error a user can cause in a spec or snapshot file surfaces as one :class:`SpecError` whose message
starts with the field path (``datasets[2].allowed_regions[0]: ...``), so the CLI can print it as is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


class SpecError(ValueError):
    """Invalid federation spec, snapshot file or request; the message names the field path at fault."""


def format_path(loc: Sequence[str | int]) -> str:
    """``("datasets", 2, "allowed_regions", 0)`` -> ``datasets[2].allowed_regions[0]``."""
    out = ""
    for part in loc:
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
        messages.append(f"{join_path(prefix, format_path(loc))}: {error['msg']}")
    extra = f" (and {len(messages) - 5} more)" if len(messages) > 5 else ""
    return SpecError("; ".join(messages[:5]) + extra)


def load_document(source: str | Path | Mapping[str, Any], what: str) -> dict[str, Any]:
    """Read ``source`` (a path, YAML/JSON text or a mapping) into a dict; ``what`` names it in errors."""
    if isinstance(source, Mapping):
        return dict(source)
    text: str
    if isinstance(source, Path) or ("\n" not in source and ":" not in source.split("/")[-1]):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"cannot read {what} file '{path}': {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise SpecError(f"{what} file '{path}' is not UTF-8 text") from None
    else:
        text = source
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid syntax"
        raise SpecError(f"<root>: malformed YAML in {what}{where}: {problem}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise SpecError(f"<root>: {what} must be a mapping, got {type(document).__name__}")
    return document
