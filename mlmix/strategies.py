"""Hypothesis strategies for Markov chains and the sources of conditionals that induce them: the
stable, public face of the strategies mlmix's own theorem searches use.

Use them in your own tests like any Hypothesis strategy::

    from hypothesis import given
    from mlmix import Chain
    from mlmix import strategies as ms

    @given(ms.metastable_matrices(gap=(1e-12, 1e-8)))
    def test_my_bound(m):
        assert Chain(m.P).additive_gap.lower >= 1e-12 * (1 - 1e-6)

Every strategy shrinks towards small, readable instances (few states, small integer or half-integer
weights, T = 1 or the low end of the temperature range), so a counterexample comes back as a handful
of numbers. Instances carry ``describe()`` (a JSON-able description, enough to rebuild them) and
``regime()`` (n, |V|, T, states, reversible), which :mod:`mlmix.theorem` prints with a counterexample.

What comes out, and how often the edge cases come up (measured over 100-200 draws by
``tests/test_public_strategies.py``, which fails if a frequency falls below the figure given here):

=============================  ======================================================================
strategy                       instances and edge cases
=============================  ======================================================================
:func:`stochastic_matrices`    row-stochastic matrices with exactly the requested closed classes,
                               period and transient states (checked on every draw by the test);
                               non-reversible unless ``reversible=True``
:func:`metastable_matrices`    irreducible chains whose certified gap lies in the requested range
                               (every draw; the gap is carried by the instance)
:func:`score_tables`           score tables at a temperature, by ``kind``; at T <= 0.3 at least 20%
                               have a gap of (P + P*)/2 below 1e-6 (27-32% over 120 draws, seeds
                               0-2), at T >= 2 under 5%; at least half of the ``"any"`` tables are
                               non-reversible (64-85%: incompatible conditionals)
:func:`ising_models`,          Ising / Potts models on a given or random graph, couplings and fields
:func:`potts_models`           k/2; at least 20% of random graphs have an isolated site
:func:`frames`                 sub-frames of a tabulated model (an MLM's exact table): 1..3 free
                               positions over 2..4 of its symbols
:func:`sources`                a source at a temperature (any family; spread / T capped)
:func:`contraction_sources`    T placed relative to Corollary 7's temperature: rho in [0.5, 0.999]
                               half of the time, rho = 0 cold product tables a quarter
:func:`basins`                 a table with a basin satisfying Theorem 8's Assumption 1
:func:`metastable_basins`      two-well basin tables at gamma / T in [18, 60] (gaps 1e-8 .. 1e-26)
:func:`rational_tables`        conditionals w / sum w with small positive integers w (exact rationals)
=============================  ======================================================================

Paper P's strategies (exponential families, mask distributions, eq. (5) clique models) are
:func:`exponential_families`, :func:`pseudolikelihood_instances` and :func:`clique_isings`.
"""

from __future__ import annotations

import networkx as nx
from hypothesis import strategies as st

from mlmix.verify import chain_instances as _C
from mlmix.verify import instances as _S
from mlmix.verify import pitfalls_strategies as _P
from mlmix.verify import regime_instances as _R
from mlmix.verify.chain_instances import MatrixInstance, frames, metastable_matrices, score_tables, stochastic_matrices
from mlmix.verify.instances import Instance as SourceInstance
from mlmix.verify.instances import temperatures

__all__ = [
    "MatrixInstance", "SourceInstance", "basins", "clique_isings", "contraction_sources", "exponential_families",
    "frames", "ising_models", "metastable_basins", "metastable_matrices", "potts_models", "pseudolikelihood_instances",
    "rational_tables", "score_tables", "sources", "stochastic_matrices", "temperatures",
]

#: Temperatures of the strategies below unless given (log-uniform).
T_RANGE = (_S.T_MIN, _S.T_MAX)


def ising_models(graph: nx.Graph | None = None, max_sites: int = 6,
                 temperature: tuple[float, float] = T_RANGE) -> st.SearchStrategy[SourceInstance]:
    """Ising models sum_{ij in E} J_ij x_i x_j + sum_i h_i x_i (x in {-1, 1}) on ``graph`` (default: a
    random graph on 2..max_sites sites, each edge present with probability 1/2), J_ij and h_i
    half-integers with |J| <= 3/2, |h| <= 1, at T log-uniform on ``temperature``. Shrinks to two sites
    with no edge, zero fields, T = 1."""
    return _C.graph_models(graph, 2, max_sites, temperature)


def potts_models(q: int = 3, graph: nx.Graph | None = None, max_sites: int = 5,
                 temperature: tuple[float, float] = T_RANGE) -> st.SearchStrategy[SourceInstance]:
    """Potts models with q >= 3 states on ``graph`` (or a random one, as :func:`ising_models`): couplings
    J_ij 1[x_i = x_j] and fields h_i(v), half-integers."""
    if q < 3:
        raise ValueError(f"a Potts model needs q >= 3 (q = 2 is ising_models), got {q}")
    return _C.graph_models(graph, q, max_sites, temperature)


def sources(max_states: int = _S.MAX_STATES, max_ratio: float = 30.0) -> st.SearchStrategy[SourceInstance]:
    """Any source (incompatible twice as often as compatible: Gaussian and half-integer score tables,
    perturbed and near-compatible joints, Ising/Potts, product tables) over at most ``max_states``
    states, at T log-uniform on [0.05, 20], raised where needed so that spread / T <= ``max_ratio``."""
    return _S.instances(max_states=max_states, max_ratio=max_ratio)


def contraction_sources(max_states: int = 243) -> st.SearchStrategy[SourceInstance]:
    """Sources for contraction bounds (Theorem 5 / Corollary 7 of paper G): T = u T* with u in
    [0.5, 8] (T* the Corollary 7 temperature; a quarter of the draws), the temperature where rho
    reaches 0.5 .. 0.999 (half), or product tables at T in [0.05, 0.5] (rho = 0, nearly deterministic
    sites; a quarter); ``eps`` in {1/4, 1/10, 1/100} for t_mix."""
    return _R.contraction_instances(_R.mostly_incompatible(max_states), max_states=max_states)


def basins(max_states: int = 729, two_wells: bool = False) -> st.SearchStrategy[SourceInstance]:
    """A score table and a basin B (``instance.basin``, a mask over V^n: a Hamming ball of radius 0..2)
    on which Theorem 8's Assumption 1 holds by construction with margin 1/2 .. 3; ``two_wells`` adds a
    second well so that B can carry mass <= 1/2."""
    return _R.basin_instances(max_states, two_wells=two_wells, max_ratio=60.0)


def metastable_basins(max_states: int = 81) -> st.SearchStrategy[SourceInstance]:
    """Two-well basin tables at gamma / T log-uniform on [18, 60]: spectral gaps ~1e-8 .. 1e-26."""
    return _R.metastable_instances(max_states)


def rational_tables(max_states: int = 16) -> st.SearchStrategy[SourceInstance]:
    """Conditionals pi_i(v | x_-i) = w / sum w for positive integers w <= 6 at T = 1 (``instance.weights``):
    exact rational chains for sympy/fractions checks."""
    return _S.rational_table_instances(max_states)


exponential_families = _P.families
pseudolikelihood_instances = _P.pl_instances
clique_isings = _P.clique_isings
