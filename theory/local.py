"""Local quantities of a source of conditionals (paper G, sections 4-5), one implementation over a
set of contexts.

Every function takes a :class:`~mlmix.theory.conditionals.Conditionals` source and a set of contexts:

* ``contexts=None`` enumerates all of V^n (with every replacement symbol): the **exact** value
  (refused past ``max_states`` states);
* an int array ``(B, n)`` of contexts (and optionally a limited set of replacement symbols): an
  **estimate**. Quantities defined as suprema over contexts (rho_ij, Delta_ij, R max) are then
  maxima over a subset, hence LOWER bounds of the true suprema. Every result carries ``exact``.

Queries to the source are batched into large ``source.scores(contexts, sites)`` calls with a
per-row site array (:data:`QUERY_FLOATS` bounds the memory of one call), so the same code serves
a masked language model with |V| = 30,000 and n = 20. Scores are T-independent; conditionals are
pi_i^T(.|x_{-i}) = softmax(s_i(.|x_{-i}) / T) at the source's temperature.

Replacement symbols b at site j (the y = x^{j<-b} of rho_ij and Delta_ij) are chosen by
``replacements``:

* ``None``: every b in V other than x_j (needed for the exact value);
* an int k: k symbols per (context, site), uniform on V minus {x_j} with replacement, drawn from
  ``rng`` once before any query (so the result does not depend on the batching);
* :class:`TopK` (k): the k highest-scoring symbols of the source's own s_j(.|x_{-j}) other than x_j;
* an int array, shape (R,) (the same candidates for every context) or (B, R): given candidates
  (entries equal to x_j are skipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
from scipy.special import log_softmax, logsumexp, softmax

from mlmix.theory.conditionals import Conditionals, check_temperature
from mlmix.theory.space import StateSpace

#: Largest number of float64 score entries (rows x |V|) requested from the source in one call and
#: held per working chunk (256 MiB); lower it for a small GPU, raise it for throughput.
QUERY_FLOATS = 2**25

#: Largest |V|^n enumerated by the exact (contexts=None) path unless the caller raises it.
EXACT_MAX_STATES = 4**8


# ----------------------------------------------------------------------------------------------
# Batched access to scores


def _rows_per_call(q: int, per_row: int = 1) -> int:
    return max(1, QUERY_FLOATS // (q * per_row))


def query_scores(source: Conditionals, states: np.ndarray, sites: np.ndarray | int) -> np.ndarray:
    """s_i(. | x_{-i}) for each row x of ``states`` and its site: float64 (B, |V|), T-independent.

    Splits the request into calls of at most :data:`QUERY_FLOATS` floats, each one
    ``source.scores(contexts, sites)`` with a per-row site array.
    """
    states = np.asarray(states)
    sites = np.broadcast_to(np.asarray(sites, dtype=np.int64), (states.shape[0],))
    q = source.space.vocab_size
    out = np.empty((states.shape[0], q))
    step = _rows_per_call(q)
    for start in range(0, states.shape[0], step):
        out[start:start + step] = source.scores(states[start:start + step], sites[start:start + step])
    return out


def query_all_sites(source: Conditionals, states: np.ndarray) -> np.ndarray:
    """Scores at every site of every state: float64 (B, n, |V|) from one batched request."""
    states = np.asarray(states)
    B, n = states.shape
    flat = query_scores(source, np.repeat(states, n, axis=0), np.tile(np.arange(n), B))
    return flat.reshape(B, n, source.space.vocab_size)


class _Scores:
    """Scores s_i(.|x_{-i}) at every site of a batch of states: looked up in a table of all of
    V^n (exact mode, each context queried once) or queried from the source on demand."""

    def __init__(self, source: Conditionals, tabulate: bool, max_states: int) -> None:
        self.source = source
        self.table = score_table(source, max_states) if tabulate else None

    def all_sites(self, states: np.ndarray, skip: np.ndarray | None = None,
                  known: np.ndarray | None = None) -> np.ndarray:
        """(E, n, q) scores; with ``skip`` (E,) the skipped site's row is copied from ``known``."""
        if self.table is not None:
            return self.table[self.source.space.encode(states)]
        if skip is None:
            return query_all_sites(self.source, states)
        E, n = states.shape
        others = np.array([[k for k in range(n) if k != j] for j in range(n)], dtype=np.int64).reshape(n, n - 1)
        sites = others[skip]  # (E, n-1)
        out = np.empty((E, n, self.source.space.vocab_size))
        flat = query_scores(self.source, np.repeat(states, n - 1, axis=0), sites.ravel())
        out[np.arange(E)[:, None], sites] = flat.reshape(E, n - 1, -1)
        out[np.arange(E), skip] = known[np.arange(E), skip]
        return out


def score_table(source: Conditionals, max_states: int = EXACT_MAX_STATES) -> np.ndarray:
    """s_i(. | x_{-i}) at every site of every state of V^n: float64 (|V|^n, n, |V|), index order.

    Each context x_{-i} is queried once (|V|^(n-1) rows per site) and broadcast over its fibre.
    """
    space = source.space
    space.check_size(max_states)
    n, q = space.length, space.vocab_size
    idx = np.arange(space.size, dtype=np.int64)
    out = np.empty((space.size, n, q))
    for i in range(n):
        place = int(space.place_values[i])
        base = idx[(idx // place) % q == 0]
        s = query_scores(source, space.decode(base), i)  # (N/q, q)
        for v in range(q):
            out[base + v * place, i] = s
    return out


def _state_chunks(space: StateSpace, contexts: np.ndarray | None, rows: int,
                  max_states: int) -> Iterator[np.ndarray]:
    if contexts is None:
        space.check_size(max_states)
        for start in range(0, space.size, rows):
            yield space.decode(np.arange(start, min(start + rows, space.size), dtype=np.int64))
    else:
        ctx = _check_states(space, contexts, "contexts")
        for start in range(0, ctx.shape[0], rows):
            yield ctx[start:start + rows]


def _check_states(space: StateSpace, states: np.ndarray, name: str = "states") -> np.ndarray:
    arr = np.asarray(states)
    if arr.ndim != 2 or arr.shape[1] != space.length:
        raise ValueError(f"{name} must have shape (B, {space.length}), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be integer symbols, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= space.vocab_size):
        raise ValueError(f"{name} symbols must lie in [0, {space.vocab_size})")
    return arr.astype(np.int64, copy=False)


# ----------------------------------------------------------------------------------------------
# Replacement symbols


@dataclass(frozen=True)
class TopK:
    """Replace x_j by the k symbols the source itself scores highest at site j (x_j excluded)."""

    k: int

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)) or self.k < 1:
            raise ValueError(f"TopK needs an int k >= 1, got {self.k!r}")


Replacements = None | int | TopK | np.ndarray


def _resolve_replacements(replacements: Replacements, space: StateSpace, contexts: np.ndarray | None,
                          rng: np.random.Generator | None, max_states: int) -> None | TopK | np.ndarray:
    """None, TopK, or candidates per context and site as an array (B, n, R) (a broadcast view for
    given arrays; random draws are made once here, so they do not depend on the batching)."""
    if replacements is None or isinstance(replacements, TopK):
        return replacements
    B = _context_count(space, contexts)
    n = space.length
    if isinstance(replacements, (int, np.integer)) and not isinstance(replacements, bool):
        if replacements < 1:
            raise ValueError(f"replacements count must be >= 1, got {replacements}")
        if rng is None:
            raise ValueError("random replacements (an int count) need an rng (np.random.Generator)")
        if contexts is None:
            space.check_size(max_states)
        ctx = space.all_states() if contexts is None else _check_states(space, contexts, "contexts")
        return _other_symbol(ctx[:, :, None], rng.integers(0, space.vocab_size - 1, size=(B, n, int(replacements))))
    arr = np.asarray(replacements)
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise TypeError("replacements must be None, an int count, TopK(k) or an int array (R,) or (B, R)")
    if arr.min() < 0 or arr.max() >= space.vocab_size:
        raise ValueError(f"replacement symbols must lie in [0, {space.vocab_size})")
    if arr.ndim == 2 and (contexts is None or arr.shape[0] != B):
        raise ValueError("per-context replacements (B, R) need contexts with the same B rows")
    arr = arr.astype(np.int64)
    return np.broadcast_to(arr if arr.ndim == 1 else arr[:, None, :], (B, n, arr.shape[-1]))


def _replacement_symbols(rule: None | TopK | np.ndarray, ctx: np.ndarray, site: int, scores_j: np.ndarray,
                         rows: slice, q: int) -> np.ndarray:
    """Candidate b for each context of the chunk at ``site``: (c, R), -1 where there is none."""
    current = ctx[:, site][:, None]
    c = ctx.shape[0]
    if rule is None:
        b = np.broadcast_to(np.arange(q), (c, q)).copy()
    elif isinstance(rule, TopK):
        s = scores_j.copy()
        s[np.arange(c), ctx[:, site]] = -np.inf
        k = min(rule.k, q - 1)
        b = np.argpartition(-s, k - 1, axis=1)[:, :k]
    else:
        b = rule[rows, site].copy()
    b[b == current] = -1
    return b


# ----------------------------------------------------------------------------------------------
# Pairs of contexts differing at one site: influence rho_ij and score oscillation Delta_ij


@dataclass(frozen=True)
class _PairBatch:
    site: np.ndarray  # (e,) the site j where x and y differ
    x_scores: np.ndarray  # (e, n, q)
    y_scores: np.ndarray  # (e, n, q)


def _pairs(source: Conditionals, contexts: np.ndarray | None, replacements: Replacements,
           rng: np.random.Generator | None, max_states: int) -> Iterator[_PairBatch]:
    """Every pair (x, y = x^{j<-b}) with x in the context set, any site j, b a replacement."""
    space = source.space
    n, q = space.length, space.vocab_size
    rule = _resolve_replacements(replacements, space, contexts, rng, max_states)
    oracle = _Scores(source, tabulate=contexts is None, max_states=max_states)
    chunk = _rows_per_call(q, n)
    offset = 0
    for ctx in _state_chunks(space, contexts, chunk, max_states):
        rows = slice(offset, offset + ctx.shape[0])
        offset += ctx.shape[0]
        sx = oracle.all_sites(ctx)  # (c, n, q)
        for j in range(n):
            b = _replacement_symbols(rule, ctx, j, sx[:, j], rows, q)  # (c, R)
            row, col = np.nonzero(b >= 0)
            for start in range(0, row.size, chunk):
                r = row[start:start + chunk]
                y = ctx[r].copy()
                y[:, j] = b[r, col[start:start + chunk]]
                site = np.full(r.size, j)
                yield _PairBatch(site, sx[r], oracle.all_sites(y, skip=site, known=sx[r]))


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


def _context_count(space: StateSpace, contexts: np.ndarray | None) -> int:
    return space.size if contexts is None else int(np.asarray(contexts).shape[0])


def influence_and_oscillation(source: Conditionals, contexts: np.ndarray | None = None,
                              replacements: Replacements = None, rng: np.random.Generator | None = None,
                              max_states: int = EXACT_MAX_STATES) -> tuple["InfluenceResult", "OscillationResult"]:
    """rho_ij (paper G Def. 2) and Delta_ij (paper G §5.2) from ONE pass over the same pairs
    (x, y = x^{j<-b}): every score query (an MLM forward pass) is made once for both.

        rho_ij(T) = max TV(pi_i^T(.|x_{-i}), pi_i^T(.|y_{-i})),
        Delta_ij  = max osc_v [s_i(v|x_{-i}) - s_i(v|y_{-i})],

    at the source's temperature, over ``contexts`` x (None: all of V^n, exact) and replacements
    (see the module docstring). A sample gives lower bounds of the suprema.
    """
    n = source.space.length
    T = source.temperature
    rho, delta = np.zeros((n, n)), np.zeros((n, n))
    spread = np.zeros(n)
    pairs = 0
    for batch in _pairs(source, contexts, replacements, rng, max_states):
        j = int(batch.site[0])
        tv = 0.5 * np.abs(softmax(batch.x_scores / T, axis=-1) - softmax(batch.y_scores / T, axis=-1)).sum(-1)
        diff = batch.x_scores - batch.y_scores
        osc = diff.max(axis=-1) - diff.min(axis=-1)
        tv[:, j] = 0.0
        osc[:, j] = 0.0
        rho[:, j] = np.maximum(rho[:, j], tv.max(axis=0))
        delta[:, j] = np.maximum(delta[:, j], osc.max(axis=0))
        spread[j] = max(spread[j], float(tv.sum(axis=1).max()))
        pairs += tv.shape[0]
    exact = contexts is None and replacements is None
    count = _context_count(source.space, contexts)
    return (InfluenceResult(rho, spread, exact, count, pairs, T), OscillationResult(delta, exact, count, pairs))


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


# ----------------------------------------------------------------------------------------------
# Rectangles and compatibility (paper G section 4, Prop. 4)


ScoreLookup = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _rectangle_values(scores_at: ScoreLookup, states: np.ndarray, i: np.ndarray, j: np.ndarray,
                      a_new: np.ndarray, b_new: np.ndarray, temperature: float) -> np.ndarray:
    """R for each rectangle; ``scores_at(states, sites)`` returns (B, q) scores."""
    B = states.shape[0]
    rows = np.arange(B)
    a, b = states[rows, i], states[rows, j]
    x10, x01 = states.copy(), states.copy()
    x10[rows, i] = a_new
    x01[rows, j] = b_new
    ctx = np.concatenate([states, x10, states, x01])
    site = np.concatenate([i, j, j, i])
    old = np.concatenate([a, b, b, a])
    new = np.concatenate([a_new, b_new, b_new, a_new])
    s = scores_at(ctx, site)
    r4 = np.arange(4 * B)
    # l(c -> c') = log pi(new|c) - log pi(old|c) = (s(new) - s(old)) / T: the normaliser cancels
    edge = ((s[r4, new] - s[r4, old]) / temperature).reshape(4, B)
    return np.abs((edge[0] + edge[1]) - (edge[2] + edge[3]))


def _check_rectangles(space: StateSpace, states: np.ndarray, i, j, a_new, b_new):
    st = _check_states(space, states)
    B = st.shape[0]
    arrs = [np.broadcast_to(np.asarray(v, dtype=np.int64), (B,)) for v in (i, j, a_new, b_new)]
    i, j, a_new, b_new = arrs
    if ((i < 0) | (i >= space.length) | (j < 0) | (j >= space.length)).any():
        raise ValueError(f"sites must lie in [0, {space.length})")
    if (i == j).any():
        raise ValueError("a rectangle needs two distinct sites i != j")
    if ((a_new < 0) | (a_new >= space.vocab_size) | (b_new < 0) | (b_new >= space.vocab_size)).any():
        raise ValueError(f"replacement symbols must lie in [0, {space.vocab_size})")
    return st, i, j, a_new, b_new


def rectangle_statistic(source: Conditionals, states: np.ndarray, i, j, a_new, b_new) -> np.ndarray:
    """Rectangle statistic of paper G section 4, vectorised over rectangles (arrays broadcast to B):

        x00 = x, x10 = x^{i<-a'}, x01 = x^{j<-b'}, x11 = both;
        l(c -> c') = log pi(c'_k | c_{-k}) - log pi(c_k | c_{-k}) for the site k that changes,
        R = | [l(x00->x10) + l(x10->x11)] - [l(x00->x01) + l(x01->x11)] |.

    R = 0 for every rectangle of a compatible source (Prop. 4); R > 0 certifies incompatibility.
    R scales as 1/T. One batched query of 4B rows.
    """
    st, i, j, a_new, b_new = _check_rectangles(source.space, states, i, j, a_new, b_new)
    return _rectangle_values(lambda c, s: query_scores(source, c, s), st, i, j, a_new, b_new, source.temperature)


@dataclass(frozen=True)
class Rectangles:
    """Rectangles (x, i, j, a', b') and their statistic R; ``exact`` when every rectangle of V^n
    with a' != x_i, b' != x_j, i < j is present (then ``max`` is the exact supremum)."""

    states: np.ndarray
    i: np.ndarray
    j: np.ndarray
    a_new: np.ndarray
    b_new: np.ndarray
    values: np.ndarray
    exact: bool

    @property
    def count(self) -> int:
        return int(self.values.size)

    @property
    def max(self) -> float:
        return float(self.values.max()) if self.values.size else 0.0

    @property
    def mean(self) -> float:
        return float(self.values.mean()) if self.values.size else 0.0

    def record(self, k: int) -> dict:
        """Rectangle k as a plain dict."""
        return {"state": self.states[k].tolist(), "i": int(self.i[k]), "j": int(self.j[k]),
                "a_new": int(self.a_new[k]), "b_new": int(self.b_new[k]), "R": float(self.values[k])}


def all_rectangles(source: Conditionals, max_states: int = 4**6, table: np.ndarray | None = None) -> Rectangles:
    """Every rectangle of V^n: each x, sites i < j, a' != x_i, b' != x_j (|V|^n C(n,2) (|V|-1)^2 of
    them), evaluated from one table of all scores (``table``: a :func:`score_table` of the source
    already computed, else computed here). Exact; limited to ``max_states`` states."""
    space = source.space
    space.check_size(max_states)
    if table is None:
        table = score_table(source, max_states)
    n, q = space.length, space.vocab_size
    states = space.all_states()
    lookup: ScoreLookup = lambda c, s: table[space.encode(c), s]
    parts = []
    for i in range(n):
        for j in range(i + 1, n):
            xa = np.arange(q)
            a_new, b_new = np.meshgrid(xa, xa, indexing="ij")
            idx = np.repeat(np.arange(space.size), q * q)
            an = np.tile(a_new.ravel(), space.size)
            bn = np.tile(b_new.ravel(), space.size)
            keep = (an != states[idx, i]) & (bn != states[idx, j])
            idx, an, bn = idx[keep], an[keep], bn[keep]
            ii, jj = np.full(idx.size, i), np.full(idx.size, j)
            vals = _rectangle_values(lookup, states[idx], ii, jj, an, bn, source.temperature)
            parts.append((idx, ii, jj, an, bn, vals))
    if not parts:  # n = 1: no rectangles
        empty = np.zeros(0, dtype=np.int64)
        return Rectangles(np.zeros((0, n), dtype=np.int64), empty, empty, empty, empty, np.zeros(0), True)
    idx, ii, jj, an, bn, vals = (np.concatenate(p) for p in zip(*parts))
    return Rectangles(states[idx], ii, jj, an, bn, vals, True)


def sample_rectangles(source: Conditionals, contexts: np.ndarray, count: int, rng: np.random.Generator,
                      top_k: int | None = None) -> Rectangles:
    """``count`` random rectangles (paper G Table 1 protocol): a context drawn uniformly from
    ``contexts``, two distinct sites i != j uniformly, and replacements a' != x_i, b' != x_j drawn
    uniformly from V, or from the source's own top-``top_k`` symbols of s_i(.|x_{-i}) and
    s_j(.|x_{-j}) when given. Needs n >= 2 and |V| >= 2."""
    space = source.space
    ctx = _check_states(space, contexts, "contexts")
    n, q = space.length, space.vocab_size
    if n < 2:
        raise ValueError("rectangles need length n >= 2")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"count must be an int >= 1, got {count!r}")
    if ctx.shape[0] == 0:
        raise ValueError("contexts must hold at least one context")
    states = ctx[rng.integers(0, ctx.shape[0], size=count)]
    i = rng.integers(0, n, size=count)
    j = (i + rng.integers(1, n, size=count)) % n
    if top_k is None:
        a_new = _other_symbol(states[np.arange(count), i], rng.integers(0, q - 1, size=count))
        b_new = _other_symbol(states[np.arange(count), j], rng.integers(0, q - 1, size=count))
    else:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
        s = query_scores(source, np.concatenate([states, states]), np.concatenate([i, j]))
        cur = np.concatenate([states[np.arange(count), i], states[np.arange(count), j]])
        s[np.arange(2 * count), cur] = -np.inf
        k = min(int(top_k), q - 1)
        top = np.argpartition(-s, k - 1, axis=1)[:, :k]
        pick = top[np.arange(2 * count), rng.integers(0, k, size=2 * count)]
        a_new, b_new = pick[:count], pick[count:]
    vals = rectangle_statistic(source, states, i, j, a_new, b_new)
    return Rectangles(states, i, j, a_new, b_new, vals, False)


def _other_symbol(current: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Map u uniform on [0, q-1) to a symbol uniform on V minus {current}."""
    return u + (u >= current)


def _compatibility_tol(table: np.ndarray, temperature: float, tol: float) -> float:
    return tol * max(1.0, float(np.abs(table).max()) / temperature)


def is_compatible(source: Conditionals, tol: float = 1e-9, max_states: int = 4**6) -> bool:
    """Exact compatibility test (paper G Prop. 4 and its converse): a positive joint with these
    conditionals exists iff every rectangle has R = 0, because the cycle space of the Hamming graph
    of V^n is generated by its 4-cycles (rectangles), so log-ratios integrate to a potential exactly
    when they sum to zero around every rectangle. ``tol`` is relative to max(1, max|s|/T)."""
    table = score_table(source, max_states)
    rects = all_rectangles(source, max_states, table)
    return rects.max <= _compatibility_tol(table, source.temperature, tol)


def compatible_joint(source: Conditionals, tol: float = 1e-9, max_states: int = 4**6) -> np.ndarray | None:
    """The compatible joint mu_T over V^n (normalised, index order), or None when none exists.

    log mu(x) is integrated from state 0 along the path that sets sites 0, 1, ..., n-1 in turn:
    log mu(x) = sum_k [s_k(x_k | c_k) - s_k(0 | c_k)] / T, c_k = (x_0..x_{k-1}, ., 0..0). The result
    is then checked against Definition 1 at every (x, i, v): log mu(x^{i<-v}) - log mu(x) must equal
    [s_i(v|x_{-i}) - s_i(x_i|x_{-i})] / T within ``tol`` (relative to max(1, max|s|/T)).
    """
    space = source.space
    table = score_table(source, max_states)
    T = source.temperature
    n = space.length
    states = space.all_states()
    log_mu = np.zeros(space.size)
    for k in range(n):
        path = states.copy()
        path[:, k + 1:] = 0
        s = table[space.encode(path), k]  # (N, q), context c_k
        log_mu += (s[np.arange(space.size), states[:, k]] - s[:, 0]) / T
    worst = 0.0
    for i in range(n):
        nb = space.neighbours(np.arange(space.size), i)  # (N, q)
        lhs = log_mu[nb] - log_mu[:, None]
        rhs = (table[:, i, :] - table[np.arange(space.size), i, states[:, i]][:, None]) / T
        worst = max(worst, float(np.abs(lhs - rhs).max()))
    if worst > _compatibility_tol(table, T, tol):
        return None
    p = np.exp(log_mu - log_mu.max())
    return p / p.sum()


# ----------------------------------------------------------------------------------------------
# Drift of a count statistic (paper G section 5.4)


def _symbol_mask(symbols: np.ndarray | list | set, q: int) -> np.ndarray:
    arr = np.asarray(sorted(symbols) if isinstance(symbols, set) else symbols)
    if arr.dtype == bool:
        if arr.shape != (q,):
            raise ValueError(f"a boolean symbol mask must have shape ({q},), got {arr.shape}")
        return arr.copy()
    if arr.size and (not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() >= q):
        raise ValueError(f"symbols must be integers in [0, {q})")
    mask = np.zeros(q, dtype=bool)
    mask[arr.astype(np.int64)] = True
    return mask


def count_drift(source: Conditionals, states: np.ndarray, symbols_A: np.ndarray | list | set) -> np.ndarray:
    """One-step drift of N(x) = #{i : x_i in A} under the Glauber kernel P_T (paper G §5.4):

        D(x) = E[N(X_1) - N(x) | X_0 = x]
             = (1/n) sum_i ( 1[x_i not in A] pi_i^T(A|x_{-i}) - 1[x_i in A] pi_i^T(V\\A|x_{-i}) ).

    ``symbols_A``: symbol indices or a boolean mask over V. One batched query of B n rows; returns
    float64 (B,).
    """
    space = source.space
    st = _check_states(space, states)
    A = _symbol_mask(symbols_A, space.vocab_size)
    logp = log_softmax(query_all_sites(source, st) / source.temperature, axis=-1)  # (B, n, q)
    with np.errstate(divide="ignore"):
        in_A = np.exp(logsumexp(np.where(A, logp, -np.inf), axis=-1)) if A.any() else np.zeros(logp.shape[:2])
        out_A = np.exp(logsumexp(np.where(A, -np.inf, logp), axis=-1)) if (~A).any() else np.zeros(logp.shape[:2])
    member = A[st]
    return np.where(member, -out_A, in_A).mean(axis=1)


# ----------------------------------------------------------------------------------------------
# Margins (paper G Assumption 1, Theorem 8)


@dataclass(frozen=True)
class BasinMargin:
    """Uniform local margin of a basin B (paper G Assumption 1), scores at T = 1.

    gamma: min over exit-causing pairs (x in B, i, v with x^{i<-v} not in B) of
        s_i(x_i|x_{-i}) - s_i(v|x_{-i}) (inf when B has no exit);
    all_argmax: at every exit-causing site of every x in B, x_i maximises s_i(.|x_{-i});
    states: indices of the basin states; exit_sites: m_x per basin state; exit_symbols: number of
    exit-causing (i, v) per basin state; holds: Assumption 1 (gamma > 0 and all_argmax).
    """

    gamma: float
    all_argmax: bool
    states: np.ndarray
    exit_sites: np.ndarray
    exit_symbols: np.ndarray

    @property
    def holds(self) -> bool:
        return self.gamma > 0 and self.all_argmax


def _basin_mask(space: StateSpace, basin: np.ndarray) -> np.ndarray:
    mask = np.asarray(basin)
    if mask.dtype != bool or mask.shape != (space.size,):
        raise ValueError(f"basin must be a boolean mask over the {space.size} states")
    if not mask.any():
        raise ValueError("basin must contain at least one state")
    return mask


def basin_margin(source: Conditionals, basin: np.ndarray, max_states: int = EXACT_MAX_STATES) -> BasinMargin:
    """Assumption 1 on a basin B given as a boolean mask over V^n (small spaces); scores are
    queried only at the basin's states."""
    space = source.space
    space.check_size(max_states)
    mask = _basin_mask(space, basin)
    idx = np.flatnonzero(mask)
    st = space.decode(idx)
    s = query_all_sites(source, st)  # (M, n, q)
    exits = np.stack([~mask[space.neighbours(idx, i)] for i in range(space.length)], axis=1)  # (M, n, q)
    current = np.take_along_axis(s, st[:, :, None], axis=2)[:, :, 0]  # (M, n)
    exit_site = exits.any(axis=2)
    argmax_ok = current >= s.max(axis=2)
    gaps = np.where(exits, current[:, :, None] - s, np.inf)
    return BasinMargin(float(gaps.min()) if exits.any() else float("inf"),
                       bool(argmax_ok[exit_site].all()), idx, exit_site.sum(axis=1), exits.sum(axis=(1, 2)))


@dataclass(frozen=True)
class StateMargins:
    """Per-site margins of single states: gap[b, i] = s_i(x_i|x_{-i}) - max_{v != x_i} s_i(v|x_{-i})
    (T = 1 scores; negative when x_i is not an argmax) and all_argmax[b] = all gaps >= 0.
    For the singleton basin B = {x}, Assumption 1's gamma is min_i gap[i]."""

    gap: np.ndarray
    all_argmax: np.ndarray

    @property
    def gamma(self) -> np.ndarray:
        return self.gap.min(axis=1)


def state_margins(source: Conditionals, states: np.ndarray) -> StateMargins:
    """Margins of each state (traps on real MLMs, paper G A.1): one batched query of B n rows."""
    space = source.space
    st = _check_states(space, states)
    s = query_all_sites(source, st)
    current = np.take_along_axis(s, st[:, :, None], axis=2)[:, :, 0]
    np.put_along_axis(s, st[:, :, None], -np.inf, axis=2)
    gap = current - s.max(axis=2)
    return StateMargins(gap, (gap >= 0).all(axis=1))


def escape_bound(gamma: float, temperature: float, vocab_size: int, exit_sites: int | None = None,
                 length: int | None = None) -> float:
    """Paper G Thm 8 (reconstructed): P_T(x, B^c) <= (m_x/n)(|V|-1) e^{-gamma/T} <= (|V|-1) e^{-gamma/T}.
    Without ``exit_sites``/``length`` the second (uniform) form, which also bounds Phi(B)."""
    T = check_temperature(temperature)
    bound = (vocab_size - 1) * float(np.exp(-gamma / T))
    if exit_sites is None and length is None:
        return bound
    if exit_sites is None or length is None:
        raise ValueError("give both exit_sites (m_x) and length (n), or neither")
    return exit_sites / length * bound


def mixing_lower_bound(gamma: float, temperature: float, vocab_size: int) -> float:
    """Paper G Thm 8 (reconstructed): if mu_T(B) <= 1/2, t_mix >= 1/(4 Phi(B)) >= e^{gamma/T}/(4(|V|-1))."""
    T = check_temperature(temperature)
    with np.errstate(over="ignore"):
        return float(np.exp(gamma / T)) / (4.0 * (vocab_size - 1))
