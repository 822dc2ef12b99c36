"""The package layout: imports point one way, cli -> cluster/device ->
compare/asvproject/report -> analysis/bench -> measure -> layers -> core, with no cycle of
any kind (module-level, function-level and ``importlib.import_module``/``__import__``
string targets alike); ``core`` imports neither torch nor JAX; every module imports in a
fresh interpreter; modules stay small, and so do packages."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400  # per module, every package
MAX_MODULES = 10  # per package, __init__ and __main__ aside: past it, split into subpackages
FRAMEWORKS = ("torch", "jax")  # what an f-string's placeholders in an import target expand to
# Floors, lowest first: a module imports only from its own floor or lower ones. The
# package's own __init__ and the public api sit on top.
FLOORS = {"core": 0, "layers": 1, "measure": 2, "analysis": 3, "bench": 3, "report": 4,
          "asvproject": 4, "compare": 4, "cluster": 5, "device": 5, "cli": 6, "api": 7}
FRAMEWORK_MODULES = {"torch", "jax", "jaxlib", "flax"}


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``package_dir`` (a package folder)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def string_targets(node: ast.expr) -> list[str]:
    """The module names an ``import_module``/``__import__`` argument can take: a string, or
    an f-string with every placeholder expanded over :data:`FRAMEWORKS`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if not isinstance(node, ast.JoinedStr):
        return []
    slots = sum(isinstance(v, ast.FormattedValue) for v in node.values)
    out = []
    for fill in itertools.product(FRAMEWORKS, repeat=slots):
        names = iter(fill)
        out.append("".join(v.value if isinstance(v, ast.Constant) else next(names)
                           for v in node.values))
    return out


def dynamic_imports(tree: ast.AST) -> set[str]:
    """Targets of ``importlib.import_module(...)``, ``import_module(...)`` and
    ``__import__(...)`` calls anywhere in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__"):
            out.update(string_targets(node.args[0]))
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its body (inside
    functions too: a lazy import is still an arrow between the two modules), string
    targets of dynamic imports included.

    ``from pkg import sub`` names the submodule when there is one, else ``pkg``; a
    package's implicit load of its parent ``__init__`` is not counted (it is no arrow
    back unless the parent itself imports the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = dynamic_imports(tree) & known
    for node in ast.walk(tree):
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


def outside_imports(path: Path) -> set[str]:
    """The modules outside mhabench that a module imports anywhere, by their dotted names
    (absolute import statements and dynamic-import string targets)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set(dynamic_imports(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] != "mhabench"}


def outside_roots(path: Path) -> set[str]:
    """The top-level packages outside mhabench that a module imports anywhere."""
    return {n.split(".")[0] for n in outside_imports(path)}


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
    assert "mhabench.cli.common" in graph["mhabench.cli.configs.profile"]
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_when_there_is_one(tmp_path: Path) -> None:
    """The shapes the old layouts had: a package module imports its subcommands, which
    import it back (here lazily, inside a function); a relative-import cycle; and a
    registry that loads its implementations by name (an f-string over the frameworks)."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("from pkg import report_cli\nclass CLIError(Exception): ...\n")
    (pkg / "report_cli.py").write_text("def run():\n    from pkg.cli import CLIError\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("from .a import thing\n")
    (pkg / "ok.py").write_text("import pkg.cli\n")
    (pkg / "registry.py").write_text(
        "import importlib\n"
        "def layers(framework):\n"
        "    return importlib.import_module(f'pkg.{framework}_steps')\n"
        "def other():\n    return __import__('pkg.ok')\n")
    (pkg / "torch_steps.py").write_text("from pkg import registry\n")
    (pkg / "jax_steps.py").write_text("")
    graph = import_graph(pkg)
    assert graph["pkg.registry"] == {"pkg.torch_steps", "pkg.jax_steps", "pkg.ok"}
    assert cycles(graph) == [["pkg.cli", "pkg.report_cli"],
                             ["pkg.registry", "pkg.torch_steps"],
                             ["pkg.sub.a", "pkg.sub.b"]]


def floor(name: str) -> int:
    """``name``'s floor: its package under mhabench (the root ``__init__`` sits on top)."""
    parts = name.split(".")
    return FLOORS[parts[1]] if len(parts) > 1 else max(FLOORS.values())


def test_imports_point_one_way() -> None:
    """cli -> cluster/device -> compare/asvproject/report -> analysis/bench -> measure ->
    layers -> core: no arrow goes up."""
    graph = import_graph(ROOT / "mhabench")
    assert {n.split(".")[1] for n in graph if "." in n} <= set(FLOORS)  # each has a floor
    up = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                if floor(b) > floor(a))
    assert up == []


def test_core_imports_neither_torch_nor_jax() -> None:
    """Not at module level, not inside a function, not by name: the config, the registry
    and the cost model work where no framework is installed."""
    core = {name: path for name, path in modules(ROOT / "mhabench").items()
            if name.split(".")[:2] == ["mhabench", "core"]}
    assert "mhabench.core.backends" in core
    found = {name: roots for name, path in core.items()
             if (roots := outside_roots(path) & FRAMEWORK_MODULES)}
    assert found == {}
    graph = import_graph(ROOT / "mhabench")
    assert {b for a in core for b in graph[a] if not b.startswith("mhabench.core")} == set()


def test_layers_import_nothing_from_the_floors_above() -> None:
    graph = import_graph(ROOT / "mhabench")
    above = [name for name, level in FLOORS.items() if level > FLOORS["layers"]]
    found = sorted(f"{a} -> {b}" for a, targets in graph.items()
                   if a.startswith("mhabench.layers") for b in targets
                   if b == "mhabench" or b.split(".")[1] in above)
    assert found == []


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


# Each module alone, in a child forked from an interpreter that holds the third-party
# libraries mhabench imports (torch, jax, pandas, ...) and no module of mhabench: what the
# test is about (an mhabench module relying on another imported first) is the same as in a
# fresh interpreter, without paying torch's and JAX's import again per module (80 s of CPU).
ALONE = str(ROOT / "tests" / "probes" / "import_alone.py")


@pytest.mark.slow
def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    """No module relies on another having been imported first (each in a fresh fork that
    has imported no module of mhabench)."""
    names = importable()
    preload = {n for path in modules(ROOT / "mhabench").values() for n in outside_imports(path)
               if n.split(".")[0] not in sys.stdlib_module_names}
    done = subprocess.run([sys.executable, ALONE, ",".join(sorted(preload)), *names],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FAILED" not in done.stdout, done.stdout[-3000:]
    assert done.stdout.splitlines()[-1] == f"checked {len(names)}"


def test_the_alone_check_fails_on_a_module_that_needs_another_first(tmp_path: Path) -> None:
    """A package whose module ``b`` uses ``mhabench.a`` without importing it: fine after
    ``a``, an AttributeError alone; the check names it (and passes ``a``)."""
    package = tmp_path / "mhabench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import numpy\nVALUE = 1\n")
    (package / "b.py").write_text("import mhabench\nVALUE = mhabench.a.VALUE\n")
    together = subprocess.run([sys.executable, "-c", "import mhabench.a, mhabench.b"],
                              cwd=tmp_path, capture_output=True, text=True)
    assert together.returncode == 0, together.stderr
    done = subprocess.run([sys.executable, ALONE, "numpy", "mhabench.a", "mhabench.b"],
                          cwd=tmp_path, capture_output=True, text=True)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert failed == ["FAILED mhabench.b (exit status 256)"], done.stdout
    assert "mhabench.b: AttributeError: module 'mhabench' has no attribute 'a'" in done.stdout


def test_the_packages_stay_in_small_modules() -> None:
    long = {name: n for name, path in modules(ROOT / "mhabench").items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def crowded(package_dir: Path) -> dict[str, int]:
    """Dotted name -> module count of each package under ``package_dir`` (itself included)
    that holds more than :data:`MAX_MODULES` modules of its own (``__init__`` and
    ``__main__`` aside; its subpackages' modules count toward them, not toward it)."""
    out = {}
    for folder in [package_dir, *sorted(p for p in package_dir.rglob("*") if p.is_dir())]:
        if not (folder / "__init__.py").is_file():
            continue
        count = sum(1 for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
        if count > MAX_MODULES:
            out[".".join(folder.relative_to(package_dir.parent).parts)] = count
    return out


def test_no_package_holds_more_than_max_modules() -> None:
    found = crowded(ROOT / "mhabench")
    offenders = ", ".join(f"{name} ({n} modules)" for name, n in sorted(found.items()))
    assert found == {}, (f"over {MAX_MODULES} modules in one package: {offenders}; split it "
                         "into subpackages named by what they hold")


def test_the_package_count_finds_a_crowded_package(tmp_path: Path) -> None:
    """A package of MAX_MODULES + 1 modules is named, wherever it sits; one of exactly
    MAX_MODULES is not, nor are ``__init__``/``__main__``, a subpackage's modules or a
    folder that is no package."""
    pkg = tmp_path / "pkg"
    for folder in (pkg, pkg / "full", pkg / "full" / "deep", pkg / "data"):
        folder.mkdir(parents=True, exist_ok=True)
    for folder in (pkg, pkg / "full", pkg / "full" / "deep"):
        (folder / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("")
    for i in range(MAX_MODULES):
        (pkg / f"m{i}.py").write_text("")
        (pkg / "full" / f"m{i}.py").write_text("")
        (pkg / "data" / f"m{i}.py").write_text("")
    for i in range(MAX_MODULES + 1):
        (pkg / "full" / "deep" / f"m{i}.py").write_text("")
    (pkg / "data" / "extra.py").write_text("")
    assert crowded(pkg) == {"pkg.full.deep": MAX_MODULES + 1}
    (pkg / "extra.py").write_text("")
    assert crowded(pkg) == {"pkg": MAX_MODULES + 1, "pkg.full.deep": MAX_MODULES + 1}
