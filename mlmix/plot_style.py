"""One style for every figure mlmix draws (``mlmix exact --plot``, :mod:`mlmix.plots`, the figures of
``mlmix run``): matplotlib on the Agg backend with one set of rcParams, symbols as mathtext
(:func:`symbols`: ``beta`` -> $\\beta$), legends beside the data (:func:`legend`), what was not
computed written on the panel (:func:`note`), an interval beyond the axis drawn as an arrow at the
axis edge (:func:`interval`), and files written atomically as PDF, SVG or PNG by the suffix
(:func:`save`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from mlmix.files import atomic_save_figure
from mlmix.files import pyplot as _agg_pyplot

#: File types of :func:`save`, by the suffix.
FORMATS = ("pdf", "svg", "png")

#: The rcParams of every mlmix figure.
RC: dict[str, Any] = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "mathtext.fontset": "dejavusans",
    "savefig.dpi": 120,
    "svg.fonttype": "none",  # SVG text stays text (searchable, editable)
    "pdf.fonttype": 42,
}

#: Words written as mathtext in titles and labels (whole words, before ``=``, ``(`` or a space).
SYMBOLS = {"beta": r"\beta", "lambda": r"\lambda", "rho_ij": r"\rho_{ij}", "rho": r"\rho", "alpha": r"\alpha",
           "Delta": r"\Delta", "gamma": r"\gamma", "eps": r"\varepsilon", "pi": r"\pi", "mu": r"\mu",
           "T": "T", "n": "n", "J": "J", "h": "h", "k": "k"}
_WORD = re.compile(r"(?<![\w$\\{^])(" + "|".join(sorted(SYMBOLS, key=len, reverse=True)) + r")(?=\s*=)")


def pyplot() -> Any:
    """matplotlib.pyplot (Agg) with :data:`RC` applied."""
    plt = _agg_pyplot()
    plt.rcParams.update(RC)
    return plt


def subplots(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``pyplot().subplots`` in the style, with the constrained layout (room for outside legends)."""
    kwargs.setdefault("layout", "constrained")
    return pyplot().subplots(*args, **kwargs)


def symbols(text: str) -> str:
    """``beta=0.5, T=1, n=6`` -> ``$\\beta$=0.5, $T$=1, $n$=6``: parameter names before ``=`` as
    mathtext (:data:`SYMBOLS`); the rest of the text unchanged."""
    return _WORD.sub(lambda m: f"${SYMBOLS[m.group(1)]}$", text)


def legend(ax: Any, *, where: str = "right", **kwargs: Any) -> Any:
    """The legend of ``ax`` outside its data area: to the right (default) or below."""
    if where == "below":
        kwargs = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.16), "ncol": 2, **kwargs}
    else:
        kwargs = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, **kwargs}
    return ax.legend(**kwargs)


def note(ax: Any, text: str) -> Any:
    """Write ``text`` (what could not be computed, and why) on an empty panel; returns ``ax``."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def sci(x: float) -> str:
    """A number as mathtext: 4.9e17 -> ``4.9\\times10^{17}`` (without the dollars)."""
    if x == 0 or not math.isfinite(x) or 1e-3 <= abs(x) < 1e4:
        return f"{x:.3g}"
    e = math.floor(math.log10(abs(x)))
    return rf"{x / 10**e:.2g}\times10^{{{e}}}"


def interval(ax: Any, lower: float, upper: float | None, label: str, *, y: float = 0.5,
             color: str = "tab:red") -> Any:
    """An interval [lower, upper] on the x axis of ``ax`` (whose limits are already set): the part
    inside the axis shaded, the part beyond it an arrow at the right edge pointing out, at height
    ``y`` (axes fraction: choose one free of data), annotated with ``label``; never a band clipped
    into the data. Returns the annotation (or the shading)."""
    x0, x1 = ax.get_xlim()
    hi = math.inf if upper is None else upper
    shade = None
    if lower < x1:
        shade = ax.axvspan(max(lower, x0), min(hi, x1), color=color, alpha=0.15, label=label)
    if hi <= x1:
        return shade
    text = label if shade is None else "continues beyond the axis"
    return ax.annotate(text, xy=(1.0, y), xycoords="axes fraction", xytext=(0.70, y),
                       textcoords="axes fraction", ha="right", va="center", color=color,
                       arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2})


def save(fig: Any, path: str | Path) -> None:
    """Write ``fig`` atomically as PDF, SVG or PNG (by the suffix) and close it; another suffix is a
    ``ValueError``."""
    path = Path(path)
    if path.suffix.lower().lstrip(".") not in FORMATS:
        raise ValueError(f"a figure is written as {', '.join('.' + f for f in FORMATS)}, got {path.name}")
    atomic_save_figure(fig, path)
    pyplot().close(fig)
