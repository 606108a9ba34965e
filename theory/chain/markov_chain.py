"""``Chain``: a finite Markov chain analysed once, asked many questions.

A :class:`Chain` validates its transition matrix once (dense ``numpy`` array or ``scipy.sparse``),
computes what is asked lazily and caches it. Quantities without arguments are cached properties,
those with arguments are methods; each returns a :class:`~mlmix.theory.results.Result` (a number,
or an honest interval with the reason) or :class:`~mlmix.theory.results.VectorResult`, carrying
its method and accuracy. Definitions: THEOREMS.md section 1 (TV is half the L1 distance; t_mix is
the worst-start mixing time; the Poincaré constant is 1 / gap of the additive reversibilization).

Each quantity's algorithm is chosen in one place, a ``chain_*`` function of its module
(:func:`~mlmix.theory.chain.stationary.chain_stationary`, :func:`~mlmix.theory.chain.spectral.chain_gap`,
:func:`~mlmix.theory.chain.conductance.chain_conductance`, :func:`~mlmix.theory.chain.mixing.chain_mixing_time`,
...), whose docstring lists its routes (matrix-free, dense, CSR, reducible, underflowed); the members
here delegate to it. Algorithms by size (the choice is stated in every method string):

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

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mlmix.limits import (
    DENSE_LIMIT,
    MIXING_LIMIT,
    REPORT_MIXING_LIMIT,
)
from mlmix.progress import (
    announced,
)
from mlmix.theory.chain import (
    absorbing,
    chain_summary,
    connectivity,
    correlations,
    eigenvectors,
    hitting,
    mixing,
    pcca,
    propagation,
    sensitivities,
    spectral,
    spectrum,
    trajectories,
    transition_paths,
    variance,
)
from mlmix.theory.chain import conductance as cond
from mlmix.theory.chain.chain_facts import ChainFacts, check_support, timed
from mlmix.theory.chain.nonreversible_gap import chain_absolute_gap
from mlmix.theory.chain.persistence import load_chain, save_chain
from mlmix.theory.chain.stationary import (
    chain_is_reversible,
    chain_stationary,
)
from mlmix.theory.chain.structure import PositiveStructure, Structure, chain_structure
from mlmix.theory.kernels.registry import DEFAULT_KERNEL, resolve_kernel
from mlmix.theory.kernels.representation import choose_representation, is_operator
from mlmix.theory.results import (
    NAMES,
    Result,
    VectorResult,
    _html_table,
    renamed,
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
    #: The matrix-free solvers' progress lines (:meth:`from_operator`; ``summary(progress=True)`` turns them on).
    solver_progress: bool = False
    # the options a chain was built with, which its :attr:`facts` carry
    _source_kernel: tuple | None = None
    _k: int | None = None
    _gap_rtol, _basis, _bins = spectral.GAP_RTOL, 16, cond.SWEEP_BINS

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
        self._support_given = None if support is None else check_support(support, self.P)
        self.name = name or f"chain on {self.n_states} states"
        self._dense_limit_given = dense_limit
        self.dense_limit = DENSE_LIMIT if dense_limit is None else check_int(dense_limit, "dense_limit", minimum=0)
        self.source, self.kernel, self.kernel_spec, self.kernel_options = None, None, None, None
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
        self.source, self.kernel, self._k, self.kernel_spec, self.kernel_options = None, None, None, None, None
        self.representation_reason = "a given operator"
        self.dense_limit, self._dense_limit_given, self._given, self._support_given = 0, None, None, None
        self._gap_rtol, self._basis, self._bins, self.solver_progress = gap_rtol, basis_size, bins, progress
        self.progress = False  # no cost announcements: the Krylov solvers report their own progress

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

    @cached_property
    def timings(self) -> dict[str, float]:
        """Seconds spent computing the costly figures, on every representation (dense, CSR, matrix-free):
        ``stationary_s`` (the law the algorithms use), ``gap_s`` (the gap of P or of (P + P*)/2 with its
        mode), ``multiplicative_gap_s`` and ``conductance_s``, each present once computed. A phase that
        needs another not yet computed includes its time (the gap includes the stationary law's)."""
        return {}

    @cached_property
    def facts(self) -> ChainFacts:
        """What the quantity modules share about this chain, computed lazily, once
        (:class:`~mlmix.theory.chain.chain_facts.ChainFacts`: the matrix, structure and closed core, the underflow
        report, the law the algorithms use with its error, the GTH factors, the gaps with their modes)."""
        return ChainFacts(self, given=self._given, dense_limit_given=self._dense_limit_given,
                          support_given=self._support_given, source_kernel=self._source_kernel, k=self._k,
                          gap_rtol=self._gap_rtol, basis_size=self._basis, bins=self._bins)

    def computed(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The cached members among ``names`` (of the chain or of its :attr:`facts`) computed so far."""
        facts = vars(self.facts) if "facts" in vars(self) else {}
        return {k: vars(self)[k] if k in vars(self) else facts[k] for k in names if k in vars(self) or k in facts}

    def restore(self, figures: dict[str, Any]) -> None:
        """Cache ``figures`` (cached members of the chain, as :meth:`save` wrote them) as if computed here."""
        vars(self).update(figures)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_source(cls, source: Any, kernel: str = DEFAULT_KERNEL, *, k: int | None = None,
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
        The choice and its reason are in ``summary()["representation"]``; the sampler's registry entry and
        options in ``kernel_spec`` and ``kernel_options`` (None on a chain of a given matrix or operator)."""

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
            chain.kernel_spec, chain.kernel_options = spec, options
            return chain
        if operator_options:
            raise TypeError(f"{', '.join(operator_options)}: options of representation='operator' only")
        P = spec.build(source, **options)
        if representation != "auto":  # force the requested algorithms
            limit = P.shape[0] if rep == "dense" else 0
        chain = cls(P, name=name, dense_limit=limit if representation != "auto" else dense_limit)
        chain.source, chain.kernel, chain.representation_reason = source, kernel, why
        chain.kernel_spec, chain.kernel_options, chain._source_kernel = spec, options, (kernel, options)
        return chain

    @property
    def holds_matrix(self) -> bool:
        """Whether P is a matrix (dense or CSR: it can be saved), not a matrix-free operator."""
        return self.facts.representation != "operator"

    @property
    def representation(self) -> str:
        """"dense", "sparse" or "operator" (matrix-free): the algorithms this chain uses
        (:attr:`ChainFacts.representation <mlmix.theory.chain.chain_facts.ChainFacts.representation>`)."""
        return self.facts.representation

    @property
    def is_dense(self) -> bool:
        """Whether the dense (accurate) algorithms apply at this size."""
        return self.n_states <= self.dense_limit

    def to_scipy(self) -> sp.csr_array:
        return sp.csr_array(self.facts.matrix.P)

    def to_dense(self) -> np.ndarray:
        P = self.facts.matrix.P
        check_memory(8.0 * self.n_states**2, f"a dense copy of {self.n_states} states")
        return P.toarray() if sp.issparse(P) else np.asarray(P)

    def _description(self) -> list[tuple[str, str]]:
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
        return f"<Chain{named} " + "; ".join(f"{k} {v}" for k, v in self._description()) + ">"

    def _repr_html_(self) -> str:

        return _html_table(f"Chain: {self.name}", self._description())

    # ------------------------------------------------------------------ structure
    @cached_property
    def structure(self) -> Structure:
        """Communicating and closed classes and the period, from the exact sign pattern of the
        transitions (:attr:`_support`: a probability below the float range is still positive), else
        from P's non-zero entries; a matrix-free kernel with positive conditionals: one aperiodic class,
        without a graph (:class:`~mlmix.theory.chain.structure.PositiveStructure`), otherwise that of
        the matrix (memory permitting)."""
        if self.op is not None:
            return PositiveStructure(self.op.local_size) if self.op.conditionals_positive() else self.facts.matrix.structure
        support = self.facts.support
        return self.facts.float_structure if support is None else chain_structure(support)

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

    # ------------------------------------------------------------------ stationary law
    @cached_property
    @announced("stationary law")
    def stationary(self) -> VectorResult:
        """pi P = pi with its accuracy (:func:`~mlmix.theory.chain.stationary.chain_stationary`; the routes
        in :mod:`mlmix.theory.chain.stationary`)."""
        return chain_stationary(self)

    @property
    def log_stationary(self) -> VectorResult:
        """log pi (exact where pi underflows)."""
        st = self.stationary
        return VectorResult(NAMES["log_stationary"], st.log_value, st.method, None, st.rel_error, st.residual, None)

    @cached_property
    def is_reversible(self) -> bool:
        """Detailed balance pi(x) P(x, y) = pi(y) P(y, x), by Kolmogorov's criterion in log space
        (on the closed class; transient states carry no mass); a matrix-free kernel is reversible when its
        source is compatible (:func:`~mlmix.theory.chain.stationary.chain_is_reversible`)."""
        return chain_is_reversible(self)

    @cached_property
    @announced("gaps")
    def spectral_gap(self) -> Result:
        """1 - lambda_2 for a reversible chain; for a non-reversible one the eigenvalues are complex and
        the result points to :attr:`additive_gap` and :attr:`absolute_spectral_gap`
        (:func:`~mlmix.theory.chain.spectral.chain_spectral_gap`)."""
        return spectral.chain_spectral_gap(self)

    @cached_property
    @announced("gaps")
    def additive_gap(self) -> Result:
        """1 - lambda_2((P + P*)/2): the largest c with E(f, f) >= c Var_pi(f) (equals the spectral gap
        of a reversible chain)."""
        return renamed(self.facts.gap_and_mode[0], NAMES["additive_gap"], self.facts.on_core())

    @cached_property
    def poincare_constant(self) -> Result:
        """C = sup_f Var_pi(f) / E(f, f) = 1 / additive gap."""
        return self.additive_gap.reciprocal(NAMES["poincare_constant"])

    @cached_property
    @announced("gaps")
    def multiplicative_gap(self) -> Result:
        """1 - sigma_2(P)^2: the gap of P* P (Fill's bound; the routes in
        :func:`~mlmix.theory.chain.spectral.chain_multiplicative_gap`)."""
        return timed(self.timings, "multiplicative_gap_s", lambda: spectral.chain_multiplicative_gap(self))

    @cached_property
    @announced("gaps")
    def absolute_spectral_gap(self) -> Result:
        """1 - max{|lambda| : lambda != 1}; reversible: min(gap, 1 + lambda_min) (the routes in
        :func:`~mlmix.theory.chain.nonreversible_gap.chain_absolute_gap`)."""
        return chain_absolute_gap(self)

    @cached_property
    def relaxation_time(self) -> Result:
        """t_rel = 1 / absolute spectral gap."""
        return self.absolute_spectral_gap.reciprocal(NAMES["relaxation_time"])

    # ------------------------------------------------------------------ conductance
    @cached_property
    @announced("conductance")
    def conductance(self) -> Result:
        """Phi* = min{Phi(S) : 0 < pi(S) <= 1/2}: exact up to 20 states, else a certified interval whose
        upper end is Phi of a named set (details: set_size, set_mass, set; the routes in
        :func:`~mlmix.theory.chain.conductance.chain_conductance`)."""
        return timed(self.timings, "conductance_s", lambda: cond.chain_conductance(self))

    def set_conductance(self, S: np.ndarray) -> Result:
        """Phi(S) = Q(S, S^c) / pi(S) of a set of states (mask or indices), in log space (matrix-free: flows
        summed as non-negative terms; :func:`~mlmix.theory.chain.conductance.chain_set_conductance`)."""
        return cond.chain_set_conductance(self, S)

    # ------------------------------------------------------------------ mixing
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

    @announced("hitting times")
    def transition_paths(self, A: np.ndarray, B: np.ndarray) -> transition_paths.TransitionPaths:
        """Transition path theory between the disjoint sets A and B (masks or indices): forward and backward
        committors, reactive and net flux, total flux F, rates k_AB and k_BA, mean first passage times and
        ``.pathways()`` (:func:`~mlmix.theory.chain.transition_paths.chain_transition_paths`)."""
        return transition_paths.chain_transition_paths(self, A, B)

    def mean_first_passage_times(self, target: np.ndarray | int | None = None) -> VectorResult:
        """E_x tau_target for a target state or set (a vector over starts), or with no target the matrix
        M[i, j] = E_i tau_j (tau_j = 0 when i = j) for chains of at most :data:`MFPT_LIMIT` states."""
        return hitting.chain_mean_first_passage_times(self, target)

    def dirichlet_form(self, f: np.ndarray, g: np.ndarray | None = None) -> float:
        """E(f, g) = (1/2) sum pi(x) P(x, y) (f(x) - f(y)) (g(x) - g(y))
        (:func:`~mlmix.theory.chain.spectral.chain_dirichlet_form`)."""
        return spectral.chain_dirichlet_form(self, f, g)

    # ------------------------------------------------------------------ derived chains
    def time_reversal(self) -> "Chain":
        """P*(x, y) = pi(y) P(y, x) / pi(x) (on the closed class; a reversible matrix-free chain itself)."""
        if self.op is not None:
            return self if self.is_reversible else self.facts.matrix.time_reversal()
        core = self.facts.core
        return Chain(spectral.time_reversal(core.P, core.facts.logpi), name=f"time reversal of {self.name}",
                     dense_limit=self._dense_limit_given)

    def additive_reversibilization(self) -> "Chain":
        """(P + P*)/2 (on the closed class; a reversible matrix-free chain itself)."""
        if self.op is not None:
            return self if self.is_reversible else self.facts.matrix.additive_reversibilization()
        core = self.facts.core
        return Chain(spectral.additive_reversibilization(core.P, core.facts.logpi),
                     name=f"additive reversibilization of {self.name}", dense_limit=self._dense_limit_given)

    def multiplicative_reversibilization(self) -> "Chain":
        """P* P (on the closed class; from the matrix of a matrix-free chain, memory permitting)."""
        if self.op is not None:
            return self.facts.matrix.multiplicative_reversibilization()
        core = self.facts.core
        return Chain(spectral.multiplicative_reversibilization(core.P, core.facts.logpi),
                     name=f"multiplicative reversibilization of {self.name}", dense_limit=self._dense_limit_given)

    # ------------------------------------------------------------------ spectrum, classes, absorption
    def eigenvalues(self, k: int | None = None) -> VectorResult:
        """The ``k`` eigenvalues of largest modulus (all when None), with per-eigenvalue error bounds;
        complex with condition numbers for a non-reversible chain (:mod:`mlmix.theory.chain.spectrum`).
        Matrix-free: [1, 1 - gap] of a reversible kernel for k <= 2, otherwise from the matrix
        (:func:`~mlmix.theory.chain.spectrum.chain_eigenvalues`)."""
        return spectrum.chain_eigenvalues(self, k)

    def implied_timescales(self, k: int | None = None) -> VectorResult:
        """t_j = -1 / log |lambda_j|, j = 2..k (lag 1), with enclosures."""
        return spectrum.implied_timescales(self.eigenvalues(k))

    def stationary_distributions(self) -> VectorResult:
        """One stationary law per closed class (rows; :func:`~mlmix.theory.chain.absorbing.chain_stationary_distributions`)."""
        return absorbing.chain_stationary_distributions(self)

    def connected_sets(self, directed: bool = True) -> list[np.ndarray]:
        """The strongly (``directed``) or weakly connected sets of the transition graph, largest first
        (:func:`~mlmix.theory.chain.connectivity.chain_connected_sets`)."""
        return connectivity.chain_connected_sets(self, directed)

    def cyclic_classes(self) -> list[np.ndarray]:
        """The period-many cyclic classes of the (unique) closed class."""
        return absorbing.cyclic_classes(self.structure, self.facts.recurrent)

    def fundamental_matrix(self) -> VectorResult:
        """N = (I - Q)^-1 over the transient states (Kemeny-Snell)."""
        return absorbing.fundamental_matrix(self.facts.absorption)

    def absorption_probabilities(self) -> VectorResult:
        """P_i(enter closed class c) for each transient state i and closed class c."""
        return absorbing.absorption_probabilities(self.facts.absorption)

    def expected_steps_to_absorption(self) -> VectorResult:
        """Expected steps before a closed class is entered, per transient state."""
        return absorbing.expected_steps(self.facts.absorption)

    # ------------------------------------------------------------------ spectral decomposition, correlations, propagation
    def eigenvectors(self, k: int | None = None) -> eigenvectors.Eigenpairs:
        """The ``k`` eigenpairs of largest modulus (all when None): eigenvalues with their enclosures, right and
        left eigenvectors (l_i . r_j = delta_ij, r_1 = 1, l_1 = pi) with certified residuals
        (:func:`~mlmix.theory.chain.eigenvectors.chain_eigenvectors`)."""
        return eigenvectors.chain_eigenvectors(self, k)

    def correlation(self, f: np.ndarray, g: np.ndarray | None = None, t: Any = 0,
                    method: str = "auto") -> Result | VectorResult:
        """C_fg(t) = E_pi[f(X_0) g(X_t)] at a time (a Result) or a sequence of times (a VectorResult), by the
        spectral decomposition or by powers of P, with a certified bound
        (:func:`~mlmix.theory.chain.correlations.chain_correlation`)."""
        return correlations.chain_correlation(self, f, g, t, method)

    def relaxation(self, mu: Any, f: np.ndarray, t: Any = 0, method: str = "auto") -> Result | VectorResult:
        """E_mu[f(X_t)] from a start law or state ``mu`` (:func:`~mlmix.theory.chain.correlations.chain_relaxation`)."""
        return correlations.chain_relaxation(self, mu, f, t, method)

    def fingerprint(self, f: np.ndarray, g: np.ndarray | None = None,
                    k: int | None = None) -> correlations.Fingerprint:
        """Implied timescales with the amplitudes <f, psi_i>_pi <g, psi_i>_pi of the ``k`` slowest processes
        (:func:`~mlmix.theory.chain.correlations.chain_fingerprint`)."""
        return correlations.chain_fingerprint(self, f, g, k)

    def propagate(self, mu: Any, t: Any) -> VectorResult:
        """mu P^t from a start law or state at a time (a vector) or a sequence of times (rows), with the L1
        bound of each (:func:`~mlmix.theory.chain.propagation.chain_propagate`)."""
        return propagation.chain_propagate(self, mu, t)

    def transition_counts(self, mu: Any, n: int) -> VectorResult:
        """E[C(a, b)] = sum_(s < n) (mu P^s)(a) P(a, b), the expected a -> b moves in n steps from mu
        (:func:`~mlmix.theory.chain.propagation.chain_transition_counts`)."""
        return propagation.chain_transition_counts(self, mu, n)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Write P to an ``.npz`` file (dense or CSR), atomically, with the chain's description (name,
        kernel, source, how its algorithms were chosen, the mlmix version) and every figure computed
        so far (those :data:`~mlmix.theory.results.REPORT` marks saved, as
        :func:`~mlmix.theory.results.dumps_results` JSON); :meth:`load` reads them back."""
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

    def simulate(self, steps: int, start: int | np.ndarray | None = None, *, chains: int | None = None,
                 seed: int | None = 0) -> np.ndarray:
        """``chains`` independent trajectories X_0..X_steps of the chain (state indices, shape
        (chains, steps + 1)): X_0 = ``start`` (a state index for every chain, a list of one per chain, or
        None: drawn from the stationary law); ``chains`` defaults to the length of a ``start`` list (else 1),
        and a list of another length is refused with one line. Then X_{t+1} ~ P(X_t, .) by the chain's convention: the off-diagonal
        entries are the moves, 1 - their row sum the holding probability (one uniform per step and
        chain, inverse CDF over the row). ``chain.source.space.decode(x)`` gives the sequences of a
        chain built from a source."""
        return trajectories.simulate(self, steps, start, chains=chains, seed=seed)

    # ------------------------------------------------------------------ sensitivities
    def stationary_sensitivity(self, E: Matrix | None = None) -> VectorResult:
        """d pi along a direction E whose rows sum to 0, or with no E the Jacobian J[k, i, j] = dpi_k / dP(i, j)
        = pi_i pi_k (E_i tau_k - E_j tau_k) (P(i, i) compensating), entrywise certified
        (:func:`~mlmix.theory.chain.sensitivities.chain_stationary_sensitivity`)."""
        return sensitivities.chain_stationary_sensitivity(self, E)

    def eigenvalue_sensitivity(self, index: int, E: Matrix | None = None) -> Result | VectorResult:
        """d lambda = u^T E v / u^T v of the real simple eigenvalue at ``index`` (the order of :meth:`eigenvalues`),
        or its Jacobian, with a first-order bound (:func:`~mlmix.theory.chain.sensitivities.eigenvalue_sensitivity`)."""
        return sensitivities.chain_eigenvalue_sensitivity(self, index, E)

    def committor_sensitivity(self, A: np.ndarray, B: np.ndarray, E: Matrix | None = None) -> VectorResult:
        """dq+ along E, or the Jacobian dq+_x / dP(i, j) = G_xi (q+_j - q+_i), q+(x) = P_x(tau_B < tau_A)
        (:func:`~mlmix.theory.chain.sensitivities.chain_committor_sensitivity`)."""
        return sensitivities.chain_committor_sensitivity(self, A, B, E)

    def mfpt_sensitivity(self, target: np.ndarray, E: Matrix | None = None) -> VectorResult:
        """d E_x tau_T along E, or its Jacobian G_xi (m_j - m_i)
        (:func:`~mlmix.theory.chain.sensitivities.chain_mfpt_sensitivity`)."""
        return sensitivities.chain_mfpt_sensitivity(self, target, E)
    # ------------------------------------------------------------------ coarse-graining
    def pcca(self, m: int) -> pcca.PCCA:
        """PCCA+ into ``m`` sets of a reversible chain: memberships chi, the coarse matrix
        P_c = (chi^T D_pi chi)^-1 chi^T D_pi P chi, its stationary law and the crisp sets
        (:func:`~mlmix.theory.chain.pcca.chain_pcca`)."""
        return pcca.chain_pcca(self, m)


