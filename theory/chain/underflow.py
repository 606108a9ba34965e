"""Where the float64 matrix P of a :class:`~mlmix.theory.chain.markov_chain.Chain` cannot stand for the
chain: transitions that underflowed to 0 (other classes than the exact sign pattern: the stationary
law in log space, UnderflowError elsewhere), and subnormal entries, whose rounding widens the stated
accuracy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mlmix.errors import UnderflowError
from mlmix.limits import DENSE_STATIONARY_LIMIT
from mlmix.theory.chain.stationary import log_space_stationary
from mlmix.theory.kernels.support import kernel_log_offdiagonal
from mlmix.theory.results import NAMES, VectorResult

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


def underflow_reason(chain: Chain) -> str | None:
    """Why the float matrix P cannot stand for the chain, or None: transitions positive in exact
    arithmetic underflowed to 0 and P has other communicating or closed classes than the exact
    pattern. Then the stationary law is computed in log space where the kernel's logarithms are
    at hand (:meth:`_log_space_law`), and what is computed from P with it (gaps, conductance,
    Kemeny constant, t_mix, ...), reversibility, the laws of the closed classes and the absorption
    quantities raise :class:`~mlmix.errors.UnderflowError` with this reason."""
    if chain.facts.support is None:
        return None
    exact, flt = chain.structure, chain.facts.float_structure
    pairs = np.unique(np.stack([exact.labels, flt.labels]), axis=1).shape[1]
    same = pairs == exact.n_classes == flt.n_classes and \
        np.array_equal(exact.closed[exact.labels], flt.closed[flt.labels])
    if same:
        return None
    lost = chain.facts.support.nnz - sp.csr_array(chain.P).count_nonzero()
    return (f"{lost} transition probabilities are positive but underflow to 0 in float64 (below 5e-324): "
            f"the exact chain has {exact.n_classes} communicating class(es), {int(exact.closed.sum())} closed, "
            f"the float64 matrix {flt.n_classes}, {int(flt.closed.sum())} closed; what is computed from the float64 "
            "matrix (gaps, conductance, Kemeny constant, t_mix) is not resolved")


def subnormal_rounding(chain: Chain) -> tuple[float, str]:
    """(eps, note) for the positive entries of P below the normal range (2.2e-308): a subnormal p is
    a multiple of 2^-1074, so it carries a relative rounding up to delta = 2^-1075 / p (1e-10 at
    p = 2.5e-314), however accurately it was computed. With every off-diagonal entry moved by a
    relative delta, rho = (1 + delta) / (1 - delta), the Markov chain tree theorem moves pi (sums of
    products of N - 1 entries) by a factor within rho^(N-1), and edge measures pi(x) P(x, y), the
    Dirichlet form and Var_pi (hence the gaps and conductances) and the forest sums of hitting times
    and the Kemeny constant by factors within rho^(2N); eps = rho^(2N) - 1 (0 when P has no such
    entry)."""
    if chain.facts.representation == "operator":  # the operator's rounding is in its own bounds
        return 0.0, ""
    data = np.abs(chain.P.data if sp.issparse(chain.P) else np.asarray(chain.P).ravel())
    small = data[(data > 0) & (data < np.finfo(np.float64).tiny)]
    if small.size == 0:
        return 0.0, ""
    delta = 0.5 * (2.0**-1074 / float(small.min()))  # half an ulp of the subnormals, relative
    eps = math.expm1(2 * chain.n_states * (math.log1p(delta) - math.log1p(-delta))) if delta < 1 else math.inf
    return eps, (f"; widened for {small.size} entries of P below the normal range of float64 (relative "
                 f"rounding up to {delta:.1e})")


def log_space_law(chain: Chain) -> VectorResult:
    """The stationary law of a chain whose float matrix underflows (:attr:`_underflow`): GTH in log
    space on the logarithms of its transition probabilities, taken from the source (a Glauber or
    MH kernel, whose entries are single conditionals), on the exact closed class; UnderflowError
    where those logarithms are not at hand or the bound is not below 1."""
    reason = chain.facts.underflow or ""
    L = None
    if chain.facts.source_kernel is not None and chain.n_states <= DENSE_STATIONARY_LIMIT:
        kernel, options = chain.facts.source_kernel
        L = kernel_log_offdiagonal(chain.source, kernel, **options)
    if L is None:
        raise UnderflowError(reason + " (the law in log space needs a Glauber or MH chain from a source, "
                             f"of at most {DENSE_STATIONARY_LIMIT} states)")
    C = chain.structure.recurrent_class()
    inner = log_space_stationary(L[np.ix_(C, C)])
    if inner.rel_error is None:
        raise UnderflowError(reason + f" (the log-space elimination's bound on {C.size} states is not below 1)")
    N = chain.n_states
    logpi = np.full(N, -np.inf)
    logpi[C] = inner.log_value
    where = f"; zero on the {N - C.size} transient states" if C.size < N else ""
    return VectorResult(NAMES["stationary"], np.exp(logpi), f"{inner.method}{where} (transition probabilities "
                        "underflow float64)", inner.rel_error, None, None, logpi)
