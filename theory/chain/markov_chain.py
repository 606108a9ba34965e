"""``Chain``: a finite Markov chain analysed once, asked many questions.

A :class:`Chain` validates its transition matrix once (dense ``numpy`` array or ``scipy.sparse``),
computes what is asked lazily and caches it. Quantities without arguments are cached properties,
those with arguments are methods; each returns a :class:`~mlmix.theory.results.Result` (a number,
or an honest interval with the reason) or :class:`~mlmix.theory.results.VectorResult`, carrying
its method and accuracy. Definitions: THEOREMS.md section 1 (TV is half the L1 distance; t_mix is
the worst-start mixing time; the Poincaré constant is 1 / gap of the additive reversibilization).

Algorithms by size (the choice is stated in every method string):

* up to :data:`DENSE_LIMIT` states: subtraction-free GTH elimination for the stationary law,
  gaps to relative accuracy (down to 1e-300), Poisson and hitting solves; exact worst-start t_mix
  by renormalised squaring where the rounding allows, certified bounds otherwise; exact
  conductance by enumeration up to 20 states;
* larger sparse chains: the stationary law by detailed balance (reversible) or a checked Krylov
  solve, gaps by Lanczos with residual bounds (intervals below the resolution), conductance and
  t_mix as certified intervals.

Convention: the chain is defined by its off-diagonal entries, and its holding probabilities are
1 - (the sum of the off-diagonal entries of the row). A float matrix whose rows sum to 1 +- 1e-16
would otherwise gain or lose 1e-16 of mass per step, which a metastable chain accumulates over its
relaxation time (1e18 steps at a gap of 1e-18).

A chain with transient states and one closed class has a unique stationary law (zero on the
transient states); its spectral quantities are those of the closed class (stated in the method),
while d(t), t_mix and the Kemeny constant are the whole chain's (the entrance into the closed class
is bounded in :mod:`mlmix.theory.chain.mixing`; Kemeny in :mod:`mlmix.theory.chain.variance`).
Several closed classes: stationary-law quantities raise :class:`~mlmix.errors.ReducibleChainError`
naming them.

The classes come from the exact sign pattern of the transitions (``support``; for a chain from a
source, the conditionals with log > -inf), not from P's entries, some of which may have underflowed
to 0. Where that changes the classes, the stationary law of a Glauber or MH chain is computed in log
space and what needs P raises :class:`~mlmix.errors.UnderflowError`; subnormal entries of P widen the
stated accuracy (:attr:`Chain._subnormal`).
"""

from __future__ import annotations

import math
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mlmix.errors import UnderflowError
from mlmix.limits import (
    DENSE_LIMIT,
    DENSE_STATIONARY_LIMIT,
    EXACT_CONDUCTANCE_LIMIT,
    MIXING_LIMIT,
    REPORT_MIXING_LIMIT,
)
from mlmix.progress import (
    announced,
)
from mlmix.theory.chain import (
    absorbing,
    chain_summary,
    hitting,
    mixing,
    spectral,
    spectrum,
    trajectories,
    underflow,
    variance,
)
from mlmix.theory.chain import conductance as cond
from mlmix.theory.chain.nonreversible_gap import absolute_gap, kernel_functions
from mlmix.theory.chain.persistence import load_chain, save_chain
from mlmix.theory.chain.stationary import (
    certify_stationary,
    compute_stationary,
    log_potential,
    operator_stationary,
    stationary_error_bound,
)
from mlmix.theory.chain.structure import PositiveStructure, Structure, chain_structure
from mlmix.theory.kernels.registry import resolve_kernel
from mlmix.theory.kernels.representation import choose_representation, is_operator
from mlmix.theory.kernels.support import kernel_support
from mlmix.theory.linalg.elimination import Elimination, eliminate
from mlmix.theory.results import (
    DEFAULT_RTOL,
    NAMES,
    Result,
    VectorResult,
    _html_table,
)
from mlmix.validation import (
    Matrix,
    check_int,
    check_memory,
    check_transition_matrix,
    check_vector,
)


class Chain:
    """A finite Markov chain with transition matrix P (rows sum to 1), analysed lazily (module doc).

    Parameters
    ----------
    P : array or scipy.sparse matrix, (N, N), row-stochastic; or a matrix-free transition operator
        (:class:`~mlmix.theory.linalg.operator.TransitionOperator`: a sampler's
        :class:`~mlmix.theory.kernels.operators.KernelOperator`, possibly sharded: vectors are then this
        process's slice, or an assembled matrix as a :class:`~mlmix.theory.linalg.matrix_operator.MatrixOperator`),
        whose questions the quantity modules answer by operator applications alone
        (:meth:`from_operator` sets the solvers' options). What needs the matrix itself (``save``,
        ``to_scipy``, ``to_dense``, ``simulate``, the derived chains of a non-reversible kernel, the
        worst-start d(t) curve) takes a MatrixOperator's matrix, or builds it from the source when it fits
        the memory limit and otherwise raises the builder's one-line MemoryLimitError when called. The other parameters are a
        matrix's.
    stationary : optional known stationary law (validated: a probability vector with
        ||pi P - pi||_1 <= 1e-9); skips its computation. With several closed classes and a positive
        ``stationary``, the gaps are exactly 0.
    name : a description used in reports.
    dense_limit : state count up to which the dense algorithms are used (default :data:`DENSE_LIMIT`,
        and :data:`~mlmix.limits.DENSE_STATIONARY_LIMIT` for the GTH stationary law).
    support : optional Boolean (N, N) pattern of the transitions that are positive in exact arithmetic
        (a superset of P's non-zero entries: entries that underflowed to 0 included); the structure
        (communicating and closed classes, period) is taken from it. :meth:`from_source` computes it
        from the source's log-conditionals (:func:`~mlmix.theory.kernels.support.kernel_support`).
    """

    #: The description saved with a chain read by :meth:`load` (None otherwise).
    saved_about: dict | None = None
    #: Announce a long property or method read on its own (cost line, then a bar or a line per phase;
    #: :func:`mlmix.progress.announced`); set ``chain.progress = False`` to keep it quiet.
    progress: bool = True

    def __init__(self, P: Matrix, *, stationary: np.ndarray | None = None, name: str | None = None,
                 dense_limit: int | None = None, support: Matrix | None = None) -> None:
        self.op = P if is_operator(P) else None
        if self.op is not None:
            if stationary is not None or dense_limit is not None or support is not None:
                raise TypeError("stationary, dense_limit and support are options of a matrix, not of an operator")
            self._hold_operator(name)
            return
        self.P = check_transition_matrix(P)
        self.n_states = int(self.P.shape[0])
        self._support_given = None if support is None else _check_support(support, self.P)
        self.name = name or f"chain on {self.n_states} states"
        self._dense_limit_given = dense_limit
        self.dense_limit = DENSE_LIMIT if dense_limit is None else check_int(dense_limit, "dense_limit", minimum=0)
        self.source = None
        self.kernel: str | None = None
        self.representation_reason = "a given matrix"
        self._given = None
        if stationary is not None:
            pi = check_vector(stationary, self.n_states, "stationary", probability=True)
            res = float(np.abs(self.P.T @ pi - pi).sum())
            if res > 1e-9:
                raise ValueError(f"the given stationary law is not stationary: ||pi P - pi||_1 = {res:.3g}")
            self._given = pi

    def _hold_operator(self, name: str | None, *, gap_rtol: float = spectral.GAP_RTOL, basis_size: int = 16,
                       bins: int = cond.SWEEP_BINS, progress: bool = False) -> None:
        """A chain on the matrix-free kernel ``self.op``: P is a ``scipy.sparse.linalg.LinearOperator``
        (``@`` applies P to a function, ``.T @`` to a measure) on one process, the kernel itself when
        sharded; ``progress``: the Krylov solvers' progress lines (no cost announcements on this chain)."""
        op = self.op
        N = self.n_states = op.n_states
        self.P = op if op.comm.world_size > 1 else spla.LinearOperator(
            (N, N), matvec=lambda f: op.matvec(np.ravel(f)), rmatvec=lambda mu: op.rmatvec(np.ravel(mu)), dtype=np.float64)
        self.name = name or f"{op.description} on {N} states"
        self.source, self.kernel, self._k = None, None, None
        self.representation_reason = "a given operator"
        self.dense_limit, self._dense_limit_given, self._given, self._support_given = 0, None, None, None
        self._gap_rtol, self._basis, self._bins, self._solver_progress = gap_rtol, basis_size, bins, progress
        self.progress = False  # no cost announcements: the Krylov solvers report their own progress
        self.timings: dict[str, float] = {}

    @classmethod
    def from_operator(cls, op: Any, *, name: str | None = None, gap_rtol: float = spectral.GAP_RTOL,
                      basis_size: int = 16, bins: int = cond.SWEEP_BINS, progress: bool = False) -> "Chain":
        """The chain of a matrix-free transition operator with the solvers' options: ``gap_rtol`` (the Lanczos residual
        relative to the gap), ``basis_size``, ``bins`` (sweep thresholds of the conductance) and ``progress``
        (the Krylov solvers' progress lines)."""
        if not is_operator(op):
            raise TypeError(f"from_operator needs a TransitionOperator (KernelOperator, MatrixOperator), "
                            f"got {type(op).__name__}")
        chain = cls.__new__(cls)
        chain.op = op
        chain._hold_operator(name, gap_rtol=gap_rtol, basis_size=basis_size, bins=bins, progress=progress)
        return chain

    def _timed(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, its seconds added to :attr:`timings` (matrix-free chains)."""
        t0 = time.perf_counter()
        out = compute()
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0
        return out

    @cached_property
    def _matrix(self) -> "Chain":
        """This chain as a matrix: itself, for a matrix-free chain the chain of its operator's matrix (a
        MatrixOperator) or the CSR chain built from its source (memory checked by the builder)."""
        if self.op is None:
            return self
        if self.op.matrix is not None:
            return Chain(self.op.matrix, name=self.name)
        if self.source is None or self.kernel not in ("glauber", "k-gibbs"):
            raise ValueError("this matrix-free chain was built from an operator alone: build it with "
                             "Chain.from_source(source, representation='sparse') to get its matrix")
        return Chain.from_source(self.source, self.kernel, k=self._k, representation="sparse", name=self.name)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_source(cls, source: Any, kernel: str = "glauber", *, k: int | None = None,
                    order: Any = None, name: str | None = None, dense_limit: int | None = None, representation: str = "auto",
                    **operator_options: Any) -> "Chain":
        """The chain of a sampler on a source of conditionals (paper G section 3.2, paper P Defs 10-11):
        ``kernel`` is a name of the registry :data:`~mlmix.theory.kernels.registry.KERNELS`: "glauber"
        (random-scan Glauber P_T), "k-gibbs" (block size ``k``, needs a joint law), "parallel"
        (independent parallel sampler, dense), "systematic" (one sweep in ``order``, dense) or
        "mh-logit" / "mh-pll" (Metropolis-Hastings targets, :mod:`mlmix.theory.kernels.scan_and_mh`).

        ``source``: any source of conditionals: a model with a joint law, a score table, or a masked
        LM, whose conditionals over its frame are tabulated once and cached (``source.tabulated()``),
        e.g. ``Chain.from_source(MaskedLMConditionals.from_pretrained(folder, frame="c _ _ a",
        candidates="a b !", temperature=0.7))``. ``name`` defaults to the source's ``label``.

        ``representation``: "dense" or "sparse" build the matrix and use the dense or the sparse
        algorithms; "operator" a chain on the matrix-free kernel
        (:func:`~mlmix.theory.kernels.operators.kernel_operator`; same questions; options ``device``,
        ``dtype``, ``comm``); "auto" picks dense up to ``dense_limit`` states, sparse up to the kernel builders'
        state limit while the CSR kernel fits the memory limit, the operator beyond
        (:func:`~mlmix.theory.kernels.representation.choose_representation`).
        The choice and its reason are in ``summary()["representation"]``."""

        spec, kernel, options = resolve_kernel(kernel, k=k, order=order)  # the registry: KERNELS
        source = source.tabulated()
        name = source.label if name is None else name
        limit = DENSE_LIMIT if dense_limit is None else check_int(dense_limit, "dense_limit", minimum=0)
        rep, why = choose_representation(source.space, kernel, 2 if k is None else k, representation, limit)
        if rep == "operator":
            # deferred: the matrix-free kernel imports torch, which the dense and sparse routes never need
            from mlmix.theory.kernels.operators import kernel_operator

            chain = cls(kernel_operator(source, kernel, 2 if k is None else k, **operator_options), name=name)
            chain.source, chain.kernel, chain._k, chain.representation_reason = source, kernel, k, why
            return chain
        if operator_options:
            raise TypeError(f"{', '.join(operator_options)}: options of representation='operator' only")
        P = spec.build(source, **options)
        if representation != "auto":  # force the requested algorithms
            limit = P.shape[0] if rep == "dense" else 0
        chain = cls(P, name=name, dense_limit=limit if representation != "auto" else dense_limit)
        chain.source, chain.kernel, chain.representation_reason = source, kernel, why
        chain._source_kernel = (kernel, options)
        return chain

    @property
    def representation(self) -> str:
        """"dense", "sparse" or "operator" (matrix-free): the algorithms this chain uses."""
        return "operator" if self.op is not None else "dense" if self.is_dense else "sparse"

    @property
    def is_dense(self) -> bool:
        """Whether the dense (accurate) algorithms apply at this size."""
        return self.n_states <= self.dense_limit

    def to_scipy(self) -> sp.csr_array:
        return sp.csr_array(self._matrix.P)

    def to_dense(self) -> np.ndarray:
        P = self._matrix.P
        check_memory(8.0 * self.n_states**2, f"a dense copy of {self.n_states} states")
        return P.toarray() if sp.issparse(P) else np.asarray(P)

    def _facts(self) -> list[tuple[str, str]]:
        """What a chain is, without computing anything: states, transitions, algorithms, origin."""
        nnz = None if self.op is not None else int(self.P.nnz) if sp.issparse(self.P) else int(np.count_nonzero(self.P))
        moves = f"matrix-free ({self.op})" if nnz is None else f"{nnz:,} non-zero entries"
        facts = [("states", f"{self.n_states:,}"), ("transitions", moves),
                 ("algorithms", f"{self.representation} ({self.representation_reason})")]
        if self.source is not None:
            facts.append(("source", f"{type(self.source).__name__}, kernel {self.kernel}"))
        return facts

    def __repr__(self) -> str:
        named = "" if self.name == f"chain on {self.n_states} states" else f" {self.name!r}"
        return f"<Chain{named} " + "; ".join(f"{k} {v}" for k, v in self._facts()) + ">"

    def _repr_html_(self) -> str:

        return _html_table(f"Chain: {self.name}", self._facts())

    # ------------------------------------------------------------------ structure
    _source_kernel: tuple | None = None

    @cached_property
    def _float_structure(self) -> Structure:
        """The structure of P's non-zero entries."""
        return chain_structure(self.P)

    @cached_property
    def _support(self) -> sp.csr_array | None:
        """The exact sign pattern (given, or from the source's log-conditionals), or None where it has
        P's structure: it equals P's non-zero pattern (nothing underflowed), or, for a chain from a
        source, P is already irreducible and aperiodic (more edges change neither; the common case,
        which skips the second pass over the conditionals)."""
        S = self._support_given
        if S is None and self._source_kernel is not None:
            flt = self._float_structure
            if flt.is_irreducible and flt.period() == 1:
                return None
            kernel, options = self._source_kernel
            S = _check_support(kernel_support(self.source, kernel, **options), self.P)
        if S is None or S.nnz == sp.csr_array(self.P).count_nonzero():
            return None
        return S

    @cached_property
    def structure(self) -> Structure:
        """Communicating and closed classes and the period, from the exact sign pattern of the
        transitions (:attr:`_support`: a probability below the float range is still positive), else
        from P's non-zero entries; a matrix-free kernel with positive conditionals: one aperiodic class,
        without a graph (:class:`~mlmix.theory.chain.structure.PositiveStructure`), otherwise that of
        the matrix (memory permitting)."""
        if self.op is not None:
            return PositiveStructure(self.op.local_size) if self.op.conditionals_positive() else self._matrix.structure
        return self._float_structure if self._support is None else chain_structure(self._support)

    @cached_property
    def _underflow(self) -> str | None:
        """:func:`~mlmix.theory.chain.underflow.underflow_reason`."""
        return underflow.underflow_reason(self)

    def _check_resolved(self) -> None:
        if self._underflow is not None:
            raise UnderflowError(self._underflow)

    @cached_property
    def _subnormal(self) -> tuple[float, str]:
        """:func:`~mlmix.theory.chain.underflow.subnormal_rounding`."""
        return underflow.subnormal_rounding(self)

    def _rounded_entries(self, r: Result, within: tuple[float, float]) -> Result:
        """``r`` widened for the rounding of the subnormal entries of P (:attr:`_subnormal`)."""
        eps, note = self._subnormal
        return r.widened(eps, note, within=within) if eps else r

    def _rounded_vector(self, v: VectorResult, eps: float) -> VectorResult:
        """A vector result whose entries move by a relative ``eps`` with the subnormal entries of P."""
        if not eps:
            return v
        rel = (v.rel_error + eps) / (1 - eps) if v.rel_error is not None and eps < 1 else None
        return VectorResult(v.name, v.value, v.method + self._subnormal[1], rel, v.abs_error, v.residual, v.log_value,
                            dict(v.details))

    @property
    def is_irreducible(self) -> bool:
        """One communicating class (matrix-free: every single-site (block) move has positive probability,
        or the operator's matrix is irreducible)."""
        if self.op is not None:
            return self.op.conditionals_positive() or (self.op.matrix is not None and self.structure.is_irreducible)
        return self.structure.is_irreducible

    @property
    def closed_classes(self) -> list[np.ndarray]:
        return self.structure.closed_classes

    @cached_property
    def period(self) -> int:
        """Period of the (unique) closed class, or of the whole chain when irreducible."""
        return self.structure.period()

    @property
    def is_aperiodic(self) -> bool:
        return self.period == 1

    @cached_property
    def _recurrent(self) -> np.ndarray:
        return self.structure.recurrent_class()

    @cached_property
    def _core(self) -> "Chain":
        """The chain restricted to its closed class (itself when irreducible or matrix-free)."""
        if self.op is not None or self.is_irreducible or self._reducible_given:
            return self
        C = self._recurrent
        sub = self.P[C][:, C] if not sp.issparse(self.P) else sp.csr_array(self.P)[C][:, C]
        support = None if self._support is None else self._support[C][:, C]
        return Chain(sub, name=f"closed class of {self.name}", dense_limit=self._dense_limit_given, support=support)

    @property
    def _reducible_given(self) -> bool:
        return self._given is not None and len(self.structure.closed_classes) > 1

    def _on_core(self) -> str:
        if self._core is self:
            return ""
        core = self._core.n_states
        return f" (on the closed class of {core} states; {self.n_states - core} transient)"

    # ------------------------------------------------------------------ stationary law
    @cached_property
    def _stationary(self) -> VectorResult:
        if self.op is not None:
            if not self.is_irreducible:
                if self.op.matrix is not None:
                    self._recurrent  # several closed classes: ReducibleChainError naming them
                    raise ValueError(f"{int(self.structure.transient.sum())} transient state(s): the matrix-free route "
                                     "needs an irreducible chain; analyse the matrix itself (Chain(P))")
                raise ValueError("some conditionals underflow to 0: irreducibility is not established matrix-free "
                                 "(raise the temperature, or analyse the matrix)")
            return self._timed("stationary_s", lambda: certify_stationary(
                self.op, operator_stationary(self.op, progress=self._solver_progress)))
        if self._given is not None:
            with np.errstate(divide="ignore"):
                logpi = np.log(self._given)
            res = float(np.abs(self.P.T @ self._given - self._given).sum())
            return VectorResult(NAMES["stationary"], self._given, "given by the caller (residual checked)", None, None,
                                res, logpi)
        if self._underflow is not None:
            return self._log_space_law()
        limit = DENSE_STATIONARY_LIMIT if self._dense_limit_given is None else self.dense_limit
        st = compute_stationary(self.P, self.structure, limit)
        if not self._subnormal[0]:
            return st
        eps, _ = self._subnormal  # pi moves within rho^(N-1) = sqrt(1 + eps)
        return self._rounded_vector(st, math.sqrt(1 + eps) - 1 if math.isfinite(eps) else math.inf)

    @cached_property
    @announced("stationary law")
    def stationary(self) -> VectorResult:
        """pi P = pi (see :mod:`mlmix.theory.chain.stationary`). A sparse non-reversible law whose entrywise
        certificate failed gets the first-order bound of :attr:`_pi_error` (which needs the gap); on a
        matrix-free kernel: exact in log space when reversible, else the entrywise certificate or, where
        that fails, the first-order bound (:mod:`mlmix.theory.chain.stationary`)."""
        st = self._stationary
        if self.op is not None:
            gap = self._gap.gap if st.rel_error is None else None
            return st if gap is None or gap.lower is None else stationary_error_bound(self.op, st, gap.lower)
        if st.rel_error is not None or self._given is not None or self._reducible_given or self._core.is_reversible:
            return st
        delta, how = self._pi_error
        if not delta < 1:  # no useful bound: the accuracy stays the residual (normwise)
            return st
        return VectorResult(st.name, st.value, f"{st.method}; error bound {how}", delta, None, st.residual,
                            st.log_value, dict(st.details))

    @property
    def log_stationary(self) -> VectorResult:
        """log pi (exact where pi underflows)."""
        st = self.stationary
        return VectorResult(NAMES["log_stationary"], st.log_value, st.method, None, st.rel_error, st.residual, None)

    @cached_property
    def _logpi(self) -> np.ndarray:
        """log pi for the algorithms on P (UnderflowError where P cannot stand for the chain)."""
        self._check_resolved()
        return self._stationary.log_value

    def _log_space_law(self) -> VectorResult:
        """:func:`~mlmix.theory.chain.underflow.log_space_law`."""
        return underflow.log_space_law(self)

    @cached_property
    def _pi_error(self) -> tuple[float, str]:
        """(delta, how): a bound on max_x |pi_hat(x) / pi(x) - 1| for the law the analysis uses (on the
        closed class): its certificate (:mod:`mlmix.theory.chain.stationary`), 0 for a law given by the
        caller (taken as exact), or else the first-order bound ||r / pi||_pi / (gamma sqrt(pi_min)),
        r = pi_hat P - pi_hat, gamma the lower end of the additive gap computed with pi_hat (inf when
        pi_hat underflows or the gap has no positive lower end)."""
        core = self._core
        st = core._stationary
        if self._given is not None:
            return 0.0, "given"
        if self.op is not None:  # the operator's law carries its own bound
            rel = self.stationary.rel_error
            return (math.inf, "not bounded") if rel is None else (rel, "certified")
        if st.rel_error is not None:
            return st.rel_error, "certified"
        how = "||r/pi||_pi / (gap sqrt(pi_min)) (first order)"
        pi = st.value
        if not pi.min() > 0:  # a zero (unresolved) entry: no bound, and no gap to build from pi_hat
            return math.inf, how
        gap_lower = core._raw_gap_and_mode[0].lower or 0.0
        if gap_lower <= 0:
            return math.inf, how
        r = core.P.T @ pi - pi
        chi = math.sqrt(float(np.sum(r * r / pi)))
        return chi / (gap_lower * math.sqrt(float(pi.min()))), how

    @property
    def _pi_rel_error(self) -> float | None:
        """The bound of :attr:`_pi_error` where it is below 1 (a law given by the caller counts as exact)."""
        delta = self._pi_error[0]
        return delta if delta < 1 else None

    def _charged(self, r: Result, within: tuple[float, float]) -> Result:
        """``r`` computed with the law pi_hat, widened for pi_hat's error: a quantity determined by the
        edge measure pi(x) P(x, y) and by pi (Dirichlet forms, variances, set conductances) moves
        relatively by at most 2 delta / (1 - delta) when every pi(x) does by delta (THEOREMS.md 1:
        Var_pi(f) = min_c sum pi (f - c)^2 and E(f, f) are both linear in pi). ``within``: the range
        the quantity always lies in."""
        delta, how = self._pi_error
        if delta == 0:
            return r
        eps = 2 * delta / (1 - delta) if delta < 1 else math.inf
        note = f"; widened by pi's error ({how}, {delta:.1e})" if delta < 1 else f"; pi's error is not bounded ({how})"
        return r.widened(eps, note, within=within)

    @cached_property
    def is_reversible(self) -> bool:
        """Detailed balance pi(x) P(x, y) = pi(y) P(y, x), by Kolmogorov's criterion in log space
        (on the closed class; transient states carry no mass); a matrix-free kernel is reversible when its
        source is compatible."""
        if self.op is not None:
            return self.op.reversible
        if self._given is not None:
            Q = sp.csr_array(self.P).multiply(self._given[:, None])
            return bool(abs(Q - Q.T).max() <= 1e-10 * abs(Q).max())
        self._recurrent  # several closed classes: ReducibleChainError
        self._check_resolved()
        return log_potential(self._core.P) is not None

    # ------------------------------------------------------------------ elimination (dense)
    @cached_property
    def _grounded(self) -> Elimination:
        """GTH factors of the (core) chain, grounded at its heaviest state."""
        core = self._core
        return eliminate(core.to_dense(), last=int(np.argmax(core._logpi)))

    # ------------------------------------------------------------------ gaps
    @cached_property
    def _raw_gap_and_mode(self) -> tuple[Result, np.ndarray]:
        """The gap of P (reversible) or of (P + P*)/2 built with the computed law, before pi's error is
        charged (widened for the subnormal entries of P, :attr:`_subnormal`)."""
        gap, mode = self._unrounded_gap_and_mode
        return self._rounded_entries(gap, (0.0, 2.0)), mode

    @cached_property
    def _unrounded_gap_and_mode(self) -> tuple[Result, np.ndarray]:
        if self.op is not None:
            return self._gap.gap, self._gap.fiedler
        core = self._core
        if self._reducible_given:
            return Result.exact(NAMES["spectral_gap"], 0.0, "several closed classes: the indicator of one has zero "
                                "Dirichlet form"), np.zeros(self.n_states)
        if core.is_reversible:
            el = core._grounded if core.is_dense else None
            return spectral.reversible_gap(core.P, core._logpi, name=NAMES["spectral_gap"], el=el, dense=core.is_dense)
        if not np.isfinite(core._logpi).all():  # P* = D^-1 P^T D needs pi_hat > 0 on the irreducible core
            return Result.missing(NAMES["additive_gap"], "-", "the computed stationary law has zero entries (a "
                                  "Krylov law that did not resolve a metastable chain): (P + P*)/2 is undefined"
                                  ), np.zeros(self.n_states)
        S = spectral.additive_reversibilization(core.P, core._logpi)
        return spectral.reversible_gap(S, core._logpi, name=NAMES["additive_gap"], dense=core.is_dense)

    @cached_property
    def _gap_and_mode(self) -> tuple[Result, np.ndarray]:
        gap, mode = self._raw_gap_and_mode
        if self.op is not None or self._reducible_given or self._core.is_reversible:  # P's own gap: pi is not
            return gap, mode  # used (the operator's gap already holds the error of its pi)
        return self._charged(gap, (0.0, 2.0)), mode  # (P + P*)/2 has eigenvalues in [-1, 1]

    @cached_property
    def _gap(self) -> spectral.GapResult:
        """The matrix-free gap with its Ritz function (:func:`~mlmix.theory.chain.spectral.operator_gap`)."""
        return self._timed("gap_s", lambda: spectral.operator_gap(self.op, self._stationary, rtol=self._gap_rtol,
                                                                   basis_size=self._basis, progress=self._solver_progress))

    @cached_property
    def _pi_t(self) -> Any:
        """The stationary law as a tensor of the matrix-free kernel (this process's slice)."""
        return spectral._checked_pi(self.op, self.stationary)

    @cached_property
    @announced("gaps")
    def spectral_gap(self) -> Result:
        """1 - lambda_2 for a reversible chain; for a non-reversible one the eigenvalues are complex and
        the result points to :attr:`additive_gap` and :attr:`absolute_spectral_gap`."""
        if not self._reducible_given and not self._core.is_reversible:
            return Result.missing(NAMES["spectral_gap"], "-", "the chain is not reversible (complex spectrum): see "
                                  "additive_gap (Poincare) and absolute_spectral_gap (relaxation)")
        gap = self._gap_and_mode[0]
        return _renamed(gap, NAMES["spectral_gap"], self._on_core())

    @cached_property
    @announced("gaps")
    def additive_gap(self) -> Result:
        """1 - lambda_2((P + P*)/2): the largest c with E(f, f) >= c Var_pi(f) (equals the spectral gap
        of a reversible chain)."""
        return _renamed(self._gap_and_mode[0], NAMES["additive_gap"], self._on_core())

    @cached_property
    def poincare_constant(self) -> Result:
        """C = sup_f Var_pi(f) / E(f, f) = 1 / additive gap."""
        return self.additive_gap.reciprocal(NAMES["poincare_constant"])

    @cached_property
    @announced("gaps")
    def multiplicative_gap(self) -> Result:
        """1 - sigma_2(P)^2: the gap of P* P (Fill's bound; matrix-free: Lanczos on C^T C for a
        non-reversible kernel, from the absolute gap for a reversible one)."""
        if self.op is not None:
            if self.is_reversible:
                return spectral.multiplicative_from_absolute(self.absolute_spectral_gap)
            return self._timed("multiplicative_gap_s", lambda: spectral.operator_multiplicative_gap(
                self.op, self._stationary, self.additive_gap, rtol=self._gap_rtol, basis_size=self._basis,
                progress=self._solver_progress))
        core = self._core
        if not core.is_dense:
            return self._charged(self._rounded_entries(spectral.multiplicative_gap_sparse(sp.csr_array(core.P),
                                                                                          core._logpi), (0.0, 1.0)),
                                 (0.0, 1.0))
        M = spectral.multiplicative_reversibilization(core.to_dense(), core._logpi)
        # pi(x) (P* P)(x, y) = sum_z pi(z) P(z, x) P(z, y): an edge measure linear in pi, so _charged applies
        gap = spectral.reversible_gap(M, core._logpi, name=NAMES["multiplicative_gap"], dense=True)[0]
        return self._charged(self._rounded_entries(gap, (0.0, 1.0)), (0.0, 1.0))

    @cached_property
    @announced("gaps")
    def absolute_spectral_gap(self) -> Result:
        """1 - max{|lambda| : lambda != 1}; reversible: min(gap, 1 + lambda_min)."""
        core = self._core
        if self._reducible_given:
            return Result.exact(NAMES["absolute_spectral_gap"], 0.0, "several closed classes: eigenvalue 1 is repeated")
        if self.op is not None and self.op.matrix is not None and self.period > 1:  # known from the matrix
            return Result.exact(NAMES["absolute_spectral_gap"], 0.0, f"period {self.period} from a breadth-first "
                                f"search: exp(2 pi i / {self.period}) is an eigenvalue")
        if self.op is not None and self.is_reversible:
            return spectral.operator_absolute_gap(self.op, self.additive_gap)
        if self.op is not None:
            return _renamed(absolute_gap(kernel_functions(self.op), self.n_states, lambda: self._pi_t,
                                         lambda: self.multiplicative_gap), NAMES["absolute_spectral_gap"])
        if self.period > 1:  # exp(2 pi i / d) is an eigenvalue: exactly 0
            return Result.exact(NAMES["absolute_spectral_gap"], 0.0, f"period {self.period} from a breadth-first "
                                f"search: exp(2 pi i / {self.period}) is an eigenvalue{self._on_core()}")
        if not core.is_reversible:
            gap = absolute_gap(core.P, core.n_states, lambda: np.exp(core._logpi), lambda: self.multiplicative_gap)
            return _renamed(gap, NAMES["absolute_spectral_gap"], self._on_core())
        gap = self.spectral_gap
        bottom = self._rounded_entries(spectral.bottom_gap(core.P, core._logpi, dense=core.is_dense), (0.0, 2.0))
        return _minimum(NAMES["absolute_spectral_gap"], gap, bottom)

    @cached_property
    def relaxation_time(self) -> Result:
        """t_rel = 1 / absolute spectral gap."""
        return self.absolute_spectral_gap.reciprocal(NAMES["relaxation_time"])

    # ------------------------------------------------------------------ conductance
    @cached_property
    @announced("conductance")
    def conductance(self) -> Result:
        """Phi* = min{Phi(S) : 0 < pi(S) <= 1/2}: exact up to 20 states, else a certified interval whose
        upper end is Phi of a named set (details: set_size, set_mass, set)."""
        if self.op is not None:
            return self._timed("conductance_s", lambda: cond.operator_conductance(self.op, self.stationary, self._gap,
                                                                                   bins=self._bins))
        core = self._core
        if self._reducible_given:
            return Result.exact(NAMES["conductance"], 0.0, "several closed classes: one of mass <= 1/2 has no exit flow")
        lp = core._logpi
        if core.n_states <= EXACT_CONDUCTANCE_LIMIT and np.ptp(lp) < 600:
            phi = self._rounded_entries(cond.exact_conductance(core.P, lp), (0.0, 1.0))
            return _renamed(self._charged(phi, (0.0, 1.0)), NAMES["conductance"], self._on_core())
        gap, mode = self._gap_and_mode  # its lower end is already charged
        return _renamed(self._charged(cond.conductance_interval(core.P, lp, gap, [mode]), (0.0, 1.0)), NAMES["conductance"],
                        self._on_core())

    def set_conductance(self, S: np.ndarray) -> Result:
        """Phi(S) = Q(S, S^c) / pi(S) of a set of states (mask or indices), in log space (matrix-free: flows
        summed as non-negative terms)."""
        if self.op is not None:
            return cond.operator_set_conductance(self.op, S, self.stationary)
        return self._charged(cond.set_conductance_result(self.P, S, self._logpi), (0.0, 1.0))

    # ------------------------------------------------------------------ mixing
    def _mixing_bounds(self) -> mixing.MixingBounds:
        return mixing.chain_mixing_bounds(self)

    @cached_property
    def _transient_decay(self) -> mixing.TransientDecay | None:
        """The entrance into the closed class from the transient states (None without transient states)."""
        return mixing.chain_transient_decay(self)

    @announced("t_mix")
    def mixing_time(self, eps: float = 0.25, max_states: int = MIXING_LIMIT) -> Result:
        """t_mix(eps) = min{t : d(t) <= eps}, d the worst-start TV distance: exact when resolvable (by
        dense squaring, for chains of at most ``max_states`` states), else a certified interval (see
        :mod:`mlmix.theory.chain.mixing`)."""
        return mixing.chain_mixing_time(self, eps, max_states)

    @announced("d(t)")
    def tv_distance(self, t: int) -> Result:
        """d(t) = max_x TV(P^t(x, .), pi) (matrix-free: the certified spectral upper bound)."""
        return mixing.chain_tv_distance(self, t)

    def distance_curve(self, t_max: int, start: int | np.ndarray | None = None, progress: bool = True) -> VectorResult:
        """d(t) for t = 0..t_max from the worst start (dense powers; times the sparse P for a sparse
        chain), or TV(P^t(x0, .), pi) from a start state index or start law; ``progress``: cost
        estimate and bar when long (:mod:`mlmix.progress`). Matrix-free: t_max applications of P^T from a
        start; the worst-start curve needs the matrix (memory permitting)."""
        return mixing.chain_distance_curve(self, t_max, start, progress)

    # ------------------------------------------------------------------ variance, Kemeny, hitting
    @announced("variance")
    def asymptotic_variance(self, f: np.ndarray) -> Result:
        """sigma^2(f) of ergodic averages (CLT variance), via the Poisson equation."""
        return variance.chain_asymptotic_variance(self, f)

    @cached_property
    @announced("Kemeny constant")
    def kemeny_constant(self) -> Result:
        """K = sum_{lambda != 1} 1 / (1 - lambda) = sum_j pi_j E_i tau_j (the same for every start i of
        an irreducible chain); with transient states, K of the closed class plus tr((I - P_TT)^-1)
        (:func:`~mlmix.theory.chain.variance.kemeny_constant_transient`); matrix-free: bounds from the trace
        and the additive gap (:func:`~mlmix.theory.chain.variance.kemeny_bounds`)."""
        return variance.chain_kemeny_constant(self)

    @announced("hitting times")
    def hitting_time(self, target: np.ndarray) -> VectorResult:
        """E_x tau_A for every start x (0 on A, inf where A is not hit almost surely)."""
        return hitting.chain_hitting_time(self, target)

    @announced("hitting times")
    def hitting_probabilities(self, target: np.ndarray, t: int) -> VectorResult:
        """P_x(tau_A <= t) for every start x."""
        return hitting.chain_hitting_probabilities(self, target, t)

    @announced("hitting times")
    def committor(self, A: np.ndarray, B: np.ndarray) -> VectorResult:
        """q(x) = P_x(tau_B < tau_A), the probability of reaching B before A."""
        return hitting.chain_committor(self, A, B)

    def mean_first_passage_times(self, target: np.ndarray | int | None = None) -> VectorResult:
        """E_x tau_target for a target state or set (a vector over starts), or with no target the matrix
        M[i, j] = E_i tau_j (tau_j = 0 when i = j) for chains of at most :data:`MFPT_LIMIT` states."""
        return hitting.chain_mean_first_passage_times(self, target)

    def dirichlet_form(self, f: np.ndarray, g: np.ndarray | None = None) -> float:
        """E(f, g) = (1/2) sum pi(x) P(x, y) (f(x) - f(y)) (g(x) - g(y))."""
        f = check_vector(f, self.n_states, "f")
        g = None if g is None else check_vector(g, self.n_states, "g")
        if self.op is not None:  # E(f, f) as non-negative terms, E(f, g) by polarization
            return spectral.operator_dirichlet_form(self.op, self._pi_t, f, g)
        return spectral.dirichlet_form(self.P, f, g, np.exp(self._logpi))

    # ------------------------------------------------------------------ derived chains
    def time_reversal(self) -> "Chain":
        """P*(x, y) = pi(y) P(y, x) / pi(x) (on the closed class; a reversible matrix-free chain itself)."""
        if self.op is not None:
            return self if self.is_reversible else self._matrix.time_reversal()
        core = self._core
        return Chain(spectral.time_reversal(core.P, core._logpi), name=f"time reversal of {self.name}",
                     dense_limit=self._dense_limit_given)

    def additive_reversibilization(self) -> "Chain":
        """(P + P*)/2 (on the closed class; a reversible matrix-free chain itself)."""
        if self.op is not None:
            return self if self.is_reversible else self._matrix.additive_reversibilization()
        core = self._core
        return Chain(spectral.additive_reversibilization(core.P, core._logpi),
                     name=f"additive reversibilization of {self.name}", dense_limit=self._dense_limit_given)

    def multiplicative_reversibilization(self) -> "Chain":
        """P* P (on the closed class; from the matrix of a matrix-free chain, memory permitting)."""
        if self.op is not None:
            return self._matrix.multiplicative_reversibilization()
        core = self._core
        return Chain(spectral.multiplicative_reversibilization(core.P, core._logpi),
                     name=f"multiplicative reversibilization of {self.name}", dense_limit=self._dense_limit_given)

    # ------------------------------------------------------------------ spectrum, classes, absorption
    def eigenvalues(self, k: int | None = None) -> VectorResult:
        """The ``k`` eigenvalues of largest modulus (all when None), with per-eigenvalue error bounds;
        complex with condition numbers for a non-reversible chain (:mod:`mlmix.theory.chain.spectrum`).
        Matrix-free: [1, 1 - gap] of a reversible kernel for k <= 2, otherwise from the matrix."""
        if self.op is not None:
            if k in (1, 2) and self.is_reversible:
                return spectrum.reversible_top_two(self.spectral_gap, k)
            return self._matrix.eigenvalues(k)
        return spectrum.eigenvalues(self.P, k, self.is_irreducible and self.is_reversible)

    def implied_timescales(self, k: int | None = None) -> VectorResult:
        """t_j = -1 / log |lambda_j|, j = 2..k (lag 1), with enclosures."""
        return spectrum.implied_timescales(self.eigenvalues(k))

    def stationary_distributions(self) -> VectorResult:
        """One stationary law per closed class (rows; :mod:`mlmix.theory.chain.absorbing`)."""
        if self.op is not None:
            if not isinstance(self.structure, PositiveStructure):
                return self._matrix.stationary_distributions()
            pi = self.stationary
            return VectorResult("stationary laws of the closed classes", pi.value[None, :], pi.method, pi.rel_error,
                                details={"classes": self.structure.closed_classes})
        self._check_resolved()
        return absorbing.stationary_distributions(self.P, self.structure)

    def cyclic_classes(self) -> list[np.ndarray]:
        """The period-many cyclic classes of the (unique) closed class."""
        return absorbing.cyclic_classes(self.structure, self._recurrent)

    @cached_property
    def _absorption(self) -> absorbing.Absorption:
        if self.op is not None:
            if not isinstance(self.structure, PositiveStructure):
                return self._matrix._absorption
            return absorbing.Absorption(np.zeros(0, dtype=np.int64), self.structure.closed_classes, None, 0.0)
        self._check_resolved()
        return absorbing.absorption(self.P, self.structure)

    def fundamental_matrix(self) -> VectorResult:
        """N = (I - Q)^-1 over the transient states (Kemeny-Snell)."""
        return absorbing.fundamental_matrix(self._absorption)

    def absorption_probabilities(self) -> VectorResult:
        """P_i(enter closed class c) for each transient state i and closed class c."""
        return absorbing.absorption_probabilities(self._absorption)

    def expected_steps_to_absorption(self) -> VectorResult:
        """Expected steps before a closed class is entered, per transient state."""
        return absorbing.expected_steps(self._absorption)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Write P to an ``.npz`` file (dense or CSR), atomically, with the chain's description (name,
        kernel, source, how its algorithms were chosen, the mlmix version) and every figure computed
        so far (:data:`_SAVED_FIGURES`, as :func:`~mlmix.theory.results.dumps_results` JSON);
        :meth:`load` reads them back."""
        save_chain(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "Chain":
        """Read a chain written by :meth:`save` (or ``scipy.sparse.save_npz`` / ``numpy.save``); a
        missing, corrupt or non-stochastic file is a one-line ValueError. The figures saved with it
        come back as computed (``chain.saved_about`` holds its saved description)."""
        return load_chain(cls, path)

    # ------------------------------------------------------------------ report
    def summary(self, eps: float = 0.25, include_stationary: bool = False,
                mixing_limit: int = REPORT_MIXING_LIMIT, progress: bool = True,
                as_frame: bool = False) -> Any:
        """Every figure `mlmix exact` prints, as a JSON-ready dict of results (each with value, lower,
        upper, rel_error, method, reason); t_mix exact by dense squaring up to ``mixing_limit`` states
        (default that of `mlmix exact`). ``progress``: the cost estimate and a bar per phase for a long
        analysis (:mod:`mlmix.progress`). ``as_frame``: the same as a ``pandas.DataFrame``, one row per
        result (:func:`~mlmix.theory.results.results_frame`; pandas is the optional ``frames`` extra)."""
        return chain_summary.summary(self, eps, include_stationary, mixing_limit, progress, as_frame)

    def _summary_cost(self, mixing_limit: int) -> tuple[list[tuple[str, float]], str]:
        """Expected seconds of each phase of :meth:`summary` (from the dense-product speed measured
        here, with constants fitted on Ising chains of 512 to 2048 states: the gaps about 18 N^3
        operations, t_mix 12 N^3, the Kemeny constant 2 N^3; a sparse chain, in units of one product
        with P timed here (memory-bound, so not the dense flop rate), about 150 for the stationary law,
        1,000 for the gaps (Lanczos with its orthogonalisation) plus the first import of torch, and 500
        for the conductance, fitted on an Ising cycle of 16,384 states) and the cost line: states,
        non-zeros, memory."""
        return chain_summary.summary_cost(self, mixing_limit)

    def _progress_plan(self, phase: str, name: str) -> tuple[str, str, list]:
        """The phases still to run before ``name`` (a property or method of phase ``phase``) and their
        expected seconds (those of :meth:`_summary_cost`; a hitting-time solve as one dense
        elimination or, sparse, a sweep of products), for :func:`mlmix.progress.announced`."""
        return chain_summary.progress_plan(self, phase, name)

    def simulate(self, steps: int, start: int | np.ndarray | None = None, *, chains: int = 1,
                 seed: int | None = 0) -> np.ndarray:
        """``chains`` independent trajectories X_0..X_steps of the chain (state indices, shape
        (chains, steps + 1)): X_0 = ``start`` (a state index, one per chain, or None: drawn from the
        stationary law), then X_{t+1} ~ P(X_t, .) by the chain's convention: the off-diagonal
        entries are the moves, 1 - their row sum the holding probability (one uniform per step and
        chain, inverse CDF over the row). ``chain.source.space.decode(x)`` gives the sequences of a
        chain built from a source."""
        return trajectories.simulate(self, steps, start, chains=chains, seed=seed)


def _check_support(support: Matrix, P: Matrix) -> sp.csr_array:
    """A sign pattern (N, N) for P, as a 0/1 CSR array, joined with P's non-zero entries (what is
    non-zero in P is positive)."""
    S = sp.csr_array(support, dtype=bool) if sp.issparse(support) else sp.csr_array(np.asarray(support, dtype=bool))
    if S.shape != P.shape:
        raise ValueError(f"the support must have the shape of P, {P.shape}, got {S.shape}")
    S = sp.csr_array(S.astype(np.float64) + (sp.csr_array(P) != 0).astype(np.float64))
    S.data[:] = 1.0
    S.eliminate_zeros()
    return S


def _minimum(name: str, a: Result, b: Result) -> Result:
    """min(a, b) by interval arithmetic: [min of the lower ends, min of the upper ends]."""
    if a.resolved and b.resolved and (a.upper < b.lower or b.upper < a.lower):
        low = a if a.upper < b.lower else b
        other = "1 + lambda_min is larger" if low is a else "1 + lambda_min is smaller than the gap"
        return _renamed(low, name, f" ({other})")
    lows = [r.lower for r in (a, b) if r.lower is not None]
    lo = min(lows) if len(lows) == 2 else None
    his = [r.upper for r in (a, b) if r.upper is not None]
    hi = min(his) if his else None
    method = f"min(gap, 1 + lambda_min): {a.method}; {b.method}"
    if lo is not None and hi is not None and lo > 0 and hi - lo <= DEFAULT_RTOL * lo:
        return Result(name, min(a.value, b.value), method, (hi - lo) / lo, lo, hi)
    return Result.interval(name, lo, hi, method, "the gap or 1 + lambda_min is not resolved at the accuracy target")


def _renamed(r: Result, name: str, note: str = "") -> Result:
    return Result(name, r.value, r.method + note, r.rel_error, r.lower, r.upper, r.reason, dict(r.details))


