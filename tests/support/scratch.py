"""A scratch clone of this repository whose asv environment borrows the running
interpreter's site-packages (torch, jax) through a .pth file, so asv builds and installs
only mhabench per commit, as it does for users, in seconds: the gate test and the
real-history test plant their slowdowns in such a clone.

A commit's wheel is unpacked into the environment rather than pip-installed: pip's own
start-up (3.6 s to uninstall and install) ran before every round, and installs change no
timing."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASV = [sys.executable, "-m", "asv"]

# A planted slowdown: timing.prepare's step spins for a fraction of its own duration in
# the chosen (framework, backend) cells.
PREPARED = """    for _ in range(warmup):
        step()
    if settle:
        warm_until_settled(step)
    return step
"""
SLOWED = """    for _ in range(warmup):
        step()
    if settle:
        warm_until_settled(step)
    extra = {extras!r}.get((config.framework, config.backend))
    if extra is None:
        return step

    def slowed() -> Any:  # a regression planted by a test (tests/support/scratch.py)
        start = time.perf_counter()
        out = step()
        until = time.perf_counter() + extra * (time.perf_counter() - start)
        while time.perf_counter() < until:
            pass
        return out

    return slowed
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid",
        "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def site_borrower(tmp: Path) -> Path:
    """A script (``tmp/borrow_site.py``) that, run by an asv environment's python, puts
    the running interpreter's site-packages (torch, jax) on that environment's path: an
    install_command step instead of installing the frameworks into it."""
    pth_writer = tmp / "borrow_site.py"
    ours = site.getsitepackages()[0]
    pth_writer.write_text("import site\n"
                          f"path = site.getsitepackages()[0] + '/borrowed.pth'\n"
                          f"open(path, 'w').write({ours!r})\n")
    return pth_writer


def scratch_clone(tmp: Path) -> tuple[Path, str]:
    """A clone of this repository in ``tmp/scratch`` with its asv.conf.json set to borrow
    site-packages and keep results, html and environments under ``tmp``; returns the clone
    and the commit that set it up."""
    repo = tmp / "scratch"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    pth_writer = site_borrower(tmp)
    unpack = tmp / "unpack_wheel.py"
    unpack.write_text("import pathlib, shutil, site, sys, zipfile\n"
                      "target = pathlib.Path(site.getsitepackages()[0])\n"
                      "for old in target.glob('mhabench*'):\n"
                      "    shutil.rmtree(old) if old.is_dir() else old.unlink()\n"
                      "if len(sys.argv) > 1:\n"
                      "    zipfile.ZipFile(sys.argv[1]).extractall(target)\n")
    from asv.util import load_json

    conf = load_json(str(repo / "asv.conf.json"), js_comments=True)
    conf.update(matrix={}, pythons=[f"{sys.version_info.major}.{sys.version_info.minor}"],
                branches=["master", "main"], results_dir=str(tmp / "results"),
                html_dir=str(tmp / "html"), env_dir=str(tmp / "env"))
    conf["install_command"] = [f"in-dir={{env_dir}} python {unpack} {{wheel_file}}",
                               f"python {pth_writer}"]
    conf["uninstall_command"] = [f"return-code=any python {unpack}"]
    (repo / "asv.conf.json").write_text(json.dumps(conf, indent=1))
    return repo, commit_all(repo, "scratch: virtualenv borrowing site-packages")


def same_code_commit(repo: Path, note: str) -> str:
    """A commit that changes no code (a line added to the README)."""
    (repo / "README.md").write_text((repo / "README.md").read_text() + f"\n{note}\n")
    return commit_all(repo, f"no code change: {note}")


def plant(repo: Path, cells: set[tuple[str, str]] | dict[tuple[str, str], float],
          extra: float | None, message: str) -> str:
    """Commit a slowdown of ``extra`` (0.5: 1.5x) in the (framework, backend) ``cells``
    (or each cell's own, ``cells`` a dict and ``extra`` None) on top of the checked-out
    commit (which must have no planted slowdown yet)."""
    extras = dict(cells) if isinstance(cells, dict) else {cell: extra for cell in cells}
    timing = repo / "mhabench" / "measure" / "timing.py"
    text = timing.read_text()
    assert text.count(PREPARED) == 1, (
        "timing.prepare changed shape: update tests/support/scratch.py")
    timing.write_text(text.replace(PREPARED, SLOWED.format(extras=dict(sorted(
        extras.items())))))
    return commit_all(repo, message)


def asv_env(home: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment to run asv in a scratch clone with: the private asv machine home,
    no PYTHONPATH (asv's environment must import the commit's own mhabench)."""
    return {**os.environ, **home, "PYTHONPATH": "", **extra}
