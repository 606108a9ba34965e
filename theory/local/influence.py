"""Influence coefficients rho_ij and score oscillations Delta_ij over a context set (paper G Def. 2,
section 5.2, Lemma 6, Cor. 7), from one pass over pairs of contexts that differ at one site.

With ``contexts=None`` the values are exact suprema over V^n; on a sample of contexts they are
maxima over that sample, i.e. lower bounds (see :mod:`mlmix.theory.sources.contexts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
from scipy.special import softmax

from mlmix.limits import EXACT_MAX_STATES
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.contexts import (
    Replacements,
    ScoreOracle,
    context_count,
    context_table,
    replacement_symbols,
    resolve_replacements,
    rows_per_call,
    site_tensor,
    state_chunks,
)
from mlmix.validation import check_memory, check_temperature


@dataclass(frozen=True)
class _PairBatch:
    site: np.ndarray  # (e,) the site j where x and y differ
    x_scores: np.ndarray  # (e, n, q)
    y_scores: np.ndarray  # (e, n, q)


def _pairs(source: Conditionals, contexts: np.ndarray | None, replacements: Replacements,
           rng: np.random.Generator | None, max_states: int) -> Iterator[_PairBatch]:
    """Every pair (x, y = x^{j<-b}) with x in the context set, any site j, b a replacement, with
    the scores queried from the source (``contexts=None``: every state of V^n)."""
    space = source.space
    n, q = space.length, space.vocab_size
    rule = resolve_replacements(replacements, space, contexts, rng, max_states)
    oracle = ScoreOracle(source)
    chunk = rows_per_call(q, n)
    offset = 0
    for ctx in state_chunks(space, contexts, chunk, max_states):
        rows = slice(offset, offset + ctx.shape[0])
        offset += ctx.shape[0]
        sx = oracle.all_sites(ctx)  # (c, n, q)
        for j in range(n):
            b = replacement_symbols(rule, ctx, j, sx[:, j], rows, q)  # (c, R)
            row, col = np.nonzero(b >= 0)
            for start in range(0, row.size, chunk):
                r = row[start:start + chunk]
                y = ctx[r].copy()
                y[:, j] = b[r, col[start:start + chunk]]
                site = np.full(r.size, j)
                yield _PairBatch(site, sx[r], oracle.all_sites(y, skip=site, known=sx[r]))


def pair_distances(x_scores: np.ndarray, y_scores: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The two per-pair terms of rho_ij and Delta_ij for score vectors on the last axis (broadcast):

        TV = (1/2) sum_v |softmax(x/T)_v - softmax(y/T)_v|,     osc = max_v (x - y)_v - min_v (x - y)_v.
    """
    x, y = np.asarray(x_scores, dtype=np.float64), np.asarray(y_scores, dtype=np.float64)
    tv = 0.5 * np.abs(softmax(x / temperature, axis=-1) - softmax(y / temperature, axis=-1)).sum(-1)
    diff = x - y
    return tv, diff.max(axis=-1) - diff.min(axis=-1)


@dataclass(frozen=True)
class InfluenceResult:
    """Influence coefficients (paper G, Definition 2) over a context set.

    rho_ij[i, j] = max over evaluated pairs x, y = x^{j<-b} of TV(pi_i^T(.|x_{-i}), pi_i^T(.|y_{-i})),
    zero diagonal. ``spread[j]`` = max over the same pairs of sum_{i != j} TV_i: the exact one-step
    quantity of the same-site maximal coupling, E[d_H(X_1, Y_1)] = 1 - (1 - spread_j)/n for the
    worst adjacent pair differing at j (spread_j <= sum_i rho_ij). ``exact``: all contexts and all
    replacements were used; otherwise every entry is a lower bound of the supremum.
    """

    rho_ij: np.ndarray
    spread: np.ndarray
    exact: bool
    contexts: int
    pairs: int
    temperature: float

    @property
    def rho(self) -> float:
        """Column aggregate max_j sum_{i != j} rho_ij (see :func:`aggregate_influence`)."""
        return aggregate_influence(self.rho_ij).rho


def influence_and_oscillation(source: Conditionals, contexts: np.ndarray | None = None,
                              replacements: Replacements = None, rng: np.random.Generator | None = None,
                              max_states: int = EXACT_MAX_STATES) -> tuple["InfluenceResult", "OscillationResult"]:
    """rho_ij (paper G Def. 2) and Delta_ij (paper G §5.2) from ONE pass over the same pairs
    (x, y = x^{j<-b}): every score query (an MLM forward pass) is made once for both.

        rho_ij(T) = max TV(pi_i^T(.|x_{-i}), pi_i^T(.|y_{-i})),
        Delta_ij  = max osc_v [s_i(v|x_{-i}) - s_i(v|y_{-i})],

    at the source's temperature, over ``contexts`` x (None: all of V^n, exact) and replacements
    (see the module docstring). A sample gives lower bounds of the suprema. The exact case
    (``contexts=None``, ``replacements=None``) reads the score table of the source once
    (:func:`~mlmix.theory.sources.contexts.context_table`) and compares whole fibres of contexts at a time.
    """
    if contexts is None and replacements is None:
        return _exact_influence(source, max_states)
    n = source.space.length
    T = source.temperature
    rho, delta = np.zeros((n, n)), np.zeros((n, n))
    spread = np.zeros(n)
    pairs = 0
    for batch in _pairs(source, contexts, replacements, rng, max_states):
        j = int(batch.site[0])
        tv, osc = pair_distances(batch.x_scores, batch.y_scores, T)
        tv[:, j] = 0.0
        osc[:, j] = 0.0
        rho[:, j] = np.maximum(rho[:, j], tv.max(axis=0))
        delta[:, j] = np.maximum(delta[:, j], osc.max(axis=0))
        spread[j] = max(spread[j], float(tv.sum(axis=1).max()))
        pairs += tv.shape[0]
    count = context_count(source.space, contexts)
    return (InfluenceResult(rho, spread, False, count, pairs, T), OscillationResult(delta, False, count, pairs))


def _exact_influence(source: Conditionals, max_states: int) -> tuple["InfluenceResult", "OscillationResult"]:
    """Every pair of V^n, vectorised over fibres of the score table.

    For a site j and a value u of x_j, the contexts x_{-i} of site i != j with x_j = u are compared
    with the q contexts that differ from them at j only (x_j = w, every w): one array operation over
    all of V^(n-2) x V per (i, j, u). spread_j accumulates sum_{i != j} TV_i over the states x_{-j}
    and replacements w. Memory: a few arrays of |V|^n floats.
    """
    space = source.space
    n, q, T = space.length, space.vocab_size, source.temperature
    table = context_table(source, max_states)
    check_memory(8 * (2 * n + 5) * space.size, "the influence pass (2n + 5 arrays of |V|^n floats)")
    scores = [site_tensor(table, space, i) for i in range(n)]
    probs = [softmax(s / T, axis=-1) for s in scores]
    rho, delta = np.zeros((n, n)), np.zeros((n, n))
    spread = np.zeros(n)
    for j in range(n):
        for u in range(q):
            total = np.zeros((q,) * n)  # axes: the sites other than j (ascending), then w
            for i in range(n):
                if i == j:
                    continue
                axis = j - (j > i)  # position of site j among the context axes of site i
                p = np.moveaxis(probs[i], axis, 0)  # (w, other contexts..., v)
                s = np.moveaxis(scores[i], axis, 0)
                tv = 0.5 * np.abs(p - p[u]).sum(axis=-1)  # (w, other contexts...)
                diff = s - s[u]
                osc = diff.max(axis=-1) - diff.min(axis=-1)
                rho[i, j] = max(rho[i, j], float(tv.max()))
                delta[i, j] = max(delta[i, j], float(osc.max()))
                # tv does not depend on x_i: broadcast it over that axis of x_{-j}
                total += np.expand_dims(np.moveaxis(tv, 0, -1), i - (i > j))
            spread[j] = max(spread[j], float(total.max()))
    pairs = space.size * n * (q - 1)
    return (InfluenceResult(rho, spread, True, space.size, pairs, T),
            OscillationResult(delta, True, space.size, pairs))


def influence_matrix(source: Conditionals, contexts: np.ndarray | None = None, replacements: Replacements = None,
                     rng: np.random.Generator | None = None,
                     max_states: int = EXACT_MAX_STATES) -> InfluenceResult:
    """rho_ij(T) = max_{x, y: x_{-j} = y_{-j}} TV(pi_i^T(.|x_{-i}), pi_i^T(.|y_{-i})) (paper G Def. 2);
    see :func:`influence_and_oscillation`, which also gives Delta_ij from the same queries."""
    return influence_and_oscillation(source, contexts, replacements, rng, max_states)[0]


@dataclass(frozen=True)
class AggregateInfluence:
    """rho = max_j sum_{i != j} rho_ij (column: influence *of* site j) and Dobrushin's
    alpha = max_i sum_{j != i} rho_ij (row: influence *on* site i), with the maximising sites."""

    rho: float
    alpha: float
    source_site: int
    target_site: int


def aggregate_influence(rho_ij: np.ndarray) -> AggregateInfluence:
    """Aggregate influence for path coupling (paper G Thm 5, reconstructed):

        rho = max_j sum_{i != j} rho_ij.

    Why the column sum: couple two chains that differ only at site j by picking the same site k
    and maximally coupling the two conditionals. Picking k = j (prob. 1/n) removes the
    disagreement; picking k = i != j (prob. 1/n each) creates a new one with probability at most
    rho_ij. So E[d_H(X_1, Y_1)] <= 1 - (1 - sum_{i != j} rho_ij)/n, and the worst j gives the
    contraction factor 1 - (1 - rho)/n. The row sum alpha (Dobrushin's condition, influence on a
    site from all others) is reported too; both coincide for symmetric rho_ij.
    """
    r = np.asarray(rho_ij, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] != r.shape[1]:
        raise ValueError(f"rho_ij must be a square matrix, got shape {r.shape}")
    r = r - np.diag(np.diag(r))
    col, row = r.sum(axis=0), r.sum(axis=1)
    return AggregateInfluence(float(col.max()), float(row.max()), int(col.argmax()), int(row.argmax()))


@dataclass(frozen=True)
class OscillationResult:
    """Cross-site score oscillation (paper G section 5.2) over a context set:
    delta_ij[i, j] = max over evaluated pairs x, y = x^{j<-b} of osc_v[s_i(v|x_{-i}) - s_i(v|y_{-i})],
    osc = max_v - min_v (T-independent). ``exact`` as for :class:`InfluenceResult`; a sample gives
    lower bounds."""

    delta_ij: np.ndarray
    exact: bool
    contexts: int
    pairs: int


def score_oscillation(source: Conditionals, contexts: np.ndarray | None = None, replacements: Replacements = None,
                      rng: np.random.Generator | None = None,
                      max_states: int = EXACT_MAX_STATES) -> OscillationResult:
    """Delta_ij = max_{x, y: x_{-j} = y_{-j}} osc_v [s_i(v|x_{-i}) - s_i(v|y_{-i})] (paper G §5.2);
    see :func:`influence_and_oscillation`."""
    return influence_and_oscillation(source, contexts, replacements, rng, max_states)[1]


def tv_bound_from_oscillation(osc: np.ndarray | float, temperature: float, linear: bool = False) -> np.ndarray:
    """Paper G Lemma 6 (constant reconstructed): TV(softmax(a/T), softmax(b/T)) <= tanh(osc(a-b)/(4T))
    <= osc(a-b)/(4T); elementwise, hence rho_ij(T) <= tanh(Delta_ij/(4T)) <= Delta_ij/(4T).
    ``linear=True`` returns the weaker osc/(4T)."""
    T = check_temperature(temperature)
    x = np.asarray(osc, dtype=np.float64) / (4.0 * T)
    return x if linear else np.tanh(x)


def contraction_temperature(delta_ij: np.ndarray) -> float:
    """Paper G Cor. 7 (reconstructed): T* = (1/4) max_j sum_{i != j} Delta_ij. For T > T*,
    rho(T) <= max_j sum_i Delta_ij/(4T) = T*/T < 1, so Thm 5 applies. On a context sample the
    Delta_ij are lower bounds, and so is T*."""
    d = np.asarray(delta_ij, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"delta_ij must be a square matrix, got shape {d.shape}")
    return 0.25 * float((d - np.diag(np.diag(d))).sum(axis=0).max())
