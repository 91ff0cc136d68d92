"""The module map's rules (docs/architecture.md), checked on every import statement of the tree.

- ``common/`` is the library everyone shares: it imports nothing above it;
- the processes (``broker``, ``rmproxy.server``, ``partition_worker``) do not import each other;
- the RM side (``rmproxy.client``, ``rmproxy.sim``, ``rmproxy.bench``, ``rmproxy.k8s``) does not import the
  rmproxy server or a worker: it speaks to them over gRPC and REST like any RM;
- the scheduling core and the placement rules import no process code (their purity, no I/O and
  no clock, is checked by tests/core/test_purity.py);
- ``common.cli`` starts the processes by module name (``korral broker|rmproxy|worker``), never by
  an import statement.
Function-level imports count as much as top-level ones.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "broker", "partition_worker", "rmproxy")

# area -> the areas its modules may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "common.cli": {"common"},
    "broker": {"common"},
    "partition_worker": {"common", "partition_worker.core", "partition_worker.placement"},
    "partition_worker.core": {"common", "partition_worker.placement"},
    "partition_worker.placement": {"common"},
    "rmproxy": {"common"},
    "rmproxy.server": {"common"},
    "rmproxy.client": {"common"},
    "rmproxy.sim": {"common", "rmproxy.client"},
    "rmproxy.k8s": {"common", "rmproxy.client"},
    "rmproxy.bench": {"common", "common.cli", "rmproxy.client", "rmproxy.k8s"},
    "rmproxy.k8s.fake": {"common"},  # the fake API server: never the shim it is a test bed for
}
SUBAREAS = {"common": ("cli",), "partition_worker": ("core", "placement"),
            "rmproxy": ("server", "client", "sim", "bench", "k8s")}


NESTED = {"rmproxy.k8s": ("fake",)}


def area(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[2] in NESTED.get(f"{parts[0]}.{parts[1]}", ()):
        return ".".join(parts[:3])
    if len(parts) > 1 and parts[1] in SUBAREAS.get(parts[0], ()):
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a project module in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return [(line, m) for line, m in found if m.split(".")[0] in PACKAGES]


SOURCES = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py") if "_pb2" not in p.name)


def test_every_area_of_the_tree_is_in_the_rules():
    assert {area(module_name(p)) for p in SOURCES} == set(ALLOWED)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_follow_the_module_map(path: Path):
    here = area(module_name(path))
    wrong = [f"{path.relative_to(REPO)}:{line} imports {m} ({area(m)}), which {here} may not import"
             for line, m in imports(path) if area(m) != here and area(m) not in ALLOWED[here]]
    assert not wrong, "\n".join(wrong)


def test_the_cli_names_real_modules_for_the_processes_it_starts():
    from common.cli import SUBCOMMANDS

    for name, (module, _) in SUBCOMMANDS.items():
        assert importlib.util.find_spec(module) is not None, f"korral {name}: no module {module}"


def test_the_rules_catch_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rmproxy.server.proxy import Proxy\n")
    [(line, module)] = imports(bad)
    assert line == 2 and area(module) == "rmproxy.server" and area(module) not in ALLOWED["common"]
