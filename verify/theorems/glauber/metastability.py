"""Paper G, section 5.3: low-temperature metastability on a basin with a uniform local margin
(Assumption 1 and Theorem 8: escape probability, conductance, mixing time)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.local.margins import basin_margin
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.contexts import score_table
from mlmix.theory.sources.space import StateSpace
from mlmix.verify import instances as S
from mlmix.verify.regime_instances import basin_instances, boost_basin, marginless_basin_instances, metastable_instances
from mlmix.verify.theorems.glauber.glauber_base import (
    CHAIN_RTOL,
    LOCAL_RTOL,
    GlauberTheorem,
    _conditionals,
    _kernel,
    _pi,
    _positive,
    mixing_part,
)
from mlmix.verify.verdicts import (
    Applicability,
    Attaining,
    Counterexample,
    Part,
    Verdict,
    Violation,
    register,
    verdict,
)

# ----------------------------------------------------------------------------------------------
# Theorem 8


def singleton_basin(margin: float = 1.0, T: float = 0.5) -> S.Instance:
    """B = {00} on {0,1}^2 with every exit token exactly ``margin`` below: P(00, B^c) = 1/(1 + e^{gamma/T})."""
    space = StateSpace(2, 2)
    table = np.zeros((2, 2, 2))
    basin = np.zeros(4, dtype=bool)
    basin[0] = True
    boost_basin(table, space, basin, margin)
    return S.Instance(ScoreTable(space, table, T), "basin-table", {"scores": table.tolist(), "margin": margin},
                      basin=basin)


def line_basin(margin: float = 1.0, T: float = 0.5) -> S.Instance:
    """B = {000, 100} on {0,1}^3 (site 0 moves inside B): m_x = 2 < n = 3 exit sites at both states, every
    exit token exactly ``margin`` below, so P(x, B^c) = (2/3)/(1 + e^{gamma/T}) exactly (a bound with n in
    place of m_x is 3/2 looser here)."""
    space = StateSpace(2, 3)
    states = space.all_states()
    table = np.zeros((3, 4, 2))
    basin = (states[:, 1] == 0) & (states[:, 2] == 0)
    boost_basin(table, space, basin, margin)
    return S.Instance(ScoreTable(space, table, T), "basin-table", {"scores": table.tolist(), "margin": margin},
                      basin=basin)


def _basin_hypotheses(instance: S.Instance) -> Applicability:
    B = instance.basin
    if B is None or B.all() or not B.any():
        return Applicability(False, "the basin must be a proper non-empty set")
    margin = basin_margin(instance.source, B)
    if not margin.holds:
        return Applicability(False, f"Assumption 1 fails (gamma = {margin.gamma:.4g}, all argmax = {margin.all_argmax})")
    return _positive(instance)


def _sharp_escape(gamma: float, T: float, q: int, exits: np.ndarray, n: int) -> np.ndarray:
    """(m_x/n) (|V|-1) / (|V|-1 + e^{gamma/T}) (the per-state bound of the proof, before e^{-gamma/T})."""
    with np.errstate(over="ignore"):
        return exits / n * (q - 1) / (q - 1 + np.exp(gamma / T))


def _paper_escape(gamma: float, T: float, q: int, exits: np.ndarray, n: int) -> np.ndarray:
    return exits / n * (q - 1) * np.exp(-gamma / T)


@register
class Thm8Escape(GlauberTheorem):
    id = "glauber.thm8.escape"
    number = "Theorem 8 (escape; App. E: Theorem 12)"
    statement = ("Assumption 1 on B with margin gamma => for every x in B: P_T(x, B^c) <= (m_x/n)(|V|-1)/(|V|-1 + "
                 "e^{gamma/T}) <= (m_x/n)(|V|-1) e^{-gamma/T}, m_x the number of exit sites of x")
    conventions = "Assumption 1 read as in THEOREMS.md 1.20 (margin on exit tokens; exit sites hold an argmax)."

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(basin_instances(max_states=729, max_ratio=60.0), metastable_instances(243))

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _basin_hypotheses(instance)

    def check(self, instance: S.Instance) -> Verdict:
        B = instance.basin
        margin = basin_margin(instance.source, B)
        cond = _conditionals(instance)
        space = instance.space
        T, q, n = instance.source.temperature, space.vocab_size, space.length
        # escape probabilities from the conditionals: (1/n) sum_i pi_i(exit tokens), no kernel subtraction
        escape = np.zeros(margin.states.size)
        for i in range(n):
            out = ~B[space.neighbours(margin.states, i)]
            escape += (cond[margin.states, i] * out).sum(axis=1) / n
        kernel_escape = _kernel(instance)[np.ix_(margin.states, np.flatnonzero(~B))].sum(axis=1)
        sharp = _sharp_escape(margin.gamma, T, q, margin.exit_sites, n)
        paper = _paper_escape(margin.gamma, T, q, margin.exit_sites, n)
        exiting = np.flatnonzero(margin.exit_sites > 0)
        k = int(exiting[np.argmax(escape[exiting] / sharp[exiting])])
        m = int(exiting[np.argmax(sharp[exiting] / paper[exiting])])
        return verdict(
            Part("P(x, B^c) <= (m_x/n)(|V|-1)/(|V|-1+e^{gamma/T})", escape[k], sharp[k], "<=", LOCAL_RTOL * escape[k],
                 LOCAL_RTOL * sharp[k]),
            Part("(|V|-1)/(|V|-1+e^{gamma/T}) <= (|V|-1) e^{-gamma/T}", sharp[m], paper[m], "<=",
                 LOCAL_RTOL * sharp[m], LOCAL_RTOL * paper[m]),
            conditions={"kernel rows agree": bool(np.allclose(kernel_escape, escape, rtol=1e-9, atol=1e-15))},
            gamma=margin.gamma, gamma_over_T=margin.gamma / T, state=int(margin.states[k]))

    attaining = (Attaining("B = {00} on {0,1}^2, margin 1, T = 1/2: P(00, B^c) = 1/(1 + e^{gamma/T}) exactly",
                           singleton_basin, looseness=(1.0001, 1.1354)),
                 Attaining("B = {000, 100} on {0,1}^3 (m_x = 2 < n = 3 exit sites), margin 1, T = 1/2: "
                           "P(x, B^c) = (2/3)/(1 + e^{gamma/T}) exactly", line_basin, looseness=(1.0001, 1.1354)))


def _conductance(P: np.ndarray, pi: np.ndarray, B: np.ndarray) -> float:
    """Phi(B) = sum_{x in B} pi(x) P(x, B^c) / pi(B) (a sum of positive terms: relative accuracy)."""
    return float(pi[B] @ P[np.ix_(B, ~B)].sum(axis=1) / pi[B].sum())


@register
class Thm8Conductance(GlauberTheorem):
    id = "glauber.thm8.conductance"
    number = "Theorem 8 (conductance)"
    statement = ("Assumption 1 on B => Phi(B) = Q(B, B^c)/mu_T(B) <= max_x (m_x/n)(|V|-1)/(|V|-1+e^{gamma/T}) "
                 "<= (|V|-1) e^{-gamma/T}, mu_T the stationary law of the (non-reversible) chain")

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(basin_instances(max_states=729, max_ratio=60.0),
                         basin_instances(max_states=243, two_wells=True, max_ratio=60.0), metastable_instances(243))

    def hypotheses(self, instance: S.Instance) -> Applicability:
        return _basin_hypotheses(instance)

    def check(self, instance: S.Instance) -> Verdict:
        B = instance.basin
        margin = basin_margin(instance.source, B)
        P = _kernel(instance)
        chain = Chain(P)
        phi = _conductance(P, chain.stationary.value, B)
        T, q, n = instance.source.temperature, instance.space.vocab_size, instance.space.length
        sharp = float(_sharp_escape(margin.gamma, T, q, margin.exit_sites, n).max())
        paper = (q - 1) * math.exp(-margin.gamma / T)
        return verdict(Part("Phi(B) <= max_x (m_x/n)(|V|-1)/(|V|-1+e^{gamma/T})", phi, sharp, "<=", CHAIN_RTOL * phi,
                            LOCAL_RTOL * sharp),
                       Part("Phi(B) <= (|V|-1) e^{-gamma/T}", phi, paper, "<=", CHAIN_RTOL * phi, LOCAL_RTOL * paper),
                       gamma=margin.gamma, gamma_over_T=margin.gamma / T,
                       gap=chain.additive_gap.value if instance.space.size <= 243 else None)

    attaining = (Attaining("B = {00} on {0,1}^2, margin 1, T = 1/2: Phi(B) = P(00, B^c) = the per-state bound",
                           singleton_basin, looseness=(1.0001, 1.1354)),
                 Attaining("B = {000, 100} on {0,1}^3 (m_x = 2 < n = 3 exit sites), margin 1, T = 1/2: Phi(B) = "
                           "(2/3)/(1 + e^{gamma/T}) = the per-state bound", line_basin, looseness=(1.0001, 1.7031)))


@register
class Thm8Mixing(GlauberTheorem):
    """The exponential bound is attained as gamma/T grows (two wells, ratio 1 + e^{-gamma/T}). The first bound,
    t_mix(1/4) >= (mu(B^c) - 1/4)/Phi(B), is not attained at eps = 1/4 on these chains: on an exact sampler
    (n = 1, t_mix = 1, Phi(B) = mu(B^c)) its ratio is mu(B^c)/(mu(B^c) - 1/4) >= 4/3 (and Assumption 1
    keeps mu(B) > 1/|V| there); the least loose instance found (|V| = 16, 1.367) is stored with the two-well one (2.708)."""

    id = "glauber.thm8.mixing"
    number = "Theorem 8 (mixing)"
    statement = ("Assumption 1 on B and mu_T(B) <= 1/2 => t_mix >= 1/(4 Phi(B)) >= e^{gamma/T} / (4(|V|-1)); "
                 "checked through the sharper t_mix(1/4) >= (mu_T(B^c) - 1/4)/Phi(B) the proof uses")
    conventions = ("Needs only stationarity of mu_T (valid for the non-reversible chain). The paper's 1/(4 Phi(B)) "
                   "is implied by (mu(B^c) - 1/4)/Phi(B) when mu(B) <= 1/2 and is checked as a condition: on Glauber "
                   "chains satisfying Assumption 1, t_mix 4 Phi(B) stayed >= 2.5, so that form alone cannot be "
                   "shown to fail by a factor 2.")
    budget = 0.5

    def strategy(self) -> st.SearchStrategy:
        return basin_instances(max_states=128, two_wells=True, max_ratio=40.0)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        ok = _basin_hypotheses(instance)
        if not ok:
            return ok
        mass = float(_pi(_kernel(instance))[instance.basin].sum())
        return Applicability(mass <= 0.5, f"mu_T(B) = {mass:.4g} > 1/2")

    def check(self, instance: S.Instance) -> Verdict:
        B = instance.basin
        margin = basin_margin(instance.source, B)
        P = _kernel(instance)
        pi = _pi(P)
        phi = _conductance(P, pi, B)
        general = (float(pi[~B].sum()) - 0.25) / phi
        mix = mixing_part("t_mix(1/4) >= (mu(B^c) - 1/4)/Phi(B)", P, 0.25, pi, general, ">=")
        T, q = instance.source.temperature, instance.space.vocab_size
        exponential = math.exp(margin.gamma / T) / (4 * (q - 1))
        return verdict(mix, Part("1/(4 Phi(B)) >= e^{gamma/T}/(4(|V|-1))", 1 / (4 * phi), exponential, ">=",
                                 CHAIN_RTOL / (4 * phi), LOCAL_RTOL * exponential),
                       conditions={"t_mix >= 1/(4 Phi(B))": mix.lhs + mix.lhs_error >= 1 / (4 * phi) * (1 - CHAIN_RTOL)},
                       gamma=margin.gamma, conductance=phi, mass=float(pi[B].sum()),
                       gap=Chain(P, stationary=pi).additive_gap.value)

    violations = (Violation(
        "Assumption 1 (argmax at exit-causing sites)", lambda: marginless_basin_instances(),
        lambda inst: _escape_beyond_positive_margin(inst),
        "a basin state that is not an argmax at one site escapes with probability >= 1/(2n) at every T: "
        "the margin of its other exit pairs no longer bounds the escape"),
        Violation("mu_T(B) <= 1/2", lambda: basin_instances(max_states=27, max_ratio=12.0),
                  lambda inst: not Thm8Mixing().check(inst).holds,
                  "a single deep basin holds most of the mass: the chain mixes fast (into B) although Phi(B) is tiny"))
    counterexamples = (Counterexample(
        "|V| = 2, n = 2, basin B = {00} with margin 2 at T = 1/2 and no second well: mu(B) = 0.96 > 1/2, "
        "t_mix(1/4) = 2 < 1/(4 Phi(B))",
        lambda: single_well_instance(), dropped="mu_T(B) <= 1/2"),)
    attaining = (
        Attaining("wells {00} and {11} on {0,1}^2, margin 2, T = 1/2: Phi(B) = P(00, B^c) = 1/(1 + e^{gamma/T}), so "
                  "1/(4 Phi) is e^{gamma/T}/4 (1 + e^{-gamma/T}) = 1.0183 x the exponential bound (t_mix = 2.708 x "
                  "the first bound)", lambda: wells_instance(2, 2, (0, 3), 2.0, 0.5), looseness=(2.7085, 1.0184)),
        Attaining("one site, |V| = 16, B = {0} with margin 0.1, T = 1 (an exact sampler: t_mix = 1, Phi(B) = "
                  "mu(B^c)): t_mix / ((mu(B^c) - 1/4)/Phi) = mu(B^c)/(mu(B^c) - 1/4) = 1.367, the best ratio "
                  "found for the first bound (> 4/3 on every exact sampler)",
                  lambda: wells_instance(16, 1, (0,), 0.1, 1.0), looseness=(1.3670, 14.573)))


def wells_instance(q: int, n: int, wells: tuple[int, ...], margin: float, T: float) -> S.Instance:
    """A score table on V^n with every state of ``wells`` (state indices) boosted by ``margin`` (each on its
    own, the first last): Assumption 1 holds on B = {wells[0]} with margin gamma = ``margin``."""
    space = StateSpace(q, n)
    table = np.zeros((n, q ** (n - 1), q))
    for w in reversed(wells):
        well = np.zeros(space.size, dtype=bool)
        well[w] = True
        boost_basin(table, space, well, margin)
    basin = np.zeros(space.size, dtype=bool)
    basin[wells[0]] = True
    return S.Instance(ScoreTable(space, table, T), "basin-table", {"scores": table.tolist(), "margin": margin},
                      basin=basin)


def single_well_instance() -> S.Instance:
    """A single deep well B = {00} on {0,1}^2 (scores 0 boosted by margin 2) at T = 1/2."""
    space = StateSpace(2, 2)
    table = np.zeros((2, 2, 2))
    basin = np.zeros(4, dtype=bool)
    basin[0] = True
    boost_basin(table, space, basin, 2.0)
    return S.Instance(ScoreTable(space, table, 0.5), "basin-table", {"scores": table.tolist(), "margin": 2.0},
                      basin=basin)


def _escape_beyond_positive_margin(inst: S.Instance) -> bool:
    """For a singleton basin {x}: P_T(x, B^c) > (m_x/n)(|V|-1) e^{-g/T}, g = the smallest positive gap
    s_i(x_i) - s_i(v) over exit pairs (the margin Assumption 1 would give without the argmax part)."""
    x = int(np.flatnonzero(inst.basin)[0])
    scores = score_table(inst.source)[x]  # (n, q)
    current = scores[np.arange(inst.space.length), inst.space.decode(x)]
    gaps = (current[:, None] - scores)[scores != current[:, None]]
    g = float(gaps[gaps > 0].min()) if (gaps > 0).any() else math.inf
    escape = 1.0 - float(_kernel(inst)[x, x])
    return escape > (inst.space.vocab_size - 1) * math.exp(-g / inst.source.temperature)
