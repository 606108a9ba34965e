"""Powers of a transition matrix applied to measures and functions, with certified rounding bounds:
the law mu P^t, the functions P^t g, and the expected transition counts over n steps from mu,

    E[C(a, b)] = sum_(s < n) (mu P^s)(a) P(a, b)          (C(a, b): the number of moves a -> b),

deeptime's and msmtools' ``expected_counts``; the counts sum to n.

Convention: the chain is defined by its off-diagonal entries (:mod:`mlmix.theory.chain.markov_chain`), so the
matrix applied here is P with the holding probabilities 1 - (off-diagonal row sum) (:func:`holding_matrix`);
it differs from the chain's, row by row in the L1 norm, by at most rho (the rounding of those sums).

Error bound. Every factor is non-negative, so a computed product of a non-negative matrix with a vector
of d terms per entry is within gamma_d = d u / (1 - d u) of the exact one entrywise (Higham, Accuracy and
Stability, section 3.5). A power P^(2^k) by k squarings has row-L1 distance at most
(1 + rho)^(2^k) (1 + gamma)^(2^k - 1) - 1 from the exact one, and applying it to v changes the error of v
by the same factor, so by t single steps or by binary powering (at most t + bitlength(t) + 1 roundings)

    ||P^t g (computed) - P^t g||_inf <= ||g||_inf E(t),  ||mu P^t (computed) - mu P^t||_1 <= E(t),
    E(t) = (1 + rho)^t (1 + gamma)^(t + bitlength(t) + 1) - 1,

with gamma the rounding of one product (gamma_N dense, gamma of the largest row or column CSR, the
operator's own ``rounding``). The counts add n such laws: ||C (computed) - C||_1 <= n E(n) + the rounding of
n additions (n gamma_n).

Routes: dense binary powering (P^(2^k) squared, memory permitting) where it is cheaper than t applications
(a dense chain, or a CSR or matrix-free chain of at most :data:`~mlmix.limits.DENSE_LIMIT` states for which
2 N^3 bitlength(t) is below t (nnz + :data:`CALL_COST`), :func:`prefer_squaring`); otherwise t applications of
P or P^T (CSR products or the matrix-free operator's own applications).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import scipy.sparse as sp

from mlmix.limits import DENSE_LIMIT
from mlmix.theory.results import EPS, VectorResult
from mlmix.validation import Matrix, check_memory, check_steps, check_vector

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain

#: The cost of one call of a CSR product, and of a matrix-free application, in multiply-adds (interpreter and
#: dispatch overhead), for the choice between t single applications and dense squaring.
CALL_COST = {"csr": 1e4, "operator": 1e5}

#: The most time points one call evaluates.
MAX_TIMES = 10_000

#: The most single applications of P one call makes (a chain too large for dense squaring).
MAX_APPLICATIONS = 10**7


def gamma(d: int) -> float:
    """gamma_d = d u / (1 - d u): the relative rounding of a sum of d non-negative products."""
    return d * EPS / (1 - d * EPS)


def power_error(t: int, rho: float, gam: float) -> float:
    """E(t) = (1 + rho)^t (1 + gamma)^(t + bitlength(t) + 1) - 1 (module doc)."""
    return math.expm1(t * math.log1p(rho) + (t + t.bit_length() + 1) * math.log1p(gam))


def prefer_squaring(n_states: int, t: int, per_step: float) -> bool:
    """Whether dense squaring (2 N^3 per product, bitlength(t) products) is cheaper than t applications of
    ``per_step`` multiply-adds each, for a chain that fits densely (at most :data:`DENSE_LIMIT` states)."""
    return n_states <= DENSE_LIMIT and 2.0 * n_states**3 * max(t.bit_length(), 1) < t * per_step


def holding_matrix(P: Matrix) -> tuple[Matrix, float]:
    """(P with each diagonal entry set to 1 - the off-diagonal row sum (0 where that is negative), rho): rho
    bounds the row-L1 distance to the chain's matrix (the rounding of the sums, and what clipping at 0 drops)."""
    if sp.issparse(P):
        M = sp.csr_array(P, dtype=np.float64, copy=True)
        M.setdiag(0.0)
        M.eliminate_zeros()
        off = np.asarray(M.sum(axis=1)).ravel()
        terms = int(np.max(np.diff(M.indptr))) if M.nnz else 0
        M.setdiag(np.maximum(1.0 - off, 0.0))
    else:
        M = np.array(P, dtype=np.float64, copy=True)
        np.fill_diagonal(M, 0.0)
        off = M.sum(axis=1)
        terms = M.shape[0]
        np.fill_diagonal(M, np.maximum(1.0 - off, 0.0))
    rho = 2 * gamma(terms + 1) + float(np.max(np.maximum(off - 1.0, 0.0)))
    return M, rho


def convention_distance(P: Matrix) -> float:
    """A bound on max_i |P(i, i) - (1 - the off-diagonal row sum)| + rho: how far P as stored (rows summing to 1
    within the tolerance of :func:`~mlmix.validation.check_transition_matrix`) is from the chain it defines,
    in the row-L1 norm and, the difference being diagonal, in the 2-norm."""
    M, rho = holding_matrix(P)
    return float(np.max(np.abs(P.diagonal() - M.diagonal()))) + rho


@dataclass(frozen=True)
class Stepper:
    """How P^t is applied: ``apply(v, measures)`` = v P (``measures``) or P v; ``squares`` the dense matrix to
    power by squaring (None: single applications); ``rho`` and ``gam`` the bound's terms (module doc)."""

    apply: Callable[[np.ndarray, bool], np.ndarray]
    n_states: int
    rho: float
    gam: float
    method: str
    squares: np.ndarray | None = None

    def error(self, t: int) -> float:
        return power_error(t, self.rho, self.gam)

    def powers(self, v: np.ndarray, times: np.ndarray, measures: bool) -> np.ndarray:
        """Rows v P^t (``measures``) or columns P^t v, one per entry of ``times`` (any order)."""
        out = np.empty((len(times), v.size))
        order = np.argsort(times, kind="stable")
        if self.squares is None:
            now, w = 0, v.copy()
            for i in order:
                for _ in range(int(times[i]) - now):
                    w = self.apply(w, measures)
                now = int(times[i])
                out[i] = w
            return out
        A = self.squares if not measures else self.squares.T
        keep = len(times) > 1  # the squares P^(2^k) are kept for the next time, else squared in place
        if keep:
            check_memory(8.0 * A.size * (int(np.max(times)).bit_length() + 2), f"the squares of {A.shape[0]} states")
        squares = [A]
        for i in order:
            t, w, k, S = int(times[i]), v.copy(), 0, A
            while t:
                if keep:
                    while len(squares) <= k:
                        squares.append(squares[-1] @ squares[-1])
                    S = squares[k]
                if t & 1:
                    w = S @ w
                t >>= 1
                k += 1
                if t and not keep:
                    S = S @ S
            out[i] = w
        return out


def check_applications(n_states: int, t: int) -> None:
    """Refuse (one line) t single applications beyond :data:`MAX_APPLICATIONS` (a chain too large to square)."""
    if t > MAX_APPLICATIONS:
        raise ValueError(f"t = {t} needs {t} applications of P on {n_states} states (too many states for dense "
                         f"squaring); at most {MAX_APPLICATIONS} are made")


def matrix_stepper(P: Matrix, t_max: int) -> Stepper:
    """The stepper of a matrix: dense squaring when the matrix is dense or squaring is cheaper
    (:func:`prefer_squaring`); CSR products otherwise."""
    M, rho = holding_matrix(P)
    N = M.shape[0]
    if not sp.issparse(M) or prefer_squaring(N, t_max, M.nnz + CALL_COST["csr"]):
        if sp.issparse(M):
            check_memory(8.0 * N * N * 4, f"dense powers of {N} states")
            M = M.toarray()
        return Stepper(lambda v, measures: (M.T @ v) if measures else (M @ v), N, rho, gamma(N),
                       "dense binary powering of P (holding probabilities 1 - the off-diagonal row sums)", M)
    check_applications(N, t_max)
    MT = sp.csr_array(M.T)
    terms = max(int(np.max(np.diff(M.indptr))), int(np.max(np.diff(MT.indptr))))
    return Stepper(lambda v, measures: (MT @ v) if measures else (M @ v), N, rho, gamma(terms),
                   "single CSR applications of P (holding probabilities 1 - the off-diagonal row sums)")


def chain_stepper(chain: Chain, t_max: int) -> Stepper:
    """A chain's stepper: its matrix (:func:`matrix_stepper`), or, matrix-free, its backend's applications
    (:meth:`~mlmix.theory.chain.backends.Backend.apply`, each charged the backend's ``rounding``), or its
    matrix (memory permitting) where squaring is cheaper (:func:`prefer_squaring`, an application costing
    N op.terms)."""
    if chain.facts.representation != "operator" or prefer_squaring(
            chain.n_states, t_max, chain.n_states * chain.op.terms + CALL_COST["operator"]):
        return matrix_stepper(chain.facts.matrix_P, t_max)
    op = chain.op
    check_applications(chain.n_states, t_max)
    if op.comm.world_size > 1:
        raise ValueError("powers of a sharded matrix-free chain are not computed: build it on one process")
    backend = chain.facts.backend
    g = backend.rounding()
    return Stepper(lambda v, measures: backend.apply(v, "measures" if measures else "functions"),
                   chain.n_states, g, g, f"single applications of the matrix-free operator ({op.description})")


def check_times(t: object, limit: int = MAX_TIMES) -> tuple[np.ndarray, bool]:
    """(times as int64, whether one was given alone): an int >= 0 or a non-empty sequence of them."""
    alone = np.ndim(t) == 0
    items = [t] if alone else list(np.asarray(t, dtype=object).ravel())
    if not items or len(items) > limit:
        raise ValueError(f"times must hold 1 to {limit} steps, got {len(items)}")
    return np.array([check_steps(x, "t") for x in items], dtype=np.int64), alone


def start_law(mu: object, n_states: int) -> np.ndarray:
    """A start law: a state index (a point mass) or a probability vector of length n_states."""
    if np.ndim(mu) == 0 and isinstance(mu, (int, np.integer)) and not isinstance(mu, bool):
        if not 0 <= int(mu) < n_states:
            raise ValueError(f"start state must lie in 0..{n_states - 1}, got {mu}")
        out = np.zeros(n_states)
        out[int(mu)] = 1.0
        return out
    return check_vector(mu, n_states, "mu", probability=True)


def propagate(stepper: Stepper, mu: np.ndarray, times: np.ndarray) -> VectorResult:
    """The laws mu P^t (rows, one per time) with ``details['error_bounds']`` the L1 bound E(t) of each
    (module doc); ``abs_error`` their largest."""
    rows = stepper.powers(mu, times, measures=True)
    bounds = np.array([stepper.error(int(t)) for t in times])
    return VectorResult("mu P^t", rows, stepper.method + "; ||error||_1 <= (1 + rho)^t (1 + gamma)^(t + log2 t + 2) - 1",
                        None, float(bounds.max()), details={"times": times, "error_bounds": bounds,
                                                            "rho": stepper.rho, "gamma": stepper.gam})


def transition_counts(stepper: Stepper, P: Matrix, mu: np.ndarray, n: int) -> VectorResult:
    """E[C(a, b)] = sum_(s < n) (mu P^s)(a) P(a, b) as a CSR matrix (module doc): the occupation
    o = sum_(s < n) mu P^s by doubling (sum_(s < 2m) P^s = (I + P^m) sum_(s < m) P^s) or by n steps, then
    diag(o) P with P's holding probabilities; ``abs_error`` bounds the L1 norm of the error."""
    n = check_steps(n, "n")
    M, _ = holding_matrix(P)
    occ = np.zeros_like(mu)
    if stepper.squares is None:
        w = mu.copy()
        for _ in range(n):
            occ += w
            w = stepper.apply(w, True)
        bound = n * (stepper.error(n) + gamma(n + 1))
    else:  # bits of n from the lowest: occ += w S_k, w = w P^(2^k), with S_k = sum_(s < 2^k) P^s
        A = stepper.squares.T
        S, Pk, w, k = np.eye(A.shape[0]), A, mu.copy(), n
        while k:
            if k & 1:
                occ += S @ w
                w = Pk @ w
            k >>= 1
            if k:
                S = S + Pk @ S
                Pk = Pk @ Pk
        # each law mu P^s passes through at most 2 n + 4 log2 n + 4 roundings (products and additions)
        bound = n * stepper.error(2 * n + 4 * n.bit_length() + 4)
    bound += 2 * n * EPS
    C = sp.csr_array(sp.diags_array(occ) @ sp.csr_array(M))
    return VectorResult("expected transition counts", C, f"diag(sum_(s < {n}) mu P^s) P; " + stepper.method, None,
                        bound, details={"n_steps": n, "occupation": occ})


def chain_propagate(chain: Chain, mu: object, t: object) -> VectorResult:
    """The body of :meth:`Chain.propagate`."""
    times, alone = check_times(t)
    law = start_law(mu, chain.n_states)
    out = propagate(chain_stepper(chain, int(times.max())), law, times)
    if not alone:
        return out
    return VectorResult(out.name, out.value[0], out.method, None, out.abs_error, details=dict(out.details))


def chain_transition_counts(chain: Chain, mu: object, n: int) -> VectorResult:
    """The body of :meth:`Chain.transition_counts` (the occupation by the chain's stepper; the counts need P's
    entries: a matrix-free chain's matrix, memory permitting)."""
    n = check_steps(n, "n")
    law = start_law(mu, chain.n_states)
    stepper = chain_stepper(chain, n)
    return transition_counts(stepper, chain.facts.matrix_P, law, n)
