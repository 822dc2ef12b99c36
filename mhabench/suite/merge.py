"""Put another machine's asv results (a GPU run's ``results.tar.gz``, or a results folder)
beside this machine's, so ``mhabench report`` shows the machines side by side.

Nothing already there is lost or overwritten: new files are copied; identical files are
left alone; ``benchmarks.json`` gains the benchmarks it lacked (existing entries kept); a
different file under the same name stops the merge before anything is written, naming
it (import under another machine name with ``as_machine``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

BENCHMARKS = "benchmarks.json"


class MergeError(ValueError):
    """The merge would lose or overwrite something, or its source is not asv results."""


def _results_root(src: Path, scratch: Path) -> Path:
    """The results folder inside ``src`` (a tarball is unpacked into ``scratch``)."""
    if src.is_file():
        if not tarfile.is_tarfile(src):
            raise MergeError(f"{str(src)!r} is neither a results folder nor a tarball")
        with tarfile.open(src) as tar:
            tar.extractall(scratch, filter="data")
        src = scratch
    candidates = [p.parent for p in src.rglob(BENCHMARKS)]
    if len(candidates) != 1:
        raise MergeError(f"{str(src)!r} holds {len(candidates)} asv results folders "
                         f"(folders with {BENCHMARKS}); expected one")
    return candidates[0]


def _rename_machine(folder: Path, new: str) -> None:
    """Rewrite one machine folder's files to the machine name ``new`` (in place, in the
    scratch copy)."""
    for path in folder.glob("*.json"):
        data = json.loads(path.read_text())
        if path.name == "machine.json":
            data["machine"] = new
        elif isinstance(data.get("params"), dict):
            data["params"]["machine"] = new
        path.write_text(json.dumps(data))


def merge(src: str | Path, dest: str | Path, as_machine: str | None = None) -> list[str]:
    """Merge the asv results in ``src`` into the results folder ``dest``; returns one line
    per file added or extended."""
    src, dest = Path(src), Path(dest)
    if not src.exists():
        raise MergeError(f"{str(src)!r} does not exist")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        root = _results_root(src, scratch / "unpacked")
        if as_machine is not None:
            copy = scratch / "renamed"
            shutil.copytree(root, copy)
            machines = [p for p in copy.iterdir() if p.is_dir()]
            if len(machines) != 1:
                raise MergeError(f"as_machine needs one machine in {str(src)!r}, found "
                                 f"{len(machines)}")
            _rename_machine(machines[0], as_machine)
            machines[0].rename(copy / as_machine)
            root = copy
        plan: list[tuple[Path, Path]] = []
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.name == BENCHMARKS:
                continue
            target = dest / path.relative_to(root)
            if target.exists():
                if target.read_bytes() != path.read_bytes():
                    raise MergeError(
                        f"{target} exists with other contents; nothing was merged (import "
                        "under another machine name, e.g. --as-machine NAME)")
                continue
            plan.append((path, target))
        ours = dest / BENCHMARKS
        theirs = json.loads((root / BENCHMARKS).read_text())
        known = json.loads(ours.read_text()) if ours.is_file() else {}
        added = {k: v for k, v in theirs.items() if k not in known}
        done = []
        for path, target in plan:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            done.append(f"added {target}")
        if added or not ours.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            ours.write_text(json.dumps({**known, **added}, indent=4))
            done.append(f"{ours}: {len(added)} benchmark(s) added, "
                        f"{len(known)} kept")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-import", description="Merge another machine's asv results (a GPU run's "
        "results.tar.gz or a results folder) into this machine's, never overwriting.")
    parser.add_argument("source", help="results.tar.gz from scripts/gpu-grid, or a folder")
    parser.add_argument("--results", default=".asv/results",
                        help="this machine's results folder (default .asv/results)")
    parser.add_argument("--as-machine", default=None,
                        help="import under this machine name instead of the source's")
    args = parser.parse_args(argv)
    try:
        for line in merge(args.source, args.results, args.as_machine):
            print(line)
    except (MergeError, OSError, json.JSONDecodeError) as exc:
        print(f"gpu-import: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
