"""A user's own repository as an asv project: ``mhabench init`` writes its ``asv.conf.json``
and a benchmark module of small subclasses of mhabench's classes (``mhabench.bench``),
their framework and backend axes narrowed to the backends the user's package registers
and a few built-in baselines.

asv then builds and installs each commit of the user's package, as it does mhabench's own,
into an environment that holds the frameworks at the versions of the environment ``init``
ran in, and mhabench at one pinned source (:class:`Source`): a commit of a git checkout
(``mhabench @ git+file://...@<commit>``), a git URL at a commit, or a wheel. The pin is
installed after the package by the config's ``install_command``; its digest is part of the
environment's name (``MHABENCH_PIN``), so another pin builds another environment and
starts another history, as another mhabench may measure differently.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from mhabench.asvproject.asv_config import local_digest
from mhabench.core import backends
from mhabench.core.config import FRAMEWORK_PACKAGES, FRAMEWORKS
from mhabench.core.grids import GRIDS

CONFIG = "asv.conf.json"
MODULE = Path("benchmarks") / "bench_mhabench.py"
DEFAULT_BASELINES = ("fused",)
PIN_VAR = "MHABENCH_PIN"
ASV_FOLDER = ".asv"  # the written config's env_dir, results_dir and html_dir live in it
# The question modules of mhabench.bench and their classes the user's suite reuses.
REUSED = (("heads", "HeadsAtFixedWidth"), ("gqa", "MhaGqaMqa"), ("train", "ForwardVsTrain"),
          ("decode", "KVCacheDecode"))
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class InitError(ValueError):
    """Bad input to ``mhabench init``: one line naming the value and what is allowed."""


@dataclass(frozen=True)
class Source:
    """Where the environment's mhabench comes from."""

    requirement: str  # what pip installs: "mhabench @ git+...@<commit>" or a wheel's path
    digest: str  # short; part of the environment's name
    describe: str  # for people: "git checkout /x at 1a2b3c4d"
    warnings: tuple[str, ...] = ()


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True)


def git_root(folder: Path) -> Path:
    """``folder`` itself, checked to be the top of a git checkout."""
    folder = Path(folder).resolve()
    done = _git(folder, "rev-parse", "--show-toplevel")
    if not folder.is_dir() or done.returncode != 0:
        raise InitError(f"{str(folder)!r} is not a git repository; run mhabench init at the "
                        "root of your package's git checkout")
    top = Path(done.stdout.strip()).resolve()
    if top != folder:
        raise InitError(f"{str(folder)!r} is inside the git repository {str(top)!r}, not its "
                        "root; run mhabench init there")
    return folder


@dataclass(frozen=True)
class Project:
    root: Path
    name: str  # the distribution's name, as pip uninstalls it
    entry_points: dict[str, str]  # entry point name -> "module" or "module:attr"


def read_project(root: Path) -> Project:
    """The package's name and its ``mhabench.backends`` entry points, from pyproject.toml."""
    path = root / "pyproject.toml"
    how = (f'add [project.entry-points."{backends.ENTRY_POINT_GROUP}"] NAME = "your_module" '
           "to pyproject.toml (mhabench's docs/backends.md)")
    if not path.is_file():
        raise InitError(f"no registered backend: {str(root)!r} has no pyproject.toml; {how}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise InitError(f"{str(path)!r} is not valid TOML ({err})") from err
    project = data.get("project") or {}
    entries = (project.get("entry-points") or {}).get(backends.ENTRY_POINT_GROUP) or {}
    if not isinstance(project.get("name"), str):
        raise InitError(f"{str(path)!r} has no [project] name; asv installs and uninstalls "
                        "the package by it")
    if not entries:
        raise InitError(f"no registered backend: {str(path)!r} declares no entry point in "
                        f"group {backends.ENTRY_POINT_GROUP!r}; {how}")
    return Project(root, project["name"], {str(k): str(v) for k, v in entries.items()})


def user_backends(project: Project) -> list[backends.Backend]:
    """The backends the package's entry-point modules register, imported from the checkout
    (``src/`` layouts too) unless the package is installed here already."""
    added = [str(p) for p in (project.root / "src", project.root) if p.is_dir()]
    sys.path[:0] = added
    try:
        backends.load_plugins()  # installed plug-ins first: the package may be one of them
        packages = set()
        for name, target in project.entry_points.items():
            module, _, attr = target.partition(":")
            try:
                loaded = importlib.import_module(module.strip())
                if attr:
                    hook = getattr(loaded, attr.strip())
                    if callable(hook):
                        hook()
            except Exception as err:  # the user's module, any error: name it
                raise InitError(f"entry point {name!r} = {target!r} cannot be loaded "
                                f"({type(err).__name__}: {err})") from err
            packages.add(module.strip().split(".")[0])
    finally:
        del sys.path[:len(added)]
    found = [backends.get(fw, name) for fw in FRAMEWORKS for name in backends.names(fw)]
    mine = [b for b in found if b.origin.split(".")[0] in packages]
    if not mine:
        raise InitError(f"no registered backend: the entry points of {project.name} "
                        f"({', '.join(project.entry_points.values())}) register none; call "
                        "mhabench.api.register_attention in that module")
    return mine


def checkout_backends(folder: Path) -> list[str]:
    """Register the backends of the package checked out at ``folder`` (its pyproject's
    ``mhabench.backends`` entry points), so that results of their cells load where the
    package is not installed. Returns warnings (a declared backend that does not load);
    nothing where the folder declares none."""
    try:
        project = read_project(Path(folder).resolve())
    except InitError:
        return []  # no plug-in's checkout: nothing to load
    try:
        user_backends(project)
    except InitError as err:
        return [str(err)]
    return []


def check_baselines(baselines: Sequence[str], frameworks: Sequence[str]) -> list[str]:
    """The built-in baselines, each one that some of ``frameworks`` has."""
    allowed = [b for b in backends.BUILTIN if any(b in backends.names(fw) for fw in frameworks)]
    for name in baselines:
        if name not in allowed:
            raise InitError(f"--baseline {name!r} is not allowed; choose built-in backends of "
                            f"{'/'.join(frameworks)}: {', '.join(allowed)}")
    return list(dict.fromkeys(baselines))


def framework_pins(frameworks: Sequence[str]) -> dict[str, str]:
    """The installed version of each package the frameworks need, and numpy's."""
    pins = {}
    for package in [p for fw in frameworks for p in FRAMEWORK_PACKAGES[fw]] + ["numpy"]:
        try:
            pins[package] = metadata.version(package)
        except metadata.PackageNotFoundError as err:
            raise InitError(f"{package} is not installed in this environment; mhabench init "
                            "pins the versions of the environment it runs in") from err
    return pins


def source_from(spec: str | None) -> Source:
    """Where asv's environments take mhabench from: ``spec`` (a git checkout of mhabench,
    a wheel, or ``mhabench @ git+URL@COMMIT``), or by default where this mhabench was
    installed from (pip's ``direct_url.json``)."""
    allowed = ("give a git checkout of mhabench, a mhabench wheel (.whl) or "
               "'mhabench @ git+URL@COMMIT'")
    if spec is None:
        try:
            direct = json.loads(metadata.distribution("mhabench").read_text(
                "direct_url.json") or "null")
        except metadata.PackageNotFoundError:
            direct = None
        if not direct:
            raise InitError(f"cannot tell where this mhabench was installed from; pass "
                            f"--mhabench: {allowed}")
        url = direct["url"]
        if "vcs_info" in direct:
            return _git_url(f"mhabench @ git+{url}@{direct['vcs_info']['commit_id']}")
        spec = url.removeprefix("file://")
    text = spec.strip()
    if text.replace(" ", "").startswith("mhabench@"):
        return _git_url(text)
    path = Path(text).expanduser().resolve()
    if path.is_file() and path.suffix == ".whl" and path.name.startswith("mhabench-"):
        return Source(str(path), local_digest((path,)), f"wheel {path}")
    if path.is_dir() and (path / "mhabench" / "__init__.py").is_file():
        return _checkout(path)
    raise InitError(f"--mhabench {spec!r} is not allowed; {allowed}")


def _git_url(requirement: str) -> Source:
    url, _, rev = requirement.partition("@")[2].strip().rpartition("@")
    if not url.startswith("git+") or not rev:
        raise InitError(f"--mhabench {requirement!r} is not allowed; a URL names a commit: "
                        "'mhabench @ git+URL@COMMIT'")
    warnings = () if _COMMIT.match(rev) else (
        f"{rev!r} is not a full commit hash: the environment is built once from what it "
        "names then, and never follows it",)
    return Source(f"mhabench @ {url}@{rev}", hashlib.sha256(requirement.encode()).hexdigest()[:10],
                  f"{url.removeprefix('git+')} at {rev[:12]}", warnings)


def _checkout(path: Path) -> Source:
    done = _git(path, "rev-parse", "HEAD")
    if done.returncode != 0:
        raise InitError(f"--mhabench {str(path)!r} is a folder but no git checkout; pin a "
                        "wheel of it instead (pip wheel --no-deps it, then --mhabench the .whl)")
    commit = done.stdout.strip()
    dirty = _git(path, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    warnings = (f"{path} has uncommitted changes; the pin is its commit {commit[:8]} without "
                "them",) if dirty else ()
    return Source(f"mhabench @ git+file://{path}@{commit}", commit[:10],
                  f"git checkout {path} at {commit[:8]}", warnings)


def pin_entries(source: Source) -> tuple[str, dict[str, str]]:
    """The config's two places that pin mhabench: the install command that installs it
    after the package (pip leaves it as it is when the environment has it already) and the
    environment variable that puts its digest in the environment's name."""
    command = ("in-dir={env_dir} python -m pip install --no-deps --no-build-isolation "
               + shlex.quote(source.requirement))
    return command, {PIN_VAR: source.digest}


def asv_folder_ignored(root: Path) -> bool:
    """Whether git ignores the folder asv writes its environments and results into, in the
    checkout ``root``. Asked of the folder's path with a trailing slash: the folder need not
    exist yet, and git matches a directory-only pattern (``.asv/``) only to a path it knows
    to be a folder."""
    return _git(root, "check-ignore", "-q", f"{ASV_FOLDER}/").returncode == 0


def _branch(root: Path) -> str:
    done = _git(root, "symbolic-ref", "--short", "HEAD")
    return done.stdout.strip() if done.returncode == 0 else "HEAD"


def render_config(project: Project, pins: dict[str, str], source: Source) -> str:
    """The text of the package's ``asv.conf.json`` (JSON with comments, as asv reads it)."""
    install, env = pin_entries(source)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"

    def field(comment: str, key: str, value: object) -> str:
        lines = [f"    // {line}" for line in comment.splitlines()] if comment else []
        return "\n".join([*lines, f"    {json.dumps(key)}: {json.dumps(value)}"])

    fields = [
        field("Written by `mhabench init`: mhabench's attention benchmarks at each commit of\n"
              "this package (mhabench's docs/own-repo.md).", "version", 1),
        field("", "project", project.name),
        field("", "project_url", ""),
        field("", "repo", "."),
        field("", "branches", [_branch(project.root)]),
        field("", "dvcs", "git"),
        field("", "environment_type", "virtualenv"),
        field("", "pythons", [python]),
        field("The frameworks at the versions mhabench init found; MHABENCH_PIN names the\n"
              "mhabench installed below, so another pin builds another environment.",
              "matrix", {"req": pins, "env": env}),
        field("Build and install only the package, never its dependencies (the environment\n"
              "holds them); virtualenv seeds setuptools for the build.", "build_command",
              ["python -m pip wheel --no-deps --no-build-isolation -w {build_cache_dir} "
               "{build_dir}"]),
        field(f"The package's wheel, then mhabench: {source.describe}.\nTo update mhabench, "
              "put in what `mhabench init --show-pin` prints.", "install_command",
              ["in-dir={env_dir} python -m pip install --no-deps --force-reinstall "
               "{wheel_file}", install]),
        field("", "uninstall_command", ["return-code=any python -m pip uninstall -y {project}"]),
        field("One process imports the frameworks, every cell forks from it.",
              "launch_method", "forkserver"),
        field("", "benchmark_dir", "benchmarks"),
        field("", "env_dir", f"{ASV_FOLDER}/env"),
        field("", "results_dir", f"{ASV_FOLDER}/results"),
        field("", "html_dir", f"{ASV_FOLDER}/html"),
        field("", "build_cache_size", 2),
    ]
    return "{\n" + ",\n".join(fields) + "\n}\n"


MODULE_TEXT = '''"""mhabench's attention benchmarks of {mine} beside the baseline(s) {baselines}.

Written by `mhabench init` with {source}. The classes are
mhabench's own (mhabench.bench), narrowed to the frameworks and backends below; asv
times them at each commit of this package with the mhabench that asv.conf.json pins. Edit
the lists to time other backends: each cell keeps its name, and new cells start histories
of their own.
"""

import os

# The grid (mhabench init --grid: tiny, quick or full); MHABENCH_GRID overrides it.
os.environ.setdefault("MHABENCH_GRID", {grid})

from mhabench.bench import {modules}  # noqa: E402
from mhabench.bench.cells import narrow  # noqa: E402

FRAMEWORKS = {frameworks}
BACKENDS = {backends}  # yours, then the built-in baselines
{classes}'''

CLASS_TEXT = '''

class {cls}({module}.{cls}):
    params = narrow({module}.{cls}, frameworks=FRAMEWORKS, backends=BACKENDS)
'''


def render_module(mine: Sequence[backends.Backend], baselines: Sequence[str], grid: str,
                  source: Source) -> str:
    frameworks = [fw for fw in FRAMEWORKS if any(b.framework == fw for b in mine)]
    names = list(dict.fromkeys(b.name for b in mine))
    classes = "".join(CLASS_TEXT.format(module=module, cls=cls) for module, cls in REUSED)
    return MODULE_TEXT.format(
        mine=", ".join(f"{b.name} ({b.framework})" for b in mine),
        baselines=", ".join(f"{fw} {b}" for fw in frameworks for b in baselines),
        source=f"mhabench {metadata.version('mhabench')}\n({source.describe})",
        grid=json.dumps(grid), modules=", ".join(sorted(m for m, _ in REUSED)),
        frameworks=json.dumps(frameworks),
        backends=json.dumps(names + [b for b in baselines if b not in names]), classes=classes)


@dataclass(frozen=True)
class Written:
    config: Path
    module: Path
    backends: list[backends.Backend]
    baselines: list[str]
    source: Source


def init(folder: Path, *, grid: str = "quick", baselines: Sequence[str] = DEFAULT_BASELINES,
         mhabench: str | None = None) -> Written:
    """Write ``asv.conf.json`` and ``benchmarks/bench_mhabench.py`` (with the package's
    ``__init__.py`` where it has none) into the git checkout ``folder``; neither may exist
    (raises :class:`InitError` before writing anything)."""
    if grid not in GRIDS:
        raise InitError(f"--grid {grid!r} is not allowed; choose one of {', '.join(GRIDS)}")
    root = git_root(folder)
    for path in (root / CONFIG, root / MODULE):
        if path.exists():
            raise InitError(f"{str(path)!r} exists; mhabench init never overwrites a file: "
                            "move it aside, or see mhabench's docs/own-repo.md to add the "
                            "suite by hand")
    project = read_project(root)
    mine = user_backends(project)
    frameworks = [fw for fw in FRAMEWORKS if any(b.framework == fw for b in mine)]
    chosen = check_baselines(baselines or DEFAULT_BASELINES, frameworks)
    pins = framework_pins(frameworks)
    source = source_from(mhabench)
    config, module = root / CONFIG, root / MODULE
    module.parent.mkdir(exist_ok=True)
    package = module.parent / "__init__.py"  # asv discovers benchmarks in a package only
    if not package.exists():
        package.write_text("")
    config.write_text(render_config(project, pins, source))
    module.write_text(render_module(mine, chosen, grid, source))
    return Written(config, module, mine, chosen, source)
