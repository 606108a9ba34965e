"""Every plot kind renders (Agg) with labelled axes, probabilities on linear axes, legends beside the
data and mathtext symbols; an interval beyond the axis is an arrow, never a patch inside the limits;
`--plot` draws what was answered and names what was not; every figure goes through
mlmix/plot_style.py."""

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402

from mlmix import Chain  # noqa: E402
from mlmix import plot_style as style  # noqa: E402
from mlmix.cli import main  # noqa: E402
from mlmix.plots import (  # noqa: E402
    plot_distance_curve,
    plot_influence,
    plot_spectrum,
    plot_stationary,
    report_figure,
)
from mlmix.runs.diagnostics import figure as diagnostics_figure  # noqa: E402
from mlmix.runs.samplers import heatmap  # noqa: E402
from mlmix.theory.results import Result  # noqa: E402
from mlmix.theory.sources.conditionals import IsingModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def arrows(ax):
    return [t for t in ax.texts if isinstance(t, Annotation) and t.arrow_patch is not None]


def patch_x_extents(ax):
    """The x extent (data coordinates) of every patch drawn on ``ax``."""
    out = []
    for p in ax.patches:
        xs = ax.transData.inverted().transform(p.get_transform().transform(p.get_path().vertices))[:, 0]
        out.append((float(np.min(xs)), float(np.max(xs))))
    return out


def outside(ax, legend):
    """The legend's box does not overlap the axes' data area (display coordinates)."""
    ax.figure.canvas.draw()
    a, b = ax.get_window_extent(), legend.get_window_extent()
    return b.x0 >= a.x1 - 1 or b.x1 <= a.x0 + 1 or b.y1 <= a.y0 + 1 or b.y0 >= a.y1 - 1


@pytest.fixture(scope="module")
def warm():
    model = IsingModel(nx.cycle_graph(5), beta=0.4)
    return model, Chain.from_source(model)


def test_a_t_mix_interval_beyond_the_axis_is_an_arrow_not_a_band():
    chain = Chain.from_source(IsingModel(nx.cycle_graph(6), beta=10.0))
    t = chain.mixing_time(0.25)
    assert not t.resolved and t.lower > 1e17
    ax = plot_distance_curve(chain)
    x0, x1 = ax.get_xlim()
    assert x1 <= t.lower
    # no patch inside the limits stands for the interval (the bug: a band at t ~ 190-200)
    assert all("mix" not in p.get_label() for p in ax.patches)
    assert all(hi <= x0 or lo >= x1 for lo, hi in patch_x_extents(ax))
    (arrow,) = arrows(ax)
    assert arrow.xy[0] == 1.0 and arrow.xycoords == "axes fraction"  # at the right edge, pointing out
    assert "4.9" in arrow.get_text() and "8.6" in arrow.get_text() and "mix" in arrow.get_text()
    assert arrow.xy[1] * ax.get_ylim()[1] < 0.25  # below eps: where d(t) > eps leaves no data
    plt.close(ax.figure)


@pytest.fixture(scope="module")
def blank():
    fig, ax = style.subplots()
    yield ax
    plt.close(fig)


@settings(max_examples=25, deadline=None)
@given(a=st.floats(0, 1e6), b=st.floats(0, 1e6), x1=st.floats(1, 1e3))
def test_interval_is_shaded_only_inside_the_axis(blank, a, b, x1):
    lower, upper = min(a, b), max(a, b)
    ax = blank
    ax.cla()
    ax.set_xlim(0, x1)
    style.interval(ax, lower, upper, "interval")
    assert ax.get_xlim() == (0, x1)  # the axis is not stretched to the interval
    tol = 1e-9 * x1
    for lo, hi in patch_x_extents(ax):
        assert -tol <= lo <= hi <= x1 + tol and lo >= min(lower, x1) - tol
    assert bool(ax.patches) == (lower < x1)
    assert len(arrows(ax)) == (1 if upper > x1 else 0)


def test_each_plot_kind_is_labelled_linear_and_keeps_its_legend_off_the_data(warm):
    model, chain = warm
    for draw in (plot_distance_curve, plot_spectrum, plot_stationary):
        ax = draw(chain)
        assert ax.get_xlabel().strip() and ax.get_ylabel().strip(), draw.__name__
        assert r"$\beta$=0.4" in ax.get_title() and "beta=" not in ax.get_title() and "T$=1" in ax.get_title()
        if ax.get_legend() is not None:
            assert outside(ax, ax.get_legend()), draw.__name__
        if draw is plot_distance_curve:
            assert ax.get_yscale() == "linear" and ax.get_ylim() == (0, 1.02)
            assert r"$\varepsilon" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
        if draw is plot_stationary:
            assert ax.get_xscale() == "linear" and ax.get_xlabel() == r"$\pi(x)$"
        if draw is plot_spectrum:
            assert "$\\lambda$" in ax.get_xlabel()
        plt.close(ax.figure)
    ax = plot_influence(model)
    colorbar = ax.figure.axes[-1]
    assert ax.get_xlabel().strip() and ax.get_ylabel().strip() and colorbar.get_ylabel() == r"$\rho_{ij}$"
    assert r"$\rho_{ij}$ of IsingModel" in ax.get_title() and "T$=1" in ax.get_title()
    plt.close(ax.figure)


def test_a_reducible_chain_gets_its_spectrum_and_the_law_of_each_closed_class():
    P = np.array([[0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0], [0, 0, 0.3, 0.7], [0, 0, 0.6, 0.4]])
    fig = report_figure(Chain(P))
    curve, spectrum, stationary, influence = fig.axes[:4]
    assert "closed classes" in " ".join(t.get_text() for t in curve.texts)
    assert spectrum.collections[0].get_offsets().shape == (4, 2)  # the four eigenvalues are drawn
    widths = {lab.get_text(): bar.get_width() for lab, bar in zip(stationary.get_yticklabels(), stationary.patches)}
    assert set(widths) == {"class 0: state 0", "class 0: state 1", "class 1: state 2", "class 1: state 3"}
    assert np.isclose(widths["class 1: state 2"], 6 / 13) and np.isclose(widths["class 0: state 0"], 0.5)
    assert "not unique" in stationary.get_title()
    plt.close(fig)


def test_plot_keeps_an_answered_analysis_answered(tmp_path, capsys):
    P = np.array([[0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0], [0, 0, 0.3, 0.7], [0, 0, 0.6, 0.4]])
    Chain(P).save(tmp_path / "P.npz")
    assert main(["exact", "--matrix", str(tmp_path / "P.npz"), "--plot", str(tmp_path / "r.svg"),
                 "--no-progress"]) == 0
    assert "closed classes" in capsys.readouterr().out and "class 1: state 3" in (tmp_path / "r.svg").read_text()
    svg = tmp_path / "topk.svg"
    assert main(["exact", "--model", "scores", "--vocab", "3", "--length", "3", "--top-k", "2", "--plot", str(svg),
                 "--no-progress"]) == 0
    text = svg.read_text()
    assert "t_mix(0.25)" in capsys.readouterr().out and "not answered" in text and "truncated source" in text


def test_the_samplers_heat_map_names_the_laws_it_could_not_draw():
    law = np.array([0.5, 0.5])
    tv = {"tv": Result.exact("tv", 0.1, "test")}
    laws = {"glauber": {"law": law}, "systematic": {"law": None, "reason": "the sweep kernel is dense"},
            "any-order": {"law": law}}
    dist = {"glauber": {"any-order": tv}, "any-order": {"glauber": tv}}
    fig = heatmap(list(laws), laws, dist, "test table")
    ax = fig.axes[0]
    image = ax.images[0].get_array()
    assert image.shape == (2, 2) and np.isfinite(image).all()  # no blank cross
    assert [t.get_text() for t in ax.get_xticklabels()] == ["glauber", "any-order"]
    assert any("systematic: not computed (the sweep kernel is dense)" in t.get_text() for t in fig.texts)
    assert ax.get_xlabel() and ax.get_ylabel() and fig.axes[1].get_ylabel()
    plt.close(fig)


def test_the_diagnostics_figure_labels_every_axis():
    curves = [{"function": f, "N": N, "rhat": None if N < 100 else 1.0 + 1 / N, "ess_bulk": N / 2.0,
               "exact_ess": N / 3.0, "d_start": 0.9} for f in ("magnetization", "logpi") for N in (50, 100, 200)]
    fig = diagnostics_figure({"Ising K8, trap start": {"curves": curves}})
    assert len(fig.axes) == 3  # R-hat, ESS and the d_mu twin
    for ax in fig.axes:
        assert ax.get_ylabel().strip()
    assert "hat{R}" in fig.axes[0].get_ylabel() and "d_\\mu" in fig.axes[2].get_ylabel()
    assert fig.axes[0].get_xlabel() and fig.axes[1].get_xlabel()
    plt.close(fig)


@pytest.mark.parametrize(("suffix", "magic"), [("pdf", b"%PDF-"), ("svg", b"<?xml"), ("png", b"\x89PNG")])
def test_files_by_extension(tmp_path, suffix, magic):
    fig, ax = style.subplots()
    ax.plot([0, 1], [0, 1])
    style.save(fig, tmp_path / f"f.{suffix}")
    assert (tmp_path / f"f.{suffix}").read_bytes().startswith(magic)
    with pytest.raises(ValueError, match="a figure is written as"):
        style.save(style.subplots()[0], tmp_path / "f.jpg")


def test_every_figure_goes_through_the_style_module():
    """No module draws or saves a figure around mlmix/plot_style.py (one style for all)."""
    allowed = {ROOT / "mlmix" / "plot_style.py", ROOT / "mlmix" / "files.py"}
    bad = []
    for folder in ("mlmix", "empirical", "theory", "verify"):
        for path in (ROOT / folder).rglob("*.py"):
            if path in allowed:
                continue
            text = path.read_text(encoding="utf-8")
            if re.search(r"import matplotlib|atomic_save_figure|from mlmix\.files import[^\n]*\bpyplot\b|"
                         r"from mlmix\.files import \([^)]*\bpyplot\b", text):
                bad.append(str(path.relative_to(ROOT)))
    assert bad == []


def test_a_matrix_free_chain_is_plotted_not_refused(tmp_path, monkeypatch, capsys):
    out = tmp_path / "op.svg"
    assert main(["exact", "--graph", "cycle:6", "--representation", "operator", "--plot", str(out),
                 "--no-progress"]) == 0
    assert "t_mix(0.25)" in capsys.readouterr().out and "1 1 1 1 1 1" in out.read_text()
    model = IsingModel(nx.cycle_graph(6), beta=0.5)
    chain = Chain.from_source(model, representation="operator")
    t = chain.mixing_time(0.25)
    ax = plot_distance_curve(chain)  # the certified interval [lower, upper] lies on the axis: shaded
    assert ax.get_xlim()[1] >= t.upper and not arrows(ax) and ax.patches
    plt.close(ax.figure)
    monkeypatch.setattr("mlmix.plots.PLOT_DENSE_LIMIT", 10)  # beyond the dense limit: the figures named
    ax = plot_distance_curve(chain)
    text = " ".join(x.get_text() for x in ax.texts)
    assert "needs dense powers" in text and "certified" in text and f"{t.lower:.3g}" in text
    plt.close(ax.figure)
    ax = plot_spectrum(chain)
    assert "absolute spectral gap" in " ".join(x.get_text() for x in ax.texts)
    plt.close(ax.figure)
