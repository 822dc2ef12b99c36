"""The package layout: no import cycles between mhabench modules (module-level and
function-level imports alike), every module imports in a fresh interpreter, and the
packages stay in small modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400  # per module of the packages below
SMALL_PACKAGES = ("cli", "report", "analysis")


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``package_dir`` (a package folder)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its body (inside
    functions too: a lazy import is still an arrow between the two modules).

    ``from pkg import sub`` names the submodule when there is one, else ``pkg``; a
    package's implicit load of its parent ``__init__`` is not counted (it is no arrow
    back unless the parent itself imports the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    out.add(f"{base}.{alias.name}")
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), as sorted lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    found = modules(package_dir)
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_mhabench_has_no_import_cycles() -> None:
    graph = import_graph(ROOT / "mhabench")
    assert len(graph) > 30  # the walk saw the whole package
    assert "mhabench.cli.common" in graph["mhabench.cli.profile"]
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_when_there_is_one(tmp_path: Path) -> None:
    """The shape the old layout had: a package module imports its subcommands, which
    import it back (here lazily, inside a function), plus a relative-import cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("from pkg import report_cli\nclass CLIError(Exception): ...\n")
    (pkg / "report_cli.py").write_text("def run():\n    from pkg.cli import CLIError\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("from .a import thing\n")
    (pkg / "ok.py").write_text("import pkg.cli\n")
    assert cycles(import_graph(pkg)) == [["pkg.cli", "pkg.report_cli"],
                                         ["pkg.sub.a", "pkg.sub.b"]]


def importable() -> list[str]:
    """Every module but ``__main__`` ones (scripts: test_cli_timing runs them with -m)."""
    return sorted(n for n in modules(ROOT / "mhabench") if not n.endswith(".__main__"))


def test_every_module_imports_in_one_fresh_interpreter() -> None:
    names = importable()
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    importlib.import_module(name)\n"
            "print(len(sys.argv) - 1)\n")
    done = subprocess.run([sys.executable, "-c", code, *names], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(names))


@pytest.mark.slow
def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    """No module relies on another having been imported first."""
    names = importable()

    def alone(name: str) -> tuple[str, int, str]:
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True,
                              text=True, timeout=300)
        return name, done.returncode, done.stderr[-500:]
    with ThreadPoolExecutor(max_workers=2) as pool:
        failed = [r for r in pool.map(alone, names) if r[1] != 0]
    assert failed == []


def test_the_packages_stay_in_small_modules() -> None:
    long = {name: n for package in SMALL_PACKAGES
            for name, path in modules(ROOT / "mhabench" / package).items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
