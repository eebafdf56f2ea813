"""Reading YAML and JSON documents within limits: the one YAML reader of the provider.

Everything the provider reads as YAML (the federation spec, snapshot files, kubeconfigs, the simulator's
configuration) goes through :func:`parse_yaml`, which refuses, with a :class:`SpecError` naming the key path:

- a duplicate mapping key (YAML keeps the last one, so ``allowed_regions:`` written twice silently replaces
  the first list: a typo must never widen a rule);
- a document whose nodes, once aliases are expanded, exceed the limit (an alias bomb), a recursive alias,
  or nesting deeper than the limit;
- a scalar YAML itself cannot build (``2025-13-45``, an integer of 5,000 digits).

:func:`read_text_file` refuses what is not a regular file (``/dev/zero``, a FIFO, a directory) and any file
larger than the limit, before reading it. Uses libyaml when PyYAML has it (about ten times faster).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_fedsched.federation._errors import SpecError
from airflow_provider_fedsched.federation.limits import CONFIG_LIMITS, DocumentLimits

__all__ = ["load_document", "parse_yaml", "read_text_file"]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"
# Scalars whose construction can fail (bad dates, integers past Python's digit limit): built during the
# walk, where the key path is known, so that the error names it.
_CHECKED_SCALARS = frozenset(
    {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"}
)


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


def read_text_file(path: str | Path, what: str, limits: DocumentLimits = CONFIG_LIMITS) -> str:
    """The UTF-8 text of a regular file of at most ``limits.max_bytes``; else :class:`SpecError`."""
    path = Path(path)
    try:
        info = os.stat(path)  # stat never blocks, unlike opening a FIFO
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(
                f"{what} file '{path}' is a {_kind(info.st_mode)}, not a regular file: only regular "
                "files are read"
            )
        if info.st_size > limits.max_bytes:
            raise SpecError(_too_big(what, path, info.st_size, limits))
        with open(path, "rb") as handle:
            data = handle.read(limits.max_bytes + 1)
    except OSError as exc:
        raise SpecError(f"cannot read {what} file '{path}': {exc.strerror or exc}") from None
    if len(data) > limits.max_bytes:  # it grew since stat()
        raise SpecError(_too_big(what, path, len(data), limits))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} file '{path}' is not UTF-8 text (byte {exc.start})") from None


def _too_big(what: str, path: Path, size: int, limits: DocumentLimits) -> str:
    return f"{what} file '{path}' is {size:,} bytes, more than the {limits.max_bytes:,} allowed"


def _key_text(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        text = str(node.value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"<{type(node).__name__}>"


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


class _Walk:
    """One pass over the composed node graph before anything is constructed (the checks above)."""

    def __init__(self, loader: yaml.SafeLoader, what: str, limits: DocumentLimits) -> None:
        self.loader = loader
        self.what = what
        self.limits = limits
        self.sizes: dict[int, tuple[int, int]] = {}
        """id(node) -> (nodes once expanded, height)."""

    def error(self, path: str, message: str) -> SpecError:
        return SpecError(f"{path or '<root>'}: {message} (in {self.what})")

    def run(self, root: yaml.Node) -> None:
        on_path: set[int] = set()
        stack: list[tuple[yaml.Node, str, bool]] = [(root, "", False)]
        while stack:
            node, path, done = stack.pop()
            key = id(node)
            if done:
                on_path.discard(key)
                self._finish(node, path)
                continue
            if key in on_path:
                raise self.error(path, "recursive YAML alias (a node containing itself)")
            if key in self.sizes:
                continue  # an alias of a node already checked
            on_path.add(key)
            stack.append((node, path, True))
            for child, child_path in self._children(node, path):
                stack.append((child, child_path, False))

    def _children(self, node: yaml.Node, path: str) -> list[tuple[yaml.Node, str]]:
        if isinstance(node, yaml.SequenceNode):
            return [(child, _join(path, position)) for position, child in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            return self._mapping_children(node, path)
        if node.tag in _CHECKED_SCALARS:
            try:
                self.loader.construct_object(node)
            except (ValueError, OverflowError, yaml.YAMLError) as exc:
                raise self.error(
                    path,
                    f"{_key_text(node)!r} is not a valid YAML {node.tag.rsplit(':')[-1]}"
                    f" ({str(exc).splitlines()[0][:80]})",
                ) from None
        return []

    def _mapping_children(self, node: yaml.MappingNode, path: str) -> list[tuple[yaml.Node, str]]:
        children: list[tuple[yaml.Node, str]] = []
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                children.append((value_node, path))  # `<<: *base`: merged keys may be overridden
                continue
            name = _key_text(key_node)
            identity: Any = (key_node.tag, key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            if identity is not None:
                first = seen.get(identity)
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise self.error(
                        _join(path, name),
                        f"duplicate key (lines {first} and {line}); YAML would keep only the last one",
                    )
                seen[identity] = line
            children.append((key_node, _join(path, name)))
            children.append((value_node, _join(path, name)))
        return children

    def _finish(self, node: yaml.Node, path: str) -> None:
        size, height = 1, 1
        if isinstance(node, yaml.SequenceNode | yaml.MappingNode):
            children = (
                node.value
                if isinstance(node, yaml.SequenceNode)
                else [part for pair in node.value for part in pair]
            )
            for child in children:
                child_size, child_height = self.sizes[id(child)]
                size += child_size
                height = max(height, child_height + 1)
        if size > self.limits.max_nodes:
            raise self.error(
                path,
                f"the document expands to more than {self.limits.max_nodes:,} YAML nodes (aliases included)",
            )
        if height > self.limits.max_depth:
            raise self.error(path, f"nested deeper than {self.limits.max_depth} levels")
        self.sizes[id(node)] = (size, height)


def parse_yaml(text: str, what: str, limits: DocumentLimits = CONFIG_LIMITS) -> Any:
    """Parse one YAML (or JSON) document with the checks above; ``what`` names it in errors."""
    if len(text) > limits.max_bytes:
        raise SpecError(
            f"<root>: {what} is {len(text):,} characters, more than the {limits.max_bytes:,} allowed"
        )
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _Walk(loader, what, limits).run(node)
        return loader.construct_document(node)
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
        document = parse_yaml(read_text_file(source, what, limits), what, limits)
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
