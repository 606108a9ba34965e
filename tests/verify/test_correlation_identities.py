"""``engine.correlation-identities``: the time correlations, relaxation, mu P^t and expected counts against numpy's
matrix powers hold on Glauber chains (non-reversible and metastable ones included) and the check fails when its
right-hand sides are weakened by 1%."""

from mlmix.verify.runner import load_theorems
from mlmix.verify.verdicts import REGISTRY, search

load_theorems()


def test_holds_and_weakened_is_caught():
    report = search(REGISTRY["engine.correlation-identities"], examples=20, seed=3)
    assert report.status == "holds", report.counterexample
    assert report.weakened == "caught", report.weakened_parts


def test_weakened_by_one_percent_fails():
    assert search(REGISTRY["engine.correlation-identities"], examples=10, seed=5, weaken=0.99).status == "fails"
