"""``engine.sensitivities``: the derivatives of pi, q+ and E tau against 60+ digit central differences hold on
its search (Glauber and metastable chains) and fail when the stated bounds are weakened, or when the engine's
derivative is off by 1%."""

import numpy as np

from mlmix.theory.chain.markov_chain import Chain
from mlmix.verify.runner import load_theorems
from mlmix.verify.verdicts import REGISTRY, search

load_theorems()


def test_holds_and_its_weakened_bound_is_caught():
    report = search(REGISTRY["engine.sensitivities"], examples=15, seed=3)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", report.weakened_parts


def test_a_derivative_one_percent_off_fails(monkeypatch):
    check = REGISTRY["engine.sensitivities"]
    true = Chain.stationary_sensitivity

    def off(self, E=None):
        r = true(self, E)
        return type(r)(r.name, np.asarray(r.value) * 1.01, r.method, r.rel_error, r.abs_error, r.residual,
                       r.log_value, dict(r.details))

    monkeypatch.setattr(Chain, "stationary_sensitivity", off)
    report = search(check, examples=5, seed=3)
    assert report.status != "holds"
