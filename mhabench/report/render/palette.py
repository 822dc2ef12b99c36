"""One colour per backend and one marker per framework, the same in every plot of a report.

The built-in backends own fixed colours (in :data:`mhabench.core.backends.BUILTIN` order);
backends a report meets beyond them (plug-ins) take the next free colours, by name, so a
report's plots agree with each other. A series whose label is not ``framework/backend``
(a model's terms, "measured", a fitted line) takes the neutral colours in order. Within
one plot no two series share colour and marker: labels are unique, and a backend's colour
is its own, so two series with one colour differ in framework, hence in marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from mhabench.core.backends import BUILTIN
from mhabench.report.types import Plot

# Twelve strong colours for the built-ins (BUILTIN order), then lighter ones for plug-ins;
# grey stays for the faint sample dots.
BACKEND_COLOURS = (
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#393b79", "#000000", "#7b4173",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d",
    "#9edae5", "#637939",
)
# Markers per framework; a backend past the colour list reuses colours with the next marker.
FRAMEWORK_MARKERS = {"torch": ("o", "^", "v"), "jax": ("s", "D", "p")}
OTHER_MARKERS = ("X", "P", "*")
# Series that are not a backend: model terms, measured totals, fitted lines.
# Tableau's ten, then its lighter ten: a stacked plot of the model's terms (one per
# feature of mhabench.analysis.prediction.features) needs as many colours as components.
NEUTRAL_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                   "#b07aa1", "#9c755f", "#bab0ac", "#222222",
                   "#a0cbe8", "#ffbe7d", "#8cd17d", "#ff9d9a", "#86bcb6", "#f1ce63",
                   "#d4a6c8", "#d7b5a6")
NEUTRAL_MARKERS = ("o", "x", "^", "s", "D", "v")
FRAMEWORK_NAMES = {"torch": "PyTorch", "jax": "JAX"}


class Style(NamedTuple):
    colour: str
    marker: str


def split_label(label: str) -> tuple[str, str] | None:
    """``("torch", "batched")`` for a series labelled ``torch/batched``, else None."""
    framework, sep, backend = label.partition("/")
    if not sep or not framework or not backend or " " in label:
        return None
    return framework, backend


def series_labels(plot: Plot) -> list[str]:
    """Every series label of ``plot``: its own, or its facets' in order (each once)."""
    return list(dict.fromkeys(label for part in plot.facets or [plot] for label in part.series))


class Palette:
    """The colours of one report: built-ins fixed, the backends in ``extra`` next."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        order = list(BUILTIN) + sorted(set(extra) - set(BUILTIN))
        self.index = {name: i for i, name in enumerate(order)}

    def backend(self, framework: str, backend: str) -> Style:
        i = self.index.setdefault(backend, len(self.index))  # unannounced: the next free
        lap, slot = divmod(i, len(BACKEND_COLOURS))
        markers = FRAMEWORK_MARKERS.get(framework, OTHER_MARKERS)
        return Style(BACKEND_COLOURS[slot], markers[lap % len(markers)])

    def styles(self, plot: Plot) -> dict[str, Style]:
        """A style per series of ``plot`` (of all its facets): backends by palette, the rest
        neutral in order (so a model term keeps its colour from plot to plot)."""
        out: dict[str, Style] = {}
        neutral = 0
        for label in series_labels(plot):
            parts = split_label(label)
            if parts is not None:
                out[label] = self.backend(*parts)
                continue
            lap, slot = divmod(neutral, len(NEUTRAL_COLOURS))
            out[label] = Style(NEUTRAL_COLOURS[slot], NEUTRAL_MARKERS[lap % len(NEUTRAL_MARKERS)])
            neutral += 1
        return out


def clashes(styles: Mapping[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """Pairs of series that share colour and marker (a reader cannot tell them apart)."""
    seen: dict[tuple[str, str], str] = {}
    out = []
    for label, style in styles.items():
        if style in seen:
            out.append((seen[style], label))
        seen.setdefault(style, label)
    return out
