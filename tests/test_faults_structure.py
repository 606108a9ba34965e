"""Silent wrong numbers or structure: truncation that drops mass it should keep, and underflow
reported as structure.

Truncation (top-k / top-p) must be exact in log space: p = 1 and k = |V| are the identity bit for
bit, the kept set is the smallest most-probable set of mass >= p with its boundary ties, checked
against exact rational arithmetic on integer weights spread over 1000 nats. The communicating
classes of a chain built from a source come from the sign pattern of its exact conditionals
(log-conditionals > -inf), not from entries of P that underflowed to 0.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.errors import UnderflowError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.stationary import log_space_stationary
from mlmix.theory.kernels.decoders import decoder_law, partial_log_probs
from mlmix.theory.kernels.scan_and_mh import Truncated, energy, truncate_log_probs
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace

EPS = float(np.finfo(np.float64).eps)


# ---------------------------------------------------------------------------------------- truncation
def _weights() -> st.SearchStrategy[list[int]]:
    """Integer weights b * 2^e (b in 1..40, e in 0..1443: up to 1000 nats apart), so the exact law is
    rational and distinct weights differ by a factor of at least 41/40."""
    return st.lists(st.tuples(st.integers(1, 40), st.integers(0, 1443)), min_size=1, max_size=9).map(
        lambda pairs: [b << e for b, e in pairs])


def _log_probs(w: list[int]) -> np.ndarray:
    """log(w / sum w) as floats: math.log of the exact integers (equal weights give equal floats)."""
    total = math.log(sum(w))
    return np.array([math.log(v) - total for v in w])


def _reference_top_p(w: list[int], p: Fraction) -> tuple[set[int], bool]:
    """The exact top-p set of the rational law w / sum w (smallest most-probable set of mass >= p,
    ties with its last member included) and whether some cumulative mass lies within 1e-9 of p
    (where the float decision may go either way)."""
    total = sum(w)
    levels = sorted(set(w), reverse=True)
    head, ambiguous = 0, False
    for level in levels:
        head += level * w.count(level)
        ambiguous |= abs(Fraction(head, total) - p) <= Fraction(1, 10**9) * min(p, 1 - p)
        if Fraction(head, total) >= p:
            return {i for i, v in enumerate(w) if v >= level}, ambiguous
    return set(range(len(w))), ambiguous


@settings(max_examples=60, deadline=None)
@given(_weights(), st.integers(0, 2))
def test_identity_at_p1_and_full_k(w, extra):
    """(a) top_p = 1 and top_k = |V| return the log-probabilities bit for bit, however small the entries."""
    lp = _log_probs(w)
    lp = np.stack([lp] * (extra + 1))
    for out in (truncate_log_probs(lp, top_p=1.0), truncate_log_probs(lp, top_k=lp.shape[-1]),
                truncate_log_probs(lp, top_k=lp.shape[-1], top_p=1.0)):
        assert out.tobytes() == lp.tobytes()


@settings(max_examples=150, deadline=None)
@given(_weights(), st.fractions(Fraction(1, 1000), Fraction(1)) | st.sampled_from(
    [Fraction(1), Fraction(1) - Fraction(1, 2**53), Fraction(1, 2), Fraction(9, 10)]))
def test_top_p_set_matches_exact_rationals(w, p):
    """(b) the kept set is the exact smallest most-probable set of mass >= p, ties included; (c) the
    kept law sums to 1 within a few ulps."""
    p = Fraction(float(p))  # the p the function is given
    assume(0 < p <= 1)
    ref, ambiguous = _reference_top_p(w, p)
    assume(not ambiguous)
    out = truncate_log_probs(_log_probs(w), top_p=float(p))
    assert set(np.flatnonzero(np.isfinite(out))) == ref
    if len(ref) < len(w):  # renormalised (a row left whole is the input, bit for bit)
        assert abs(math.fsum(np.exp(out[np.isfinite(out)])) - 1) <= 4 * len(w) * EPS


@settings(max_examples=100, deadline=None)
@given(_weights(), st.integers(1, 9))
def test_top_k_set_is_k_most_probable_with_ties(w, k):
    k = min(k, len(w))
    kth = sorted(w, reverse=True)[k - 1]
    out = truncate_log_probs(_log_probs(w), top_k=k)
    assert set(np.flatnonzero(np.isfinite(out))) == {i for i, v in enumerate(w) if v >= kth}
    kept = np.exp(out[np.isfinite(out)])
    if kept.size < len(w):
        assert abs(math.fsum(kept) - 1) <= 4 * len(w) * EPS
    exact = [Fraction(v, sum(x for x in w if x >= kth)) for v in w if v >= kth]  # renormalised exactly
    assert max(abs(float(a) / float(b) - 1) for a, b in zip(kept, exact) if float(b) > 1e-300) <= 2e-12


def test_top_p_one_keeps_tiny_probabilities():
    """Probabilities of 1e-17 and 1e-300 survive --top-p 1 (they were removed: the float cumulative
    mass reached 1 before them)."""
    lp = np.array([0.0, math.log(1e-17), math.log(1e-300)])
    assert truncate_log_probs(lp, top_p=1.0).tobytes() == lp.tobytes()
    near = truncate_log_probs(lp, top_p=1 - 2**-53)  # the tail 1e-17 < 1.1e-16 = 1 - p: removed
    assert np.isfinite(near).tolist() == [True, False, False]
    lp2 = np.log(np.array([1 - 1e-15, 1e-15]))  # tail 1e-15 > 1 - p: kept
    assert np.isfinite(truncate_log_probs(lp2, top_p=1 - 2**-53)).all()


def test_top_p_boundary_equality_keeps_smaller_set():
    """Mass exactly p (within rounding) counts as reached: 0.5 alone reaches p = 0.5."""
    lp = np.log(np.array([0.5, 0.3, 0.2]))
    assert np.isfinite(truncate_log_probs(lp, top_p=0.5)).tolist() == [True, False, False]
    assert np.isfinite(truncate_log_probs(lp, top_p=0.8)).tolist() == [True, True, False]


def test_truncated_source_at_p1_is_the_source():
    """Truncated(top_p=1) gives the base conditionals bit for bit (an Ising cycle at beta = 20)."""
    src = _ising(6, 20.0)
    ctx = src.space.all_states()
    for i in range(src.space.length):
        assert Truncated(src, top_p=1.0).log_conditionals(ctx, i).tobytes() == src.log_conditionals(ctx, i).tobytes()


def _ising(n: int, beta: float) -> IsingModel:
    return IsingModel(nx.cycle_graph(n), beta=beta)


def test_exact_cli_top_p1_same_chain(capsys):
    """`mlmix exact --model ising --graph cycle:6 --beta 20 --top-p 1` is the untruncated chain (it was
    reported as 2 closed classes)."""
    args = ["exact", "--model", "ising", "--graph", "cycle:6", "--beta", "20", "--json", "--no-progress"]
    assert main(args + ["--top-p", "1"]) == 0
    truncated = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert truncated["irreducible"] and truncated["closed_classes"] == 1
    assert truncated["spectral_gap"]["value"] == plain["spectral_gap"]["value"]


def test_decoder_top_p1_keeps_tiny_entries():
    """A decoder at top_p = 1 is the untruncated decoder: its tiny law entries (exp(-60)) are not 0."""
    space = StateSpace(2, 3)
    table = np.zeros((3, 3**2, 2))
    table[..., 1] = -60.0  # symbol 1 has probability about exp(-60) in every context
    src = PartialScoreTable(space, table)
    assert partial_log_probs(src, top_p=1.0).tobytes() == partial_log_probs(src).tobytes()
    law = decoder_law(src, "any-order", top_p=1.0).law
    ref = decoder_law(src, "any-order").law
    assert (ref > 0).all() and ref.min() < 1e-16
    assert np.array_equal(law, ref)


# ---------------------------------------------------------------------------------------- structure
def _exact_edges(src, kernel: str) -> np.ndarray:
    """Reference sign pattern (N, N) of "glauber" or "parallel", state by state, from the
    log-conditionals > -inf."""
    space = src.space
    states = space.all_states()
    N, n = space.size, space.length
    L = np.stack([src.log_conditionals(states, i) for i in range(n)], axis=1)  # (N, n, q)
    live = np.isfinite(L)
    A = np.zeros((N, N), dtype=bool)
    for x in range(N):
        for y in range(N):
            diff = np.flatnonzero(states[x] != states[y])
            if kernel == "glauber":
                A[x, y] = any(live[x, i, states[y, i]] for i in range(n)) if diff.size == 0 else \
                    diff.size == 1 and live[x, diff[0], states[y, diff[0]]]
            else:  # parallel
                A[x, y] = all(live[x, i, states[y, i]] for i in range(n))
    return A


def _sweep_edges(src, order) -> np.ndarray:
    """Reference pattern of one systematic sweep: the Boolean product of the heat-bath patterns."""
    H = [_single_site(src, i) for i in order]
    S = np.eye(src.space.size, dtype=bool)
    for h in H:
        S = (S.astype(int) @ h.astype(int)) > 0
    return S


def _single_site(src, i: int) -> np.ndarray:
    space = src.space
    states = space.all_states()
    live = np.isfinite(src.log_conditionals(states, i))
    N = space.size
    A = np.zeros((N, N), dtype=bool)
    for x in range(N):
        for y in range(N):
            same = np.delete(states[x], i) == np.delete(states[y], i)
            A[x, y] = bool(same.all()) and live[x, states[y, i]]
    return A


def _classes(A: np.ndarray) -> tuple[set[frozenset], set[frozenset]]:
    """(communicating classes, closed classes) of a Boolean adjacency matrix, by transitive closure."""
    N = A.shape[0]
    R = A | np.eye(N, dtype=bool)
    while True:
        R2 = R | ((R.astype(np.int64) @ R.astype(np.int64)) > 0)
        if (R2 == R).all():
            break
        R = R2
    classes = {frozenset(np.flatnonzero(R[x] & R[:, x]).tolist()) for x in range(N)}
    closed = {c for c in classes if not A[sorted(c)][:, [y for y in range(N) if y not in c]].any()}
    return classes, closed


def _chain_classes(chain) -> tuple[set[frozenset], set[frozenset]]:
    st_ = chain.structure
    classes = {frozenset(c.tolist()) for c in st_.classes}
    closed = {frozenset(c.tolist()) for c in st_.closed_classes}
    return classes, closed


@st.composite
def _tables(draw):
    """A partial score table on q^n states whose full conditionals have entries -inf (exact zeros) or
    finite scores up to ``spread`` nats apart (800 and more underflow exp)."""
    q, n = draw(st.integers(2, 3)), draw(st.integers(2, 3))
    spread = draw(st.sampled_from([1.0, 50.0, 800.0, 1000.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    zeros = draw(st.sampled_from([0.0, 0.2, 0.4]))
    rng = np.random.default_rng(seed)
    shape = (n, (q + 1) ** (n - 1), q)
    table = -spread * (rng.random(shape) < 0.5) - rng.random(shape)  # gaps of about `spread` nats
    table[rng.random(table.shape) < zeros] = -np.inf
    dead = ~np.isfinite(table).any(axis=-1)
    table[dead, 0] = 0.0
    return PartialScoreTable(StateSpace(q, n), table)


@settings(max_examples=40, deadline=None)
@given(_tables(), st.sampled_from(["glauber", "parallel", "systematic"]))
def test_classes_come_from_the_exact_sign_pattern(src, kernel):
    """(d) the communicating and closed classes of a chain built from a source are those of the exact
    sign pattern (log-conditionals > -inf), also when the conditionals are 800+ nats apart."""
    order = list(range(src.space.length))[::-1]
    ref = _sweep_edges(src, order) if kernel == "systematic" else _exact_edges(src, kernel)
    chain = Chain.from_source(src, kernel, order=order if kernel == "systematic" else None)
    assert _chain_classes(chain) == _classes(ref)
    if chain.is_irreducible:
        R = chain.structure.graph.toarray() > 0
        assert chain.period == _period_reference(R)


def _period_reference(A: np.ndarray) -> int:
    """gcd of the lengths t <= 2N of the closed walks at state 0 (the period of an irreducible graph)."""
    N = A.shape[0]
    M = np.eye(N, dtype=np.int64)
    d = 0
    for t in range(1, 2 * N + 1):
        M = ((M @ A.astype(np.int64)) > 0).astype(np.int64)
        if M[0, 0]:
            d = math.gcd(d, t)
    return d


def _mh_edges(src) -> np.ndarray:
    """Reference pattern of MH with E_logit = -sum_i s_i(x_i | x_{-i}) / T: x -> x^{i<-a} (a != x_i) iff
    p_i(a | x_{-i}) > 0 and the acceptance is positive, i.e. E(y) < inf and not both energies are inf
    (min(log p_i(a), E(x) - E(y) + log p_i(x_i)) > -inf); the diagonal: P's (holding mass)."""
    space = src.space
    states = space.all_states()
    N, n = space.size, space.length
    L = np.stack([src.log_conditionals(states, i) for i in range(n)], axis=1)
    S = np.stack([src.scores(states, i) for i in range(n)], axis=1) / src.temperature
    E = -np.array([sum(S[x, i, states[x, i]] for i in range(n)) for x in range(N)])
    A = np.zeros((N, N), dtype=bool)
    for x in range(N):
        for y in range(N):
            diff = np.flatnonzero(states[x] != states[y])
            if diff.size == 1:
                i = diff[0]
                with np.errstate(invalid="ignore"):  # inf - inf: an undefined ratio is a rejection
                    back = E[x] - E[y] + L[x, i, states[x, i]]
                A[x, y] = np.isfinite(L[x, i, states[y, i]]) and back > -np.inf  # NaN > -inf is False
    return A


@settings(max_examples=20, deadline=None)
@given(_tables())
def test_mh_classes_come_from_the_exact_sign_pattern(src):
    chain = Chain.from_source(src, "mh-logit")
    ref = _mh_edges(src) | (chain.to_dense() > 0)
    assert _chain_classes(chain) == _classes(ref)


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 3), st.integers(2, 3), st.sampled_from([1.0, 900.0, 2000.0]), st.integers(0, 2**31 - 1))
def test_block_dynamics_of_a_joint_1000_nats_apart_is_one_class(q, n, spread, seed):
    """k-Gibbs on a positive joint whose log-weights are up to 2000 nats apart: one aperiodic class."""
    rng = np.random.default_rng(seed)
    space = StateSpace(q, n)
    src = LogWeightTable(space, -spread * (rng.random(space.size) < 0.5) - rng.random(space.size))
    chain = Chain.from_source(src, "k-gibbs", k=1)
    assert chain.is_irreducible and chain.period == 1


def _underflow_scores() -> PartialScoreTable:
    """q = 2, n = 2: symbol 1 has score -800 in every context, so every move to a 1 has probability
    exp(-800) (0 in float64) but the chain is irreducible."""
    table = np.zeros((2, 3, 2))
    table[..., 1] = -800.0
    return PartialScoreTable(StateSpace(2, 2), table)


def test_scores_800_apart_are_one_class_not_transient_states():
    """Scores 800 nats apart: the float matrix makes (0, 0) absorbing and the other states transient
    with pi = 0; the exact chain is irreducible. Its conditionals do not depend on the context, so
    Glauber's law is the product law, log pi(x) = -800 (number of 1s) - n log(1 + e^-800): computed in
    log space; the gaps, which need P, are not resolved."""
    chain = Chain.from_source(_underflow_scores())
    assert chain.is_irreducible and not chain.structure.transient.any()
    st_ = chain.log_stationary
    ref = -800.0 * chain.source.space.all_states().sum(axis=1) - 2 * math.log1p(math.exp(-800.0))
    assert np.abs(st_.value - ref).max() <= math.log1p(chain.stationary.rel_error)
    with pytest.raises(UnderflowError, match="underflow"):
        chain.spectral_gap
    summary = chain.summary(progress=False)
    assert summary["irreducible"] and summary["closed_classes"] == 1 and "underflow" in summary["reason"]
    assert summary["stationary"]["rel_error"] < 1e-6


@pytest.mark.parametrize("kernel", ["glauber", "mh-logit", "mh-pll"])
def test_ising_beta_200_law_in_log_space(kernel):
    """The law of Ising cycle:4 at beta = 200 (masses exp(-1600) apart) from the log-space elimination:
    Glauber's is the Gibbs law, MH's the target exp(-E)/Z (module doc of scan_and_mh)."""
    src = _ising(4, 200.0)
    chain = Chain.from_source(src, kernel)
    target = src.log_joint() if kernel == "glauber" else -energy(src, kernel[3:])
    target = target - np.logaddexp.reduce(target)
    st_ = chain.stationary
    assert st_.rel_error < 1e-6 and "log space" in st_.method
    assert np.abs(st_.log_value - target).max() <= math.log1p(st_.rel_error)


def test_ising_beta_200_is_irreducible():
    """Ising cycle:4 at beta = 200: moves of probability exp(-800) underflow; the chain is still one
    aperiodic class (it was reported as 2 closed classes)."""
    chain = Chain.from_source(_ising(4, 200.0))
    assert chain.is_irreducible and len(chain.closed_classes) == 1 and chain.period == 1
    with pytest.raises(UnderflowError):
        chain.spectral_gap


def test_exact_cli_ising_beta_200(capsys):
    assert main(["exact", "--model", "ising", "--graph", "cycle:4", "--beta", "200", "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["irreducible"] and report["closed_classes"] == 1 and report["period"] == 1
    assert "underflow" in report["reason"] and "closed classes, so no unique" not in report["reason"]


def test_support_given_to_a_chain():
    """A Chain given a support takes its structure from it (P's own zeros may be underflow)."""
    P = np.array([[1.0, 0.0], [0.5, 0.5]])  # P(0, 1) = exp(-800) in exact arithmetic
    chain = Chain(P, support=np.ones((2, 2), dtype=bool))
    assert chain.is_irreducible and not Chain(P).is_irreducible
    with pytest.raises(ValueError, match="shape"):
        Chain(P, support=np.ones((3, 3), dtype=bool))


@pytest.mark.parametrize("beta", [178.0, 180.0, 183.0, 185.0])
def test_subnormal_entries_widen_the_gap_claim(beta):
    """Ising cycle:4 with flip probabilities between 1e-310 and 1e-322 (subnormal: a few significant
    bits): the gap (1 - tanh(2 beta)) / 4 = 2 / ((e^{4 beta} + 1) 4), in mpmath, lies in the stated
    enclosure and within the stated relative error (it was claimed to 5e-13 and was off by 3e-11 at
    beta = 180)."""
    gap = Chain.from_source(_ising(4, beta)).spectral_gap
    with mp.workdps(60):
        exact = 2 / ((mp.exp(4 * mp.mpf(beta)) + 1) * 4)
        assert gap.lower <= exact <= gap.upper
        if gap.value is not None:
            assert abs(mp.mpf(gap.value) / exact - 1) <= gap.rel_error


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 12), st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.5]))
def test_log_space_elimination_agrees_with_gth(N, seed, sparsity):
    """log_space_stationary on log P against GTH on P (an independent code path) for random chains
    with entries down to e^-30 (a ring keeps them irreducible), within both stated bounds."""
    rng = np.random.default_rng(seed)
    W = np.exp(-30.0 * rng.random((N, N))) * (rng.random((N, N)) >= sparsity)
    W[np.arange(N), (np.arange(N) + 1) % N] += 1.0
    np.fill_diagonal(W, 0.0)
    P = W / (2 * W.sum(axis=1, keepdims=True))
    np.fill_diagonal(P, 0.0)
    P[np.arange(N), np.arange(N)] = 1 - P.sum(axis=1)
    with np.errstate(divide="ignore"):
        L = np.log(P)
    ours, gth = log_space_stationary(L), Chain(P).stationary
    assert np.abs(ours.value / gth.value - 1).max() <= ours.rel_error + gth.rel_error
