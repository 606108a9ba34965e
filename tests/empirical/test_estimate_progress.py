"""``estimate()`` in Python says what it is doing: the cost line of its forward passes before the first,
then a count with an ETA (one line per tenth in a log), quiet when short or with progress=False."""

import numpy as np
import pytest
from mlm_fixtures import tiny_masked_lm

from mlmix import progress
from mlmix.empirical.model_constants.estimated_constants import estimate
from mlmix.empirical.models.mlm import MaskedLMConditionals


@pytest.fixture(scope="module")
def mlm():
    model, tok = tiny_masked_lm("bert", seed=11)
    return MaskedLMConditionals(model, tok, 3, device="cpu")


def _said(monkeypatch, threshold: str) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(progress, "write_stderr", said.append)
    monkeypatch.setattr(progress, "_interactive", lambda stream: False)
    monkeypatch.setenv(progress.THRESHOLD_ENV, threshold)
    return said


def test_cost_line_then_counted_passes(monkeypatch, mlm):
    said = _said(monkeypatch, "0")
    report = estimate(mlm, contexts=8, rectangles=4, exact=False, rate=1000.0)
    cost, *counts = said
    assert cost.startswith("mlmix: estimate: ") and "forward passes" in cost and "1,000 passes/s" in cost
    assert "for 8 contexts" in cost
    assert counts and counts[-1].startswith("mlmix: mlmix estimate: ") and "(100%)" in counts[-1]
    assert all("ETA" in line for line in counts)
    assert report["n_contexts"] == 8


def test_quiet_when_short_or_switched_off(monkeypatch, mlm):
    said = _said(monkeypatch, "1e9")
    estimate(mlm, contexts=4, rectangles=2, exact=False, rate=1000.0)
    estimate(mlm, contexts=4, rectangles=2, exact=False, progress=False)
    assert said == []


def test_without_a_rate_the_count_speaks_once_it_is_known_to_take_long(monkeypatch, mlm):
    """No pass is spent on measuring: the count's first line comes from the rate of the work itself,
    and only when the whole is then expected to take the threshold or more."""
    said = _said(monkeypatch, "0")
    estimate(mlm, contexts=2, rectangles=2, exact=False, state=np.array([0, 1, 0]))
    assert said and all(line.startswith("mlmix: mlmix estimate: ") and "ETA" in line for line in said)
    said.clear()
    monkeypatch.setenv(progress.THRESHOLD_ENV, "1e9")
    estimate(mlm, contexts=2, rectangles=2, exact=False)
    assert said == []
