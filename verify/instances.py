"""Hypothesis strategies that build instances for the theorems of paper G, in the regimes the
theorems are about.

Shapes (|V|, n) are drawn from every pair with n >= 2 and |V|^n <= ``max_states`` (729 for dense
checks, 81 for Theorem 5's Wasserstein programmes), the shapes with n >= 4 and |V| >= 3 repeated so
that they make half of the list whenever one fits, and the generic sources drawn on them first
(:func:`any_sources`, :func:`half_large`) so that 40-55% of a search's instances are such shapes (``mlmix verify --stats`` prints the share each
search reached; tests/test_verify_distributions.py measures it); shrinking goes to the smallest space.

Sources of conditionals come in two flavours:

* *generic*: Gaussian scores drawn from a seed (``ScoreTable.random``: incompatible, like an MLM;
  ``LogWeightTable.random``: a generic joint; Potts models on G(n, p) graphs; product tables, whose
  sites do not interact; joints perturbed by small Gaussian noise: incompatible but nearly
  reversible). Every entry differs; an instance is described by (|V|, n, seed, scale).
* *shrinkable*: integer or half-integer parameters drawn entry by entry (``fill=nothing``: no
  repeated fill value), so a counterexample shrinks to a handful of small numbers. Kept to
  spaces of at most 64 states.

Temperatures are log-uniform on [0.05, 20]; chain-level theorems keep spread/T below ``max_ratio``
(so every probability stays above e^{-max_ratio}).

Instances placed in the regime of one result (contraction, basins, drift, zero conditionals) are
in :mod:`mlmix.verify.regime_instances`; stochastic matrices, score tables at a temperature, graph models
and frames in :mod:`mlmix.verify.chain_instances`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import networkx as nx
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mlmix.theory.kernels.scan_and_mh import Truncated
from mlmix.theory.local.rectangles import is_compatible
from mlmix.theory.sources.conditionals import (
    Conditionals,
    IsingModel,
    LogWeightTable,
    PottsModel,
    ScoreTable,
)
from mlmix.theory.sources.contexts import score_table
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_temperature

T_MIN, T_MAX = 0.05, 20.0

#: Default bound on |V|^n for dense checks.
MAX_STATES = 729

#: Largest space of the entry-by-entry (shrinkable) sources (81: {0,1,2}^4 is reachable).
SHRINKABLE_STATES = 81

#: Scales of Gaussian scores (standard deviations).
SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass(eq=False)
class Instance:
    """A source of conditionals at a temperature plus what a theorem needs about it.

    kind/params: how it was built (JSON-serialisable, enough to rebuild it);
    weights: positive integer weights of an exact rational instance (joint (|V|^n,) or per-fibre
        table (n, |V|^(n-1), |V|)), whose conditionals are w / sum w at T = 1;
    basin: boolean mask over V^n (Thm 8); eps: TV level of t_mix; symbols/level: the set A and
        boundary level k of the drift statistic (section 5.4).
    """

    source: Conditionals
    kind: str
    params: dict = field(default_factory=dict)
    weights: np.ndarray | None = None
    basin: np.ndarray | None = None
    eps: float = 0.25
    symbols: tuple[int, ...] | None = None
    level: int | None = None
    _reversible: bool | None = field(default=None, repr=False)

    @property
    def space(self) -> StateSpace:
        return self.source.space

    @property
    def reversible(self) -> bool | None:
        """Whether the Glauber chain is reversible: for positive conditionals, iff they are compatible
        (Thm 3 and its converse); None when some conditional is zero."""
        if self._reversible is None and np.isfinite(score_table(self.source)).all():
            self._reversible = bool(is_compatible(self.source))
        return self._reversible

    def regime(self) -> dict:
        return {"n": self.space.length, "vocab": self.space.vocab_size, "temperature": self.source.temperature,
                "states": self.space.size, "reversible": self.reversible}

    def describe(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "vocab_size": self.space.vocab_size, "length": self.space.length,
                               "temperature": round(self.source.temperature, 6)}
        out.update(self.params)
        if self.basin is not None:
            out["basin"] = np.flatnonzero(self.basin).tolist()
        if self.eps != 0.25:
            out["eps"] = self.eps
        if self.symbols is not None:
            out["symbols_A"] = list(self.symbols)
            out["level"] = self.level
        return out

    def __repr__(self) -> str:
        return f"Instance({self.describe()})"


# ----------------------------------------------------------------------------------------------
# Small pieces


#: Resolution of the log-uniform temperature grid (steps per unit of log T).
_T_STEPS = 200


def temperatures(low: float = T_MIN, high: float = T_MAX) -> st.SearchStrategy[float]:
    """T log-uniform on a grid of [low, high] (200 steps per unit of log T); shrinks towards T = 1
    when 1 is inside, else towards ``low``."""
    lo, hi = math.ceil(math.log(low) * _T_STEPS), math.floor(math.log(high) * _T_STEPS)
    return st.integers(lo, hi).map(lambda k: float(round(math.exp(k / _T_STEPS), 6)))


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**31 - 1)


def max_length(vocab_size: int, max_states: int, cap: int = 9) -> int:
    return max(1, min(cap, int(math.floor(math.log(max_states) / math.log(vocab_size) + 1e-9))))


def shape_options(max_states: int, vocab_sizes: tuple[int, ...] = (2, 3, 4), min_length: int = 2,
                  cap: int = 9) -> list[tuple[int, int]]:
    """Every (|V|, n) with |V| in ``vocab_sizes``, min_length <= n <= cap, |V|^n <= max_states,
    smallest spaces first (Hypothesis shrinks towards the first); shapes with n >= 4 and |V| >= 3 are
    repeated so that they make half of the list (at least) whenever one fits."""
    out = [(q, n) for q in vocab_sizes for n in range(min_length, cap + 1) if q**n <= max_states]
    if not out:
        raise ValueError(f"no shape with |V| in {vocab_sizes}, n >= {min_length} fits in {max_states} states")
    large = [(q, n) for q, n in out if q >= 3 and n >= 4]
    if large:
        out += large * (math.ceil((len(out) - len(large)) / len(large)) - 1)
    return sorted(out, key=lambda s: (s[0] ** s[1], s[0]))


def shapes(max_states: int = MAX_STATES, vocab_sizes: tuple[int, ...] = (2, 3, 4), min_length: int = 2,
           cap: int = 9, large: bool = False) -> st.SearchStrategy[tuple[int, int]]:
    """(|V|, n) uniform over :func:`shape_options`; ``large``: only those with n >= 4 and |V| >= 3."""
    options = shape_options(max_states, vocab_sizes, min_length, cap)
    if large:
        options = sorted({(q, n) for q, n in options if q >= 3 and n >= 4}, key=lambda s: (s[0] ** s[1], s[0]))
    return st.sampled_from(options)


def has_large_shape(max_states: int) -> bool:
    """Whether some shape with n >= 4 and |V| >= 3 fits in ``max_states`` (3^4 = 81)."""
    return max_states >= 81


def half_integers(shape: int | tuple[int, ...], bound: int) -> st.SearchStrategy[np.ndarray]:
    """Arrays of k/2 with |k| <= bound, every entry drawn on its own (shrink to zeros)."""
    return arrays(np.int64, shape, elements=st.integers(-bound, bound), fill=st.nothing()).map(lambda a: a / 2.0)


def positive_integers(shape: int | tuple[int, ...], high: int = 6) -> st.SearchStrategy[np.ndarray]:
    """Arrays of integers in [1, high], every entry drawn on its own (shrink to ones)."""
    return arrays(np.int64, shape, elements=st.integers(1, high), fill=st.nothing())


def score_spread(source: Conditionals) -> float:
    """max over sites and contexts of max_v s - min_v s (T-independent)."""
    table = score_table(source)
    return float((table.max(axis=-1) - table.min(axis=-1)).max())


def tempered(source: Conditionals, temperature: float, max_ratio: float) -> Conditionals:
    """The source at max(T, spread / max_ratio), so every probability is >= e^{-max_ratio}."""
    spread = score_spread(source)
    return source.at_temperature(max(check_temperature(temperature), spread / max_ratio))


def _edge_list(n: int, mask: np.ndarray) -> list[tuple[int, int]]:
    return [pair for pair, keep in zip(combinations(range(n), 2), mask) if keep]


def _interacting(mask: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An edge mask and couplings with at least one edge of nonzero coupling: the first pair becomes an
    edge with J = 1/2 when no edge carries a coupling (an edgeless or zero-coupling model has Delta = 0,
    on which the influence bounds hold with equality 0 = 0)."""
    if not (mask & (J != 0)).any():
        mask, J = mask.copy(), J.copy()
        mask[0], J[0] = True, 0.5
    return mask, J


# ----------------------------------------------------------------------------------------------
# Shrinkable sources (at T = 1; the temperature is applied by :func:`instances`)


@st.composite
def ising_sources(draw, max_states: int = SHRINKABLE_STATES) -> tuple[Conditionals, str, dict]:
    """Ising model on a random graph (an edge mask over the pairs) with at least one edge of nonzero
    coupling (:func:`_interacting`), couplings and fields k/2."""
    n = draw(st.integers(2, max_length(2, min(max_states, SHRINKABLE_STATES))))
    pairs = n * (n - 1) // 2
    mask, J = _interacting(draw(arrays(bool, pairs, fill=st.nothing())), draw(half_integers(pairs, 3)))
    h = draw(half_integers(n, 2))
    edges = _edge_list(n, mask)
    graph = nx.empty_graph(n)
    graph.add_edges_from(edges)
    couplings = {e: float(j) for e, j in zip(combinations(range(n), 2), J) if e in set(edges)}
    params = {"edges": [list(e) for e in edges], "J": [couplings[e] for e in edges], "h": h.tolist()}
    return IsingModel(graph, couplings, h), "ising", params


@st.composite
def potts_sources(draw, max_states: int = SHRINKABLE_STATES) -> tuple[Conditionals, str, dict]:
    """Potts model on a random graph with at least one edge of nonzero coupling (:func:`_interacting`),
    couplings and fields k/2 of shape (n, q)."""
    q, n = draw(shapes(min(max_states, SHRINKABLE_STATES), vocab_sizes=(3, 4, 2)))
    pairs = n * (n - 1) // 2
    mask, J = _interacting(draw(arrays(bool, pairs, fill=st.nothing())), draw(half_integers(pairs, 3)))
    h = draw(half_integers((n, q), 2))
    edges = _edge_list(n, mask)
    graph = nx.empty_graph(n)
    graph.add_edges_from(edges)
    couplings = {e: float(j) for e, j in zip(combinations(range(n), 2), J) if e in set(edges)}
    params = {"edges": [list(e) for e in edges], "J": [couplings[e] for e in edges], "h": h.tolist()}
    return PottsModel(graph, q, couplings, h), "potts", params


@st.composite
def log_weight_sources(draw, max_states: int = SHRINKABLE_STATES) -> tuple[Conditionals, str, dict]:
    """A joint with log-weights k/2 on every state (compatible, no structure)."""
    q, n = draw(shapes(min(max_states, SHRINKABLE_STATES)))
    space = StateSpace(q, n)
    w = draw(half_integers(space.size, 4))
    return LogWeightTable(space, w), "log-weights", {"log_weights": w.tolist()}


@st.composite
def score_table_sources(draw, max_states: int = SHRINKABLE_STATES) -> tuple[Conditionals, str, dict]:
    """Scores k/2 for every (site, context, symbol): generally incompatible, like an MLM."""
    q, n = draw(shapes(min(max_states, SHRINKABLE_STATES)))
    space = StateSpace(q, n)
    s = draw(half_integers((n, q ** (n - 1), q), 4))
    return ScoreTable(space, s), "score-table", {"scores": s.tolist()}


@st.composite
def tabulated_compatible_sources(draw, max_states: int = SHRINKABLE_STATES) -> tuple[Conditionals, str, dict]:
    """A compatible joint re-expressed as a score table (no log_joint: compatibility must be found)."""
    src, kind, params = draw(st.one_of(log_weight_sources(max_states), ising_sources(max_states)))
    return ScoreTable.from_conditionals(src), f"table-of-{kind}", params


@st.composite
def perturbed_compatible_sources(draw, max_states: int = SHRINKABLE_STATES) -> tuple[Conditionals, str, dict]:
    """A tabulated compatible joint with one score changed by a nonzero k/2 (incompatible unless
    the change is a constant shift of a whole fibre, which it is not for |V| >= 2)."""
    src, kind, params = draw(tabulated_compatible_sources(max_states))
    table = src.table.copy()
    n, contexts, q = table.shape
    i, c, v = draw(st.integers(0, n - 1)), draw(st.integers(0, contexts - 1)), draw(st.integers(0, q - 1))
    delta = draw(st.integers(1, 4).flatmap(lambda k: st.sampled_from([k / 2, -k / 2])))
    table[i, c, v] += delta
    params = dict(params, perturbed={"site": i, "context": c, "symbol": v, "delta": delta})
    return ScoreTable(src.space, table), f"perturbed-{kind}", params


# ----------------------------------------------------------------------------------------------
# Generic sources: Gaussian parameters from a seed


@st.composite
def gaussian_table_sources(draw, max_states: int = MAX_STATES, large: bool = False) -> tuple[Conditionals, str, dict]:
    """Scores i.i.d. N(0, scale^2) for every (site, context, symbol) (incompatible, like an MLM)."""
    q, n = draw(shapes(max_states, large=large))
    seed, scale = draw(seeds()), draw(st.sampled_from(SCALES))
    return ScoreTable.random(q, n, seed=seed, scale=scale), "gaussian-table", {"seed": seed, "scale": scale}


@st.composite
def gaussian_joint_sources(draw, max_states: int = MAX_STATES, large: bool = False) -> tuple[Conditionals, str, dict]:
    """Log-weights i.i.d. N(0, scale^2) on every state: a generic compatible joint."""
    q, n = draw(shapes(max_states, large=large))
    seed, scale = draw(seeds()), draw(st.sampled_from(SCALES))
    return LogWeightTable.random(StateSpace(q, n), seed=seed, scale=scale), "gaussian-joint", \
        {"seed": seed, "scale": scale}


@st.composite
def gaussian_potts_sources(draw, max_states: int = MAX_STATES, large: bool = False) -> tuple[Conditionals, str, dict]:
    """Potts model on a G(n, p) graph with N(0, scale^2) couplings and N(0, 1/4) fields."""
    q, n = draw(shapes(max_states, large=large))
    seed, scale = draw(seeds()), draw(st.sampled_from(SCALES))
    p = draw(st.sampled_from((0.3, 0.6, 1.0)))
    graph = nx.gnp_random_graph(n, p, seed=seed)
    return PottsModel.random(graph, q, seed=seed, coupling_scale=scale), "gaussian-potts", \
        {"seed": seed, "scale": scale, "edge_probability": p}


def product_table(q: int, n: int, seed: int, scale: float) -> ScoreTable:
    """Sites that ignore each other: s_i(v | x_{-i}) = g_i(v), g_i ~ N(0, scale^2) (rho = 0)."""
    g = scale * np.random.default_rng(seed).standard_normal((n, 1, q))
    return ScoreTable(StateSpace(q, n), np.broadcast_to(g, (n, q ** (n - 1), q)).copy())


@st.composite
def product_sources(draw, max_states: int = MAX_STATES) -> tuple[Conditionals, str, dict]:
    """Product tables (:func:`product_table`): compatible, rho = 0."""
    q, n = draw(shapes(max_states))
    seed, scale = draw(seeds()), draw(st.sampled_from(SCALES))
    return product_table(q, n, seed, scale), "product", {"seed": seed, "scale": scale}


@st.composite
def near_compatible_sources(draw, max_states: int = MAX_STATES, large: bool = False) -> tuple[Conditionals, str, dict]:
    """A Gaussian joint tabulated as scores plus N(0, noise^2) noise, noise in {1e-3, 1e-2, 0.1}:
    incompatible (non-reversible) but close to a reversible chain."""
    src, _, params = draw(gaussian_joint_sources(max_states, large))
    noise = draw(st.sampled_from((1e-3, 1e-2, 0.1)))
    table = ScoreTable.from_conditionals(src).table
    rng = np.random.default_rng(params["seed"] + 1)
    return ScoreTable(src.space, table + noise * rng.standard_normal(table.shape)), "near-compatible", \
        dict(params, noise=noise)


def compatible_sources(max_states: int = MAX_STATES) -> st.SearchStrategy:
    small = min(max_states, SHRINKABLE_STATES)
    return st.one_of(ising_sources(small), potts_sources(small), log_weight_sources(small),
                     tabulated_compatible_sources(small), gaussian_joint_sources(max_states),
                     gaussian_potts_sources(max_states), product_sources(max_states))


def incompatible_sources(max_states: int = MAX_STATES) -> st.SearchStrategy:
    small = min(max_states, SHRINKABLE_STATES)
    return st.one_of(score_table_sources(small), perturbed_compatible_sources(small),
                     gaussian_table_sources(max_states), near_compatible_sources(max_states))


def any_sources(max_states: int = MAX_STATES) -> st.SearchStrategy:
    """Incompatible sources twice as often as compatible ones (MLMs are incompatible); where a shape with
    n >= 4 and |V| >= 3 fits, such shapes (:func:`large_sources`) are an explicit first choice of weight
    2/3 (Hypothesis neither draws the branches of nested ``one_of`` uniformly nor a boolean evenly; the
    measured share is 40-55%, tests/test_verify_distributions.py); shrinking goes to the generic branch."""
    generic = st.one_of(incompatible_sources(max_states), compatible_sources(max_states),
                        gaussian_table_sources(max_states))
    if not has_large_shape(max_states):
        return generic
    return st.sampled_from((False, True, True)).flatmap(lambda large: large_sources(max_states) if large else generic)


def large_sources(max_states: int = MAX_STATES) -> st.SearchStrategy:
    """Generic sources on shapes with n >= 4 and |V| >= 3 only (81 to ``max_states`` states), incompatible
    three times in five."""
    return st.one_of(gaussian_table_sources(max_states, True), near_compatible_sources(max_states, True),
                     gaussian_table_sources(max_states, True), gaussian_joint_sources(max_states, True),
                     gaussian_potts_sources(max_states, True))


def half_large(other: st.SearchStrategy, max_states: int = MAX_STATES, max_ratio: float = 30.0) -> st.SearchStrategy:
    """Nominally two draws in three (measured: 40-55%): :func:`instances` of :func:`large_sources` (n >= 4,
    |V| >= 3, up to ``max_states`` states); the others: ``other`` (where shrinking goes). An explicit
    first choice, since Hypothesis does not spread its draws evenly over the branches of ``one_of``."""
    if not has_large_shape(max_states):
        return other
    large = instances(large_sources(max_states), max_states, max_ratio)
    return st.sampled_from((False, True, True)).flatmap(lambda big: large if big else other)


@st.composite
def instances(draw, sources: st.SearchStrategy | None = None, max_states: int = MAX_STATES,
              max_ratio: float = 30.0, eps: bool = False) -> Instance:
    """A source from ``sources`` (default: any) at a temperature log-uniform on [0.05, 20],
    raised if needed to keep spread/T <= max_ratio; ``eps`` draws the t_mix level from {1/4, 1/10, 1/100}."""
    T = draw(temperatures())  # drawn first: Hypothesis varies early draws more freely
    src, kind, params = draw(sources if sources is not None else any_sources(max_states))
    level = draw(st.sampled_from([0.25, 0.1, 0.01])) if eps else 0.25
    return Instance(tempered(src, T, max_ratio), kind, params, eps=level)



@st.composite
def truncation_levels(draw, q: int) -> tuple[int | None, float | None]:
    """(top_k, top_p) for a vocabulary of q symbols: each absent, an edge (k = |V|, k = 1, p = 1) or in
    between (p in {0.3, 0.5, 0.7, 0.9, 0.95, 0.99}), never both absent."""
    k = draw(st.sampled_from((None, None, q, 1) + tuple(range(2, q))))
    p = draw(st.sampled_from((None, 1.0, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99)))
    return (q, p) if k is None and p is None else (k, p)


@st.composite
def truncated_instances(draw, max_states: int = MAX_STATES, sources: st.SearchStrategy | None = None) -> Instance:
    """A source from ``sources`` (default: :func:`any_sources`, half-integer score tables, whose conditionals
    tie, among them) at a temperature with spread/T <= 30, then truncated by top-k / top-p
    (:class:`~mlmix.theory.kernels.scan_and_mh.Truncated`: conditionals with zeros)."""
    base = draw(instances(sources if sources is not None else st.one_of(
        any_sources(max_states), score_table_sources(min(max_states, SHRINKABLE_STATES))), max_states))
    k, p = draw(truncation_levels(base.space.vocab_size))
    return Instance(Truncated(base.source, top_k=k, top_p=p), f"truncated-{base.kind}",
                    dict(base.params, top_k=k, top_p=p))

# ----------------------------------------------------------------------------------------------
# Exact rational instances (T = 1, conditionals w / sum w)


@st.composite
def rational_joint_instances(draw, max_states: int = 16) -> Instance:
    """A joint proportional to positive integer weights; its conditionals are exact rationals."""
    q, n = draw(shapes(max_states))
    space = StateSpace(q, n)
    w = draw(positive_integers(space.size))
    return Instance(LogWeightTable(space, np.log(w.astype(np.float64))), "rational-joint",
                    {"weights": w.tolist()}, weights=w)


@st.composite
def rational_table_instances(draw, max_states: int = 16) -> Instance:
    """Conditionals pi_i(v|x_{-i}) = w[i, c, v] / sum_u w[i, c, u] for positive integers w
    (generally incompatible)."""
    q, n = draw(shapes(max_states))
    space = StateSpace(q, n)
    w = draw(positive_integers((n, q ** (n - 1), q)))
    return Instance(ScoreTable(space, np.log(w.astype(np.float64))), "rational-table",
                    {"weights": w.tolist()}, weights=w)
