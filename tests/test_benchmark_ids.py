"""asv's ids of the suite's benchmarks stay put.

asv keys a result by benchmark name and parameter cell: a change to ``benchmarks/`` that
renames a method, reorders a class's parameters or skips other cells makes earlier
results no longer load beside new ones. The tiny grid's discovery (asv_runner's own, in
a fresh interpreter: imports only, a few seconds) must match the committed listing,
``tests/fixtures/benchmark_ids_tiny.json``; a change that means to move the ids rewrites
it with ``write_fixture()`` of ``tests/support/benchmark_ids.py``.
"""

from __future__ import annotations

import json

from support.benchmark_ids import FIXTURE, brief, discovered


def test_the_tiny_grid_discovers_the_committed_benchmark_ids() -> None:
    expected = {b["name"]: b for b in json.loads(FIXTURE.read_text())}
    found = {b["name"]: b for b in brief(discovered("tiny"))}
    assert sorted(found) == sorted(expected), {
        "new": sorted(set(found) - set(expected)), "gone": sorted(set(expected) - set(found))}
    changed = [name for name in expected if found[name] != expected[name]]
    assert not changed, {name: (expected[name], found[name]) for name in changed}
