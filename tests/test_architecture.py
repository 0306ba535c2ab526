"""The package's import graph has no cycles: a module never needs, directly or through others, a
module that needs it. Cycles make import order matter (a half-initialised module), hide which
layer owns what, and force imports into functions to dodge them; an import inside a function
still counts here, since it is the same dependency taken later.

The graph is read with `ast`, without importing anything: every `import` and `from ... import`
anywhere in a module (module level and inside functions), relative imports resolved, and
`from package import name` counted as an import of the submodule when `name` is one. Imports
under `if TYPE_CHECKING:` never run, but a cycle through them is still two modules that each need
the other to be read (a phase that takes the Evaluator which runs it): they count too, in a graph
of their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "cuda_agent"


def module_names(package: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package is its __init__.py)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def imports_of(name: str, path: Path, modules: dict[str, Path], type_checking: bool = False) -> set[str]:
    """The package's modules that module `name` imports (`type_checking`: those it imports for the
    type checker only, too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = set() if type_checking else _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from a.b import c`: the submodule a.b.c when there is one, else a name of a.b
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package: Path = PACKAGE, type_checking: bool = False) -> nx.DiGraph:
    modules = module_names(package)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        graph.add_edges_from((name, target) for target in imports_of(name, path, modules, type_checking))
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """For every import that lies on a cycle, the shortest cycle through it (each cycle once),
    as a chain that starts and ends at the same module."""
    found: dict[tuple[str, ...], list[str]] = {}
    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        inside = graph.subgraph(component)
        for a, b in inside.edges:
            loop = [a] + nx.shortest_path(inside, b, a)[:-1]
            start = loop.index(min(loop))
            key = tuple(loop[start:] + loop[:start])
            found.setdefault(key, [*key, key[0]])
    return sorted(found.values())


def test_the_graph_sees_every_kind_of_import():
    """A check of the reader itself, on imports this package is known to make: absolute,
    relative (from . and from .module), a submodule named in `from package import`, and one
    inside a function."""
    graph = import_graph()
    assert graph.has_edge("cuda_agent.pool.local", "cuda_agent.pool.base")  # from .base import ...
    assert graph.has_edge("cuda_agent.pool.factory", "cuda_agent.pool.local")  # inside make_pool
    assert graph.has_edge("cuda_agent.pool", "cuda_agent.pool.factory")  # package __init__, relative
    assert graph.has_edge("cuda_agent.tui.steering", "cuda_agent.tui.agent_process")  # from cuda_agent.tui import x
    assert not graph.has_edge("cuda_agent.agent.errors", "cuda_agent.agent.protocol")  # TYPE_CHECKING only
    assert import_graph(type_checking=True).has_edge("cuda_agent.agent.errors", "cuda_agent.agent.protocol")


def test_cycles_are_reported_as_chains():
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "c"), ("e", "a")])
    assert cycles(graph) == [["a", "b", "c", "a"], ["c", "d", "c"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_cycles_through_imports_for_the_type_checker_either():
    found = cycles(import_graph(type_checking=True))
    assert not found, f"{len(found)} cycle(s) through TYPE_CHECKING imports:\n" + "\n".join(
        " -> ".join(c) for c in found
    )


def rooms(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph between the package's parts: each subpackage (cuda_agent.eval, cuda_agent.agent...)
    and each top-level module is one node; an import between two parts is an edge between them."""

    def room(module: str) -> str:
        return ".".join(module.split(".")[:2])

    parts = nx.DiGraph()
    parts.add_nodes_from(room(m) for m in graph.nodes)
    parts.add_edges_from((room(a), room(b)) for a, b in graph.edges if room(a) != room(b))
    return parts


def test_rooms_fold_modules_into_their_part():
    graph = nx.DiGraph([("p.a.x", "p.b"), ("p.b", "p.a.y"), ("p.a.x", "p.a.y")])
    assert sorted(rooms(graph).edges) == [("p.a", "p.b"), ("p.b", "p.a")]


def test_no_cycles_between_the_packages_parts():
    """The layers stack: no subpackage or top-level module needs, through any of its files, a part
    that needs it (settings.py composes agent/'s sections, so agent/ never reads settings.py; the
    tools' own section lives in tools/settings.py). TYPE_CHECKING imports count."""
    found = cycles(rooms(import_graph(type_checking=True)))
    assert not found, f"{len(found)} cycle(s) between parts:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_library_never_imports_the_command_line():
    """The CLI modules (cli.py, cli_*.py) compose the library; no library module reaches back into
    them (a batch task's process, the TUI and the training glue share cuda_agent/run.py instead)."""
    graph = import_graph()
    is_cli = lambda m: m == "cuda_agent.cli" or m.startswith("cuda_agent.cli_")  # noqa: E731
    upward = sorted((a, b) for a, b in graph.edges if is_cli(b) and not is_cli(a))
    assert not upward, "library modules importing the command line: " + ", ".join(f"{a} -> {b}" for a, b in upward)


def test_records_import_nothing_of_the_project():
    """records.py is the trajectory's types, a leaf everything may import (TUI, export, resume)."""
    assert not set(import_graph().successors("cuda_agent.records"))


def test_the_run_folder_layout_imports_nothing_of_the_project():
    """run_folder.py names the run folder's paths for every layer (workspace/, the jail's callers, the
    TUI, batch, export): a leaf, so the lowest of them can ask it."""
    assert not set(import_graph().successors("cuda_agent.run_folder"))
