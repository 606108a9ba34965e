"""``Chain``: validated once, quantities cached, results with accuracy, persistence, and the quantities
peers' users rely on (period, Kemeny constant, mean first passage times, committors)."""

import sys

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from chain_representations import assert_encloses, chain_in
from helpers import two_state

import mlmix
from mlmix.errors import UnresolvedError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.assembled import glauber_kernel, independent_parallel_kernel, k_gibbs_kernel
from mlmix.theory.results import Result, VectorResult
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable, clique_ising


def test_validates_once_and_caches(monkeypatch, matrix_chain_of):
    calls = []
    for name, module in list(sys.modules.items()):
        if name.startswith("mlmix") and hasattr(module, "check_transition_matrix"):
            original = module.check_transition_matrix
            monkeypatch.setattr(module, "check_transition_matrix",
                                lambda P, tol=1e-9, _f=original: calls.append(1) or _f(P, tol))
    ch = matrix_chain_of(glauber_kernel(ScoreTable.random(2, 3, seed=1)))
    ch.summary()
    ch.asymptotic_variance(np.arange(8.0))
    ch.hitting_time([0])
    assert len(calls) == 1
    assert ch.stationary is ch.stationary and ch.spectral_gap is ch.spectral_gap


def test_results_carry_method_and_accuracy(matrix_chain_of):
    ch = matrix_chain_of(two_state(0.2, 0.3))
    for r in (ch.spectral_gap, ch.absolute_spectral_gap, ch.relaxation_time, ch.additive_gap, ch.poincare_constant,
              ch.conductance, ch.kemeny_constant, ch.mixing_time(), ch.tv_distance(3)):
        assert isinstance(r, Result) and r.method
        if r is ch.kemeny_constant and ch.representation != "dense":  # needs every eigenvalue: bounds only
            assert not r.resolved and r.reason and r.lower <= 2.0 <= r.upper  # K = 1 / (a + b)
            continue
        if ch.representation == "operator" and r.name in ("conductance", "t_mix", "d(t)"):
            # matrix-free: Phi* by Cheeger and a sweep set, t_mix and d(t) by spectral bounds
            assert not r.resolved and r.reason and r.method
            continue
        assert r.resolved and r.rel_error is not None
        assert r.lower <= r.value <= r.upper
        assert set(r.as_dict()) >= {"value", "lower", "upper", "rel_error", "method", "reason"}
    assert isinstance(ch.stationary, VectorResult) and np.asarray(ch.stationary).shape == (2,)
    t_mix = ch.mixing_time()  # matrix-free: certified bounds
    assert float(ch.spectral_gap) == pytest.approx(0.5, rel=1e-15) and (t_mix.lower if ch.op else int(t_mix)) >= 1
    assert mlmix.Result is Result and mlmix.VectorResult is VectorResult


def test_from_source_kernels(representation):
    """Each kernel's chain is the assembled kernel, in every representation; the parallel kernel has no
    matrix-free operator: a one-line ValueError, not a different chain."""
    src = clique_ising(4, range(3), 0.4, 0.1)
    for kernel, builder in [("glauber", lambda: glauber_kernel(src)), ("k-gibbs", lambda: k_gibbs_kernel(src, 2)),
                            ("parallel", lambda: independent_parallel_kernel(src))]:
        if representation == "operator" and kernel == "parallel":
            with pytest.raises(ValueError, match="no matrix-free operator for kernel 'parallel'"):
                chain_in(representation, source=src, kernel=kernel, k=2)
            continue
        ch = chain_in(representation, source=src, kernel=kernel, k=2)
        M = builder()
        np.testing.assert_allclose(ch.to_dense(), M.toarray() if sp.issparse(M) else M, atol=0)
        assert ch.source is src and ch.kernel == kernel
        assert ch.representation == {"dense": "dense", "csr": "sparse", "operator": "operator"}[representation]
    with pytest.raises(ValueError, match="kernel must be one of"):
        Chain.from_source(src, "metropolis")


def test_save_and_load_round_trip(tmp_path, matrix_chain_of):
    P = glauber_kernel(ScoreTable.random(2, 3, seed=4))
    ch = matrix_chain_of(P, name="scores")
    ch.save(tmp_path / "chain.npz")
    back = Chain.load(tmp_path / "chain.npz")
    np.testing.assert_array_equal(back.to_dense(), P.toarray())
    gap = ch.additive_gap  # the loaded chain picks its own algorithms (dense at 8 states): equal within the errors
    assert_encloses(back.additive_gap, gap.value, slack=gap.rel_error * gap.value)
    with pytest.raises(ValueError, match=".npz"):
        ch.save(tmp_path / "chain.npy")
    with pytest.raises(ValueError, match="does not exist"):
        Chain.load(tmp_path / "missing.npz")


def test_period_and_classes(matrix_chain_of):
    cyc = np.roll(np.eye(4), 1, axis=1)
    assert matrix_chain_of(cyc).period == 4 and not matrix_chain_of(cyc).is_aperiodic
    bip = np.array([[0, 0.5, 0.5, 0], [0.5, 0, 0, 0.5], [0.5, 0, 0, 0.5], [0, 0.5, 0.5, 0]])
    assert matrix_chain_of(bip).period == 2
    assert matrix_chain_of(two_state(0.3, 0.4)).period == 1
    # transient states: the period of the closed class
    T = matrix_chain_of(np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.5]]))
    assert T.period == 2 and not T.is_irreducible and len(T.closed_classes) == 1


def test_mean_first_passage_times_and_kemeny(representation):
    """M[i, j] = E_i tau_j from one elimination per target; Kemeny's constant sum_j pi_j M[i, j] is the
    same for every i and equals the eigenvalue sum (an enclosure of it on the operator)."""
    src = ScoreTable.random(2, 3, seed=7, temperature=0.8)
    P = glauber_kernel(src).toarray()
    ch = chain_in(representation, source=src)
    M = np.asarray(ch.mean_first_passage_times())
    assert np.allclose(np.diag(M), 0)
    N = P.shape[0]
    for j in range(N):  # first-step equations M[i, j] = 1 + sum_k P[i, k] M[k, j], i != j
        rest = np.arange(N) != j
        np.testing.assert_allclose(M[rest, j], 1 + P[rest] @ M[:, j], rtol=1e-11)
    kemeny = M @ ch.stationary.value
    assert np.ptp(kemeny) <= 1e-10 * kemeny[0]
    assert_encloses(ch.kemeny_constant, float(kemeny[0]), slack=1e-10 * kemeny[0])
    np.testing.assert_allclose(ch.mean_first_passage_times(3), M[:, 3], rtol=1e-13)
    with pytest.raises(ValueError, match="give a target"):
        Chain.from_source(ScoreTable.random(2, 9, seed=0)).mean_first_passage_times()


def test_committor_and_hitting_through_the_chain(chain_of):
    ch = chain_of(source=IsingModel(nx.path_graph(4), beta=1.0))
    N = ch.n_states
    q = ch.committor([0], [N - 1])
    np.testing.assert_allclose(q[::-1], 1 - np.asarray(q), atol=1e-13)  # spin-flip symmetry
    assert q[0] == 0 and q[N - 1] == 1
    k = ch.hitting_time([N - 1])
    assert k[N - 1] == 0 and (k[:-1] > 0).all()
    h = ch.hitting_probabilities([N - 1], 10)
    assert (np.asarray(h) <= 1).all() and h[N - 1] == 1


def test_unresolved_results_refuse_to_be_numbers(chain_of):
    ch = chain_of(source=IsingModel(nx.cycle_graph(4), beta=12.0))
    t = ch.mixing_time()
    assert not t.resolved and t.reason
    with pytest.raises(UnresolvedError, match="t_mix is not resolved"):
        float(t)
    assert "not resolved" in str(t) and f"{t:.3g}".startswith("[")


def test_summary_is_strict_json(matrix_chain_of):
    from mlmix.files import dumps_json

    text = dumps_json(matrix_chain_of(np.array([[0.0, 1.0], [1.0, 0.0]])).summary(include_stationary=True))
    assert "NaN" not in text and "Infinity" not in text
