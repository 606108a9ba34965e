"""What the quantity modules share about a chain: :class:`ChainFacts`, a frozen, public view that each
:class:`~mlmix.theory.chain.markov_chain.Chain` builds once (``chain.facts``) and whose members are
computed lazily, once, on first use: the chain as a matrix, the float and exact structure with the
closed class (``core``) and its transient remainder, the underflow report and the rounding of
subnormal entries, the law the algorithms use with log pi and its error bound delta (and the widening
2 delta / (1 - delta) it charges, THEOREMS.md 1), the GTH factors of the core, the gaps with their
modes, and the solver options of a matrix-free chain.

The quantity modules read these members and the Chain's public ones, never the Chain's private state;
a member is computed when a quantity first needs it, so asking for the structure computes no law and
an underflowed chain raises only where a quantity needs P.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import scipy.sparse as sp

from mlmix.errors import ConvergenceError, UnderflowError
from mlmix.theory.chain import absorbing, mixing, spectral, underflow
from mlmix.theory.chain.backends import Backend, DenseBackend, OperatorBackend, SparseBackend
from mlmix.theory.chain.conductance import SWEEP_BINS
from mlmix.theory.chain.stationary import chain_pi_error, chain_stationary_law
from mlmix.theory.chain.structure import Structure, chain_structure
from mlmix.theory.kernels.support import kernel_support
from mlmix.theory.linalg.elimination import Elimination, eliminate
from mlmix.theory.results import Result, VectorResult
from mlmix.validation import Matrix

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


def timed(timings: dict[str, float], key: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, its seconds added to ``timings[key]`` (:attr:`Chain.timings`)."""
    t0 = time.perf_counter()
    out = compute()
    timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0
    return out


def check_support(support: Matrix, P: Matrix) -> sp.csr_array:
    """A sign pattern (N, N) for P, as a 0/1 CSR array, joined with P's non-zero entries (what is
    non-zero in P is positive)."""
    S = sp.csr_array(support, dtype=bool) if sp.issparse(support) else sp.csr_array(np.asarray(support, dtype=bool))
    if S.shape != P.shape:
        raise ValueError(f"the support must have the shape of P, {P.shape}, got {S.shape}")
    S = sp.csr_array(S.astype(np.float64) + (sp.csr_array(P) != 0).astype(np.float64))
    S.data[:] = 1.0
    S.eliminate_zeros()
    return S


@dataclass(frozen=True, eq=False)
class ChainFacts:
    """The shared, read-only facts of ``chain`` (module doc), with the options it was built with.

    Attributes
    ----------
    chain : the chain these facts are of.
    given : the stationary law given by the caller (checked), or None.
    dense_limit_given : the ``dense_limit`` given by the caller, or None (the defaults apply).
    support_given : the sign pattern given by the caller (joined with P's), or None.
    source_kernel : (kernel, options) of a matrix chain built from a source, or None.
    k : the block size a matrix-free chain was built with (None: the kernel's default).
    gap_rtol, basis_size, bins : the matrix-free solvers' options (:meth:`Chain.from_operator`).
    """

    chain: Chain
    given: np.ndarray | None = None
    dense_limit_given: int | None = None
    support_given: sp.csr_array | None = None
    source_kernel: tuple | None = None
    k: int | None = None
    gap_rtol: float = spectral.GAP_RTOL
    basis_size: int = 16
    bins: int = SWEEP_BINS

    # ------------------------------------------------------------------ the representation
    @property
    def representation(self) -> str:
        """The one place the chain's representation is named, one of the held ones of
        :data:`~mlmix.theory.kernels.representation.REPRESENTATIONS`: "operator" (a matrix-free kernel: the
        Krylov routes), else "dense" (at most ``dense_limit`` states: GTH, LAPACK, whether P is stored dense or
        CSR) or "sparse" (the CSR routes). The quantities dispatch on it, not on how P is held."""
        chain = self.chain
        return "operator" if chain.op is not None else "dense" if chain.is_dense else "sparse"

    @property
    def matrix_P(self) -> Matrix:
        """P as a matrix for the routes that need its entries: the chain's own (dense or CSR, as given), or a
        matrix-free chain's matrix as CSR (:attr:`matrix`, memory permitting)."""
        return self.chain.to_scipy() if self.representation == "operator" else self.chain.P

    @cached_property
    def backend(self) -> Backend:
        """The operations the quantities need, for :attr:`representation`
        (:mod:`~mlmix.theory.chain.backends`): on P as held (dense or CSR), or on the matrix-free kernel with
        :meth:`pi_if_known` for its symmetrised solves."""
        representation = self.representation
        if representation == "operator":
            return OperatorBackend(self.chain.op, self.pi_if_known)
        return (DenseBackend if representation == "dense" else SparseBackend)(self.chain.P)

    def pi_if_known(self) -> Any:
        """:attr:`pi_t`, or None when its Krylov solve did not converge (the absorbed solves use it only to
        symmetrise, and fall back to GMRES)."""
        try:
            return self.pi_t
        except ConvergenceError:
            return None

    # ------------------------------------------------------------------ the matrix
    @cached_property
    def matrix(self) -> Chain:
        """The chain as a matrix: itself, for a matrix-free chain the chain of its operator's matrix (a
        MatrixOperator) or the CSR chain built from its source (memory checked by the builder)."""
        chain = self.chain
        if self.representation != "operator":
            return chain
        if chain.op.matrix is not None:
            return type(chain)(chain.op.matrix, name=chain.name)
        if chain.source is None or chain.kernel is None:
            raise ValueError("this matrix-free chain was built from an operator alone: build it with "
                             "Chain.from_source(source, representation='sparse') to get its matrix")
        return type(chain).from_source(chain.source, chain.kernel, k=self.k, representation="sparse", name=chain.name)

    # ------------------------------------------------------------------ structure
    @cached_property
    def float_structure(self) -> Structure:
        """The structure of P's non-zero entries."""
        return chain_structure(self.chain.P)

    @cached_property
    def support(self) -> sp.csr_array | None:
        """The exact sign pattern (given, or from the source's log-conditionals), or None where it has
        P's structure: it equals P's non-zero pattern (nothing underflowed), or, for a chain from a
        source, P is already irreducible and aperiodic (more edges change neither; the common case,
        which skips the second pass over the conditionals)."""
        chain, S = self.chain, self.support_given
        if S is None and self.source_kernel is not None:
            flt = self.float_structure
            if flt.is_irreducible and flt.period() == 1:
                return None
            kernel, options = self.source_kernel
            S = check_support(kernel_support(chain.source, kernel, **options), chain.P)
        if S is None or S.nnz == sp.csr_array(chain.P).count_nonzero():
            return None
        return S

    @cached_property
    def recurrent(self) -> np.ndarray:
        """The states of the (unique) closed class."""
        return self.chain.structure.recurrent_class()

    @property
    def reducible_given(self) -> bool:
        """Several closed classes and a stationary law given by the caller (the gaps are then exactly 0)."""
        return self.given is not None and len(self.chain.structure.closed_classes) > 1

    @cached_property
    def core(self) -> Chain:
        """The chain restricted to its closed class (itself when irreducible or matrix-free)."""
        chain = self.chain
        if self.representation == "operator" or chain.is_irreducible or self.reducible_given:
            return chain
        C = self.recurrent
        sub = chain.P[C][:, C] if not sp.issparse(chain.P) else sp.csr_array(chain.P)[C][:, C]
        support = None if self.support is None else self.support[C][:, C]
        return type(chain)(sub, name=f"closed class of {chain.name}", dense_limit=self.dense_limit_given,
                           support=support)

    def on_core(self) -> str:
        """The note a quantity of the closed class carries ("" when the chain is its own core)."""
        if self.core is self.chain:
            return ""
        core = self.core.n_states
        return f" (on the closed class of {core} states; {self.chain.n_states - core} transient)"

    # ------------------------------------------------------------------ underflow and rounding
    @cached_property
    def underflow(self) -> str | None:
        """:func:`~mlmix.theory.chain.underflow.underflow_reason`."""
        return underflow.underflow_reason(self.chain)

    def check_resolved(self) -> None:
        """UnderflowError where P cannot stand for the chain (:attr:`underflow`)."""
        if self.underflow is not None:
            raise UnderflowError(self.underflow)

    @cached_property
    def subnormal(self) -> tuple[float, str]:
        """:func:`~mlmix.theory.chain.underflow.subnormal_rounding`."""
        return underflow.subnormal_rounding(self.chain)

    def rounded_entries(self, r: Result, within: tuple[float, float]) -> Result:
        """``r`` widened for the rounding of the subnormal entries of P (:attr:`subnormal`)."""
        eps, note = self.subnormal
        return r.widened(eps, note, within=within) if eps else r

    def rounded_vector(self, v: VectorResult, eps: float) -> VectorResult:
        """A vector result whose entries move by a relative ``eps`` with the subnormal entries of P."""
        if not eps:
            return v
        rel = (v.rel_error + eps) / (1 - eps) if v.rel_error is not None and eps < 1 else None
        return VectorResult(v.name, v.value, v.method + self.subnormal[1], rel, v.abs_error, v.residual, v.log_value,
                            dict(v.details))

    # ------------------------------------------------------------------ stationary law
    @cached_property
    def stationary_law(self) -> VectorResult:
        """The law the algorithms use (:func:`~mlmix.theory.chain.stationary.chain_stationary_law`)."""
        return timed(self.chain.timings, "stationary_s", lambda: chain_stationary_law(self.chain))

    @cached_property
    def logpi(self) -> np.ndarray:
        """log pi for the algorithms on P (UnderflowError where P cannot stand for the chain)."""
        self.check_resolved()
        return self.stationary_law.log_value

    def log_space_law(self) -> VectorResult:
        """:func:`~mlmix.theory.chain.underflow.log_space_law`."""
        return underflow.log_space_law(self.chain)

    @cached_property
    def pi_error(self) -> tuple[float, str]:
        """(delta, how): a bound on max_x |pi_hat(x) / pi(x) - 1| (:func:`~mlmix.theory.chain.stationary.chain_pi_error`)."""
        return chain_pi_error(self.chain)

    @property
    def pi_rel_error(self) -> float | None:
        """The bound of :attr:`pi_error` where it is below 1 (a law given by the caller counts as exact)."""
        delta = self.pi_error[0]
        return delta if delta < 1 else None

    def charged(self, r: Result, within: tuple[float, float]) -> Result:
        """``r`` computed with the law pi_hat, widened for pi_hat's error: a quantity determined by the
        edge measure pi(x) P(x, y) and by pi (Dirichlet forms, variances, set conductances) moves
        relatively by at most 2 delta / (1 - delta) when every pi(x) does by delta (THEOREMS.md 1:
        Var_pi(f) = min_c sum pi (f - c)^2 and E(f, f) are both linear in pi). ``within``: the range
        the quantity always lies in."""
        delta, how = self.pi_error
        if delta == 0:
            return r
        eps = 2 * delta / (1 - delta) if delta < 1 else math.inf
        note = f"; widened by pi's error ({how}, {delta:.1e})" if delta < 1 else f"; pi's error is not bounded ({how})"
        return r.widened(eps, note, within=within)

    @cached_property
    def pi_t(self) -> Any:
        """The stationary law as a tensor of the matrix-free kernel (this process's slice)."""
        return spectral.checked_pi(self.chain.op, self.chain.stationary)

    # ------------------------------------------------------------------ elimination (dense)
    @cached_property
    def grounded(self) -> Elimination:
        """GTH factors of the (core) chain, grounded at its heaviest state. The core is irreducible on
        its float support, so a zero escape probability in the elimination is float64 underflow of a
        Schur complement (probabilities spanning more than its range): UnderflowError, not a result."""
        core = self.core
        try:
            return eliminate(core.to_dense(), last=int(np.argmax(core.facts.logpi)))
        except ValueError as err:
            raise UnderflowError(f"GTH elimination underflows on this chain ({err}): its escape probabilities "
                                 "leave float64's range, so the quantities built on it are not computed") from err

    # ------------------------------------------------------------------ gaps
    @cached_property
    def raw_gap_and_mode(self) -> tuple[Result, np.ndarray]:
        """The gap of P (reversible) or of (P + P*)/2 built with the computed law, before pi's error is
        charged (widened for the subnormal entries of P, :attr:`subnormal`)."""
        gap, mode = self.unrounded_gap_and_mode
        return self.rounded_entries(gap, (0.0, 2.0)), mode

    @cached_property
    def unrounded_gap_and_mode(self) -> tuple[Result, np.ndarray]:
        """(gap, mode) before rounding and pi's error are charged (:func:`~mlmix.theory.chain.spectral.chain_unrounded_gap`)."""
        return timed(self.chain.timings, "gap_s", lambda: spectral.chain_unrounded_gap(self.chain))

    @cached_property
    def gap_and_mode(self) -> tuple[Result, np.ndarray]:
        """(gap, mode) as reported (:func:`~mlmix.theory.chain.spectral.chain_gap`)."""
        return spectral.chain_gap(self.chain)

    @cached_property
    def operator_gap(self) -> spectral.GapResult:
        """The matrix-free gap with its Ritz function (:func:`~mlmix.theory.chain.spectral.chain_operator_gap`)."""
        return spectral.chain_operator_gap(self.chain)

    # ------------------------------------------------------------------ mixing, absorption
    def mixing_bounds(self) -> mixing.MixingBounds:
        """:func:`~mlmix.theory.chain.mixing.chain_mixing_bounds`."""
        return mixing.chain_mixing_bounds(self.chain)

    @cached_property
    def transient_decay(self) -> mixing.TransientDecay | None:
        """The entrance into the closed class from the transient states (None without transient states)."""
        return mixing.chain_transient_decay(self.chain)

    @cached_property
    def absorption(self) -> absorbing.Absorption:
        """The transient states class by class (:func:`~mlmix.theory.chain.absorbing.chain_absorption`)."""
        return absorbing.chain_absorption(self.chain)
