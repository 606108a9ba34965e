"""The schedule-theory checks (verify/theorems/decoding_theory.py): each holds, each is caught when its bound is
weakened by half and by 1%, the copy law attains the sharp bound to 1e-12, and each planted bug is found."""

from __future__ import annotations

import math

import pytest

from mlmix.theory.kernels import schedule_kl as skl
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems import decoding_theory as DT
from mlmix.verify.verdicts import REGISTRY, UNCHECKED, search

load_theorems()
IDS = ("samplers.schedule-identity", "samplers.schedule-sharp-bound", "samplers.schedule-optimum")
#: Every decoder-theory check: the schedule theory and those of tests/verify/test_decoder_errors.py.
CHECKED = (*IDS, "samplers.parallelbench.thm1", "samplers.eb-decomposition")


def test_registered_with_the_unconfirmed_results_listed():
    assert set(IDS) <= set(REGISTRY)
    for tid in ("samplers.demask.thm1", "samplers.zhang.constructions", "samplers.li-cai.thm2", "samplers.li-cai"):
        assert tid in UNCHECKED and UNCHECKED[tid].reason


@pytest.mark.parametrize("theorem_id", CHECKED)
def test_holds_and_weakened_is_caught(theorem_id):
    report = search(REGISTRY[theorem_id], examples=20, seed=3)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", report.weakened_parts
    assert not report.blind_spots and not report.errors
    assert report.nontrivial >= report.examples // 3


@pytest.mark.parametrize("theorem_id", CHECKED)
def test_weakened_by_one_percent_fails(theorem_id):
    assert search(REGISTRY[theorem_id], examples=20, seed=4, weaken=0.99).status == "fails"


@pytest.mark.parametrize("q, n, sizes", [(3, 4, (3, 1)), (2, 5, (2, 2, 1)), (4, 3, (2, 1))])
def test_copy_law_attains_the_sharp_bound_in_the_check(q, n, sizes):
    v = REGISTRY["samplers.schedule-sharp-bound"].check((DT.copy_law(q, n), sizes))
    p = v.parts[0]
    assert abs(p.lhs - (max(sizes) - 1) * math.log(q)) <= 1e-12 and abs(p.lhs - p.rhs) <= 1e-12
    assert not v.weakened_holds(0.99)


def test_planted_bugs_are_caught(monkeypatch):
    """The four mutants of theory/kernels/mutants.toml, planted by hand: a check fails or the copy law is looser."""
    inst = DT.copy_law(3, 4)
    real_cost, real_bound = skl.block_cost, skl.sharp_bound
    monkeypatch.setattr(skl, "block_cost", lambda h, r, k: float(sum(h[r] - h[r + j] for j in range(2, k))))
    assert not REGISTRY["samplers.schedule-identity"].check((inst, (3, 1))).holds
    monkeypatch.setattr(skl, "block_cost", real_cost)

    def looser(curve, sizes):
        r = real_bound(curve, sizes)
        return skl.Result.checked(r.name, r.value * max(sizes) / (max(sizes) - 1), 0.0, r.method)
    monkeypatch.setattr(skl, "sharp_bound", looser)
    v = REGISTRY["samplers.schedule-sharp-bound"].check((inst, (3, 1)))
    assert REGISTRY["samplers.schedule-sharp-bound"].attaining[0].looser(v)
