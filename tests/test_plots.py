"""Figures (mlmix/plots.py): each function returns its axes, titled with the model and parameters,
drawing certified numbers; `mlmix exact --plot` writes PDF, SVG and PNG files that open."""

import xml.etree.ElementTree as ET

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mlmix import Chain  # noqa: E402
from mlmix.cli import main  # noqa: E402
from mlmix.plots import (  # noqa: E402
    chain_title,
    plot_distance_curve,
    plot_influence,
    plot_spectrum,
    plot_stationary,
    save_figure,
)
from mlmix.theory.sources.conditionals import IsingModel  # noqa: E402


@pytest.fixture(scope="module")
def ising():
    model = IsingModel(nx.cycle_graph(5), beta=0.4)
    return model, Chain.from_source(model)


def test_each_plot_returns_its_axes_titled_and_drawn(ising):
    model, chain = ising
    assert chain_title(chain).startswith("IsingModel (beta=0.4, n=5); glauber, T=1; 32 states")
    fig, axes = plt.subplots(2, 2)
    ax = plot_distance_curve(chain, ax=axes[0, 0])
    assert ax is axes[0, 0] and r"IsingModel ($\beta$=0.4" in ax.get_title()
    t_mix = int(chain.mixing_time())
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"$t_{{\\rm mix}}(0.25)$ = {t_mix} (exact)" in labels
    assert ax.get_xlim() == (0, 2 * t_mix)
    curve = ax.get_lines()[0].get_ydata()
    assert np.allclose(curve, chain.distance_curve(2 * t_mix, progress=False).value)
    ax = plot_spectrum(chain, ax=axes[0, 1])
    gap = float(chain.spectral_gap)
    assert any(f"gap $\\gamma = {gap:.3g}$" in t.get_text() for t in ax.get_legend().get_texts())
    eig = ax.collections[0].get_offsets()
    assert np.isclose(np.sort(eig[:, 0])[-2], 1 - gap, atol=1e-12)  # the second eigenvalue is 1 - gap
    ax = plot_stationary(chain, k=4, ax=axes[1, 0])
    assert [t.get_text() for t in ax.get_yticklabels()][:2] in (["0 0 0 0 0", "1 1 1 1 1"],
                                                                      ["1 1 1 1 1", "0 0 0 0 0"])
    ax = plot_influence(model, ax=axes[1, 1])
    assert r"$\rho$=" in ax.get_title() and ax.images[0].get_array().shape == (5, 5)
    plt.close(fig)


def test_metastable_curve_is_drawn_from_certified_points():
    chain = Chain.from_source(IsingModel(nx.cycle_graph(4), beta=3.0))
    ax = plot_distance_curve(chain)
    labels = " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert "certified points" in labels and "(exact)" in labels
    plt.close(ax.figure)


@pytest.mark.parametrize("suffix", ["pdf", "svg", "png"])
def test_exact_plot_writes_a_file_that_opens(tmp_path, suffix, capsys):
    path = tmp_path / f"ising.{suffix}"
    assert main(["exact", "--graph", "cycle:4", "--beta", "0.3", "--plot", str(path), "--no-progress"]) == 0
    data = path.read_bytes()
    if suffix == "png":
        image = mpimg.imread(path)
        assert image.ndim == 3 and image.shape[0] > 500 and image.shape[1] > 500
        assert image[..., :3].std() > 0.05  # not a blank page
    elif suffix == "svg":
        root = ET.fromstring(data)
        assert root.tag.endswith("svg")
        text = data.decode()
        assert "Ising model on cycle:4 (" in text and "0.3" in text and "mix" in text  # svg.fonttype none: text kept
    else:
        assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF") and b"/Type /Page" in data


def test_bad_plot_names_are_refused_before_the_work(tmp_path, capsys):
    assert main(["exact", "--plot", str(tmp_path / "x.jpg")]) == 2
    assert "--plot must name a .pdf, .svg or .png" in capsys.readouterr().err
    with pytest.raises(ValueError):
        save_figure(plt.figure(), tmp_path / "x.gif")
