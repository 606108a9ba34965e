"""Searched lower bounds of paper G's influence constants (Def. 2, section 5.2, Cor. 7) for a source
whose contexts cannot all be enumerated: a hill climb over contexts instead of a maximum over a
random sample.

For sites i != j the influence of j on i is a supremum over pairs of contexts that differ only at j,

    rho_ij = sup { TV(pi_i(.|x_{-i}), pi_i(.|x'_{-i})) : x_{-j} = x'_{-j} },

and Delta_ij the same supremum of osc_v(s_i(v|x_{-i}) - s_i(v|x'_{-i})). Both are functions of the
n - 2 *free* sites k not in {i, j} and of the pair (a, b) = (x_j, x'_j). One score row (a masked
forward pass of an MLM, site i masked) is one context x_{-i}; the search asks for rows in batches:

* the **column** of x at j: the |V| contexts x^{j<-v}, v in V. Every pair (a, b) among them is a
  candidate: max_{a,b} TV is the best pair for these free sites;
* the **star** of x (at site i): every single-site change x^{k<-w}, k != i, w in V, i.e. the
  columns of x at every site: 1 + (n-1)(|V|-1) rows.

A pair (x, x' = x^{j<-b}) is *expanded* when the stars of x and x' are both evaluated: then every
neighbouring pair (x^{k<-w}, x'^{k<-w}) (one free site re-chosen, all |V| symbols in one batch) and
every re-choice of (a, b) at j has been evaluated. The search, per pair (i, j):

1. evaluates the column at j of ``starts`` contexts drawn uniformly from V^n (seeded);
2. repeatedly expands the best evaluated pair of (i, j) (steepest ascent: the best neighbour becomes
   the next pair to expand) until the best evaluated pair is already expanded: a local maximum in
   which no single free site and no re-choice at j increases the TV;
3. with a pass budget (``max_passes``) only: goes on best-first, expanding the best pair not yet
   expanded among the groups of evaluated rows, until the budget is spent (or nothing is left).

Every row evaluated for site i serves every pair (i, j') (the star of x holds the columns of x at
all j'), and rows are cached, so a row is never asked twice; ``passes`` counts the rows asked. The
reported values are maxima over ALL pairs of evaluated rows that differ at one site j (grouped by
x_{-i,-j}), with the per-pair formulas of :func:`mlmix.theory.local.influence.pair_distances`: each
entry is attained by an evaluated pair (its witness) and is a lower bound of the supremum. Exact
values need all n |V|^(n-1) rows (:func:`mlmix.theory.local.influence.influence_and_oscillation`).

Cost: a column is |V| rows and comparing its pairs takes |V|^3 operations, so the search is meant for
alphabets of up to a few hundred symbols (the 20 amino acids, a restricted candidate set). Measured
against enumeration on AntiBERTy: docs/real-model.md, section 11 "Searched lower bounds".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlmix.empirical.model_constants.streamed_rectangle import evaluated_rectangles
from mlmix.theory.local.influence import aggregate_influence, contraction_temperature, pair_distances
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.contexts import query_scores
from mlmix.validation import check_int, check_site_pairs


@dataclass(frozen=True)
class ContextSearch:
    """Searched lower bounds of the influence and oscillation matrices (see the module docstring).

    ``rho_lower[i, j]`` (zero diagonal) is the largest TV(pi_i(.|x_{-i}), pi_i(.|x'_{-i})) over the
    evaluated pairs x, x' that differ only at j, attained by ``witnesses[(i, j)] = (x, x')`` (full
    states; x_i = x'_i is the masked site's filler and does not matter); ``delta_lower`` and
    ``delta_witnesses`` the same for osc_v(s_i(v|x_{-i}) - s_i(v|x'_{-i})). A pair with no evaluated
    pair has 0 and no witness. ``passes``: score rows asked of the source (masked forward passes);
    ``converged``: every searched pair reached a local maximum within ``max_passes``;
    ``expansions``: pairs expanded (two stars each); ``pairs``: the pairs searched; ``rectangle``: max R
    over the rectangles whose four rows were evaluated, with its witness (a lower bound of R over every
    rectangle: :func:`mlmix.empirical.model_constants.streamed_rectangle.evaluated_rectangles`).
    """

    rho_lower: np.ndarray
    delta_lower: np.ndarray
    witnesses: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    delta_witnesses: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    passes: int
    temperature: float
    converged: bool
    expansions: int
    pairs: list[tuple[int, int]] = field(default_factory=list)
    max_abs_score: float = 0.0
    rectangle: dict | None = None

    @property
    def rho(self) -> float:
        """Lower bound of rho = max_j sum_{i != j} rho_ij (Thm 5's column aggregate)."""
        return aggregate_influence(self.rho_lower).rho

    @property
    def alpha(self) -> float:
        """Lower bound of Dobrushin's alpha = max_i sum_{j != i} rho_ij."""
        return aggregate_influence(self.rho_lower).alpha

    @property
    def contraction_temperature(self) -> float:
        """Lower bound of Cor. 7's T* = (1/4) max_j sum_{i != j} Delta_ij."""
        return contraction_temperature(self.delta_lower)

    def as_dict(self) -> dict:
        """Plain values for a JSON report (every figure a lower bound of its supremum)."""
        def listed(w: dict) -> list[dict]:
            return [{"i": i, "j": j, "x": x.tolist(), "x_prime": y.tolist()} for (i, j), (x, y) in sorted(w.items())]
        return {"rho_ij": self.rho_lower.tolist(), "delta_ij": self.delta_lower.tolist(), "rho": self.rho,
                "alpha": self.alpha, "contraction_temperature": self.contraction_temperature,
                "witnesses": listed(self.witnesses), "delta_witnesses": listed(self.delta_witnesses),
                "passes": self.passes, "converged": self.converged, "expansions": self.expansions,
                "method": "hill climb over contexts (column and star batches); maxima over evaluated pairs: "
                          "lower bounds of the suprema"}


@dataclass
class _Best:
    """Per-group best pair of one (i, j): rows (ra, rb) of the site-i cache and their values."""

    tv: np.ndarray  # (G,)
    tv_rows: np.ndarray  # (G, 2)
    osc: np.ndarray  # (G,)
    osc_rows: np.ndarray  # (G, 2)


class _Rows:
    """Score rows evaluated so far, per site i: one per context x_{-i} (x_i is ignored)."""

    def __init__(self, source: Conditionals, max_passes: int | None) -> None:
        self.source = source
        n = source.space.length
        self.max_passes = max_passes
        self.passes = 0
        self._index: list[dict[bytes, int]] = [{} for _ in range(n)]
        self._states: list[list[np.ndarray]] = [[] for _ in range(n)]
        self._scores: list[list[np.ndarray]] = [[] for _ in range(n)]
        self._packed: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n
        self.starred: list[set[bytes]] = [set() for _ in range(n)]

    @staticmethod
    def key(site: int, state: np.ndarray) -> bytes:
        y = np.array(state, dtype=np.int64)
        y[..., site] = 0
        return y.tobytes()

    def arrays(self, site: int) -> tuple[np.ndarray, np.ndarray]:
        """(states (m, n), scores (m, q)) of site i, in evaluation order."""
        if self._packed[site] is None:
            n, q = self.source.space.length, self.source.space.vocab_size
            states = np.concatenate(self._states[site]) if self._states[site] else np.zeros((0, n), np.int64)
            scores = np.concatenate(self._scores[site]) if self._scores[site] else np.zeros((0, q))
            self._states[site], self._scores[site] = [states], [scores]
            self._packed[site] = (states, scores)
        return self._packed[site]

    def evaluate(self, requests: list[tuple[int, np.ndarray]]) -> list[bool]:
        """Ask the source, in ONE batched query, for the rows of ``requests`` (site, states (r, n))
        not evaluated yet; requests are taken whole, in order, while they fit in ``max_passes``.
        Returns which requests were taken."""
        planned: list[tuple[int, np.ndarray]] = []
        seen: set[tuple[int, bytes]] = set()
        taken = []
        count = 0
        for site, states in requests:
            new: dict[bytes, np.ndarray] = {}
            for x in states:
                k = self.key(site, x)
                if k not in self._index[site] and (site, k) not in seen:
                    new.setdefault(k, x)
            if self.max_passes is not None and self.passes + count + len(new) > self.max_passes:
                taken.append(False)
                continue
            for k, x in new.items():
                seen.add((site, k))
                planned.append((site, x))
            count += len(new)
            taken.append(True)
        if planned:
            sites = np.array([s for s, _ in planned], dtype=np.int64)
            states = np.array([x for _, x in planned], dtype=np.int64)
            scores = query_scores(self.source, states, sites)
            self.passes += len(planned)
            for site in np.unique(sites):
                rows = sites == site
                index = self._index[site]
                for x in states[rows]:
                    index[self.key(site, x)] = len(index)
                self._states[site].append(states[rows])
                self._scores[site].append(scores[rows])
                self._packed[site] = None
        return taken


def _column(state: np.ndarray, site: int, q: int) -> np.ndarray:
    """The |V| states state^{site<-v}, v in V."""
    out = np.repeat(state[None], q, axis=0)
    out[:, site] = np.arange(q)
    return out


def _star(state: np.ndarray, site: int, q: int) -> np.ndarray:
    """Every single-site change state^{k<-w}, k != site (the columns of ``state`` at every other site)."""
    n = state.shape[0]
    return np.concatenate([_column(state, k, q) for k in range(n) if k != site])


def _group_best(states: np.ndarray, scores: np.ndarray, i: int, j: int, temperature: float) -> _Best:
    """For each group of evaluated rows of site i sharing x_{-i,-j} (at least two of them), the pair
    with the largest TV and the pair with the largest osc (:func:`pair_distances`)."""
    empty = _Best(np.zeros(0), np.zeros((0, 2), np.int64), np.zeros(0), np.zeros((0, 2), np.int64))
    if states.shape[0] < 2:
        return empty
    keys = states.copy()
    keys[:, [i, j]] = 0
    _, label = np.unique(keys, axis=0, return_inverse=True)
    label = label.ravel()
    counts = np.bincount(label)
    keep = counts[label] >= 2
    if not keep.any():
        return empty
    rows = np.flatnonzero(keep)
    _, group = np.unique(label[rows], return_inverse=True)
    group = group.ravel()
    order = np.argsort(group, kind="stable")
    rows, group = rows[order], group[order]
    sizes = np.bincount(group)
    G, width = sizes.size, int(sizes.max())
    position = np.arange(rows.size) - np.concatenate([[0], np.cumsum(sizes)[:-1]])[group]
    idx = np.full((G, width), -1, dtype=np.int64)
    idx[group, position] = rows
    best = _Best(np.full(G, -np.inf), np.zeros((G, 2), np.int64), np.full(G, -np.inf), np.zeros((G, 2), np.int64))
    for a in range(width - 1):
        A, B = idx[:, a], idx[:, a + 1:]
        valid = (A[:, None] >= 0) & (B >= 0)
        tv, osc = pair_distances(scores[A][:, None, :], scores[B], temperature)
        for value, best_value, best_rows in ((tv, best.tv, best.tv_rows), (osc, best.osc, best.osc_rows)):
            value = np.where(valid, value, -np.inf)
            col = value.argmax(axis=1)
            top = value[np.arange(G), col]
            better = top > best_value
            best_value[better] = top[better]
            best_rows[better] = np.stack([A[better], B[better, col[better]]], axis=1)
    return best


def search_worst_contexts(source: Conditionals, *, max_passes: int | None = None, starts: int = 8, seed: int = 0,
                          pairs=None) -> ContextSearch:
    """Lower bounds of rho_ij (paper G Def. 2) and Delta_ij (section 5.2) by a hill climb over contexts
    (module docstring): for each ordered pair (i, j) in ``pairs`` (default all i != j), the columns at j
    of ``starts`` uniform contexts (``seed``), then steepest ascent over expanded pairs (one free site
    re-chosen over all of V, or (x_j, x'_j) re-chosen) to a local maximum. With ``max_passes`` the
    search then goes on best-first until at most that many score rows (masked forward passes) are
    asked; batches are taken whole, and ``converged`` says whether every pair reached its local
    maximum first. Each entry is attained by its witness pair, hence
    rho_lower <= rho_ij and delta_lower <= Delta_ij entrywise; rho, alpha and T* of the result are
    lower bounds of the aggregates (Thm 5, Dobrushin, Cor. 7).
    """
    space = source.space
    n, q, T = space.length, space.vocab_size, source.temperature
    if n < 2:
        raise ValueError(f"influences need at least two sites, got n = {n}")
    budget = None if max_passes is None else check_int(max_passes, "max_passes", minimum=1)
    starts = check_int(starts, "starts", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    todo = ([(i, j) for i in range(n) for j in range(n) if i != j] if pairs is None
            else check_site_pairs(pairs, n))
    rng = np.random.default_rng(seed)
    contexts = rng.integers(0, q, size=(starts, n))
    rows = _Rows(source, budget)

    def best_pairs(i: int, j: int) -> _Best:
        states, scores = rows.arrays(i)
        return _group_best(states, scores, i, j, T)

    complete = all(rows.evaluate([(i, _column(c, j, q)) for c in contexts for i, j in todo]))
    active = list(todo) if complete else []
    peaked: set[tuple[int, int]] = set()
    expansions = 0
    while active:
        requests, expanding = [], []
        for i, j in active:
            best = best_pairs(i, j)
            states, _ = rows.arrays(i)
            for rank, g in enumerate(np.argsort(-best.tv, kind="stable")):
                x, y = states[best.tv_rows[g, 0]], states[best.tv_rows[g, 1]]
                if rows.key(i, x) not in rows.starred[i] or rows.key(i, y) not in rows.starred[i]:
                    break
                if rank == 0:
                    peaked.add((i, j))  # a local maximum: every neighbouring pair is evaluated, none is better
                if budget is None:
                    break
            else:
                continue  # every group's best pair is expanded
            if (i, j) in peaked and budget is None:
                continue
            requests.append((i, np.concatenate([_star(x, i, q), _star(y, i, q)])))
            expanding.append((i, j, x, y))
        taken = rows.evaluate(requests)
        for (i, _, x, y), ok in zip(expanding, taken):
            if ok:
                rows.starred[i].update((rows.key(i, x), rows.key(i, y)))
                expansions += 1
        if not all(taken):
            break
        active = [(i, j) for i, j, _, _ in expanding]
    complete = complete and peaked.issuperset(todo)
    rho, delta = np.zeros((n, n)), np.zeros((n, n))
    witnesses: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    delta_witnesses: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for i in range(n):
        states, _ = rows.arrays(i)
        if states.shape[0] < 2:
            continue
        for j in range(n):
            if j == i:
                continue
            best = best_pairs(i, j)
            if best.tv.size == 0:
                continue
            for value, pick, matrix, out in ((best.tv, best.tv_rows, rho, witnesses),
                                             (best.osc, best.osc_rows, delta, delta_witnesses)):
                g = int(value.argmax())
                x, y = states[pick[g, 0]].copy(), states[pick[g, 1]].copy()
                y[i] = x[i]  # the masked site's filler: the two contexts differ at j only
                matrix[i, j] = float(value[g])
                out[(i, j)] = (x, y)
    finite = [np.abs(sc[np.isfinite(sc)]).max(initial=0.0) for sc in (rows.arrays(i)[1] for i in range(n))]
    return ContextSearch(rho, delta, witnesses, delta_witnesses, rows.passes, T, complete, expansions, todo,
                         float(max(finite, default=0.0)), evaluated_rectangles([rows.arrays(i) for i in range(n)], T))


def search_lower_bounds(source: Conditionals, *, max_passes: int, seed: int = 0) -> dict:
    """The ``lower_bounds`` hook of :func:`mlmix.empirical.model_constants.certify.certify`: :func:`search_worst_contexts`
    from one start within ``max_passes`` score rows (one start with a budget did best on AntiBERTy,
    docs/real-model.md "Searched lower bounds"), as the hook's dict (``rho_lower``, ``delta_lower``,
    ``witnesses``, ``passes``, ``method``, ``max_abs_score``, ``rectangle``). No budget at all: zeros, 0 passes."""
    n = source.space.length
    if max_passes < 1:
        return {"rho_lower": np.zeros((n, n)), "delta_lower": np.zeros((n, n)), "witnesses": {}, "passes": 0,
                "method": "no pass in the budget"}
    found = search_worst_contexts(source, max_passes=max_passes, starts=1, seed=seed)
    return {"rho_lower": found.rho_lower, "delta_lower": found.delta_lower,
            "witnesses": [{"pair": [int(i), int(j)], "x": x.tolist(), "y": y.tolist()}
                          for (i, j), (x, y) in sorted(found.witnesses.items())], "passes": found.passes,
            "method": f"worst-context search ({found.expansions} pairs expanded, "
                      f"{'local maxima reached' if found.converged else 'budget spent before local maxima'})",
            "max_abs_score": found.max_abs_score, "rectangle": found.rectangle}
