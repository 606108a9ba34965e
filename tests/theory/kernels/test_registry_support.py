"""The exact support pattern is part of each registry entry (``KernelSpec.support``).

For every registered kernel, on small sources with zero conditionals (-inf scores, -inf log-weights) and
with conditionals that underflow in floats (an Ising model at beta = 400: exp(-800) < the smallest
double), :func:`kernel_support` equals the pattern of the transition probabilities computed entry by
entry from their definitions in mpmath (whose exponent range has no underflow) and equals the output
of the name-dispatched function it replaced (copied below). A kernel registered in a test gets its
support from its own builder; one without a builder gets its float matrix's pattern.
"""

from __future__ import annotations

from itertools import combinations

import mpmath
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlmix.errors import InputTypeError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.structure import chain_structure
from mlmix.theory.kernels.assembled import block_fibres, joint_log_weights, k_subsets
from mlmix.theory.kernels.registry import KERNELS, KernelSpec, kernel_names
from mlmix.theory.kernels.scan_and_mh import check_order, energy, energy_vector, mh_logs, site_fibres
from mlmix.theory.kernels.support import kernel_support
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, ScoreTable
from mlmix.theory.sources.space import StateSpace


# ------------------------------------------------------------------ the function before the registry
def _pattern(size, rows, cols):
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    G = sp.csr_array((np.ones(r.size, dtype=bool), (r, c)), shape=(size, size))
    G.sum_duplicates()
    return G


def _fibre_pairs(members, live, q):
    m = members.shape[0]
    to = np.broadcast_to(members[:, None, :], (m, q, q))
    frm = np.broadcast_to(members[:, :, None], (m, q, q))
    ok = np.broadcast_to(live[:, None, :], (m, q, q))
    return [frm[ok]], [to[ok]]


def old_kernel_support(source, kernel, *, k=None, order=None):
    """A copy of the if-chain ``kernel_support`` had before the support moved into the registry."""
    space = source.space
    N, n, q = space.size, space.length, space.vocab_size
    if kernel in ("glauber", "systematic"):
        sites = range(n) if kernel == "glauber" else check_order(space, order)
        if kernel == "glauber":
            rows, cols = [], []
            for i in sites:
                base, members = site_fibres(space, i)
                r, c = _fibre_pairs(members, np.isfinite(source.log_conditionals(space.decode(base), i)), q)
                rows += r
                cols += c
            return _pattern(N, rows, cols)
        S = sp.eye_array(N, dtype=np.int64, format="csr")
        for i in sites:
            base, members = site_fibres(space, i)
            r, c = _fibre_pairs(members, np.isfinite(source.log_conditionals(space.decode(base), i)), q)
            S = sp.csr_array(S @ _pattern(N, r, c).astype(np.int64))
            S.data[:] = 1
        return sp.csr_array(S.astype(bool))
    if kernel == "k-gibbs":
        live = np.isfinite(joint_log_weights(source))
        rows, cols = [], []
        for K in k_subsets(n, 2 if k is None else k):
            members = block_fibres(space, K)
            r, c = _fibre_pairs(members, live[members], members.shape[1])
            rows += r
            cols += c
        return _pattern(N, rows, cols)
    if kernel == "parallel":
        states = space.all_states()
        L = np.isfinite(source.all_log_conditionals(states))
        F = np.ones((N, N), dtype=bool)
        for i in range(n):
            F &= L[:, i, :][:, states[:, i]]
        return sp.csr_array(F)
    E = energy_vector(source, kernel[3:])
    rows, cols = [], []
    off = ~np.eye(q, dtype=bool)
    for i in range(n):
        members, _, acc = mh_logs(source, E, i)
        m = members.shape[0]
        ok = np.isfinite(acc) & off
        rows.append(np.broadcast_to(members[:, :, None], (m, q, q))[ok])
        cols.append(np.broadcast_to(members[:, None, :], (m, q, q))[ok])
    return _pattern(N, rows, cols)


# ------------------------------------------------------------------ exact kernels in mpmath
def _conditional(source, x, i):
    """p_i(. | x_{-i}) as mpmath numbers (no underflow)."""
    lc = source.log_conditionals(np.asarray([x]), i)[0]
    return [mpmath.exp(v) if np.isfinite(v) else mpmath.mpf(0) for v in lc]


def _heat_bath(source, i):
    space = source.space
    states = [tuple(s) for s in space.all_states()]
    H = mpmath.zeros(space.size, space.size)
    for a, x in enumerate(states):
        p = _conditional(source, x, i)
        for b, y in enumerate(states):
            if all(y[j] == x[j] for j in range(space.length) if j != i):
                H[a, b] = p[y[i]]
    return H


def exact_kernel(source, kernel, k=2, order=None):
    """P entry by entry from the kernel's definition, in mpmath (MH: off-diagonal entries only)."""
    space = source.space
    n, N = space.length, space.size
    states = [tuple(s) for s in space.all_states()]
    if kernel == "glauber":
        return sum((_heat_bath(source, i) for i in range(n)), mpmath.zeros(N, N)) / n
    if kernel == "systematic":
        P = mpmath.eye(N)
        for i in check_order(space, order):
            P = P * _heat_bath(source, i)
        return P
    if kernel == "parallel":
        P = mpmath.zeros(N, N)
        for a, x in enumerate(states):
            conds = [_conditional(source, x, i) for i in range(n)]
            for b, y in enumerate(states):
                P[a, b] = mpmath.fprod(conds[i][y[i]] for i in range(n))
        return P
    if kernel == "k-gibbs":
        mu = [mpmath.exp(w) if np.isfinite(w) else mpmath.mpf(0) for w in source.log_joint()]
        blocks = list(combinations(range(n), k))
        P = mpmath.zeros(N, N)
        for a, x in enumerate(states):
            for K in blocks:
                fibre = [b for b, y in enumerate(states) if all(y[j] == x[j] for j in range(n) if j not in K)]
                Z = mpmath.fsum(mu[b] for b in fibre)
                for b in fibre:
                    P[a, b] += mu[b] / Z / len(blocks)
        return P
    E = energy(source, kernel[3:])
    P = mpmath.zeros(N, N)
    for a, x in enumerate(states):
        for i in range(n):
            p = _conditional(source, x, i)
            for v in range(space.vocab_size):
                if v == x[i]:
                    continue
                y = x[:i] + (v,) + x[i + 1:]
                b = states.index(y)
                if np.isfinite(E[a]) and np.isfinite(E[b]):
                    back = mpmath.exp(E[a] - E[b]) * p[x[i]]
                elif np.isfinite(E[b]) and p[x[i]] > 0:  # E(x) = +inf: every move out is accepted
                    back = mpmath.inf
                else:  # into infinite energy, or an undefined form: rejected
                    back = mpmath.mpf(0)
                P[a, b] += min(p[v], back) / n
    return P


def _positive(P) -> np.ndarray:
    return np.array([[P[a, b] > 0 for b in range(P.cols)] for a in range(P.rows)])


# ------------------------------------------------------------------ sources
def _score_table_with_zeros(seed: int, q: int = 2, n: int = 3) -> ScoreTable:
    rng = np.random.default_rng(seed)
    space = StateSpace(q, n)
    tab = rng.normal(size=(n, q ** (n - 1), q))
    dead = rng.random(tab.shape) < 0.3
    dead[..., 0] &= ~dead[..., 1:].all(axis=-1)  # a finite score in every row
    tab[dead] = -np.inf
    return ScoreTable(space, tab)


def _log_weights_with_zeros() -> LogWeightTable:
    lw = np.log(np.arange(1.0, 10.0))
    lw[[1, 5, 6]] = -np.inf
    return LogWeightTable(StateSpace(3, 2), lw)


SOURCES = {
    "score-table -inf": _score_table_with_zeros(0),
    "score-table q=3 -inf": _score_table_with_zeros(1, q=3, n=2),
    "ising beta=400": IsingModel(nx.path_graph(3), beta=400.0),
    "ising beta=400 fields": IsingModel(nx.cycle_graph(3), beta=400.0, fields=0.3),
    "log-weights -inf": _log_weights_with_zeros(),
}

CASES = [("glauber", {}), ("k-gibbs", {"k": 1}), ("k-gibbs", {"k": 2}), ("parallel", {}),
         ("systematic", {}), ("systematic", {"order": "2 0 1 0"}), ("mh-logit", {}), ("mh-pll", {})]


def _dense(S) -> np.ndarray:
    return sp.csr_array(S).toarray().astype(bool)


def test_every_registered_kernel_declares_its_support():
    assert all(spec.support is not None for spec in KERNELS.values())
    assert {name for name, _ in CASES} == set(kernel_names())


@pytest.mark.parametrize("source_name", list(SOURCES))
@pytest.mark.parametrize(("kernel", "options"), CASES, ids=[f"{k}{o}" for k, o in CASES])
def test_support_is_the_exact_pattern_and_the_old_one(source_name, kernel, options):
    source = SOURCES[source_name]
    if kernel == "systematic" and "order" in options and source.space.length < 3:
        options = {"order": "1 0 1"}
    if kernel == "k-gibbs" and source.log_joint() is None:
        with pytest.raises(InputTypeError, match="no joint law"):
            kernel_support(source, kernel, **options)
        return
    got = _dense(kernel_support(source, kernel, **options))
    assert np.array_equal(got, _dense(old_kernel_support(source, kernel, **options)))
    exact = _positive(exact_kernel(source, kernel, **options))
    if kernel.startswith("mh"):  # the diagonal (1 - the row's moves) is the float kernel's
        np.fill_diagonal(exact, False)
    assert np.array_equal(got, exact)


def test_underflow_is_in_the_support_not_in_the_floats():
    """At beta = 400 the Glauber kernel's float entries of moves against the field are 0 (exp(-800)),
    yet they are positive: the support has them, so the chain is one class."""
    source = SOURCES["ising beta=400"]
    S = kernel_support(source, "glauber")
    P = KERNELS["glauber"].build_csr(source)
    assert S.nnz > sp.csr_array(P).count_nonzero()
    assert not chain_structure(P).is_irreducible
    assert Chain.from_source(source, "glauber").structure.is_irreducible


def test_options_resolve_as_chain_from_source_resolves_them():
    source = SOURCES["ising beta=400"]
    assert np.array_equal(_dense(kernel_support(source, "k-gibbs", k=None, order="0 1 2")),
                          _dense(old_kernel_support(source, "k-gibbs", k=2)))
    assert np.array_equal(_dense(kernel_support(source, "mh", energy="pll")),
                          _dense(old_kernel_support(source, "mh-pll")))


def test_unknown_kernel_is_one_line():
    with pytest.raises(ValueError, match="kernel must be one of") as info:
        kernel_support(SOURCES["ising beta=400"], "metropolis")
    assert "\n" not in str(info.value)


def _fake_spec(support):
    def build_csr(source, flip=False):
        N = source.space.size
        return sp.csr_array(np.roll(np.eye(N), 1, axis=1) if flip else np.eye(N))

    return KernelSpec("fake", lambda s, **o: build_csr(s, **o).toarray(), build_csr, None, {"flip": False}, False,
                      "a test kernel", lambda s, o: "fake", support=support)


def test_a_registered_kernel_gets_its_support_from_its_own_builder(monkeypatch):
    seen = {}

    def support(source, flip=False):
        seen["flip"] = flip
        return sp.csr_array(np.ones((source.space.size,) * 2, dtype=bool))

    monkeypatch.setitem(KERNELS, "fake", _fake_spec(support))
    source = SOURCES["ising beta=400"]
    S = kernel_support(source, "fake", flip=True, k=3)
    assert seen == {"flip": True}
    assert _dense(S).all()


def test_a_kernel_without_a_support_builder_gets_its_float_pattern(monkeypatch):
    monkeypatch.setitem(KERNELS, "fake", _fake_spec(None))
    source = SOURCES["ising beta=400"]
    S = kernel_support(source, "fake", flip=True)
    assert S.dtype == bool
    assert np.array_equal(_dense(S), np.roll(np.eye(source.space.size, dtype=bool), 1, axis=1))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from([(2, 3), (3, 2), (2, 2)]),
       kernel=st.sampled_from(["glauber", "parallel", "systematic", "mh-logit", "mh-pll"]))
def test_random_zero_patterns(seed, shape, kernel):
    source = _score_table_with_zeros(seed, *shape)
    got = _dense(kernel_support(source, kernel))
    assert np.array_equal(got, _dense(old_kernel_support(source, kernel)))
    exact = _positive(exact_kernel(source, kernel))
    if kernel.startswith("mh"):
        np.fill_diagonal(exact, False)
    assert np.array_equal(got, exact)

