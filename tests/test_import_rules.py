"""The module map's rules (docs/architecture.md), checked on every import statement of the tree.

- ``common/`` is the library everyone shares: it imports nothing above it;
- the processes (``broker``, ``rmproxy``, ``partition_worker``) do not import each other;
- the two sides of the SI stay apart: the RM side (``si_client``, the library every Python RM uses;
  the RMs ``k8s_shim``, ``simulator``, ``benchmarks``) does not import the rmproxy server or a worker
  (it speaks to them over gRPC and REST like any RM), and the server side (``rmproxy``, ``broker``,
  ``partition_worker``) never imports an RM or the client library;
- the scheduling core and the placement rules import no process code (their purity, no I/O and
  no clock, is checked by tests/core/test_purity.py);
- ``common.cli`` starts the processes by module name (``korral broker|rmproxy|worker``), never by
  an import statement;
- inside rmproxy's server, its parts are wired by ``proxy.py`` and given each other as protocols:
  the broker side, the RM registry, the router and the config changes import none of each other;
  the REST API (``webapi``) sees the rest of rmproxy only through its ``seams`` and the small value
  modules (``SERVER_PARTS``).
- no modules anywhere in the tree import each other in a loop (nor inside the core, where the
  partition's parts also do not reach back into the partition or the cycle).
Function-level and type-only imports count as much as top-level ones.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "broker", "partition_worker", "rmproxy", "si_client", "k8s_shim", "simulator", "benchmarks")

# area -> the areas its modules may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "common.cli": {"common"},
    "broker": {"common"},
    "partition_worker": {"common", "partition_worker.core", "partition_worker.placement"},
    "partition_worker.core": {"common", "partition_worker.placement"},
    "partition_worker.placement": {"common"},
    "rmproxy": {"common"},
    "si_client": {"common"},
    "simulator": {"common", "common.cli", "si_client"},  # korral sim finds a stack as the CLI does
    "k8s_shim": {"common", "si_client", "k8s_shim.kube", "k8s_shim.watch", "k8s_shim.translate",
                 "k8s_shim.writes"},
    # inside the shim, one way: the API client, the informers, the readers, the writes
    "k8s_shim.kube": {"common"},
    "k8s_shim.watch": {"common", "si_client", "k8s_shim.kube"},
    "k8s_shim.translate": {"common", "k8s_shim.watch"},  # a reader hands the informer its decode
    "k8s_shim.writes": {"common", "si_client", "k8s_shim.kube", "k8s_shim.translate"},
    "benchmarks": {"common", "common.cli", "si_client", "k8s_shim", "k8s_shim.kube"},
    "k8s_shim.fake": {"common"},  # the fake API server: never the shim it is a test bed for
}
SUBAREAS = {"common": ("cli",), "partition_worker": ("core", "placement"),
            "k8s_shim": ("fake", "kube", "watch", "translate", "writes")}

# rmproxy's modules that the parts below may import (besides their own package and
# everything outside rmproxy); the REST API is given the rest as ``webapi.seams`` protocols.
_SERVER_VALUES = {"rmproxy.errors", "rmproxy.rms", "rmproxy.cluster_view",
                  "rmproxy.worker_requests"}
SERVER_PARTS: dict[str, set[str]] = {
    "rmproxy.webapi": _SERVER_VALUES,
    "rmproxy.broker_side": _SERVER_VALUES | {"rmproxy.broker_link"},
    "rmproxy.rm_registry": _SERVER_VALUES | {"rmproxy.revision"},
    "rmproxy.router": _SERVER_VALUES | {"rmproxy.revision", "rmproxy.split"},
    "rmproxy.config_changes": _SERVER_VALUES,
    "rmproxy.service": _SERVER_VALUES | {"rmproxy.revision", "rmproxy.split"},
}


def area(module: str) -> str:
    parts = module.split(".")
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
    bad.write_text("def f():\n    from rmproxy.proxy import Proxy\n")
    [(line, module)] = imports(bad)
    assert line == 2 and area(module) == "rmproxy" and area(module) not in ALLOWED["common"]


def _part(module: str) -> str | None:
    return next((p for p in SERVER_PARTS if module == p or module.startswith(p + ".")), None)


@pytest.mark.parametrize("path", [p for p in SOURCES if _part(module_name(p))], ids=lambda p: str(p.relative_to(REPO)))
def test_rmproxys_parts_reach_each_other_only_through_protocols(path: Path):
    here = _part(module_name(path))
    assert here is not None
    wrong = [f"{path.relative_to(REPO)}:{line} imports {m}, which {here} may not import (give it a protocol)"
             for line, m in imports(path)
             if m.startswith("rmproxy.") and _part(m) != here and m not in SERVER_PARTS[here]]
    assert not wrong, "\n".join(wrong)


def test_the_server_rules_catch_the_rest_api_reaching_for_the_proxy(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from rmproxy.proxy import Proxy\nfrom rmproxy.rm_registry import RMRegistry\n")
    assert [m for _, m in imports(bad) if m not in SERVER_PARTS["rmproxy.webapi"]] == [
        "rmproxy.proxy", "rmproxy.rm_registry"]

# ------------------------------------------------------------------ inside the scheduling core
CORE = REPO / "partition_worker" / "core"
# the read-only views over the whole partition (REST, explain, the config what-if) and the
# package's face: the only modules that may name the partition; its parts are given what they use
MAY_IMPORT_PARTITION = {"__init__", "dao", "dao_totals", "whatif"}
# the partition's books and the parts that keep them: none reaches up into the cycle
PARTS = {"ledger", "gang", "lifecycle", "node_registry", "foreign", "quota_preemption", "app_usage",
         "app_history", "timers", "limits", "queue", "application", "objects", "outcomes", "commands",
         "settings", "app_state", "placement_bridge", "namespace_tags"}
POLICIES = {"scheduler", "cycle", "reservations", "preemption", "node_choice", "backoff", "fair_share"}


def core_imports(path: Path) -> set[str]:
    """The core modules ``path`` imports, at any depth (``TYPE_CHECKING`` blocks and function
    bodies included), relative or absolute."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(a.name for a in node.names)
            elif node.module and node.module.startswith("partition_worker.core."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names
                         if a.name.startswith("partition_worker.core."))
    return found


CORE_GRAPH = {p.stem: core_imports(p) for p in sorted(CORE.glob("*.py"))}


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


MODULES = {module_name(p): p for p in SOURCES}


def house_imports(path: Path, here: str = "") -> set[str]:
    """The project modules ``path`` imports, at any depth (``TYPE_CHECKING`` blocks and function
    bodies included), relative or absolute; ``from package import name`` counts as an import of
    ``package.name`` when that is a module, else of the package. ``here``: the module's name
    (default: from its path in the tree)."""
    here = here or module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m for m in found if m in MODULES and m != here}


def test_the_house_has_no_import_circle():
    """Nowhere in the tree do modules import each other in a loop: move the shared piece down,
    or give the lower module what it uses (a protocol, a callback)."""
    found = circles({m: house_imports(p) for m, p in MODULES.items()})
    assert not found, f"import circles (type-only and function-level imports count): {[sorted(c) for c in found]}"


def test_the_house_rules_see_every_kind_of_import(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\nfrom . import stats\nfrom .cluster import SimCluster\n"
                   "if TYPE_CHECKING:\n    from simulator.report import Report\n"
                   "def f():\n    import common.config.loader\n")
    assert house_imports(src, "simulator.mod") == {"simulator.stats", "simulator.cluster", "simulator.report",
                                                     "common.config.loader"}
    assert circles({"simulator.cluster": {"simulator.stats"}, "simulator.stats": {"simulator.cluster"}})


def test_the_core_has_no_import_circle():
    found = circles(CORE_GRAPH)
    assert not found, f"import circles in partition_worker/core (type-only imports count): {found}"


def test_only_the_views_reach_back_into_the_partition():
    wrong = sorted(m for m, deps in CORE_GRAPH.items() if "partition" in deps and m not in MAY_IMPORT_PARTITION)
    assert not wrong, f"{wrong} import partition: give them the parts they use instead"


def test_the_partitions_parts_do_not_reach_into_the_cycle():
    wrong = {m: sorted(CORE_GRAPH[m] & POLICIES) for m in PARTS if CORE_GRAPH[m] & POLICIES}
    assert not wrong, f"parts importing the cycle's modules: {wrong}"
    assert PARTS | POLICIES <= set(CORE_GRAPH), "a module named here is gone: update the lists"


def test_the_core_rules_see_type_only_and_relative_imports(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\nfrom . import timers\nif TYPE_CHECKING:\n"
                   "    from .partition import Partition\n"
                   "def f():\n    from partition_worker.core.ledger import Ledger\n")
    assert core_imports(src) == {"timers", "partition", "ledger"}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
