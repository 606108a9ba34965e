"""Metastable sets of a chain from its slow eigenvectors (crisp PCCA by the inner-simplex algorithm).

With the additive reversibilisation S = (P + P*)/2 (equal to P for a reversible chain), the matrix
A = D^{1/2} S D^{-1/2}, D = diag(pi), is symmetric with eigenvalues 1 = l_1 >= l_2 >= ... The k
slowest eigenvectors, back-transformed v = D^{-1/2} w, span functions that are nearly constant on
metastable sets. The number of sets k is where the eigenvalue gap is largest: k maximises
l_k - l_{k+1} over 2 <= k <= k_max (Deuflhard & Weber 2005, "Robust Perron cluster analysis").

The inner-simplex algorithm (Weber & Galliat 2002; :func:`~mlmix.theory.chain.pcca.inner_simplex_vertices`,
beside PCCA+ in :mod:`~mlmix.theory.chain.pcca`) picks k "vertex" states of the embedding
X = [v_1, ..., v_k] (rows: states) that span the widest simplex. Each state then goes to the vertex
it is most likely to reach first, argmax_j P_x(tau_{v_j} < tau_{other vertices}) (committors, solved
by GTH elimination, so they keep their accuracy where the eigenvectors lose it): a crisp assignment
in the spirit of PCCA's memberships chi = X X[vertices]^{-1}, which round-off corrupts on light states.
Above :data:`~mlmix.theory.chain.DENSE_HITTING_LIMIT` states (where the committors would need
slowly converging Krylov solves) PCCA+'s optimised memberships decide (:func:`~mlmix.theory.chain.pcca.memberships_from_modes`,
the crisp assignment of :meth:`Chain.pcca <mlmix.theory.chain.markov_chain.Chain.pcca>` on the slow modes of S). Each set A comes with its stationary mass pi(A) and its mean exit time from the
stationary law restricted to A, E_{pi|A}[tau_{A^c}] (first-step equations, :mod:`mlmix.theory.chain.hitting`).

Vertices are taken among states of mass >= 1e-10 max pi (where D^{-1/2} keeps the eigensolver's
error below 1e-11). The sets are a description, not a certified quantity: eigenvectors of nearly equal slow eigenvalues
are computed in floating point (the masses and exit times of the sets found are computed to the
accuracy the stationary law and the hitting solver report).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlmix.limits import DENSE_HITTING_LIMIT
from mlmix.theory.chain.pcca import (
    TRUSTED_MASS,
    crisp_labels,
    inner_simplex_vertices,
    memberships_from_modes,
    slow_eigenpairs,
)
from mlmix.validation import check_int


@dataclass(frozen=True)
class MetastableSet:
    """States of one metastable set (a boolean mask), its mass pi(A) and mean exit time from pi|A."""

    states: np.ndarray
    mass: float
    exit_time: float
    eigenvalue: float  # the k-th slow eigenvalue l_k of S (the slowest relaxation it carries)


def _vertex_committors(chain, vertices: np.ndarray) -> np.ndarray:
    """H[x, j] = P_x(the chain reaches vertex j before the other vertices) (N, k), by the committor
    equations (GTH elimination on dense sets: entrywise accurate)."""
    N = chain.n_states
    cols = []
    for v in vertices:
        own = np.zeros(N, dtype=bool)
        own[v] = True
        others = np.zeros(N, dtype=bool)
        others[[u for u in vertices if u != v]] = True
        cols.append(np.asarray(chain.committor(others, own), dtype=np.float64))
    return np.column_stack(cols)


def metastable_sets(chain, k_max: int = 6) -> list[MetastableSet]:
    """The metastable sets of ``chain`` (a dense or sparse :class:`~mlmix.theory.chain.markov_chain.Chain`), by
    the eigenvalue-gap choice of k and crisp inner-simplex PCCA (module docstring); largest mass first.
    A chain whose largest gap is after the first eigenvalue (no slow structure) gives one set."""
    pi = np.asarray(chain.stationary, dtype=np.float64)
    N = pi.shape[0]
    k_max = min(check_int(k_max, "k_max", minimum=2), N - 1) if N > 2 else 1
    if k_max < 2:
        return [MetastableSet(np.ones(N, dtype=bool), 1.0, float("inf"), 1.0)]
    vals, vecs = slow_eigenpairs(chain.P, pi, k_max + 1)
    gaps = vals[1:k_max] - vals[2:k_max + 1]
    if (1.0 - vals[1]) >= gaps.max():  # the first gap dominates: no metastable structure
        return [MetastableSet(np.ones(N, dtype=bool), 1.0, float("inf"), float(vals[0]))]
    k = int(np.argmax(gaps)) + 2
    X = vecs[:, :k]
    # v = w / sqrt(pi) amplifies the eigensolver's absolute error ~1e-16 by pi^{-1/2}: vertices are
    # chosen among states with pi >= 1e-10 max pi (error <= 1e-11); lighter states are only labelled
    trusted = pi >= TRUSTED_MASS * pi.max()
    if N <= DENSE_HITTING_LIMIT:
        label = np.argmax(_vertex_committors(chain, inner_simplex_vertices(X, trusted)), axis=1)
    else:  # Krylov committors of a metastable chain converge slowly: PCCA+'s memberships (for the modes of S)
        S = chain.P if chain.is_reversible else chain.additive_reversibilization().P
        Xn, A, _ = memberships_from_modes(S, pi, X, vals[:k])
        label = crisp_labels(Xn @ A)
    out = []
    for j in range(k):
        A = label == j
        if not A.any():
            continue
        mass = float(pi[A].sum())
        if A.all():
            exit_time = float("inf")
        else:
            times = np.asarray(chain.hitting_time(~A), dtype=np.float64)
            exit_time = float(pi[A] @ times[A] / mass)
        out.append(MetastableSet(A, mass, exit_time, float(vals[k - 1])))
    return sorted(out, key=lambda s: -s.mass)
