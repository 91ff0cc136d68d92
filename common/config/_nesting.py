"""Nesting depth of YAML text, measured before any YAML parser sees it.

Why a pre-scan: what a parser does with 5,000 levels of ``[`` depends on its
version. libyaml 0.2.5 (bundled with recent PyYAML wheels) stops at 1,000
levels with its own ``exceeded maximum nesting depth``, and it does so before
the composer in ``_yaml`` has seen level 257, because its scanner looks ahead up
to 1,024 characters on a line for a possible simple key. Older libyaml has no
limit, pure-Python parsers take seconds on such input, and recursive composers
end in ``RecursionError``. So the depth is measured here first, the same way on
every machine, and the reader reports Korral's own limit with the line.

The scan is a small line-based tokenizer: block collections from indentation
and the ``- ``, ``? ``, ``key:`` indicators (compact forms like ``- - a`` or
``- key: v`` included), flow collections from ``[`` ``{`` ``]`` ``}``. It skips
comments, quoted scalars (also over several lines), block scalars (``|``,
``>``) and the continuation lines of plain scalars, so brackets and dashes in
text do not count. It counts the mappings and sequences
the composer would open, and never more on well-formed YAML; on shapes it
does not model (a flow collection used as a key, say) it counts fewer, and the
composer's own bound still applies.
"""

from __future__ import annotations

import re

__all__ = ["first_too_deep"]

# YAML 1.1 line breaks, as libyaml counts lines: CR LF, CR, LF, NEL, LS, PS.
_LINE_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")
_FLOW_TOKEN = re.compile(r"""[\[\]{},:?'"#]""")
_PROPERTIES = re.compile(r"(?:[ \t]*[&!]\S*)*[ \t]*")  # anchors and tags before a node
_KEY_END = re.compile(r"[ \t]*:(?=[ \t]|$)")  # after a quoted scalar: it was a mapping key
_PLAIN_END = re.compile(r":(?=[ \t]|$)|[ \t]#")  # in a block plain scalar: a key ends, or a comment starts
_BLOCK_SCALAR = re.compile(r"[|>][-+0-9]*[ \t]*(?:#.*)?$")
_QUOTED_END = {
    "'": re.compile(r"(?:[^']|'')*'(?!')"),
    '"': re.compile(r'(?:[^"\\]|\\.)*"'),
}


class _TooDeep(Exception):
    def __init__(self, column: int) -> None:
        self.column = column


def first_too_deep(text: str, limit: int) -> tuple[int, int] | None:
    """Line and column (1-based) of the first mapping or sequence nested deeper than ``limit``.

    ``None`` when the text nests ``limit`` levels or fewer. Runs in time linear
    in the text and never raises on malformed YAML (the parser reports that).
    """
    scan = _Scan(limit)
    for number, line in enumerate(_LINE_BREAK.split(text.lstrip("\ufeff"))):
        try:
            scan.line(line)
        except _TooDeep as deep:
            return number + 1, deep.column + 1
    return None


class _Scan:
    """State carried from line to line: open block collections, flow level, an open quote or block scalar."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.block: list[tuple[int, str]] = []  # (column, "map" | "seq") of each open block collection
        self.flow = 0  # open flow collections
        self.quote = ""  # the quote character of a quoted scalar that continues on the next line
        self.literal: int | None = None  # inside a block scalar: lines indented more than this belong to it
        self.plain: int | None = None  # after a plain scalar value: lines indented more than this continue it

    def line(self, s: str) -> None:
        if self.quote:
            end = _QUOTED_END[self.quote].match(s)
            if end is None:
                return
            self.quote = ""
            if self.flow:
                self._flow(s, end.end())
            return  # a multi-line quoted scalar cannot be a key: the rest is a comment or an error
        if self.literal is not None:
            indent = len(s) - len(s.lstrip(" "))
            if not s.strip() or indent > self.literal:
                return
            self.literal = None
        if self.plain is not None:
            body = s.lstrip(" ")
            if not body.strip():
                return
            if len(s) - len(body) > self.plain and body[0] != "#":
                return  # "a: x" then "  - y" is the scalar "x - y", not a sequence
            self.plain = None
        if self.flow:
            self._flow(s, 0)
            return
        body = s.lstrip(" ")
        indent = len(s) - len(body)
        if not body.strip() or body[0] == "#":
            return
        start = indent
        if indent == 0 and s[:3] in ("---", "...") and s[3:4] in ("", " ", "\t"):
            self.block.clear()  # a document marker: the next node is at the top again
            start = 3
        elif indent == 0 and s[0] == "%" and not self.block:
            return  # a directive
        while self.block and self.block[-1][0] > indent:
            self.block.pop()
        self._nodes(s, start, first=start == indent)

    def _nodes(self, s: str, i: int, *, first: bool) -> None:
        """Block context from ``s[i]``: indicators and keys open collections; a value ends the line."""
        n = len(s)
        node = -1  # where the current node starts: its anchor or tag, if any, comes first
        while True:
            while i < n and s[i] in " \t":
                i += 1
            if i >= n:
                return
            if node < 0:
                node = i
            c = s[i]
            if c in "-?:" and s[i + 1 : i + 2] in ("", " ", "\t"):
                self._open(node, "seq" if c == "-" else "map", first)
                first, node = False, -1
                i += 1
                continue
            if c in "[{":
                self._flow(s, i)
                return
            if c in "'\"":
                end = _QUOTED_END[c].match(s, i + 1)
                if end is None:
                    self.quote = c
                    return
                key = _KEY_END.match(s, end.end())
                if key is None:
                    return
                self._open(node, "map", first)
                first, node = False, -1
                i = key.end()
                continue
            if c in "|>":
                if _BLOCK_SCALAR.match(s, i):
                    self.literal = self.block[-1][0] if self.block else -1
                return
            if c in "&!":
                while i < n and s[i] not in " \t":
                    i += 1
                continue
            if c == "#":
                return
            stop = _PLAIN_END.search(s, i)
            if stop is None:
                self.plain = self.block[-1][0] if self.block else -1
                return
            if stop.group() != ":":
                return
            self._open(node, "map", first)
            first, node = False, -1
            i = stop.end()

    def _open(self, column: int, kind: str, first: bool) -> None:
        """A block collection of ``kind`` at ``column``, unless it continues the one open there."""
        block = self.block
        if first and block and block[-1][0] == column:
            if kind == "map" and block[-1][1] == "seq" and len(block) > 1 and block[-2] == (column, "map"):
                block.pop()  # a sequence written at its key's indentation ends at the next key
            if block[-1][1] == kind:
                return
        block.append((column, kind))
        if len(block) + self.flow > self.limit:
            raise _TooDeep(column)

    def _flow(self, s: str, i: int) -> None:
        """Flow context from ``s[i]`` to the end of the line, or until the outermost flow collection closes."""
        bound = i  # where the current node may start: after an indicator, or the line start
        while True:
            token = _FLOW_TOKEN.search(s, i)
            if token is None:
                return
            j = token.start()
            c = s[j]
            i = j + 1
            if c in "[{":
                self.flow += 1
                if len(self.block) + self.flow > self.limit:
                    raise _TooDeep(j)
                bound = i
            elif c in "]}":
                self.flow = max(0, self.flow - 1)
                if self.flow == 0:
                    return  # back in block context; the rest is at most a comment
                bound = i
            elif c in ",:?":
                bound = i
            elif c == "#":
                if j == 0 or s[j - 1] in " \t":
                    return
            elif _PROPERTIES.fullmatch(s, bound, j):  # a quote that starts a node
                end = _QUOTED_END[c].match(s, i)
                if end is None:
                    self.quote = c
                    return
                i = bound = end.end()
