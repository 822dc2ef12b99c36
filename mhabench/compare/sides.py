"""A dependency set of a versions comparison or a release sweep: the project's asv
environment with some packages pinned to other versions from the package index, or
replaced by local wheels or project folders.

A set is written as a user types it, ``"jax==0.9.2 jaxlib==0.9.2 flax==0.12.2"`` or
``"./my_attention"`` (a project folder or a ``.whl`` file), items separated by spaces.
:func:`parse_side` turns it into a :class:`Side`; :func:`versions_config` writes the asv
config that builds the sets: the project's ``asv.conf.json`` with one ``include`` entry
per set, each the project's matrix with the set's pins swapped in (a package the matrix
lacks is added), local packages installed after the project (``install_command``), and two
environment variables:

- ``MHABENCH_SIDE`` (not part of the build): the set's label (``base``, ``new``, a
  release's version), so the sets' results carry different environment names even where
  two sets are the same;
- ``MHABENCH_LOCAL`` (part of the build, local packages only): a digest of the local
  packages' files, so a changed package gets an environment of its own, and an unchanged
  set reuses the one built before.

A list of releases (:func:`set_labels`) is told apart by the versions that differ between
its sets; a range of a package's releases on the index (:func:`release_range`) pairs each
with its companions (jax with the jaxlib of its version and the flax pip's resolver picks).
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mhabench.asvproject.asv_config import local_digest

SIDES = ("base", "new")
SIDE_VAR = "MHABENCH_SIDE"
LOCAL_VAR = "MHABENCH_LOCAL"
# PEP 508 names; a pin is exactly NAME==VERSION (the matrix holds versions, not ranges)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
# A set's label names its asv environment and folders: these characters only.
_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")


class SideError(ValueError):
    """A side that cannot be built as written (bad syntax, unknown package or version,
    missing path, an install that failed)."""


def canonical(name: str) -> str:
    """A package name as the index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Side:
    label: str  # "base" or "new"; a release's label ("0.10.0")
    text: str  # as the user wrote it
    pins: dict[str, str] = field(default_factory=dict)  # canonical name -> version
    local: tuple[Path, ...] = ()  # wheels or project folders, absolute
    # the local packages' digest, read once: a build writes into a project folder
    digest: str = ""
    kind: str = "side"  # what its messages call it: a "side" of a comparison, a "set"

    @property
    def name(self) -> str:
        """How messages name it: "side new", "set 0.10.0"."""
        return f"{self.kind} {self.label}"

    def describe(self) -> str:
        parts = [f"{name} {version}" for name, version in self.pins.items()]
        parts += [path.name for path in self.local]
        return ", ".join(parts) or "the project's pins"


def parse_side(label: str, text: str, kind: str = "side") -> Side:
    """The side (or set: ``kind``) ``label`` as written in ``text`` (raises
    :class:`SideError`)."""
    pins: dict[str, str] = {}
    local: list[Path] = []
    for item in shlex.split(text):
        match = _PIN.match(item)
        if match:
            name = canonical(match.group(1))
            if name in pins:
                raise SideError(f"{kind} {label}: {name} is pinned twice ({text!r})")
            pins[name] = match.group(2)
            continue
        path = Path(item).expanduser()
        if path.is_file() and path.suffix == ".whl" or path.is_dir() and any(
                (path / f).is_file() for f in ("pyproject.toml", "setup.py")):
            local.append(path.resolve())
            continue
        raise SideError(f"{kind} {label}: {item!r} is neither NAME==VERSION nor an existing "
                        "wheel (.whl) or project folder (with pyproject.toml or setup.py)")
    return Side(label, text, pins, tuple(local), local_digest(tuple(local)) if local else "",
                kind)


def index_versions(name: str) -> list[str] | None:
    """The versions of ``name`` on the package index pip is set up for (newest first), or
    None if the index does not know the package."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                          capture_output=True, text=True)
    found = re.search(r"^Available versions: (.*)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not found:
        return None
    return [v.strip() for v in found.group(1).split(",") if v.strip()]


def local_version(path: Path) -> tuple[str, str]:
    """A local package's (name, version): a wheel's from its file name, a project folder's
    from its ``pyproject.toml``; the folder's own name where that has none."""
    if path.suffix == ".whl":
        parts = path.stem.split("-")
        return canonical(parts[0]), parts[1] if len(parts) > 1 else path.stem
    try:
        project = tomllib.loads((path / "pyproject.toml").read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        project = {}
    return canonical(str(project.get("name") or path.name)), str(project.get("version")
                                                                  or path.name)


def set_labels(sides: Sequence[Side], project: dict[str, str]) -> tuple[list[str], list[str]]:
    """A label for each set of a list, and the packages whose versions tell them apart (in
    the order the sets name them). A label is the version of the first such package
    ("0.10.0"; a set that pins nothing has the project's, ``project``), then of the next
    ones after "+" until every label differs. Raises :class:`SideError` where two sets are
    one."""
    for i, j in itertools.combinations(range(len(sides)), 2):
        if (sides[i].pins, sides[i].local) == (sides[j].pins, sides[j].local):
            raise SideError(f"sets {i + 1} and {j + 1} are one dependency set "
                            f"({sides[i].text!r}): give each release once")
    items = [{**side.pins, **dict(local_version(path) for path in side.local)}
             for side in sides]
    names = list(dict.fromkeys(name for found in items for name in found))
    full = [[found.get(n, project.get(n)) or f"no-{n}" for n in names] for found in items]
    varying = [i for i, n in enumerate(names) if len({row[i] for row in full}) > 1]
    labels: list[str] = []
    for count in range(1, len(varying) + 1):
        labels = ["+".join(v for k, v in enumerate(values) if not k or v != values[k - 1])
                  for values in ([row[i] for i in varying[:count]] for row in full)]
        if len(set(labels)) == len(labels):
            break
    if len(set(labels)) < len(sides):  # the same versions, other files: the paths' names
        labels = ["+".join([*([label] if label else []), *(p.name for p in side.local)])
                  for label, side in zip(labels or [""] * len(sides), sides, strict=True)]
    if len(set(labels)) < len(sides):
        labels = [f"{label}-{i + 1}" for i, label in enumerate(labels)]
    return [_LABEL_CHARS.sub("_", label) for label in labels], [names[i] for i in varying]


# Packages released together: each of the first at the package's own version, and the
# newest of the second that accepts it, as pip's resolver picks.
COMPANIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "jax": (("jaxlib",), ("flax",))}


def resolve_newest(requirements: dict[str, str], free: Sequence[str]) -> dict[str, str]:
    """The versions of the ``free`` packages that pip's resolver picks beside
    ``requirements`` (name -> version, "" for any): ``pip install --dry-run --report -``,
    nothing installed. Raises :class:`SideError` with pip's reason."""
    wanted = [f"{n}=={v}" if v else n for n, v in requirements.items()] + list(free)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run",
                           "--ignore-installed", "--only-binary", ":all:", "--quiet",
                           "--report", "-", *wanted], capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
        raise SideError(errors[0] if errors else done.stderr.strip()[-300:])
    report = json.loads(done.stdout)
    picked = {canonical(i["metadata"]["name"]): i["metadata"]["version"]
              for i in report.get("install", [])}
    return {canonical(n): picked[canonical(n)] for n in free if canonical(n) in picked}


def release_range(package: str, first: str, last: str, project: dict[str, str], *,
                  lookup: Callable[[str], list[str] | None] | None = None,
                  resolve: Callable[[dict[str, str], Sequence[str]], dict[str, str]]
                  | None = None) -> tuple[list[str], list[str]]:
    """The releases of ``package`` on the index from ``first`` to ``last`` (both included,
    oldest first), each written as a set with its :data:`COMPANIONS` (the resolved ones
    picked beside the project's other pins, ``project``), and a line for each release left
    out (a companion missing at its version, or none that pip resolves). Raises
    :class:`SideError` where the range is not one or holds no release."""
    from packaging.version import InvalidVersion, Version

    name = canonical(package)
    try:
        low, high = Version(first), Version(last)
    except InvalidVersion as err:
        raise SideError(f"--range {package} {first} {last}: {err}; give two versions, the "
                        "older first (e.g. jax 0.6.0 0.10.2)") from None
    if low >= high:
        raise SideError(f"--range {package} {first} {last}: give the older version first")
    found = (lookup or index_versions)(name)
    if found is None:
        raise SideError(f"--range: package {package!r} is not on the package index")
    known = sorted((v for v in found if _version(v) is not None), key=_version)
    inside = [v for v in known if low <= _version(v) <= high]
    if not inside:
        near = [v for v in known if _version(v) < low][-1:] + [
            v for v in known if _version(v) > high][:1]
        raise SideError(f"--range: no release of {package} on the package index from {first} "
                        f"to {last}; the nearest there: {', '.join(near) or 'none'}")
    same, resolved = COMPANIONS.get(name, ((), ()))
    served = {c: set((lookup or index_versions)(c) or ()) for c in same}
    others = {n: v for n, v in project.items() if n not in {name, *same, *resolved}}
    texts, left_out = [], []
    for version in inside:
        missing = [c for c in same if version not in served[c]]
        if missing:
            left_out.append(f"{package} {version} left out: {', '.join(missing)} {version} "
                            "is not on the package index")
            continue
        pins = {name: version, **{c: version for c in same}}
        if resolved:
            try:
                pins.update((resolve or resolve_newest)({**others, **pins}, resolved))
            except SideError as err:
                left_out.append(f"{package} {version} left out: pip resolves no "
                                f"{', '.join(resolved)} for it ({err})")
                continue
        texts.append(" ".join(f"{n}=={v}" for n, v in pins.items()))
    return texts, left_out


def _version(text: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def check_on_index(side: Side, installed: dict[str, str],
                   lookup: Callable[[str], list[str] | None] | None = None) -> None:
    """Every pin of ``side`` names a package and version the index serves; a pin equal to
    the project's own version (``installed``) is taken as it is (raises :class:`SideError`
    naming the package and the versions there). ``lookup``: :func:`index_versions`, or a
    cache of it where many sets pin one package."""
    for name, version in side.pins.items():
        if installed.get(name) == version:
            continue
        versions = (lookup or index_versions)(name)
        if versions is None:
            raise SideError(f"{side.name}: package {name!r} is not on the package index")
        if version not in versions:
            raise SideError(f"{side.name}: {name} {version} is not on the package "
                            f"index; versions there: {', '.join(versions[:10])}"
                            + (" ..." if len(versions) > 10 else ""))


def side_include(conf: dict[str, Any], side: Side, leave_out: Sequence[str] = ()
                 ) -> dict[str, Any]:
    """asv's ``include`` entry that builds ``side``: the project's requirements, one version
    each, but those named in ``leave_out`` (canonical names) that the side does not pin,
    with the side's pins swapped in, and the side's environment variables."""
    matrix = dict(conf.get("matrix") or {})
    if not any(k in matrix for k in ("req", "env", "env_nobuild")):
        matrix = {"req": matrix}  # asv's old style: the whole matrix is requirements
    entry: dict[str, Any] = {"python": str((conf.get("pythons") or [
        f"{sys.version_info.major}.{sys.version_info.minor}"])[0])}
    for kind in ("req", "env", "env_nobuild"):
        entry[kind] = {}
        for name, values in (matrix.get(kind) or {}).items():
            values = values if isinstance(values, list) else [values]
            if len(values) != 1:
                raise SideError(f"asv.conf.json's matrix gives {name} {len(values)} values; "
                                "a versions comparison needs one each")
            entry[kind][name] = values[0]
    pinned = {canonical(k) for k in side.pins}
    entry["req"] = {k: v for k, v in entry["req"].items()
                    if canonical(k) not in leave_out or canonical(k) in pinned}
    by_canonical = {canonical(k): k for k in entry["req"]}
    for name, version in side.pins.items():
        entry["req"][by_canonical.get(name, name)] = version
    if side.local:
        entry["env"][LOCAL_VAR] = side.digest or local_digest(side.local)
    entry["env_nobuild"][SIDE_VAR] = side.label
    return entry


def project_requirements(root: Path) -> dict[str, str]:
    """The project's own requirements (``asv.conf.json``'s matrix, one version each), by
    canonical name."""
    from asv.util import load_json

    conf = load_json(str(Path(root) / "asv.conf.json"), js_comments=True)
    return {canonical(k): v for k, v in side_include(conf, Side("", ""))["req"].items()}


INSTALL_LOCAL = """import json, subprocess, sys
paths = json.load(open(sys.argv[1])).get(sys.argv[2], [])
if paths:
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                    "--force-reinstall", *paths], check=True)
"""


def versions_config(root: Path, folder: Path, sides: list[Side], name: str,
                    leave_out: Sequence[str] = ()) -> Path:
    """Write ``folder/<name>/asv.conf.json``: the project's config with one environment per
    side (without the requirements in ``leave_out``, :func:`side_include`), in the order of
    ``sides`` (asv runs a round's environments in this order), and results in
    ``folder/results``. Local packages are installed after the project, by a script that
    looks up the environment's name."""
    from asv import environment as asv_env
    from asv.config import Config
    from asv.util import load_json

    conf = load_json(str(Path(root) / "asv.conf.json"), js_comments=True)
    for key in ("repo", "benchmark_dir", "env_dir"):
        if key in conf and not Path(conf[key]).is_absolute():
            conf[key] = str((Path(root) / conf[key]).resolve())
    conf["include"] = [side_include(conf, side, leave_out) for side in sides]
    conf["matrix"] = {}
    conf["exclude"] = [{"python": ".*"}]  # the empty matrix's bare environment
    folder = Path(folder).resolve()
    script, local = folder / "install_local.py", folder / "local.json"
    conf["install_command"] = [*(conf.get("install_command") or [
        "in-dir={env_dir} python -mpip install {wheel_file}"]),
        f"python {shlex.quote(str(script))} {shlex.quote(str(local))} {{env_name}}"]
    conf.update(results_dir=str(folder / "results"), html_dir=str(folder / "html"))
    out = folder / name
    out.mkdir(parents=True)
    path = out / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1) + "\n")
    # which environment installs which local packages: asv gives the script its name
    envs = list(asv_env.get_environments(Config.load(str(path)), None, verbose=False))
    if len(envs) != len(sides):
        raise SideError(f"{path} describes {len(envs)} asv environments; expected "
                        f"{len(sides)}")
    script.write_text(INSTALL_LOCAL)
    mapping = json.loads(local.read_text()) if local.is_file() else {}
    for env, side in zip(envs, sides, strict=True):
        mapping[env.name] = [str(p) for p in side.local]
    local.write_text(json.dumps(mapping, indent=1) + "\n")
    return path


def environments(config: Path) -> dict[str, Any]:
    """asv's environment objects of a versions config, by side label."""
    from asv import environment as asv_env
    from asv.config import Config

    envs = asv_env.get_environments(Config.load(str(config)), None, verbose=False)
    return {env.env_vars[SIDE_VAR]: env for env in envs}


def installed_versions(python: Path, names: list[str]) -> dict[str, str | None]:
    """What ``python`` has installed of ``names`` (None: not installed)."""
    script = ("import json, sys\nfrom importlib import metadata\nout = {}\n"
              "for n in sys.argv[1:]:\n    try:\n        out[n] = metadata.version(n)\n"
              "    except metadata.PackageNotFoundError:\n        out[n] = None\n"
              "print(json.dumps(out))")
    done = subprocess.run([str(python), "-c", script, *names], capture_output=True, text=True)
    if done.returncode != 0:
        raise SideError(f"{python} could not report its packages: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)
