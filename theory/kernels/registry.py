"""The samplers, declared once: :data:`KERNELS` (Markov kernels of a source of conditionals) and, beside
it, :data:`~mlmix.theory.kernels.decoders.DECODERS` (the laws of masked-diffusion decoders).

An entry says how to build the kernel assembled (dense and CSR) and matrix-free, its exact sign pattern
(:func:`~mlmix.theory.kernels.support.kernel_support`), which options it takes
(the CLI's option names, with their defaults), whether it is reversible, and a one-line description.
``Chain.from_source``, the ``--kernel`` choices of ``mlmix exact`` / ``mlmix diagnose``, the table of
which option each kernel takes and the table of samplers in ``docs/samplers.md`` all read it, so adding
a sampler is one module (its builders) and one line here.

A kernel whose name carries one of its options (``named_option``) is also known by ``NAME-VALUE``:
"mh-pll" is "mh" with ``energy="pll"``, as ``Chain.from_source(src, "mh-pll")`` spells it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import scipy.sparse as sp

from mlmix.theory.kernels.assembled import (
    glauber_kernel,
    glauber_support,
    independent_parallel_kernel,
    k_gibbs_kernel,
    k_gibbs_support,
    parallel_support,
)
from mlmix.theory.kernels.scan_and_mh import check_order, mh_kernel, mh_support, systematic_kernel, systematic_support
from mlmix.theory.sources.conditionals import Conditionals


@dataclass(frozen=True)
class KernelSpec:
    """One sampler as a Markov kernel P on V^n of a source of conditionals.

    ``build_dense(source, **options)`` and ``build_csr(source, **options)`` give P as an ndarray and as a
    ``scipy.sparse.csr_array`` (the same matrix); ``assembled`` names the one the kernel is built as
    ("csr" or "dense"; the other converts it). ``build_operator(source, **options, **operator_options)`` gives
    the matrix-free :class:`~mlmix.theory.kernels.operators.KernelOperator` (None: no operator; the
    chain is then held as a matrix). ``options``: the kernel's own options (their CLI names without
    ``--``, ``-`` as ``_``) and their defaults. ``reversible``: whether P satisfies detailed balance with
    respect to its stationary law for every compatible source (one with a joint law; the parallel
    sampler and the systematic scan do not, though a pairwise model's parallel sampler does). ``doc``: one line for the
    docs table. ``title(source, options)``: the phrase naming the kernel in a report's title.
    ``support(source, **options)``: the Boolean CSR pattern of the transitions that are positive in exact
    arithmetic, from the log-conditionals being > -inf (:mod:`mlmix.theory.kernels.support`); None: the
    pattern of the float matrix stands in for it (exact only where no entry underflows)."""

    name: str
    build_dense: Callable[..., np.ndarray]
    build_csr: Callable[..., sp.csr_array]
    build_operator: Callable[..., Any] | None
    options: Mapping[str, object]
    reversible: bool
    doc: str
    title: Callable[[Conditionals, Mapping[str, Any]], str]
    assembled: str = "csr"
    named_option: str | None = None
    #: The values ``named_option`` takes (the kernel's names NAME-VALUE); empty without one.
    named_values: tuple[str, ...] = field(default=())
    support: Callable[..., sp.csr_array] | None = None

    def build(self, source: Conditionals, **options: Any) -> np.ndarray | sp.csr_array:
        """P as the kernel is assembled (:attr:`assembled`): the matrix ``Chain.from_source`` holds."""
        return (self.build_csr if self.assembled == "csr" else self.build_dense)(source, **options)

    def names(self) -> tuple[str, ...]:
        """The names ``Chain.from_source`` accepts for this kernel: NAME-VALUE for each value of its
        :attr:`named_option`, else NAME."""
        return tuple(f"{self.name}-{v}" for v in self.named_values) if self.named_option else (self.name,)


def _dense(build: Callable[..., sp.csr_array]) -> Callable[..., np.ndarray]:
    """The dense builder of a kernel assembled as CSR."""
    return lambda source, **options: build(source, **options).toarray()


def _csr(build: Callable[..., np.ndarray]) -> Callable[..., sp.csr_array]:
    """The CSR builder of a kernel assembled dense."""
    return lambda source, **options: sp.csr_array(build(source, **options))


def _operator(kernel: str) -> Callable[..., Any]:
    """The matrix-free builder of ``kernel`` (:func:`~mlmix.theory.kernels.operators.kernel_operator`)."""

    def build(source: Conditionals, k: int = 2, **operator_options: Any) -> Any:
        # deferred: the matrix-free engine imports torch, which the assembled kernels never need
        from mlmix.theory.kernels.operators import kernel_operator

        return kernel_operator(source, kernel, k, **operator_options)

    return build


def _glauber(source: Conditionals) -> sp.csr_array:
    return glauber_kernel(source)


def _k_gibbs(source: Conditionals, k: int = 2) -> sp.csr_array:
    return k_gibbs_kernel(source, k)


def _parallel(source: Conditionals) -> np.ndarray:
    return independent_parallel_kernel(source)


def _systematic(source: Conditionals, order: Any = None) -> np.ndarray:
    return systematic_kernel(source, order)


def _mh(source: Conditionals, energy: str = "logit") -> sp.csr_array:
    return mh_kernel(source, energy)


#: Every sampler that is a Markov kernel, by name (module doc). ``mlmix exact --kernel`` offers these.
KERNELS: dict[str, KernelSpec] = {spec.name: spec for spec in (
    KernelSpec("glauber", _dense(_glauber), _glauber, _operator("glauber"), {}, True,
               "random-scan Glauber P_T: a uniform site redrawn from its conditional (paper G sec. 3.2)",
               lambda source, o: "Glauber dynamics", support=glauber_support),
    KernelSpec("k-gibbs", _dense(_k_gibbs), _k_gibbs, _operator("k-gibbs"), {"k": 2}, True,
               "k-Gibbs: a uniform k-subset of sites redrawn from the joint (paper P Def. 10; needs a joint law)",
               lambda source, o: f"{o['k']}-Gibbs block dynamics", support=k_gibbs_support),
    KernelSpec("parallel", _parallel, _csr(_parallel), None, {}, False,
               "independent parallel sampler: every site at once from its conditional (paper P Def. 11)",
               lambda source, o: "independent parallel sampler", assembled="dense", support=parallel_support),
    KernelSpec("systematic", _systematic, _csr(_systematic), None, {"order": None}, False,
               "systematic scan: one sweep of heat-bath updates in a fixed order",
               lambda source, o: f"systematic scan, one sweep in order {check_order(source.space, o['order'])}",
               assembled="dense", support=systematic_support),
    KernelSpec("mh", _dense(_mh), _mh, None, {"energy": "logit"}, True,
               "Metropolis-Hastings with the single-site MLM proposal, target exp(-E)/Z (E: logit or pll)",
               lambda source, o: f"Metropolis-Hastings, target exp(-E_{o['energy']})/Z, MLM proposal",
               named_option="energy", named_values=("logit", "pll"), support=mh_support),
)}


def kernel_names() -> tuple[str, ...]:
    """Every name ``Chain.from_source`` accepts (:meth:`KernelSpec.names`), in registry order."""
    return tuple(name for spec in KERNELS.values() for name in spec.names())


def operator_kernels() -> tuple[str, ...]:
    """The kernels with a matrix-free operator."""
    return tuple(name for name, spec in KERNELS.items() if spec.build_operator is not None)


def kernel_options() -> dict[str, dict[str, object]]:
    """Kernel -> {its own option: default}: the table of which kernel takes which option
    (:func:`mlmix.commands.options.check_sampler_options`)."""
    return {name: dict(spec.options) for name, spec in KERNELS.items()}


def resolve_kernel(kernel: str, **given: Any) -> tuple[KernelSpec, str, dict[str, Any]]:
    """(entry, canonical name, options) of the kernel named ``kernel`` (a registry name or NAME-VALUE,
    module doc; a bare NAME takes its ``named_option`` from ``given``). ``given``: option values, None
    for "not given"; the entry's defaults fill the rest, the name's value fixes its ``named_option``, and
    options the kernel does not take are dropped.
    ValueError (one line) for an unknown name."""
    spec = KERNELS.get(kernel)
    fixed: dict[str, Any] = {}
    if spec is None:
        match = next(((s, kernel[len(s.name) + 1:]) for s in KERNELS.values()
                      if s.named_option and kernel in s.names()), None)
        if match is None:
            raise ValueError(f"kernel must be one of {', '.join(kernel_names())}, got {kernel!r}")
        spec = match[0]
        fixed[spec.named_option] = match[1]
    options = {name: fixed.get(name, default if given.get(name) is None else given[name])
               for name, default in spec.options.items()}
    canonical = f"{spec.name}-{options[spec.named_option]}" if spec.named_option else spec.name
    return spec, canonical, options


def kernels_table() -> str:
    """The table of Markov-kernel samplers in ``docs/samplers.md`` (tests check the two agree)."""
    rows = ["| kernel | command | Python | reversible | what it is |", "|---|---|---|---|---|"]
    for spec in KERNELS.values():
        opts = " ".join(f"[--{o.replace('_', '-')} {o.upper()}]" for o in spec.options
                        if o != spec.named_option)
        command = f"mlmix exact --kernel {spec.name}" + (f" --{spec.named_option} " + "|".join(spec.named_values)
                                                         if spec.named_option else "") + (f" {opts}" if opts else "")
        kwargs = "".join(f", {o}={o.upper()}" for o in spec.options if o != spec.named_option)
        python = ", ".join(f'`Chain.from_source(src, "{name}"{kwargs})`' for name in spec.names())
        rows.append(f"| {spec.name} | `{command.replace('|', chr(92) + '|')}` | {python} | "
                    f"{'yes' if spec.reversible else 'no'} | {spec.doc} |")
    return "\n".join(rows)
