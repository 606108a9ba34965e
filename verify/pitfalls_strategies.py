"""Hypothesis strategies for paper P ("pitfalls") instances: small exponential families, their
parameters, mask distributions (k-subsets, weighted block families, adaptive p_K(K|x)), eq. (5)
Ising models satisfying Assumption 5, and random joints for block-dynamics gaps.

Sizes are kept small enough to enumerate exactly (n <= 5 binary spins, Potts with q = 3 on n <= 4
sites; eq. (5) models up to |C| = 8 through their 2^|C|-state clique chains, and |C| up to 60 through
the count of +1 spins when the clique fields are equal). Mask sizes favour k <= n - 2 (where
Theorems 1 and 2 are not tight by construction). Random tables (adaptive mask probabilities, data
laws, joints) come from a drawn integer seed so that instances shrink to small, describable values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import networkx as nx
import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from mlmix.theory.sources.conditionals import LogWeightTable
from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.exponential_family import ExponentialFamily, IsingFamily, PottsFamily
from mlmix.theory.training.modes import CliqueIsing, c_R1, c_stuck
from mlmix.theory.training.pseudolikelihood import MaskDistribution


@dataclass(frozen=True, eq=False)
class PLInstance:
    """A family at theta with a mask distribution; ``data`` is an optional law p_X over the states
    (None: the realizable data p_theta); ``label`` records how it was drawn (for reports)."""

    family: ExponentialFamily
    theta: np.ndarray
    masks: MaskDistribution
    data: np.ndarray | None = None
    label: dict = field(default_factory=dict)

    def regime(self) -> dict[str, Any]:
        return _family_regime(self.family, self.theta)

    def describe(self) -> dict[str, Any]:
        fam = self.family
        out = {"family": type(fam).__name__, "n": fam.space.length, "q": fam.space.vocab_size,
               "edges": [list(e) for e in getattr(fam, "edges", [])],
               "theta": dict(zip(fam.names, np.round(self.theta, 6).tolist())),
               "blocks": [list(b) for b in self.masks.blocks], "adaptive": self.masks.adaptive}
        if hasattr(fam, "convention"):
            out["convention"] = fam.convention
        if not self.masks.adaptive:
            out["weights"] = np.round(self.masks.weights, 6).tolist()
        out.update(self.label)
        return out


@dataclass(frozen=True, eq=False)
class KInstance:
    """A family at theta and a mask size k (k-pseudolikelihood, P Theorem 1); ``data``: a law outside
    the family (misspecified: realizability broken), None for data p_theta."""

    family: ExponentialFamily
    theta: np.ndarray
    k: int
    data: np.ndarray | None = None

    def regime(self) -> dict[str, Any]:
        return {**_family_regime(self.family, self.theta), "k = n": self.k == self.family.space.length}

    def describe(self) -> dict[str, Any]:
        fam = self.family
        out = {"family": type(fam).__name__, "n": fam.space.length, "q": fam.space.vocab_size,
               "edges": [list(e) for e in getattr(fam, "edges", [])],
               "theta": dict(zip(fam.names, np.round(self.theta, 6).tolist())), "k": self.k}
        if self.data is not None:
            out["data"] = np.round(self.data, 6).tolist()
        return out


@dataclass(frozen=True)
class ModesInstance:
    """An eq. (5) model with a mask size k (Prop 4) and a failure probability delta; ``norm`` is the
    reading of ||h|| in Assumption 5's J0 = J - ||h|| ("l1" as stated, "linf" the misreading)."""

    spec: CliqueIsing
    k: int
    delta: float
    norm: str = "l1"

    def regime(self) -> dict[str, Any]:
        return {"n": self.spec.n, "vocab": 2, "temperature": None, "states": 2**self.spec.n, "reversible": None}

    def describe(self) -> dict[str, Any]:
        s = self.spec
        out = {"n": s.n, "clique": list(s.clique), "J": s.J, "h": list(s.h), "convention": s.convention,
               "k": self.k, "delta": self.delta}
        if self.norm != "l1":
            out["norm"] = self.norm
        return out

    @property
    def J0(self) -> float:
        """J - ||h|| in the instance's reading of the norm."""
        return self.spec.J0 if self.norm == "l1" else self.spec.J - float(np.abs(self.spec.h).max())


@dataclass(frozen=True, eq=False)
class JointInstance:
    """A random strictly positive joint on V^n and a block size k (P section 2.4)."""

    source: LogWeightTable
    k: int
    seed: int
    scale: float

    def regime(self) -> dict[str, Any]:
        sp_ = self.source.space
        return {"n": sp_.length, "vocab": sp_.vocab_size, "temperature": None, "states": sp_.size, "reversible": True,
                "k = n": self.k == sp_.length}

    def describe(self) -> dict[str, Any]:
        sp_ = self.source.space
        return {"q": sp_.vocab_size, "n": sp_.length, "seed": self.seed, "scale": self.scale, "k": self.k}


#: |theta| from which a family counts as strongly coupled in ``mlmix verify --stats``.
STRONG = 2.0


def _family_regime(fam: ExponentialFamily, theta: np.ndarray | None = None) -> dict[str, Any]:
    """Block dynamics of a joint are reversible by construction; flags for ``--stats``: an edgeless
    graph, and max |theta| >= :data:`STRONG` (strongly coupled)."""
    out = {"n": fam.space.length, "vocab": fam.space.vocab_size, "temperature": None, "states": fam.space.size,
           "reversible": True, "edgeless": not getattr(fam, "edges", ())}
    if theta is not None:
        out[f"|theta| >= {STRONG:g}"] = bool(np.abs(theta).max() >= STRONG)
    return out


def _finite(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


@st.composite
def graphs(draw, min_n: int = 2, max_n: int = 5) -> nx.Graph:
    """A simple graph on 0..n-1 with any non-empty edge set (an edgeless family is a product model,
    :func:`product_pl_instances` draws those on purpose)."""
    n = draw(st.integers(min_n, max_n))
    pairs = list(combinations(range(n), 2))
    keep = draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    if pairs and not any(keep):
        keep[0] = True
    g = nx.empty_graph(n)
    g.add_edges_from(p for p, k in zip(pairs, keep) if k)
    return g


@st.composite
def families(draw, max_n: int = 5, potts: bool = True, min_n: int = 2) -> ExponentialFamily:
    """An Ising family (either pair convention) on min_n <= n <= max_n spins, or (two times in three) a Potts
    family (q = 3, n <= 4; n = 4, 81 states, in three of four of those when max_n >= 4: half of all draws have
    n >= 4 and |V| >= 3 nominally, so that Hypothesis' biases keep the measured share above 40%)."""
    if potts and draw(st.sampled_from((True, True, False))):
        if max_n >= 4 and draw(st.sampled_from((True, True, True, False))):
            return PottsFamily(draw(graphs(4, 4)), 3)
        return PottsFamily(draw(graphs(min(min_n, 4), min(4, max_n))), 3)
    return IsingFamily(draw(graphs(min_n, max_n)), draw(st.sampled_from(("unordered", "ordered"))))


def thetas(family: ExponentialFamily, scale: float = 1.0) -> st.SearchStrategy[np.ndarray]:
    """theta with every coordinate in [-scale, scale]; ``scale = None``: in [-1, 1], and (nominally two
    times in three, measured 35-45%) one coordinate (a field or a coupling) of modulus in [2, 3.5]: a strongly coupled family."""
    if scale is None:
        d = family.dimension
        strong = st.tuples(thetas(family, 1.0), st.integers(0, d - 1), _finite(2.0, 3.5), st.sampled_from((1, -1)))
        return st.sampled_from((False, True, True)).flatmap(
            lambda big: strong.map(lambda t: _with_entry(*t)) if big else thetas(family, 1.0))
    d = family.dimension
    return st.lists(_finite(-scale, scale), min_size=d, max_size=d).map(lambda v: np.array(v, dtype=np.float64))


def _with_entry(theta: np.ndarray, k: int, magnitude: float, sign: int) -> np.ndarray:
    out = theta.copy()
    out[k] = sign * magnitude
    return out


@st.composite
def block_families(draw, space: StateSpace) -> list[tuple[int, ...]]:
    """1-4 random non-empty blocks, completed by singletons so that they cover [n]."""
    n = space.length
    subsets = [c for r in range(1, n + 1) for c in combinations(range(n), r)]
    picked = draw(st.lists(st.sampled_from(subsets), min_size=1, max_size=4, unique=True))
    missing = sorted(set(range(n)) - set().union(*map(set, picked)))
    return picked + [(i,) for i in missing]


@st.composite
def fixed_masks(draw, space: StateSpace) -> MaskDistribution:
    """k-subsets (uniform, k <= max(1, n - 2) three times in four) or a weighted block family
    (weights in [0.05, 1], normalised)."""
    if draw(st.booleans()):
        n = space.length
        top = max(1, n - 2) if draw(st.integers(0, 3)) else n
        return MaskDistribution.k_subsets(space, draw(st.integers(1, top)))
    blocks = draw(block_families(space))
    w = np.array(draw(st.lists(_finite(0.05, 1.0), min_size=len(blocks), max_size=len(blocks))))
    return MaskDistribution.weighted(space, blocks, w / w.sum())


@st.composite
def adaptive_masks(draw, space: StateSpace) -> tuple[MaskDistribution, int]:
    """Adaptive p_K(K|x) over a random block family, every entry >= 0.05 before normalising."""
    blocks = draw(block_families(space))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    probs = rng.uniform(0.05, 1.0, size=(space.size, len(blocks)))
    return MaskDistribution.adaptive_masks(space, blocks, probs / probs.sum(axis=1, keepdims=True)), seed


@st.composite
def pl_instances(draw, adaptive: bool = False, max_n: int = 5, scale: float | None = None,
                 with_data: bool = False) -> PLInstance:
    """A family, theta in [-scale, scale]^d (default: see :func:`thetas`) and masks (fixed or adaptive); ``with_data`` adds a data
    law: p_X = (1 - a) p_theta + a u (u a random law, a in [0, 1]), a law on a few states (sparse
    supports), or, for an Ising family, a product of random marginals."""
    family = draw(families(max_n))
    theta = draw(thetas(family, scale))
    label: dict = {}
    if adaptive:
        masks, seed = draw(adaptive_masks(family.space))
        label["mask_seed"] = seed
    else:
        masks = draw(fixed_masks(family.space))
    data = None
    if with_data:
        seed = draw(st.integers(0, 2**16))
        rng = np.random.default_rng(seed)
        kind = draw(st.sampled_from(("mixture", "sparse", "product")))
        if kind == "product" and isinstance(family, IsingFamily):
            marg = rng.uniform(0.05, 0.95, family.space.length)
            states = family.space.all_states()
            data = np.prod(np.where(states == 1, marg, 1 - marg), axis=1)
            label.update(data_seed=seed, data="product")
        elif kind == "sparse":
            support = rng.choice(family.space.size, size=draw(st.integers(1, 3)), replace=False)
            data = np.zeros(family.space.size)
            data[support] = rng.dirichlet(np.ones(support.size))
            label.update(data_seed=seed, data="sparse", support=support.tolist())
        else:
            a = draw(_finite(0.0, 1.0))
            u = rng.dirichlet(np.ones(family.space.size))
            data = (1 - a) * family.probabilities(theta) + a * u
            label.update(data_seed=seed, data_mix=a)
    return PLInstance(family, theta, masks, data, label)


@st.composite
def product_pl_instances(draw, max_n: int = 5) -> PLInstance:
    """An edgeless Ising family (a product model), 1-PL masks and a product data law: the case where
    approximate tensorization is attained (C_AT = n = the ratio KL / L_PL)."""
    n = draw(st.integers(2, max_n))
    family = IsingFamily(nx.empty_graph(n))
    theta = draw(thetas(family))
    seed = draw(st.integers(0, 2**16))
    marg = np.random.default_rng(seed).uniform(0.05, 0.95, n)
    states = family.space.all_states()
    data = np.prod(np.where(states == 1, marg, 1 - marg), axis=1)
    return PLInstance(family, theta, MaskDistribution.k_subsets(family.space, 1), data,
                      {"data_seed": seed, "data": "product"})


@st.composite
def k_instances(draw, max_n: int = 5, scale: float | None = None) -> KInstance:
    """A family (n >= 3 three times in four), theta and k in 1..n-2 (k = n - 1 when n = 2)."""
    family = draw(families(max_n, min_n=3 if draw(st.integers(0, 3)) else 2))
    n = family.space.length
    return KInstance(family, draw(thetas(family, scale)), draw(st.integers(1, max(1, n - 2))))


@st.composite
def clique_isings(draw, max_n: int = 6, max_clique: int = 5, sizes: tuple[int, ...] | None = None,
                  tight: bool = False) -> CliqueIsing:
    """eq. (5) models satisfying Assumption 5: fields in [-1, 1] off the clique, clique fields shifted
    so that h_G exceeds their total |h| by a drawn margin, J = ||h||_1 + J0, J0 in [0.001, 3]
    (``tight``: margin and J0 in [0.001, 0.1], close to the boundary of Assumption 5)."""
    size = draw(st.sampled_from(sizes) if sizes else st.integers(2, max_clique))
    n = draw(st.integers(size, max(size, max_n)))
    clique = tuple(draw(st.permutations(range(n)))[:size])
    h = np.array(draw(st.lists(_finite(-1.0, 1.0), min_size=n, max_size=n)))
    inside = np.zeros(n, dtype=bool)
    inside[list(clique)] = True
    top = 0.1 if tight else 1.0
    margin = draw(_finite(0.001, top))
    need = np.abs(h[~inside]).sum() + margin - h[inside].sum()
    h[clique[0]] += max(0.0, need) if not tight else need
    J0 = draw(_finite(0.001, 0.1 if tight else 3.0))
    J = float(np.abs(h).sum()) + J0
    return CliqueIsing(n, tuple(clique), J, tuple(h), draw(st.sampled_from(("ordered", "unordered"))))


@st.composite
def modes_instances(draw, max_n: int = 7, max_clique: int = 6, tight: bool = False,
                    edge_delta: bool = False) -> ModesInstance:
    """An eq. (5) model under Assumption 5 (near its boundary half of the time, always with ``tight``),
    k in |C|..n and delta in [0.01, 0.99]; ``edge_delta``: delta = c_R1^T (1 + s), the smallest delta
    giving Prop 4 the horizon T in 1..4 (s in [1e-6, 1])."""
    spec = draw(clique_isings(max_n, max_clique, tight=tight or draw(st.booleans())))
    k = draw(st.integers(spec.size, spec.n))
    if edge_delta:
        c = c_R1(spec, k)
        delta = c ** draw(st.integers(1, 4)) * (1 + draw(_finite(1e-6, 1.0)))
        assume(0 < delta < 1)
        return ModesInstance(spec, k, float(delta))
    return ModesInstance(spec, k, draw(_finite(0.01, 0.99)))


@st.composite
def stuck_instances(draw, max_n: int = 9) -> ModesInstance:
    """Prop 5 instances at the edge of their claim: |C| in {2, 5, 6, 7, 8} (for |C| = 3, 4 the
    horizon floor((delta/2) e^{c_stuck}) is always 0), a target horizon T in 1..3 and
    delta = 2 T e^{-c_stuck} (1 + s), s in [1e-6, 1], the smallest delta giving that T (rejected when
    delta >= 1). ``k`` is unused (set to |C|)."""
    spec = draw(clique_isings(max_n, 8, sizes=(2, 5, 6, 7, 8)))
    T = draw(st.integers(1, 3))
    slack = draw(_finite(1e-6, 1.0))
    delta = 2.0 * T * np.exp(-c_stuck(spec)) * (1.0 + slack)
    assume(delta < 1.0)
    return ModesInstance(spec, spec.size, float(delta))


@st.composite
def joint_instances(draw, max_n: int = 5) -> JointInstance:
    """A random positive joint (log-weights N(0, scale^2), scale up to 3) on {0,1}^n (3 <= n <= max_n) or
    {0,1,2}^n (n = 4 when max_n >= 4, else 3) and k in 2..n-1 (k = n samples exactly in
    one step: gap 1, a trivial instance)."""
    q = draw(st.sampled_from((3, 2)))
    if q == 3 and max_n >= 4:
        n = 4
    else:
        n = draw(st.integers(3, max(3, max_n if q == 2 else min(3, max_n))))
    seed = draw(st.integers(0, 2**16))
    scale = draw(_finite(0.05, 3.0))
    source = LogWeightTable.random(StateSpace(q, n), seed=seed, scale=scale)
    return JointInstance(source, draw(st.integers(2, n - 1)), seed, scale)


# ----------------------------------------------------------------------------------------------
# Probability inequalities (Hoeffding, empirical laws) and the large-clique separation (Cor 3)


@dataclass(frozen=True)
class BernoulliSum:
    """Independent Bernoulli(p_i) variables (a_i = 0, b_i = 1) and a deviation t > 0 (P Lemma 6)."""

    p: tuple[float, ...]
    t: float

    def describe(self) -> dict[str, Any]:
        return {"p": list(self.p), "t": self.t}

    def regime(self) -> dict[str, Any]:
        return {"n": len(self.p), "vocab": 2, "temperature": None, "states": len(self.p) + 1, "reversible": None}


@st.composite
def bernoulli_sums(draw, max_n: int = 12) -> BernoulliSum:
    """n in 1..max_n (1..3 half of the time: where Hoeffding is nearly attained), p_i on a grid of
    [0.01, 0.99] (fair or all equal two times in three), t in (0, n] (half of the time a value |k - E S| where the
    tail P(|S - E S| >= t) jumps)."""
    n = draw(st.integers(1, 3) if draw(st.booleans()) else st.integers(1, max_n))
    grid = st.integers(1, 99).map(lambda k: k / 100)
    kind = draw(st.sampled_from(("fair", "equal", "any")))  # fair coins: where Hoeffding is tightest
    p = (0.5,) * n if kind == "fair" else (draw(grid),) * n if kind == "equal" else \
        tuple(draw(st.lists(grid, min_size=n, max_size=n)))
    t = draw(st.integers(1, 100)) / 100 * n
    if draw(st.booleans()):  # a jump of the tail: t = |k - E S| for a value k of S (an extreme one half the time)
        k = draw(st.sampled_from((0, n)) if draw(st.booleans()) else st.integers(0, n))
        t = abs(k - sum(p)) or t
    return BernoulliSum(p, float(t))


@dataclass(frozen=True)
class EmpiricalLaw:
    """A law p on M points, a sample size n and a failure probability delta (P Lemma 8, M = |Omega|^N)."""

    p: tuple[float, ...]
    n: int
    delta: float

    def describe(self) -> dict[str, Any]:
        return {"p": [round(v, 6) for v in self.p], "n": self.n, "delta": self.delta}

    def regime(self) -> dict[str, Any]:
        return {"n": self.n, "vocab": len(self.p), "temperature": None, "states": len(self.p), "reversible": None}


@st.composite
def empirical_laws(draw, max_samples: int = 40) -> EmpiricalLaw:
    """M in {2, 4} (|Omega| = 2, N = 1 or 2; M = 3 also; M = 2 half of the time), a random law
    (uniform half of the time), n in 1..2 half of the time (where the bound is nearly attained), else
    1..max_samples, and delta in [0.05, 0.95]."""
    M = draw(st.sampled_from((2, 2, 3, 4)))
    if draw(st.booleans()):
        p = np.full(M, 1.0 / M)
    else:
        p = np.random.default_rng(draw(st.integers(0, 2**16))).dirichlet(np.ones(M))
    n = draw(st.integers(1, 2) if draw(st.booleans()) else st.integers(1, max_samples))
    return EmpiricalLaw(tuple(float(v) for v in p), n, draw(st.integers(5, 95)) / 100)


@dataclass(frozen=True)
class SymmetricClique:
    """The clique part of the eq. (5) model with equal clique fields h_G/|C| (its +1 count is a
    Markov chain under the independent parallel sampler), with the sampler horizon M and delta
    of Corollary 3; ``outside`` is sum_{i not in C} |h_i| (the isolated spins are independent of the
    clique and only enter Assumption 5)."""

    size: int
    J: float
    h_G: float
    outside: float
    M: int
    delta: float
    convention: str = "ordered"

    @property
    def J0(self) -> float:
        return self.J - self.h_G - self.outside

    def describe(self) -> dict[str, Any]:
        return {"clique_size": self.size, "J": self.J, "h_G": self.h_G, "outside": self.outside, "M": self.M,
                "delta": self.delta, "convention": self.convention}

    def regime(self) -> dict[str, Any]:
        return {"n": self.size, "vocab": 2, "temperature": None, "states": 2**self.size, "reversible": False}


@st.composite
def symmetric_cliques(draw) -> SymmetricClique:
    """Corollary 3 instances on the boundary of Assumption 6: M in {1, 2, 5}, |C| in 20..60, delta the
    smallest value |C| allows (delta = 4M e^{1 - |C|/8}) times a slack, h_G and J0 at their thresholds
    times a slack in [1, 1.5]."""
    M = draw(st.sampled_from((1, 2, 5)))
    c = draw(st.integers(20, 60))
    delta = min(0.99, 4 * M * math.exp(1 - c / 8) * draw(st.integers(100, 200)) / 100)
    h_G = 0.5 * math.log(2 * (2 - delta) / delta) * draw(st.integers(100, 150)) / 100
    J0 = 0.5 * c * math.log(2) * draw(st.integers(100, 150)) / 100
    outside = h_G * draw(st.integers(0, 90)) / 100
    convention = draw(st.sampled_from(("ordered", "unordered")))
    return SymmetricClique(c, J0 + h_G + outside, h_G, outside, M, delta, convention)


@dataclass(frozen=True, eq=False)
class MaskSample:
    """One training sequence x (state index) of an Ising family on N spins with parameters theta, masks
    p_K(.|x), m masks drawn for it, and the parameters of Lemma 7 (eps, t) or Corollary 1 (delta);
    ``beta`` overrides Assumption 3's margin (a value above the smallest conditional breaks it)."""

    family: ExponentialFamily
    theta: np.ndarray
    x: int
    masks: MaskDistribution
    m: int
    eps: float | None = None
    t: float | None = None
    delta: float | None = None
    beta: float | None = None

    def describe(self) -> dict[str, Any]:
        out = {"n_spins": self.family.space.length, "theta": np.round(self.theta, 6).tolist(), "x": self.x,
               "blocks": [list(b) for b in self.masks.blocks], "p_K": np.round(self.masks.probs[self.x], 6).tolist(),
               "m": self.m}
        out.update({k: v for k, v in (("eps", self.eps), ("t", self.t), ("delta", self.delta), ("beta", self.beta))
                    if v is not None})
        return out

    def regime(self) -> dict[str, Any]:
        return _family_regime(self.family)


@st.composite
def mask_samples(draw, corollary: bool = False) -> MaskSample:
    """N = 2 spins with one edge, theta in [-2, 2]^3, one training point, blocks {0}, {1}, {0, 1} with
    random p_K(.|x) >= 0.05, m in 64..200 masks (where the failure probability can be below 1); Lemma 7:
    eps and t chosen so that each failure term is in [0.05, 0.45]; Corollary 1: delta in [0.1, 0.9]."""
    family = IsingFamily(nx.path_graph(2))
    theta = draw(thetas(family, 2.0))
    x = draw(st.integers(0, 3))
    w = np.random.default_rng(draw(st.integers(0, 2**16))).uniform(0.05, 1.0, 3)
    masks = MaskDistribution.weighted(family.space, [(0,), (1,), (0, 1)], w / w.sum())
    m = draw(st.integers(64, 200))
    if corollary:
        return MaskSample(family, theta, x, masks, m, delta=draw(st.integers(10, 90)) / 100)
    a, b = draw(st.integers(5, 45)) / 100, draw(st.integers(5, 45)) / 100
    eps = math.sqrt(4.0 / (a * m))  # 2^{N-2} |Omega|^N / (eps^2 m) = a
    return MaskSample(family, theta, x, masks, m, eps=eps, t=math.sqrt(math.log(2 / b) / 2))  # t in ln(1/beta) units
