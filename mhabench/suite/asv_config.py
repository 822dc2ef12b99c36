"""The project's asv.conf.json, copied with results and HTML in a folder of their own:
what the gate's stages and each shard run under, so the configured results are never
written by them."""

from __future__ import annotations

import json
from pathlib import Path


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
    path = out / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1) + "\n")
    return path
