"""Hypothesis strategies for chains beyond paper G's theorem searches: row-stochastic matrices with
the closed classes, period and metastability asked for, score tables at a temperature, models on a
given graph and sub-frames of a tabulated model (the instances behind :mod:`mlmix.strategies`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sps
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.sources.conditionals import (
    Conditionals,
    IsingModel,
    PottsModel,
    ScoreTable,
)
from mlmix.theory.sources.space import StateSpace
from mlmix.verify.instances import (
    MAX_STATES,
    T_MAX,
    T_MIN,
    Instance,
    _edge_list,
    compatible_sources,
    half_integers,
    incompatible_sources,
    near_compatible_sources,
    seeds,
    temperatures,
    tempered,
)
from mlmix.verify.regime_instances import basin_instances

# ----------------------------------------------------------------------------------------------
# Stochastic matrices (any chain, not only a sampler's): closed classes, periods, metastability


@dataclass(eq=False)
class MatrixInstance:
    """A row-stochastic matrix with what it was built to have.

    P: dense ``(N, N)`` array, or a ``scipy.sparse.csr_array`` when built sparse;
    classes: the closed communicating classes (state indices), in order; transient: the other states;
    period: the period of every closed class; reversible: whether each closed class is reversible
    (built from symmetric weights); gap: the certified spectral gap when the matrix was built to be
    metastable (a :class:`~mlmix.theory.results.Result`), else None; params: how it was built.
    """

    P: Any
    classes: list[np.ndarray]
    transient: np.ndarray
    period: int
    reversible: bool
    params: dict = field(default_factory=dict)
    gap: Any = None
    weights: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_states(self) -> int:
        return int(self.P.shape[0])

    def dense(self) -> np.ndarray:
        return self.P.toarray() if hasattr(self.P, "toarray") else np.asarray(self.P)

    def regime(self) -> dict:
        return {"n": None, "vocab": None, "temperature": None, "states": self.n_states,
                "reversible": self.reversible}

    def describe(self) -> dict:
        out = {"kind": "stochastic-matrix", "states": self.n_states, "closed_classes": [c.tolist() for c in self.classes],
               "transient": self.transient.tolist(), "period": self.period, "reversible": self.reversible}
        out.update(self.params)
        if self.n_states <= 12:
            out["P"] = np.round(self.dense(), 6).tolist()
        return out

    def __repr__(self) -> str:
        return f"MatrixInstance({self.describe()})"


def _block_pattern(m: int, period: int) -> np.ndarray:
    """Allowed transitions of an irreducible block of m = period * r states with the given period:
    state j lies in cyclic class j % period and moves only to class (j + 1) % period (every move when
    period = 1)."""
    cls = np.arange(m) % period
    return (cls[None, :] == (cls[:, None] + 1) % period) if period > 1 else np.ones((m, m), dtype=bool)


def _backbone(m: int, period: int) -> np.ndarray:
    """A spanning cycle 0 -> 1 -> ... -> m-1 -> 0 (irreducibility) plus, for period d > 1, the edge
    d-1 -> 0 closing a cycle of length d (so the period is exactly d: gcd(m, d) = d); for d = 1 a
    self-loop at state 0 (aperiodic)."""
    B = np.zeros((m, m), dtype=bool)
    B[np.arange(m), (np.arange(m) + 1) % m] = True
    if period > 1:
        B[period - 1, 0] = True
    else:
        B[0, 0] = True
    return B


def _block_weights(draw, m: int, period: int, reversible: bool, high: int, density: float | None,
                   rng: np.random.Generator | None) -> np.ndarray:
    """Nonnegative weights of one irreducible block: integers 0..high on the allowed pattern drawn
    entry by entry (``rng`` None: shrinks to the backbone with weight 1), or from ``rng`` with the given
    density; the backbone keeps weight >= 1; symmetric when ``reversible``."""
    allowed = _block_pattern(m, period)
    back = _backbone(m, period)
    if reversible:
        back = back | back.T
    if rng is None:
        W = draw(arrays(np.int64, (m, m), elements=st.integers(0, high), fill=st.nothing())).astype(np.float64)
    else:
        W = rng.integers(1, high + 1, size=(m, m)).astype(np.float64) * (rng.random((m, m)) < density)
    W = np.where(allowed, W, 0.0)
    W = np.where(back, np.maximum(W, 1.0), W)
    return np.triu(W) + np.triu(W, 1).T if reversible else W


@st.composite
def stochastic_matrices(draw, max_states: int = 8, *, sparse: bool = False, reversible: bool | None = None,
                        closed_classes: int | tuple[int, int] = 1, period: int = 1, transient: bool | None = None,
                        high: int = 4) -> MatrixInstance:
    """Row-stochastic matrices with a prescribed structure (see :class:`MatrixInstance`).

    Each closed class is an irreducible block with exactly the given period (a spanning cycle plus,
    for period > 1, a short cycle of that length; aperiodic blocks get a self-loop); weights are
    integers 0..``high`` drawn entry by entry for dense matrices (shrinking to the spanning cycle of
    a single small block), or drawn from a seed at density 3/N for ``sparse`` ones (sizes up to
    ``max_states``; the weights pass through a dense N x N array, so keep N to a few thousand).
    ``reversible``: symmetric weights (each class is reversible; periods 1 or 2 only); None draws
    both (a non-symmetric build is "not built reversible": blocks of 2 states are reversible anyway). ``transient``: add transient states (never
    with reversible); None draws it. Rows sum to 1 up to rounding (W / row sums).
    """
    k = closed_classes if isinstance(closed_classes, int) else draw(st.integers(*closed_classes))
    if k < 1 or period < 1:
        raise ValueError(f"closed_classes and period must be >= 1, got {k} and {period}")
    rev = draw(st.booleans()) if reversible is None and period <= 2 else bool(reversible)
    if rev and period > 2:
        raise ValueError(f"a reversible chain has period 1 or 2, not {period}")
    with_transient = (not rev) and (draw(st.booleans()) if transient is None else transient)
    if k * period + int(with_transient) > max_states:
        raise ValueError(f"{k} closed classes of period {period} need more than max_states = {max_states} states")
    room = max_states - int(with_transient)
    sizes = []
    for c in range(k):  # each block: a multiple of the period, room left for the blocks still to come
        spare = (room - sum(sizes) - (k - c - 1) * period) // period
        sizes.append(period * draw(st.integers(1, max(1, spare if sparse else min(spare, 4)))))
    extra = draw(st.integers(1, max(1, room - sum(sizes) if sparse else min(3, room - sum(sizes))))) \
        if with_transient else 0
    rng = np.random.default_rng(draw(seeds())) if sparse else None
    N = sum(sizes) + extra
    W = np.zeros((N, N))
    starts = [int(s) for s in np.cumsum([0] + sizes)]
    for (a, b) in zip(starts[:-1], starts[1:]):
        W[a:b, a:b] = _block_weights(draw, b - a, period, rev, high, 3.0 / max(b - a, 1), rng)
    closed = int(starts[-1])
    if extra:  # transient states: any moves, plus one move into a closed class each
        if rng is None:
            T = draw(arrays(np.int64, (extra, N), elements=st.integers(0, high), fill=st.nothing())).astype(float)
            target = draw(arrays(np.int64, extra, elements=st.integers(0, closed - 1), fill=st.nothing()))
        else:
            T = rng.integers(1, high + 1, size=(extra, N)) * (rng.random((extra, N)) < 3.0 / N)
            target = rng.integers(0, closed, size=extra)
        T[np.arange(extra), target] = np.maximum(T[np.arange(extra), target], 1.0)
        W[closed:] = T
    P = W / W.sum(axis=1, keepdims=True)
    if sparse:

        P = sps.csr_array(P)
    classes = [np.arange(a, b) for a, b in zip(starts[:-1], starts[1:])]
    return MatrixInstance(P, classes, np.arange(closed, N), period, rev,
                          {"block_sizes": sizes, "transient_states": extra, "sparse": sparse},
                          weights=None if sparse else W)


@st.composite
def metastable_matrices(draw, gap: tuple[float, float] = (1e-12, 1e-6), max_states: int = 8,
                        wells: int = 2, reversible: bool | None = None) -> MatrixInstance:
    """Irreducible chains made of ``wells`` aperiodic blocks (see :func:`stochastic_matrices`) joined
    by weak escape moves: P = (W + eps C) / row sums, W the blocks' weights and C integer weights
    1..4 from each well to the next one (cyclically; symmetric when the blocks are reversible, so
    that P is reversible too), escape probabilities O(eps). eps is drawn log-uniform so that the spectral gap lands in ``gap``, then rescaled once by the ratio of
    the target to the certified gap; the instance's ``gap`` is that certified value
    (:attr:`mlmix.theory.chain.markov_chain.Chain.additive_gap`: the spectral gap of (P + P*)/2, which is P's own
    gap when P is reversible) and instances outside the range are rejected
    (Hypothesis draws again; the gap is linear in eps to first order, so one rescaling
    nearly always lands inside)."""

    lo, hi = gap
    if not 0 < lo <= hi < 1:
        raise ValueError(f"the gap range must satisfy 0 < low <= high < 1, got {gap}")
    base = draw(stochastic_matrices(max(max_states, 2 * wells), reversible=reversible, closed_classes=wells,
                                    transient=False))
    W = base.weights
    N = W.shape[0]
    rng = np.random.default_rng(draw(seeds()))
    C = np.zeros((N, N))  # cross weights from each well to the next (and back, symmetric, when reversible)
    for c in range(wells):
        a, b = base.classes[c], base.classes[(c + 1) % wells]
        w = rng.integers(1, 5, size=(a.size, b.size)).astype(float)
        C[np.ix_(a, b)] += w
        if base.reversible:
            C[np.ix_(b, a)] += w.T
    target = math.exp(draw(st.floats(math.log(lo), math.log(hi))))

    def build(eps: float) -> tuple[np.ndarray, Any]:
        M = W + eps * C
        P = M / M.sum(axis=1, keepdims=True)
        return P, Chain(P).additive_gap

    eps = target
    P, g = build(eps)
    if g.resolved and g.value > 0:
        eps = min(0.5, eps * target / g.value)
        P, g = build(eps)
    assume(g.resolved and lo <= g.value <= hi)
    return MatrixInstance(P, [np.arange(N)], np.arange(0), 1, base.reversible,
                          dict(base.params, wells=wells, eps=eps), gap=g, weights=W + eps * C)


# ----------------------------------------------------------------------------------------------
# Score tables at a temperature, models on a given graph, frames of a tabulated model

#: Families of :func:`score_tables`.
TABLE_KINDS = ("any", "incompatible", "near-compatible", "compatible", "metastable")


@st.composite
def _two_well_sources(draw, max_states: int) -> tuple[Conditionals, str, dict]:
    """The score table of a two-well basin instance (:func:`basin_instances`, margins 3..6), at T = 1."""
    inst = draw(basin_instances(min(max_states, 243), two_wells=True, max_ratio=1e9, margins=(6, 12)))
    return inst.source.at_temperature(1.0), "two-well", dict(inst.params, basin=np.flatnonzero(inst.basin).tolist())


@st.composite
def score_tables(draw, temperature: tuple[float, float] = (T_MIN, T_MAX), max_states: int = MAX_STATES,
                 kind: str = "any", max_ratio: float = 200.0) -> Instance:
    """A source of conditionals tabulated as scores (``kind``: "incompatible": half-integer or
    Gaussian tables, perturbed joints; "near-compatible": a Gaussian joint plus noise 1e-3..0.1;
    "compatible": joints, Ising/Potts, product tables; "metastable": two wells with margins 3..6
    boosted into the scores (:func:`basin_instances`), whose gaps fall like e^{-margin/T};
    "any": each of incompatible, compatible and metastable a third of the time; the metastable tables
    are incompatible too) at a
    temperature log-uniform on ``temperature``, raised when needed so that spread/T <= ``max_ratio``
    (every conditional stays above e^{-max_ratio}, so nothing underflows)."""
    if kind not in TABLE_KINDS:
        raise ValueError(f"kind must be one of {TABLE_KINDS}, got {kind!r}")
    T = draw(temperatures(*temperature))
    if kind == "any":
        kind = draw(st.sampled_from(("incompatible", "compatible", "metastable")))
    sources = {"incompatible": incompatible_sources, "near-compatible": near_compatible_sources,
               "compatible": compatible_sources, "metastable": _two_well_sources}[kind]
    src, name, params = draw(sources(max_states))
    table = src if isinstance(src, ScoreTable) else ScoreTable.from_conditionals(src)
    return Instance(tempered(table, T, max_ratio), name, params)


@st.composite
def graph_models(draw, graph: nx.Graph | None = None, q: int = 2, max_sites: int = 6,
                 temperature: tuple[float, float] = (T_MIN, T_MAX), coupling: int = 3) -> Instance:
    """An Ising (q = 2) or Potts (q >= 3) model on ``graph`` (default: a random graph on 2..max_sites
    sites, any edge set) with couplings k/2, |k| <= ``coupling``, on every edge and fields k/2,
    |k| <= 2, at a temperature log-uniform on ``temperature``. Shrinks to zero couplings and fields
    on the smallest graph."""
    if graph is None:
        n = draw(st.integers(2, max_sites))
        pairs = list(combinations(range(n), 2))
        graph = nx.empty_graph(n)
        graph.add_edges_from(_edge_list(n, draw(arrays(bool, len(pairs), fill=st.nothing()))))
    graph = nx.convert_node_labels_to_integers(graph, ordering="sorted")
    n, edges = graph.number_of_nodes(), sorted(tuple(sorted(e)) for e in graph.edges())
    J = draw(half_integers(max(len(edges), 1), coupling))[: len(edges)]
    couplings = {e: float(j) for e, j in zip(edges, J)}
    if q == 2:
        h = draw(half_integers(n, 2))
        src: Conditionals = IsingModel(graph, couplings, h)
    else:
        h = draw(half_integers((n, q), 2))
        src = PottsModel(graph, q, couplings, h)
    T = draw(temperatures(*temperature))
    params = {"edges": [list(e) for e in edges], "J": [couplings[e] for e in edges], "h": h.tolist()}
    return Instance(src.at_temperature(T), "ising" if q == 2 else f"potts-{q}", params)


class _SubFrame(Conditionals):
    """The conditionals of a tabulated source restricted to a sub-frame: the sites ``free`` vary over
    the symbols ``alphabet`` of the parent, the other sites hold ``fixed`` (parent symbols); each
    conditional is the parent's softmax renormalised over the alphabet (the parent's scores, kept)."""

    def __init__(self, parent: Conditionals, free: tuple[int, ...], fixed: dict[int, int],
                 alphabet: tuple[int, ...]) -> None:
        super().__init__(StateSpace(len(alphabet), len(free)), parent.temperature)
        self.parent, self.free, self.fixed, self.alphabet = parent, free, fixed, np.asarray(alphabet)

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        full = np.empty((contexts.shape[0], self.parent.space.length), dtype=np.int64)
        for i, v in self.fixed.items():
            full[:, i] = v
        full[:, list(self.free)] = self.alphabet[contexts]
        return self.parent.site_scores(full, self.free[site])[:, self.alphabet]


@st.composite
def frames(draw, table: Conditionals, max_length: int = 3, max_alphabet: int = 4,
           temperature: tuple[float, float] | None = None) -> Instance:
    """Sub-frames of a tabulated model (an :class:`~mlmix.empirical.models.tabulate.MLMTable` or any source
    over V^n): 1..max_length of its positions stay free, the others are fixed to drawn symbols, and
    the free positions range over 2..max_alphabet of its symbols; the result is the exact score
    table of that smaller frame (the model's own scores, renormalised over the chosen alphabet), at
    the table's temperature or one log-uniform on ``temperature``. Shrinks to the first position
    free over the first two symbols, the others fixed to symbol 0. ``params`` names the frame with
    the model's tokens when the table has them."""
    space = table.space
    n, q = space.length, space.vocab_size
    if q < 2:
        raise ValueError("the table's alphabet must have at least 2 symbols")
    length = draw(st.integers(1, min(max_length, n)))
    free = tuple(sorted(draw(st.lists(st.integers(0, n - 1), min_size=length, max_size=length, unique=True))))
    fixed = {i: draw(st.integers(0, q - 1)) for i in range(n) if i not in free}
    size = draw(st.integers(2, min(max_alphabet, q)))
    alphabet = tuple(sorted(draw(st.lists(st.integers(0, q - 1), min_size=size, max_size=size, unique=True))))
    sub = ScoreTable.from_conditionals(_SubFrame(table, free, fixed, alphabet))
    T = draw(temperatures(*temperature)) if temperature is not None else table.temperature
    tokens = getattr(table, "tokens", None)
    name = (lambda v: tokens[v]) if tokens is not None else (lambda v: v)
    params = {"free": list(free), "fixed": {str(i): name(v) for i, v in fixed.items()},
              "alphabet": [name(v) for v in alphabet]}
    return Instance(sub.at_temperature(T), "frame", params)
