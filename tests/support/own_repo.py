"""A plug-in package's own git repository, as a user has it before ``mhabench init``: the
test plug-in (``tests/support/plugin_package.py``) committed at release 1.0, and a wheel
of this checkout's mhabench for the asv environments to pin (the working tree, uncommitted
changes included, as the tests run it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from support.plugin_package import write_release
from support.scratch import ROOT, commit_all, git, site_borrower


def plugin_checkout(tmp: Path) -> Path:
    """``tmp/mysdpa``: a git repository on branch main holding the plug-in at 1.0."""
    repo = write_release(tmp / "mysdpa", "1.0", written_out=False)
    git(repo, "init", "-q")
    git(repo, "checkout", "-q", "-b", "main")
    commit_all(repo, "mysdpa 1.0")
    return repo


def mhabench_wheel(tmp: Path) -> Path:
    """A wheel of this checkout's mhabench, built from a copy (no build output lands in
    the checkout)."""
    src = tmp / "mhabench-src"
    shutil.copytree(ROOT / "mhabench", src / "mhabench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp / "wheel"), str(src)], check=True,
                   capture_output=True)
    return next((tmp / "wheel").glob("mhabench-*.whl"))


def borrow_frameworks(repo: Path, tmp: Path) -> None:
    """Make the asv.conf.json that init wrote borrow this interpreter's site-packages
    (torch) instead of installing its pinned frameworks; the package and the pinned
    mhabench are still built and installed by asv, per commit, as for a user."""
    from asv.util import load_json

    path = repo / "asv.conf.json"
    conf = load_json(str(path), js_comments=True)
    conf["matrix"] = {"env": conf["matrix"]["env"]}  # the pin stays in the env's name
    conf["install_command"] = [*conf["install_command"], f"python {site_borrower(tmp)}"]
    conf["pythons"] = [f"{sys.version_info.major}.{sys.version_info.minor}"]
    path.write_text(json.dumps(conf, indent=1))


UNPACK = """import csv, pathlib, shutil, site, sys, zipfile
target = pathlib.Path(site.getsitepackages()[0])
for wheel in map(pathlib.Path, sys.argv[1:]):
    dist = wheel.name.split("-")[0].lower()
    for info in target.glob("*.dist-info"):
        if info.name.split("-")[0].lower().replace("-", "_") == dist:
            for row in csv.reader((info / "RECORD").open()):
                path = target / row[0]
                if path.is_file():
                    path.unlink()
            shutil.rmtree(info, ignore_errors=True)
    zipfile.ZipFile(wheel).extractall(target)
"""


def unpack_installs(repo: Path, tmp: Path, wheel: Path) -> None:
    """Make the asv.conf.json that init wrote (after :func:`borrow_frameworks`) unpack the
    package's wheel and the pinned mhabench's instead of pip-installing them: pip's
    start-up, three times a round, is most of a round for a few sub-millisecond cells (the
    culprit search's rounds in CI). What is installed, and from which wheels, is the same."""
    from asv.util import load_json

    script = tmp / "unpack_wheels.py"
    script.write_text(UNPACK)
    path = repo / "asv.conf.json"
    conf = load_json(str(path), js_comments=True)
    borrow = [c for c in conf["install_command"] if "borrow" in c or "site" in c][-1:]
    conf["install_command"] = [f"in-dir={{env_dir}} python {script} {{wheel_file}} {wheel}",
                               *borrow]
    conf["uninstall_command"] = ["return-code=any python -c pass"]
    path.write_text(json.dumps(conf, indent=1))
