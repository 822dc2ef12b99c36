"""Draw a :class:`mhabench.report.types.Plot` as PNG bytes with matplotlib's Agg backend."""

from __future__ import annotations

import io
import textwrap
from typing import Any

from mhabench.report.formatting import format_value
from mhabench.report.types import Plot


def plot_png(plot: Plot) -> bytes:
    """One figure, PNG bytes (matplotlib imported here: only rendering needs it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, ax = plt.subplots(figsize=(4.8, 2.8) if plot.small else (7.5, 4.5), dpi=90)
    try:
        for label, (x, y) in plot.dots.items():
            ax.scatter(x, y, label=label, s=6, alpha=0.35, color="grey")
        if plot.style == "stacked":
            _stacked(ax, plot)
        else:
            for label, (x, y) in plot.series.items():
                if plot.style == "scatter":
                    ax.scatter(x, y, label=label, s=18, alpha=0.8)
                else:
                    ax.plot(x, y, marker="o", label=label)
        for x in plot.marks:
            ax.axvline(x, color="red", linestyle="--", linewidth=1)
        if plot.xticks is not None:
            ax.set_xticks(range(len(plot.xticks)), plot.xticks, rotation=45, fontsize=6)
        plain = FuncFormatter(lambda v, _: f"{v:g}")  # 64, 0.5: not 2^6 or 5x10^-1
        if plot.logx:
            ax.set_xscale("log", base=2 if plot.xlabel.startswith("heads") else 10)
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(NullFormatter())
        if plot.logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(NullFormatter())
        if plot.diagonal:
            lo, hi = _limits(plot)
            ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="y = x")
        ax.set_title(textwrap.fill(plot.title, 60 if plot.small else 90), fontsize=8 if
                     plot.small else 9)
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(plot.ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6 if plot.small else 7)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)


def _stacked(ax: Any, plot: Plot) -> None:
    """Stacked bars over categorical x (e.g. h = 1, 2, 4, ...)."""
    labels = None
    bottom: list[float] = []
    for label, (x, y) in plot.series.items():
        if labels is None:
            labels = [format_value(int(v) if float(v).is_integer() else v) for v in x]
            bottom = [0.0] * len(x)
        ax.bar(range(len(y)), y, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, y, strict=True)]
    for label, y in plot.points.items():
        ax.plot(range(len(y)), y, "kD", label=label)
    ax.set_xticks(range(len(labels or [])), labels or [])


def _limits(plot: Plot) -> tuple[float, float]:
    values = [v for x, y in plot.series.values() for v in (*x, *y) if v and v > 0]
    return (min(values), max(values)) if values else (1e-3, 1.0)
