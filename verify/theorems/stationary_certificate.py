"""The matrix-free stationary law's entrywise certificate, held against the dense GTH law (paper key ``engine``).

On a non-reversible kernel the operator chain solves pi (I - P) = 0 by GMRES and certifies every entry by
the M-matrix supersolution argument applied matrix-free (:func:`~mlmix.theory.chain.stationary.certify_stationary`:
A = I - P^T grounded at the heaviest state, A v computed as v - P^T v, i.e. the kernel applied to measures).
Where that certificate does not verify, the chain falls back to a first-order bound that is still right, so a
certificate that silently stopped verifying (applying P where P^T belongs, for instance) passes every
comparison of numbers. This check asks for the certificate itself, on chains where it has no reason to fail:
incompatible sources (a non-reversible Glauber chain) of at most 81 states with spread/T <= 8, whose dense
GTH law is certified entrywise to 1e-9 and whose additive gap is at least 1e-3. There the matrix-free law
must carry the certificate (its method says so) and agree entrywise with the dense law within the two
certified bounds; a law without it compares as +inf (fails).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from mlmix.errors import ConvergenceError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.verify import instances as S
from mlmix.verify.verdicts import Applicability, Part, Theorem, Verdict, register, verdict

#: Largest chain compared (dense GTH beside the operator; n = 4 sites at |V| = 3).
MAX_STATES = 81

#: Largest score spread over the temperature: beyond it the law's smallest entries leave what GMRES resolves.
MAX_RATIO = 8.0

#: The method text of a law certified by the matrix-free supersolution.
CERTIFIED = "a-posteriori certificate (M-matrix supersolution, matrix-free)"

#: Unit roundoff.
U = float(np.finfo(float).eps) / 2


@register
class MatrixFreeCertificate(Theorem):
    id = "engine.stationary-certificate"
    paper = "engine"
    number = "Matrix-free entrywise certificate of a non-reversible stationary law"
    statement = ("on a non-reversible Glauber chain of at most 81 states with spread/T <= 8, additive gap >= 1e-3 and "
                 "a dense GTH law certified to 1e-9, the operator chain's stationary law carries the matrix-free "
                 "M-matrix supersolution certificate and max_x |pi_op(x) - pi_dense(x)| lies within the two "
                 "certified entrywise bounds")
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return S.instances(S.incompatible_sources(MAX_STATES), MAX_STATES, MAX_RATIO)

    def hypotheses(self, instance: S.Instance) -> Applicability:
        ok = bool(np.isfinite(S.score_table(instance.source)).all())
        return Applicability(ok, "" if ok else "zero conditionals: the operator needs positive conditionals")

    def check(self, instance: S.Instance) -> Verdict:
        name = "stationary law: operator (certified matrix-free) = dense GTH"
        dense = Chain.from_source(instance.source, representation="dense")
        if dense.is_reversible:
            return verdict(Part(name, 1.0, 1.0, "==", ratio=False),
                           trivial="a reversible chain: the operator's law is exact from the joint, no certificate")
        law, gap = dense.stationary, dense.additive_gap
        if law.rel_error is None or law.rel_error > 1e-9 or gap.lower is None or gap.lower < 1e-3:
            return verdict(Part(name, 1.0, 1.0, "==", ratio=False),
                           trivial="outside the regime: the dense law or the gap is not well conditioned")
        try:
            op = Chain.from_source(instance.source, representation="operator").stationary
        except ConvergenceError as err:  # GMRES said plainly that it could not solve: no law to certify
            return verdict(Part(name, math.inf, 0.0, "==", ratio=False), gmres=str(err))
        pd, po = np.asarray(law.value, dtype=float), np.asarray(op.value, dtype=float)
        if CERTIFIED not in op.method or op.rel_error is None:
            return verdict(Part(name, math.inf, 0.0, "==", ratio=False), method=op.method)
        ed = pd * law.rel_error + 4 * U * pd
        eo = po * op.rel_error + 4 * U * po
        k = int(np.argmax(np.abs(po - pd) / (ed + eo)))
        return verdict(Part(name, float(po[k]), float(pd[k]), "==", float(eo[k]), float(ed[k]), False),
                       certificate=op.rel_error, dense_rel_error=law.rel_error, additive_gap_lower=gap.lower)
