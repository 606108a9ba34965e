"""The samplers, declared once: :data:`KERNELS` (Markov kernels of a source of conditionals) and, beside
it, :data:`~mlmix.theory.kernels.decoders.DECODERS` (the laws of masked-diffusion decoders).

An entry says how to build the kernel assembled (dense and CSR) and matrix-free (the blocks its operator
redraws), its exact sign pattern (:func:`~mlmix.theory.kernels.support.kernel_support`), its log
off-diagonal entries where each is one conditional, its size as a CSR matrix, which options it takes
(the CLI's option names, with their defaults) and their ranges, whether it is reversible, whether it is
paper G's single-site heat-bath chain (its constants and theorems apply; it is simulated from
conditionals), the figures a report adds for it, and a one-line description. ``Chain.from_source``,
the representation's memory estimates, the matrix-free operator, the ``--kernel`` choices of
``mlmix exact`` / ``mlmix diagnose``, the reports and diagnostics, the table of which option each
kernel takes and the table of samplers in ``docs/samplers.md`` all read it and test no kernel by name,
so adding a sampler is one module (its builders) and one line here.

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
    k_subsets,
    parallel_support,
)
from mlmix.theory.kernels.scan_and_mh import (
    check_order,
    mh_acceptance,
    mh_kernel,
    mh_support,
    single_site_log_offdiagonal,
    systematic_kernel,
    systematic_support,
)
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.space import StateSpace


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
    pattern of the float matrix stands in for it (exact only where no entry underflows).
    ``blocks(n, k)``: the blocks of sites the matrix-free operator redraws, each with probability
    1/len(blocks) (None: no operator; ``build_operator`` then is None too).
    ``nnz(space, **options)``: the number of non-zero entries of the CSR matrix (the memory estimate of
    :func:`~mlmix.theory.kernels.representation.csr_memory`); None: |V|^2n (every entry).
    ``log_offdiagonal(source, **options)``: log P(x, y) for x != y, dense, where every off-diagonal entry
    is one conditional (:func:`~mlmix.theory.kernels.support.kernel_log_offdiagonal`); None: not so.
    ``single_site_heat_bath``: P is paper G's random-scan single-site heat-bath chain P_T, so paper G's
    constants (rho, Delta, Theorems 5-8) apply to it, its matrix-free operator takes the source's
    conditionals (not a joint law), and it is simulated and its moves checked from the conditionals.
    ``figures(source, options)``: figures a report adds for this kernel (a dict), or None.
    ``check(space, options, prefix)``: raises ValueError (one line, options named ``prefix + name``) for
    option values out of range on ``space``; None: nothing beyond the builders' own checks."""

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
    blocks: Callable[[int, int], list[tuple[int, ...]]] | None = None
    nnz: Callable[..., int] | None = None
    log_offdiagonal: Callable[..., np.ndarray] | None = None
    single_site_heat_bath: bool = False
    figures: Callable[[Conditionals, Mapping[str, Any]], dict[str, Any]] | None = None
    check: Callable[[StateSpace, Mapping[str, Any], str], None] | None = None

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


def _sites(n: int, k: int) -> list[tuple[int, ...]]:
    """The blocks of a single-site kernel: (0,), ..., (n-1,)."""
    return [(i,) for i in range(n)]


def _single_site_nnz(space: StateSpace, **options: Any) -> int:
    """Non-zeros of a single-site kernel: N (n (|V| - 1) + 1), the moves of one site and the diagonal."""
    return space.size * (space.length * (space.vocab_size - 1) + 1)


def _k_gibbs_nnz(space: StateSpace, k: int = 2) -> int:
    """Non-zeros of k-Gibbs before merging: C(n, k) N |V|^k."""
    return len(k_subsets(space.length, k)) * space.size * space.vocab_size**k


def _check_k(space: StateSpace, options: Mapping[str, Any], prefix: str = "") -> None:
    """k of k-Gibbs lies in 1..n."""
    if not 1 <= options["k"] <= space.length:
        raise ValueError(f"{prefix}k must lie in 1..n = {space.length}, got {options['k']}")


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
               lambda source, o: "Glauber dynamics", support=glauber_support, blocks=_sites,
               nnz=_single_site_nnz, log_offdiagonal=lambda source: single_site_log_offdiagonal(source),
               single_site_heat_bath=True),
    KernelSpec("k-gibbs", _dense(_k_gibbs), _k_gibbs, _operator("k-gibbs"), {"k": 2}, True,
               "k-Gibbs: a uniform k-subset of sites redrawn from the joint (paper P Def. 10; needs a joint law)",
               lambda source, o: f"{o['k']}-Gibbs block dynamics", support=k_gibbs_support, blocks=k_subsets,
               nnz=_k_gibbs_nnz, check=_check_k),
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
               named_option="energy", named_values=("logit", "pll"), support=mh_support, nnz=_single_site_nnz,
               log_offdiagonal=single_site_log_offdiagonal, figures=lambda source, o: mh_acceptance(source, o["energy"])),
)}


#: The kernel ``Chain.from_source`` and ``--kernel`` use when none is named.
DEFAULT_KERNEL = "glauber"


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


def find_kernel(kernel: str) -> KernelSpec | None:
    """The entry of the kernel named ``kernel`` (a registry name or NAME-VALUE), None for any other name
    (e.g. a chain given as a matrix)."""
    return next((spec for spec in KERNELS.values() if kernel == spec.name or kernel in spec.names()), None)


def simulated_from_conditionals(kernel: str) -> bool:
    """Whether the kernel named ``kernel`` is simulated (and its moves checked) from a source's
    conditionals, with no matrix: its entry's ``single_site_heat_bath``; False for an unknown name."""
    spec = find_kernel(kernel)
    return spec is not None and spec.single_site_heat_bath


def check_kernel_options(space: StateSpace, kernel: str, prefix: str = "", **given: Any) -> None:
    """ValueError (one line) when an option of ``kernel`` (resolved as :func:`resolve_kernel` does) is out
    of range on ``space`` (the entry's ``check``; "--" as ``prefix`` names them as the CLI does)."""
    spec, _, options = resolve_kernel(kernel, **given)
    if spec.check is not None:
        spec.check(space, options, prefix)


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
