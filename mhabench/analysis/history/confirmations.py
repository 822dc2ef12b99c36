"""Verdicts of re-measurement (``mhabench confirm``): a history's shift between two commits,
re-run in fresh interleaved rounds at both, as the gate's second stage does.

Each ``mhabench confirm`` run writes ``<folder>/<UTC time>/confirmations.json`` (never
over an existing file); :func:`load_confirmations` reads every one under the folder and
the newest verdict of a shift wins. The report reads them from ``.asv/confirm`` beside
``.asv/results`` (``mhabench report --confirmations``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "confirmations.json"
VERDICTS = ("confirmed", "cleared")


@dataclass(frozen=True)
class Confirmation:
    """The verdict of fresh rounds of processes on one cell between the commits either side
    of a shift (:func:`mhabench.compare.gate.confirm`)."""

    machine: str
    cell: str  # asv's name with parameters, as its tables print it
    before: str  # full commit hashes
    after: str
    verdict: str  # "confirmed" (slower: interval clear of 1, beyond the factor) or "cleared"
    ratio: float | None  # after / before over the fresh rounds
    rounds: int
    factor: float
    date: str  # ISO time of the run
    folder: str  # the asv results of the rounds
    low: float | None = None  # the ratio's 95 % interval over processes (None: not known)
    high: float | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.machine, self.cell, self.before, self.after)


def save_confirmations(folder: Path, records: list[Confirmation]) -> Path:
    """Write ``folder/confirmations.json``; refuses to replace one."""
    path = Path(folder) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as fh:  # "x": never over an earlier verdict
        json.dump({"version": 1, "confirmations": [asdict(r) for r in records]}, fh,
                  indent=1)
    return path


def load_confirmations(folder: str | Path | None
                       ) -> dict[tuple[str, str, str, str], Confirmation]:
    """Every verdict under ``folder`` (none when it is None or missing), the newest per
    (machine, cell, before, after). A file that is not one of ours raises ValueError
    naming it."""
    if folder is None or not Path(folder).is_dir():
        return {}
    out: dict[tuple[str, str, str, str], Confirmation] = {}
    for path in sorted(Path(folder).rglob(FILE)):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))["confirmations"]
            records = [Confirmation(**row) for row in rows]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a confirmations file of mhabench confirm "
                             f"({exc})") from exc
        for record in records:
            if record.verdict not in VERDICTS:
                raise ValueError(f"{path}: verdict {record.verdict!r} is not one of "
                                 f"{', '.join(VERDICTS)}")
            if record.key not in out or out[record.key].date <= record.date:
                out[record.key] = record
    return out
