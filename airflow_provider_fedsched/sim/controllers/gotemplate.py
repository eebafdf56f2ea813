"""A subset of Go's ``text/template``: what kwok Stage patch templates need, rendered in Python.

Supported: text and ``{{ }}`` actions with ``{{-``/``-}}`` trimming and ``{{/* comments */}}``;
pipelines (``a | f b``) of fields (``.a.b``, ``$x.a``, ``(pipeline).a``), variables (``$x := ...``,
``$x = ...``, ``$``), string, raw-string, number and ``true``/``false``/``nil`` literals, and calls of
the functions given to :func:`render` (Go's built-ins ``and``, ``or``, ``not``, ``eq``, ``ne``, ``lt``,
``le``, ``gt``, ``ge``, ``index``, ``len``, ``print``, ``printf`` are always there);
``if``/``else if``/``else``/``end`` and ``range`` (over a list, a map by sorted key, or an integer; with
``$i, $e :=``; with ``else``). Anything else (``with``, ``define``, ``template``, ``block``, ``break``) is
a :class:`TemplateError`.

As in Go, a missing map key is ``nil`` and prints ``<no value>``; unlike Go, a field of ``nil`` is ``nil``
rather than an error (the stages only read fields that kwok's typed pods always have).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Func = Callable[..., Any]


class TemplateError(ValueError):
    pass


# -- lexing ----------------------------------------------------------------------------------------------
_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN = re.compile(
    r"""(?P<space>\s*)(?:
    (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
  | (?P<declare>:=)
  | (?P<assign>=)
  | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<field>(?:\.[A-Za-z0-9_]+)+|\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[|(),])
)""",
    re.X,
)
_KEYWORDS = {"if", "else", "end", "range"}
_UNSUPPORTED = {"with", "define", "template", "block", "break", "continue"}


def _tokens(source: str) -> list[tuple[str, str]]:
    """(kind, text) of each token; a field right after ``)`` (no space) is a ``chain`` on it."""
    out: list[tuple[str, str]] = []
    pos = 0
    source = source.rstrip()
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None or match.end() == pos:
            raise TemplateError(f"unexpected {source[pos:]!r} in action")
        kind = next(k for k, v in match.groupdict().items() if k != "space" and v is not None)
        text = match.group(kind)
        if kind == "field" and not match.group("space") and out and out[-1] == ("punct", ")"):
            kind = "chain"
        out.append((kind, text))
        pos = match.end()
    return out


# -- the tree --------------------------------------------------------------------------------------------
@dataclass
class Command:
    args: list[Any]  # each a ("kind", value) operand, a nested Pipeline, or ("chain", base, fields)


@dataclass
class Pipeline:
    commands: list[Command]
    declare: list[str] = field(default_factory=list)
    assign: bool = False


@dataclass
class If:
    branches: list[tuple[Pipeline, list[Any]]]
    otherwise: list[Any]


@dataclass
class Range:
    pipeline: Pipeline
    body: list[Any]
    otherwise: list[Any]


class _Parser:
    def __init__(self, text: str) -> None:
        self.items: list[tuple[str, Any]] = []
        pos = 0
        for match in _ACTION.finditer(text):
            before = text[pos : match.start()]
            if match.group(1):
                before = before.rstrip()
            if self.items and self.items[-1][0] == "trim-next":
                self.items.pop()
                before = before.lstrip()
            if before:
                self.items.append(("text", before))
            body = match.group(2).strip()
            if not (body.startswith("/*") and body.endswith("*/")):
                self.items.append(("action", body))
            pos = match.end()
            if match.group(3):
                self.items.append(("trim-next", None))
        rest = text[pos:]
        if self.items and self.items[-1][0] == "trim-next":
            self.items.pop()
            rest = rest.lstrip()
        if rest:
            self.items.append(("text", rest))
        self.pos = 0

    def parse(self) -> list[Any]:
        nodes, end = self._list()
        if end is not None:
            raise TemplateError(f"unexpected {{{{ {end} }}}}")
        return nodes

    def _list(self) -> tuple[list[Any], str | None]:
        """Nodes up to an ``else``/``end`` (returned as the action's text) or the end of the template."""
        nodes: list[Any] = []
        while self.pos < len(self.items):
            kind, value = self.items[self.pos]
            self.pos += 1
            if kind == "text":
                nodes.append(value)
                continue
            word = value.split(None, 1)[0] if value else ""
            if word in ("end", "else"):
                return nodes, value
            if word in _UNSUPPORTED:
                raise TemplateError(f"{{{{ {word} }}}} is not supported")
            if word == "if":
                nodes.append(self._if(value[2:]))
            elif word == "range":
                nodes.append(self._range(value[5:]))
            else:
                nodes.append(_pipeline(_tokens(value)))
        return nodes, None

    def _if(self, condition: str) -> If:
        branches: list[tuple[Pipeline, list[Any]]] = []
        otherwise: list[Any] = []
        while True:
            body, end = self._list()
            branches.append((_pipeline(_tokens(condition)), body))
            if end is None:
                raise TemplateError("unterminated {{ if }}")
            if end == "end":
                return If(branches, otherwise)
            rest = end[4:].strip()
            if rest.startswith("if "):
                condition = rest[3:]
                continue
            otherwise, end = self._list()
            if end != "end":
                raise TemplateError("{{ else }} not followed by {{ end }}")
            return If(branches, otherwise)

    def _range(self, source: str) -> Range:
        pipeline = _pipeline(_tokens(source))
        body, end = self._list()
        otherwise: list[Any] = []
        if end == "else":
            otherwise, end = self._list()
        if end != "end":
            raise TemplateError("unterminated {{ range }}")
        return Range(pipeline, body, otherwise)


def _pipeline(tokens: list[tuple[str, str]]) -> Pipeline:
    declare: list[str] = []
    assign = False
    # $x := ..., $x = ..., $i, $e := ...
    for size in (4, 2):
        head = tokens[:size]
        if size == 4 and [k for k, _ in head] == ["var", "punct", "var", "declare"] and head[1][1] == ",":
            declare, tokens = [head[0][1], head[2][1]], tokens[4:]
            break
        if size == 2 and [k for k, _ in head] in (["var", "declare"], ["var", "assign"]):
            declare, assign, tokens = [head[0][1]], head[1][0] == "assign", tokens[2:]
            break
    pipeline, rest = _commands(tokens)
    if rest:
        raise TemplateError(f"unexpected {rest[0][1]!r}")
    pipeline.declare, pipeline.assign = declare, assign
    return pipeline


def _commands(tokens: list[tuple[str, str]]) -> tuple[Pipeline, list[tuple[str, str]]]:
    """Commands separated by ``|`` up to an unmatched ``)``; returns what is left after it."""
    commands: list[Command] = [Command([])]
    while tokens:
        kind, value = tokens[0]
        if kind == "punct" and value == ")":
            break
        tokens = tokens[1:]
        if kind == "punct" and value == "|":
            commands.append(Command([]))
            continue
        if kind == "punct" and value == "(":
            inner, tokens = _commands(tokens)
            if not tokens or tokens[0][1] != ")":
                raise TemplateError("unclosed (")
            tokens = tokens[1:]
            operand: Any = inner
        elif kind == "punct":
            raise TemplateError(f"unexpected {value!r}")
        elif kind == "ident" and value in _KEYWORDS | _UNSUPPORTED:
            raise TemplateError(f"unexpected keyword {value!r}")
        else:
            operand = (kind, value)
        # Fields chained to a parenthesised pipeline: (index . 0).name
        if tokens and tokens[0][0] == "chain":
            operand = ("chain", operand, tokens[0][1])
            tokens = tokens[1:]
        commands[-1].args.append(operand)
    if any(not c.args for c in commands):
        raise TemplateError("empty command in pipeline")
    return Pipeline(commands), tokens


@functools.lru_cache(maxsize=128)
def parse(text: str) -> list[Any]:
    return _Parser(text).parse()


# -- evaluation ------------------------------------------------------------------------------------------
def truth(value: Any) -> bool:
    """Go's notion of true: not false, 0, nil, or an empty string, list or map."""
    return (
        value is not None
        and value is not False
        and value != 0
        and value != ""
        and value != []
        and value != {}
    )


def _fields(value: Any, chain: str) -> Any:
    for name in chain.strip(".").split("."):
        if not name:
            continue
        value = value.get(name) if isinstance(value, Mapping) else None
    return value


def text_of(value: Any) -> str:
    """How Go prints a value in a template."""
    if value is None:
        return "<no value>"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, list):
        return "[" + " ".join(text_of(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{text_of(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


_VERB = re.compile(r"%([-+# 0]*\d*(?:\.\d+)?)([vsdqfgtx%])")


def printf(fmt: str, *args: Any) -> str:
    queue = list(args)

    def one(match: re.Match[str]) -> str:
        flags, verb = match.groups()
        if verb == "%":
            return "%"
        if not queue:
            return f"%!{verb}(MISSING)"
        arg = queue.pop(0)
        if verb in "vst":
            return ("%" + flags + "s") % text_of(arg)
        if verb == "q":
            return json.dumps(text_of(arg))
        if verb in "dx":
            return ("%" + flags + verb) % int(arg)
        return ("%" + flags + verb) % float(arg)

    return _VERB.sub(one, fmt)


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(value, Mapping):
            value = value.get(key)
        elif isinstance(value, list):
            if not isinstance(key, int) or not 0 <= key < len(value):
                raise TemplateError(f"index out of range: {key}")
            value = value[key]
        elif value is None:
            return None
        else:
            raise TemplateError(f"can't index item of type {type(value).__name__}")
    return value


def _eq(first: Any, *others: Any) -> bool:
    return any(first == other for other in others)


BUILTINS: dict[str, Func] = {
    "and": lambda *a: next((v for v in a if not truth(v)), a[-1]),
    "or": lambda *a: next((v for v in a if truth(v)), a[-1]),
    "not": lambda v: not truth(v),
    "eq": _eq,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "index": _index,
    "len": len,
    "print": lambda *a: "".join(text_of(v) for v in a),
    "printf": printf,
}


class _Scope:
    def __init__(self, funcs: Mapping[str, Func], root: Any) -> None:
        self.funcs = funcs
        self.frames: list[dict[str, Any]] = [{"$": root}]

    def lookup(self, name: str) -> Any:
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise TemplateError(f"undefined variable: {name}")

    def assign(self, name: str, value: Any) -> None:
        for frame in reversed(self.frames):
            if name in frame:
                frame[name] = value
                return
        raise TemplateError(f"undefined variable: {name}")


def _operand(arg: Any, dot: Any, scope: _Scope) -> Any:
    if isinstance(arg, Pipeline):
        return _run(arg, dot, scope)
    kind, value = arg[0], arg[1]
    if kind == "chain":
        return _fields(_operand(value, dot, scope), arg[2])
    if kind == "field":
        return dot if value == "." else _fields(dot, value)
    if kind == "var":
        name, _, chain = value.partition(".")
        found = scope.lookup(name)
        return _fields(found, chain) if chain else found
    if kind == "string":
        return json.loads(value)
    if kind == "raw":
        return value[1:-1]
    if kind == "number":
        return float(value) if any(c in value for c in ".eE") else int(value)
    if kind == "ident":
        if value in ("true", "false"):
            return value == "true"
        if value == "nil":
            return None
        return _call(value, [], scope)
    raise TemplateError(f"unexpected operand {value!r}")


def _call(name: str, args: list[Any], scope: _Scope) -> Any:
    func = scope.funcs.get(name) or BUILTINS.get(name)
    if func is None:
        raise TemplateError(f'function "{name}" not defined')
    try:
        return func(*args)
    except TemplateError:
        raise
    except Exception as exc:  # a function's own failure, as Go reports "error calling X"
        raise TemplateError(f"error calling {name}: {exc}") from exc


def _run(pipeline: Pipeline, dot: Any, scope: _Scope) -> Any:
    value: Any = None
    for position, command in enumerate(pipeline.commands):
        head = command.args[0]
        piped = [value] if position else []
        if isinstance(head, tuple) and head[0] == "ident" and head[1] not in ("true", "false", "nil"):
            args = [_operand(a, dot, scope) for a in command.args[1:]]
            value = _call(head[1], args + piped, scope)
        elif len(command.args) == 1 and not piped:
            value = _operand(head, dot, scope)
        else:
            raise TemplateError("can't give arguments to a non-function")
    return value


def _execute(nodes: list[Any], dot: Any, scope: _Scope, out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, Pipeline):
            value = _run(node, dot, scope)
            if node.assign:
                scope.assign(node.declare[0], value)
            elif node.declare:
                scope.frames[-1][node.declare[-1]] = value
            else:
                out.append(text_of(value))
        elif isinstance(node, If):
            for condition, body in node.branches:
                scope.frames.append({})
                taken = truth(_run(condition, dot, scope))
                if taken:
                    _execute(body, dot, scope, out)
                scope.frames.pop()
                if taken:
                    break
            else:
                scope.frames.append({})
                _execute(node.otherwise, dot, scope, out)
                scope.frames.pop()
        elif isinstance(node, Range):
            _range(node, dot, scope, out)


def _range(node: Range, dot: Any, scope: _Scope, out: list[str]) -> None:
    value = _run(node.pipeline, dot, scope)
    items: list[tuple[Any, Any]]
    if isinstance(value, Mapping):
        items = [(k, value[k]) for k in sorted(value)]
    elif isinstance(value, list):
        items = list(enumerate(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [(i, i) for i in range(value)]
    elif value is None:
        items = []
    else:
        raise TemplateError(f"range can't iterate over {text_of(value)}")
    if not items:
        scope.frames.append({})
        _execute(node.otherwise, dot, scope, out)
        scope.frames.pop()
        return
    names = node.pipeline.declare
    for key, item in items:
        frame: dict[str, Any] = {}
        if len(names) == 2:
            frame[names[0]], frame[names[1]] = key, item
        elif names:
            frame[names[0]] = item
        scope.frames.append(frame)
        _execute(node.body, item, scope, out)
        scope.frames.pop()


def render(text: str, data: Any, funcs: Mapping[str, Func] | None = None) -> str:
    """``text`` executed against ``data`` with ``funcs`` (and Go's built-ins) callable by name."""
    out: list[str] = []
    _execute(parse(text), data, _Scope(funcs or {}, data), out)
    return "".join(out)
