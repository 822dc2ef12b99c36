"""The device bundle's git history (``scripts/device-bundle`` builds ``.whl/``).

A lent machine gets a copy of the working tree that may have no ``.git``, or a stale one;
asv resolves the commit and its date through git. :func:`prepare_history` makes git read
the bundle's history once the copied files are checked to be exactly its commit, so the
results name the code that ran, and never moves or rewrites a ``.git`` that exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CONFIG_BRANCHES = ("main",)  # asv.gpu.conf.json's "branches": asv checks that they exist


class BundleError(RuntimeError):
    """A one-line reason the bundle cannot name the commit that runs."""


def _git(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def prepare_history(repo: Path, bundle_dir: Path) -> tuple[dict[str, str], str]:
    """Make asv read the history of the commit whose code is in ``repo``.

    With a bundle (``bundle_dir/mhabench.bundle`` and ``commit.txt``), its commit is the
    truth, once the copied files are checked to be exactly that commit's: a tree without
    ``.git`` gets one cloned from the bundle; a tree whose ``.git`` is another commit (a
    stale copy, as a device gave) keeps it untouched, and git is pointed at a clone of the
    bundle through ``GIT_DIR``. Returns the environment for asv's git calls and a note.
    """
    bundle, stamp = bundle_dir / "mhabench.bundle", bundle_dir / "commit.txt"
    if not stamp.is_file() or not bundle.is_file():
        if not (repo / ".git").exists():
            raise BundleError(f"{repo} has no .git and no bundle in {bundle_dir}; build "
                                 "it with scripts/device-bundle and carry it")
        return {}, "repository present (no bundle to check it against)"
    if not shutil.which("git"):
        raise BundleError("git is not installed here: asv needs it to resolve the commit")
    expected = stamp.read_text().strip()
    history = Path(tempfile.mkdtemp(prefix="mhabench-history-")) / "history.git"
    if _git("clone", "-q", "--bare", str(bundle), str(history)).returncode != 0:
        raise BundleError(f"{bundle} is not a git bundle; rebuild it")
    head = _git("--git-dir", str(history), "rev-parse", "HEAD").stdout.strip()
    if head != expected:
        raise BundleError(f"the bundle holds commit {head[:8]}, commit.txt says "
                             f"{expected[:8]}; rebuild the bundle")
    # The copied files must be the bundle commit's, or results would name the wrong code.
    tree = ("--git-dir", str(history), "--work-tree", str(repo))
    _git(*tree, "read-tree", "HEAD")
    if _git(*tree, "diff", "--quiet").returncode != 0:
        changed = _git(*tree, "diff", "--name-only").stdout.split()
        raise BundleError(f"the copied tree differs from the bundle's commit "
                             f"{expected[:8]} ({', '.join(changed[:3])}); commit, then "
                             "rebuild the bundle (scripts/device-bundle)")
    for branch in CONFIG_BRANCHES:  # asv checks that its config's branches exist
        _git("--git-dir", str(history), "branch", "-f", branch, "HEAD")
    if not (repo / ".git").exists():
        shutil.move(str(history), str(repo / ".git"))
        _git("-C", str(repo), "config", "core.bare", "false")
        _git("-C", str(repo), "read-tree", "HEAD")
        return {}, f"repository rebuilt from {bundle} at {expected[:8]}"
    own = _git("-C", str(repo), "rev-parse", "HEAD").stdout.strip()
    if own == expected:
        return {}, f"repository present at the bundle's commit {expected[:8]}"
    return {"GIT_DIR": str(history)}, (
        f"the copied .git is at {own[:8] or 'no commit'}, the files are the bundle's "
        f"{expected[:8]}: git reads {history} (the copied .git is left as it was)")
