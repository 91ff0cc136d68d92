"""Safe, bounded YAML reading for queues.yaml.

Why not ``yaml.safe_load``: it types scalars by YAML 1.1 rules (``yes`` becomes
true, ``010`` becomes 8), takes the last of duplicate keys silently, and
libyaml's composer recurses in C, so a deeply nested document crashes the
process. Here the C event parser is driven by an iterative composer that keeps
every scalar as text (the config loader types each field itself), rejects
duplicate keys like Go's yaml.v2 does, bounds nesting depth and the number of
nodes (aliases count each time they are used, so an alias bomb is cut short).
"""

from __future__ import annotations

import yaml
from yaml import events as ev

__all__ = ["YamlError", "read_yaml", "MAX_NESTING", "MAX_NODES"]

MAX_NESTING = 256  # mapping/sequence levels; queues nest 2 levels per queue level
MAX_NODES = 2_000_000  # scalars + containers, alias uses included

_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_Parser = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


class YamlError(ValueError):
    """The text is not YAML this loader accepts; the message says where and why."""


def _where(event: ev.Event) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"


def read_yaml(text: str) -> object:
    """Compose the first YAML document of ``text`` into dict/list/str/None values.

    A document that is empty gives ``None``; a second document is an error.
    Raises ``YamlError`` for syntax errors, duplicate keys, unknown aliases, too
    deep nesting or too many nodes.
    """
    try:
        return _compose(yaml.parse(text, Loader=_Parser))
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
                raise YamlError(f"invalid YAML at {_where(event)}: nesting deeper than {MAX_NESTING} levels")
            container = {} if isinstance(event, ev.MappingStartEvent) else []
            stack.append([container, _NO_KEY, event.anchor, event])
        elif isinstance(event, (ev.MappingEndEvent, ev.SequenceEndEvent)):
            container, _key, anchor, start = stack.pop()
            if anchor:
                anchors[anchor] = container
            attach(container, start)
    return result


def _size(value: object) -> int:
    """Rough node count of an already composed value, bounded to stop early."""
    if isinstance(value, dict):
        return 1 + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, list):
        return 1 + sum(_size(v) for v in value)
    return 1
