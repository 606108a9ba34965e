"""Hypothesis strategies that place instances in the regime one result of paper G is about.

Contraction instances (Thm 5, Cor 7) place T relative to the influence: T = u T* (T* the Cor. 7
temperature), or the temperature at which rho reaches a target in [0.5, 0.999] (rho close to 1), or
product tables at low T (the near-deterministic chains on which Thm 5's t_mix bound is tightest).
Basins for Thm 8 carry margins boosted into the score table and reach gamma/T up to 40 (metastable
chains: spectral gaps down to 1e-17). The drift instances (section 5.4) carry a count statistic; the
zero-conditional instances break Proposition 1's positivity; Lemma 6 draws pairs of score vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mlmix.theory.local.influence import contraction_temperature, influence_matrix, score_oscillation
from mlmix.theory.local.margins import basin_margin
from mlmix.theory.sources.conditionals import (
    Conditionals,
    ScoreTable,
)
from mlmix.theory.sources.space import StateSpace
from mlmix.verify.instances import (
    MAX_STATES,
    SCALES,
    T_MAX,
    T_MIN,
    Instance,
    any_sources,
    compatible_sources,
    gaussian_table_sources,
    half_integers,
    incompatible_sources,
    instances,
    product_sources,
    score_spread,
    seeds,
    shapes,
    temperatures,
    tempered,
)

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
