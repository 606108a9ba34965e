"""What the checks of paper P share: the paper id, the accuracy of enumerated matrices, the Loewner
ratio of two matrices, the conditioning test of an instance, and the base class of its theorems."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from mlmix.theory.training.exponential_family import condition_number
from mlmix.theory.training.pseudolikelihood import (
    PseudoLikelihood,
)
from mlmix.verify.pitfalls_strategies import (
    PLInstance,
)
from mlmix.verify.verdicts import (
    Applicability,
    Theorem,
)

PAPER = "pitfalls"

#: Relative accuracy of matrices built by enumeration (sums of exp of log-weights, a few hundred ulps).
MATRIX_RTOL = 1e-10

#: Instances with a worse-conditioned Fisher information or PL Hessian are not applicable.
MAX_INSTANCE_CONDITION = 1e6


def loewner_ratio(smaller: np.ndarray, larger: np.ndarray) -> float:
    """lambda_max(L^{-1/2} S L^{-1/2}) for symmetric S and positive definite L: S <= c L in Loewner
    order exactly when this is <= c."""
    sym = lambda M: (np.asarray(M) + np.asarray(M).T) / 2
    return float(scipy.linalg.eigh(sym(smaller), sym(larger), eigvals_only=True)[-1])


def _well_conditioned(matrices: dict[str, np.ndarray]) -> Applicability:
    for name, M in matrices.items():
        cond = condition_number(M)
        if not cond <= MAX_INSTANCE_CONDITION:
            return Applicability(False, f"near-singular {name} (condition number {cond:.3g} > "
                                        f"{MAX_INSTANCE_CONDITION:.0e}); not inverted")
    return Applicability(True)


def _realizable_pl(inst: PLInstance) -> PseudoLikelihood:
    return PseudoLikelihood(inst.family, inst.masks, inst.family.probabilities(inst.theta))


def _eig_rtol(*matrices: np.ndarray) -> float:
    """Relative accuracy of a generalised eigenvalue: condition numbers times the matrices' accuracy."""
    return MATRIX_RTOL * max(condition_number(M) for M in matrices)


class _PTheorem(Theorem):
    paper = PAPER
