"""The EB-sampler's law and the decoder error decompositions (verify/theorems/decoder_errors.py): the law against
closed forms and a reference pulled along each sequence's own path; each check is attained by the copy law to
1e-12 and catches the planted bugs of theory/kernels/mutants.toml (holding and being caught when weakened by 1%:
tests/verify/test_decoding_theory.py, with the schedule checks)."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from scipy.special import logsumexp

from mlmix.cli import main
from mlmix.theory.kernels import decoder_split as DS
from mlmix.theory.kernels import decoders as D
from mlmix.theory.sources.conditionals import LogWeightTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.verify import instances as S
from mlmix.verify.runner import load_theorems
from mlmix.verify.theorems import decoder_errors as DE
from mlmix.verify.verdicts import REGISTRY, UNCHECKED, search

load_theorems()
IDS = ("samplers.parallelbench.thm1", "samplers.eb-decomposition")


def _dirichlet(q: int, n: int, seed: int) -> tuple[S.Instance, np.ndarray]:
    p = np.random.default_rng(seed).dirichlet(np.ones(q**n))
    inst = S.Instance(LogWeightTable.from_probabilities(StateSpace(q, n), p), "dirichlet", {"seed": seed})
    return inst, p


def _pulled_eb_law(table: PartialScoreTable, gamma: float) -> np.ndarray:
    """log q_EB(x) for every x, following x's own path: at each step the rule on the entropies of the
    conditionals at the revealed values of x, then the drawn block's log-conditionals at x."""
    space = table.space
    n, q = space.length, space.vocab_size
    lp = D.partial_log_probs(table)
    place = (q + 1) ** np.arange(n - 1, -1, -1)
    out = np.empty(space.size)
    for idx, x in enumerate(space.all_states()):
        code, masked, total = lp.shape[0] - 1, list(range(n)), 0.0
        while masked:
            rows = lp[code]
            U = [masked[j] for j in D.entropy_bounded_block(D.conditional_entropies(rows[masked]), gamma)]
            total += sum(rows[i, x[i]] for i in U)
            code += sum((int(x[i]) - q) * int(place[i]) for i in U)
            masked = [i for i in masked if i not in U]
        out[idx] = total
    return out


@pytest.mark.parametrize("q, n, seed, gamma", [(2, 4, 0, 0.3), (3, 3, 1, 0.5), (3, 4, 2, 1.0), (2, 5, 3, 0.05)])
def test_eb_law_against_each_sequence_path(q, n, seed, gamma):
    for table in (PartialScoreTable.random(q, n, seed=seed), PartialScoreTable.from_joint(_dirichlet(q, n, seed)[0].source)):
        law = D.decoder_law(table, "entropy-bounded", gamma=gamma)
        ref = _pulled_eb_law(table, gamma)
        assert np.allclose(law.log_law, ref, rtol=0, atol=1e-12)
        assert abs(law.law.sum() - 1) <= 1e-12


def test_eb_gamma_zero_on_exact_conditionals_is_the_joint_and_large_gamma_the_product():
    """gamma = 0 unmasks one position at a time (entropies > 0): exact conditionals in any adaptive order give p;
    gamma above the total budget unmasks everything at once: the product of the marginals."""
    inst, p = _dirichlet(3, 4, 5)
    table = PartialScoreTable.from_joint(inst.source)
    assert np.abs(D.decoder_law(table, "entropy-bounded", gamma=0.0).law - p).max() <= 1e-14
    law = D.decoder_law(table, "entropy-bounded", gamma=100.0)
    P = p.reshape((3,) * 4)
    marg = [P.sum(axis=tuple(j for j in range(4) if j != i)) for i in range(4)]
    prod = np.array([math.prod(marg[i][x[i]] for i in range(4)) for x in product(range(3), repeat=4)])
    assert np.abs(law.law - prod).max() <= 1e-14 and law.steps == pytest.approx(1.0, abs=1e-14)


def test_eb_block_rule_by_hand():
    H = np.array([0.5, 0.125, 0.25, 0.125, 1.0])  # dyadic: the budgets 0, 1/8, 1/4, 1/2, 1 are exact
    assert list(D.entropy_bounded_block(H, 0.0)) == [1]  # 1/8 + 1/8 - 1/8 > 0
    assert list(D.entropy_bounded_block(H, 0.125)) == [1, 3]  # ties by position
    assert list(D.entropy_bounded_block(H, 0.3)) == [1, 3, 2]  # 1/2 - 1/4
    assert list(D.entropy_bounded_block(H, 0.5)) == [1, 3, 2, 0]  # 1 - 1/2, equal to gamma: kept
    assert list(D.entropy_bounded_block(H, 0.99)) == [1, 3, 2, 0]  # 2 - 1 > 0.99
    assert list(D.entropy_bounded_block(H, 1.0)) == [1, 3, 2, 0, 4]


def test_eb_bad_input():
    table = PartialScoreTable.random(2, 3, seed=0)
    with pytest.raises(ValueError, match="needs an entropy budget"):
        D.decoder_law(table, "entropy-bounded")
    with pytest.raises(ValueError):
        D.decoder_law(table, "entropy-bounded", gamma=-0.1)
    with pytest.raises(TypeError):
        D.decoder_law(table, "entropy-bounded", gamma="0.1")
    assert main(["decode", "--graph", "cycle:3", "--sampler", "entropy-bounded", "--gamma", "-1"]) == 2
    assert main(["decode", "--graph", "cycle:3", "--sampler", "entropy-bounded", "--gamma", "0.2", "--json"]) == 0


def test_registered_and_parallelbench_no_longer_unchecked():
    assert set(IDS) <= set(REGISTRY) and "samplers.parallelbench.thm1" not in UNCHECKED


def test_copy_law_attains_both_to_1e_12():
    v = REGISTRY["samplers.parallelbench.thm1"].check(REGISTRY["samplers.parallelbench.thm1"].attaining[0].build())
    assert all(abs(p.lhs - 2 * math.log(3)) <= 1e-12 and abs(p.rhs - 2 * math.log(3)) <= 1e-12 for p in v.parts)
    v = REGISTRY["samplers.eb-decomposition"].check(DE.copy_law_eb())
    assert all(abs(p.lhs - 3 * math.log(3)) <= 1e-12 and abs(p.rhs - 3 * math.log(3)) <= 1e-12 for p in v.parts)
    assert v.holds and not v.weakened_holds(0.99)


def test_decomposition_terms_by_hand():
    """Two independent sites and a copied pair: EB with gamma above log 2 takes the copied pair (entropy log 2 each)
    together: TC = log 2 exactly, and the budget sum H - max H = log 2."""
    w = np.zeros((2, 2, 2))
    w[0, 0, :] = w[1, 1, :] = 1.0  # sites 0 and 1 equal, site 2 independent, all uniform
    with np.errstate(divide="ignore"):
        logp = np.log(w / w.sum())
    table = PartialScoreTable.from_joint(S.Instance(
        LogWeightTable.from_probabilities(StateSpace(2, 3), (w / w.sum()).ravel()), "pair", {}).source)
    t = DS.entropy_bounded_terms(logp, D.partial_log_probs(table), 0.7)
    assert t["tc"] == pytest.approx(math.log(2), abs=1e-14) and t["model"] == pytest.approx(0.0, abs=1e-14)
    assert t["budget"] == pytest.approx(math.log(2), abs=1e-14) and t["lowest"] and t["maximal"]
    assert logsumexp(logp) == pytest.approx(0.0, abs=1e-15)


def test_planted_bugs_are_caught(monkeypatch):
    """The three EB mutants of theory/kernels/mutants.toml, planted by hand: the check fails on some instance."""
    th = REGISTRY["samplers.eb-decomposition"]
    real = D.entropy_bounded_block

    def cut(order, entropies, gamma, extra):
        e = entropies[order]
        over = np.flatnonzero(np.cumsum(e) - np.maximum.accumulate(e) > gamma)
        return order[:max(1, int(over[0]) + extra if over.size else e.size)]

    def one_past(entropies, gamma):
        return cut(np.argsort(entropies, kind="stable"), entropies, gamma, 1)

    def highest_first(entropies, gamma):
        return cut(np.argsort(-entropies, kind="stable"), entropies, gamma, 0)

    for bug in (one_past, highest_first):
        monkeypatch.setattr(D, "entropy_bounded_block", bug)
        monkeypatch.setattr(DS, "entropy_bounded_block", bug)
        assert search(th, examples=30, seed=5).status == "fails"
    monkeypatch.setattr(D, "entropy_bounded_block", real)
    monkeypatch.setattr(DS, "entropy_bounded_block", real)
    real_h = D.conditional_entropies
    monkeypatch.setattr(D, "conditional_entropies", lambda lp: -real_h(lp))
    monkeypatch.setattr(DS, "conditional_entropies", lambda lp: -real_h(lp))
    assert search(th, examples=30, seed=5).status == "fails"


def test_eb_reports_how_close_its_decisions_are():
    """A gamma 1e-13 above the copy law's first budget is decided at rounding level, and the label says so; a
    gamma far from every budget is not flagged."""
    inst, gamma, table, _ = DE.copy_law_eb()
    assert "decided as evaluated in float64" in D.decoder_law(table, "entropy-bounded", gamma=gamma).details["label"]
    label = D.decoder_law(table, "entropy-bounded", gamma=0.5).details["label"]
    assert "float64" not in label and "the closest decision is" in label


def test_one_parallel_step_against_mpmath():
    """On {0,1,2}^2 with integer weights and gamma above the first budget, the EB-sampler is one parallel step:
    KL(p || q_EB) = I(X_0; X_1), computed with mpmath at 50 digits from the weights."""
    import mpmath as mp

    mp.mp.dps = 50
    w = [[1, 2, 3], [4, 5, 6], [7, 8, 10]]
    Z = sum(map(sum, w))
    rows, cols = [mp.mpf(sum(r)) / Z for r in w], [mp.mpf(sum(w[i][j] for i in range(3))) / Z for j in range(3)]
    mi = mp.fsum(mp.mpf(w[i][j]) / Z * mp.log(mp.mpf(w[i][j]) / Z / (rows[i] * cols[j]))
                 for i in range(3) for j in range(3))
    p = np.array(w, dtype=float).ravel() / Z
    inst = S.Instance(LogWeightTable.from_probabilities(StateSpace(3, 2), p), "weights", {})
    table = PartialScoreTable.from_joint(inst.source)
    v = REGISTRY["samplers.eb-decomposition"].check((inst, 10.0, table, "p's exact conditionals"))
    assert v.holds and v.details["steps"] == pytest.approx(1.0, abs=1e-15)
    assert abs(v.parts[0].lhs - float(mi)) <= 1e-14 and abs(v.parts[0].rhs - float(mi)) <= 1e-14


def test_eb_split_against_the_check_and_on_incompatible_scores(capsys):
    """decoder_split of the entropy-bounded rule: against a joint p with p's conditionals at T = 1.25 its two parts
    are the check's (TC and model error), and on random scores against their Glauber law the identity holds."""
    from mlmix.theory.kernels.decoder_split import decoder_split

    inst, p = _dirichlet(3, 3, 7)
    exact = PartialScoreTable.from_joint(inst.source)
    table = PartialScoreTable(exact.space, exact.table, temperature=1.25)
    split = decoder_split(table, "entropy-bounded", p, 1e-15, gamma=0.4)
    v = REGISTRY["samplers.eb-decomposition"].check((inst, 0.4, table, "p's conditionals at T = 1.25"))
    assert split["kl"].value == pytest.approx(v.parts[0].lhs, abs=1e-12)
    parts = split["sampler"].details["computed"] + split["incompatibility"].details["computed"]
    assert parts == pytest.approx(v.parts[0].rhs, abs=1e-12)
    assert split["identity_residual"] <= 1e-12 and split["mixture_gain"].value == 0 and split["adaptive"]
    with pytest.raises(ValueError, match="needs an entropy budget"):
        decoder_split(table, "entropy-bounded", p, 1e-15)
    assert main(["decode", "--model", "scores", "--vocab", "3", "--length", "3", "--sampler", "entropy-bounded",
                 "--gamma", "0.5", "--split"]) == 0
    out = capsys.readouterr().out
    assert "one adaptive rule" in out and "identity residual" in out
