"""Partial conditionals p_i(. | x_S): the scores of a site given a context in which some other sites are
still masked, the input of masked-diffusion and parallel decoders (:mod:`mlmix.theory.kernels.decoders`).

A table over (V + {mask})^(n-1) contexts comes from a masked LM (the [MASK] token at the masked positions,
:mod:`mlmix.empirical.models.partial_tables`), from a joint law (its exact marginal conditionals), or at random.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from scipy.special import log_softmax, logsumexp

from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.score_accuracy import EXACT, ScoreAccuracy
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_memory, check_score_values, check_table_shape, table_entries


def partial_space_size(space: StateSpace) -> int:
    """(|V|+1)^n: the partial assignments of V^n (each site a symbol or masked)."""
    return (space.vocab_size + 1) ** space.length


class PartialScoreTable(Conditionals):
    """Scores s_i(v | x_S) of every site given every partial context of the other sites.

    ``table[i, c, v]``, c the index of x_{-i} in (V + {mask})^(n-1) (base |V|+1, remaining sites in
    order, the mask is digit |V|); shape (n, (|V|+1)^(n-1), |V|). Entries are finite or -inf (a
    symbol of conditional zero), never NaN or +inf, and every row has a finite entry. The contexts
    without a mask are the full conditionals, so the table is also a :class:`Conditionals` (its
    Glauber chain, MH and systematic kernels are those of :meth:`full_table`).
    """

    partial_conditionals = True

    def __init__(self, space: StateSpace, table: np.ndarray, temperature: float = 1.0, *,
                 score_accuracy: ScoreAccuracy = EXACT) -> None:
        super().__init__(space, temperature)
        tab = np.asarray(table)
        n, q = space.length, space.vocab_size
        check_table_shape(tab.shape, n, q + 1, q, f"a partial score table of |V| = {q}, n = {n}")
        self.table = check_score_values(tab, "partial score table")
        self.score_accuracy = score_accuracy  # as ScoreTable's

    @property
    def mask(self) -> int:
        """The mask symbol in partial sequences: |V|."""
        return self.space.vocab_size

    def check_partial(self, partial: np.ndarray) -> np.ndarray:
        """Validate partial sequences: integers (B, n) in [0, |V|] (|V| = masked)."""
        x = np.asarray(partial)
        if x.ndim != 2 or x.shape[1] != self.space.length or not np.issubdtype(x.dtype, np.integer):
            raise ValueError(f"partial sequences must be an integer array (B, {self.space.length})")
        if x.size and (x.min() < 0 or x.max() > self.mask):
            raise ValueError(f"partial symbols must lie in [0, {self.mask}] ({self.mask} = masked)")
        return x.astype(np.int64)

    def _context_index(self, partial: np.ndarray, site: int) -> np.ndarray:
        n, Q = self.space.length, self.space.vocab_size + 1
        return np.delete(partial, site, axis=1) @ (Q ** np.arange(n - 2, -1, -1, dtype=np.int64))

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        return self.table[site, self._context_index(np.asarray(contexts, dtype=np.int64), site)]

    def partial_scores(self, partial: np.ndarray, site: int) -> np.ndarray:
        """s_i(. | x_S) for partial contexts (B, n) (the symbol at ``site`` is ignored): (B, |V|)."""
        return self.table[self.space.check_site(site), self._context_index(self.check_partial(partial), site)]

    def partial_log_conditionals(self, partial: np.ndarray, site: int) -> np.ndarray:
        """log p_i^T(. | x_S) = log_softmax(s_i(. | x_S) / T): (B, |V|)."""
        return log_softmax(self.partial_scores(partial, site) / self.temperature, axis=-1)

    def full_table(self) -> ScoreTable:
        """The full conditionals s_i(. | x_{-i}) (contexts without a mask) as a :class:`ScoreTable`; -inf
        entries (zero conditionals) are kept, so its chains may be reducible."""
        n, q = self.space.length, self.space.vocab_size
        rest = StateSpace(q, n - 1).all_states() if n > 1 else np.zeros((1, 0), np.int64)
        idx = rest @ ((q + 1) ** np.arange(n - 2, -1, -1, dtype=np.int64))
        return ScoreTable(self.space, self.table[:, idx], self.temperature, score_accuracy=self.score_accuracy)

    @classmethod
    def random(cls, vocab_size: int, length: int, seed: int | None = None, scale: float = 1.0,
               temperature: float = 1.0) -> "PartialScoreTable":
        """Scores i.i.d. N(0, scale^2) for every (site, partial context, symbol): a toy source."""
        space = StateSpace(vocab_size, length)
        check_memory(8.0 * table_entries(length, vocab_size + 1, vocab_size),
                     f"a partial score table of {vocab_size + 1}^{length - 1} contexts")
        rng = np.random.default_rng(seed)
        shape = (length, (vocab_size + 1) ** (length - 1), vocab_size)
        return cls(space, scale * rng.standard_normal(shape), temperature)

    @classmethod
    def from_joint(cls, source: Conditionals) -> "PartialScoreTable":
        """The exact marginal conditionals of a joint law: s_i(a | x_S) = log sum_{x_{M \\ i}} mu_T(x_S, a, .)
        (M the masked sites), i.e. p_i(. | x_S) = mu_T(X_i = . | X_S = x_S). The joint is tempered first,
        so the table has T = 1; contexts without a mask keep the source's scores w(x^{i<-a}) / T (the same
        E_logit as the source). A context of zero probability gets uniform scores (no decoder reaches it)."""
        lw = source.log_joint()
        if lw is None:
            raise TypeError(f"{type(source).__name__} has no joint law (a GibbsModel, Ising, Potts or "
                            "LogWeightTable is needed)")
        space = source.space
        n, q = space.length, space.vocab_size
        check_memory(8.0 * 3 * n * (q + 1) ** (n - 1) * q, "the partial score table")
        logp = np.asarray(lw, dtype=np.float64).reshape((q,) * n)
        Q = q + 1
        table = np.zeros((n, Q ** (n - 1), q))
        for i in range(n):
            others = [j for j in range(n) if j != i]
            place = Q ** np.arange(n - 2, -1, -1, dtype=np.int64)
            for r in range(n):  # r = number of masked sites among the others
                for hidden in combinations(others, r):
                    marg = logsumexp(logp, axis=hidden, keepdims=True) if hidden else logp  # (.., q at i, ..)
                    shown = [j for j in others if j not in hidden]
                    grid = np.stack(np.meshgrid(*[np.arange(q)] * len(shown), indexing="ij"), -1).reshape(-1, len(shown)) \
                        if shown else np.zeros((1, 0), np.int64)
                    ctx = np.full((grid.shape[0], n - 1), q, dtype=np.int64)
                    for col, j in enumerate(shown):
                        ctx[:, others.index(j)] = grid[:, col]
                    sub = np.moveaxis(marg.reshape(marg.shape), i, -1)  # symbol of site i last
                    keep = [slice(None) if j in shown else 0 for j in others]
                    vals = sub[tuple(keep)].reshape(-1, q)  # rows in the order of the shown sites' grid
                    bad = ~np.isfinite(vals).any(axis=1)
                    if hidden:  # full contexts keep the joint's own scores w(x^{i<-a}) / T (as E_logit uses them)
                        vals = vals - np.where(bad, 0.0, logsumexp(vals, axis=1))[:, None]
                    vals = np.where(bad[:, None], 0.0, vals)
                    table[i, ctx @ place] = vals
        return cls(space, table, 1.0)
