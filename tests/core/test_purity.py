"""The core is pure (STYLE #1, #2): no I/O, clock, randomness or logging in its import graph.

Two checks. Importing ``partition_worker.core`` in a fresh interpreter must not load any of
the forbidden modules. ``os`` and ``time`` are loaded by the interpreter itself before any
project code runs, so that check cannot see them; the honest check is the second one: the
source of every module the core can reach inside the project (``partition_worker.core``,
``partition_worker.placement`` and the ``common`` modules they import, followed through
every import statement, including ones inside functions) imports none of them.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

FORBIDDEN = frozenset({"zmq", "redis", "grpc", "time", "random", "uuid", "os", "logging", "pwd",
                       "grp", "socket"})
# the project's own modules must not import these either (third-party ones may: yaml loads
# datetime for timestamps it never sees in a queues.yaml)
FORBIDDEN_IN_SOURCE = FORBIDDEN | {"threading", "subprocess", "asyncio", "secrets", "datetime", "io",
                                   "pathlib", "shutil", "signal", "select", "selectors",
                                   "tempfile", "multiprocessing", "concurrent", "orjson", "msgpack"}
ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("partition_worker", "common")
CORE_PACKAGES = ("partition_worker.core", "partition_worker.placement")


def test_importing_the_core_loads_no_io_clock_or_randomness_module() -> None:
    code = ("import json, sys; before = set(sys.modules); import partition_worker.core; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60)
    loaded = json.loads(out.stdout)
    assert "partition_worker.core.partition" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN) == []


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of the modules ``path`` (module ``name``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            found.add(mod)
            # ``from package import module`` imports a submodule
            found.update(f"{mod}.{alias.name}" for alias in node.names
                         if _module_file(f"{mod}.{alias.name}") is not None)
    return found


def _reachable() -> dict[str, set[str]]:
    """Every project module the core can import -> the modules it imports."""
    todo = [f"{pkg}.{p.stem}" if p.name != "__init__.py" else pkg
            for pkg in CORE_PACKAGES for p in ROOT.joinpath(*pkg.split(".")).glob("*.py")]
    seen: dict[str, set[str]] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        seen[name] = _imports(name, path)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run too
        todo.extend(m for m in seen[name] if m.split(".")[0] in PROJECT)
    return seen


def test_no_module_the_core_can_reach_imports_io_clock_randomness_or_logging() -> None:
    reachable = _reachable()
    assert "partition_worker.core.feasibility" in reachable and "common.resources" in reachable
    assert "partition_worker.session" not in reachable and "partition_worker.os_groups" not in reachable
    bad = {name: sorted(m for m in imports if m.split(".")[0] in FORBIDDEN_IN_SOURCE)
           for name, imports in reachable.items()}
    assert {k: v for k, v in bad.items() if v} == {}
