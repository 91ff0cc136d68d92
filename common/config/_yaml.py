"""Safe, bounded YAML reading for queues.yaml.

Why not ``yaml.safe_load``: it types scalars by YAML 1.1 rules (``yes`` becomes
true, ``010`` becomes 8), takes the last of duplicate keys silently, and
libyaml's composer recurses in C, so a deeply nested document crashes the
process. Here the C event parser is driven by an iterative composer that keeps
every scalar as text (the config loader types each field itself), rejects
duplicate keys like Go's yaml.v2 does, bounds nesting depth and the number of
nodes (aliases count each time they are used, so an alias bomb is cut short).

Nesting depth is measured before parsing (``_nesting``), so the limit and its
message are Korral's whatever the PyYAML/libyaml version; a parser that still
gives up on depth (its own limit, or ``RecursionError``) is reported the same way.
"""

from __future__ import annotations

import re

import yaml
from yaml import events as ev

from common.config._nesting import first_too_deep

__all__ = ["YamlError", "read_yaml", "MAX_NESTING", "MAX_NODES"]

MAX_NESTING = 256  # mapping/sequence levels; queues nest 2 levels per queue level
MAX_NODES = 2_000_000  # scalars + containers, alias uses included

_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_Parser = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
# libyaml >= 0.2.5: "exceeded maximum nesting depth"; matched loosely so a reworded one still maps.
_PARSER_DEPTH = re.compile(r"nesting|depth", re.IGNORECASE)


class YamlError(ValueError):
    """The text is not YAML this loader accepts; the message says where and why."""


def _where(event: ev.Event) -> str:
    return _at(event.start_mark)


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"


def _too_deep(where: str) -> YamlError:
    return YamlError(f"invalid YAML at {where}: nesting deeper than {MAX_NESTING} levels")


def read_yaml(text: str) -> object:
    """Compose the first YAML document of ``text`` into dict/list/str/None values.

    A document that is empty gives ``None``; a second document is an error.
    Raises ``YamlError`` for syntax errors, duplicate keys, unknown aliases, too
    deep nesting or too many nodes.
    """
    deep = first_too_deep(text, MAX_NESTING)
    if deep is not None:
        raise _too_deep(f"line {deep[0]}, column {deep[1]}")
    try:
        return _compose(yaml.parse(text, Loader=_Parser))
    except yaml.MarkedYAMLError as exc:
        if exc.problem and _PARSER_DEPTH.search(exc.problem):
            raise _too_deep(_at(exc.problem_mark)) from None
        raise YamlError(f"invalid YAML: {exc}") from None
    except yaml.YAMLError as exc:
        raise YamlError(f"invalid YAML: {exc}") from None


def _compose(stream) -> object:
    anchors: dict[str, object] = {}
    # Each frame: [container, pending_key_or_marker, anchor, start_event]
    stack: list[list] = []
    result: object = None
    have_doc = False
    nodes = 0
    _NO_KEY = object()
    event: ev.Event | None = None

    def attach(value: object, event: ev.Event) -> None:
        nonlocal result
        if not stack:
            result = value
            return
        frame = stack[-1]
        container = frame[0]
        if isinstance(container, list):
            container.append(value)
        elif frame[1] is _NO_KEY:
            if not isinstance(value, str):
                raise YamlError(f"invalid YAML at {_where(event)}: a mapping key must be a plain value")
            if value in container:
                raise YamlError(f"invalid YAML at {_where(event)}: key '{value}' already set in this mapping")
            frame[1] = value
        else:
            container[frame[1]] = value
            frame[1] = _NO_KEY

    try:
        for event in stream:
            if isinstance(event, (ev.StreamStartEvent, ev.StreamEndEvent, ev.DocumentEndEvent)):
                continue
            if isinstance(event, ev.DocumentStartEvent):
                if have_doc:
                    raise YamlError(f"invalid YAML at {_where(event)}: only one document is allowed")
                have_doc = True
                continue
            nodes += 1
            if nodes > MAX_NODES:
                raise YamlError(f"config too large: more than {MAX_NODES} YAML nodes (aliases included)")
            if isinstance(event, ev.ScalarEvent):
                value: object = event.value
                if not event.style and event.implicit[0] and event.value in _NULLS:
                    value = None
                if event.anchor:
                    anchors[event.anchor] = value
                attach(value, event)
            elif isinstance(event, ev.AliasEvent):
                if event.anchor not in anchors:
                    raise YamlError(f"invalid YAML at {_where(event)}: unknown alias '{event.anchor}'")
                value = anchors[event.anchor]
                nodes += _size(value)
                if nodes > MAX_NODES:
                    raise YamlError(f"config too large: more than {MAX_NODES} YAML nodes (aliases included)")
                attach(value, event)
            elif isinstance(event, (ev.MappingStartEvent, ev.SequenceStartEvent)):
                if len(stack) >= MAX_NESTING:
                    raise _too_deep(_where(event))
                container = {} if isinstance(event, ev.MappingStartEvent) else []
                stack.append([container, _NO_KEY, event.anchor, event])
            elif isinstance(event, (ev.MappingEndEvent, ev.SequenceEndEvent)):
                container, _key, anchor, start = stack.pop()
                if anchor:
                    anchors[anchor] = container
                attach(container, start)
    except RecursionError:
        # A recursive parser gave up on depth: report it where the last event was read.
        raise _too_deep(_where(event) if event is not None else "unknown position") from None
    return result


def _size(value: object) -> int:
    """Rough node count of an already composed value, bounded to stop early."""
    if isinstance(value, dict):
        return 1 + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, list):
        return 1 + sum(_size(v) for v in value)
    return 1
