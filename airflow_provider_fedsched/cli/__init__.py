"""The ``fedsched`` command: what-if placement, snapshots, plans and the simulated federation.

Each verb is a module of this package with an ``add_parser(subparsers)`` that registers the verb and sets
its handler; :data:`VERBS` lists them, one line per verb. Only the verb being run is imported (``fedsched
place`` never loads Airflow or the Kubernetes clients), all of them only for ``fedsched --help`` or an
unknown verb. Exit codes: 0 success, 1 a finding (``fedsched audit``: a violation; ``audit verify``: an
altered report), 2 bad input (a clear message naming the option or field at fault, never a traceback),
3 a placement whose answer is "wait" or "impossible", 141 when the reader of stdout went away (``| head``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from airflow_provider_fedsched.cli._common import (
    DEV_TOOLS_DISTRIBUTION,
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_NOT_PLACED,
    EXIT_OK,
    UsageError,
    airflow_lookup_context,
    dev_tools_installed,
    logs_on_stderr,
    require_dev_tools,
    silence_stdout,
)

__all__ = [
    "DEV_TOOL_VERBS",
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
    "audit": "audit",
}
# Verbs that drive the dev tools (sim/, testbed/, replay/), which the provider's wheel does not hold. Their
# modules here import the tools inside their functions only; without the tools, naming the verb is one
# line saying what to install (exit 2), and ``fedsched --help`` lists it as not installed.
DEV_TOOL_VERBS = frozenset({"sim", "testbed", "replay"})


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
        if named is not None and verb != named:
            continue
        if verb in DEV_TOOL_VERBS and not dev_tools_installed():
            if named is not None:
                require_dev_tools()
            subparsers.add_parser(verb, help=f"not installed (pip install {DEV_TOOLS_DISTRIBUTION})")
            continue
        path = module if "." in module else f"{__name__}.{module}"
        importlib.import_module(path).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    try:
        args = build_parser(argv).parse_args(argv)
        with airflow_lookup_context(), logs_on_stderr():
            code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at interpreter exit
        return code
    except UsageError as exc:
        # Before the command line is parsed (the dev tools a named verb needs are missing), argv names it.
        command = argv[0] if args is None else args.command
        print(f"fedsched {command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # `fedsched place --json | head`: the reader has what it wanted; no traceback, no second error.
        silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return 130
