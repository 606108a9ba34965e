"""Three planted bugs fail a named check of `mlmix verify` (exit 1), not only crash one (exit 3): the
matrix-free stationary certificate that stops verifying, a top-p that keeps nothing, and the certified d(t)
upper end without its sqrt((1 - pi_min) / pi_min) factor (their mutants are in the audit's mutants.toml)."""

import math

import numpy as np
import pytest

from mlmix.theory.chain import mixing, stationary
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.verify import instances as S
from mlmix.verify.theorems.intervals import MixingTimeEnds, weighted_case
from mlmix.verify.theorems.samplers_scan import _ratio_parts
from mlmix.verify.theorems.stationary_certificate import MatrixFreeCertificate


def _instance() -> S.Instance:
    return S.Instance(ScoreTable.random(3, 3, seed=1, temperature=1.0), "score-table", {"seed": 1})


def test_the_certificate_check_holds_and_fails_without_the_certificate(monkeypatch):
    theorem = MatrixFreeCertificate()
    assert theorem.hypotheses(_instance())
    good = theorem.check(_instance())
    assert good.holds and good.trivial is None
    monkeypatch.setattr(stationary, "certify_stationary", lambda op, pi: pi)  # the certificate never verifies
    bad = theorem.check(_instance())
    assert not bad.holds and bad.failing() == ["stationary law: operator (certified matrix-free) = dense GTH"]


def test_a_truncation_that_keeps_nothing_fails_the_part():
    parts, conditions = _ratio_parts("p", np.array([np.nan, 0.5]), np.array([0.5, 0.5]), 1e-12)
    assert not parts[0].holds() and math.isinf(parts[0].lhs)


def test_the_distance_upper_end_without_its_factor_fails_tmix_ends(monkeypatch):
    W = np.array([[9, 1], [3, 7]])  # pi = (3/4, 1/4): the factor is sqrt(3)
    assert MixingTimeEnds().check(weighted_case(W, 0.01, "two-state")).holds
    original = mixing.MixingBounds._closed_log_upper

    def without_factor(self, t):  # the planted bug: (1/2) rate^t, no sqrt((1 - pi_min) / pi_min)
        full = original(self, t)
        return full if not math.isfinite(full) else full - 0.5 * self._log_odds()

    monkeypatch.setattr(mixing.MixingBounds, "_closed_log_upper", without_factor)
    failed = MixingTimeEnds().check(weighted_case(W, 0.01, "two-state")).failing()
    assert any("d(t)" in name for name in failed)


if __name__ == "__main__":
    pytest.main([__file__])
