"""Subtraction-free state elimination (GTH) of a Markov chain, and the solves and factors built on it.

Censoring a chain on its states minus j (watching it only off j) replaces the transition matrix W
on the remaining states R by

    W'_xy = W_xy + W_xj W_jy / e_j,     e_j = sum_{y in R, y != j} W_jy + (exits of j),

where the escape probability e_j is computed as a **sum** of off-diagonal entries, never as
1 - W_jj. Every number is then a sum, product or quotient of non-negative numbers, so each carries
a relative error of a few units of roundoff however small it is (Grassmann, Taksar & Heyman 1985;
O'Cinneide 1993). Eliminating the states one by one is Gaussian elimination of the generator
G = I - W done in this subtraction-free way, so it yields an accurate LDU factorization of G:

    (I - W) = (I - C) E (I - R)   in elimination order,
    C[x, j] = W^(j)_xj / e_j,  R[j, y] = W^(j)_jy / e_j   (x, y eliminated after j),  E = diag(e),

with every entry accurate to a few ulps. Built on it (each with entrywise relative accuracy):

* the stationary law of an irreducible chain (GTH back substitution, in log space, so masses
  below 1e-308 keep their relative accuracy as logarithms);
* grounded solves (I - W)_RR g = b and (I - W)_RR^T x = b (the last state eliminated is the
  ground) and solves with absorbing exits, for non-negative right-hand sides: hitting times,
  committors, the Poisson equation (its error bound comes from the same solve applied to |b|) and
  the certificate of a computed stationary law (:mod:`mlmix.theory.chain.stationary`);
* for reversible chains, the symmetric factor L = D^{1/2}(I - P)D^{-1/2} = X diag(e) X^T with
  X[x, j] = -sqrt(C[x, j] R[j, x]) (:mod:`mlmix.theory.chain.spectral` computes gaps from it).

Pivots are chosen by largest escape probability (diagonal pivoting on L), which keeps
|X[x, j]| <= 1; a state can be forced to be eliminated last (the ground). The elimination is
blocked (panels of :data:`PANEL` pivots, trailing update by one matrix product of non-negative
matrices), so its cost is that of dense LU, O(N^3), at BLAS-3 speed.

Storage: the factorization lives in one (N, N) array in *position* coordinates: position N-1 is
eliminated first and position 0 last; for i < j, ``F[i, j]`` holds W^(j)_{ij} (flow from i into
the pivot j at its elimination) and ``F[j, i]`` holds W^(j)_{ji}.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import logsumexp

from mlmix.validation import check_memory

#: Pivots per panel of the blocked elimination.
PANEL = 64

#: Rows per block of the trailing update.
_ROWS = 512


@dataclass(frozen=True, eq=False)
class Elimination:
    """A finished (possibly partial) GTH elimination.

    ``order[p]``: the original index of the state at position p (position N-1 eliminated first);
    ``escape[p]``: its escape probability at elimination (0 for a ground: a state never eliminated,
    or the last state of a whole stochastic matrix); ``F``: the factors (module docstring);
    ``exits``: (N, k) exit columns after the forward elimination (the right-hand sides carried
    along), or None; ``pivots``: number of eliminated positions (the top ``pivots`` positions).
    """

    order: np.ndarray
    escape: np.ndarray
    F: np.ndarray
    exits: np.ndarray | None
    pivots: int

    @property
    def size(self) -> int:
        return int(self.order.size)

    @property
    def ground(self) -> int:
        """Number of positions not eliminated (at the bottom: positions 0 .. ground-1)."""
        return self.size - self.pivots

    # ------------------------------------------------------------------ stationary law
    def log_stationary(self) -> np.ndarray:
        """log pi (original order, normalised) of an irreducible stochastic matrix eliminated down
        to one state: pi_0 = 1 and pi_j = sum_{i<j} pi_i F[i, j] / e_j (GTH back substitution),
        done in log space."""
        N = self.size
        if self.ground != 1:
            raise ValueError("the stationary law needs a full elimination down to a single state")
        logF = _log_nonneg(self.F)
        log_e = _log_nonneg(self.escape)
        lp = np.empty(N)
        lp[0] = 0.0
        for j in range(1, N):
            lp[j] = logsumexp(lp[:j] + logF[:j, j]) - log_e[j]
        lp -= logsumexp(lp)
        out = np.empty(N)
        out[self.order] = lp
        return out

    # ------------------------------------------------------------------ solves
    @cached_property
    def _signed(self) -> np.ndarray:
        """T = diag(e) - F on the eliminated positions: (I - W)_EE = (I - U) L with L = tril(T) and
        (I - U) diag(e) = triu(T) (U[i, j] = F[i, j] / e_j). Both triangles have a positive diagonal
        and non-positive off-diagonal entries, so triangular solves with b >= 0 are subtraction-free."""
        n0 = self.ground
        check_memory(8.0 * (self.size - n0) ** 2, f"the triangular factors of {self.size} states")
        T = -self.F[n0:, n0:]
        T[np.diag_indices_from(T)] = self.escape[n0:]
        return T

    def solve(self, b: np.ndarray) -> np.ndarray:
        """g with (I - W)_EE g_E = b_E on the eliminated states E (g = 0 on the ground), for b in
        original coordinates (shape (N,) or (N, m)). Subtraction-free when b >= 0."""
        y = np.asarray(b, dtype=np.float64)[self.order]
        g = np.zeros_like(y)
        n0 = self.ground
        if n0 < self.size:
            T, e = self._signed, self.escape[n0:]
            scale = e if y.ndim == 1 else e[:, None]
            # (I - U) y' = b  <=>  triu(T) (y' / e) = b; then L g = y'
            yp = scale * solve_triangular(T, y[n0:], lower=False, check_finite=False)
            g[n0:] = solve_triangular(T, yp, lower=True, check_finite=False)
        out = np.empty_like(g)
        out[self.order] = g
        return out

    def solve_transposed(self, b: np.ndarray) -> np.ndarray:
        """x with (I - W)_EE^T x_E = b_E on the eliminated states E (x = 0 on the ground), b of shape
        (N,) in original coordinates: L^T w = b, then (I - U)^T x = w, i.e. triu(T)^T x = e w.
        Subtraction-free when b >= 0."""
        y = np.asarray(b, dtype=np.float64)[self.order]
        x = np.zeros_like(y)
        n0 = self.ground
        if n0 < self.size:
            T, e = self._signed, self.escape[n0:]
            w = solve_triangular(T, y[n0:], lower=True, trans="T", check_finite=False)
            x[n0:] = solve_triangular(T, e * w, lower=False, trans="T", check_finite=False)
        out = np.empty_like(x)
        out[self.order] = x
        return out

    def exit_solution(self) -> np.ndarray:
        """The solutions carried as exit columns: h with (I - W)_EE h = exits (original order,
        shape (N, k)); e.g. the committor when the exit column is the flow into the target set."""
        if self.exits is None:
            raise ValueError("this elimination carried no exit columns")
        # the forward pass already ran on the exit columns during elimination: back substitution only
        n0 = self.ground
        h = np.zeros((self.size, self.exits.shape[1]))
        if n0 < self.size:
            h[n0:] = solve_triangular(self._signed, self.exits[n0:], lower=True, check_finite=False)
        out = np.empty_like(h)
        out[self.order] = h
        return out

    # ------------------------------------------------------------------ symmetric factor
    def symmetric_factor(self) -> tuple[np.ndarray, np.ndarray]:
        """(X, e) with D^{1/2}(I - P)D^{-1/2} = X diag(e) X^T in position coordinates, for a
        reversible P eliminated completely: X unit upper triangular, X[i, j] = -sqrt(F[i,j] F[j,i])/e_j
        for i < j (no stationary law needed: reversibility makes sqrt(P_xy P_yx) the symmetric entry)."""
        if self.ground != 1:
            raise ValueError("the symmetric factor needs a full elimination down to a single state")
        e = self.escape
        X = -np.sqrt(np.triu(self.F, 1)) * np.sqrt(np.tril(self.F, -1).T)  # no underflow of the product
        X[:, 1:] /= e[None, 1:]
        X[np.diag_indices_from(X)] = 1.0
        return X, e


def _log_nonneg(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(a)


def eliminate(W: np.ndarray, *, exits: np.ndarray | None = None, eliminate_mask: np.ndarray | None = None,
              last: int | None = None, panel: int = PANEL) -> Elimination:
    """GTH elimination of a non-negative matrix W (off-diagonal entries are transition
    probabilities; the diagonal is ignored) with optional exit columns (non-negative (N, k): flows
    out of the system that are never eliminated, e.g. into an absorbing set).

    ``eliminate_mask``: which states to eliminate (default all; a full elimination stops at one
    state, the ground); states not eliminated are kept at the bottom positions. ``last``: a state
    to eliminate last (default: chosen by pivoting). Escape probabilities are row sums of the
    current off-diagonal entries plus the exits. Pivot: largest escape among the candidates.
    """
    W = np.asarray(W, dtype=np.float64)
    N = W.shape[0]
    k = 0 if exits is None else np.asarray(exits).shape[1]
    check_memory(8.0 * N * (N + k + 2 * panel + _ROWS), f"state elimination of {N} states")
    A = np.array(W, dtype=np.float64, copy=True)
    A[np.diag_indices_from(A)] = 0.0
    X = None if exits is None else np.array(exits, dtype=np.float64, copy=True).reshape(N, k)
    allowed = np.ones(N, dtype=bool) if eliminate_mask is None else np.asarray(eliminate_mask, dtype=bool).copy()
    n_keep = int((~allowed).sum())
    if eliminate_mask is None:
        n_keep = 1  # a whole matrix is eliminated down to a single ground state
        if last is not None:
            allowed[last] = False
    elif last is not None:
        raise ValueError("give either eliminate_mask or last, not both")
    order = np.arange(N)
    escape = np.zeros(N)
    est = A.sum(axis=1) + (X.sum(axis=1) if X is not None else 0.0)
    candidate = allowed.copy()
    m = N
    stop = n_keep
    if eliminate_mask is None and last is None:
        # no forced ground: the final remaining state is whichever is left
        candidate[:] = True

    def swap(p: int, q: int) -> None:
        if p == q:
            return
        A[[p, q], :] = A[[q, p], :]
        A[:, [p, q]] = A[:, [q, p]]
        for arr in (order, est, candidate):
            arr[[p, q]] = arr[[q, p]]
        if X is not None:
            X[[p, q], :] = X[[q, p], :]

    while m > stop:
        b = min(panel, m - stop)
        m0 = m
        U = np.zeros((m0, b))
        V = np.zeros((b, m0 + (k if X is not None else 0)))
        for t in range(b):
            j = m0 - 1 - t
            pool = np.flatnonzero(candidate[: j + 1])
            if pool.size == 0:
                raise AssertionError("no pivot candidate left")
            p = int(pool[np.argmax(est[pool])])
            swap(p, j)
            if t:
                U[[p, j], :] = U[[j, p], :]
                V[:, [p, j]] = V[:, [j, p]]
            # current row and column of the pivot: stored values plus this panel's pending updates
            col = A[:j, j] + U[:j, :t] @ V[:t, j]
            row = A[j, :j] + U[j, :t] @ V[:t, :j]
            ex = None
            if X is not None:
                ex = X[j] + U[j, :t] @ V[:t, m0:]
            e = row.sum() + (ex.sum() if ex is not None else 0.0)
            A[:j, j] = col
            A[j, :j] = row
            if ex is not None:
                X[j] = ex
            escape[j] = e
            candidate[j] = False
            if e <= 0.0:
                raise ValueError(f"state {int(order[j])} cannot leave the set being eliminated (escape "
                                 "probability 0): the chain restricted there is not irreducible/absorbing")
            U[:j, t] = col
            V[t, :j] = row / e
            if ex is not None:
                V[t, m0:] = ex / e
            est[:j] -= col * V[t, :j]
        m = m0 - b
        for r0 in range(0, m, _ROWS):  # trailing update A += U V, in row blocks (no N^2 temporary)
            r1 = min(m, r0 + _ROWS)
            A[r0:r1, :m] += U[r0:r1] @ V[:, :m]
            if X is not None:
                X[r0:r1] += U[r0:r1] @ V[:, m0:]
        if m > 0:
            A[np.arange(m), np.arange(m)] = 0.0
            est[:m] = A[:m, :m].sum(axis=1) + (X[:m].sum(axis=1) if X is not None else 0.0)
    return Elimination(order, escape, A, X, N - stop)
