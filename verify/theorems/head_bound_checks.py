"""The LayerNorm head bound of a masked LM (:mod:`mlmix.empirical.model_constants.head_bound`) held
against the enumerated suprema (paper key ``constants``).

``constants.head-bound``: H = 2 sqrt(d) max_{a,b} ||P0(gamma o (W_a - W_b))||, read off the weights, is at least
every Delta_ij enumerated over every context of a tiny random BERT / RoBERTa / ModernBERT (theory/local's exact
pass on the queried table, within the stated float32 accuracy of its scores); so are (n - 1) H / 4 >= T*
(Cor. 7), tanh(H / 4T) >= rho_ij (Lemma 6) and the ellipsoid bound of rho_ij (``influence_upper``), and
certify's bounds route (no context enumerated) brackets Delta, T* and rho with them. Half the instances are steered (:func:`steer_head`): the head's dense layer is
rewritten so that two contexts attain H, so a bound weakened by 1% (or x1/2) fails there, and a condition
asks that the enumerated Delta_ij reach 99% of H (a loosened bound fails it); half of those have two letters
at T = 200 H, where the ellipsoid bound of rho_ij is attained (the same two conditions for it).
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict
from typing import Any

import numpy as np
from hypothesis import strategies as st

from mlmix.empirical.model_constants.certify import certify
from mlmix.empirical.model_constants.head_bound import (
    HeadParts,
    head_parts,
    influence_upper,
    oscillation_bound,
    source_head_bound,
)
from mlmix.verify import instances as S
from mlmix.verify.mlm_instances import WORDS, masked_lm_source, model_specs
from mlmix.verify.theorems.certified_constants import PAPER, Case, enumerated
from mlmix.verify.verdicts import Theorem, Verdict, part, register, verdict

#: Steered instances must reach this fraction of H (they attain it up to the LayerNorm's eps and float32).
ATTAINED = 0.99

_DENSE = {"BertForMaskedLM": "cls.predictions.transform.dense", "RobertaForMaskedLM": "lm_head.dense",
          "ModernBertForMaskedLM": "head.dense"}


def _gelu_inverse(t: Any) -> Any:
    """z >= 0 with gelu(z) = t, for t >= 0 (float64 bisection: the exact erf GELU is increasing there)."""
    # deferred: torch loads only when a model check runs
    import torch

    lo, hi = torch.zeros_like(t), t + 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        below = torch.nn.functional.gelu(mid) < t
        lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
    return (lo + hi) / 2


def steer_head(model: Any, inputs: Any, position: int, alphabet_ids: Any) -> Any:
    """A copy of ``model`` (BERT, RoBERTa or ModernBERT with an exact-GELU head) whose head attains H between the
    two inputs ``inputs`` (2, L) at ``position``: with v = P0(gamma o (W_a - W_b)) for the pair (a, b) of H, its
    dense layer is rewritten (least squares through the two head inputs, bias 0) so that gelu(dense(h)) is
    C 1 + s v at the first input and C 1 - s v at the second; the LayerNorm then outputs +-sqrt(d) v / ||v||
    (up to eps) and (l_a - l_b) changes by H. Returned in the model's own dtype, eval mode."""
    # deferred: torch loads only when a model check runs
    import torch

    steered = copy.deepcopy(model).double().eval()
    parts = head_parts(steered, alphabet_ids)
    a, b = oscillation_bound(parts).pair
    w = parts.gamma * (parts.rows[a] - parts.rows[b])
    v = torch.tensor(w - w.mean())
    v = v * (10.0 * math.sqrt(v.numel()) / float(v.norm()))  # variance 100: far above any eps
    dense = steered
    for name in _DENSE[type(model).__name__].split("."):
        dense = getattr(dense, name)
    with torch.no_grad():
        h = steered.base_model(input_ids=torch.as_tensor(inputs))[0][:, position]  # (2, d)
        C = 2 * float(v.abs().max()) + 1.0
        z = torch.stack([_gelu_inverse(C + v), _gelu_inverse(C - v)])  # (2, d)
        dense.weight.copy_(torch.linalg.lstsq(h, z).solution.T)
        if dense.bias is not None:
            dense.bias.zero_()
    return steered.to(next(model.parameters()).dtype)


def steered_source(source: Any, candidates: str) -> Any:
    """A MaskedLMConditionals like ``source`` (same tokenizer, frame and temperature, alphabet ``candidates``)
    whose model is steered (:func:`steer_head`) between the contexts (a, a, ..., a) and (a, b, a, ..., a) at
    site 0 (masked): they differ at site 1 only."""
    # deferred: torch loads only when a model check runs
    import torch

    from mlmix.empirical.models.mlm import MaskedLMConditionals

    n = source.space.length
    symbols = torch.zeros((2, n), dtype=torch.long)
    symbols[1, 1] = 1
    ids = source.token_ids(symbols).clone()
    position = int(source.slots[0])
    ids[:, position] = source.mask_id
    model = steer_head(source.model, ids, position, np.asarray(source.support_ids))
    return MaskedLMConditionals(model, source.tokenizer, n, candidates=candidates, device="cpu",
                                temperature=source.temperature)


def leading_letter_head(lead: float = 30.0) -> HeadParts:
    """Three letters, the first ahead of the others by ``lead`` at every context (its decoder row is 0, the other
    two move by +-1 against each other): the ellipsoid bound with the plain pi_v rises with T from about e^-lead,
    so only its monotone envelope may serve a bisection on T."""
    rows = np.array([[0.0, 0.0], [1.0, -1.0], [-1.0, 1.0]]) / 2
    return HeadParts(np.ones(2), rows, False, "built", np.array([lead, 0.0, 0.0]), np.zeros(3))


def envelope_margin(parts: HeadParts, temperature: float = 1.0) -> tuple[float, float]:
    """(the envelope at T, the largest pointwise ellipsoid bound at 60 temperatures from T to 1000 T): the first
    must be at least the second (the envelope bounds sup_{T' >= T})."""
    grid = np.geomspace(temperature, 1000 * temperature, 60)
    return (influence_upper(parts, temperature, monotone=True),
            max(influence_upper(parts, float(T)) for T in grid))


@st.composite
def head_bound_cases(draw) -> Case:
    """A tiny masked LM (n in 2..3, |V| in 2..4, T drawn), steered half the time; half the steered ones with two
    letters at T = 200 H."""
    spec = draw(model_specs(layers=(1,)))
    n, q = draw(st.integers(2, 3)), draw(st.integers(2, 4))
    T = draw(S.temperatures(0.1, 20.0))
    steered, hot = draw(st.booleans()), draw(st.booleans())
    q = 2 if steered and hot else q
    source = masked_lm_source(spec, n, q, T)
    if steered:
        source = steered_source(source, " ".join(WORDS[:q]))
        if hot:  # T = 200 H: the two logits stay near equal and the ellipsoid rho bound is attained
            source = source.at_temperature(200 * source_head_bound(source).delta)
    return Case(S.Instance(source, "tiny-mlm", asdict(spec)), {"steered": steered, "hot": steered and hot})


@register
class HeadBound(Theorem):
    id = "constants.head-bound"
    paper = PAPER
    number = "The LayerNorm head bound H >= Delta_ij at every n (head_bound)"
    statement = ("for a masked LM whose logits are an affine map of a LayerNorm output u (||u|| <= sqrt(d), sum u = 0), "
                 "every Delta_ij over every context is at most H = 2 sqrt(d) max_{a,b} ||P0(gamma o (W_a - W_b))||; "
                 "so T* <= (n - 1) H / 4 (Cor. 7) and rho_ij <= tanh(H / 4T) (Lemma 6), and certify's bounds route "
                 "brackets Delta, T* and rho with them")
    budget = 0.15

    def strategy(self) -> st.SearchStrategy:
        return head_bound_cases()

    def check(self, case: Case) -> Verdict:
        source = case.source
        H = source_head_bound(source).delta
        truth = enumerated(source)
        rel, osc, tv = truth.rel, truth.osc_atol(), truth.tv_atol()
        n, T = source.space.length, source.temperature
        delta_max = float(truth.delta_ij.max())
        cert = certify(source, max_passes=1, use_cache=False, log=lambda _: None)
        rho_bound = influence_upper(head_parts(source.model, np.asarray(source.support_ids)), T)
        rho_max = float(truth.rho_ij.max())
        parts = [part("H >= the largest enumerated Delta_ij", H, delta_max, ">=", rel, osc),
                 part("(n - 1) H / 4 >= enumerated T* (Cor. 7)", (n - 1) * H / 4, truth.t_star, ">=", rel, n * osc / 4),
                 part("tanh(H / 4T) >= the largest enumerated rho_ij (Lemma 6)", math.tanh(H / (4 * T)),
                      float(truth.rho_ij.max()), ">=", rel, tv),
                 part("the ellipsoid bound >= the largest enumerated rho_ij", rho_bound, rho_max, ">=", rel, tv),
                 part("certify's Delta upper end (head bound) >= enumerated Delta", cert.delta.upper,
                      4 * truth.t_star, ">=", rel, n * osc),
                 part("certify's rho upper end >= enumerated rho", cert.rho.upper, truth.rho, ">=", rel, n * tv)]
        t5 = cert.threshold["temperature"]
        if t5 is not None and t5 > 0:  # Theorem 5's threshold (Lemma 6 and the ellipsoid envelope): rho < 1 there
            hot = enumerated(source.at_temperature(t5))
            parts.append(part("1 >= the enumerated rho at Theorem 5's certified threshold", 1.0, hot.rho, ">=", rel,
                              n * hot.tv_atol()))
        envelope, pointwise = envelope_margin(leading_letter_head())  # equal by construction: a certificate
        conditions = {"certify's bounds route used the head bound": "LayerNorm head bound" in cert.method,
                      "the ellipsoid envelope at T = 1 >= the pointwise bound at every T' >= 1 (a head whose bound "
                      "rises with T)": envelope >= pointwise * (1 - 1e-12)}
        if case.options["steered"]:
            conditions[f"the steered model attains H within {1 - ATTAINED:.0%}"] = delta_max >= ATTAINED * H
        if case.options["hot"]:
            conditions[f"at T = 200 H it attains the ellipsoid rho bound within {1 - ATTAINED:.0%}"] = (
                rho_max >= ATTAINED * rho_bound)
        return verdict(*parts, conditions=conditions, H=H, attained=delta_max / H if H > 0 else None)
