"""MatrixOperator: an assembled dense or CSR P presented matrix-free (theory/linalg/matrix_operator.py).

Its products against P @ u and P.T @ u, its symmetric mode against D^1/2 P D^-1/2 built with the dense
law, its flows against pi(x) P(x, y), and Chain(MatrixOperator(P)) against the dense chain on random
reversible and non-reversible chains; the metastable two-well chain (gaps 1e-12 .. 1e-300) answered
honestly (an enclosure of the true gap, or a refusal by name); bad input a one-line error."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from chain_representations import assert_encloses, chain_in
from helpers import two_state
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.stationary import log_potential
from mlmix.theory.kernels.representation import is_operator
from mlmix.theory.linalg.matrix_operator import MatrixOperator, kolmogorov_reversible
from mlmix.theory.linalg.operator import TransitionOperator
from mlmix.theory.reference import birth_death


def random_chain(seed: int, n: int, reversible: bool, sparse: bool) -> np.ndarray:
    """A random irreducible chain on n states: reversible (symmetric weights over a random law) or not;
    ``sparse``: a ring plus a few random edges (the ring keeps it irreducible)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((n, n), dtype=bool)
    ring = np.arange(n)
    mask[ring, (ring + 1) % n] = mask[(ring + 1) % n, ring] = True
    mask |= rng.random((n, n)) < (0.3 if sparse else 1.0)
    np.fill_diagonal(mask, False)
    if reversible:
        W = rng.random((n, n)) * mask
        W = np.triu(W) + np.triu(W).T  # symmetric conductances: P = W / row sums is reversible
        W = np.where(W.T > 0, W, 0)
    else:
        W = rng.random((n, n)) * mask
    P = 0.8 * W / W.sum(axis=1, keepdims=True)
    np.fill_diagonal(P, 1 - P.sum(axis=1))
    return P


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 9), st.booleans(), st.booleans(), st.booleans())
def test_products_flows_and_facts_match_the_matrix(seed, n, reversible, sparse, csr):
    P = random_chain(seed, n, reversible, sparse)
    op = MatrixOperator(sp.csr_array(P) if csr else P)
    assert isinstance(op, TransitionOperator) and is_operator(op) and op.matrix is not None
    assert op.reversible == (log_potential(P) is not None)  # the same criterion as the dense route
    assert op.reversible or not reversible  # (every 2-state chain is reversible)
    reversible = op.reversible
    rng = np.random.default_rng(seed + 1)
    u = rng.standard_normal(n)
    np.testing.assert_allclose(op.matvec(u), P @ u, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(op.rmatvec(u), P.T @ u, rtol=1e-13, atol=1e-14)
    ut = torch.as_tensor(u)
    out = torch.empty(n, dtype=torch.float64)
    assert op.apply(ut, "functions", out) is out
    np.testing.assert_allclose(out.numpy(), P @ u, rtol=1e-13, atol=1e-14)
    pi = chain_in("dense", P).stationary.value
    if reversible:  # sqrt(pi(x) / pi(y)) P(x, y) without pi
        r = np.sqrt(pi)
        np.testing.assert_allclose(op.symmetric_matvec(u), r * (P @ (u / r)), rtol=1e-12, atol=1e-13)
    else:
        with pytest.raises(ValueError, match="reversible"):
            op.symmetric_matvec(u)
    # flows: E(f, f) and Q(S, S^c) from the pairs equal the dense sums
    f = rng.standard_normal(n)
    D = pi[:, None] * P * (f[:, None] - f[None, :]) ** 2
    pt = torch.as_tensor(pi)
    assert op.dirichlet_form(torch.as_tensor(f), pt) == pytest.approx(D.sum() / 2, rel=1e-12)
    S = rng.random(n) < 0.5
    assert op.escape_flow(torch.as_tensor(S), pt) == pytest.approx((pi[S, None] * P[S][:, ~S]).sum(), rel=1e-12,
                                                                   abs=1e-300)
    assert op.trace() == pytest.approx(np.trace(P), rel=1e-13)
    assert op.terms >= max(np.count_nonzero(P - np.diag(np.diag(P)), axis=1)) + 1
    if reversible:  # Gershgorin: no eigenvalue below lambda_min
        assert op.lambda_min <= np.linalg.eigvals(P).real.min() + 1e-12


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.integers(3, 8), st.booleans())
def test_the_chain_of_a_matrix_operator_agrees_with_the_dense_chain(seed, n, reversible):
    """Each answer of Chain(MatrixOperator(P)) is resolved within its stated accuracy of the dense value,
    or an interval holding it."""
    P = random_chain(seed, n, reversible, sparse=False)
    dense, op = chain_in("dense", P), Chain.from_operator(MatrixOperator(P))
    assert op.representation == "operator" and op.is_reversible == dense.is_reversible
    st_op, st_d = op.stationary, dense.stationary
    assert st_op.rel_error is not None and np.abs(st_op.value / st_d.value - 1).max() <= st_op.rel_error + 1e-13
    for name in ("additive_gap", "absolute_spectral_gap", "multiplicative_gap", "kemeny_constant"):
        exact = getattr(dense, name)
        assert exact.resolved
        assert_encloses(getattr(op, name), exact.value, slack=1e-10 * exact.value)
    phi = dense.conductance  # exact by enumeration at this size
    assert_encloses(op.conductance, phi.value, slack=1e-12)
    f = np.arange(n, dtype=float)
    assert_encloses(op.asymptotic_variance(f), float(dense.asymptotic_variance(f)), slack=1e-9)
    np.testing.assert_allclose(op.hitting_time([0]).value, dense.hitting_time([0]).value, rtol=1e-9)
    assert op.dirichlet_form(f) == pytest.approx(dense.dirichlet_form(f), rel=1e-9)


@pytest.mark.parametrize("gap", [1e-12, 1e-20, 1e-100, 1e-300])
def test_the_metastable_two_state_chain_is_answered_honestly(gap):
    """[[1 - a, a], [a, 1 - a]], gap 2a from 1e-12 to 1e-300 (1 - a rounds to 1 below 1e-16): the operator's
    gap is an enclosure of 2a (Lanczos cannot resolve it), never a number off by more than it says."""
    a = gap / 2
    ch = Chain(MatrixOperator(two_state(a, a)))
    np.testing.assert_allclose(ch.stationary.value, [0.5, 0.5], rtol=1e-15)
    for r in (ch.spectral_gap, ch.additive_gap):
        assert_encloses(r, gap, slack=1e-15 * gap)
    assert_encloses(ch.relaxation_time, 1 / gap, slack=1e-15 / gap)
    assert_encloses(ch.conductance, a, slack=1e-15 * a)


@pytest.mark.parametrize("depth", [30.0, 80.0, 200.0])
def test_the_metastable_double_well_is_answered_honestly(depth):
    """A tilted double well with gaps 6e-14 .. 1e-87: the Krylov law of the operator route is not
    certified (its error is not bounded: rel_error None), and the gap, the conductance and the set
    conductance of the well are enclosures holding the dense values, not roundoff reported as numbers."""
    P, _ = birth_death(depth=depth)
    dense, ch = chain_in("dense", P), Chain(MatrixOperator(P))
    gap = dense.spectral_gap
    assert gap.resolved and gap.value < 1e-13
    st_op = ch.stationary
    if st_op.rel_error is not None:  # certified: the bound holds
        assert np.abs(np.expm1(st_op.log_value - dense.stationary.log_value)).max() <= st_op.rel_error
    assert_encloses(ch.spectral_gap, gap.value, slack=1e-13 * gap.value)
    exact_phi = dense.conductance
    phi = ch.conductance
    assert not phi.resolved and phi.lower <= exact_phi.lower and exact_phi.upper <= phi.upper
    S = exact_phi.details["set"]
    assert_encloses(ch.set_conductance(S), float(dense.set_conductance(S)), slack=1e-13)


def test_an_uncertified_law_bounds_nothing():
    """pi = (1, 1e-250) is out of a Krylov solve's reach: the computed law (1/2, 1/2) passes the residual
    test in floating point (pi P - pi rounds to 0), so the first-order bound must count that rounding;
    Phi({1}) = 1e-50 is not bounded by a sweep set measured with that law."""
    ch = Chain(MatrixOperator(two_state(1e-300, 1e-50)))
    assert ch.stationary.rel_error is None
    assert_encloses(ch.conductance, 1e-50)
    r = ch.set_conductance([1])
    assert not r.resolved and "not bounded" in r.reason and r.lower <= 1e-50 <= r.upper


def test_structure_from_the_matrix():
    """Irreducible and aperiodic only from stored holding probabilities (1 - a row's off-diagonal sum may
    round to a spurious 1e-16); a periodic chain's absolute gap is exactly 0; transient states and several
    closed classes are refused by name."""
    third = 1 / 3
    P = np.array([[0.0, third, 1 - third], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])  # bipartite: period 2
    op = MatrixOperator(P)
    assert not op.conditionals_positive()
    ch = Chain(op)
    assert ch.is_irreducible and ch.period == 2
    gap = ch.absolute_spectral_gap
    assert gap.value == 0.0 and "period 2" in gap.method
    assert MatrixOperator(two_state(0.2, 0.3)).conditionals_positive()
    with pytest.raises(ValueError, match="1 transient state"):
        Chain(MatrixOperator(np.array([[1.0, 0.0], [0.5, 0.5]]))).stationary
    with pytest.raises(ValueError, match="2 closed classes"):
        Chain(MatrixOperator(np.eye(2))).stationary


def test_reversibility_given_or_decided():
    P = two_state(0.2, 0.3)
    assert MatrixOperator(P).reversible and not MatrixOperator(P, reversible=False).reversible
    cyc = np.array([[0.5, 0.4, 0.1], [0.1, 0.5, 0.4], [0.4, 0.1, 0.5]])  # a biased rotation
    assert not MatrixOperator(cyc).reversible
    assert not kolmogorov_reversible(sp.csr_array(np.array([[0, 0.5, 0], [0, 0, 0.5], [0.5, 0, 0]])))
    # two components, each reversible on its own: the criterion holds per component
    two = sp.csr_array(np.kron(np.eye(2), np.array([[0.0, 0.2], [0.3, 0.0]])))
    assert kolmogorov_reversible(two)


@pytest.mark.parametrize("bad, exc, msg", [
    (np.ones((2, 3)) / 3, ValueError, "square"),
    (np.array([[0.5, 0.6], [0.5, 0.5]]), ValueError, "sum to 1"),
    (np.array([[np.nan, 1.0], [0.5, 0.5]]), ValueError, "NaN"),
    (np.array([[1.5, -0.5], [0.5, 0.5]]), ValueError, "negative"),
    (np.array([[1.0 + 0j, 0], [0, 1]]), TypeError, "dtype"),
    ("P", TypeError, "numpy array"),
])
def test_bad_matrices_are_one_line_errors(bad, exc, msg):
    with pytest.raises(exc, match=msg) as err:
        MatrixOperator(bad)
    assert "\n" not in str(err.value)


def test_bad_options_and_modes():
    with pytest.raises(TypeError, match="reversible"):
        MatrixOperator(two_state(0.2, 0.3), reversible="yes")
    op = MatrixOperator(two_state(0.2, 0.3))
    with pytest.raises(ValueError, match="mode"):
        op.apply(torch.ones(2, dtype=torch.float64), "adjoint")
    with pytest.raises(ValueError, match="vector over the 2 local states"):
        op.matvec(np.ones(3))
    with pytest.raises(TypeError, match="options of a matrix"):
        Chain(op, dense_limit=4)
    with pytest.raises(TypeError, match="TransitionOperator"):
        Chain.from_operator(two_state(0.2, 0.3))


def test_a_reversible_chain_that_is_not_lazy_is_bounded_through_gershgorin():
    """[[1/2, 1/2], [3/4, 1/4]]: lambda_2 = -1/4, so the absolute gap 3/4 is not the gap 5/4; matrix-free
    it is the interval [min(gap, 1 + lambda_min bound), gap] with lambda_min >= -1/2 (Gershgorin), which
    still bounds t_mix above (t_mix = 1) and the Kemeny constant (1 / (a + b) = 0.8)."""
    ch = Chain(MatrixOperator(two_state(0.5, 0.75)))
    assert ch.op.lambda_min == -0.5
    gap = ch.absolute_spectral_gap
    assert not gap.resolved and gap.lower == pytest.approx(0.5) and "Gershgorin" in gap.method
    assert_encloses(gap, 0.75)
    t = ch.mixing_time()
    assert t.upper is not None and t.upper < 10
    assert_encloses(t, 1)
    assert_encloses(ch.kemeny_constant, 0.8, slack=1e-12)
