"""Trajectories of a chain (:meth:`Chain.simulate <mlmix.theory.chain.markov_chain.Chain.simulate>`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mlmix.validation import check_int, check_starts

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


def simulate(chain: Chain, steps: int, start: int | np.ndarray | None = None, *, chains: int | None = None,
             seed: int | None = 0) -> np.ndarray:
    """The body of :meth:`Chain.simulate`; a matrix-free chain runs on its matrix (built from the source,
    memory permitting), a start drawn from the stationary law from its own certified law."""
    steps = check_int(steps, "steps", minimum=0)
    N = chain.n_states
    if start is not None:
        start = check_starts(start, N, chains)
        chains = start.size
    chains = check_int(1 if chains is None else chains, "chains", minimum=1)
    if chain.facts.representation == "operator":
        if start is None:
            pi = np.asarray(chain.stationary, dtype=np.float64)
            draws = np.random.default_rng(seed).random(chains)
            start = np.minimum(np.searchsorted(np.cumsum(pi), draws * pi.sum(), side="right"), N - 1)
        return simulate(chain.facts.matrix, steps, start, chains=chains, seed=seed)
    rng = np.random.default_rng(seed)
    if start is None:
        pi = np.asarray(chain.stationary, dtype=np.float64)
        x = np.minimum(np.searchsorted(np.cumsum(pi), rng.random(chains) * pi.sum(), side="right"), N - 1)
    else:
        x = start
    Q = sp.csr_array(chain.P, dtype=np.float64, copy=True)
    Q.setdiag(0.0)
    Q.eliminate_zeros()
    cum = np.cumsum(Q.data)  # running total over all rows; row r's moves are cum[indptr[r]:indptr[r+1]]
    before = np.concatenate(([0.0], cum))[Q.indptr[:-1]]
    mass = np.concatenate(([0.0], cum))[Q.indptr[1:]] - before
    out = np.empty((chains, steps + 1), dtype=np.int64)
    out[:, 0] = x
    if Q.nnz == 0:  # no moves: every state holds
        out[:, 1:] = x[:, None]
        return out
    for t in range(steps):
        u = rng.random(chains)
        move = u < mass[x]
        k = np.searchsorted(cum, before[x] + u, side="right")
        k = np.minimum(k, Q.indptr[x + 1] - 1)  # rounding at a row's end stays in the row
        x = np.where(move, Q.indices[np.maximum(k, 0)], x)
        out[:, t + 1] = x
    return out
