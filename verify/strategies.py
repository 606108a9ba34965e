"""Hypothesis strategies that build small instances for the theorems of paper G.

Instances are composed from small pieces: a shape (|V|, n) with |V|^n bounded, integer parameters
(half-integers for couplings, fields, log-weights and scores, so shrinking drives them to 0 and a
counterexample reads as a handful of small numbers), a temperature log-uniform on [0.05, 20].

Temperatures are raised where needed so that the largest score spread s_max - s_min of any
conditional, divided by T, stays below ``max_ratio``: this keeps every conditional probability
above e^{-max_ratio}, so the float64 linear algebra on the chain (stationary laws, t_mix by
squaring) stays meaningful. Chain-level theorems use a small ratio, local ones a larger one.

Sources: compatible ones (Ising models on random graphs given as edge masks, Potts models,
log-weight tables, score tables tabulated from a joint), incompatible score tables, exact
rational instances (positive integer weights, at T = 1) for sympy certificates, and sources that
violate a hypothesis (conditionals with zeros; basins without a margin).
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

from mlmix.theory.conditionals import (
    Conditionals,
    IsingModel,
    LogWeightTable,
    PottsModel,
    ScoreTable,
)
from mlmix.theory.contexts import score_table
from mlmix.theory.influence import contraction_temperature, score_oscillation
from mlmix.theory.space import StateSpace
from mlmix.validation import check_temperature

T_MIN, T_MAX = 0.05, 20.0

#: Default bound on |V|^n: every exact computation on an instance then takes milliseconds.
MAX_STATES = 256


@dataclass(eq=False)
class Instance:
    """A source of conditionals at a temperature plus what a theorem needs about it.

    kind/params: how it was built (JSON-serialisable, enough to rebuild it by hand);
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

    @property
    def space(self) -> StateSpace:
        return self.source.space

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


def max_length(vocab_size: int, max_states: int, cap: int = 6) -> int:
    return max(1, min(cap, int(math.floor(math.log(max_states) / math.log(vocab_size) + 1e-9))))


@st.composite
def shapes(draw, max_states: int = MAX_STATES, vocab_sizes: tuple[int, ...] = (2, 3, 4), min_length: int = 1,
           cap: int = 6) -> tuple[int, int]:
    """(|V|, n) with |V| in ``vocab_sizes``, min_length <= n <= cap and |V|^n <= max_states."""
    q = draw(st.sampled_from([v for v in vocab_sizes if v ** min_length <= max_states]))
    return q, draw(st.integers(min_length, max(min_length, max_length(q, max_states, cap))))


def half_integers(shape: int | tuple[int, ...], bound: int) -> st.SearchStrategy[np.ndarray]:
    """Arrays of k/2 with |k| <= bound (shrink to zeros)."""
    return arrays(np.int64, shape, elements=st.integers(-bound, bound)).map(lambda a: a / 2.0)


def positive_integers(shape: int | tuple[int, ...], high: int = 6) -> st.SearchStrategy[np.ndarray]:
    """Arrays of integers in [1, high] (shrink to ones): exact rational weights."""
    return arrays(np.int64, shape, elements=st.integers(1, high))


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


# ----------------------------------------------------------------------------------------------
# Sources (at T = 1; the temperature is applied by :func:`instances`)


@st.composite
def ising_sources(draw, max_states: int = MAX_STATES) -> tuple[Conditionals, str, dict]:
    """Ising model on a random graph (an edge mask over the pairs), couplings and fields k/2."""
    n = draw(st.integers(1, max_length(2, max_states)))
    pairs = n * (n - 1) // 2
    mask = draw(arrays(bool, pairs))
    J = draw(half_integers(pairs, 3))
    h = draw(half_integers(n, 2))
    edges = _edge_list(n, mask)
    graph = nx.empty_graph(n)
    graph.add_edges_from(edges)
    couplings = {e: float(j) for e, j in zip(combinations(range(n), 2), J) if e in set(edges)}
    params = {"edges": [list(e) for e in edges], "J": [couplings[e] for e in edges], "h": h.tolist()}
    return IsingModel(graph, couplings, h), "ising", params


@st.composite
def potts_sources(draw, max_states: int = MAX_STATES) -> tuple[Conditionals, str, dict]:
    """Potts model on a random graph with couplings k/2 and fields k/2 of shape (n, q)."""
    q, n = draw(shapes(max_states, vocab_sizes=(3, 4, 2)))
    pairs = n * (n - 1) // 2
    mask = draw(arrays(bool, pairs))
    J = draw(half_integers(pairs, 3))
    h = draw(half_integers((n, q), 2))
    edges = _edge_list(n, mask)
    graph = nx.empty_graph(n)
    graph.add_edges_from(edges)
    couplings = {e: float(j) for e, j in zip(combinations(range(n), 2), J) if e in set(edges)}
    params = {"edges": [list(e) for e in edges], "J": [couplings[e] for e in edges], "h": h.tolist()}
    return PottsModel(graph, q, couplings, h), "potts", params


@st.composite
def log_weight_sources(draw, max_states: int = MAX_STATES) -> tuple[Conditionals, str, dict]:
    """A joint with log-weights k/2 on every state (compatible, no structure)."""
    q, n = draw(shapes(max_states))
    space = StateSpace(q, n)
    w = draw(half_integers(space.size, 4))
    return LogWeightTable(space, w), "log-weights", {"log_weights": w.tolist()}


@st.composite
def score_table_sources(draw, max_states: int = MAX_STATES) -> tuple[Conditionals, str, dict]:
    """Scores k/2 for every (site, context, symbol): generally incompatible, like an MLM."""
    q, n = draw(shapes(max_states))
    space = StateSpace(q, n)
    s = draw(half_integers((n, q ** (n - 1), q), 4))
    return ScoreTable(space, s), "score-table", {"scores": s.tolist()}


@st.composite
def tabulated_compatible_sources(draw, max_states: int = MAX_STATES) -> tuple[Conditionals, str, dict]:
    """A compatible joint re-expressed as a score table (no log_joint: compatibility must be found)."""
    src, kind, params = draw(st.one_of(log_weight_sources(max_states), ising_sources(max_states)))
    return ScoreTable.from_conditionals(src), f"table-of-{kind}", params


@st.composite
def perturbed_compatible_sources(draw, max_states: int = MAX_STATES) -> tuple[Conditionals, str, dict]:
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


def compatible_sources(max_states: int = MAX_STATES) -> st.SearchStrategy:
    return st.one_of(ising_sources(max_states), potts_sources(max_states), log_weight_sources(max_states),
                     tabulated_compatible_sources(max_states))


def incompatible_sources(max_states: int = MAX_STATES) -> st.SearchStrategy:
    return st.one_of(score_table_sources(max_states), perturbed_compatible_sources(max_states))


def any_sources(max_states: int = MAX_STATES) -> st.SearchStrategy:
    return st.one_of(compatible_sources(max_states), incompatible_sources(max_states))


@st.composite
def instances(draw, sources: st.SearchStrategy | None = None, max_states: int = MAX_STATES,
              max_ratio: float = 30.0, eps: bool = False) -> Instance:
    """A source from ``sources`` (default: any) at a temperature log-uniform on [0.05, 20],
    raised if needed to keep spread/T <= max_ratio; ``eps`` draws the t_mix level from {1/4, 1/10}."""
    T = draw(temperatures())  # drawn first: Hypothesis varies early draws more freely
    src, kind, params = draw(sources if sources is not None else any_sources(max_states))
    level = draw(st.sampled_from([0.25, 0.1])) if eps else 0.25
    return Instance(tempered(src, T, max_ratio), kind, params, eps=level)


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
# Thm 5 / Cor 7: temperatures placed around the sufficient temperature of Cor. 7


@st.composite
def high_temperature_instances(draw, sources: st.SearchStrategy | None = None, max_states: int = MAX_STATES,
                               low: float = 0.25, high: float = 8.0, eps: bool = True) -> Instance:
    """T = T* u with T* = (1/4) max_j sum_i Delta_ij (Cor. 7) and u log-uniform on [low, high],
    clipped to [0.05, 20]; below u = 1 the instance may or may not have rho < 1."""
    u = draw(temperatures(low, high))
    src, kind, params = draw(sources if sources is not None else any_sources(max_states))
    t_star = contraction_temperature(score_oscillation(src).delta_ij)
    T = min(T_MAX, max(T_MIN, t_star * u)) if t_star > 0 else draw(temperatures())
    level = draw(st.sampled_from([0.25, 0.1])) if eps else 0.25
    return Instance(src.at_temperature(T), kind, dict(params, temperature_over_cor7=round(u, 6)), eps=level)


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
        for c, row, ins in zip(ctx[mixed], table[i][ctx[mixed]], inside[mixed]):
            table[i, c, ins] = row.max() + margin


@st.composite
def basin_instances(draw, max_states: int = 64, two_wells: bool = False, max_ratio: float = 20.0) -> Instance:
    """A score table and a basin B (Hamming ball of radius 0 or 1 around a centre, B != V^n) on
    which Assumption 1 holds by construction with margin >= gamma_0 in {1/2, ..., 3}. With
    ``two_wells`` a second singleton well at Hamming distance >= radius + 2 gets its own margin, so
    B can carry stationary mass <= 1/2 (needed by Thm 8's mixing bound)."""
    T = draw(temperatures())
    q, n = draw(shapes(max_states, min_length=2 if two_wells else 1))
    space = StateSpace(q, n)
    scores = draw(half_integers((n, q ** (n - 1), q), 4))
    centre = draw(arrays(np.int64, n, elements=st.integers(0, q - 1)))
    radius = draw(st.integers(0, 1)) if n >= 3 or not two_wells else 0
    states = space.all_states()
    dist = (states != centre).sum(axis=1)
    basin = dist <= radius
    if basin.all():
        basin = dist == 0
    margin = draw(st.integers(1, 6)) / 2
    params = {"scores": scores.tolist(), "centre": centre.tolist(), "radius": int(radius), "margin": margin}
    table = scores.copy()
    if two_wells:
        far = np.flatnonzero(dist >= radius + 2)
        if far.size == 0:
            far = np.flatnonzero(dist >= 2)
            basin = dist == 0
        other = int(far[draw(st.integers(0, far.size - 1))])
        well = np.zeros(space.size, dtype=bool)
        well[other] = True
        second = draw(st.integers(1, 6)) / 2
        boost_basin(table, space, well, second)
        params.update(second_well=states[other].tolist(), second_margin=second)
    boost_basin(table, space, basin, margin)
    src = tempered(ScoreTable(space, table), T, max_ratio)
    return Instance(src, "basin-table", params, basin=basin)


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
    mask = draw(arrays(bool, q).filter(lambda m: m.any() and not m.all()))
    inst.symbols = tuple(int(v) for v in np.flatnonzero(mask))
    inst.level = draw(st.integers(1, n))
    return inst


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
    allowed = draw(arrays(bool, shape))
    if draw(st.booleans()):
        allowed = _consensus_mask(q, n) | (allowed & draw(arrays(bool, shape[:2]))[..., None])
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
    a = draw(arrays(np.int64, size, elements=st.integers(-12, 12))) / 4.0
    b = draw(arrays(np.int64, size, elements=st.integers(-12, 12))) / 4.0
    return a, b, draw(temperatures())
