"""Float conveniences over :class:`~mlmix.theory.chain.markov_chain.Chain` for scripts and tests.

Each function builds ``Chain(P, stationary=pi)`` and returns one figure as a plain number; a figure that
is only certified as an interval raises :class:`~mlmix.errors.UnresolvedError` instead of returning
roundoff. Use ``Chain`` directly to keep the method and accuracy, or to ask several questions of one chain.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mlmix.theory.chain.markov_chain import Chain
from mlmix.validation import Matrix, check_transition_matrix, check_vector


def _chain(P: Matrix, pi: np.ndarray | None) -> Chain:
    return Chain(P, stationary=pi)


def spectral_gap(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 - lambda_2 of a reversible chain as a float (:attr:`Chain.spectral_gap`; UnresolvedError when
    not resolved, ValueError-like missing result for a non-reversible chain). ``pi``: a known law."""
    return float(_chain(P, pi).spectral_gap)


def additive_gap(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 - lambda_2((P + P*)/2) as a float (:attr:`Chain.additive_gap`)."""
    return float(_chain(P, pi).additive_gap)


def poincare_constant(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 / additive gap as a float (:attr:`Chain.poincare_constant`)."""
    return float(_chain(P, pi).poincare_constant)


def absolute_spectral_gap(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 - max |lambda|, lambda != 1, as a float (:attr:`Chain.absolute_spectral_gap`)."""
    return float(_chain(P, pi).absolute_spectral_gap)


def relaxation_time(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 / absolute spectral gap as a float (:attr:`Chain.relaxation_time`)."""
    return float(_chain(P, pi).relaxation_time)


def multiplicative_gap(P: Matrix, pi: np.ndarray | None = None) -> float:
    """1 - sigma_2(P)^2 as a float (:attr:`Chain.multiplicative_gap`)."""
    return float(_chain(P, pi).multiplicative_gap)


def is_reversible(P: Matrix, pi: np.ndarray | None = None, rtol: float = 1e-10) -> bool:
    """Detailed balance pi(x) P(x, y) = pi(y) P(y, x): with respect to the stationary law when ``pi``
    is None (Kolmogorov's criterion in log space, :attr:`Chain.is_reversible`), else with respect to the
    given law, to ``rtol`` times max_xy pi(x) P(x, y)."""
    if pi is None:
        return _chain(P, None).is_reversible
    P = check_transition_matrix(P)
    pi = check_vector(pi, P.shape[0], "pi", nonnegative=True)
    Q = sp.csr_array(P).multiply(pi[:, None])
    return bool(abs(Q - Q.T).max() <= rtol * abs(Q).max())


def mixing_time(P: Matrix, eps: float = 0.25, pi: np.ndarray | None = None) -> int:
    """t_mix(eps) as an int (:meth:`mlmix.theory.chain.markov_chain.Chain.mixing_time`; UnresolvedError when only
    an interval is certified). ``pi``: a known stationary law."""
    return int(Chain(P, stationary=pi).mixing_time(eps))


def tv_distance(P: Matrix, t: int, pi: np.ndarray | None = None) -> float:
    """d(t) as a float (:meth:`mlmix.theory.chain.markov_chain.Chain.tv_distance`)."""
    return float(Chain(P, stationary=pi).tv_distance(t))


def distance_curve(P: Matrix, t_max: int, pi: np.ndarray | None = None) -> np.ndarray:
    """d(0), ..., d(t_max) from the worst start (:meth:`mlmix.theory.chain.markov_chain.Chain.distance_curve`)."""
    return np.asarray(Chain(P, stationary=pi).distance_curve(t_max))


def set_conductance(P: Matrix, S: np.ndarray, pi: np.ndarray | None = None) -> float:
    """Phi(S) as a float (:meth:`mlmix.theory.chain.markov_chain.Chain.set_conductance`); ``pi``: a known law."""
    return float(Chain(P, stationary=pi).set_conductance(S))
