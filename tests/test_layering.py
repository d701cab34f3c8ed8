"""The dependency rule of ARCHITECTURE.md, checked over every import of every module under klog/.

Each module is parsed with ``ast`` (nothing is imported), and every import counts: top-level,
under ``if TYPE_CHECKING:``, inside functions, relative ones, and ``importlib.import_module`` /
``__import__`` calls whose module name starts as a literal. A module's *layer* is its first
package below ``klog`` (``klog/storage/log.py`` -> ``storage``; ``klog/placement.py`` ->
``placement``); imports inside a layer are free, imports across layers must be allowed below.
A failure lists every violation as ``module:line imports target``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KLOG = Path(__file__).resolve().parent.parent / "klog"

# layer -> the other layers it may import. The root package (``klog``: ``__version__`` only)
# may be imported by every layer and imports nothing.
_ALL = frozenset({"protocol", "storage", "client", "placement", "tools", "daemon", "spark",
                  "cli", "cluster_runner", "testing"})
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    "storage": frozenset({"protocol"}),
    "client": frozenset({"protocol"}),
    "placement": frozenset({"protocol", "storage"}),
    # The reassignment tool reaches a live cluster through klog's client.
    "tools": frozenset({"protocol", "storage", "placement", "client"}),
    "daemon": frozenset({"protocol", "storage", "placement", "client"}),
    "spark": frozenset({"protocol", "storage", "client"}),
    # The assembly level: the command line, ``klog cluster``'s runner (it starts broker
    # processes and a ZooKeeper, and reads the cluster's state as the brokers write it), and
    # the pytest plugin for users' tests. They import any layer, but the daemon only through
    # DAEMON_ENTRY_POINTS.
    "cli": _ALL - {"cli"},
    "cluster_runner": _ALL - {"cluster_runner", "cli"},
    "testing": _ALL - {"testing", "cli"},
    "__main__": frozenset({"cli"}),
}
ASSEMBLY = frozenset({"cli", "cluster_runner", "testing", "__main__"})

# The daemon modules the assembly level may import, and what it may take from each (None:
# anything). daemon.config: BrokerConfig reads server.properties for ``klog broker start``;
# daemon.runner: run_broker; daemon.metastore: ZooKeeper's data model (znode paths and
# their JSON, the store's errors, the kazoo-backed store), read by cluster_runner to find
# the live brokers and the controller.
DAEMON_ENTRY_POINTS: dict[str, frozenset[str] | None] = {
    "klog.daemon.config": frozenset({"BrokerConfig", "ConfigError"}),
    "klog.daemon.runner": frozenset({"run_broker"}),
    "klog.daemon.metastore": None,
    "klog.daemon.metastore.base": None,
    "klog.daemon.metastore.paths": None,
    "klog.daemon.metastore.zookeeper": None,
    # The standalone store's files, parsed read-only (klog compact's topic configs).
    "klog.daemon.metastore.local_format": frozenset({"read_nodes"}),
}

# Violations that stand, each with its reason and the way out, as
# (importing module, imported module, name or None). The test also fails when one of them no
# longer occurs, so that this list never outlives its reason.
EXCEPTIONS: dict[tuple[str, str, str | None], str] = {}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    line: int
    target: str  # the imported module, dotted
    name: str | None  # for ``from target import name``


def module_name(path: Path) -> str:
    parts = list(path.relative_to(KLOG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    """``klog.storage.log`` -> ``storage``; the root package ``klog`` has no layer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _literal_prefix(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            # Only the whole dotted names before the first substitution are known.
            return first.value.rpartition(".")[0] or None
    return None


def imports_of(path: Path, module: str | None = None) -> Iterator[Import]:
    """Every import in the file at ``path``, named as module ``module`` (by default the
    module that path is under klog/)."""
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, node.lineno, alias.name, None)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # ``from klog.daemon import admin`` imports the module klog.daemon.admin,
                # and ``from klog.spark import _columns`` the C extension (its .pyi stub).
                sub = f"{target}.{alias.name}"
                where = KLOG.parent / sub.replace(".", "/")
                if where.is_dir() or any(where.with_name(where.name + suffix).exists()
                                         for suffix in (".py", ".pyi")):
                    yield Import(module, node.lineno, sub, None)
                else:
                    yield Import(module, node.lineno, target, alias.name)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                named = _literal_prefix(node.args[0])
                if named:
                    yield Import(module, node.lineno, named, None)


def violation(imp: Import) -> str | None:
    """Why ``imp`` breaks the rule, or None when it keeps it."""
    if imp.target != "klog" and not imp.target.startswith("klog."):
        return None
    source, target = layer_of(imp.module), layer_of(imp.target)
    if target is None or source == target:
        return None
    assert source is not None, f"{imp.module}: the root package must import nothing"
    if target not in ALLOWED[source]:
        return f"{source} may not import {target}"
    if source in ASSEMBLY and target == "daemon":
        allowed = DAEMON_ENTRY_POINTS.get(imp.target, frozenset())
        if allowed is not None and (imp.name is None or imp.name not in allowed):
            what = imp.target if imp.name is None else f"{imp.target}.{imp.name}"
            return f"{what} is not one of the daemon's entry points"
    return None


def all_imports() -> list[Import]:
    return [imp for path in sorted(KLOG.rglob("*.py")) for imp in imports_of(path)]


def test_every_module_under_klog_keeps_the_dependency_rule() -> None:
    found = all_imports()
    # the walk saw the whole tree: imports from every layer
    assert {layer_of(imp.module) for imp in found} >= set(ALLOWED)
    broken = []
    used_exceptions = set()
    for imp in found:
        why = violation(imp)
        if why is None:
            continue
        key = (imp.module, imp.target, imp.name)
        if key in EXCEPTIONS:
            used_exceptions.add(key)
            continue
        name = f" ({imp.name})" if imp.name else ""
        broken.append(f"{imp.module}:{imp.line} imports {imp.target}{name}: {why}")
    assert not broken, "layering violations:\n" + "\n".join(broken)
    stale = sorted(set(EXCEPTIONS) - used_exceptions)
    assert not stale, f"exceptions no longer needed, delete them from EXCEPTIONS: {stale}"


def test_every_layer_is_known() -> None:
    layers = {layer_of(module_name(p)) for p in KLOG.rglob("*.py")} - {None}
    assert layers <= set(ALLOWED), f"new top-level modules need a rule: {layers - set(ALLOWED)}"


def _check(source: str, module: str, tmp_path: Path) -> list[str]:
    """The violations of a module ``module`` whose text is ``source``, sorted."""
    path = tmp_path / "module.py"
    path.write_text(source)
    return sorted(why for imp in imports_of(path, module) if (why := violation(imp)))


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    source = (
        "from __future__ import annotations\n"
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from klog.daemon.broker import Broker\n"
        "def f() -> None:\n"
        "    import klog.cli.app\n"
        "    importlib.import_module(f'klog.spark.{f}')\n"
        "from klog.protocol import errors\n"
        "from ..client import network\n"
    )
    assert _check(source, "klog.storage.x", tmp_path) == [
        "storage may not import cli", "storage may not import client",
        "storage may not import daemon", "storage may not import spark"]


def test_assembly_reaches_the_daemon_through_its_entry_points(tmp_path: Path) -> None:
    source = (
        "from klog.daemon.config import BrokerConfig, parse_properties\n"
        "from klog.daemon.runner import run_broker\n"
        "from klog.daemon.metastore import paths\n"
        "from klog.daemon import broker\n"
    )
    assert _check(source, "klog.cli.x", tmp_path) == [
        "klog.daemon.broker is not one of the daemon's entry points",
        "klog.daemon.config.parse_properties is not one of the daemon's entry points"]


# -- no hub below the assembly ------------------------------------------------------------

#: The daemon modules that may import the Broker (klog/daemon/broker.py): the assembly.
BROKER_IMPORTERS = frozenset({"klog.daemon.runner"})


def test_only_the_assembly_imports_the_broker() -> None:
    """Every component gets its collaborators in its constructor: none reaches through the
    Broker, not even for a type hint (TYPE_CHECKING imports count)."""
    found = sorted(f"{imp.module}:{imp.line}" for imp in all_imports()
                   if imp.target == "klog.daemon.broker" and imp.module not in BROKER_IMPORTERS)
    assert not found, "modules importing klog.daemon.broker: " + ", ".join(found)


def _module_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle() -> None:
    """No klog module imports itself around a circle: every import counts, TYPE_CHECKING and
    function-level ones included (the circle the Broker hub drew, broker -> component ->
    broker, among them). Where two modules would need each other, one is typed by a
    Protocol of what it calls or registers as a listener (ARCHITECTURE.md)."""
    modules = {module_name(p) for p in KLOG.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for imp in all_imports():
        if imp.target in modules and imp.target != imp.module:
            edges.setdefault(imp.module, set()).add(imp.target)
    cycles = _module_cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles)


def test_the_cycle_finder_finds_cycles() -> None:
    assert _module_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _module_cycles({"a": {"b"}, "b": set()}) == []
