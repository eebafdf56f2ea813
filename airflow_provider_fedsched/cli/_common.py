"""What every ``fedsched`` verb shares: the exit codes, :class:`UsageError`, option parsers, the options
that reach member clusters, and loaders that turn every problem into a :class:`UsageError` naming the
option or field at fault.

Heavy imports (Airflow, the Kubernetes clients) happen inside the functions that need them, so that a verb
pays only for what it uses.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_fedsched.federation._errors import PermanentError
from airflow_provider_fedsched.federation.limits import (
    EARLIEST_TIME,
    LATEST_TIME,
    MAX_SECONDS,
)

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.resources import ResourceList
    from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
    from airflow_provider_fedsched.federation.spec import FederationSpec
    from airflow_provider_fedsched.sim.config import SimConfig

__all__ = [
    "DEV_TOOLS_DISTRIBUTION",
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_NOT_PLACED",
    "EXIT_OK",
    "UsageError",
    "add_member_options",
    "add_verb",
    "airflow_lookup_context",
    "bounded_float",
    "bounded_int",
    "check_clusters",
    "check_output",
    "dev_tools_installed",
    "jsonable",
    "key_value",
    "live_snapshots",
    "load_federation",
    "load_sim_config",
    "load_snapshot_file",
    "logs_on_stderr",
    "open_output",
    "parse_duration",
    "parse_time",
    "print_json",
    "print_state_files",
    "regular_file",
    "require_airflow_database",
    "require_dev_tools",
    "silence_stdout",
    "until_signalled",
]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_NOT_PLACED = 3
EXIT_BROKEN_PIPE = 141
"""The reader of stdout went away (``fedsched place --json | head``): 128 + SIGPIPE, as a shell reports it."""
MAX_TIMEOUT = 600.0
"""``--timeout``: seconds each member cluster has to answer."""


class UsageError(PermanentError):
    """Bad input from the command line or a file it names; printed without a traceback, exit 2."""


DEV_TOOLS_DISTRIBUTION = "airflow-provider-fedsched-devtools"
"""The distribution that holds the dev tools (sim/, testbed/, replay/, the demo): the provider's wheel does
not, so that every Airflow worker installs the provider only (docs/architecture.md)."""
DEV_TOOLS = ("sim", "testbed", "replay")


def dev_tools_installed() -> bool:
    """Whether the dev tools' packages are importable here (found, not imported)."""
    import importlib.util

    return all(importlib.util.find_spec(f"airflow_provider_fedsched.{part}") for part in DEV_TOOLS)


def require_dev_tools() -> None:
    """Called before a verb imports a dev tool (always inside the verb: the provider's wheel never imports
    them when a module is loaded), so that their absence is one line saying how to get them."""
    if not dev_tools_installed():
        raise UsageError(f"the dev tools are not installed: pip install {DEV_TOOLS_DISTRIBUTION}")


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str, option: str = "--duration") -> float:
    """``"1h"``, ``"90m"``, ``"1h30m"``, ``"45s"``, ``"2d"`` or plain seconds (``"3600"``) -> seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise UsageError(
                f"{option}: '{text}' is not a duration (examples: 3600, 90m, 1h30m, 2d)"
            ) from None
        seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
    if not 0 <= seconds <= MAX_SECONDS:  # also refuses NaN and infinity
        raise UsageError(
            f"{option}: '{_short(text)}' must be a finite, non-negative duration of at most "
            f"{MAX_SECONDS:.0f} s (ten years)"
        )
    return seconds


def parse_time(text: str, option: str = "--now") -> datetime:
    """An ISO 8601 timestamp between 1970 and 9000 (so that adding any duration fits); naive = UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option}: '{_short(text)}' is not an ISO 8601 timestamp (e.g. 2025-06-01T08:00:00Z)"
        ) from None
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    if not EARLIEST_TIME <= value <= LATEST_TIME:
        raise UsageError(
            f"{option}: '{_short(text)}' is outside {EARLIEST_TIME.date()}..{LATEST_TIME.date()}"
        )
    return value


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def bounded_int(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``minimum..maximum`` (argparse exits 2 naming the option)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip()) if len(text) <= 40 else None
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"must be an integer in {minimum}..{maximum} (got '{_short(text)}')"
            )
        return value

    return parse


def bounded_float(
    minimum: float, maximum: float, *, exclusive_minimum: bool = False
) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in ``minimum..maximum`` (``(minimum, maximum]`` if exclusive)."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip()) if len(text) <= 40 else math.nan
        except ValueError:
            value = math.nan
        low_ok = value > minimum if exclusive_minimum else value >= minimum
        if not (low_ok and value <= maximum):  # NaN fails both
            low = "(" if exclusive_minimum else "["
            raise argparse.ArgumentTypeError(
                f"must be a finite number in {low}{minimum:g}, {maximum:g}] (got '{_short(text)}')"
            )
        return value

    return parse


def regular_file(path: str, option: str) -> Path:
    """``path`` names an existing regular file (not a directory, device or pipe), else a UsageError."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{option} {path}: not a regular file")
    return Path(path)


def check_output(path: str, option: str) -> None:
    """Before any work: ``path`` can be written as a file (not a folder, its folder exists). A named pipe
    is checked when it is opened (:func:`open_output`): opening it here would end its reader's input."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            raise UsageError(f"{option} {path}: its folder {parent} does not exist") from None
        return
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{option} {path}: is a folder; give a file path")


def open_output(path: str, option: str) -> Any:
    """``path`` opened for writing text, never blocking: a named pipe nobody reads is refused at once
    (opened plainly, it would wait for a reader for ever)."""
    import errno

    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UsageError(f"{option} {path}: a named pipe that nothing reads") from None
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "w", encoding="utf-8", newline="")


def jsonable(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: JSON has no Infinity or NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def print_json(document: Any) -> None:
    """Print a JSON document that any JSON parser reads (never ``Infinity`` or ``NaN``)."""
    print(json.dumps(jsonable(document), indent=2, allow_nan=False))


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so that the interpreter's last flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout already closed or not a file descriptor
        pass
    finally:
        os.close(devnull)


def key_value(text: str, option: str, separator: str = "=") -> tuple[str, str]:
    key, found, value = text.partition(separator)
    if not found or not key.strip():
        raise UsageError(f"{option}: '{text}' is not of the form key{separator}value")
    return key.strip(), value.strip()


def require_airflow_database(*tables: str, instead: str = "") -> None:
    """A :class:`UsageError` in one line when Airflow's metadata database cannot be reached or lacks
    ``tables`` (before ``airflow db migrate``): the verbs that read the deployment's shared state or its
    XComs check this first, instead of failing with a database traceback. The connection URL is never
    printed (it may hold a password). ``instead``: what the verb can do without the database."""
    from sqlalchemy import inspect
    from sqlalchemy.exc import SQLAlchemyError

    try:  # importing Airflow builds its database engine: a missing driver fails here
        from airflow import settings
        from airflow.models.base import SQL_ALCHEMY_SCHEMA
    except ImportError as exc:
        raise UsageError(
            f"Airflow's metadata database cannot be used: {_short(str(exc), 120)} (the database driver of "
            "[database] sql_alchemy_conn is not installed)"
        ) from None
    schema = SQL_ALCHEMY_SCHEMA if SQL_ALCHEMY_SCHEMA and not SQL_ALCHEMY_SCHEMA.isspace() else None
    engine = settings.engine
    try:
        if engine is None:
            raise SQLAlchemyError("Airflow's database engine is not configured")
        with engine.connect() as connection:
            found = inspect(connection)
            missing = [table for table in tables if not found.has_table(table, schema=schema)]
    except SQLAlchemyError as exc:
        cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise UsageError(
            "the Airflow metadata database cannot be reached "
            f"({_short(cause[0] if cause else type(exc).__name__, 120)}); check [database] sql_alchemy_conn"
        ) from None
    if missing:
        raise UsageError(
            f"the Airflow metadata database has no {', '.join(missing)} table yet: run `airflow db migrate` "
            f"first{f' ({instead})' if instead else ''}"
        )


def load_federation(path: str) -> FederationSpec:
    from airflow_provider_fedsched.federation.spec import SpecError, load_spec

    try:
        return load_spec(Path(path))
    except SpecError as exc:
        raise UsageError(f"--federation {path}: {exc}") from None


def load_sim_config(args: argparse.Namespace) -> SimConfig:
    """``--config`` (the simulator's three built-in clusters when absent) and ``--time-scale`` of the
    ``up`` verbs (``sim up``, ``testbed up``)."""
    from airflow_provider_fedsched.sim.config import SimConfigError, default_config, load_config

    try:
        config = load_config(args.config) if args.config else default_config()
    except SimConfigError as exc:
        raise UsageError(f"--config {exc}") from None
    if args.time_scale is not None and not 0 < args.time_scale <= 100:
        raise UsageError(f"--time-scale: must be in (0, 100], got {args.time_scale}")
    return config


@contextlib.contextmanager
def until_signalled() -> Iterator[threading.Event]:
    """An event that SIGINT or SIGTERM sets, for a verb that runs in the foreground until stopped; the
    previous handlers are back on exit."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def print_state_files(state_dir: Path) -> None:
    """Where an ``up`` verb wrote the files a user points kubectl and Airflow at."""
    print(
        f"kubeconfig: {state_dir / 'kubeconfig'}  federation: {state_dir / 'federation.yaml'}  "
        f"airflow env: {state_dir / 'airflow.env'}"
    )


def load_snapshot_file(path: str) -> dict[str, ClusterSnapshot]:
    from airflow_provider_fedsched.federation.snapshot import load_snapshots
    from airflow_provider_fedsched.federation.spec import SpecError

    try:
        return load_snapshots(Path(path))
    except SpecError as exc:
        raise UsageError(f"--snapshots {path}: {exc}") from None


def check_clusters(spec: FederationSpec, names: Iterable[str], option: str) -> None:
    """Every name a command-line option gives is a member cluster (the spec's one check of names)."""
    from airflow_provider_fedsched.federation.spec import SpecError

    try:
        spec.check_clusters(names, option, indexed=False)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def add_verb(subparsers: Any, name: str, summary: str, doc: str | None) -> argparse.ArgumentParser:
    """The verb's parser: ``summary`` in ``fedsched --help``, the first line of its module's ``doc`` in
    ``fedsched <verb> --help``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=doc.splitlines()[0] if doc else None
    )
    return parser


def add_member_options(parser: argparse.ArgumentParser) -> None:
    """How a verb reaches member clusters: ``fedsched snapshot``, ``place --live`` and ``plan``."""
    parser.add_argument(
        "--kubeconfig",
        help="outside Airflow: resolve each cluster to the context of this kubeconfig named after it",
    )
    parser.add_argument(
        "--timeout",
        type=bounded_float(0, MAX_TIMEOUT, exclusive_minimum=True),
        default=2.0,
        help=f"seconds each cluster has to answer (default 2, at most {MAX_TIMEOUT:g})",
    )


@contextlib.contextmanager
def logs_on_stderr() -> Iterator[None]:
    """Airflow's logs on stderr for the verb's duration: stdout is the verb's table or JSON document.

    Airflow configures its logging when first imported, binding its handler to whatever ``sys.stdout`` is
    then, and structlog's loggers to ``sys.stdout`` when each is made; an Airflow log line (a connection
    it cannot parse, a deprecation) would otherwise land inside ``fedsched ... --json``. A verb imports
    Airflow only when it needs it, so the first import of ``airflow`` is wrapped (stdout pointing at
    stderr while Airflow configures itself, structlog's logger factory pointed at stderr after); when
    Airflow is already imported (the verbs run in-process from tests), its handlers are pointed at
    stderr now. Airflow's traceback for a connection extra that is not JSON is left out: the verb checks
    every member's extra itself and names the connection in one line. Everything is put back on exit.
    """
    undo: list[Callable[[], None]] = [_without_extra_tracebacks()]
    if "airflow" in sys.modules:
        undo.extend(_airflow_logging_to_stderr())
        finder = None
    else:
        finder = _FirstAirflowImport(undo)
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for action in reversed(undo):
            action()


class _FirstAirflowImport:
    """A ``sys.meta_path`` finder that finds nothing itself: it wraps the loader of ``airflow`` (once) so
    that Airflow configures its logging with stdout pointing at stderr."""

    def __init__(self, undo: list[Callable[[], None]]) -> None:
        self.undo = undo

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "airflow":
            return None
        import importlib.util

        sys.meta_path.remove(self)  # find the real spec without coming back here
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        undo = self.undo

        def exec_on_stderr(module: Any) -> None:
            with contextlib.redirect_stdout(sys.stderr):
                exec_module(module)
            undo.extend(_airflow_logging_to_stderr())

        loader.exec_module = exec_on_stderr  # this spec's own loader instance, used once
        return spec


_EXTRA_LOGGERS = ("airflow.sdk.definitions.connection", "airflow.models.connection")
"""Where Airflow logs, with a traceback, a connection extra it cannot parse as JSON."""


def _without_extra_tracebacks() -> Callable[[], None]:
    """Drop Airflow's log records about a connection extra that is not JSON; returns how to stop."""
    import logging

    def keep(record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not message.startswith(("Failed to deserialize extra", "Failed parsing the json"))

    for name in _EXTRA_LOGGERS:
        logging.getLogger(name).addFilter(keep)

    def stop() -> None:
        for name in _EXTRA_LOGGERS:
            logging.getLogger(name).removeFilter(keep)

    return stop


def _airflow_logging_to_stderr() -> list[Callable[[], None]]:
    """Point Airflow's configured log output at stderr: the stdlib handlers writing to stdout, and
    structlog's logger factory when it writes to stdout by default. Returns how to put each back."""
    import logging

    undo: list[Callable[[], None]] = []
    stdouts = {id(sys.stdout), id(sys.__stdout__)} - {id(sys.stderr)}  # a verb may point stdout at stderr
    loggers = [
        logging.getLogger(),
        *(item for item in logging.Logger.manager.loggerDict.values() if isinstance(item, logging.Logger)),
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and id(handler.stream) in stdouts:
                previous = handler.setStream(sys.stderr)
                if previous is not None:
                    undo.append(functools.partial(handler.setStream, previous))
    try:
        import structlog
    except ImportError:
        return undo
    factory: Any = structlog.get_config().get("logger_factory")
    # Airflow's factory: a logger class and its stream, None meaning "sys.stdout when the logger is made".
    if getattr(factory, "io", False) is None and isinstance(getattr(factory, "cls", None), type):
        binary = issubclass(factory.cls, structlog.BytesLogger)
        stream: Any = sys.stderr.buffer if binary and hasattr(sys.stderr, "buffer") else sys.stderr
        if binary and stream is sys.stderr:
            return undo  # a text-only stderr (in-process tests): nothing a bytes logger can write to
        structlog.configure(logger_factory=type(factory)(factory.cls, stream))
        undo.append(lambda: structlog.configure(logger_factory=factory))
    return undo


PROCESS_CONTEXT = "_AIRFLOW_PROCESS_CONTEXT"
"""Where Airflow 3's Task SDK looks to choose the secrets backends a connection lookup reads."""


@contextlib.contextmanager
def airflow_lookup_context() -> Iterator[None]:
    """Look connections up as Airflow's own ``airflow connections get`` does, for the verb's duration.

    Outside a task, Airflow 3 chooses what a lookup reads by the process's context: a task asks the API
    server; a server process (API server, scheduler, ``airflow connections get|test``, which mark
    themselves so) reads the configured secrets backend, then ``AIRFLOW_CONN_*`` variables, then the
    metadata database; any other process only the first two. A ``fedsched`` verb runs where the
    deployment's configuration is, like ``airflow connections get``, so it marks itself the same way and
    the hook's lookup then finds what the operator finds. A context already set wins; the previous value
    is back on exit (the verbs also run in-process, from tests).
    """
    previous = os.environ.get(PROCESS_CONTEXT)
    if previous is None:
        os.environ[PROCESS_CONTEXT] = "server"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(PROCESS_CONTEXT, None)


def live_snapshots(
    spec: FederationSpec,
    kubeconfig: str | None,
    timeout: float,
    limits: dict[str, dict[str, ResourceList]] | None = None,
) -> dict[str, ClusterSnapshot]:
    """Every member's snapshot, read now; every problem becomes a :class:`UsageError` or a reason.
    ``limits`` receives each answering member's hard quota limits per namespace.

    With a kubeconfig the clusters are read directly (no Airflow import: about a second for a few local
    clusters); without one, members resolve through their Airflow connections, as the operator resolves
    them (see :func:`airflow_lookup_context`). A connection that exists nowhere (a mistake in the spec or
    a connection never added) or cannot be read (its extra not a JSON object): an error naming it; any
    other member problem is that member's reason.
    """
    if not 0 < timeout <= MAX_TIMEOUT:
        raise UsageError(f"--timeout: must be in (0, {MAX_TIMEOUT:g}] seconds (got {timeout:g})")
    if kubeconfig is not None:
        check_kubeconfig_file(spec, kubeconfig)
        return _snapshots_from_kubeconfig(spec, kubeconfig, timeout, limits)
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.kube.access import (
        ClusterAccessError,
        MalformedConnection,
        MissingConnection,
    )
    from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

    hook = FederationHook(spec, snapshot_timeout=timeout, state=FederationState(MemoryStateBackend()))
    missing = []
    for member in spec.clusters:
        try:
            hook.access(member.name)  # resolved once: the collection below reuses it
        except MissingConnection as exc:
            where = (
                f"not in a secrets backend, AIRFLOW_CONN_{member.conn_id.upper()} or the metadata database"
            )
            missing.append(f"{exc} ({where})" if exc.problem == MissingConnection.PROBLEM else str(exc))
        except MalformedConnection as exc:  # the connection to fix, as a missing one
            missing.append(str(exc))
        except ClusterAccessError:
            pass  # the collection reports it as the member's reason
    if missing:
        raise UsageError("; ".join(missing))
    snapshots = hook.collect()
    if limits is not None:
        limits.update({name: hook.quota_limits(name) for name in snapshots})
    return snapshots


def check_kubeconfig_file(spec: FederationSpec, kubeconfig: str) -> None:
    """Refuse a kubeconfig that is not a regular file, not a kubeconfig, or an alias bomb, naming the field;
    warn on stderr for every member whose context turns TLS verification off."""
    from airflow_provider_fedsched.federation.spec import SpecError
    from airflow_provider_fedsched.validation.kubeconfig import load_kubeconfig, tls_verification_off

    regular_file(kubeconfig, "--kubeconfig")
    try:
        document = load_kubeconfig(Path(kubeconfig), f"--kubeconfig {kubeconfig}")
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    for member in spec.clusters:
        reason = tls_verification_off(document, member.name)
        if reason is not None:
            print(f"fedsched: warning: cluster {member.name}: {reason}", file=sys.stderr)


def _snapshots_from_kubeconfig(
    spec: FederationSpec,
    kubeconfig: str,
    timeout: float,
    limits: dict[str, dict[str, ResourceList]] | None = None,
) -> dict[str, ClusterSnapshot]:
    """Each member through the kubeconfig context named after it, concurrently, each within ``timeout``."""
    from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
    from airflow_provider_fedsched.kube.access import (
        ClusterAccess,
        ClusterAccessError,
        access_from_kubeconfig_file,
    )
    from airflow_provider_fedsched.kube.clients import run_in_background
    from airflow_provider_fedsched.kube.snapshots import collect_snapshots

    accesses: list[ClusterAccess] = []
    snapshots: dict[str, ClusterSnapshot] = {}
    for member in spec.clusters:
        try:
            accesses.append(
                access_from_kubeconfig_file(member.name, member.name, kubeconfig, member.namespace)
            )
        except ClusterAccessError as exc:
            snapshots[member.name] = ClusterSnapshot(
                cluster=member.name, observed_at=datetime.now(UTC), reachable=False, reason=exc.problem
            )
    snapshots.update(run_in_background(collect_snapshots(accesses, timeout, limits)))
    return snapshots
