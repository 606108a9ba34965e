"""One chain, three representations: every answer of the chain on a matrix-free operator
(:class:`~mlmix.theory.chain.markov_chain.Chain` holding a kernel of
:mod:`mlmix.theory.kernels.operators`) and of the CSR chain must lie inside the dense chain's certified
enclosure (paper key ``diagnostics``).

The instances are those of the papers' chain theorems (:func:`mlmix.verify.instances.instances`: any
source, incompatible two times in three, half of them n >= 4 and |V| >= 3, up to 243 states), the
sampler Glauber or, on sources with a joint law, 2-Gibbs. ``Chain.from_source(source, kernel,
representation=...)`` builds the dense chain (GTH, dense eigensolvers, exact t_mix), the CSR chain (sparse
algorithms forced) and the operator chain (Lanczos, GMRES, certified bounds); each Result carries
[lower, upper], each VectorResult a relative or an absolute error. Two enclosures of the same number
intersect: |a - b| <= (half-width of a) + (half-width of b), the form of every part below (an identity
``==`` whose two errors are the half-widths), so doubling either side is caught. The operator's t_mix is
an interval of certified bounds; the dense chain's exact t_mix must lie inside it (a condition: the
bounds are loose by design).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from mlmix.errors import ConvergenceError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.results import Result
from mlmix.verify import instances as S
from mlmix.verify.verdicts import Applicability, OnFirst, Part, Theorem, Verdict, register, verdict

PAPER = "diagnostics"

#: Largest chain compared (the dense chain's exact t_mix and GTH solves stay fast).
MAX_STATES = 243

#: Unit roundoff.
U = float(np.finfo(float).eps) / 2


@st.composite
def representation_instances(draw) -> tuple:
    """(instance, kernel, seed): a chain of the papers' theorems (half n >= 4 and |V| >= 3), Glauber, or
    2-Gibbs one time in three on a source with a joint law (n >= 3); the seed draws f, the start and A."""
    inst = draw(S.half_large(S.instances(max_states=MAX_STATES, max_ratio=20.0), MAX_STATES, 20.0))
    kernel = "glauber"
    if inst.source.log_joint() is not None and inst.space.length >= 3 and draw(st.integers(0, 2)) == 0:
        kernel = "k-gibbs"
    return inst, kernel, draw(st.integers(0, 2**16))


def _mid(r: Result) -> tuple[float, float] | None:
    """(centre, half-width) of a Result's enclosure, widened by a few ulps; None without one."""
    if r.lower is None or r.upper is None:
        return None
    lo, hi = float(r.lower), float(r.upper)
    mid = (lo + hi) / 2
    return mid, (hi - lo) / 2 + 4 * U * abs(mid)


def _interval_part(name: str, a: Result, b: Result) -> Part:
    """The two enclosures must intersect; a side without an enclosure fails the part (compared as +inf
    against 0: a number with no stated accuracy is not a verdict of agreement)."""
    ma, mb = _mid(a), _mid(b)
    if ma is None or mb is None:
        return Part(name, math.inf, 0.0, "==", 0.0, 0.0, False)
    return Part(name, ma[0], mb[0], "==", ma[1], mb[1], False)


def _errors(v) -> np.ndarray:
    """Entrywise error bounds of a VectorResult (relative, or the l1 bound on each entry); inf if none."""
    x = np.abs(np.asarray(v.value, dtype=float))
    if v.rel_error is not None:
        return x * v.rel_error + 4 * U * x
    return np.full(x.shape, math.inf if v.abs_error is None else float(v.abs_error)) + 4 * U * x


def _vector_part(name: str, a, b) -> Part:
    """The entry where two VectorResults differ most relative to their error bounds (a side without a bound
    compares as +inf: a number with no stated accuracy fails the part)."""
    va, vb = np.asarray(a.value, dtype=float), np.asarray(b.value, dtype=float)
    ea, eb = _errors(a), _errors(b)
    if not (np.isfinite(ea).all() and np.isfinite(eb).all()):
        return Part(name, math.inf, 0.0, "==", 0.0, 0.0, False)
    score = np.abs(va - vb) / np.maximum(ea + eb, 1e-300)
    score = np.where(np.abs(vb) > 0, score, -1.0)
    k = int(np.argmax(score))
    return Part(name, float(va[k]), float(vb[k]), "==", float(ea[k]), float(eb[k]), False)


@register
class Representations(OnFirst, Theorem):
    id = "diagnostics.representations"
    paper = PAPER
    number = "Dense, CSR and matrix-free chains agree"
    statement = ("for the Glauber (or 2-Gibbs) chain of a source: the operator chain's and the CSR chain's "
                 "stationary law, additive gap, absolute gap, asymptotic variance sigma^2(f), TV(mu P^t, pi) and hitting times "
                 "E_x tau_A lie inside the dense chain's certified enclosures, and the dense exact t_mix(1/4) lies "
                 "inside the operator's certified interval")
    extras = ("kernel", "draw_seed")
    budget = 0.12

    def strategy(self) -> st.SearchStrategy:
        return representation_instances()

    def hypotheses(self, instance) -> Applicability:
        inst = instance[0]
        ok = bool(np.isfinite(S.score_table(inst.source)).all())
        return Applicability(ok, "" if ok else "zero conditionals: the operator needs positive conditionals")

    def check(self, instance: tuple) -> Verdict:
        inst, kernel, seed = instance
        src = inst.source
        chains = {rep: Chain.from_source(src, kernel, representation=rep) for rep in ("dense", "sparse", "operator")}
        try:
            chains["operator"].stationary
        except ConvergenceError as err:  # the operator says plainly that it could not solve: no number to compare
            return verdict(Part("stationary law: operator = dense", 1.0, 1.0, "==", ratio=False),
                           trivial=f"the operator's GMRES did not converge ({err})")
        dense, sparse, op = chains["dense"], chains["sparse"], chains["operator"]
        N = dense.n_states
        rng = np.random.default_rng(seed)
        f = rng.standard_normal(N)
        x0 = int(rng.integers(N))
        A = rng.random(N) < 0.25
        A[int(np.argmax(np.asarray(dense.stationary)))] = True
        t_max = 6
        parts = []
        for rep, c in (("operator", op), ("CSR", sparse)):
            parts += [
                _vector_part(f"stationary law: {rep} = dense", c.stationary, dense.stationary),
                _interval_part(f"additive gap: {rep} = dense", c.additive_gap, dense.additive_gap),
                _interval_part(f"absolute gap: {rep} = dense", c.absolute_spectral_gap, dense.absolute_spectral_gap),
                _interval_part(f"sigma^2(f): {rep} = dense", c.asymptotic_variance(f), dense.asymptotic_variance(f)),
                _vector_part(f"TV(P^t(x0, .), pi), t <= {t_max}: {rep} = dense", c.distance_curve(t_max, start=x0),
                             dense.distance_curve(t_max, start=x0)),
                _vector_part(f"E_x tau_A: {rep} = dense", c.hitting_time(A), dense.hitting_time(A)),
            ]
        t_exact = dense.mixing_time(0.25)
        t_op = op.mixing_time(0.25)
        lo = -np.inf if t_op.lower is None else t_op.lower
        hi = np.inf if t_op.upper is None else t_op.upper
        inside = t_exact.value is None or lo <= float(t_exact.value) <= hi
        return verdict(*parts, conditions={"dense t_mix(1/4) inside the operator's certified interval": inside},
                       t_mix_dense=t_exact.value, t_mix_operator=[t_op.lower, t_op.upper],
                       gap=float(dense.additive_gap.value) if dense.additive_gap.resolved else None)
