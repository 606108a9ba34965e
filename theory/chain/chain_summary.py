"""The report of a chain (:meth:`Chain.summary <mlmix.theory.chain.markov_chain.Chain.summary>`, what
`mlmix exact` prints) and the cost estimates of its phases for :mod:`mlmix.progress`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import scipy.sparse as sp

from mlmix.errors import MemoryLimitError, ReducibleChainError, UnderflowError
from mlmix.limits import MIXING_LIMIT
from mlmix.progress import Progress, dense_seconds, product_seconds, seconds_for, torch_start_seconds
from mlmix.theory.chain import mixing
from mlmix.theory.results import NAMES, REPORT, ReportQuantity, Result, results_frame
from mlmix.validation import check_eps, format_bytes

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


def summary(chain: Chain, eps: float, include_stationary: bool, mixing_limit: int, progress: bool,
            as_frame: bool) -> Any:
    """The body of :meth:`Chain.summary`."""

    eps = check_eps(eps)
    if chain.facts.representation == "operator":
        return _operator_summary(chain, eps, include_stationary, progress, as_frame)
    out: dict[str, Any] = {"n_states": chain.n_states,
                           "representation": f"{chain.representation} ({chain.representation_reason})",
                           "irreducible": chain.is_irreducible}
    phases, cost = summary_cost(chain, mixing_limit)
    with Progress(f"analysis of {chain.name}", phases, cost=cost, enabled=progress) as bar:
        try:
            out["closed_classes"] = len(chain.closed_classes)
            out["period"] = chain.period if len(chain.closed_classes) == 1 else None
            for phase in _SUMMARY_PHASES:
                if phase == "t_mix":
                    out["eps"] = eps
                with bar.phase(phase):
                    if phase == "stationary law":
                        out["reversible"] = None if chain.facts.underflow else chain.is_reversible
                    for q in REPORT:
                        if q.phase == phase:
                            out[q.key] = _figure(chain, q, eps, include_stationary, mixing_limit, guard=True)
        except (ReducibleChainError, UnderflowError) as err:
            out["reason"] = str(err)
    return results_frame(out) if as_frame else out


def _operator_summary(chain: Chain, eps: float, include_stationary: bool, progress: bool, as_frame: bool) -> Any:
    """The keys of :func:`summary` on a matrix-free chain (t_mix bounded, not computed; the seconds
    spent are in ``chain.timings``); ``progress`` turns on the Krylov solvers' progress lines."""
    chain.solver_progress = chain.solver_progress or progress
    out: dict[str, Any] = {"n_states": chain.n_states, "representation": f"matrix-free operator ({chain.op})",
                           "irreducible": chain.is_irreducible, "closed_classes": len(chain.closed_classes)}
    try:
        out["period"] = chain.period
        out["reversible"] = chain.is_reversible
        for q in REPORT:
            if q.phase is not None:
                if q.key == "t_mix":
                    out["eps"] = eps
                out[q.key] = _figure(chain, q, eps, include_stationary, None, guard=False)
    except ReducibleChainError as err:  # an operator's matrix with several closed classes
        out["reason"] = str(err)
    return results_frame(out) if as_frame else out


def summary_cost(chain: Chain, mixing_limit: int) -> tuple[list[tuple[str, float]], str]:
    """The body of :meth:`Chain._summary_cost` (matrix-free: the Krylov solvers report their own progress)."""

    N = chain.n_states
    if chain.facts.representation == "operator":
        return [(phase, 0.0) for phase in _PRIOR_PHASES if phase in _SUMMARY_PHASES], \
            f"{N:,} states, matrix-free operator ({chain.op})"
    nnz = int(chain.P.nnz) if sp.issparse(chain.P) else N * N
    if chain.facts.representation == "dense":
        cubes = {"stationary law": 0.5, "gaps": 18.0, "conductance": 1.0, "Kemeny constant": 2.0,
                 "t_mix": 12.0 if N <= mixing_limit else 0.0}
        phases = [(name, dense_seconds(N, c)) for name, c in cubes.items()]
        memory = 8.0 * N * N * (6 + (mixing.MAX_DOUBLINGS // 4 + 3 if N <= mixing_limit else 0))
    else:
        product = product_seconds(chain.P)
        phases = [("stationary law", 150 * product), ("gaps", 1000 * product + torch_start_seconds()),
                  ("conductance", 500 * product), ("Kemeny constant", 0.0), ("t_mix", 0.0)]
        memory = 12.0 * nnz * 4
    return phases, f"{N:,} states, {nnz:,} non-zeros, {chain.representation} algorithms, about " \
                   f"{format_bytes(memory)}"


def progress_plan(chain: Chain, phase: str, name: str) -> tuple[str, str, list]:
    """The body of :meth:`Chain._progress_plan`."""

    if chain.facts.representation == "operator":  # the Krylov solvers report their own progress
        return f"{name} of {chain.name}", summary_cost(chain, MIXING_LIMIT)[1], [(phase, 0.0, None)]
    phases, cost = summary_cost(chain, MIXING_LIMIT)
    expected = dict(phases)
    nnz = int(chain.P.nnz) if sp.issparse(chain.P) else chain.n_states ** 2
    dense = chain.facts.representation == "dense"
    expected["hitting times"] = dense_seconds(chain.n_states, 1.0) if dense else seconds_for(4000.0 * nnz)
    expected["variance"], expected["d(t)"] = expected["Kemeny constant"], expected["t_mix"]
    prior = () if phase == "t_mix" and chain.period > 1 else _PRIOR_PHASES[phase]  # periodic: t_mix is inf
    steps = [(p, expected[p], lambda get=_CACHED_PHASES[p][1]: get(chain))
             for p in prior if not chain.computed((_CACHED_PHASES[p][0],))]
    return f"{name} of {chain.name}", cost, steps + [(phase, expected[phase], None)]


#: The phases an analysis phase needs first, and the cached member that holds each one's result (its name, as
#: :meth:`Chain.computed` reads it, and how to compute it).
_PRIOR_PHASES = {"stationary law": (), "gaps": ("stationary law",), "conductance": ("stationary law", "gaps"),
                 "Kemeny constant": ("stationary law",), "t_mix": ("stationary law", "gaps", "conductance"),
                 "hitting times": (), "variance": ("stationary law",),
                 "d(t)": ("stationary law", "gaps", "conductance")}
_SUMMARY_PHASES = ("stationary law", "gaps", "conductance", "Kemeny constant", "t_mix")
_CACHED_PHASES: dict[str, tuple[str, Callable[[Chain], Any]]] = {
    "stationary law": ("logpi", lambda chain: chain.facts.logpi),
    "gaps": ("gap_and_mode", lambda chain: chain.facts.gap_and_mode),
    "conductance": ("conductance", lambda chain: chain.conductance)}


def _figure(chain: Chain, q: ReportQuantity, eps: float, include_stationary: bool, mixing_limit: int | None,
            guard: bool) -> Any:
    """The figure ``q`` of :data:`~mlmix.theory.results.REPORT` for the summary: the stationary law as its dict
    (with its values when ``include_stationary``), t_mix at ``eps`` (exact by dense squaring up to
    ``mixing_limit`` states; None: the member's default), any other the Chain member ``q.member``; ``guard``: a
    resource limit becomes an unresolved result (:func:`_guard`)."""
    if q.key == "stationary":
        return chain.stationary.as_dict(values=include_stationary)
    if q.key == "t_mix":
        def compute() -> Result:
            return chain.mixing_time(eps) if mixing_limit is None else chain.mixing_time(eps, mixing_limit)
    else:
        def compute() -> Result:
            return getattr(chain, q.member)
    return _guard(compute, q.key) if guard else compute()


def _guard(compute: Callable[[], Result], key: str) -> Result:
    """A quantity that hit a resource limit becomes an unresolved result with the reason (named by
    the table :data:`~mlmix.theory.results.NAMES`)."""
    try:
        return compute()
    except MemoryLimitError as err:
        return Result.missing(NAMES[key], "-", str(err))
