"""``theory/linalg/krylov.py``: thick-restart Lanczos against numpy.linalg.eigh, GMRES and conjugate
gradients against numpy.linalg.solve, on small dense operators given as torch matvecs; the convergence
flags (met, invariant subspace, out of matvecs, indefinite CG) and the residuals they report."""

import numpy as np
import pytest
import torch

from mlmix.theory.linalg.krylov import conjugate_gradient, gmres, inner, lanczos, norm
from mlmix.theory.linalg.sharding import LOCAL


def operator(A: np.ndarray):
    """apply(v, out) = A v written into out, as the solvers expect; counts its calls."""
    T = torch.as_tensor(A, dtype=torch.float64)
    calls = []

    def apply(v: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return torch.mv(T, v, out=out)

    apply.calls = calls
    return apply


def symmetric(n: int, seed: int, spectrum: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.sort(rng.standard_normal(n)) if spectrum is None else spectrum
    return (Q * lam) @ Q.T


def start(n: int, seed: int = 0) -> torch.Tensor:
    return torch.as_tensor(np.random.default_rng(seed + 100).standard_normal(n), dtype=torch.float64)


def test_inner_and_norm_on_one_process():
    V = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    w = torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64)
    assert inner(LOCAL, V, w).tolist() == [3.0, 9.0]
    assert norm(LOCAL, w) == pytest.approx(np.sqrt(6.0), rel=1e-16)


@pytest.mark.parametrize("n, basis, seed", [(40, 16, 0), (120, 8, 1), (150, 24, 2)])
def test_lanczos_eigenpair_against_eigh(n, basis, seed):
    """Separated top eigenvalue (gap 0.5 over a spectrum of width ~6): restarts with a basis of 8 too."""
    lam = np.sort(np.r_[np.random.default_rng(seed).uniform(-3, 2.5, n - 1), 3.0])
    A = symmetric(n, seed, lam)
    apply = operator(A)
    tol = 1e-10
    pair = lanczos(apply, start(n, seed), tol=lambda theta: tol * abs(theta), basis_size=basis)
    w, U = np.linalg.eigh(A)
    assert pair.converged and pair.matvecs == len(apply.calls) and pair.matvecs > basis  # restarted
    assert pair.value == pytest.approx(w[-1], rel=1e-12, abs=1e-12)
    y = pair.vector.numpy()
    assert np.linalg.norm(y) == pytest.approx(1.0, rel=1e-13)
    assert abs(abs(y @ U[:, -1]) - 1) < 1e-9
    true_residual = np.linalg.norm(A @ y - pair.value * y)
    assert true_residual <= 10 * tol * abs(pair.value) + 1e-13  # the estimate is honest
    assert pair.residual_estimate <= tol * abs(pair.value)
    assert pair.next_value <= w[-2] + 1e-12  # Cauchy interlacing: a Ritz value from below


def test_lanczos_stops_exactly_on_an_invariant_subspace():
    """A start vector in the span of three eigenvectors: the basis closes after three steps, the Ritz
    values are exact and the flag says converged even with a tolerance of 0."""
    lam = np.linspace(-1.0, 2.0, 30)
    A = symmetric(30, 4, lam)
    _, U = np.linalg.eigh(A)
    v0 = torch.as_tensor(U[:, [3, 10, 29]] @ np.array([1.0, 2.0, 0.5]))
    pair = lanczos(operator(A), v0, tol=lambda theta: 0.0, basis_size=10)
    assert pair.converged and pair.matvecs == 3 and pair.residual_estimate == 0.0
    assert pair.value == pytest.approx(2.0, rel=1e-13) and pair.next_value == pytest.approx(lam[10], rel=1e-12)


def test_lanczos_reports_failure_when_out_of_matvecs():
    lam = np.r_[np.linspace(0.0, 1.0, 199), 1.0 + 1e-6]  # a top gap of 1e-6: far from converged in 24 steps
    A = symmetric(200, 5, lam)
    seen = []
    pair = lanczos(operator(A), start(200), tol=lambda theta: 1e-14, basis_size=8, max_matvecs=24,
                           progress=lambda k, r, t: seen.append((k, r, t)))
    assert not pair.converged and pair.matvecs >= 24
    assert seen and seen[-1][0] == pair.matvecs and seen[-1][2] == 1e-14
    assert pair.value <= 1.0 + 1e-6 + 1e-12  # still a Ritz value: below the top eigenvalue


def test_lanczos_refuses_a_tiny_basis_and_a_degenerate_start():
    """A zero or NaN start vector is a one-line ValueError (it used to surface as LAPACK's "Eigenvalues did
    not converge" from the NaN tridiagonal matrix)."""
    with pytest.raises(ValueError, match="basis_size must be >= 4") as info:
        lanczos(operator(np.eye(5)), start(5), tol=lambda t: 1e-8, basis_size=3)
    assert "\n" not in str(info.value)
    for v0 in (torch.zeros(5, dtype=torch.float64), torch.full((5,), np.nan, dtype=torch.float64)):
        with pytest.raises(ValueError, match="v0 must be finite and non-zero") as info:
            lanczos(operator(np.eye(5)), v0, tol=lambda t: 1e-8)
        assert "\n" not in str(info.value)


def non_symmetric(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.eye(n) + 0.4 * rng.standard_normal((n, n)) / np.sqrt(n)


@pytest.mark.parametrize("n, restart", [(10, 30), (80, 30), (80, 5)])
def test_gmres_against_numpy_solve(n, restart):
    A = non_symmetric(n, n + restart)
    b = start(n, 1)
    apply = operator(A)
    sol = gmres(apply, b, restart=restart, rtol=1e-12)
    assert sol.converged and sol.matvecs == len(apply.calls)
    exact = np.linalg.solve(A, b.numpy())
    np.testing.assert_allclose(sol.x.numpy(), exact, rtol=0, atol=1e-10 * np.abs(exact).max())
    true = np.linalg.norm(b.numpy() - A @ sol.x.numpy()) / np.linalg.norm(b.numpy())
    assert sol.relative_residual <= 1e-12 and true == pytest.approx(sol.relative_residual, rel=1e-3, abs=1e-15)


def test_gmres_from_a_start_vector_and_with_a_zero_right_hand_side():
    A = non_symmetric(30, 7)
    b = start(30, 2)
    exact = np.linalg.solve(A, b.numpy())
    x0 = torch.as_tensor(exact + 1e-3)
    sol = gmres(operator(A), b, x0=x0, rtol=1e-12)
    assert sol.converged and np.allclose(sol.x.numpy(), exact, rtol=0, atol=1e-10)
    assert x0.numpy() == pytest.approx(exact + 1e-3)  # the caller's start vector is not overwritten
    zero = gmres(operator(A), torch.zeros(30, dtype=torch.float64))
    assert zero.converged and zero.matvecs == 0 and not zero.x.any()


def test_gmres_out_of_matvecs_says_so_with_the_true_residual():
    """A nearly singular non-normal system (a Jordan-like shift) cannot be solved in 12 matvecs."""
    n = 60
    A = np.eye(n) + np.diag(np.full(n - 1, 1.0), 1)  # I + shift: ||A^-1|| grows like 2^n
    b = start(n, 3)
    sol = gmres(operator(A), b, restart=5, rtol=1e-12, max_matvecs=12)
    assert not sol.converged and sol.matvecs >= 12
    true = np.linalg.norm(b.numpy() - A @ sol.x.numpy()) / np.linalg.norm(b.numpy())
    assert sol.relative_residual == pytest.approx(true, rel=1e-10) and true > 1e-12


@pytest.mark.parametrize("n, cond", [(20, 10.0), (80, 1e4)])
def test_conjugate_gradient_against_numpy_solve(n, cond):
    A = symmetric(n, n, np.geomspace(1.0, cond, n))
    b = start(n, 4)
    seen = []
    sol = conjugate_gradient(operator(A), b, rtol=1e-12, progress=lambda k, r, t: seen.append(r))
    assert sol.converged and sol.relative_residual <= 1e-12
    exact = np.linalg.solve(A, b.numpy())
    np.testing.assert_allclose(sol.x.numpy(), exact, rtol=0, atol=2e-12 * cond * np.abs(exact).max())
    true = np.linalg.norm(b.numpy() - A @ sol.x.numpy()) / np.linalg.norm(b.numpy())
    # the residual itself is computed to about u ||A|| ||x|| / ||b|| (numpy's and torch's sums differ there)
    floor = 64 * np.finfo(float).eps * np.linalg.norm(A, 2) * np.linalg.norm(exact) / np.linalg.norm(b.numpy())
    assert true == pytest.approx(sol.relative_residual, rel=1e-3, abs=floor)
    assert seen and seen[-1] <= 0.5e-12  # the recursive residual reached half the target


def test_conjugate_gradient_flags():
    """b = 0: x = 0 at once. An indefinite A with p^T A p = 0 stops with converged False and the true
    residual (here 1: x stays 0). Out of matvecs: converged False."""
    zero = conjugate_gradient(operator(np.eye(3)), torch.zeros(3, dtype=torch.float64))
    assert zero.converged and zero.matvecs == 0
    bad = conjugate_gradient(operator(np.diag([1.0, -1.0])), torch.ones(2, dtype=torch.float64))
    assert not bad.converged and bad.relative_residual == pytest.approx(1.0) and not bad.x.any()
    A = symmetric(100, 8, np.geomspace(1.0, 1e6, 100))
    short = conjugate_gradient(operator(A), start(100), rtol=1e-12, max_matvecs=5)
    true = np.linalg.norm(start(100).numpy() - A @ short.x.numpy()) / np.linalg.norm(start(100).numpy())
    assert not short.converged and short.relative_residual == pytest.approx(true, rel=1e-10) and true > 1e-3


def test_lanczos_on_a_metastable_spectrum():
    """Top eigenvalue 1 - 1e-13 (the deflated operator of a metastable chain: gap 1e-13), the rest in
    [-0.5, 0.9], on a diagonal operator so the eigenvalues are exact floats (Lanczos sees only matvecs):
    the Ritz value is right to a few ulps of 1 (a Ritz value's error is ~ r^2 / 0.1, plus the rounding of
    the k-step recurrence, O(k eps ||A||): 7.5 eps measured with numpy 2.4 and torch 2.13, 4 eps with
    earlier builds), so 1 - theta, the gap, is resolved to 16 float spacings near 1 over 1e-13 (a few
    1e-2 relative) and no better."""
    n = 60
    lam = np.r_[np.linspace(-0.5, 0.9, n - 1), 1 - 1e-13]
    pair = lanczos(operator(np.diag(lam)), start(n, 5), tol=lambda theta: max(1e-3 * (1 - theta), 1e-15))
    eps = np.finfo(float).eps
    assert pair.converged and abs(pair.value - lam[-1]) <= 16 * eps
    assert (1 - pair.value) == pytest.approx(1e-13, abs=16 * eps)
    assert abs(abs(float(pair.vector[-1])) - 1) < 1e-12


def test_gmres_on_a_metastable_grounded_system_reports_its_true_residual():
    """(I - P_RR)^T x = b for a two-well chain grounded in one well: escape 1e-13 from the other, so
    x = pi_R / pi_0 reaches 1 / (4 eps) and the condition number is ~1e13. A relative residual of 1e-14
    is below the rounding floor u ||A|| ||x|| / ||b|| (~2e-3 here): GMRES stops there and says it did not
    converge, reporting the true residual; a reachable target is met and flagged as met."""
    eps = 1e-13
    # wells {0, 1} (grounded at 0) and {2, 3}; 2 -> 1 with probability eps
    P = np.array([[0.5, 0.5, 0, 0], [0.5, 0.25, 0.25, 0], [0, eps, 0.5, 0.5 - eps], [0, 0, 0.5, 0.5]])
    R = [1, 2, 3]
    A = (np.eye(3) - P[np.ix_(R, R)]).T
    b = P[0, R]
    # closed form: pi_1 = pi_0, pi_2 = pi_3, and the flow pi_1 / 4 = pi_2 eps
    exact = np.array([1.0, 1 / (4 * eps), 1 / (4 * eps)])
    assert np.linalg.cond(A) > 1e12
    floor = np.finfo(float).eps * np.linalg.norm(A, 2) * np.linalg.norm(exact) / np.linalg.norm(b)
    for rtol in (1e-14, 10 * floor):
        sol = gmres(operator(A), torch.as_tensor(b), rtol=rtol)
        x = sol.x.numpy()
        true = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
        assert sol.relative_residual == pytest.approx(true, rel=1e-6) and sol.converged == (true <= rtol)
        assert sol.converged == (rtol > floor)
        assert true <= floor and np.abs(x / exact - 1).max() < 1e-2  # at the floor, and the solution still near


# ------------------------------------------------------------------ the one engine: k pairs, both ends,
# preconditioned solves and BiCGSTAB, on every kind of operator

@pytest.mark.parametrize("which, pick", [("LA", lambda lam: lam[::-1]), ("SA", lambda lam: lam),
                                         ("LM", lambda lam: lam[np.argsort(-np.abs(lam), kind="stable")])])
def test_lanczos_k_pairs_at_either_end_against_eigh(which, pick):
    """Four wanted eigenvalues (separated by 0.2 from the rest) of a 300 x 300 matrix: each Ritz value
    within 1e-9 of eigh's, each Ritz vector's true residual below 1e-8, the vectors orthonormal."""
    n, k = 300, 4
    rng = np.random.default_rng(7)
    lam = np.sort(np.r_[rng.uniform(-1.0, 1.0, n - 8), [-2.0, -1.7, -1.5, -1.3], [1.3, 1.55, 1.8, 2.1]])
    A = symmetric(n, 3, lam)
    pairs = lanczos(A, np.ones(n), k=k, which=which, tol=lambda theta: 1e-11 * abs(theta))
    assert pairs.converged and pairs.values.shape == (k,) and pairs.vectors.shape == (k, n)
    np.testing.assert_allclose(pairs.values, pick(lam)[:k], rtol=0, atol=1e-9)
    Y = pairs.vectors.numpy()
    assert np.abs(Y @ Y.T - np.eye(k)).max() < 1e-8
    residuals = np.linalg.norm(Y @ A - pairs.values[:, None] * Y, axis=1)
    assert residuals.max() < 1e-8
    assert pairs.value == pairs.values[0] and pairs.residual_estimate == pairs.residual_estimates[0]


def test_lanczos_rejects_a_bad_ordering_and_a_basis_too_small_for_k():
    with pytest.raises(ValueError, match="which"):
        lanczos(np.eye(5), np.ones(5), tol=lambda t: 1e-8, which="BE")
    with pytest.raises(ValueError, match="basis_size"):
        lanczos(np.eye(50), np.ones(50), tol=lambda t: 1e-8, k=10, basis_size=8)


def badly_scaled(n: int, seed: int, symmetric_part: bool) -> np.ndarray:
    """A diagonally dominant matrix whose rows span six decades of scale: Jacobi fixes the scaling."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-3, 3, n)
    B = rng.uniform(-1, 1, (n, n)) * (rng.uniform(size=(n, n)) < 0.05)
    if symmetric_part:
        B = (B + B.T) / 2
        D = np.sqrt(scale)
        A = D[:, None] * (B + np.diag(np.abs(B).sum(axis=1) + 1.0)) * D[None, :]
        return (A + A.T) / 2
    return scale[:, None] * (B + np.diag(np.abs(B).sum(axis=1) + 1.0))


def jacobi(A: np.ndarray):
    d = torch.as_tensor(np.diag(A).copy())
    return lambda v, out: torch.div(v, d, out=out)


@pytest.mark.parametrize("solver", ["gmres", "bicgstab"])
def test_preconditioned_nonsymmetric_solves_against_numpy(solver):
    """Right-preconditioned GMRES and BiCGSTAB reach the solution of numpy.linalg.solve; with the
    Jacobi preconditioner in far fewer products than without (the scaling is six decades wide)."""
    from mlmix.theory.linalg.krylov import bicgstab

    n = 200
    A = badly_scaled(n, 1, symmetric_part=False)
    x_true = np.random.default_rng(2).standard_normal(n)
    b = A @ x_true
    run = (lambda **kw: gmres(A, b, restart=40, rtol=1e-12, max_matvecs=4000, **kw)) if solver == "gmres" else \
        (lambda **kw: bicgstab(A, b, rtol=1e-12, max_matvecs=4000, **kw))
    plain, pre = run(), run(preconditioner=jacobi(A))
    assert pre.converged and pre.relative_residual <= 1e-12
    true = np.linalg.norm(b - A @ pre.x.numpy()) / np.linalg.norm(b)
    assert true == pytest.approx(pre.relative_residual, rel=1e-6, abs=1e-16)  # the reported residual is the true one
    x = pre.x.numpy()  # forward error within ||A^-1|| ||b - A x|| (and the rounding of x_true's b)
    bound = np.linalg.norm(np.linalg.inv(A), 2) * np.linalg.norm(b - A @ x)
    assert np.linalg.norm(x - x_true) <= 1.01 * bound + 1e-12 * np.linalg.norm(x_true) * np.linalg.cond(A)
    assert pre.matvecs < plain.matvecs / 3 or not plain.converged


def test_preconditioned_conjugate_gradient_against_numpy():
    n = 200
    A = badly_scaled(n, 4, symmetric_part=True)
    b = np.random.default_rng(5).standard_normal(n)
    plain = conjugate_gradient(A, b, rtol=1e-12, max_matvecs=5000)
    pre = conjugate_gradient(A, b, preconditioner=jacobi(A), rtol=1e-12, max_matvecs=5000)
    assert pre.converged and pre.matvecs < plain.matvecs / 3
    np.testing.assert_allclose(pre.x.numpy(), np.linalg.solve(A, b), rtol=1e-8, atol=0)


def test_bicgstab_zero_right_hand_side_and_budget():
    from mlmix.theory.linalg.krylov import bicgstab

    A = badly_scaled(50, 6, symmetric_part=False)
    zero = bicgstab(A, np.zeros(50))
    assert zero.converged and zero.matvecs == 0 and not zero.x.any()
    short = bicgstab(A, np.ones(50), rtol=1e-14, max_matvecs=5)
    assert not short.converged and short.matvecs <= 6
    assert short.relative_residual == pytest.approx(np.linalg.norm(np.ones(50) - A @ short.x.numpy()) / np.sqrt(50))


@pytest.mark.parametrize("which", ["LA", "LM"])
def test_lanczos_counts_a_repeated_eigenvalue_with_its_multiplicity(which):
    """A single Krylov space sees one copy of an eigenvalue of multiplicity 3 (and stops on an invariant
    subspace); the locked, deflated searches find the other copies: the 5 largest are 3, 3, 3, 2, 2."""
    n = 60
    lam = np.r_[[3.0, 3.0, 3.0, 2.0, 2.0], np.linspace(-1.0, 1.0, n - 5)]
    A = symmetric(n, 9, lam)
    pairs = lanczos(A, np.ones(n), k=5, which=which, tol=lambda theta: 1e-12 * abs(theta))
    np.testing.assert_allclose(pairs.values, [3.0, 3.0, 3.0, 2.0, 2.0], rtol=0, atol=1e-10)
    Y = pairs.vectors.numpy()
    assert np.abs(Y @ Y.T - np.eye(5)).max() < 1e-8  # five independent eigenvectors, not one copy five times
    assert np.linalg.norm(Y @ A - pairs.values[:, None] * Y, axis=1).max() < 1e-8


@pytest.mark.parametrize("rows", [3, 4, 5, 7, 12, 13])
def test_blocked_basis_products_equal_the_plain_ones(monkeypatch, rows):
    """On a CPU, products with many long basis rows run two rows and 2^18 columns at a time
    (krylov._ROWS, _COLUMNS; here 16 columns so that small vectors take that path): the same numbers
    as one matrix-vector product to rounding, every entry in exactly one tile, no row alone, and a
    padded basis whose rows stay contiguous."""
    import mlmix.theory.linalg.krylov as kr

    monkeypatch.setattr(kr, "_COLUMNS", 16)
    n = 101
    tiles = list(kr._tiles(torch.empty(rows, n)))
    assert sorted((i, j) for r, c in tiles for i in range(rows)[r] for j in range(n)[c]) == \
        [(i, j) for i in range(rows) for j in range(n)]
    assert all(r.stop - r.start >= 2 for r, _ in tiles)
    V = kr._basis(rows + 1, torch.zeros(n, dtype=torch.float64))
    assert V.shape == (rows + 1, n) and V.stride(0) == n + 512 and all(r.is_contiguous() for r in V)
    V.copy_(torch.as_tensor(np.random.default_rng(rows).standard_normal((rows + 1, n))))
    w, h = V[rows], torch.as_tensor(np.random.default_rng(1).standard_normal(rows))
    assert kr._blocked(V[:rows])
    expected = V[:rows] @ w
    np.testing.assert_allclose(inner(LOCAL, V[:rows], w).numpy(), expected.numpy(), rtol=1e-13, atol=1e-13)
    updated = w - V[:rows].T @ h
    kr.subtract(V[:rows], h, w)
    np.testing.assert_allclose(w.numpy(), updated.numpy(), rtol=1e-13, atol=1e-13)


def test_lanczos_and_gmres_on_the_blocked_path_against_numpy(monkeypatch):
    """The eigenpair and the solve of a 300 x 300 problem with the basis products blocked by 16 columns."""
    import mlmix.theory.linalg.krylov as kr

    monkeypatch.setattr(kr, "_COLUMNS", 16)
    A = symmetric(300, 5)
    lam, vecs = np.linalg.eigh(A)
    res = lanczos(operator(A), start(300), tol=lambda th: 1e-11, basis_size=16)
    assert res.converged and abs(res.value - lam[-1]) < 1e-9
    assert abs(abs(float(res.vector @ torch.as_tensor(vecs[:, -1]))) - 1) < 1e-8
    M = A + 8 * np.eye(300)
    b = np.random.default_rng(2).standard_normal(300)
    sol = gmres(operator(M), torch.as_tensor(b), restart=20, rtol=1e-12)
    assert sol.converged
    np.testing.assert_allclose(sol.x.numpy(), np.linalg.solve(M, b), rtol=1e-9, atol=1e-10)
