"""The project's asv.conf.json, copied with results and HTML in a folder of their own:
what the gate's stages and each shard run under, so the configured results are never
written by them; and the digest of local packages that an environment's name carries
(a versions side's packages, a user's pinned mhabench wheel)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

BUILD_CACHE = 16  # builds asv keeps per environment for rounds written here


def write_config(root: Path, out: Path, exist_ok: bool = False,
                 results: Path | None = None, html: Path | None = None) -> Path:
    """Write ``out/asv.conf.json``: ``root``'s config with ``results_dir`` and
    ``html_dir`` under ``out`` (or at ``results``, ``html``); ``out`` is created and must
    be new unless ``exist_ok``."""
    from asv.util import load_json

    conf = load_json(str(Path(root) / "asv.conf.json"), js_comments=True)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=exist_ok)
    # asv reads a config's paths from the config's own folder: make the project's absolute.
    for key in ("repo", "benchmark_dir", "env_dir"):
        if key in conf and not Path(conf[key]).is_absolute():
            conf[key] = str((Path(root) / conf[key]).resolve())
    conf.update(results_dir=str(Path(results or out / "results").resolve()),
                html_dir=str(Path(html or out / "html").resolve()))
    # asv keeps the newest few builds of an environment; rounds that alternate three
    # commits (a culprit search's probe) through a cache of two rebuilt one every round
    conf["build_cache_size"] = max(int(conf.get("build_cache_size", 2)), BUILD_CACHE)
    path = out / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1) + "\n")
    return path


def local_digest(paths: tuple[Path, ...]) -> str:
    """A short digest of the local packages' files (a folder's tracked-looking files: no
    build output, caches or VCS data)."""
    h = hashlib.sha256()
    skip = {".git", "build", "dist", "__pycache__", ".eggs"}
    for path in paths:
        files = [path] if path.is_file() else sorted(
            p for p in path.rglob("*") if p.is_file()
            and not any(part in skip or part.endswith(".egg-info")
                        for part in p.relative_to(path).parts)
            and not p.name.endswith(".pyc"))
        for f in files:
            h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:10]
