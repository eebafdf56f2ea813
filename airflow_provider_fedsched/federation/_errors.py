"""The one error type of the domain core's input checks (kept apart so that every module can raise it)."""

from __future__ import annotations

__all__ = ["SpecError"]


class SpecError(ValueError):
    """Invalid federation spec, snapshot file, request or argument; the message names the field at fault."""
