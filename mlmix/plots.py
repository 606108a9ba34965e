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
* :func:`plot_entropy_curve`: the entropy curve h(m) of a joint with the step approximation of a schedule
  (its expected KL is the area between them, :mod:`mlmix.theory.kernels.schedule_kl`);
* :func:`report_figure` puts the four on one page (``mlmix exact --plot FILE``) and
  :func:`save_figure` writes any figure atomically as PDF, SVG (vector) or PNG, by the suffix.

Figures are presentation: every number drawn comes from a certified computation of mlmix, and
what could not be computed is written on the panel instead of being drawn (a reducible chain has
its spectrum drawn and the closed classes named where pi would be; a t_mix interval beyond the
axis is an arrow at the axis edge, never a band inside it). The style (mathtext symbols, legends
beside the data, file types) is :mod:`mlmix.plot_style`'s, shared by every figure of mlmix.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from mlmix import plot_style as style
from mlmix.errors import NumericalError
from mlmix.limits import PLOT_DENSE_LIMIT
from mlmix.progress import if_late
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.scan_and_mh import Truncated
from mlmix.theory.local.influence import aggregate_influence, influence_matrix

#: Longest distance curve drawn step by step; beyond it, :data:`CURVE_SAMPLES` certified points.
CURVE_STEPS = 2000
CURVE_SAMPLES = 40

#: File types of :func:`save_figure`.
FORMATS = style.FORMATS


def chain_title(chain: Any) -> str:
    """The model, frame and parameters of a chain, for figure titles: the source's description
    (:func:`source_title`), the kernel and T, and the number of states."""
    source = getattr(chain, "source", None)
    parts = [chain.name]
    if source is not None:
        parts = [source_title(source, temperature=False),
                 f"{chain.kernel}, T={getattr(source, 'temperature', 1.0):g}"]
    parts.append(f"{chain.n_states:,} states")
    return "; ".join(parts)


def _axes(ax: Any, size: tuple[float, float] = (6.5, 3.6)) -> Any:
    if ax is not None:
        return ax
    return style.subplots(figsize=size)[1]


_note = style.note


def plot_distance_curve(chain: Any, t_max: int | None = None, eps: float = 0.25, *, ax: Any = None,
                        title: str | None = None) -> Any:
    """d(t) = max_x TV(P^t(x, .), pi) for t = 0..t_max (a probability: linear axis, 0 to 1), the
    band d(t) +- abs_error (the certified rounding bound of the computed powers), eps as a horizontal
    line and t_mix(eps) (THEOREMS.md section 1) as a vertical line, or its certified interval: shaded
    where it lies on the axis, an arrow at the right edge with the interval written where it lies
    beyond (:func:`mlmix.plot_style.interval`). Default t_max: twice t_mix when it is resolved, the
    interval's upper end when that is at most :data:`CURVE_STEPS`, else 200 (or the interval's lower
    end). Beyond :data:`CURVE_STEPS` steps the curve is
    :data:`CURVE_SAMPLES` points, each d(t) certified by ``chain.tv_distance`` (its enclosure is the
    band)."""
    ax = _axes(ax)
    ax.set_title(style.symbols(title or f"distance to stationarity: {chain_title(chain)}"))
    if chain.n_states > PLOT_DENSE_LIMIT:
        t_mix, why = _answer(lambda: chain.mixing_time(eps))
        return _note(ax, f"$d(t)$ needs dense powers: {chain.n_states:,} states exceed {PLOT_DENSE_LIMIT:,}\n"
                         f"$t_{{\\rm mix}}({eps:g})$: {_short(why) if t_mix is None else _figure(t_mix)}")
    t_mix = chain.mixing_time(eps)
    if t_max is None:
        if t_mix.resolved:
            t_max = max(10, 2 * int(t_mix.value))
        elif t_mix.upper is not None and t_mix.upper <= CURVE_STEPS:  # the whole interval on the axis
            t_max = max(10, math.ceil(t_mix.upper))
        else:
            t_max = int(min(200, t_mix.lower or 200))
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
    ax.plot(t, d, color="tab:blue", lw=1.2, marker="." if lo is not None else None,
            label="$d(t)$, worst start" + (f" ({t.size} certified points)" if lo is not None else ""))
    lower = np.maximum(d - err, 0.0) if lo is None else lo
    upper = np.minimum(d + err, 1.0) if hi is None else np.minimum(hi, 1.0)
    ax.fill_between(t, lower, upper, color="tab:blue", alpha=0.25,
                    label=f"certified band (width $\\leq {style.sci(err)}$)")
    ax.axhline(eps, color="gray", lw=0.8, ls=":", label=f"$\\varepsilon = {eps:g}$")
    ax.set_xlim(0, t_max)
    ax.set_ylim(0, 1.02)
    name = f"$t_{{\\rm mix}}({eps:g})$"
    if t_mix.resolved:
        ax.axvline(float(t_mix), color="tab:red", lw=1.0, label=f"{name} = {int(t_mix)} (exact)")
    elif t_mix.lower is not None:
        hi_text = "?" if t_mix.upper is None else f"${style.sci(t_mix.upper)}$"
        # below eps at the right edge there is no data: d(t) > eps up to t_max <= the lower end
        style.interval(ax, t_mix.lower, t_mix.upper,
                       f"{name} in [${style.sci(t_mix.lower)}$, {hi_text}] (certified)", y=eps / 2 / 1.02)
    else:
        ax.plot([], [], " ", label=f"{name}: not resolved ({t_mix.reason})")
    ax.set_xlabel("$t$ (steps)")
    ax.set_ylabel("$d(t)$ (total variation)")
    style.legend(ax)
    return ax


def plot_spectrum(chain: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """The eigenvalues of P (LAPACK on the dense matrix: presentation only) in the complex plane with
    the unit circle; the legend gives the certified spectral gap and absolute spectral gap."""
    ax = _axes(ax, (4.2, 4.0))
    ax.set_title(style.symbols(title or f"spectrum of P: {chain_title(chain)}"))
    if chain.n_states > PLOT_DENSE_LIMIT:
        gap, why = _answer(lambda: chain.absolute_spectral_gap)
        return _note(ax, f"the full spectrum needs a dense matrix: {chain.n_states:,} states exceed "
                         f"{PLOT_DENSE_LIMIT:,}\nabsolute spectral gap: {_short(why) if gap is None else _figure(gap)}")
    lam = np.linalg.eigvals(chain.to_dense())
    circle = np.exp(2j * np.pi * np.linspace(0, 1, 361))
    ax.plot(circle.real, circle.imag, color="gray", lw=0.6)
    ax.scatter(lam.real, lam.imag, s=9, color="tab:blue", label=f"{lam.size:,} eigenvalues")
    ax.scatter([1.0], [0.0], s=30, marker="x", color="black", label=r"$\lambda = 1$")
    gap, why = _answer(lambda: chain.spectral_gap)
    if gap is not None and gap.resolved:
        ax.axvline(1 - float(gap), color="tab:red", lw=0.8, ls="--",
                   label=f"$1 - \\gamma$, spectral gap $\\gamma = {style.sci(float(gap))}$")
    else:
        ax.plot([], [], " ", label="spectral gap: " + (f"not answered: {_short(why)}" if why else
                                                       _short(gap.reason or "not resolved")))
    absolute, why = _answer(lambda: chain.absolute_spectral_gap)
    label = (f"not answered: {_short(why)}" if absolute is None else f"${style.sci(float(absolute))}$" if absolute.resolved
             else f"in [{absolute.lower}, {absolute.upper}]")
    ax.plot([], [], " ", label=f"absolute gap: {label}")
    ax.set_aspect("equal")
    ax.set_xlabel(r"Re $\lambda$")
    ax.set_ylabel(r"Im $\lambda$")
    style.legend(ax, where="below")
    return ax


def _answer(get: Any) -> tuple[Any, str | None]:
    """(the result, None), or (None, why) when the chain does not answer the question."""
    try:
        return get(), None
    except (ValueError, NumericalError) as err:
        return None, str(err)


def _figure(result: Any) -> str:
    """A certified figure as text: its value, or its interval marked certified."""
    if result.resolved:
        return f"${style.sci(float(result.value))}$"
    lo = "?" if result.lower is None else f"${style.sci(result.lower)}$"
    hi = "?" if result.upper is None else f"${style.sci(result.upper)}$"
    return f"in [{lo}, {hi}] (certified)"


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


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
    """The k most likely states under pi (horizontal bars on a linear axis, pi being a probability;
    largest on top; each bar's value written at its end) with their text, and the mass they hold
    together. A chain with several closed classes has no unique pi: the stationary law of each closed
    class (unique on it; every mixture of them is stationary) is drawn instead, its states labelled
    with their class, and the title says so."""
    ax = _axes(ax, (5.5, 0.6 + 0.25 * k))
    classes = chain.closed_classes
    if len(classes) > 1:
        P = chain.to_dense()
        pi = np.zeros(chain.n_states)
        owner = np.full(chain.n_states, -1)
        for c, members in enumerate(classes):
            pi[members] = np.asarray(Chain(P[np.ix_(members, members)]).stationary)
            owner[members] = c
        head = (f"$\\pi$ is not unique: {len(classes)} closed classes, the stationary law of each "
                "(every mixture is stationary)")
    else:
        pi, owner, head = np.asarray(chain.stationary), None, None
    top = np.argsort(pi, kind="stable")[::-1][:k]
    y = np.arange(top.size)[::-1]
    ax.barh(y, pi[top], color="tab:green")
    for yi, p in zip(y, pi[top]):
        ax.text(p, yi, f" {p:.3g}", va="center", ha="left", fontsize=6)
    labels = state_labels(chain, top)
    if owner is not None:
        labels = [f"class {owner[s]}: {text}" for s, text in zip(top, labels)]
    ax.set_yticks(y, labels, fontsize=7, family="monospace")
    ax.set_xlim(0, min(1.0, 1.25 * float(pi[top].max())))
    ax.set_xlabel(r"$\pi(x)$" if owner is None else r"$\pi_C(x)$, the stationary law of $x$'s closed class $C$")
    ax.set_ylabel("state $x$")
    head = head or f"stationary law, top {top.size} (mass {pi[top].sum():.3g})"
    ax.set_title(style.symbols(f"{title or head + ': ' + chain_title(chain)}" + (f"\n{head}" if title and owner
                                                                                     is not None else "")))
    return ax


def plot_influence(source: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """rho_ij (paper G Def. 2: the largest TV change of site i's conditional when site j changes)
    as a heat map, i down, j across; the title gives rho = max_j sum_i rho_ij (Theorem 5) and
    alpha = max_i sum_j rho_ij."""

    ax = _axes(ax, (4.4, 3.8))
    rho = np.asarray(influence_matrix(source).rho_ij)
    agg = aggregate_influence(rho)
    image = ax.imshow(rho, cmap="viridis", vmin=0.0, vmax=max(float(rho.max()), 1e-300))
    ax.figure.colorbar(image, ax=ax, label=r"$\rho_{ij}$")
    n = rho.shape[0]
    if n <= 24:
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
    if n <= 12:
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{rho[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if rho[i, j] < 0.6 * rho.max() else "black")
    ax.set_xlabel("$j$ (the site that changes)")
    ax.set_ylabel("$i$ (the site resampled)")
    ax.set_title(style.symbols(title or f"$\\rho_{{ij}}$ of {source_title(source)}: rho={agg.rho:.4g}, "
                                        f"alpha={agg.alpha:.4g}"))
    return ax


def source_title(source: Any, temperature: bool = True) -> str:
    """The model and frame of a masked LM, or the parameters of a toy model (beta, n), and T."""
    describe = getattr(source, "describe", None)
    d = describe() if callable(describe) else {}
    T = [f"T={getattr(source, 'temperature', 1.0):g}"] if temperature else []
    if d.get("model"):
        return ", ".join([f"{Path(str(d['model'])).name or d['model']}, frame '{d.get('frame', '?')}'", *T])
    beta = getattr(source, "beta", None)
    space = getattr(source, "space", None)
    params = ([f"beta={beta:g}"] if isinstance(beta, (int, float)) else []) + \
        ([f"n={space.length}"] if space is not None else []) + T
    return f"{type(source).__name__} ({', '.join(params)})"


def _panel(ax: Any, what: str, draw: Any) -> None:
    """Draw one panel; what could not be answered (a reducible chain's pi, a source without
    conditionals' rho_ij, ...) is written on the panel with the reason instead."""
    try:
        draw()
    except (ValueError, NumericalError) as err:
        legend = ax.get_legend()
        if legend is not None:
            legend.remove()
        ax.clear()
        ax.set_title(style.symbols(what))
        style.note(ax, textwrap.fill(f"not answered: {err}", 60))


def report_figure(chain: Any, source: Any = None, *, title: str | None = None, eps: float = 0.25) -> Any:
    """One page: distance curve, spectrum, stationary law and (for a source) rho_ij; ``title`` on top
    (default :func:`chain_title`). A panel whose quantity is not answered for this chain says so and
    why; the others are drawn."""
    with if_late("drawing the report figure"):
        return _report_figure(chain, source, title, eps)


def _report_figure(chain: Any, source: Any, title: str | None, eps: float) -> Any:
    fig, axes = style.subplots(2, 2, figsize=(13, 9.5))
    _panel(axes[0, 0], "distance to stationarity $d(t)$",
           lambda: plot_distance_curve(chain, eps=eps, ax=axes[0, 0], title="distance to stationarity $d(t)$"))
    _panel(axes[0, 1], "spectrum of $P$", lambda: plot_spectrum(chain, ax=axes[0, 1], title="spectrum of $P$"))
    _panel(axes[1, 0], r"stationary law $\pi$", lambda: plot_stationary(chain, ax=axes[1, 0],
                                                                 title="stationary law: the most likely states"))
    if isinstance(source, Truncated):
        style.note(axes[1, 1], textwrap.fill(
            "$\\rho_{ij}$ not answered: a top-k / top-p truncated source has zero conditionals, where paper G's "
            "constants are not defined (as in the report, which has no paper G section)", 60))
    elif source is not None:
        _panel(axes[1, 1], "$\\rho_{ij}$ (paper G Def. 2)", lambda: plot_influence(source, ax=axes[1, 1], title=None))
    else:
        style.note(axes[1, 1], "$\\rho_{ij}$ needs a Glauber chain of a source of conditionals "
                               "(not a bare matrix or another kernel)")
    fig.suptitle(style.symbols(title or chain_title(chain)), fontsize=10)
    return fig


def plot_entropy_curve(h: Any, sizes: tuple[int, ...] | None = None, *, ax: Any = None,
                       title: str | None = None) -> Any:
    """The entropy curve ``h`` (h(m), m = 0..L-1, :func:`mlmix.theory.kernels.schedule_kl.entropy_curve`) as
    points, and for block sizes ``sizes`` the step function h(r_t) on each block: the expected KL of the
    schedule is the summed gap between the steps and the points."""
    ax = _axes(ax)
    h = np.asarray(h, dtype=np.float64)
    m = np.arange(h.size)
    ax.plot(m, h, "o-", color="C0", label="$h(m)$")
    if sizes is not None:
        r = 0
        for t, k in enumerate(sizes):
            ax.fill_between(m[r:r + k], h[r:r + k], h[r], step=None, color="C1", alpha=0.3,
                            label="gaps h(r_t) - h(r_t + j): E KL" if t == 0 else None)
            ax.hlines(h[r], r, r + k - 1, color="C1")
            r += k
    ax.set_xlabel("$m$ (positions revealed)")
    ax.set_ylabel("$h(m)$ (nats)")
    ax.legend(loc="upper right", fontsize=7)
    ax.set_title(style.symbols(title or "entropy curve h(m)"), fontsize=9)
    return ax


def save_figure(fig: Any, path: str | Path) -> None:
    """Write ``fig`` atomically as PDF, SVG or PNG (by the suffix) and close it."""
    with if_late(f"writing {path}"):
        style.save(fig, path)
