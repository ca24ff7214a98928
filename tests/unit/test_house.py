"""The shape of the package, read from its source: imports point one way, modules stay small.

Every import counts, including those inside functions: a late import still makes two modules
depend on each other, and a cycle kept alive by a late call is still a cycle. `from pkg import
name` counts as an import of `pkg.name` where that is a module, else of `pkg`. A registry that
names modules as strings (`sandbox._BACKENDS`, `agents._AGENTS`) is not an import.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import levelfield

PACKAGE = Path(levelfield.__file__).parent
MAX_LINES = 600
MAX_TOP_LEVEL_MODULES = 24


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_names(name: str, path: Path) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parents, *([node.module] if node.module else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for target in imported_names(name, path):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_its_way_back_to_itself() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_late_import_cycle(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    late = tmp_path / "running.py"
    late.write_text("def f():\n    from levelfield.cli.app import app\n")
    tree_names = list(imported_names("levelfield.cli.running", late))
    assert "levelfield.cli.app.app" in tree_names


def test_no_module_is_over_600_lines() -> None:
    long = {
        name: n for name, path in modules().items() if (n := len(path.read_text().splitlines()))
        > MAX_LINES
    }
    assert long == {}


def test_the_top_level_holds_at_most_24_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


@functools.cache
def packages() -> tuple[str, ...]:
    return tuple(sorted(name for name, path in modules().items() if path.name == "__init__.py"))


def private_owner(name: str) -> str | None:
    """The package a private module or name belongs to: the one holding its first `_` part.
    `levelfield.sandbox.oci._engine` → `levelfield.sandbox.oci`; `levelfield.executor.runs._go`
    (a private name of a module) → `levelfield.executor`. None for a public name."""
    parts = name.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            holder = ".".join(parts[:i])
            return holder if holder in packages() else holder.rpartition(".")[0]
    return None


def foreign_private_imports(imports: dict[str, set[str]]) -> list[str]:
    """Imports of a private module or name from outside the package that holds it (its own
    subpackages are inside: `sandbox/oci/` may use `sandbox/_netns.py`, `sandbox/auto.py` may not
    use `sandbox/oci/_engine.py`). What one package needs of another is public there. A top-level
    private module (`levelfield._lazy`) is the package's own, shared by every folder."""
    found = []
    for importer, targets in imports.items():
        for target in targets:
            owner = private_owner(target) if target.startswith("levelfield.") else None
            if owner in (None, "levelfield"):
                continue
            if importer != owner and not importer.startswith(f"{owner}."):
                found.append(f"{importer} → {target}")
    return sorted(found)


def test_no_package_reaches_into_another_package_s_private_modules() -> None:
    imports = {name: set(imported_names(name, path)) for name, path in modules().items()}
    assert foreign_private_imports(imports) == []


def test_the_private_import_check_sees_one() -> None:
    imports = {
        "levelfield.verifier": {"levelfield.sandbox._tree"},
        "levelfield.sandbox.process": {"levelfield.sandbox._tree"},
        "levelfield.sandbox.oci": {"levelfield.sandbox._netns.attach"},
        "levelfield.sandbox.auto": {"levelfield.sandbox.oci._engine.engine_report"},
        "levelfield.cli.running": {"levelfield.executor.runs._resolve"},
        "levelfield.executor.local": {"levelfield.executor.runs._resolve"},
        "levelfield.analysis.estimators": {"levelfield._lazy"},
    }
    assert foreign_private_imports(imports) == [
        "levelfield.cli.running → levelfield.executor.runs._resolve",
        "levelfield.sandbox.auto → levelfield.sandbox.oci._engine.engine_report",
        "levelfield.verifier → levelfield.sandbox._tree",
    ]


def test_a_public_name_is_the_same_object_however_it_is_reached() -> None:
    """A package's exported name is not shadowed by a submodule of the same name once that is
    imported (`analysis.leaderboard` was the function, then the module on a second access)."""
    import importlib

    differ = []
    for name in packages():
        package = importlib.import_module(name)
        exported = list(getattr(package, "__all__", ()))
        before = {n: getattr(package, n) for n in exported}
        for module in modules():
            if module.endswith(".__main__"):
                continue  # running it is the CLI
            if module.startswith(f"{name}.") and module.count(".") == name.count(".") + 1:
                try:
                    importlib.import_module(module)
                except ImportError:  # an optional extra (Harbor, Inspect, Ray) not installed
                    continue
        differ += [f"{name}.{n}" for n in exported if getattr(package, n) is not before[n]]
    assert differ == []


# Markdown files a task carries (the task format's own), not files of this repository.
TASK_FORMAT_DOCUMENTS = {"instruction.md"}


def cited_documents(text: str) -> set[str]:
    """The repository documents a module's text names: relative `.md` paths that are not a
    task's own files (a path in the sandbox, `/logs/agent/instruction.md`, is absolute)."""
    names = re.findall(r"(?<![\w./-])([\w.-][\w./-]*\w\.md)\b", text)
    return {n for n in names if Path(n).name not in TASK_FORMAT_DOCUMENTS}


def test_every_document_a_module_cites_is_in_the_repository() -> None:
    root = PACKAGE.parent.parent
    missing = {
        name: sorted(n for n in cited_documents(path.read_text()) if not (root / n).exists())
        for name, path in modules().items()
    }
    assert {name: docs for name, docs in missing.items() if docs} == {}


def test_the_citation_check_sees_a_missing_document() -> None:
    text = 'The study behind DESIGN.md ("Statistics"); /logs/agent/instruction.md; docs/design.md'
    assert cited_documents(text) == {"DESIGN.md", "docs/design.md"}
