"""Draw a :class:`mhabench.report.types.Plot` as PNG bytes with matplotlib's Agg backend:
each series in the colour and marker the report's palette gave it, one panel per framework
where one panel would hold more than :data:`MAX_LINES` lines (a plot's facets: one panel
each, under one legend), ticks at the measured x. A figure is drawn at :data:`DPI`, one
pixel of the PNG per CSS pixel of the page, which shows it at that size."""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import replace
from typing import Any

from mhabench.report.render.formatting import format_value
from mhabench.report.render.palette import FRAMEWORK_NAMES, split_label
from mhabench.report.types import Plot

MAX_LINES = 6  # more lines than this in one panel: one panel per framework
MAX_TICKS = 12  # at most this many measured x values get a tick each
DPI = 90
# Figure sizes in inches (at DPI): one panel, two side by side, a thumbnail; a facet's
# panel, small and not, and how many facets (with the legend's cell) share a row.
SIZE_ONE, SIZE_TWO, SIZE_SMALL = (6.4, 3.8), (10.0, 3.8), (4.8, 2.8)
FACET, FACET_SMALL = (3.8, 3.0), (2.8, 2.4)
FACET_COLUMNS, FACET_COLUMNS_SMALL = 3, 4
# Palette entries of a compacted PNG: as many keep each line's colour within 8 of 255 on
# a plot of twelve backends (fewer shift some further), and the antialiased edges need no
# more.
COLOURS = 128


def panels(plot: Plot) -> list[tuple[str, list[str]]]:
    """(panel title, series labels) per panel: one per framework when the plot's
    framework/backend lines would be more than :data:`MAX_LINES` in one, else one."""
    labels = list(plot.series)
    parts = [split_label(label) for label in labels]
    if (plot.style == "stacked" or len(labels) <= MAX_LINES or None in parts
            or len({p[0] for p in parts if p}) < 2):
        return [("", labels)]
    by: dict[str, list[str]] = {}
    for label, part in zip(labels, parts, strict=True):
        by.setdefault(part[0], []).append(label)  # type: ignore[index]
    return [(FRAMEWORK_NAMES.get(fw, fw), names) for fw, names in by.items()]


def _compact(png: bytes) -> bytes:
    """The PNG as palette colour (:data:`COLOURS`): a plot has few colours, so a third of
    the bytes. Maximum coverage keeps every line's colour (median cut, the default, shifts
    some by up to 40 of 255 and can turn a purple line grey)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(
        colors=COLOURS, method=Image.Quantize.MAXCOVERAGE)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def plot_png(plot: Plot) -> bytes:
    """One figure, PNG bytes (matplotlib imported here: only rendering needs it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if plot.facets:
        return _facets_png(plot)
    groups = panels(plot)
    size = SIZE_SMALL if plot.small else SIZE_ONE if len(groups) == 1 else SIZE_TWO
    fig, axes = plt.subplots(1, len(groups), figsize=size, dpi=DPI, sharey=True,
                             squeeze=False)
    try:
        for ax, (name, labels) in zip(axes[0], groups, strict=True):
            _draw(ax, plot, labels, name)
        return _png(fig)
    finally:
        plt.close(fig)


def _png(fig: Any) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return _compact(buffer.getvalue())


def _facets_png(plot: Plot) -> bytes:
    """The facets in a grid, one panel each (its own axes' ranges) in the plot's styles,
    the legend in the cell after the last."""
    import matplotlib.pyplot as plt

    small = all(f.small for f in plot.facets)
    columns = min(len(plot.facets) + 1, FACET_COLUMNS_SMALL if small else FACET_COLUMNS)
    rows = math.ceil((len(plot.facets) + 1) / columns)
    width, height = FACET_SMALL if small else FACET
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), dpi=DPI,
                             squeeze=False)
    one_y = len({f.ylabel for f in plot.facets}) == 1
    try:
        cells = list(axes.flat)
        legend: dict[str, Any] = {}
        for i, (ax, facet) in enumerate(zip(cells, plot.facets, strict=False)):
            _draw(ax, replace(facet, small=True, styles=plot.styles), list(facet.series), "",
                  legend=False)
            legend.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
            if one_y and i % columns:
                ax.set_ylabel("")  # the row's first panel names y for all
        for ax in cells[len(plot.facets):]:
            ax.axis("off")
        cells[len(plot.facets)].legend(list(legend.values()), list(legend), loc="center",
                                       fontsize=7, title=textwrap.fill(plot.title, 40),
                                       title_fontsize=8)
        return _png(fig)
    finally:
        plt.close(fig)


def _draw(ax: Any, plot: Plot, labels: list[str], panel: str, legend: bool = True) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    for label, (x, y) in plot.dots.items():
        ax.scatter(x, y, label=label, s=6, alpha=0.35, color="grey")
    if plot.style == "stacked":
        _stacked(ax, plot)
    else:
        for label in labels:
            x, y = plot.series[label]
            colour, marker = plot.styles.get(label, (None, "o"))
            if plot.style == "scatter":
                ax.scatter(x, y, label=label, s=18, alpha=0.8, color=colour,
                           marker=marker)
            else:
                ax.plot(x, y, marker=marker, color=colour, label=label)
    for x in plot.marks:
        ax.axvline(x, color="red", linestyle="--", linewidth=1)
    if plot.xticks is not None:
        ax.set_xticks(range(len(plot.xticks)), plot.xticks, rotation=45, fontsize=6)
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 64, 0.5: not 2^6 or 5x10^-1
    if plot.logx:
        ax.set_xscale("log", base=2 if plot.xlabel.startswith("heads") else 10)
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(NullFormatter())
    measured = sorted({v for label in labels for v in plot.series[label][0]})
    if plot.style == "line" and plot.xticks is None and 0 < len(measured) <= MAX_TICKS:
        ax.xaxis.set_major_locator(FixedLocator(measured))  # ticks at the measured x
        ax.xaxis.set_minor_locator(FixedLocator([]))
    if plot.logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
    if plot.diagonal:
        lo, hi = _limits(plot)
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="y = x")
    title = f"{panel}: {plot.title}" if panel else plot.title
    ax.set_title(textwrap.fill(title, 60 if plot.small or panel else 90),
                 fontsize=8 if plot.small else 9)
    ax.set_xlabel(plot.xlabel)
    ax.set_ylabel(plot.ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        ax.legend(fontsize=6 if plot.small else 7)


def _stacked(ax: Any, plot: Plot) -> None:
    """Stacked bars over categorical x (e.g. h = 1, 2, 4, ...)."""
    labels = None
    bottom: list[float] = []
    for label, (x, y) in plot.series.items():
        if labels is None:
            labels = [format_value(int(v) if float(v).is_integer() else v) for v in x]
            bottom = [0.0] * len(x)
        ax.bar(range(len(y)), y, bottom=bottom, label=label,
               color=plot.styles.get(label, (None, ""))[0])
        bottom = [b + v for b, v in zip(bottom, y, strict=True)]
    for label, y in plot.points.items():
        ax.plot(range(len(y)), y, "kD", label=label)
    ax.set_xticks(range(len(labels or [])), labels or [])


def _limits(plot: Plot) -> tuple[float, float]:
    values = [v for x, y in plot.series.values() for v in (*x, *y) if v and v > 0]
    return (min(values), max(values)) if values else (1e-3, 1.0)
