"""The ``fedsched`` command: what-if placement, snapshots, plans and the simulated federation.

Each verb is a module of this package with an ``add_parser(subparsers)`` that registers the verb and sets
its handler; :data:`VERBS` lists them, one line per verb. Only the verb being run is imported (``fedsched
place`` never loads Airflow or the Kubernetes clients), all of them only for ``fedsched --help`` or an
unknown verb. Exit codes: 0 success, 2 bad input (a clear message naming the option or field at fault,
never a traceback), 3 a placement whose answer is "wait" or "impossible", 141 when the reader of stdout
went away (``| head``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from airflow_provider_fedsched.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_NOT_PLACED,
    EXIT_OK,
    UsageError,
    airflow_lookup_context,
    logs_on_stderr,
    silence_stdout,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_NOT_PLACED",
    "EXIT_OK",
    "VERBS",
    "UsageError",
    "build_parser",
    "main",
]

# Verb -> its module (a module of this package, or a full dotted path), in the order ``fedsched --help``
# lists them. The module's ``add_parser(subparsers)`` adds the verb and sets its ``handler``.
VERBS: dict[str, str] = {
    "place": "place",
    "snapshot": "snapshot",
    "plan": "plan",
    "sim": "sim",
    "testbed": "testbed",
    "replay": "replay",
    "tenants": "tenants",
    "cost": "cost",
    "history": "history",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the command line, with only the verb it names (when it names a known one)."""
    parser = argparse.ArgumentParser(
        prog="fedsched",
        description="Federated Kubernetes scheduling for Airflow: what-if placement, live snapshots, "
        "precomputed plans and the simulated federation.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    named = argv[0] if argv and argv[0] in VERBS else None
    for verb, module in VERBS.items():
        if named is None or verb == named:
            path = module if "." in module else f"{__name__}.{module}"
            importlib.import_module(path).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(argv).parse_args(argv)
        with airflow_lookup_context(), logs_on_stderr():
            code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at interpreter exit
        return code
    except UsageError as exc:
        print(f"fedsched {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # `fedsched place --json | head`: the reader has what it wanted; no traceback, no second error.
        silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return 130
