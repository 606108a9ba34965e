"""Hypothesis strategies for paper P ("gmlm-pitfalls") instances: small exponential families, their
parameters, mask distributions (k-subsets, weighted block families, adaptive p_K(K|x)), eq. (5)
Ising models satisfying Assumption 5, and random joints for block-dynamics gaps.

Sizes are kept tiny (n <= 4 binary spins by default, Potts with q = 3 on n <= 3 sites; eq. (5)
models up to |C| = 8 through their 2^|C|-state clique chains) so that every check enumerates exactly. Random tables (adaptive mask probabilities, data laws, joints) come from a
drawn integer seed so that instances shrink to small, describable values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import networkx as nx
import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from mlmix.theory.conditionals import LogWeightTable
from mlmix.theory.exponential_family import ExponentialFamily, IsingFamily, PottsFamily
from mlmix.theory.ising_modes import CliqueIsing, c_stuck
from mlmix.theory.pseudolikelihood import MaskDistribution
from mlmix.theory.space import StateSpace


@dataclass(frozen=True, eq=False)
class PLInstance:
    """A family at theta with a mask distribution; ``data`` is an optional law p_X over the states
    (None: the realizable data p_theta); ``label`` records how it was drawn (for reports)."""

    family: ExponentialFamily
    theta: np.ndarray
    masks: MaskDistribution
    data: np.ndarray | None = None
    label: dict = field(default_factory=dict)

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


@dataclass(frozen=True)
class KInstance:
    """A family at theta and a mask size k (k-pseudolikelihood, P Theorem 1)."""

    family: ExponentialFamily
    theta: np.ndarray
    k: int

    def describe(self) -> dict[str, Any]:
        fam = self.family
        return {"family": type(fam).__name__, "n": fam.space.length, "q": fam.space.vocab_size,
                "edges": [list(e) for e in getattr(fam, "edges", [])],
                "theta": dict(zip(fam.names, np.round(self.theta, 6).tolist())), "k": self.k}


@dataclass(frozen=True)
class ModesInstance:
    """An eq. (5) model with a mask size k (Prop 4) and a failure probability delta."""

    spec: CliqueIsing
    k: int
    delta: float

    def describe(self) -> dict[str, Any]:
        s = self.spec
        return {"n": s.n, "clique": list(s.clique), "J": s.J, "h": list(s.h), "convention": s.convention,
                "k": self.k, "delta": self.delta}


@dataclass(frozen=True, eq=False)
class JointInstance:
    """A random strictly positive joint on V^n and a block size k (P section 2.4)."""

    source: LogWeightTable
    k: int
    seed: int
    scale: float

    def describe(self) -> dict[str, Any]:
        sp_ = self.source.space
        return {"q": sp_.vocab_size, "n": sp_.length, "seed": self.seed, "scale": self.scale, "k": self.k}


def _finite(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


@st.composite
def graphs(draw, min_n: int = 2, max_n: int = 4) -> nx.Graph:
    """A simple graph on 0..n-1 with any edge set (possibly empty)."""
    n = draw(st.integers(min_n, max_n))
    pairs = list(combinations(range(n), 2))
    keep = draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    g = nx.empty_graph(n)
    g.add_edges_from(p for p, k in zip(pairs, keep) if k)
    return g


@st.composite
def families(draw, max_n: int = 4, potts: bool = True) -> ExponentialFamily:
    """An Ising family (either pair convention) on n <= max_n spins, or a Potts family (q = 3, n <= 3)."""
    if potts and draw(st.integers(0, 3)) == 0:
        return PottsFamily(draw(graphs(2, min(3, max_n))), 3)
    return IsingFamily(draw(graphs(2, max_n)), draw(st.sampled_from(("unordered", "ordered"))))


def thetas(family: ExponentialFamily, scale: float = 1.0) -> st.SearchStrategy[np.ndarray]:
    """theta with every coordinate in [-scale, scale]."""
    d = family.dimension
    return st.lists(_finite(-scale, scale), min_size=d, max_size=d).map(lambda v: np.array(v, dtype=np.float64))


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
    """k-subsets (uniform) or a weighted block family (weights in [0.05, 1], normalised)."""
    if draw(st.booleans()):
        return MaskDistribution.k_subsets(space, draw(st.integers(1, space.length)))
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
def pl_instances(draw, adaptive: bool = False, max_n: int = 4, scale: float = 1.0,
                 with_data: bool = False) -> PLInstance:
    """A family, theta in [-scale, scale]^d and masks (fixed or adaptive); ``with_data`` adds a random
    data law p_X = (1 - a) p_theta + a u, u a random law, a in [0, 1]."""
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
        a = draw(_finite(0.0, 1.0))
        u = np.random.default_rng(seed).dirichlet(np.ones(family.space.size))
        data = (1 - a) * family.probabilities(theta) + a * u
        label.update(data_seed=seed, data_mix=a)
    return PLInstance(family, theta, masks, data, label)


@st.composite
def k_instances(draw, max_n: int = 4, scale: float = 1.0) -> KInstance:
    """A family, theta and k in 1..n-1 (so that k + 1 <= n)."""
    family = draw(families(max_n))
    return KInstance(family, draw(thetas(family, scale)), draw(st.integers(1, family.space.length - 1)))


@st.composite
def clique_isings(draw, max_n: int = 6, max_clique: int = 5, sizes: tuple[int, ...] | None = None) -> CliqueIsing:
    """eq. (5) models satisfying Assumption 5: fields in [-1, 1] off the clique, clique fields shifted
    so that h_G exceeds their total |h| by a drawn margin, J = ||h||_1 + J0, J0 in [0.001, 3]."""
    size = draw(st.sampled_from(sizes) if sizes else st.integers(2, max_clique))
    n = draw(st.integers(size, max(size, max_n)))
    clique = tuple(draw(st.permutations(range(n)))[:size])
    h = np.array(draw(st.lists(_finite(-1.0, 1.0), min_size=n, max_size=n)))
    inside = np.zeros(n, dtype=bool)
    inside[list(clique)] = True
    margin = draw(_finite(0.001, 1.0))
    need = np.abs(h[~inside]).sum() + margin - h[inside].sum()
    h[clique[0]] += max(0.0, need)
    J0 = draw(_finite(0.001, 3.0))
    J = float(np.abs(h).sum()) + J0
    return CliqueIsing(n, tuple(clique), J, tuple(h), draw(st.sampled_from(("ordered", "unordered"))))


@st.composite
def modes_instances(draw, max_n: int = 7, max_clique: int = 6) -> ModesInstance:
    """An eq. (5) model under Assumption 5, k in |C|..n and delta in [0.01, 0.99]."""
    spec = draw(clique_isings(max_n, max_clique))
    return ModesInstance(spec, draw(st.integers(spec.size, spec.n)), draw(_finite(0.01, 0.99)))


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
def joint_instances(draw, max_n: int = 4) -> JointInstance:
    """A random positive joint (log-weights N(0, scale^2)) on {0,1}^n or {0,1,2}^n (n <= 3) and k in 2..n."""
    q = draw(st.sampled_from((2, 3)))
    n = draw(st.integers(2, max_n if q == 2 else 3))
    seed = draw(st.integers(0, 2**16))
    scale = draw(_finite(0.05, 3.0))
    source = LogWeightTable.random(StateSpace(q, n), seed=seed, scale=scale)
    return JointInstance(source, draw(st.integers(2, n)), seed, scale)
