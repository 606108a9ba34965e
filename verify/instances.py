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
(so every probability stays above e^{-max_ratio}). Contraction instances (Thm 5, Cor 7) place T
relative to the influence: T = u T* (T* the Cor. 7 temperature), or the temperature at which rho
reaches a target in [0.5, 0.999] (rho close to 1), or product tables at low T (the near-deterministic
chains on which Thm 5's t_mix bound is tightest). Basins for Thm 8 carry margins boosted into the
score table and reach gamma/T up to 40 (metastable chains: spectral gaps down to 1e-17).
"""

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
from mlmix.theory.kernels.scan_and_mh import Truncated
from mlmix.theory.local.influence import contraction_temperature, influence_matrix, score_oscillation
from mlmix.theory.local.margins import basin_margin
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


# ----------------------------------------------------------------------------------------------
# Thm 5 / Cor 7: temperatures placed by the influence


def cor7_temperature(source: Conditionals) -> float:
    """T* = (1/4) max_j sum_i Delta_ij (Cor. 7), with 0 for an oscillation at the rounding level of the
    scores (Delta below 1e-12 x the score spread: e.g. a graph without edges)."""
    t_star = contraction_temperature(score_oscillation(source).delta_ij)
    return 0.0 if t_star <= 1e-12 * max(1.0, score_spread(source)) else t_star


def critical_temperature(source: Conditionals, target: float, steps: int = 20, grid: int = 24,
                         max_ratio: float = 60.0) -> float | None:
    """A temperature T with rho(T) <= target and rho(T) as close to the target as a log grid of ``grid``
    temperatures between max(T*/200, spread/max_ratio) and T*/target (T* the Cor. 7 temperature,
    where rho <= target is guaranteed), refined by bisection towards the neighbouring grid point with
    rho > target, finds; None when the sites do not interact. rho need not be monotone in T (it
    vanishes again at low T, where the conditionals saturate), hence the grid."""
    t_star = cor7_temperature(source)
    if t_star == 0:
        return None
    rho = lambda T: influence_matrix(source.at_temperature(T)).rho
    lo, hi = math.log(max(t_star / 200, score_spread(source) / max_ratio)), math.log(t_star / target)
    if lo >= hi:
        return math.exp(hi)
    logs = np.linspace(lo, hi, grid)
    values = np.array([rho(math.exp(v)) for v in logs])
    below = np.flatnonzero(values <= target)
    k = int(below[np.argmax(values[below])])  # the admissible grid point closest to the target
    if k == 0 or values[k - 1] <= target:
        return math.exp(logs[k])
    a, b = logs[k - 1], logs[k]  # rho(a) > target >= rho(b)
    for _ in range(steps):
        mid = (a + b) / 2
        if rho(math.exp(mid)) <= target:
            b = mid
        else:
            a = mid
    return math.exp(b)


@st.composite
def contraction_instances(draw, sources: st.SearchStrategy | None = None, max_states: int = MAX_STATES,
                          eps: bool = True, low: float = 0.5, high: float = 8.0,
                          modes: tuple[str, ...] = ("cor7", "critical", "product-cold")) -> Instance:
    """Instances for Thm 5 and Cor 7 in three modes: T = u T* with u log-uniform on [low, high]
    ("cor7"); the temperature at which rho reaches a target in {0.5, 0.8, 0.9, 0.99, 0.999}
    ("critical", rho close to 1); product tables at T in [0.05, 0.5] ("product-cold": rho = 0,
    near-deterministic sites)."""
    mode = draw(st.sampled_from(modes + tuple(m for m in modes if m == "critical")))  # rho close to 1 twice as often
    level = draw(st.sampled_from([0.25, 0.1, 0.01])) if eps else 0.25
    if mode == "product-cold":
        src, kind, params = draw(product_sources(max_states))
        T = draw(temperatures(0.05, 0.5))
        return Instance(src.at_temperature(T), kind, dict(params, mode=mode), eps=level)
    src, kind, params = draw(sources if sources is not None else any_sources(max_states))
    t_star = cor7_temperature(src)
    if t_star == 0:  # sites that do not interact are the "product-cold" mode's business: draw a generic table
        src, kind, params = draw(gaussian_table_sources(max_states))
        t_star = cor7_temperature(src)
    if mode == "critical":
        target = draw(st.sampled_from((0.5, 0.8, 0.9, 0.99, 0.999)))
        T = critical_temperature(src, target)
        params = dict(params, mode=mode, rho_target=target)
    else:
        u = draw(temperatures(low, high))
        T = t_star * u if t_star > 0 else draw(temperatures())
        params = dict(params, mode="cor7", temperature_over_cor7=round(u, 6))
    return Instance(src.at_temperature(min(T_MAX, max(T, score_spread(src) / 200.0, 1e-3))), kind, params, eps=level)


def mostly_incompatible(max_states: int) -> st.SearchStrategy:
    """Incompatible (non-reversible) sources two times in three: the chains paper G is about."""
    return st.one_of(incompatible_sources(max_states), incompatible_sources(max_states), compatible_sources(max_states))


def high_temperature_instances(sources: st.SearchStrategy | None = None, max_states: int = MAX_STATES,
                               low: float = 0.25, high: float = 8.0, eps: bool = True) -> st.SearchStrategy:
    """T = u T* only (the "cor7" mode of :func:`contraction_instances`), u log-uniform on [low, high]."""
    @st.composite
    def build(draw):
        src, kind, params = draw(sources if sources is not None else any_sources(max_states))
        u = draw(temperatures(low, high))
        t_star = cor7_temperature(src)
        T = min(T_MAX, max(T_MIN, t_star * u)) if t_star > 0 else draw(temperatures())
        level = draw(st.sampled_from([0.25, 0.1])) if eps else 0.25
        return Instance(src.at_temperature(T), kind, dict(params, temperature_over_cor7=round(u, 6)), eps=level)
    return build()


# ----------------------------------------------------------------------------------------------
# Thm 8: basins with a uniform local margin


def boost_basin(table: np.ndarray, space: StateSpace, basin: np.ndarray, margin: float) -> None:
    """In place: in every fibre (site i, context x_{-i}) that meets both B and B^c, raise the scores
    of B's members to (max of the fibre) + margin, all equal. Then Assumption 1 holds on B with
    gamma >= margin: exit-causing sites hold a (tied) argmax, exits lie >= margin below."""
    n, q = space.length, space.vocab_size
    for i in range(n):
        place = int(space.place_values[i])
        idx = np.arange(space.size)
        base = idx[(idx // place) % q == 0]
        members = base[:, None] + place * np.arange(q)  # (contexts, q) in context-index order
        inside = basin[members]
        mixed = inside.any(axis=1) & ~inside.all(axis=1)
        # ScoreTable context index of x_{-i}: the remaining digits in order, as base enumerates
        rest = np.delete(space.decode(base), i, axis=1)
        ctx = rest @ (q ** np.arange(n - 2, -1, -1, dtype=np.int64)) if n > 1 else np.zeros(base.size, np.int64)
        rows = table[i][ctx[mixed]]
        boosted = np.where(inside[mixed], rows.max(axis=1, keepdims=True) + margin, rows)
        table[i, ctx[mixed]] = boosted


@st.composite
def basin_instances(draw, max_states: int = 64, two_wells: bool = False, max_ratio: float = 40.0,
                    min_length: int = 1, margins: tuple[int, int] = (1, 6)) -> Instance:
    """A score table and a basin B (Hamming ball of radius 0, 1 or 2 around a centre, B != V^n) on
    which Assumption 1 holds by construction with margin gamma_0 in {1/2, ..., 3}; scores are
    half-integers drawn entry by entry (small spaces) or Gaussian from a seed. Temperatures down to
    gamma/T = max_ratio (metastable chains). With ``two_wells`` a second singleton well at Hamming
    distance >= radius + 2 gets its own margin, so B can carry stationary mass <= 1/2 (Thm 8's mixing
    bound needs it). Margins are k/2 with k drawn in ``margins``."""
    T = draw(temperatures())
    q, n = draw(shapes(max_states, min_length=2 if two_wells else min_length))
    space = StateSpace(q, n)
    shape = (n, q ** (n - 1), q)
    if space.size <= 16 and draw(st.booleans()):
        scores = draw(half_integers(shape, 4))
        params: dict[str, Any] = {"scores": scores.tolist()}
    else:
        seed, scale = draw(seeds()), draw(st.sampled_from(SCALES))
        scores = scale * np.random.default_rng(seed).standard_normal(shape)
        params = {"seed": seed, "scale": scale}
    centre = draw(arrays(np.int64, n, elements=st.integers(0, q - 1), fill=st.nothing()))
    radius = draw(st.integers(0, min(2, n - 2))) if n >= 3 else 0
    states = space.all_states()
    dist = (states != centre).sum(axis=1)
    basin = dist <= radius
    if basin.all():
        basin = dist == 0
    margin = draw(st.integers(*margins)) / 2
    params.update(centre=centre.tolist(), radius=int(radius), margin=margin)
    table = scores.copy()
    if two_wells:
        far = np.flatnonzero(dist >= radius + 2)
        if far.size == 0:
            far = np.flatnonzero(dist >= 2)
            basin = dist == 0
        other = int(far[draw(st.integers(0, far.size - 1))])
        well = np.zeros(space.size, dtype=bool)
        well[other] = True
        second = draw(st.integers(*margins)) / 2
        boost_basin(table, space, well, second)
        params.update(second_well=states[other].tolist(), second_margin=second)
    boost_basin(table, space, basin, margin)
    src = tempered(ScoreTable(space, table), T, max_ratio)
    return Instance(src, "basin-table", params, basin=basin)


@st.composite
def metastable_instances(draw, max_states: int = 81, depth: tuple[float, float] = (18.0, 60.0)) -> Instance:
    """Two-well basin chains at gamma/T = u, u log-uniform on ``depth`` (escape probabilities e^{-u}:
    spectral gaps from ~1e-8 down to ~1e-26), T raised if needed so that spread/T <= 600."""
    inst = draw(basin_instances(max_states, two_wells=True, max_ratio=1e9))
    gamma = basin_margin(inst.source, inst.basin).gamma * inst.source.temperature  # in score units
    u = draw(temperatures(*depth))
    T = max(gamma / u, score_spread(inst.source) / 600.0)
    return Instance(inst.source.at_temperature(T), "metastable-basin", dict(inst.params, gamma_over_T=round(gamma / T, 3)),
                    basin=inst.basin)


@st.composite
def marginless_basin_instances(draw, max_states: int = 64) -> Instance:
    """Violates Assumption 1: a singleton basin {x} whose state is not an argmax at some site
    (score table with one exit symbol raised above x_i), at a low temperature T <= 0.25."""
    inst = draw(basin_instances(max_states))
    space, table = inst.space, inst.source.table.copy()
    x = space.decode(int(np.flatnonzero(inst.basin)[0]))
    i = draw(st.integers(0, space.length - 1))
    rest = np.delete(x, i)
    c = int(rest @ (space.vocab_size ** np.arange(space.length - 2, -1, -1))) if space.length > 1 else 0
    v = (int(x[i]) + 1) % space.vocab_size
    table[i, c, v] = table[i, c].max() + draw(st.integers(1, 4)) / 2
    basin = np.zeros(space.size, dtype=bool)
    basin[int(space.encode(x))] = True
    T = draw(temperatures(T_MIN, 0.25))
    return Instance(ScoreTable(space, table, T), "marginless-basin",
                    dict(inst.params, raised={"site": i, "symbol": v}), basin=basin)


# ----------------------------------------------------------------------------------------------
# Drift statistic (section 5.4)


@st.composite
def drift_instances(draw, sources: st.SearchStrategy | None = None, max_states: int = MAX_STATES,
                    max_ratio: float = 12.0) -> Instance:
    """A source with a proper non-empty symbol set A and a boundary level k in 1..n (spread/T kept
    below ``max_ratio`` because exit times from {N >= k} are solved for as well)."""
    inst = draw(instances(sources, max_states, max_ratio))
    q, n = inst.space.vocab_size, inst.space.length
    mask = draw(arrays(bool, q, fill=st.nothing()).filter(lambda m: m.any() and not m.all()))
    inst.symbols = tuple(int(v) for v in np.flatnonzero(mask))
    inst.level = draw(st.integers(1, n))
    return inst


def count_table(q: int, f: tuple[float, ...], noise: float = 0.0, seed: int = 0) -> ScoreTable:
    """Count-dependent conditionals on V^n, n = len(f): site i picks symbol 0 (the token w) with
    probability f[m], m = number of w among the other n - 1 sites, and each other symbol with
    probability (1 - f[m]) / (|V| - 1). Compatible (exchangeable: mu(x) ∝ g(N(x))) when noise = 0;
    ``noise`` adds N(0, noise^2) to every score (incompatible)."""
    n = len(f)
    space = StateSpace(q, n)
    rest = StateSpace(q, n - 1).all_states() if n > 1 else np.zeros((1, 0), dtype=np.int64)
    m = (rest == 0).sum(axis=1)
    p = np.asarray(f, dtype=np.float64)[m]
    row = np.empty((m.size, q))
    row[:, 0] = np.log(p)
    row[:, 1:] = np.log((1 - p) / (q - 1))[:, None]
    table = np.broadcast_to(row, (n, m.size, q)).copy()
    if noise:
        table += noise * np.random.default_rng(seed).standard_normal(table.shape)
    return ScoreTable(space, table)


def count_instance(q: int, f: tuple[float, ...], level: int, noise: float = 0.0, seed: int = 0,
                   kind: str = "count-chain") -> Instance:
    """:func:`count_table` as an instance with A = {0} and boundary level ``level``."""
    params = {"f": [float(v) for v in f], "noise": noise, "seed": seed}
    return Instance(count_table(q, f, noise, seed), kind, params, symbols=(0,), level=level)


@st.composite
def count_instances(draw, max_states: int = MAX_STATES, noise: bool = True) -> Instance:
    """Count-dependent chains attracted towards token 0 above a level k: f(m) drawn per level in
    [0.05, 0.95] with f(m) >= 1/2 from m = k - 1 on (positive drift on a band), plus optional noise."""
    q, n = draw(shapes(max_states, vocab_sizes=(2, 3), min_length=3))
    k = draw(st.integers(1, n - 1))
    f = tuple(draw(st.integers(5, 95)) / 100 if m < k - 1 else draw(st.integers(50, 95)) / 100 for m in range(n))
    level_noise = draw(st.sampled_from((0.0, 0.0, 0.1, 0.3))) if noise else 0.0
    return count_instance(q, f, k, level_noise, draw(seeds()) if level_noise else 0)


@dataclass(frozen=True)
class CountChain:
    """The binary count chain of :func:`count_table` (no noise) described by its level function f
    alone (n = len(f) can be large: the count N is itself a birth-death chain), with a level k."""

    f: tuple[float, ...]
    level: int

    def describe(self) -> dict:
        return {"kind": "count-chain", "length": len(self.f), "f": list(self.f), "level": self.level}

    def regime(self) -> dict:
        n = len(self.f)
        return {"n": n, "vocab": 2, "temperature": 1.0, "states": 2**n, "reversible": True}

    def instance(self) -> Instance:
        """The full chain on {0,1}^n (for small n)."""
        return count_instance(2, self.f, self.level)


@st.composite
def boundary_drift_instances(draw, lengths: tuple[int, ...] = (4, 6, 8, 10, 12, 16, 20)) -> CountChain:
    """Binary count chains with a strictly positive drift on the boundary {N = k} of B_k = {N >= k}
    (the hypothesis of the section 5.4 certificate), k = n/2: f(k - 1) high, f(m >= k) free."""
    n = draw(st.sampled_from(lengths))
    k = n // 2
    high = draw(st.integers(60, 99)) / 100
    low = draw(st.integers(5, 95)) / 100
    return CountChain(tuple(0.5 if m < k - 1 else (high if m == k - 1 else low) for m in range(n)), k)


# ----------------------------------------------------------------------------------------------
# Sources violating positivity (Prop. 1): conditionals with zeros


class SupportedScoreTable(ScoreTable):
    """A score table where some symbols are forbidden (score -inf) in some fibres; every fibre
    keeps at least one allowed symbol. Violates the positivity hypothesis of Prop. 1 / Cor. 2."""

    def __init__(self, space: StateSpace, table: np.ndarray, allowed: np.ndarray, temperature: float = 1.0) -> None:
        super().__init__(space, table, temperature)
        allowed = np.asarray(allowed, dtype=bool)
        if allowed.shape != self.table.shape or not allowed.any(axis=-1).all():
            raise ValueError("allowed must match the table and keep a symbol in every fibre")
        self.allowed = allowed

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        c = self._context_index(contexts, site)
        return np.where(self.allowed[site, c], self.table[site, c], -np.inf)


def _consensus_mask(q: int, n: int) -> np.ndarray:
    """allowed[i, c, v] = (v == x_{i-1}) for the context c = x_{-i}: every site copies its left
    neighbour (cyclically), so each constant sequence is absorbing."""
    rest = StateSpace(q, n - 1).all_states()  # (q^(n-1), n-1), the context x_{-i} in order
    allowed = np.zeros((n, q ** (n - 1), q), dtype=bool)
    for i in range(n):
        left = (i - 1) % n
        column = left if left < i else left - 1  # position of site left inside x_{-i}
        allowed[i, np.arange(q ** (n - 1)), rest[:, column]] = True
    return allowed


@st.composite
def zero_conditional_instances(draw, max_states: int = 64) -> Instance:
    """Score tables with forbidden symbols: random supports, or 'copy your left neighbour'
    supports (with some fibres released) whose constant sequences are absorbing, so the chain
    has several closed classes."""
    q, n = draw(shapes(max_states, min_length=2))
    space = StateSpace(q, n)
    shape = (n, q ** (n - 1), q)
    scores = draw(half_integers(shape, 4))
    allowed = draw(arrays(bool, shape, fill=st.nothing()))
    if draw(st.booleans()):
        allowed = _consensus_mask(q, n) | (allowed & draw(arrays(bool, shape[:2], fill=st.nothing()))[..., None])
    first = np.zeros(shape, dtype=bool)
    first[..., 0] = True
    allowed = np.where(allowed.any(axis=-1, keepdims=True), allowed, first)  # keep >= 1 symbol per fibre
    src = SupportedScoreTable(space, scores, allowed)
    return Instance(src, "zero-conditionals", {"scores": scores.tolist(), "allowed": allowed.astype(int).tolist()})


# ----------------------------------------------------------------------------------------------
# Lemma 6: pairs of score vectors


@st.composite
def score_pairs(draw, max_size: int = 6) -> tuple[np.ndarray, np.ndarray, float]:
    """Two score vectors a, b of the same length in 2..max_size (entries k/4) and a temperature."""
    size = draw(st.integers(2, max_size))
    a = draw(arrays(np.int64, size, elements=st.integers(-12, 12), fill=st.nothing())) / 4.0
    b = draw(arrays(np.int64, size, elements=st.integers(-12, 12), fill=st.nothing())) / 4.0
    return a, b, draw(temperatures())


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
    """Sub-frames of a tabulated model (an :class:`~mlmix.empirical.tabulate.MLMTable` or any source
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
