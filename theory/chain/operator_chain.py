"""The chain of a matrix-free kernel operator (:mod:`mlmix.theory.kernels.operators`) is a
:class:`~mlmix.theory.chain.markov_chain.Chain` holding the operator (``Chain(op)``,
:meth:`Chain.from_operator <mlmix.theory.chain.markov_chain.Chain.from_operator>`,
``Chain.from_source(..., representation="operator")``): each quantity module answers it by operator
applications alone (stationary law: :mod:`~mlmix.theory.chain.stationary`; gaps:
:mod:`~mlmix.theory.chain.spectral`; conductance: :mod:`~mlmix.theory.chain.conductance`; t_mix and
distances: :mod:`~mlmix.theory.chain.mixing`; hitting times and committors:
:mod:`~mlmix.theory.chain.hitting`; asymptotic variance and Kemeny bounds:
:mod:`~mlmix.theory.chain.variance`), on one process or sharded. Here: the name ``OperatorChain`` (a
constructor with the solvers' options) and the one-call analysis of ``mlmix exact --distributed``.
"""

from __future__ import annotations

from typing import Any

from mlmix.theory.chain.conductance import SWEEP_BINS
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.spectral import GAP_RTOL
from mlmix.theory.linalg.operator import TransitionOperator


class OperatorChain(Chain):
    """``Chain(op)`` with the solvers' options of :meth:`Chain.from_operator` (``gap_rtol``,
    ``basis_size``, ``bins``, ``progress``); every question is :class:`Chain`'s own."""

    def __init__(self, op: TransitionOperator, *, name: str | None = None, gap_rtol: float = GAP_RTOL,
                 basis_size: int = 16, bins: int = SWEEP_BINS, progress: bool = False) -> None:
        super().__init__(op, name=name)
        if self.op is not None:
            self._hold_operator(name, gap_rtol=gap_rtol, basis_size=basis_size, bins=bins, progress=progress)

    @classmethod
    def from_source(cls, source: Any, kernel: str = "glauber", *, k: int | None = None, name: str | None = None,
                    **options: Any) -> Chain:
        """``Chain.from_source(source, kernel, k=k, name=name, representation="operator", **options)``
        (``options`` go to :func:`mlmix.theory.kernels.operators.kernel_operator`: device, dtype, comm)."""
        return Chain.from_source(source, kernel, k=k, name=name, representation="operator", **options)


def analyse_operator(op: TransitionOperator, eps: float = 0.25, *, gap_rtol: float = GAP_RTOL, basis_size: int = 16,
                     bins: int = SWEEP_BINS, progress: bool = False) -> dict[str, Any]:
    """Every figure ``mlmix exact`` reports, matrix-free (:meth:`Chain.summary` with the Results
    themselves and the stationary law as a :class:`~mlmix.theory.results.VectorResult`)."""
    chain = Chain.from_operator(op, gap_rtol=gap_rtol, basis_size=basis_size, bins=bins, progress=progress)
    out = chain.summary(eps)
    out["stationary"] = chain.stationary
    out["timings"] = dict(chain.timings)
    return out


def summary_dict(analysis: dict[str, Any], include_stationary: bool = False) -> dict[str, Any]:
    """:func:`analyse_operator`'s result for :func:`mlmix.files.dumps_json`: the stationary law as its
    dict, with its values only when ``include_stationary``."""
    return {**analysis, "stationary": analysis["stationary"].as_dict(values=include_stationary)}
