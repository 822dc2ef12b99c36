"""The statistic under the gate, confirm, versions and bisect, on processes whose truth is
known: each side's process medians drawn around a level, with the scatter of real
processes, a slow mode of the machine in some processes and, where said, a fast mode of
the cell (tests/test_gate_replay.py replays real recorded processes)."""

from __future__ import annotations

import numpy as np
import pytest

from mhabench.analysis.comparisons.modes import align, mix_p, modes
from mhabench.analysis.comparisons.process_compare import (
    Comparison,
    compare,
    lean,
    two_stage,
    verdict,
)


def side(rng: np.random.Generator, n: int, level: float, *, scatter: float = 0.03,
         slow: float = 0.0, fast: float = 0.0) -> list[float]:
    """``n`` process medians around ``level``: a share ``slow`` of them 1.3-1.6x slow (the
    machine), a share ``fast`` of them 0.8x (the cell's fast mode)."""
    x = level * np.exp(rng.normal(0, scatter, n))
    kind = rng.random(n)
    x[kind < slow] *= rng.uniform(1.3, 1.6, (kind < slow).sum())
    x[kind > 1 - fast] *= 0.8
    return [float(v) for v in x]


def test_a_real_change_clears_one_and_the_factor() -> None:
    rng = np.random.default_rng(3)
    base, new = side(rng, 8, 1.0), side(rng, 8, 1.2)
    result = compare(base, new)
    assert result.low > 1.1 and verdict(result, 1.05) == "slower" and lean(result, 1.05) == "+"
    assert verdict(compare(new, base), 1.05) == "faster"
    with pytest.raises(ValueError, match="two timed processes"):
        compare([1.0], new)


def test_the_slow_mode_is_set_apart() -> None:
    """A third of processes 1.5x slow, more of them on one side by chance: the levels line
    up at 1.00x; the plain median of processes reads a change that is the machine's."""
    fast = [1.00, 1.01, 0.99, 1.02, 1.00, 0.98]
    base = fast + [1.5]
    new = fast[:3] + [1.5, 1.52, 1.49, 1.51]
    result = compare(base, new)
    assert 0.98 < result.ratio < 1.02 and result.low < 1 < result.high
    assert verdict(result, 1.05) == "unchanged"
    assert np.median(new) / np.median(base) > 1.05


def test_a_shift_of_the_modes_mix_is_no_change_of_the_cell() -> None:
    """A third of the new side's processes in a fast mode the base never showed: the
    levels line up at 1.0, the two modes and their shares are named, and Fisher's test
    says the mix moved. Each side's fastest processes alone would read 0.80x."""
    rng = np.random.default_rng(7)
    base = side(rng, 20, 0.029, scatter=0.02)
    new = side(rng, 20, 0.029, scatter=0.02)
    new[:7] = [x * 0.8 for x in new[:7]]
    result = compare(base, new)
    assert result.ratio == pytest.approx(1.0, abs=0.03) and verdict(result) == "unchanged"
    assert result.fast_ratio == pytest.approx(0.8, abs=0.03)
    assert [(m.base, m.new) for m in result.modes] == [(0, 7), (20, 13)]
    assert result.mix_shifted and result.mix_p < 0.01
    fast_level = result.modes[0].level * 1e3
    assert fast_level == pytest.approx(0.8 * 29, rel=0.03)
    assert result.describe_modes().startswith(
        f"two modes, {fast_level:.3g} and {result.modes[1].level * 1e3:.3g} ms: 7 of 20 "
        f"processes in the {fast_level:.3g} ms mode at new, 0 of 20 at base (Fisher p = ")
    # the same change of the whole cell moves both levels: a faster cell
    moved = compare(base, [x * 0.8 for x in new])
    assert moved.ratio == pytest.approx(0.8, abs=0.03) and verdict(moved) == "faster"


def test_one_mode_is_said_to_be_one() -> None:
    rng = np.random.default_rng(11)
    result = compare(side(rng, 12, 1.0), side(rng, 12, 1.0))
    assert len(result.modes) == 1 and result.mix_p is None
    assert result.describe_modes() == "one mode"
    assert mix_p(result.modes) is None


@pytest.mark.parametrize(("n", "slow"), [(4, 0.0), (8, 0.15), (12, 0.15)])
def test_the_interval_covers_the_true_ratio_as_often_as_it_says(n: int, slow: float) -> None:
    """95 % intervals over 120 simulated comparisons at 1.5x: they cover the truth in
    about 95 % of them (at least 88 %: three binomial SDs below), at four processes a side
    too, where a plain percentile bootstrap is far too narrow."""
    rng = np.random.default_rng(n)
    covered = sum(r.low <= 1.5 <= r.high for r in (
        compare(side(rng, n, 1.0, slow=slow), side(rng, n, 1.5, slow=slow), draws=300,
                seed=i) for i in range(120)))
    assert covered >= 0.88 * 120


def test_align_finds_the_shift_and_modes_split_at_a_valley() -> None:
    rng = np.random.default_rng(5)
    a = np.log(side(rng, 16, 1.0, scatter=0.01))
    assert align(a, a + np.log(1.37)) == pytest.approx(np.log(1.37), abs=0.002)
    pooled = np.concatenate([a, a + np.log(0.75)])
    found = modes(a, a + np.log(0.75))
    assert [(m.base, m.new) for m in found] == [(0, 16), (16, 0)]
    assert len(modes(pooled, pooled)) == 2


def test_the_two_stages_count_a_change_only_the_way_the_screen_leaned() -> None:
    up = Comparison(1.2, 1.1, 1.3, 8, 8)
    down = Comparison(0.8, 0.7, 0.9, 12, 12)
    assert two_stage(up, Comparison(1.15, 1.08, 1.22, 12, 12)) == "slower"
    assert two_stage(up, down) == "cleared" and two_stage(up, None) == "cleared"
    assert Comparison.from_dict(up.as_dict()) == up
    # results written before the modes were recorded still read
    old = {"ratio": 1.2, "low": 1.1, "high": 1.3, "base_processes": 8, "new_processes": 8,
           "base_fast": 6, "new_fast": 7}
    assert Comparison.from_dict(old) == up
