"""The sampler theorem checks (verify/theorems/sampler_laws.py): each search holds and its weakened bound
is caught; stored counterexamples fail; dropped hypotheses are found to matter."""

import numpy as np
import pytest

from mlmix.verify.runner import find_violation, load_theorems
from mlmix.verify.theorems import sampler_laws as SM
from mlmix.verify.verdicts import REGISTRY, UNCHECKED, search

load_theorems()
IDS = [i for i, t in REGISTRY.items() if t.paper == SM.PAPER]
#: Checked in tests/verify/test_sampler_checks_independent.py.
INDEPENDENT = {"samplers.systematic-sweep", "samplers.mh-energies", "samplers.decoder-sequential",
               "samplers.decoder-parallel", "samplers.truncation", "samplers.truncation-tails",
               "samplers.schedule-identity", "samplers.schedule-sharp-bound", "samplers.schedule-optimum"}


def test_registered():
    assert set(IDS) == {"samplers.chain-rule", "samplers.one-step-tc", "samplers.parallel-convexity",
                        "samplers.mh-reversible", "samplers.glauber-is-mh", "samplers.systematic-joint",
                        "samplers.fast-dllm.thm1", "samplers.systematic-sweep", "samplers.mh-energies",
                        "samplers.decoder-sequential", "samplers.decoder-parallel", "samplers.truncation",
                        "samplers.truncation-tails", "samplers.schedule-identity", "samplers.schedule-sharp-bound",
                        "samplers.schedule-optimum", "samplers.decoder-underflow", "samplers.parallelbench.thm1",
                        "samplers.eb-decomposition"}
    assert "samplers.li-cai" in UNCHECKED


@pytest.mark.parametrize("theorem_id", [i for i in IDS if i not in INDEPENDENT])
def test_holds_and_weakened_is_caught(theorem_id):
    report = search(REGISTRY[theorem_id], examples=25, seed=1)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", report.weakened_parts
    assert report.nontrivial >= report.examples // 3


def test_fast_dllm_counterexample_fails_as_documented():
    report = search(REGISTRY["samplers.fast-dllm.thm1"], examples=5, seed=0)
    assert report.stored and all(s["as_expected"] for s in report.stored), report.stored


@pytest.mark.parametrize("theorem_id", ["samplers.mh-reversible", "samplers.glauber-is-mh", "samplers.systematic-joint"])
def test_dropped_hypotheses_matter(theorem_id):
    theorem = REGISTRY[theorem_id]
    for v in theorem.violations:
        assert find_violation(theorem, v, examples=40) is not None


def test_parallel_schedules_are_the_ordered_partitions():
    s = SM.parallel_schedules(4, 2)
    assert len(s) == 6 and all(sorted(a + b) == [0, 1, 2, 3] for a, b in s)
    assert len(SM.parallel_schedules(3, 2)) == 3 and len(SM.parallel_schedules(5, 2)) == 10 * 3
    assert np.isclose(len(SM.parallel_schedules(4, 3)), 4)


def test_confidence_ties_between_rows_follow_the_position_rule():
    """A found counterexample: marginals of log weights with probabilities tied exactly across positions.
    Renormalising the decoder's log-probability rows moved one of two tied probabilities by an ulp and flipped
    the tie-break (confidence k = 1 off the reference by 33%); rows already normalised are now kept bit for bit."""
    from mlmix.theory.kernels.decoders import PartialScoreTable, decoder_law, partial_log_probs
    from mlmix.theory.sources.conditionals import LogWeightTable
    from mlmix.theory.sources.space import StateSpace
    from mlmix.verify.theorems.samplers_decoders import References

    lw = np.zeros(27)
    lw[20], lw[23], lw[25], lw[26] = 1.0, -0.5, -0.5, 0.5
    table = PartialScoreTable.from_joint(LogWeightTable(StateSpace(3, 3), lw))
    ref = References(table.space, table.partial_log_conditionals).confidence_one()
    law = decoder_law(table, "confidence", k=1, log_probs=partial_log_probs(table))
    assert np.abs(law.law / ref - 1).max() <= 1e-12
