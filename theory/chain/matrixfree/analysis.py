"""The chain of a matrix-free kernel operator (:mod:`mlmix.theory.kernels.operators`): every question of
:class:`~mlmix.theory.chain.markov_chain.Chain` answered by operator applications alone, through the
matrix-free algorithms of the quantity modules (stationary law: :mod:`~mlmix.theory.chain.stationary`;
gaps: :mod:`~mlmix.theory.chain.spectral`; conductance: :mod:`~mlmix.theory.chain.conductance`; t_mix and
distances: :mod:`~mlmix.theory.chain.mixing`; hitting times and committors:
:mod:`~mlmix.theory.chain.hitting`; asymptotic variance and Kemeny bounds:
:mod:`~mlmix.theory.chain.variance`), on one process or sharded, with the same names and certificates.
"""

from __future__ import annotations

import math
import time
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator

from mlmix.limits import MFPT_LIMIT
from mlmix.theory.chain.absorbing import Absorption, absorption_probabilities, expected_steps, fundamental_matrix
from mlmix.theory.chain.conductance import SWEEP_BINS, operator_conductance
from mlmix.theory.chain.hitting import operator_committor, operator_hitting_probabilities, operator_hitting_times
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.mixing import MixingBounds, distance_from, operator_mixing_bounds
from mlmix.theory.chain.spectral import GAP_RTOL, GapResult, _checked_pi, operator_gap, operator_multiplicative_gap
from mlmix.theory.chain.spectrum import implied_timescales
from mlmix.theory.chain.stationary import certify_stationary, operator_stationary, stationary_error_bound
from mlmix.theory.chain.structure import Structure
from mlmix.theory.chain.variance import kemeny_bounds, operator_asymptotic_variance
from mlmix.theory.kernels.operator_vectors import global_total
from mlmix.theory.kernels.operators import KernelOperator, kernel_operator
from mlmix.theory.results import NAMES, Result, VectorResult, results_frame
from mlmix.validation import check_eps, check_int, check_state_set, check_steps, check_vector

# ------------------------------------------------------------------------------------------ the chain object

def _renamed(r: Result, name: str, note: str = "") -> Result:
    return Result(name, r.value, note + r.method, r.rel_error, r.lower, r.upper, r.reason, dict(r.details))


class _Positive(Structure):
    """The structure of a kernel whose conditionals are all positive: every state reaches every other
    by single-site moves (one class), and each move keeps the state with positive probability
    (period 1). No transition graph is stored (``graph`` is None)."""

    def period(self, states: np.ndarray | None = None) -> int:
        return 1


class OperatorChain(Chain):
    """:class:`mlmix.theory.chain.markov_chain.Chain` on a matrix-free kernel: what ``Chain.from_source(...,
    representation="operator")`` returns. Every member of ``Chain`` is defined here (a test checks
    it): gaps, conductance and t_mix bounds (module docstring), and the solves of
    :mod:`mlmix.theory.chain.matrixfree.solves` (hitting times, committors, the asymptotic variance, distances
    from a start law, Kemeny bounds). What needs the matrix itself (``save``, ``to_scipy``,
    ``to_dense``, the derived chains of a non-reversible kernel, the worst-start d(t) curve) builds
    it from the source when it fits the memory limit and otherwise raises the one-line
    MemoryLimitError of the builder when called. ``op`` may be sharded
    (:mod:`mlmix.theory.linalg.sharding`): vectors are then this process's slice."""

    representation = "operator"

    def __init__(self, op: KernelOperator, *, name: str | None = None, gap_rtol: float = GAP_RTOL,
                 basis_size: int = 16, bins: int = SWEEP_BINS, progress: bool = False) -> None:
        self.op = op
        self.n_states = op.n_states
        self.name = name or f"{op.description} on {op.n_states} states"
        self.source: Any = None
        self.kernel: str | None = None
        self._k: int | None = None
        self.representation_reason = "a given operator"
        self.dense_limit = 0
        self._dense_limit_given = None
        self._given = None
        self._gap_rtol, self._basis, self._bins, self._progress = gap_rtol, basis_size, bins, progress
        self.timings: dict[str, float] = {}

    @classmethod
    def from_source(cls, source: Any, kernel: str = "glauber", *, k: int | None = None, name: str | None = None,
                    **options: Any) -> "OperatorChain":
        """The matrix-free chain of a sampler on ``source`` (``options`` go to
        :func:`mlmix.theory.kernels.operators.kernel_operator`: device, dtype, comm)."""

        chain = cls(kernel_operator(source, kernel, 2 if k is None else k, **options), name=name)
        chain.source, chain.kernel, chain._k = source, kernel, k
        return chain

    def __repr__(self) -> str:
        return f"<OperatorChain {self.name}>"

    def _timed(self, key: str, compute):
        t0 = time.perf_counter()
        out = compute()
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0
        return out

    # ---------------------------------------------------------------- the matrix, when it fits
    @cached_property
    def _matrix(self) -> Chain:
        """The same chain as a CSR matrix, built from the source (memory checked by the builder)."""
        if self.source is None or self.kernel not in ("glauber", "k-gibbs"):
            raise ValueError("this matrix-free chain was built from an operator alone: build it with "
                             "Chain.from_source(source, representation='sparse') to get its matrix")
        return Chain.from_source(self.source, self.kernel, k=self._k, representation="sparse", name=self.name)

    @property
    def P(self) -> Any:
        """The transition operator: a ``scipy.sparse.linalg.LinearOperator`` (``@`` applies P to a function,
        ``.T @`` to a measure) on one process; the :class:`KernelOperator` itself when sharded."""
        if self.op.comm.world_size > 1:
            return self.op

        N = self.n_states
        return LinearOperator((N, N), matvec=lambda f: self.op.matvec(np.ravel(f)),
                              rmatvec=lambda mu: self.op.rmatvec(np.ravel(mu)), dtype=np.float64)

    def to_scipy(self) -> Any:
        return self._matrix.to_scipy()

    def to_dense(self) -> np.ndarray:
        return self._matrix.to_dense()

    def save(self, path: str | Path) -> None:
        """Write the matrix (built from the source, memory permitting), as :meth:`Chain.save`."""
        self._matrix.save(path)

    def simulate(self, steps: int, start: int | np.ndarray | None = None, *, chains: int = 1,
                 seed: int | None = 0) -> np.ndarray:
        """Trajectories as :meth:`Chain.simulate`, on the matrix built from the source (memory permitting);
        a start drawn from the stationary law uses this chain's certified law."""
        if start is None:
            pi = np.asarray(self.stationary, dtype=np.float64)
            rng = np.random.default_rng(seed)
            start = np.minimum(np.searchsorted(np.cumsum(pi), rng.random(check_int(chains, "chains", minimum=1))
                                               * pi.sum(), side="right"), self.n_states - 1)
        return self._matrix.simulate(steps, start, chains=chains, seed=seed)

    @classmethod
    def load(cls, path: str | Path) -> Chain:
        """A saved matrix is read back as a :class:`Chain` (:meth:`Chain.load`)."""
        return Chain.load(path)

    # ---------------------------------------------------------------- structure
    @property
    def is_dense(self) -> bool:
        return False

    @cached_property
    def structure(self) -> Structure:
        """Positive conditionals: one aperiodic class, without a graph (:class:`_Positive`); otherwise that
        of the matrix (memory permitting)."""
        if self.op.conditionals_positive():
            return _Positive(np.zeros(self.op.local_size, dtype=np.int64), np.array([True]), None)
        return self._matrix.structure

    @property
    def is_irreducible(self) -> bool:
        """Every single-site (block) move has positive probability: V^n is one class."""
        return self.op.conditionals_positive()

    @property
    def period(self) -> int:
        return self.structure.period()

    @property
    def is_reversible(self) -> bool:
        return self.op.reversible

    # ---------------------------------------------------------------- stationary law
    @cached_property
    def _stationary(self) -> VectorResult:
        if not self.is_irreducible:
            raise ValueError("some conditionals underflow to 0: irreducibility is not established matrix-free "
                             "(raise the temperature, or analyse the matrix)")

        def compute() -> VectorResult:

            return certify_stationary(self.op, operator_stationary(self.op, progress=self._progress))

        return self._timed("stationary_s", compute)

    @cached_property
    def _logpi(self) -> np.ndarray:
        return self._stationary.log_value

    @cached_property
    def _pi_t(self) -> torch.Tensor:
        return _checked_pi(self.op, self.stationary)

    @cached_property
    def _gap(self) -> GapResult:
        return self._timed("gap_s", lambda: operator_gap(self.op, self._stationary, rtol=self._gap_rtol,
                                                          basis_size=self._basis, progress=self._progress))

    @cached_property
    def stationary(self) -> VectorResult:
        """pi, with its accuracy: exact-in-log-space for a reversible chain, the entrywise certificate
        (:func:`mlmix.theory.chain.matrixfree.solves.certify_stationary`) for another; where that fails, the
        first-order bound, which needs the gap."""
        pi = self._stationary
        if pi.rel_error is not None:
            return pi
        gap = self._gap.gap
        return pi if gap.lower is None else stationary_error_bound(self.op, pi, gap.lower)

    @property
    def _pi_rel_error(self) -> float | None:
        rel = self.stationary.rel_error
        return rel if rel is not None and rel < 1 else None

    # ---------------------------------------------------------------- gaps and conductance
    @property
    def additive_gap(self) -> Result:
        return self._gap.gap

    @property
    def spectral_gap(self) -> Result:
        if not self.is_reversible:
            return Result.missing(NAMES["spectral_gap"], "matrix-free",
                                  "not reversible (complex spectrum): see additive_gap / poincare_constant")
        return _renamed(self._gap.gap, NAMES["spectral_gap"])

    @property
    def poincare_constant(self) -> Result:
        return self.additive_gap.reciprocal(NAMES["poincare_constant"])

    @property
    def absolute_spectral_gap(self) -> Result:
        if not self.is_reversible:
            return Result.missing(NAMES["absolute_spectral_gap"], "matrix-free",
                                  "eigenvalues of a non-reversible P are not computed matrix-free")
        return _renamed(self._gap.gap, NAMES["absolute_spectral_gap"], "a reversible heat-bath kernel is positive "
                        "semi-definite, so this is the spectral gap; ")

    @property
    def relaxation_time(self) -> Result:
        if not self.is_reversible:
            return Result.missing(NAMES["relaxation_time"], "matrix-free",
                                  "needs the absolute spectral gap (not computed matrix-free)")
        return self.absolute_spectral_gap.reciprocal(NAMES["relaxation_time"])

    @cached_property
    def conductance(self) -> Result:
        return self._timed("conductance_s", lambda: operator_conductance(self.op, self.stationary, self._gap,
                                                                          bins=self._bins))

    def set_conductance(self, S: np.ndarray) -> Result:
        """Phi(S) = Q(S, S^c) / pi(S) of a set (this process's boolean mask), flows summed as non-negative
        terms."""
        op = self.op
        mask = torch.as_tensor(check_state_set(S, op.local_size, "S"), device=op.device)
        pi = torch.as_tensor(self.stationary.value, device=op.device).to(op.dtype)
        mass = global_total(op, torch.where(mask, pi, 0.0))
        if not 0 < mass < 1:
            raise ValueError("S must be a proper subset of the states")
        unit = float(torch.finfo(op.dtype).eps) / 2
        rel = 8 * unit * (op.space.length * op.space.vocab_size + math.log2(op.n_states)) + \
            2 * (self.stationary.rel_error or 0.0)
        return Result.approximate(NAMES["set_conductance"], op.escape_flow(mask, pi) / mass, rel,
                                  "flows summed as non-negative terms (matrix-free)", set_size=int(mask.sum()),
                                  set_mass=mass)

    @cached_property
    def multiplicative_gap(self) -> Result:
        """1 - sigma_2(P)^2 (Fill's bound): Lanczos on C^T C for a non-reversible chain; for a reversible
        one 1 - (1 - absolute gap)^2 from the absolute gap's enclosure."""
        if self.is_reversible:
            g = self.absolute_spectral_gap
            lo, hi = (None if g.lower is None else 1 - (1 - g.lower) ** 2), (None if g.upper is None else
                                                                              1 - (1 - g.upper) ** 2)
            return Result.interval(NAMES["multiplicative_gap"], lo, hi, "1 - (1 - absolute gap)^2 (reversible: "
                                   "sigma_2 = lambda_*)", "derived from the absolute gap's enclosure")
        return self._timed("multiplicative_gap_s", lambda: operator_multiplicative_gap(
            self.op, self._stationary, self.additive_gap, rtol=self._gap_rtol, basis_size=self._basis,
            progress=self._progress))

    # ---------------------------------------------------------------- mixing
    def _bounds(self) -> MixingBounds:
        op = self.op
        log_min = torch.tensor(float(np.min(self.stationary.log_value)), dtype=torch.float64, device=op.device)
        mult = None if self.is_reversible else self.multiplicative_gap
        cond = self.conductance
        return MixingBounds(float(op.comm.allreduce_(log_min, "min")), op.reversible,
                            abs_gap=self.additive_gap if op.reversible else None, mult_gap=mult,
                            set_mass=cond.details.get("set_mass"),
                            set_phi_upper=cond.details.get("set_conductance_upper"))

    def mixing_time(self, eps: float = 0.25, max_states: int | None = None) -> Result:
        """Certified bounds on the worst-start TV t_mix(eps) (module docstring; ``max_states`` is
        ignored: t_mix is bounded, not computed)."""
        mult = None if self.is_reversible else self.multiplicative_gap
        return operator_mixing_bounds(self.op, self.stationary, self.additive_gap, self.conductance, eps, mult)

    def tv_distance(self, t: int) -> Result:
        """d(t) = max_x TV(P^t(x, .), pi): the certified spectral upper bound (worst start over all
        states: not computable matrix-free)."""
        t = check_steps(t)
        log_up = self._bounds().log_distance_upper(t)
        hi = min(1.0, max(math.exp(log_up), 5e-324)) if log_up < 0 else 1.0
        return Result.interval(NAMES["tv_distance"], 0.0, hi, "certified spectral upper bound",
                               "the worst start over all states needs the powers of P: only the upper bound is "
                               "computed matrix-free (distance_curve gives TV(mu P^t, pi) from a start)",
                               log10_upper=log_up / math.log(10) if math.isfinite(log_up) else None)

    def distance_curve(self, t_max: int, start: int | np.ndarray | None = None, progress: bool = True) -> VectorResult:
        """TV(mu P^t, pi) for t = 0..t_max from a start state index or start law (t_max applications of
        P^T); the worst-start curve (``start=None``) needs the matrix (memory permitting). ``progress``:
        that curve's cost estimate and bar (:meth:`Chain.distance_curve`)."""
        if start is None:
            return self._matrix.distance_curve(t_max, progress=progress)
        t_max = check_steps(t_max, "t_max")
        if np.ndim(start) == 0:
            mu = np.zeros(self.n_states)
            mu[check_state_set(start, self.n_states, "start")] = 1.0
        else:
            mu = check_vector(start, self.n_states, "start", probability=True)
        return distance_from(self.op, mu, t_max, self._pi_t, self._pi_rel_error)

    # ---------------------------------------------------------------- solves
    def asymptotic_variance(self, f: np.ndarray) -> Result:
        """sigma^2(f) through the Poisson equation (:func:`mlmix.theory.chain.matrixfree.solves.asymptotic_variance`)."""

        f = check_vector(f, self.n_states, "f")
        return operator_asymptotic_variance(self.op, f, self._pi_t, self.additive_gap, self._pi_rel_error)

    @cached_property
    def kemeny_constant(self) -> Result:
        """Bounds on K (:func:`mlmix.theory.chain.matrixfree.solves.kemeny_bounds`)."""

        return kemeny_bounds(self.op, self.additive_gap)

    def hitting_time(self, target: np.ndarray) -> VectorResult:
        """E_x tau_A for every start x, certified entrywise."""

        A = check_state_set(target, self.n_states, "target set A")
        return operator_hitting_times(self.op, A, self._pi_t)

    def hitting_probabilities(self, target: np.ndarray, t: int) -> VectorResult:
        """P_x(tau_A <= t) for every start x."""

        return operator_hitting_probabilities(self.op, check_state_set(target, self.n_states, "target set A"),
                                     check_steps(t))

    def committor(self, A: np.ndarray, B: np.ndarray) -> VectorResult:
        """q(x) = P_x(tau_B < tau_A), with an entrywise error bound."""

        Am = check_state_set(A, self.n_states, "A")
        Bm = check_state_set(B, self.n_states, "B")
        if (Am & Bm).any():
            raise ValueError("A and B must be disjoint")
        return operator_committor(self.op, Am, Bm, self._pi_t)

    def mean_first_passage_times(self, target: np.ndarray | int | None = None) -> VectorResult:
        """E_x tau_target for a target state or set; the full matrix needs a target per column."""
        if target is None:
            raise ValueError(f"the full mean-first-passage matrix is computed up to {MFPT_LIMIT} states; "
                             f"this chain has {self.n_states}: give a target")
        return self.hitting_time(target)

    def dirichlet_form(self, f: np.ndarray, g: np.ndarray | None = None) -> float:
        """E(f, g) = (1/2) sum pi(x) P(x, y) (f(x) - f(y)) (g(x) - g(y)): E(f, f) as non-negative terms,
        E(f, g) by polarization (E(f + g) - E(f - g)) / 4."""
        op, pi = self.op, self._pi_t
        f_t = op._tensor(check_vector(f, self.n_states, "f"), "f")
        if g is None:
            return op.dirichlet_form(f_t, pi)
        g_t = op._tensor(check_vector(g, self.n_states, "g"), "g")
        return (op.dirichlet_form(f_t + g_t, pi) - op.dirichlet_form(f_t - g_t, pi)) / 4

    # ---------------------------------------------------------------- derived chains
    def time_reversal(self) -> Chain:
        """P* (= P for a reversible kernel: this chain; otherwise from the matrix)."""
        return self if self.is_reversible else self._matrix.time_reversal()

    def additive_reversibilization(self) -> Chain:
        """(P + P*)/2 (= P for a reversible kernel: this chain; otherwise from the matrix)."""
        return self if self.is_reversible else self._matrix.additive_reversibilization()

    def multiplicative_reversibilization(self) -> Chain:
        """P* P, from the matrix (memory permitting)."""
        return self._matrix.multiplicative_reversibilization()

    # ---------------------------------------------------------------- spectrum, classes, absorption
    def eigenvalues(self, k: int | None = None) -> VectorResult:
        """[1, 1 - gap] of a reversible kernel for k <= 2 (the gap's enclosure as the error bound);
        otherwise from the matrix (memory permitting)."""
        if k is None or k > 2 or not self.is_reversible:
            return self._matrix.eigenvalues(k)
        gap = self.spectral_gap
        if k == 1:
            return VectorResult("eigenvalues", np.ones(1), "the eigenvalue 1 of a stochastic matrix", None, 0.0,
                                details={"error_bounds": np.zeros(1)})
        mid = gap.value if gap.resolved else (gap.lower + gap.upper) / 2
        err = max(mid - gap.lower, gap.upper - mid)
        return VectorResult("eigenvalues", np.array([1.0, 1.0 - mid]), f"1 and 1 - spectral gap ({gap.method})",
                            None, err, details={"error_bounds": np.array([0.0, err])})

    def implied_timescales(self, k: int | None = None) -> VectorResult:
        """t_j = -1 / log |lambda_j| from :meth:`eigenvalues`."""

        return implied_timescales(self.eigenvalues(k))

    def stationary_distributions(self) -> VectorResult:
        """One closed class (positive conditionals): the stationary law as one row."""
        if not isinstance(self.structure, _Positive):
            return self._matrix.stationary_distributions()
        pi = self.stationary
        return VectorResult("stationary laws of the closed classes", pi.value[None, :], pi.method, pi.rel_error,
                            details={"classes": self.structure.closed_classes})

    def cyclic_classes(self) -> list[np.ndarray]:
        """Period 1 (positive conditionals): one cyclic class, every state."""
        if not isinstance(self.structure, _Positive):
            return self._matrix.cyclic_classes()
        return [np.arange(self.op.local_size)]

    @cached_property
    def _absorption(self) -> Absorption:
        if not isinstance(self.structure, _Positive):
            return self._matrix._absorption
        return Absorption(np.zeros(0, dtype=np.int64), self.structure.closed_classes, None, 0.0)

    def fundamental_matrix(self) -> VectorResult:
        return fundamental_matrix(self._absorption)

    def absorption_probabilities(self) -> VectorResult:
        return absorption_probabilities(self._absorption)

    def expected_steps_to_absorption(self) -> VectorResult:
        return expected_steps(self._absorption)

    # ---------------------------------------------------------------- report
    @property
    def progress(self) -> bool:  # type: ignore[override]
        """Whether the Krylov solvers print their progress lines (the ``progress`` given at construction,
        or a ``summary(progress=True)``); assignable like :attr:`Chain.progress`."""
        return self._progress

    @progress.setter
    def progress(self, on: bool) -> None:
        self._progress = bool(on)

    def summary(self, eps: float = 0.25, include_stationary: bool = False, mixing_limit: int | None = None,
                progress: bool = True, as_frame: bool = False) -> Any:
        """The keys of :meth:`Chain.summary` (``mixing_limit`` is ignored: t_mix is bounded, not computed);
        the seconds spent are in :attr:`timings`. ``progress``: the Krylov solvers' progress lines, as
        for a chain built with ``progress=True`` (a line every few seconds of a long solve); ``as_frame``:
        a ``pandas.DataFrame`` (:func:`~mlmix.theory.results.results_frame`)."""
        eps = check_eps(eps)
        self._progress = self._progress or progress
        out: dict[str, Any] = {"n_states": self.n_states, "representation": f"matrix-free operator ({self.op})",
                               "irreducible": self.is_irreducible, "closed_classes": 1, "period": self.period,
                               "reversible": self.is_reversible,
                               "stationary": self.stationary.as_dict(values=include_stationary)}
        for key in ("spectral_gap", "absolute_spectral_gap", "relaxation_time", "additive_gap",
                    "poincare_constant", "conductance", "kemeny_constant"):
            out[key] = getattr(self, key)
        out["eps"] = eps
        out["t_mix"] = self.mixing_time(eps)
        return results_frame(out) if as_frame else out


def analyse_operator(op: KernelOperator, eps: float = 0.25, *, gap_rtol: float = GAP_RTOL, basis_size: int = 16,
                     bins: int = SWEEP_BINS, progress: bool = False) -> dict[str, Any]:
    """Every figure ``mlmix exact`` reports, matrix-free (:meth:`OperatorChain.summary` with the
    Results themselves and the stationary law as a :class:`VectorResult`)."""
    chain = OperatorChain(op, gap_rtol=gap_rtol, basis_size=basis_size, bins=bins, progress=progress)
    out = chain.summary(eps)
    out["stationary"] = chain.stationary
    out["timings"] = dict(chain.timings)
    return out


def summary_dict(analysis: dict[str, Any], include_stationary: bool = False) -> dict[str, Any]:
    """:func:`analyse_operator`'s result for :func:`mlmix.files.dumps_json`: the stationary law as its
    dict, with its values only when ``include_stationary``."""
    return {**analysis, "stationary": analysis["stationary"].as_dict(values=include_stationary)}
