"""The absolute spectral gap gamma_* = 1 - max{|lambda| : lambda != 1 an eigenvalue of P} of a
non-reversible chain (THEOREMS.md 1.15's relaxation time is 1 / gamma_*), with one algorithm for every
representation: a dense array, a CSR matrix and a matrix-free operator of the same N states get the
same answer, because the algorithm is chosen by N alone.

* N <= :data:`~mlmix.limits.DENSE_SPECTRAL_LIMIT`: P is assembled (a CSR matrix by ``toarray``, an
  operator by applying it to the N columns of the identity: column j of P is P e_j, the operator's own
  entries) and every eigenvalue is computed by LAPACK (:func:`~mlmix.theory.chain.spectral.modulus_gap`:
  error <= 4 N u ||P||_F cond(lambda_2), the first-order bound of the eigenvalue's condition number).
* Beyond: a certified enclosure [1 - sigma_2, 1]. An eigenvector f of an eigenvalue lambda != 1 has
  pi(f) = 0 (pi P f = pi f = lambda pi(f)), so in L^2(pi) |lambda| ||f|| = ||P f|| <= sigma_2 ||f||,
  where sigma_2^2 = 1 - g_mult is the second eigenvalue of P* P (g_mult the multiplicative gap). Hence
  gamma_* >= 1 - sqrt(1 - g_mult) = g_mult / (1 + sqrt(1 - g_mult)), from the certified lower end of
  g_mult; the upper end is 1 (|lambda_2| >= 0). Krylov-Schur (:mod:`mlmix.theory.linalg.arnoldi`) on
  P - 1 pi^T (eigenvalue 1 sent to 0, every other eigenvalue kept) estimates 1 - |lambda_2|; for a
  non-normal P its small residual does not bound the error (the Ritz value is an eigenvalue of P + E,
  ||E|| the residual, which can be far from every eigenvalue of P), so the estimate is reported in
  ``details`` and the reason, never as an end of the interval.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mlmix.errors import MemoryLimitError
from mlmix.limits import DENSE_SPECTRAL_LIMIT
from mlmix.theory.chain.spectral import bottom_gap, modulus_gap, operator_absolute_gap
from mlmix.theory.results import DEFAULT_RTOL, EPS, NAMES, Result, renamed
from mlmix.validation import check_memory

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain

NAME = "1 - |lambda_2|"


def kernel_functions(op: Any) -> Any:
    """P acting on functions (u -> P u) of a :class:`~mlmix.theory.kernels.operators.KernelOperator`,
    as an :class:`~mlmix.theory.linalg.operator.Operator` (sharded when ``op`` is)."""
    # deferred: the operator type imports torch, which dense chains never load
    from mlmix.theory.linalg.operator import Operator

    return Operator(lambda u, out: op.apply(u, "functions", out), op.local_size, op.dtype, op.device, op.comm)


def _is_matrix(P: Any) -> bool:
    return isinstance(P, (np.ndarray, spla.LinearOperator)) or sp.issparse(P)


def _assemblable(P: Any) -> bool:
    """An array, a CSR matrix, a scipy LinearOperator, or a float64 Operator on one process."""
    if _is_matrix(P):
        return True
    # deferred: an Operator exists only where torch is loaded
    import torch

    return P.comm.world_size == 1 and P.dtype == torch.float64


def _fits(N: int) -> bool:
    """Whether the dense eigensolver's matrix, eigenvectors and work space (about 6 N^2 numbers) fit the
    memory limit in force; otherwise the certified interval of the large chains is given."""
    try:
        check_memory(8.0 * N * N * 6, f"the eigenvalues and eigenvectors of {N} states")
    except MemoryLimitError:
        return False
    return True


def assemble(P: Any, n_states: int) -> np.ndarray:
    """The dense N x N matrix of P: as is, from CSR, or column by column P e_j from an operator."""
    check_memory(8.0 * n_states * n_states, f"the dense matrix of {n_states} states")
    if isinstance(P, np.ndarray):
        return np.asarray(P, dtype=np.float64)
    if sp.issparse(P):
        return sp.csr_array(P).toarray()
    out = np.empty((n_states, n_states))
    e = np.zeros(n_states)
    if isinstance(P, spla.LinearOperator):
        for j in range(n_states):
            e[j] = 1.0
            out[:, j] = np.ravel(P @ e)
            e[j] = 0.0
        return out
    # deferred: an Operator exists only where torch is loaded
    import torch

    et = torch.zeros(n_states, dtype=torch.float64, device=P.device)
    col = torch.empty_like(et)
    for j in range(n_states):
        et[j] = 1.0
        out[:, j] = P.apply(et, col).cpu().numpy()
        et[j] = 0.0
    return out


def absolute_gap(P: Any, n_states: int, stationary: Callable[[], Any],
                 multiplicative_gap: Callable[[], Result], *, rtol: float = DEFAULT_RTOL,
                 max_matvecs: int = 5_000) -> Result:
    """gamma_* = 1 - |lambda_2| of an irreducible aperiodic non-reversible P (module docstring): an
    ndarray, CSR matrix, scipy ``LinearOperator`` or :class:`Operator` (u -> P u). ``stationary`` and
    ``multiplicative_gap`` (a Result enclosing g_mult) are called only beyond the dense size."""
    N = int(n_states)
    if N <= DENSE_SPECTRAL_LIMIT and _assemblable(P) and _fits(N):
        r = modulus_gap(assemble(P, N), rtol=rtol)
        how = "" if isinstance(P, np.ndarray) else \
            ("assembled from the CSR matrix; " if sp.issparse(P) else "assembled from the operator (P e_j); ")
        return Result(r.name, r.value, how + r.method, r.rel_error, r.lower, r.upper, r.reason, r.details)
    mult = multiplicative_gap()
    m = mult.lower if mult.lower is not None and mult.lower > 0 else 0.0
    lower = m / (1 + math.sqrt(1 - min(m, 1.0))) * (1 - 8 * EPS)
    estimate = _krylov_estimate(P, stationary(), max_matvecs)
    method = ("lower end 1 - sigma_2(P) = g_mult / (1 + sqrt(1 - g_mult)) from the multiplicative gap's lower "
              "end (|lambda| <= sigma_2 on mean-zero functions); upper end 1; estimate by Krylov-Schur on "
              "P - 1 pi^T")
    reason = (f"beyond {DENSE_SPECTRAL_LIMIT} states (or the memory limit) the eigenvalues of a non-reversible P "
              f"are estimated, not certified: Krylov-Schur gives 1 - |lambda_2| ~ {estimate['estimate']:.6g} (residual "
              f"{estimate['residual']:.1e}), but a small residual of a non-normal matrix does not bound the "
              "error")
    return Result.interval(NAME, lower, 1.0, method, reason, multiplicative_gap_lower=m, **estimate)


def _krylov_estimate(P: Any, pi: Any, max_matvecs: int) -> dict:
    """Krylov-Schur on P - 1 pi^T: the Ritz value of largest modulus, its residual and the work."""
    # deferred: the Krylov engine imports torch, which dense chains never load
    import torch

    from mlmix.theory.linalg.arnoldi import largest_modulus
    from mlmix.theory.linalg.krylov import inner
    from mlmix.theory.linalg.operator import Operator, as_operator

    op = as_operator(P)
    w = torch.as_tensor(np.asarray(pi, dtype=np.float64)) if isinstance(pi, np.ndarray) else pi
    w = w.to(op.dtype).to(op.device)

    def deflated(u: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        op.apply(u, out)
        return out.sub_(float(inner(op.comm, w, u)))

    gen = torch.Generator(device="cpu").manual_seed(0)
    v0 = torch.randn(w.numel(), generator=gen, dtype=torch.float64).to(op.dtype).to(op.device)
    v0.sub_(float(inner(op.comm, w, v0)) / float(inner(op.comm, w, torch.ones_like(w))))
    ritz = largest_modulus(Operator(deflated, op.n, op.dtype, op.device, op.comm), v0, tol=1e-10,
                           max_matvecs=max_matvecs)
    return {"estimate": 1.0 - abs(ritz.value), "eigenvalue": repr(ritz.value), "residual": ritz.residual,
            "matvecs": ritz.matvecs, "arnoldi_converged": ritz.converged}


# ------------------------------------------------------------ the choice for a Chain

def chain_absolute_gap(chain: Chain) -> Result:
    """gamma_* = 1 - max{|lambda| : lambda != 1} of a chain
    (:attr:`Chain.absolute_spectral_gap <mlmix.theory.chain.markov_chain.Chain.absolute_spectral_gap>`). Routes:

    * several closed classes with a given positive law: exactly 0 (eigenvalue 1 is repeated);
    * a matrix-free chain of a matrix with period d > 1: exactly 0 (the period is read off the matrix);
    * matrix-free, reversible: min(gap, 1 + lambda_min) with the operator's bound on lambda_min (the gap
      itself where lambda_min >= 0, :func:`~mlmix.theory.chain.spectral.operator_absolute_gap`);
    * matrix-free, non-reversible: :func:`absolute_gap` on P acting on functions (:func:`kernel_functions`);
    * period d > 1: exactly 0 (exp(2 pi i / d) is an eigenvalue);
    * non-reversible matrix (dense or CSR, on the closed class): :func:`absolute_gap` (all eigenvalues
      up to :data:`~mlmix.limits.DENSE_SPECTRAL_LIMIT` states, the enclosure [1 - sigma_2, 1] beyond);
    * reversible matrix: min(gap, 1 + lambda_min) by interval arithmetic, 1 + lambda_min from
      :func:`~mlmix.theory.chain.spectral.bottom_gap` widened for P's subnormal entries."""
    core = chain.facts.core
    if chain.facts.reducible_given:
        return Result.exact(NAMES["absolute_spectral_gap"], 0.0, "several closed classes: eigenvalue 1 is repeated")
    matrix_free = chain.facts.representation == "operator"
    if matrix_free and chain.op.matrix is not None and chain.period > 1:  # known from the matrix
        return Result.exact(NAMES["absolute_spectral_gap"], 0.0, f"period {chain.period} from a breadth-first "
                            f"search: exp(2 pi i / {chain.period}) is an eigenvalue")
    if matrix_free and chain.is_reversible:
        return operator_absolute_gap(chain.op, chain.additive_gap)
    if matrix_free:
        return renamed(absolute_gap(kernel_functions(chain.op), chain.n_states, lambda: chain.facts.pi_t,
                                    lambda: chain.multiplicative_gap), NAMES["absolute_spectral_gap"])
    if chain.period > 1:  # exp(2 pi i / d) is an eigenvalue: exactly 0
        return Result.exact(NAMES["absolute_spectral_gap"], 0.0, f"period {chain.period} from a breadth-first "
                            f"search: exp(2 pi i / {chain.period}) is an eigenvalue{chain.facts.on_core()}")
    if not core.is_reversible:
        gap = absolute_gap(core.P, core.n_states, lambda: np.exp(core.facts.logpi), lambda: chain.multiplicative_gap)
        return renamed(gap, NAMES["absolute_spectral_gap"], chain.facts.on_core())
    gap = chain.spectral_gap
    bottom = bottom_gap(core.P, core.facts.logpi, dense=core.facts.representation == "dense")
    bottom = chain.facts.rounded_entries(bottom, (0.0, 2.0))
    return _minimum(NAMES["absolute_spectral_gap"], gap, bottom)


def _minimum(name: str, a: Result, b: Result) -> Result:
    """min(a, b) by interval arithmetic: [min of the lower ends, min of the upper ends]."""
    if a.resolved and b.resolved and (a.upper < b.lower or b.upper < a.lower):
        low = a if a.upper < b.lower else b
        other = "1 + lambda_min is larger" if low is a else "1 + lambda_min is smaller than the gap"
        return renamed(low, name, f" ({other})")
    lows = [r.lower for r in (a, b) if r.lower is not None]
    lo = min(lows) if len(lows) == 2 else None
    his = [r.upper for r in (a, b) if r.upper is not None]
    hi = min(his) if his else None
    method = f"min(gap, 1 + lambda_min): {a.method}; {b.method}"
    if lo is not None and hi is not None and lo > 0 and hi - lo <= DEFAULT_RTOL * lo:
        return Result(name, min(a.value, b.value), method, (hi - lo) / lo, lo, hi)
    return Result.interval(name, lo, hi, method, "the gap or 1 + lambda_min is not resolved at the accuracy target")
