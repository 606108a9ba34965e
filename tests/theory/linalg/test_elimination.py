"""``theory/linalg/elimination.py``: GTH state elimination and the solves and factors built on it, against
numpy.linalg.solve on well-conditioned chains, exact fractions on a 3x3 chain, and mpmath where an escape
probability of 1e-20 defeats 1 - W_jj; blocked and unblocked elimination agree; one-line errors."""

from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from mlmix.errors import MemoryLimitError
from mlmix.theory.linalg.elimination import eliminate
from mlmix.validation import memory_limit


def random_chain(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    P = rng.random((n, n)) ** 3  # uneven but positive: well conditioned
    return P / P.sum(axis=1, keepdims=True)


def generator(W: np.ndarray) -> np.ndarray:
    """I - W with the diagonal taken as the off-diagonal row sum (the escape), as the module reads W."""
    G = -np.array(W, dtype=np.float64)
    np.fill_diagonal(G, 0.0)
    np.fill_diagonal(G, -G.sum(axis=1))
    return G


def frac_solve(A: list[list[Fraction]], b: list[Fraction]) -> list[Fraction]:
    """Gauss-Jordan elimination over the rationals."""
    n = len(b)
    M = [list(row) + [rhs] for row, rhs in zip(A, b)]
    for c in range(n):
        p = next(r for r in range(c, n) if M[r][c] != 0)
        M[c], M[p] = M[p], M[c]
        M[c] = [v / M[c][c] for v in M[c]]
        for r in range(n):
            if r != c and M[r][c] != 0:
                M[r] = [a - M[r][c] * b_ for a, b_ in zip(M[r], M[c])]
    return [M[r][n] for r in range(n)]


# 3x3 chain with dyadic entries (exact in float64)
W3 = [[Fraction(1, 2), Fraction(3, 8), Fraction(1, 8)],
      [Fraction(1, 16), Fraction(3, 4), Fraction(3, 16)],
      [Fraction(5, 8), Fraction(1, 32), Fraction(11, 32)]]
W3F = np.array([[float(v) for v in row] for row in W3])


def test_stationary_law_of_a_3x3_chain_against_fractions():
    # pi (I - W) = 0 with pi_2 = 1, then normalised
    A = [[(1 if i == j else 0) - W3[j][i] for j in range(2)] for i in range(2)]
    x = frac_solve(A, [W3[2][0], W3[2][1]])
    exact = [x[0], x[1], Fraction(1)]
    exact = [v / sum(exact) for v in exact]
    pi = np.exp(eliminate(W3F).log_stationary())
    rel = max(abs((Fraction(float(p)) - e) / e) for p, e in zip(pi, exact))
    assert rel < 8 * 3**3 * 2.0**-53  # O'Cinneide's entrywise bound 8 N^3 u


def test_grounded_solves_of_a_3x3_chain_against_fractions():
    """Ground state 2 (never eliminated): (I - W)_EE g = b and its transpose on E = {0, 1}."""
    el = eliminate(W3F, last=2)
    assert el.order[0] == 2 and el.ground == 1
    A = [[(1 if i == j else 0) - W3[i][j] for j in range(2)] for i in range(2)]
    b = [Fraction(1), Fraction(3)]
    g = frac_solve(A, b)
    gt = frac_solve([[A[j][i] for j in range(2)] for i in range(2)], b)
    got, got_t = el.solve(np.array([1.0, 3.0, 7.0])), el.solve_transposed(np.array([1.0, 3.0, 7.0]))
    assert got[2] == 0 and got_t[2] == 0
    for approx, exact in ((got, g), (got_t, gt)):
        assert max(abs((Fraction(float(v)) - e) / e) for v, e in zip(approx[:2], exact)) < 1e-15


@pytest.mark.parametrize("n, seed", [(5, 0), (40, 1), (150, 2)])
def test_solves_against_numpy_on_well_conditioned_chains(n, seed):
    """150 states cross two panels of 64 pivots: the blocked trailing update is exercised."""
    W = random_chain(n, seed)
    G = generator(W)
    rng = np.random.default_rng(seed)
    ground = int(rng.integers(n))
    E = np.arange(n) != ground
    el = eliminate(W, last=ground)
    assert el.order[0] == ground
    b = rng.random(n)
    B = rng.random((n, 3))
    g, gt, gm = el.solve(b), el.solve_transposed(b), el.solve(B)
    np.testing.assert_allclose(g[E], np.linalg.solve(G[np.ix_(E, E)], b[E]), rtol=1e-11)
    np.testing.assert_allclose(gt[E], np.linalg.solve(G[np.ix_(E, E)].T, b[E]), rtol=1e-11)
    np.testing.assert_allclose(gm[E], np.linalg.solve(G[np.ix_(E, E)], B[E]), rtol=1e-11)
    assert g[ground] == gt[ground] == 0 and (gm[ground] == 0).all()
    # the stationary law: pi G = 0, against numpy's bordered solve
    M = G.T.copy()
    M[-1] = 1.0
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    np.testing.assert_allclose(np.exp(eliminate(W).log_stationary()), np.linalg.solve(M, rhs), rtol=1e-11)


def test_panel_sizes_agree():
    """The same elimination with panels of 1, 7 and 64 pivots: the same pivots and the same factors."""
    W = random_chain(50, 5)
    runs = [eliminate(W, panel=p) for p in (1, 7, 64)]
    for el in runs[1:]:
        np.testing.assert_array_equal(el.order, runs[0].order)
        np.testing.assert_allclose(el.F, runs[0].F, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(el.escape, runs[0].escape, rtol=1e-12)
    # a whole stochastic matrix: every position but the ground (0) has a positive escape, the ground none
    assert (runs[0].escape[1:] > 0).all() and runs[0].escape[0] == 0


def test_exit_columns_give_the_committor_and_exit_times():
    """States 0..4 of a 7-state chain, every one eliminated; the exit columns are the flows into states 5
    and 6: h[x, k] = P(the chain from x enters 5 + k first) (absorption probabilities, a committor each),
    against numpy; the same factors give the mean exit times."""
    W = random_chain(7, 9)
    inside = np.arange(5)
    Q = W[np.ix_(inside, inside)]
    exits = W[np.ix_(inside, [5, 6])]
    el = eliminate(Q, exits=exits, eliminate_mask=np.ones(5, dtype=bool))
    assert el.ground == 0
    h = el.exit_solution()
    Ginside = np.eye(5) - Q  # here the diagonal of Q is real: 1 - Q_jj = off-diagonal row sum + exits
    np.testing.assert_allclose(h, np.linalg.solve(Ginside, exits), rtol=1e-12)
    np.testing.assert_allclose(h.sum(axis=1), 1.0, rtol=1e-13)  # absorbed somewhere, surely
    # exit times: (I - Q) t = 1 by the same factorization
    np.testing.assert_allclose(el.solve(np.ones(5)), np.linalg.solve(Ginside, np.ones(5)), rtol=1e-12)


def test_symmetric_factor_of_a_reversible_chain():
    """For a reversible P (random symmetric conductances), X diag(e) X^T = D^1/2 (I - P) D^-1/2 in position
    coordinates, X unit upper triangular with |X| <= 1."""
    rng = np.random.default_rng(3)
    C = rng.random((12, 12))
    C = C + C.T
    P = C / C.sum(axis=1, keepdims=True)
    pi = C.sum(axis=1) / C.sum()
    el = eliminate(P)
    X, e = el.symmetric_factor()
    L = np.sqrt(pi)[:, None] * (np.eye(12) - P) / np.sqrt(pi)[None, :]
    np.testing.assert_allclose(X @ np.diag(e) @ X.T, L[np.ix_(el.order, el.order)], rtol=1e-12, atol=1e-14)
    assert np.allclose(np.tril(X, -1), 0) and (np.diag(X) == 1).all() and np.abs(X).max() <= 1.0
    np.testing.assert_allclose(np.exp(el.log_stationary()), pi, rtol=1e-13)


def escape_chain(eps: float) -> np.ndarray:
    """0 -> 1 with probability eps (float64 stores 1 - eps as 1), 1 -> 0 or 2 with 1/2 each, 2 -> 1 w.p. 1/4."""
    return np.array([[1 - eps, eps, 0.0], [0.5, 0.0, 0.5], [0.0, 0.25, 0.75]])


def test_subtraction_free_accuracy_with_an_escape_of_1e_20():
    """Escape 1e-20 from state 0: 1 - W_00 is 0 in float64 (numpy's solve sees a singular matrix), GTH uses
    the off-diagonal sum. Mean time to reach 2 from 0, 1 and the stationary law, against mpmath."""
    eps = 1e-20
    W = escape_chain(eps)
    assert 1.0 - W[0, 0] == 0.0  # the subtraction a naive solver would make
    el = eliminate(W, last=2)
    t = el.solve(np.ones(3))
    with mp.workdps(60):
        e = mp.mpf(eps)
        A = mp.matrix([[e, -e], [-mp.mpf(1) / 2, 1]])
        ref = mp.lu_solve(A, mp.matrix([1, 1]))
        # stationary law of the mpmath chain: pi_0 eps = pi_1 / 2, pi_1 / 2 = pi_2 / 4
        raw = [1 / (2 * e), mp.mpf(1), mp.mpf(2)]
        pi_ref = [v / mp.fsum(raw) for v in raw]
    for x in range(2):
        assert abs(float(t[x] / ref[x]) - 1) < 1e-14
    assert t[0] == pytest.approx(2e20, rel=1e-14)  # closed form 2 / eps + 4
    logpi = eliminate(W).log_stationary()
    for x in range(3):
        assert abs(float(mp.mpf(float(np.exp(logpi[x]))) / pi_ref[x]) - 1) < 1e-14
    assert np.exp(logpi[2]) == pytest.approx(4e-20, rel=1e-14)


@pytest.mark.parametrize("eps", [1e-20, 1e-200, 1e-320])
def test_tiny_escapes_keep_their_logarithms(eps):
    """Down to a subnormal escape (1e-320), every log pi (the heavy state's is about -6 eps) stays exact
    to a few ulps; the reference needs more digits than the exponent of eps."""
    logpi = eliminate(escape_chain(eps)).log_stationary()
    with mp.workdps(int(-np.log10(eps)) + 40):
        e = mp.mpf(eps)
        raw = [1 / (2 * e), mp.mpf(1), mp.mpf(2)]
        ref = [float(mp.log(v / mp.fsum(raw))) for v in raw]
    np.testing.assert_allclose(logpi, ref, rtol=1e-13, atol=0)


def test_errors_are_one_line():
    W = random_chain(4, 0)
    cases = [
        (lambda: eliminate(W, eliminate_mask=[True, True, False, True], last=0), "not both"),
        (lambda: eliminate(np.eye(3)), "cannot leave"),
        (lambda: eliminate(W, eliminate_mask=[True, True, False, False]).log_stationary(), "full elimination"),
        (lambda: eliminate(W, eliminate_mask=[True, True, False, False]).symmetric_factor(), "full elimination"),
        (lambda: eliminate(W).exit_solution(), "no exit columns"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words) as info:
            call()
        assert "\n" not in str(info.value)
    with memory_limit("1KiB"), pytest.raises(MemoryLimitError, match="state elimination of 4 states"):
        eliminate(W)


def test_partial_elimination_keeps_the_ground_states_at_the_bottom():
    W = random_chain(6, 4)
    mask = np.array([True, False, True, True, False, True])
    el = eliminate(W, eliminate_mask=mask)
    assert el.ground == 2 and el.pivots == 4 and set(el.order[:2].tolist()) == {1, 4}
    assert (el.escape[:2] == 0).all() and (el.escape[2:] > 0).all()
    G = generator(W)
    b = np.arange(1.0, 7.0)
    np.testing.assert_allclose(el.solve(b)[mask], np.linalg.solve(G[np.ix_(mask, mask)], b[mask]), rtol=1e-12)
