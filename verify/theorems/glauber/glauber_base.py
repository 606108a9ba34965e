"""What the checks of paper G share: tolerances, the Glauber kernel, stationary law and conditionals of an
instance, the parts that compare two computations (:func:`identity`) or a mixing time against a bound
(:func:`mixing_part`), the two-spin Ising instance, and :class:`GlauberTheorem`."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
from scipy.special import softmax

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.linalg.matrices import to_dense
from mlmix.theory.sources.conditionals import IsingModel
from mlmix.theory.sources.contexts import score_table
from mlmix.verify import instances as S
from mlmix.verify.verdicts import (
    Applicability,
    Part,
    Theorem,
    part,
)

#: Relative error of quantities computed from softmax conditionals (a few ulps per operation).
LOCAL_RTOL = 1e-12
#: Relative error of quantities built from a stationary law (GTH / detailed balance are entrywise
#: accurate to a few hundred ulps on <= 729 states) and matrix powers.
CHAIN_RTOL = 1e-9
#: Absolute error of a worst-start TV distance computed from dense matrix powers.
TV_ATOL = 1e-10


def _positive(inst: S.Instance) -> Applicability:
    """Strictly positive conditionals pi_i(v|x_{-i}) > 0 (finite scores, no float underflow)."""
    table = score_table(inst.source)
    if not np.isfinite(table).all():
        return Applicability(False, "some conditional is zero (a score is -inf)")
    spread = (table.max(axis=-1) - table.min(axis=-1)).max() / inst.source.temperature
    if spread > 700:
        return Applicability(False, f"score spread / T = {spread:.0f} underflows float64 probabilities")
    return Applicability(True)


def _kernel(inst: S.Instance) -> np.ndarray:
    return to_dense(glauber_kernel(inst.source))


def _pi(P: np.ndarray) -> np.ndarray:
    """The stationary law (GTH elimination or detailed balance: entrywise relative accuracy)."""
    return Chain(P).stationary.value


def _conditionals(inst: S.Instance) -> np.ndarray:
    """pi_i(v | x_{-i}) for every state, site and symbol, from the scores (independent of the kernel)."""
    return softmax(score_table(inst.source) / inst.source.temperature, axis=-1)


def identity(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float = 0.0) -> tuple[Part, bool]:
    """Two computations of the same array: the part compares them at the entry where ``b`` is largest
    in modulus (so scaling one side fails unless that entry is 0); the flag says whether every entry
    agrees within rtol |b| + atol."""
    a, b = np.ravel(np.asarray(a, dtype=np.float64)), np.ravel(np.asarray(b, dtype=np.float64))
    k = int(np.argmax(np.abs(b)))
    ok = bool((np.abs(a - b) <= rtol * np.maximum(np.abs(a), np.abs(b)) + atol).all())
    return part(name, a[k], b[k], "==", rtol, atol, ratio=False), ok


def mixing_part(name: str, P: np.ndarray, eps: float, pi: np.ndarray, bound: float, relation: str) -> Part:
    """t_mix(eps) against ``bound``: exact when the chain's powers resolve it, else its certified
    interval, whose width becomes the error of the side (a violation is then reported only when the
    whole interval violates the bound) (:meth:`mlmix.theory.chain.markov_chain.Chain.mixing_time`)."""
    if pi.min() < 1e-300:  # the stationary law underflows: t_mix is not resolvable here (an unknown side)
        return Part(name, bound, bound, relation, math.inf, 0.0)
    t = Chain(P, stationary=pi).mixing_time(eps)
    if t.resolved:
        return Part(name, float(t.value), bound, relation, 0.0, LOCAL_RTOL * abs(bound))
    lo = float(t.lower or 0.0)
    hi = float(t.upper) if t.upper is not None else max(lo, bound)
    return Part(name, (lo + hi) / 2, bound, relation, (hi - lo) / 2, LOCAL_RTOL * abs(bound))


def two_spin_ising(J: float = 0.4, T: float = 1.3) -> S.Instance:
    """Two spins, coupling J, zero fields: rho_01 = tanh(J/T) = tanh(Delta/(4T)) (a zero local field is
    attainable), and the same-site maximal coupling is the optimal one (W1 = 1 - (1 - rho)/2)."""
    model = IsingModel(nx.path_graph(2), couplings=J).at_temperature(T)
    return S.Instance(model, "ising", {"edges": [[0, 1]], "J": [J], "h": [0.0, 0.0]})


class GlauberTheorem(Theorem):
    paper = "glauber"
