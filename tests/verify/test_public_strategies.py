"""mlmix.strategies: every draw has the structure it promises (closed classes, period, gap range,
frame), and the edge cases come up at least as often as the docstrings say (measured frequencies)."""

from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings

from mlmix import strategies as ms
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.structure import chain_structure
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.sources.conditionals import ScoreTable

FAST = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


def collect(strategy, n: int, seed_value: int = 0) -> list:
    """``n`` draws of a strategy (a fixed seed: the measured frequencies are reproducible)."""
    out = []

    @seed(seed_value)
    @settings(FAST, max_examples=n, phases=["generate"])
    @given(strategy)
    def draw(x):
        out.append(x)

    draw()
    return out


def test_public_face_is_stable():
    assert set(ms.__all__) <= set(dir(ms))
    for name in ms.__all__:
        obj = getattr(ms, name)
        assert obj.__doc__ and len(obj.__doc__) > 40, name


@pytest.mark.parametrize("classes, period, sparse", [(1, 1, False), ((1, 3), 2, False), (2, 3, False), (3, 1, True)])
def test_stochastic_matrices_have_the_requested_structure(classes, period, sparse):
    draws = collect(ms.stochastic_matrices(12 if not sparse else 300, closed_classes=classes, period=period,
                                           sparse=sparse), 40)
    for m in draws:
        P = m.dense()
        assert (P >= 0).all() and np.allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-15)
        s = chain_structure(m.P)
        found = sorted(tuple(c.tolist()) for c in s.closed_classes)
        assert found == sorted(tuple(c.tolist()) for c in m.classes)
        assert {s.period(c) for c in s.closed_classes} == {period}
        assert sorted(np.flatnonzero(s.transient).tolist()) == m.transient.tolist()
    if sparse:
        assert max(m.n_states for m in draws) > 30 and all(hasattr(m.P, "tocsr") for m in draws)


def test_reversible_matrices_satisfy_detailed_balance_exactly():
    """Reversible builds: pi proportional to the row sums of the symmetric integer weights, checked in
    exact rationals (pi(x) P(x, y) = W(x, y) / sum W = pi(y) P(y, x))."""
    for m in collect(ms.stochastic_matrices(6, reversible=True), 30):
        W = m.weights.astype(int)
        assert (W == W.T).all()
        total = int(W.sum())
        for x in range(W.shape[0]):
            for y in range(W.shape[0]):
                flow = Fraction(int(W[x].sum()), total) * Fraction(int(W[x, y]), int(W[x].sum()))
                back = Fraction(int(W[y].sum()), total) * Fraction(int(W[y, x]), int(W[y].sum()))
                assert flow == back
    nonrev = collect(ms.stochastic_matrices(8, reversible=False, transient=False), 60)
    frac = np.mean([not Chain(m.P).is_reversible for m in nonrev])
    assert frac >= 0.5, frac  # blocks of 2 states are always reversible; most draws are not


def test_metastable_matrices_land_in_the_gap_range():
    draws = collect(ms.metastable_matrices(gap=(1e-12, 1e-6)), 30)
    for m in draws:
        g = Chain(m.P).additive_gap  # an independent recomputation of the certified gap
        assert g.resolved and 1e-12 * (1 - 1e-6) <= g.value <= 1e-6 * (1 + 1e-6)
        assert m.gap.value == pytest.approx(g.value, rel=1e-6)
    assert min(m.gap.value for m in draws) < 1e-10  # the whole range is visited, not just its top
    assert any(m.reversible for m in draws) and any(not m.reversible for m in draws)


def test_weakened_range_claim_fails():
    """The range check above can fail: the same draws are not all inside a range ten times narrower."""
    draws = collect(ms.metastable_matrices(gap=(1e-12, 1e-6)), 30)
    assert not all(1e-11 <= m.gap.value <= 1e-7 for m in draws)


def test_low_temperature_score_tables_are_metastable_often_enough():
    """The docstring's figure: at T <= 0.3, at least 20% of the tables have gap((P+P*)/2) < 1e-6."""
    draws = collect(ms.score_tables(temperature=(0.05, 0.3), max_states=81), 120)
    gaps = np.array([float(Chain(glauber_kernel(d.source)).additive_gap.upper) for d in draws])
    assert np.mean(gaps < 1e-6) >= 0.2, np.mean(gaps < 1e-6)
    warm = collect(ms.score_tables(temperature=(2.0, 20.0), max_states=81), 30)
    warm_gaps = np.array([float(Chain(glauber_kernel(d.source)).additive_gap.upper) for d in warm])
    assert np.mean(warm_gaps < 1e-6) < 0.05  # the metastable edge is a low-temperature phenomenon


def test_score_table_kinds():
    anyk = collect(ms.score_tables(max_states=81), 100)
    assert np.mean([d.reversible is False for d in anyk]) >= 0.5
    near = collect(ms.score_tables(kind="near-compatible", max_states=81), 30)
    assert all(d.reversible is False for d in near)
    compat = collect(ms.score_tables(kind="compatible", max_states=81), 30)
    assert all(d.reversible for d in compat)
    with pytest.raises(ValueError, match="kind"):
        collect(ms.score_tables(kind="nope"), 1)


def test_graph_models():
    draws = collect(ms.ising_models(max_sites=5), 100)
    isolated = np.mean([any(d == 0 for _, d in nx.Graph([tuple(e) for e in i.params["edges"]]).degree())
                        or len({v for e in i.params["edges"] for v in e}) < i.space.length for i in draws])
    assert isolated >= 0.2, isolated
    cycle = nx.cycle_graph(4)
    for inst in collect(ms.potts_models(3, graph=cycle), 20):
        assert inst.space.vocab_size == 3 and inst.space.length == 4
        assert sorted(map(tuple, inst.params["edges"])) == sorted(tuple(sorted(e)) for e in cycle.edges())
    with pytest.raises(ValueError, match="q >= 3"):
        ms.potts_models(2)


def test_frames_are_the_parent_conditionals_renormalised():
    parent = ScoreTable.random(4, 4, seed=3, scale=2.0)
    for inst in collect(ms.frames(parent), 25):
        p = inst.params
        free, alphabet = p["free"], p["alphabet"]
        sub = inst.source
        q, n = len(alphabet), len(free)
        for state in sub.space.all_states()[:5]:
            full = np.zeros(4, dtype=np.int64)
            for i, v in p["fixed"].items():
                full[int(i)] = v
            full[free] = np.asarray(alphabet)[state]
            for k in range(n):
                want = parent.log_conditionals(full[None], free[k])[0][alphabet]
                want = want - np.logaddexp.reduce(want)
                got = sub.log_conditionals(state[None], k)[0]
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        assert 1 <= n <= 3 and 2 <= q <= 4


def test_shrinking_gives_the_smallest_instance():
    """Hypothesis shrinks a matrix with two closed classes and a transient state to three states
    (two absorbing states and one transient), the smallest such chain."""
    from hypothesis import find

    m = find(ms.stochastic_matrices(12, closed_classes=(1, 3)), lambda m: len(m.classes) >= 2 and m.transient.size,
             settings=settings(FAST, max_examples=500, derandomize=True))
    assert m.n_states == 3 and len(m.classes) == 2 and m.transient.tolist() == [2]
    assert (m.dense()[:2, :2] == np.eye(2)).all()


def test_frames_of_the_shipped_model_name_its_tokens():
    from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR, MaskedLMConditionals
    from mlmix.empirical.models.tabulate import tabulate

    mlm = MaskedLMConditionals.from_pretrained(DEFAULT_MODEL_DIR, frame="a _ _ _ b c", candidates="a b c !",
                                               device="cpu")
    table = tabulate(mlm, progress=False, log=lambda _: None)
    for inst in collect(ms.frames(table, temperature=(0.5, 2.0)), 15):
        assert set(inst.params["alphabet"]) <= {"a", "b", "c", "!"}
        assert set(inst.params["fixed"].values()) <= {"a", "b", "c", "!"}
        assert 0.5 <= inst.source.temperature <= 2.0
        chain = Chain(glauber_kernel(inst.source))
        assert chain.is_irreducible  # positive conditionals of a real model: one closed class
