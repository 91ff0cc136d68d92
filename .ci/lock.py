"""Print the constraints file: the exact version of every distribution korral[test] needs, as installed here.

Run by ``make lock`` with the virtualenv's Python; ``make setup`` installs with
``pip install -c constraints.txt``. The versions come from the installed metadata
(``importlib.metadata``), not from ``pip freeze``, so the output holds only
``name==version`` lines: no index options, no local paths or URLs, not the editable
korral itself. Only korral's requirements (with the ``test`` extra) and theirs, markers
evaluated for this interpreter, are written: anything else installed in the virtualenv
by hand is left out and named on stderr.
"""

from __future__ import annotations

import platform
import re
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = "korral"
EXTRAS = ("test",)
NOT_PINNED = {"pip"}  # the installer itself; never a requirement of a package
LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*")


def installed() -> dict[str, metadata.Distribution]:
    dists: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            dists.setdefault(canonicalize_name(name), dist)
    return dists


def closure(dists: dict[str, metadata.Distribution]) -> dict[str, metadata.Distribution]:
    """Every installed distribution reachable from korral[test], markers and extras honoured."""
    needed: dict[str, metadata.Distribution] = {}
    todo = [(canonicalize_name(ROOT), set(EXTRAS))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        dist = dists.get(name)
        if dist is None:
            sys.exit(f"lock: {name} is required but not installed: run make setup first")
        needed[name] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                continue
            todo.append((canonicalize_name(req.name), set(req.extras)))
    return needed


def main() -> int:
    dists = installed()
    needed = closure(dists)
    lines = []
    for name, dist in sorted(needed.items()):
        if name == canonicalize_name(ROOT) or name in NOT_PINNED:
            continue
        line = f"{dist.metadata['Name']}=={dist.version}"
        if not LINE.fullmatch(line):
            sys.exit(f"lock: refusing to write {line!r}: not a plain name==version")
        lines.append(line)
    extra = sorted(set(dists) - set(needed) - NOT_PINNED - {"setuptools", "wheel"})
    if extra:
        print(f"lock: installed but not required by {ROOT}[{','.join(EXTRAS)}], left out: {', '.join(extra)}", file=sys.stderr)
    print("# Exact versions of every distribution korral[test] needs, incl. transitive ones; written by `make lock`.")
    print("# `make setup` installs with `pip install -c constraints.txt`; `make setup CONSTRAINTS=` ignores this file")
    print("# and installs the newest versions pyproject.toml allows. See docs/testing.md.")
    print(f"# Resolved on Python {platform.python_version()} ({sys.platform}, {platform.machine()}).")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
