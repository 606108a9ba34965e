"""Rectangle incompatibility R and exact compatibility of a source of conditionals (paper G section 4,
Prop. 4 and its converse).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from mlmix.limits import EXACT_MAX_STATES
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.contexts import (
    check_states,
    context_table,
    other_symbol,
    query_scores,
    score_table,
    site_tensor,
)
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int, check_memory, check_real

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
    st = check_states(space, states)
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


def all_rectangles(source: Conditionals, max_states: int = 4**6) -> Rectangles:
    """Every rectangle of V^n: each x, sites i < j, a' != x_i, b' != x_j (|V|^n C(n,2) (|V|-1)^2 of
    them) with its record, evaluated from one table of all scores. Exact; limited to ``max_states``
    states and the memory limit (about 100 bytes per rectangle). For statistics of R on larger
    spaces, :func:`rectangle_summary` streams instead of holding every rectangle."""
    space = source.space
    space.check_size(max_states)
    n, q = space.length, space.vocab_size
    check_memory(8 * (n + 8) * space.size * (n * (n - 1) // 2) * (q - 1) ** 2, "every rectangle with its record")
    table = score_table(source, max_states)
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
    ctx = check_states(space, contexts, "contexts")
    n, q = space.length, space.vocab_size
    if n < 2:
        raise ValueError("rectangles need length n >= 2")
    count = check_int(count, "count", minimum=1)
    if ctx.shape[0] == 0:
        raise ValueError("contexts must hold at least one context")
    states = ctx[rng.integers(0, ctx.shape[0], size=count)]
    i = rng.integers(0, n, size=count)
    j = (i + rng.integers(1, n, size=count)) % n
    if top_k is None:
        a_new = other_symbol(states[np.arange(count), i], rng.integers(0, q - 1, size=count))
        b_new = other_symbol(states[np.arange(count), j], rng.integers(0, q - 1, size=count))
    else:
        top_k = check_int(top_k, "top_k", minimum=1)
        s = query_scores(source, np.concatenate([states, states]), np.concatenate([i, j]))
        cur = np.concatenate([states[np.arange(count), i], states[np.arange(count), j]])
        s[np.arange(2 * count), cur] = -np.inf
        k = min(int(top_k), q - 1)
        top = np.argpartition(-s, k - 1, axis=1)[:, :k]
        pick = top[np.arange(2 * count), rng.integers(0, k, size=2 * count)]
        a_new, b_new = pick[:count], pick[count:]
    vals = rectangle_statistic(source, states, i, j, a_new, b_new)
    return Rectangles(states, i, j, a_new, b_new, vals, False)

#: Unique rectangle values per working chunk of :func:`rectangle_summary` (32 MiB of float64).
SUMMARY_CHUNK = 2**22

#: Most values :func:`rectangle_summary` gathers to select an order statistic exactly (128 MiB).
SELECT_CAP = 2**24


@dataclass(frozen=True)
class RectangleSummary:
    """Statistics of R over every rectangle of V^n (x, i < j, a' != x_i, b' != x_j), computed
    without holding the values: ``count`` rectangles, ``mean``, ``max`` (with the ``worst``
    rectangle as a record), and exact ``quantiles`` {p: value} (numpy's linear interpolation
    between order statistics, as ``np.quantile`` of all the values would give)."""

    count: int
    mean: float
    max: float
    quantiles: dict
    worst: dict | None
    exact: bool = True

    def as_dict(self) -> dict:
        """mean, median, q90 (when computed), max, count and the worst rectangle."""
        out = {"mean": self.mean, "max": self.max, "count": self.count, "worst": self.worst}
        names = {0.5: "median", 0.9: "q90"}
        out.update({names.get(p, f"q{round(100 * p):g}"): v for p, v in self.quantiles.items()})
        return out


def rectangle_summary(source: Conditionals, max_states: int = EXACT_MAX_STATES,
                      quantiles: Sequence[float] = (0.5, 0.9)) -> RectangleSummary:
    """Exact statistics of R over all |V|^n C(n,2) (|V|-1)^2 rectangles of V^n, streamed.

    For sites i < j and the other sites fixed at r, let G_r(a, b) = s_i(a | x_j = b, r) -
    s_j(b | x_i = a, r). Then every rectangle with corners {a, a'} x {b, b'} has

        R = | G_r(a', b) - G_r(a, b) - G_r(a', b') + G_r(a, b') | / T,

    the same value from each of its four corners x; so R is evaluated once per unordered
    rectangle (a < a', b < b') and every statistic counts it four times. Values are produced in
    chunks of :data:`SUMMARY_CHUNK`; quantiles are exact order statistics found by bisecting on
    the bit patterns of the (non-negative) values over a few further passes, never storing more
    than :data:`SELECT_CAP` values.
    """
    space = source.space
    n, q, T = space.length, space.vocab_size, source.temperature
    for p in quantiles:
        check_real(p, "quantile", minimum=0.0, maximum=1.0)
    table = context_table(source, max_states)
    if n < 2:
        return RectangleSummary(0, 0.0, 0.0, {float(p): 0.0 for p in quantiles}, None)
    low, high = np.triu_indices(q, 1)  # the pairs a < a' (and b < b')
    per_pair = space.size // (q * q) * low.size**2  # unordered rectangles of one pair of sites
    check_memory(8 * (space.size + space.size * q // 2 + 3 * min(SUMMARY_CHUNK, per_pair)), "the rectangle pass")

    def chunks() -> Iterator[tuple[int, int, int, np.ndarray]]:
        """(i, j, first row of H, |D| / T) with rows of H indexing (r, a < a') and columns (b < b')."""
        for i in range(n):
            for j in range(i + 1, n):
                s_i = np.moveaxis(site_tensor(table, space, i), j - 1, -2)  # (r..., b, a)
                s_j = np.moveaxis(site_tensor(table, space, j), i, -2)  # (r..., a, b)
                G = (np.swapaxes(s_i, -1, -2) - s_j).reshape(-1, q, q)  # (r, a, b)
                H = (G[:, low, :] - G[:, high, :]).reshape(-1, q)  # (r * pairs a < a', b)
                step = max(1, SUMMARY_CHUNK // low.size)
                for start in range(0, H.shape[0], step):
                    h = H[start:start + step]
                    yield i, j, start, np.abs(h[:, low] - h[:, high]) / T

    count, total, best, worst = 0, [], -1.0, None
    top = np.zeros(1 << 16, dtype=np.int64)
    for i, j, start, R in chunks():
        count += R.size
        total.append(float(R.sum()))
        k = int(R.argmax())
        if R.flat[k] > best:
            best = float(R.flat[k])
            worst = _summary_record(space, i, j, start + k // R.shape[1], k % R.shape[1], low, high, best)
        if quantiles:
            top += np.bincount((R.view(np.int64) >> 48).ravel(), minlength=1 << 16)
    mean = math.fsum(total) / count if count else 0.0
    values = _quantiles(lambda: (R for *_, R in chunks()), top, count, [float(p) for p in quantiles]) \
        if count and quantiles else {float(p): 0.0 for p in quantiles}
    return RectangleSummary(4 * count, mean, max(best, 0.0), values, worst)


def _summary_record(space: StateSpace, i: int, j: int, row: int, col: int, low: np.ndarray, high: np.ndarray,
                    value: float) -> dict:
    """The rectangle at (row of H, column) of the pass for sites i < j, from its corner (a, b)."""
    q, n = space.vocab_size, space.length
    pairs = low.size
    r, pa = divmod(row, pairs)
    rest = np.asarray(np.unravel_index(r, (q,) * (n - 2)), dtype=np.int64).reshape(-1)
    state = np.insert(np.insert(rest, i, low[pa]), j, low[col])
    return {"state": state.tolist(), "i": i, "j": j, "a_new": int(high[pa]), "b_new": int(high[col]), "R": value}


def _quantiles(chunks: Callable[[], Iterator[np.ndarray]], top: np.ndarray, count: int,
               probs: list[float]) -> dict:
    """np.quantile (linear) of the multiset in which each of ``count`` streamed values appears 4 times."""
    full = 4 * count
    ranks = {}
    for p in probs:
        h = (full - 1) * p
        lo = math.floor(h)
        hi = min(lo + 1, full - 1)
        ranks[p] = (lo // 4, hi // 4, h - lo)
    order = _order_statistics(chunks, top, sorted({k for lo, hi, _ in ranks.values() for k in (lo, hi)}))
    return {p: order[lo] + frac * (order[hi] - order[lo]) for p, (lo, hi, frac) in ranks.items()}


def _order_statistics(chunks: Callable[[], Iterator[np.ndarray]], top: np.ndarray, ranks: list[int]) -> dict:
    """Exact order statistics (0-based ranks) of a stream of non-negative floats, given the histogram
    ``top`` of their top 16 bits. The bit pattern of a non-negative double is monotone in its value,
    so each pass narrows a rank to the values sharing 16 more leading bits, until the group is small
    enough (:data:`SELECT_CAP`) to gather and partition."""
    found: dict[int, float] = {}
    # rank -> (prefix, shift, rank within the group, group size): the group is {bits >> shift == prefix}
    groups = {k: _locate(top, k, 0, 48) for k in ranks}
    while groups:
        for k in [k for k, g in groups.items() if g[1] == 0]:  # all 64 bits fixed: one value
            found[k] = float(np.array(groups.pop(k)[0], dtype=np.int64).view(np.float64))
        gather = {k: g for k, g in groups.items() if g[3] <= SELECT_CAP}
        refine = {k: g for k, g in groups.items() if g[3] > SELECT_CAP}
        sizes = {(g[0], g[1]): g[3] for g in gather.values()}
        check_memory(8 * sum(sizes.values()), "the values gathered for the exact rectangle quantiles")
        pieces: dict[tuple[int, int], list] = {key: [] for key in sizes}
        hists = {k: np.zeros(1 << 16, dtype=np.int64) for k in refine}
        for R in (chunks() if groups else ()):
            flat = R.ravel()
            bits = flat.view(np.int64)
            for (prefix, shift), found_values in pieces.items():
                found_values.append(flat[(bits >> shift) == prefix])
            for k, (prefix, shift, _, _) in refine.items():
                inside = bits[(bits >> shift) == prefix]
                hists[k] += np.bincount((inside >> (shift - 16)) & 0xFFFF, minlength=1 << 16)
        for k, (prefix, shift, rank, _) in gather.items():
            found[k] = float(np.partition(np.concatenate(pieces[(prefix, shift)]), rank)[rank])
        groups = {k: _locate(hists[k], rank, prefix, shift - 16) for k, (prefix, shift, rank, _) in refine.items()}
    return found


def _locate(hist: np.ndarray, rank: int, prefix: int, shift: int) -> tuple[int, int, int, int]:
    """The bin of ``hist`` holding the value of rank ``rank``: (its full prefix, shift, rank in it, size)."""
    cum = np.cumsum(hist)
    b = int(np.searchsorted(cum, rank, side="right"))
    before = int(cum[b - 1]) if b else 0
    return (prefix << 16) | b, shift, rank - before, int(hist[b])


def _compatibility_tol(table: np.ndarray, temperature: float, tol: float) -> float:
    return tol * max(1.0, float(np.abs(table).max()) / temperature)


def is_compatible(source: Conditionals, tol: float = 1e-9, max_states: int = 4**6) -> bool:
    """Exact compatibility test (paper G Prop. 4 and its converse): a positive joint with these
    conditionals exists iff every rectangle has R = 0, because the cycle space of the Hamming graph
    of V^n is generated by its 4-cycles (rectangles), so log-ratios integrate to a potential exactly
    when they sum to zero around every rectangle. ``tol`` is relative to max(1, max|s|/T)."""
    summary = rectangle_summary(source, max_states, quantiles=())
    return summary.max <= _compatibility_tol(context_table(source, max_states), source.temperature, tol)


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
