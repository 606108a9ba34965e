"""Two Dobrushin-type bounds on the Glauber chain of a source of conditionals, as a user writes them.

rho = max_j sum_{i != j} rho_ij is the aggregate influence (paper G, Theorem 5). Theorem 5's
Wasserstein contraction by 1 - (1 - rho)/n bounds the modulus of every eigenvalue lambda != 1, so the
absolute spectral gap is at least (1 - rho)/n (true; attained by independent sites, rho = 0). Dropping
the 1/n is the deliberately wrong version.
"""

from mlmix import strategies as ms
from mlmix.theorem import inequality, not_checkable, theorem
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.local.influence import influence_matrix


def contracting(inst):
    rho = influence_matrix(inst.source).rho
    return rho < 1, f"rho = {rho:.3g} >= 1"


@theorem(statement="rho < 1 => absolute spectral gap of Glauber >= (1 - rho) / n",
         strategy=lambda: ms.contraction_sources(27), hypotheses=contracting)
def gap_from_contraction(inst):
    gap = Chain.from_source(inst.source).absolute_spectral_gap
    return inequality(gap, ">=", (1 - influence_matrix(inst.source).rho) / inst.space.length)


@theorem(statement="rho < 1 => absolute spectral gap of Glauber >= 1 - rho (WRONG: the 1/n is missing)",
         strategy=lambda: ms.contraction_sources(27), hypotheses=contracting)
def gap_without_n(inst):
    gap = Chain.from_source(inst.source).absolute_spectral_gap
    return inequality(gap, ">=", 1 - influence_matrix(inst.source).rho)


not_checkable("mybounds.bounds.large_n", "the relaxation time is O(n / (1 - rho)) uniformly as n -> infinity",
              "an asymptotic statement in n: no finite instance can refute it")
