"""Reading YAML and JSON documents within limits: the one YAML reader of the provider.

Everything the provider reads as YAML (the federation spec, snapshot files, kubeconfigs, the simulator's
configuration) goes through :func:`parse_yaml`. It builds the document from the parser's events itself,
checking every limit as it reads: a document past a limit costs the reading up to that point, never the
whole document built first. It refuses, with a :class:`SpecError` naming the key path, line and column:

- a duplicate mapping key (YAML keeps the last one, so ``allowed_regions:`` written twice silently replaces
  the first list: a typo must never widen a rule);
- more YAML nodes than the limit once aliases are expanded (an alias bomb), a recursive alias, nesting
  deeper than the limit, more entries than allowed in a list the limits name (``clusters``);
- a scalar YAML itself cannot build (``2025-13-45``, an integer of 5,000 digits), a tag other than YAML's
  own scalar, sequence and mapping tags (``!!python/object``, ``!!binary``, ``!!set``), a list or mapping
  used as a key, a second document.

Merge keys (``<<: *base``, ``<<: [*first, *second]``) merge as YAML 1.1 says: keys written in the mapping
win over merged ones, and earlier merged mappings over later ones.

:func:`read_text_file` refuses what is not a regular file (``/dev/zero``, a FIFO, a directory) and any file
larger than the limit, before reading it. Uses libyaml's parser when PyYAML has it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from airflow_provider_fedsched.federation._errors import SpecError
from airflow_provider_fedsched.federation.limits import CONFIG_LIMITS, DocumentLimits

__all__ = ["load_document", "open_regular_file", "parse_yaml", "read_text_file"]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TAG = "tag:yaml.org,2002:"
_STR = _TAG + "str"
_AS_TEXT = frozenset({_TAG + "merge", _TAG + "value"})
"""Plain ``<<`` and ``=`` outside a key: PyYAML cannot build them; here they are text."""
_SCALAR_TAGS = frozenset(_TAG + name for name in ("null", "bool", "int", "float", "str", "timestamp"))
_MAPPING_TAGS = frozenset({None, "!", _TAG + "map"})
_SEQUENCE_TAGS = frozenset({None, "!", _TAG + "seq"})
_CACHED_SCALAR = 64
"""Plain scalars up to this many characters are built once per document (labels and quantities repeat)."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def _check_regular(info: os.stat_result, path: Path, what: str, max_bytes: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(
            f"{what} file '{path}' is a {_kind(info.st_mode)}, not a regular file: only regular "
            "files are read"
        )
    if info.st_size > max_bytes:
        raise SpecError(_too_big(what, path, info.st_size, max_bytes))


def open_regular_file(path: str | Path, what: str, max_bytes: int) -> BinaryIO:
    """``path`` opened for reading if it is a regular file of at most ``max_bytes``; else :class:`SpecError`.

    Checked before opening (``stat`` never blocks, unlike opening a FIFO, and opening some devices acts),
    and again on what was opened, without blocking, in case the path was swapped in between. Read at most
    ``max_bytes + 1`` from it: a regular file can still grow."""
    path = Path(path)
    try:
        _check_regular(os.stat(path), path, what, max_bytes)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            _check_regular(os.fstat(descriptor), path, what, max_bytes)
            return os.fdopen(descriptor, "rb")
        except BaseException:
            os.close(descriptor)
            raise
    except OSError as exc:
        raise SpecError(f"cannot read {what} file '{path}': {exc.strerror or exc}") from None


def read_text_file(path: str | Path, what: str, limits: DocumentLimits = CONFIG_LIMITS) -> str:
    """The UTF-8 text of a regular file of at most ``limits.max_bytes``; else :class:`SpecError`."""
    path = Path(path)
    with open_regular_file(path, what, limits.max_bytes) as handle:
        try:
            data = handle.read(limits.max_bytes + 1)
        except OSError as exc:
            raise SpecError(f"cannot read {what} file '{path}': {exc.strerror or exc}") from None
    if len(data) > limits.max_bytes:  # it grew since it was opened
        raise SpecError(_too_big(what, path, len(data), limits.max_bytes))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} file '{path}' is not UTF-8 text (byte {exc.start})") from None


def _too_big(what: str, path: Path, size: int, max_bytes: int) -> str:
    return f"{what} file '{path}' is {size:,} bytes, more than the {max_bytes:,} allowed"


class _Merge:
    """The key ``<<`` (a YAML merge key)."""

    def __repr__(self) -> str:
        return "<<"


_MERGE = _Merge()
_NO_KEY: Any = object()


def _key_text(key: Any) -> str:
    text = str(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


class _Anchor:
    """An anchored node: its value, and what each alias of it costs (its nodes and its height)."""

    __slots__ = ("height", "open", "size", "value")

    def __init__(self, value: Any, size: int, height: int, open_: bool) -> None:
        self.value, self.size, self.height, self.open = value, size, height, open_


class _Collection:
    """A sequence or mapping being built."""

    __slots__ = (
        "anchor",
        "height",
        "key",
        "key_mark",
        "limit",
        "lines",
        "merges",
        "nodes_before",
        "path",
        "pattern",
        "value",
    )

    def __init__(self, value: Any, path: str, pattern: str, limit: int | None, nodes_before: int) -> None:
        self.value = value
        self.path = path
        self.pattern = pattern
        """The path without list positions (``clusters[].nodes``): what :attr:`DocumentLimits.max_items`
        names."""
        self.limit = limit
        self.nodes_before = nodes_before
        self.height = 1
        self.anchor: str | None = None
        self.key: Any = _NO_KEY
        """A mapping's key waiting for its value."""
        self.key_mark: Any = None
        self.lines: dict[Any, int] = {}
        """A mapping's keys so far, with their lines (a duplicate names both)."""
        self.merges: list[dict[Any, Any]] = []


class _Builder:
    """Builds the document straight from the parser's events, checking each limit as it goes: nothing is
    built past a limit, so a document that breaks one costs only the reading up to where it does. Aliases
    share the anchored value (as PyYAML does) and count its nodes and height again each time, as the
    consumers walking the document will."""

    def __init__(self, loader: yaml.SafeLoader, what: str, limits: DocumentLimits) -> None:
        self.loader: Any = loader  # the parser's event API is untyped
        self.what = what
        self.limits = limits
        self.item_limits = dict(limits.max_items)
        self.nodes = 0
        self.anchors: dict[str, _Anchor] = {}
        self.stack: list[_Collection] = []
        self.plain: dict[str, Any] = {}
        """Plain scalars already built, by their text."""

    def error(self, path: str, message: str, mark: Any) -> SpecError:
        return SpecError(f"{path or '<root>'}: {message} (in {self.what} at {_at(mark)})")

    def document(self) -> Any:
        loader = self.loader
        loader.get_event()  # the stream's start
        if loader.check_event(yaml.StreamEndEvent):
            return None
        loader.get_event()  # the document's start
        value = self._build()
        loader.get_event()  # the document's end
        if not loader.check_event(yaml.StreamEndEvent):
            raise self.error("", "a second YAML document (only one is read)", loader.peek_event().start_mark)
        return value

    def _child_path(self) -> str:
        """The path of the node about to be added to the innermost collection."""
        if not self.stack:
            return ""
        parent = self.stack[-1]
        if isinstance(parent.value, list):
            return _join(parent.path, len(parent.value))
        return parent.path if parent.key is _NO_KEY else _join(parent.path, _key_text(parent.key))

    def _child_pattern(self) -> str:
        if not self.stack:
            return ""
        parent = self.stack[-1]
        if isinstance(parent.value, list):
            return parent.pattern + "[]"
        return _join(parent.pattern, _key_text(parent.key))

    def _count(self, nodes: int, height: int, mark: Any) -> None:
        """Adds ``nodes`` of the given ``height`` at the current depth; :class:`SpecError` past a limit."""
        self.nodes += nodes
        if self.nodes > self.limits.max_nodes:
            raise self.error(
                self._child_path(),
                f"the document has more than {self.limits.max_nodes:,} YAML nodes (aliases expanded)",
                mark,
            )
        if len(self.stack) + height > self.limits.max_depth:
            raise self.error(self._child_path(), f"nested deeper than {self.limits.max_depth} levels", mark)

    def _build(self) -> Any:
        get_event, stack, plain = self.loader.get_event, self.stack, self.plain
        max_nodes, max_depth = self.limits.max_nodes, self.limits.max_depth
        scalar_event = yaml.ScalarEvent
        while True:
            event = get_event()
            kind = type(event)
            if kind is scalar_event:
                self.nodes += 1
                if self.nodes > max_nodes or len(stack) >= max_depth:
                    self._count(0, 1, event.start_mark)
                value = (
                    plain.get(event.value, _NO_KEY) if event.tag is None and event.implicit[0] else _NO_KEY
                )
                if value is _NO_KEY:
                    value = self._scalar(event)
                if event.anchor is not None:
                    self.anchors[event.anchor] = _Anchor(value, 1, 1, False)
                height = 1
            elif kind is yaml.AliasEvent:
                value, height = self._alias(event)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                self._open(event, {} if kind is yaml.MappingStartEvent else [])
                continue
            else:  # the end of the innermost collection
                frame = stack.pop()
                value, height = self._close(frame), frame.height
            if not stack:
                return value
            parent = stack[-1]
            if parent.height <= height:
                parent.height = height + 1
            if parent.limit is None and type(parent.value) is list:
                parent.value.append(value)
            else:
                self._add(parent, value, event)

    def _scalar(self, event: Any) -> Any:
        tag, text = event.tag, event.value
        plain = tag is None and event.implicit[0]
        if tag is None or tag == "!":
            if not event.implicit[0]:  # quoted: a string
                return text
            tag = self.loader.resolve(yaml.ScalarNode, text, event.implicit)
            if tag in _AS_TEXT:
                tag = _STR
        if tag not in _SCALAR_TAGS:
            raise self.error(self._child_path(), f"unsupported YAML tag {_short(tag)}", event.start_mark)
        value: Any = text
        if tag != _STR:
            try:
                value = self.loader.yaml_constructors[tag](
                    self.loader, yaml.ScalarNode(tag, text, event.start_mark, event.end_mark)
                )
            except (ValueError, OverflowError, IndexError, TypeError, yaml.YAMLError) as exc:
                raise self.error(
                    self._child_path(),
                    f"{_key_text(text)!r} is not a valid YAML {tag.rsplit(':')[-1]}"
                    f" ({str(exc).splitlines()[0][:80]})",
                    event.start_mark,
                ) from None
        if plain and len(text) <= _CACHED_SCALAR:
            self.plain[text] = value
        return value

    def _alias(self, event: Any) -> tuple[Any, int]:
        anchor = self.anchors.get(event.anchor)
        if anchor is None:
            raise self.error(self._child_path(), f"undefined YAML alias *{event.anchor}", event.start_mark)
        if anchor.open:
            raise self.error(
                self._child_path(), "recursive YAML alias (a node containing itself)", event.start_mark
            )
        self._count(anchor.size, anchor.height, event.start_mark)
        return anchor.value, anchor.height

    def _open(self, event: Any, value: Any) -> None:
        if event.tag not in (_MAPPING_TAGS if isinstance(value, dict) else _SEQUENCE_TAGS):
            raise self.error(
                self._child_path(), f"unsupported YAML tag {_short(event.tag)}", event.start_mark
            )
        parent = self.stack[-1] if self.stack else None
        if parent is not None and isinstance(parent.value, dict) and parent.key is _NO_KEY:
            raise self.error(parent.path, "a mapping key that is a list or a mapping", event.start_mark)
        if parent is not None and parent.limit is not None:
            self._check_items(parent, event)
        self._count(1, 1, event.start_mark)
        pattern = self._child_pattern()
        limit = self.item_limits.get(pattern) if isinstance(value, list) else None
        frame = _Collection(value, self._child_path(), pattern, limit, self.nodes - 1)
        if event.anchor is not None:
            frame.anchor = event.anchor
            self.anchors[event.anchor] = _Anchor(value, 0, 0, True)
        self.stack.append(frame)

    def _close(self, frame: _Collection) -> Any:
        value = frame.value
        if frame.merges:  # keys written here win over merged ones, and earlier merged mappings over later
            merged: dict[Any, Any] = {}
            for source in reversed(frame.merges):
                merged.update(source)
            merged.update(value)
            value = merged
        if frame.anchor is not None:
            self.anchors[frame.anchor] = _Anchor(value, self.nodes - frame.nodes_before, frame.height, False)
        return value

    def _add(self, parent: _Collection, value: Any, event: Any) -> None:
        if isinstance(parent.value, list):
            self._check_items(parent, event)
            parent.value.append(value)
        elif parent.key is _NO_KEY:
            self._key(parent, value, event)
        elif parent.key is _MERGE:
            self._merge(parent, value)
        else:
            parent.value[parent.key] = value
            parent.key = _NO_KEY

    def _check_items(self, parent: _Collection, event: Any) -> None:
        if parent.limit is not None and len(parent.value) >= parent.limit:
            raise self.error(parent.path, f"more than the {parent.limit:,} entries allowed", event.start_mark)

    def _key(self, parent: _Collection, key: Any, event: Any) -> None:
        if type(event) is yaml.ScalarEvent and event.tag is None and event.implicit[0] and key == "<<":
            key = _MERGE
        try:
            first = parent.lines.get(key)
        except TypeError:  # a list or mapping reached through an alias
            raise self.error(
                parent.path, "a mapping key that is a list or a mapping", event.start_mark
            ) from None
        line = event.start_mark.line + 1
        if first is not None:
            raise self.error(
                _join(parent.path, _key_text(key)),
                f"duplicate key (lines {first} and {line}); YAML would keep only the last one",
                event.start_mark,
            )
        parent.lines[key] = line
        parent.key, parent.key_mark = key, event.start_mark

    def _merge(self, parent: _Collection, value: Any) -> None:
        """``<<: *base`` or ``<<: [*first, *second]``: the mappings' keys, unless written here."""
        sources = value if isinstance(value, list) else [value]
        if not sources or not all(isinstance(source, dict) for source in sources):
            raise self.error(
                _join(parent.path, "<<"),
                "a merge key takes a mapping or a list of mappings (<<: *anchor)",
                parent.key_mark,
            )
        parent.merges.extend(sources)
        parent.key = _NO_KEY


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else _key_text(tag)


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def parse_yaml(text: str, what: str, limits: DocumentLimits = CONFIG_LIMITS) -> Any:
    """Parse one YAML (or JSON) document with the checks above; ``what`` names it in errors."""
    if len(text) > limits.max_bytes:
        raise SpecError(
            f"<root>: {what} is {len(text):,} characters, more than the {limits.max_bytes:,} allowed"
        )
    loader = _Loader(text)
    try:
        return _Builder(loader, what, limits).document()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0] or "invalid syntax"
        raise SpecError(f"<root>: malformed YAML in {what}{where}: {problem}") from None
    finally:
        loader.dispose()


def _exists(source: str) -> bool:
    try:
        return Path(source).exists()
    except (OSError, ValueError):  # a name too long, or with a NUL byte, is no file
        return False


def load_document(
    source: str | Path | Mapping[str, Any], what: str, limits: DocumentLimits = CONFIG_LIMITS
) -> dict[str, Any]:
    """Read ``source`` (a path, YAML/JSON text or a mapping) into a dict; ``what`` names it in errors.

    A one-line string is a path when such a file exists or when it does not read as a YAML mapping: a path
    containing ':' is a path, and a one-line flow mapping (``{clusters: [...]}``) is text.
    """
    if isinstance(source, Mapping):
        return dict(source)
    if not isinstance(source, str | Path):
        raise SpecError(f"<root>: {what} must be a path, YAML text or a mapping, got {type(source).__name__}")
    one_line = isinstance(source, str) and "\n" not in source
    if isinstance(source, Path) or (one_line and _exists(source)):
        document = parse_yaml(read_text_file(source, what, limits), f"{what} file '{source}'", limits)
    else:
        try:
            document = parse_yaml(source, what, limits)
        except SpecError:
            if not one_line or source.lstrip().startswith(("{", "[")):
                raise
            document = source  # not YAML: a path to a file that does not exist (reported below)
        if one_line and not isinstance(document, dict):
            read_text_file(source, what, limits)  # raises: no such file (it would have been read above)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise SpecError(f"<root>: {what} must be a mapping, got {type(document).__name__}")
    return document
