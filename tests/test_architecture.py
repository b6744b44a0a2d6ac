"""The import arrows point down, read from the source with `ast` (no module is imported).

Why: `steplens/` holds the entry points (CLI, demo, report); the libraries under it must not
import it, or the package is both floor and roof again (issue #23). And a circle of imports
makes every module in it load-order dependent: none can be read, tested or moved alone.
Imports under `if TYPE_CHECKING:` run only for the type checker and are not counted; imports
inside functions are, since they run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.python_source import parse

REPO = Path(__file__).resolve().parent.parent
LIBRARIES = ("schemas", "infra", "sinks", "streams", "producers")
TOP = "steplens"


def module_name(path: Path) -> str:
    """`streams/detect/ingest/loop.py` -> `streams.detect.ingest.loop`; a package's `__init__.py` is the package."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def library_files() -> dict[str, Path]:
    files = {module_name(p): p for pkg in LIBRARIES for p in sorted((REPO / pkg).rglob("*.py"))}
    assert set(LIBRARIES) <= set(files), "every library is a package"
    return files


def is_type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING` or `typing.TYPE_CHECKING` (any module's attribute of that name)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below `node` except the bodies of `if TYPE_CHECKING:` (their `else:` still runs)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and is_type_checking(child.test):
            for stmt in child.orelse:
                yield stmt
                yield from runtime_nodes(stmt)
            continue
        yield child
        yield from runtime_nodes(child)


def imported_names(module: str, is_package: bool, tree: ast.Module) -> Iterator[tuple[int, str, str | None]]:
    """(line, module, name) for each runtime import: `import a.b` -> ("a.b", None);
    `from a import b` -> ("a", "b"); relative imports resolved against `module`;
    `importlib.import_module("a.b")` / `__import__("a.b")` with a literal -> ("a.b", None)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, base, None if alias.name == "*" else alias.name
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("import_module", "__import__"):
                yield node.lineno, node.args[0].value, None


def parsed() -> dict[str, tuple[Path, list[tuple[int, str, str | None]]]]:
    """Every library module's runtime imports."""
    out = {}
    for module, path in library_files().items():
        tree = parse(path.read_text(encoding="utf-8"), filename=str(path))
        out[module] = (path, list(imported_names(module, path.name == "__init__.py", tree)))
    return out


def resolve(target: str, name: str | None, known: set[str]) -> str | None:
    """The project module an import loads: `from a import b` is module `a.b` when that exists,
    else `a`'s `__init__`; `import a.b.c` is the longest existing prefix. None: not the project's."""
    if name is not None and f"{target}.{name}" in known:
        return f"{target}.{name}"
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    known = set(library_files())
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, (_, imports) in parsed().items():
        for _, target, name in imports:
            dest = resolve(target, name, known)
            if dest is not None:
                graph[module].add(dest)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on a deep import chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Circles of imports: components of more than one module, and modules importing themselves."""
    return [c for c in strongly_connected(graph) if len(c) > 1 or c[0] in graph[c[0]]]


def test_no_library_imports_the_entry_point_package() -> None:
    upward = [f"{path.relative_to(REPO)}:{line}: imports {target}{'.' + name if name else ''}"
              for _, (path, imports) in sorted(parsed().items())
              for line, target, name in imports
              if target == TOP or target.startswith(TOP + ".")]
    assert not upward, "libraries must not import steplens/ (settings live in infra/):\n" + "\n".join(upward)


def test_no_import_cycle_between_library_modules() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


# The stages of streams/: each reads its topics and writes its own; what two of them share lives below them
# (streams/*.py, sinks/, schemas/, infra/), so a stage can be read, tested and deployed alone (issue #47).
STAGES = ("streams.detect", "streams.land", "streams.profiles", "streams.alerts", "streams.mitigate")
# `steplens replay` reads real traces with the profile stage's parser before it sends them as a fleet would;
# the parser moving below both is still to do (issue #47). Nothing else in producers/ reaches into streams/.
REPLAY = "producers.replay"
REPLAY_MAY_USE = ("streams.profiles.loader", "streams.profiles.jsonstream", "streams.profiles.model",
                  "streams.profiles.analysis", "streams.topics_admin")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def stage_of(module: str) -> str | None:
    return next((s for s in STAGES if _within(module, s)), None)


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one stage into another, and from producers/ into streams/ (replay's parser excepted)."""
    out = []
    for module, targets in sorted(graph.items()):
        for dest in sorted(targets):
            here, there = stage_of(module), stage_of(dest)
            sideways = here is not None and there is not None and here != there
            upstream = _within(module, "producers") and _within(dest, "streams") and not (
                _within(module, REPLAY) and any(_within(dest, ok) for ok in REPLAY_MAY_USE))
            if sideways or upstream:
                out.append(f"{module} -> {dest}")
    return out


def test_the_stages_stand_alone() -> None:
    found = crossings(import_graph())
    assert not found, "a stage imports another (move the shared piece below them):\n" + "\n".join(found)


def test_a_crossing_is_found_and_a_shared_piece_below_is_not_one() -> None:
    graph = {"streams.land.processor": {"streams.detect.ingest.decode", "streams.columnar_backoff"},
             "streams.detect.scopes.hung": {"streams.advice", "streams.detect.engine"},
             "producers.hook.rank": {"streams.profiles.model"},
             "producers.replay.convert": {"streams.profiles.model"},
             "producers.replay.cli": {"streams.detect.engine"}}
    assert crossings(graph) == ["producers.hook.rank -> streams.profiles.model",
                                "producers.replay.cli -> streams.detect.engine",
                                "streams.land.processor -> streams.detect.ingest.decode"]


# The local launcher (infra/launcher/: brokers, servers, TLS, apt) is for `make`, the tests, the benches and
# the CLI; the workers, producers and the hook stand on infra/'s foundation alone (issue #47).
LAUNCHER = "infra.launcher"


def launcher_users(graph: dict[str, set[str]]) -> list[str]:
    return [f"{module} -> {dest}" for module, targets in sorted(graph.items()) if not _within(module, LAUNCHER)
            for dest in sorted(targets) if _within(dest, LAUNCHER)]


def test_no_library_module_uses_the_launcher() -> None:
    found = launcher_users(import_graph())
    assert not found, "only make, tests, benches and steplens/ start services:\n" + "\n".join(found)


def test_a_launcher_use_is_found() -> None:
    graph = {"infra.settings": {"infra.launcher.config"}, "infra.launcher.services": {"infra.launcher.tls"},
             "streams.app": {"infra.clients"}}
    assert launcher_users(graph) == ["infra.settings -> infra.launcher.config"]


# Faust where the design card puts it: the stream processors that window by domain (detect) and profile
# parsing, their shared base app and transport, the worker entry point that runs them, and the SCRAM glue
# that builds their credentials. Landing, decode, alerts and mitigation are plain loops (issue #47).
FAUST_MAY_RUN_IN = ("streams.detect", "streams.profiles", "streams.app", "streams.faust_transport",
                    "streams.__main__", "infra.clients")


def faust_users(imports: dict[str, list[tuple[str, str | None]]]) -> list[str]:
    return [f"{module} -> {target}" for module, targets in sorted(imports.items())
            if not any(_within(module, ok) for ok in FAUST_MAY_RUN_IN)
            for target, _ in targets if _within(target, "faust") or _within(target, "mode")]


def test_faust_runs_only_the_windowing_and_parsing_stages() -> None:
    found = faust_users({m: [(t, n) for _, t, n in imports] for m, (_, imports) in parsed().items()})
    assert not found, "Faust outside detect and parse (land, decode, alerts are plain loops):\n" + "\n".join(found)


def test_a_faust_use_is_found() -> None:
    imports = {"streams.land.worker": [("faust.app.base", "BootStrategy")], "streams.detect.app": [("faust", None)],
               "streams.land.loop": [("faustian", None)]}
    assert faust_users(imports) == ["streams.land.worker -> faust.app.base"]


# --- the checker itself -------------------------------------------------------------------------


def imports_of(source: str, module: str = "pkg.mod") -> list[tuple[str, str | None]]:
    return [(t, n) for _, t, n in imported_names(module, False, parse(source))]


def test_type_checking_imports_are_ignored_but_their_else_and_function_imports_count() -> None:
    source = (
        "import typing\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import steplens.cli\n"
        "if typing.TYPE_CHECKING:\n    from steplens import demo\nelse:\n    from steplens import report\n"
        "def f():\n    from steplens.scoring import x\n"
        "importlib.import_module('steplens.lag')\n"
    )
    found = imports_of(source)
    assert ("steplens.cli", None) not in found and ("steplens", "demo") not in found
    assert ("steplens", "report") in found and ("steplens.scoring", "x") in found and ("steplens.lag", None) in found


def test_relative_imports_resolve_against_the_package() -> None:
    assert imports_of("from . import a\nfrom ..b import c\n", "p.q.mod") == [("p.q", "a"), ("p.b", "c")]


@pytest.mark.parametrize(("target", "name", "expected"), [
    ("streams", "x", "streams.x"),          # from streams import x: the submodule
    ("streams", "Thing", "streams"),        # from streams import Thing: the package's __init__
    ("streams.x", "Thing", "streams.x"),
    ("streams.x.missing", None, "streams.x"),
    ("kafka", None, None),                  # not the project's
])
def test_an_import_resolves_to_the_module_it_loads(target: str, name: str | None, expected: str | None) -> None:
    assert resolve(target, name, {"streams", "streams.x"}) == expected


def test_cycles_are_found_and_a_chain_is_not_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
