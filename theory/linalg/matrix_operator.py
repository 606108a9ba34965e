"""An assembled transition matrix presented matrix-free: :class:`MatrixOperator`.

``Chain(MatrixOperator(P))`` asks a dense or CSR P every question through the operator route of the
quantity modules (Krylov solves and Lanczos on products with P and P^T, flows summed as non-negative
terms), the route a chain too large to assemble takes; so the same P answers through the dense, the
sparse and the matrix-free algorithms, and a test can hold the three to one another.

By the chain's convention (:mod:`mlmix.theory.chain.markov_chain`) P is its off-diagonal part O and
the holding probabilities h(x) = 1 - sum_{y != x} O(x, y):

    P u = h u + O u,    u P = h u + O^T u,    D^{1/2} P D^{-1/2} u = h u + R u,  R(x, y) = sqrt(O(x, y) O(y, x)),

the last for a reversible P (detailed balance pi(x) P(x, y) = pi(y) P(y, x) makes
sqrt(pi(x) / pi(y)) P(x, y) = sqrt(P(x, y) P(y, x)), so no pi is needed). The flows pi(x) P(x, y),
x != y, are the non-zeros of O weighted by pi (:meth:`MatrixOperator.fibre_pairs`).

Reversibility is given by the caller or decided once here by Kolmogorov's criterion on the support,
in log space: O and O^T have the same pattern, and the potential phi accumulated along a breadth-first
spanning tree from the log-ratios log O(x, y) - log O(y, x) reproduces every edge's log-ratio (to
1e-9 (1 + max |phi|)). There is no ``log_joint``: the stationary law comes from the operator's
Krylov route with its a-posteriori certificate, like any non-reversible kernel's.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import breadth_first_order, connected_components

from mlmix.theory.linalg.operator import MODES, FlowPairs, TransitionOperator
from mlmix.validation import Matrix, check_transition_matrix

#: Off-diagonal non-zeros per slice of :meth:`MatrixOperator.fibre_pairs` (8 MB of float64 per vector).
PAIR_CHUNK = 1 << 20


def _off_diagonal(M: Matrix) -> sp.csr_array:
    A = sp.csr_array(M, dtype=np.float64, copy=True)
    A.setdiag(0.0)
    A.eliminate_zeros()
    A.sort_indices()
    return A


def kolmogorov_reversible(O: sp.csr_array) -> bool:
    """Whether the chain with off-diagonal part ``O`` (CSR, sorted, no explicit zeros) satisfies
    Kolmogorov's criterion on each connected component of its support (module docstring)."""
    N = O.shape[0]
    OT = sp.csr_array(O.T)
    OT.sort_indices()
    if O.nnz != OT.nnz or not (np.array_equal(O.indptr, OT.indptr) and np.array_equal(O.indices, OT.indices)):
        return False
    if O.nnz == 0:
        return True
    ratio = np.log(O.data) - np.log(OT.data)
    rows = np.repeat(np.arange(N, dtype=np.int64), np.diff(O.indptr))
    keys = rows * N + O.indices
    anc = np.arange(N, dtype=np.int64)  # a breadth-first forest: the parent of each state (roots: itself)
    seen = np.zeros(N, dtype=bool)
    for root in range(N):  # one tree per connected component
        if not seen[root]:
            order, pred = breadth_first_order(O, root, directed=False, return_predecessors=True)
            seen[order] = True
            anc[order[1:]] = pred[order[1:]]
    child = np.flatnonzero(anc != np.arange(N))
    phi = np.zeros(N)  # log pi(child) - log pi(parent) = log O(parent, child) - log O(child, parent)
    phi[child] = ratio[np.searchsorted(keys, anc[child] * N + child)]
    while (anc != anc[anc]).any():  # pointer jumping: phi(x) becomes the sum along the path to its root
        phi += phi[anc]  # a root holds 0
        anc = anc[anc]
    defect = np.abs(ratio - (phi[O.indices] - phi[rows]))
    return bool((defect <= 1e-9 * (1.0 + np.abs(phi).max())).all())


class MatrixOperator(TransitionOperator):
    """A dense or CSR transition matrix P as a :class:`~mlmix.theory.linalg.operator.TransitionOperator`
    (module docstring): every product is one with P's off-diagonal part O or O^T plus the holding term.

    Parameters
    ----------
    P : square, finite, non-negative, row-stochastic matrix (validated: a one-line ValueError or
        TypeError, :func:`mlmix.validation.check_transition_matrix`).
    reversible : whether P is reversible; None (default) decides it once by Kolmogorov's criterion on
        the support (:func:`kolmogorov_reversible`). Saying True of a non-reversible P is the caller's
        error: the symmetric mode then is not similar to P.
    """

    def __init__(self, P: Matrix, *, reversible: bool | None = None) -> None:
        M = check_transition_matrix(P)
        if reversible is not None and not isinstance(reversible, (bool, np.bool_)):
            raise TypeError(f"reversible must be True, False or None, got {type(reversible).__name__}")
        self.matrix = M
        self.n_states = self.local_size = int(M.shape[0])
        self._off = _off_diagonal(M)
        self._off_t = sp.csr_array(self._off.T)
        self._hold = 1.0 - np.asarray(self._off.sum(axis=1)).ravel()
        self.reversible = kolmogorov_reversible(self._off) if reversible is None else bool(reversible)
        self._sym: sp.csr_array | None = None
        self._positive: bool | None = None
        kind = "CSR" if sp.issparse(M) else "dense"
        self.description = f"{kind} matrix ({self._off.nnz:,} off-diagonal non-zeros), matrix-free"

    def apply(self, u: torch.Tensor, mode: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """P u ("functions"), u P ("measures") or D^{1/2} P D^{-1/2} u ("symmetric", reversible P):
        h u + A u with A = O, O^T or R (module docstring), on float64 CPU tensors."""
        if mode == "functions":
            A = self._off
        elif mode == "measures":
            A = self._off_t
        elif mode == "symmetric":
            A = self._symmetric()
        else:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        v = u.detach().to(torch.float64).cpu().numpy()
        result = torch.from_numpy(self._hold * v + A @ v)
        if out is None:
            return result.to(self.dtype)
        return out.copy_(result)

    def _symmetric(self) -> sp.csr_array:
        """R(x, y) = sqrt(O(x, y) O(y, x)) (formed once)."""
        if not self.reversible:
            raise ValueError("the symmetric mode needs a reversible P")
        if self._sym is None:
            R = self._off.multiply(self._off_t)
            self._sym = sp.csr_array(R.sqrt())
        return self._sym

    def fibre_pairs(self, pi: torch.Tensor, data: Sequence[torch.Tensor]) -> FlowPairs:
        """The off-diagonal non-zeros O(x, y) in slices of :data:`PAIR_CHUNK`: (pi(x), O(x, y), data at x,
        data at y) as flat tensors."""
        O = self._off
        rows = np.repeat(np.arange(self.n_states, dtype=np.int64), np.diff(O.indptr))
        for start in range(0, O.nnz, PAIR_CHUNK):
            x = torch.from_numpy(rows[start:start + PAIR_CHUNK])
            y = torch.from_numpy(O.indices[start:start + PAIR_CHUNK].astype(np.int64))
            p = torch.from_numpy(O.data[start:start + PAIR_CHUNK]).to(pi.dtype)
            yield pi[x], p, [t[x] for t in data], [t[y] for t in data]

    def conditionals_positive(self) -> bool:
        """P is irreducible (its support strongly connected) and keeps some state with positive
        probability, a stored P(x, x) > 0 (so aperiodic: 1 - the row's off-diagonal sum may round to a
        spurious 1e-16); False where either fails (the chain then reads P's structure)."""
        if self._positive is None:
            one = self.n_states == 1 or connected_components(self._off, directed=True, connection="strong")[0] == 1
            self._positive = bool(one and (self.matrix.diagonal() > 0).any())
        return self._positive

    def trace(self) -> float:
        """sum_x h(x)."""
        return float(self._hold.sum())

    @property
    def terms(self) -> int:
        """1 + the most off-diagonal non-zeros of a row (of O or O^T)."""
        per_row = max(int(np.diff(self._off.indptr).max(initial=0)), int(np.diff(self._off_t.indptr).max(initial=0)))
        return per_row + 1

    @property
    def lambda_min(self) -> float:
        """Gershgorin: every real eigenvalue lies in some interval [2 h(x) - 1, 1], so
        lambda >= max(-1, min_x (2 h(x) - 1)) (0 for a lazy chain, h >= 1/2)."""
        return max(-1.0, float(np.min(2.0 * self._hold - 1.0)))

    def __repr__(self) -> str:
        return f"<MatrixOperator {self.description}: {self.n_states} states, reversible={self.reversible}>"

