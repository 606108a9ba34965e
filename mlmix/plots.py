"""Figures of a chain and its source (matplotlib): each function draws on ``ax`` (a new figure's
axes when None), titles it with the model, frame and parameters, and returns the axes.

* :func:`plot_distance_curve`: the worst-start TV distance d(t) with its certified band (the
  rounding bound ``abs_error`` of the computed curve) and t_mix(eps) marked (a line when exact, the
  certified interval shaded when not);
* :func:`plot_spectrum`: the eigenvalues of P in the complex plane with the unit circle, and the
  certified spectral gap in the legend;
* :func:`plot_stationary`: the stationary law's top-k states, labelled with their text (tokens of
  a tabulated masked LM, symbols of a toy model);
* :func:`plot_influence`: paper G's local constants rho_ij (Def. 2) as a heat map, with rho
  (Theorem 5) and Dobrushin's alpha in the title;
* :func:`report_figure` puts the four on one page (``mlmix exact --plot FILE``) and
  :func:`save_figure` writes any figure atomically as PDF, SVG (vector) or PNG, by the suffix.

Figures are presentation: every number drawn comes from a certified computation of mlmix, and
what could not be computed is written on the panel instead of being drawn.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from mlmix.files import atomic_save_figure, pyplot
from mlmix.limits import PLOT_DENSE_LIMIT
from mlmix.theory.local.influence import aggregate_influence, influence_matrix

#: Longest distance curve drawn step by step; beyond it, :data:`CURVE_SAMPLES` certified points.
CURVE_STEPS = 2000
CURVE_SAMPLES = 40

#: File types of :func:`save_figure`.
FORMATS = ("pdf", "svg", "png")


def chain_title(chain: Any) -> str:
    """The model, frame and parameters of a chain, for figure titles: the source's description
    (model and frame of a masked LM; the parameters of a toy model), the kernel and T."""
    source = getattr(chain, "source", None)
    parts = [chain.name]
    if source is not None:
        describe = getattr(source, "describe", None)
        d = describe() if callable(describe) else {}
        if d.get("model"):
            parts = [f"{Path(str(d['model'])).name or d['model']}, frame '{d.get('frame', '?')}'"]
        else:
            params = [f"{key}={getattr(source, key):g}" for key in ("beta",) if isinstance(getattr(source, key, None),
                                                                                         (int, float))]
            parts = [f"{type(source).__name__} ({', '.join(params + [f'n={source.space.length}'])})"]
        parts.append(f"{chain.kernel}, T={getattr(source, 'temperature', 1.0):g}")
    parts.append(f"{chain.n_states:,} states")
    return "; ".join(parts)


def _axes(ax: Any, size: tuple[float, float] = (5.5, 3.6)) -> Any:
    if ax is not None:
        return ax
    return pyplot().subplots(figsize=size)[1]


def _note(ax: Any, text: str) -> Any:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=8, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def plot_distance_curve(chain: Any, t_max: int | None = None, eps: float = 0.25, *, ax: Any = None,
                        title: str | None = None) -> Any:
    """d(t) = max_x TV(P^t(x, .), pi) for t = 0..t_max (log scale), the band d(t) +- abs_error (the
    certified rounding bound of the computed powers), eps as a horizontal line and t_mix(eps) (THEOREMS.md
    section 1) as a vertical line, or its certified interval shaded when it is not resolved. Default
    t_max: twice t_mix when it is resolved, else 200 (or the interval's lower end). Beyond
    :data:`CURVE_STEPS` steps the curve is :data:`CURVE_SAMPLES` points, each d(t) certified by
    ``chain.tv_distance`` (its enclosure is the band)."""
    ax = _axes(ax)
    ax.set_title(title or f"distance to stationarity: {chain_title(chain)}", fontsize=8)
    if chain.n_states > PLOT_DENSE_LIMIT:
        return _note(ax, f"d(t) needs dense powers: {chain.n_states:,} states exceed {PLOT_DENSE_LIMIT:,}")
    t_mix = chain.mixing_time(eps)
    if t_max is None:
        t_max = max(10, 2 * int(t_mix.value)) if t_mix.resolved else int(min(200, t_mix.lower or 200))
    if t_max <= CURVE_STEPS:  # every step: t_max products with P
        t = np.arange(t_max + 1)
        curve = chain.distance_curve(t_max, progress=False)
        d, lo, hi = np.asarray(curve.value), None, None
        err = float(curve.abs_error or 0.0)
    else:  # CURVE_SAMPLES times, each d(t) certified on its own (binary powers: log2 t products)
        t = np.unique(np.linspace(0, t_max, CURVE_SAMPLES).round().astype(np.int64))
        points = [chain.tv_distance(int(s)) for s in t]
        d = np.array([p.value if p.resolved else math.sqrt(p.lower * p.upper) if p.lower else p.upper
                      for p in points], dtype=float)
        lo = np.array([p.lower or 0.0 for p in points])
        hi = np.array([p.upper if p.upper is not None else 1.0 for p in points])
        err = float(np.max(np.maximum(d - lo, hi - d)))
    floor = max(err, 1e-17)
    ax.semilogy(t, np.maximum(d, floor), color="tab:blue", lw=1.2, marker="." if lo is not None else None,
                label="d(t), worst start" + (f" ({t.size} certified points)" if lo is not None else ""))
    lower = np.maximum(d - err, floor) if lo is None else np.maximum(lo, floor)
    upper = np.minimum(d + err, 1.0) if hi is None else np.minimum(hi, 1.0)
    ax.fill_between(t, lower, upper, color="tab:blue", alpha=0.25, label=f"certified band (width <= {err:.1e})")
    ax.axhline(eps, color="gray", lw=0.8, ls=":", label=f"eps = {eps:g}")
    if t_mix.resolved:
        ax.axvline(float(t_mix), color="tab:red", lw=1.0, label=f"t_mix({eps:g}) = {int(t_mix)} (exact)")
    elif t_mix.lower is not None:
        hi = t_mix.upper if t_mix.upper is not None else math.inf
        ax.axvspan(t_mix.lower, min(hi, t_max), color="tab:red", alpha=0.15,
                   label=f"t_mix({eps:g}) in [{t_mix.lower:.3g}, {'?' if hi == math.inf else f'{hi:.3g}'}]")
    ax.set_xlabel("t (steps)")
    ax.set_ylabel("d(t)")
    ax.set_xlim(0, t_max)
    ax.legend(fontsize=7, loc="upper right")
    return ax


def plot_spectrum(chain: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """The eigenvalues of P (LAPACK on the dense matrix: presentation only) in the complex plane with
    the unit circle; the legend gives the certified spectral gap and absolute spectral gap."""
    ax = _axes(ax, (4.2, 4.0))
    ax.set_title(title or f"spectrum of P: {chain_title(chain)}", fontsize=8)
    if chain.n_states > PLOT_DENSE_LIMIT:
        return _note(ax, f"the full spectrum needs a dense matrix: {chain.n_states:,} states exceed "
                         f"{PLOT_DENSE_LIMIT:,}")
    lam = np.linalg.eigvals(chain.to_dense())
    circle = np.exp(2j * np.pi * np.linspace(0, 1, 361))
    ax.plot(circle.real, circle.imag, color="gray", lw=0.6)
    gap, absolute = chain.spectral_gap, chain.absolute_spectral_gap
    ax.scatter(lam.real, lam.imag, s=9, color="tab:blue", label=f"{lam.size:,} eigenvalues")
    ax.scatter([1.0], [0.0], s=30, marker="x", color="black", label="lambda = 1")
    if gap.resolved:
        ax.axvline(1 - float(gap), color="tab:red", lw=0.8, ls="--", label=f"1 - gap, gap = {float(gap):.4g}")
    label = f"{float(absolute):.4g}" if absolute.resolved else f"in [{absolute.lower}, {absolute.upper}]"
    ax.plot([], [], " ", label=f"absolute gap {label}")
    ax.set_aspect("equal")
    ax.set_xlabel("Re lambda")
    ax.set_ylabel("Im lambda")
    ax.legend(fontsize=7, loc="lower left")
    return ax


def state_labels(chain: Any, states: np.ndarray) -> list[str]:
    """The text of states: tokens of a tabulated masked LM (``source.decode``), symbols of a toy
    model, or the index of a bare matrix."""
    source = getattr(chain, "source", None)
    if source is None or getattr(source, "space", None) is None:
        return [f"state {int(s)}" for s in states]
    symbols = source.space.decode(np.asarray(states))
    decode = getattr(source, "decode", None)
    if callable(decode):
        return [" ".join(decode(row)) for row in symbols]
    return [" ".join(str(int(v)) for v in row) for row in symbols]


def plot_stationary(chain: Any, k: int = 15, *, ax: Any = None, title: str | None = None) -> Any:
    """The k most likely states under pi (horizontal bars, log scale, largest on top) with their text,
    and the mass they hold together."""
    ax = _axes(ax, (5.5, 0.6 + 0.25 * k))
    pi = np.asarray(chain.stationary)
    top = np.argsort(pi)[::-1][:k]
    ax.barh(np.arange(top.size)[::-1], pi[top], color="tab:green")
    ax.set_yticks(np.arange(top.size)[::-1], state_labels(chain, top), fontsize=7, family="monospace")
    ax.set_xscale("log")
    ax.set_xlabel("pi(x)")
    ax.set_title(title or f"stationary law, top {top.size} (mass {pi[top].sum():.3g}): {chain_title(chain)}",
                 fontsize=8)
    return ax


def plot_influence(source: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """rho_ij (paper G Def. 2: the largest TV change of site i's conditional when site j changes)
    as a heat map, i down, j across; the title gives rho = max_j sum_i rho_ij (Theorem 5) and
    alpha = max_i sum_j rho_ij."""

    ax = _axes(ax, (4.4, 3.8))
    rho = np.asarray(influence_matrix(source).rho_ij)
    agg = aggregate_influence(rho)
    image = ax.imshow(rho, cmap="viridis", vmin=0.0, vmax=max(float(rho.max()), 1e-300))
    ax.figure.colorbar(image, ax=ax, label="rho_ij")
    n = rho.shape[0]
    if n <= 24:
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
    if n <= 12:
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{rho[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if rho[i, j] < 0.6 * rho.max() else "black")
    ax.set_xlabel("j (the site that changes)")
    ax.set_ylabel("i (the site resampled)")
    name = type(source).__name__
    ax.set_title(title or f"rho_ij of {name} (T={getattr(source, 'temperature', 1.0):g}): rho = {agg.rho:.4g}, "
                          f"alpha = {agg.alpha:.4g}", fontsize=8)
    return ax


def report_figure(chain: Any, source: Any = None, *, title: str | None = None, eps: float = 0.25) -> Any:
    """One page: distance curve, spectrum, stationary law and (for a source) rho_ij; ``title`` on top
    (default :func:`chain_title`)."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    plot_distance_curve(chain, eps=eps, ax=axes[0, 0], title="distance to stationarity d(t)")
    plot_spectrum(chain, ax=axes[0, 1], title="spectrum of P")
    plot_stationary(chain, ax=axes[1, 0], title="stationary law: the most likely states")
    if source is not None:
        plot_influence(source, ax=axes[1, 1], title=None)
    else:
        _note(axes[1, 1], "rho_ij needs a source of conditionals (not a bare matrix)")
    fig.suptitle(title or chain_title(chain), fontsize=10)
    fig.tight_layout()
    return fig


def save_figure(fig: Any, path: str | Path) -> None:
    """Write ``fig`` atomically as PDF, SVG or PNG (by the suffix) and close it."""
    path = Path(path)
    if path.suffix.lower().lstrip(".") not in FORMATS:
        raise ValueError(f"a figure is written as {', '.join('.' + f for f in FORMATS)}, got {path.name}")
    atomic_save_figure(fig, path)
    pyplot().close(fig)
