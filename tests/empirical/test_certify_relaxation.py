"""certify() with the relaxation hook: where the relaxation holds (BERT's own initialisation, one layer)
the bracket's upper end of rho comes below the trivial n - 1, still contains the enumerated rho, and
the verdict follows it; where it is vacuous or the model is not a BERT the hook steps aside."""

import numpy as np
import pytest
import torch
from mlm_fixtures import WORDS, tiny_masked_lm
from transformers import BertConfig, BertForMaskedLM

from mlmix.empirical.model_constants.certify import certify
from mlmix.empirical.model_constants.relaxation import certify_relaxation, source_influence_row, source_influence_upper
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.local.influence import influence_matrix


def _source(kind: str, temperature: float = 1.0) -> MaskedLMConditionals:
    model, tok = tiny_masked_lm(hidden=16, layers=2, seed=1)
    if kind == "default":
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=16))
    return MaskedLMConditionals(model.eval(), tok, 3, candidates=" ".join(WORDS), device="cpu",
                                temperature=temperature)


def test_the_relaxation_gives_an_upper_end_that_contains_the_exact_rho():
    source = _source("default")
    exact = influence_matrix(source)
    cert = certify(source, max_passes=30, relaxation=certify_relaxation, use_cache=False)  # too few to enumerate
    rho = cert.rho
    assert rho.value is None and "relaxation" in rho.method
    assert rho.lower <= exact.rho <= rho.upper < 1.0 < source.space.length - 1
    assert cert.theorem5["verdict"] == "applies"  # certified: upper rho < 1


def test_without_the_relaxation_the_upper_end_is_trivial():
    cert = certify(_source("default"), max_passes=30, use_cache=False, relaxation=None, head_bound=None)
    assert cert.rho.upper == pytest.approx(2.0) and cert.theorem5["verdict"] == "undecided"


def test_the_hook_steps_aside_where_it_is_vacuous():
    assert certify_relaxation(_source("spread")) is None  # large weights: vacuous beyond one token
    assert certify_relaxation(np.zeros(3)) is None


def test_the_search_hook_gives_attained_lower_ends_within_the_exact_rho():
    """certify with the worst-context search (the hook mlmix estimate --certify uses): every lower end is
    attained by an evaluated pair, so it never exceeds the enumerated rho_ij; the witnesses are JSON."""
    import json

    from mlmix.empirical.model_constants.context_search import search_lower_bounds

    source = _source("spread", temperature=2.0)
    exact = influence_matrix(source)
    cert = certify(source, max_passes=40, lower_bounds=search_lower_bounds, use_cache=False)
    assert "worst-context search" in cert.rho.method and 0 < cert.passes <= 40
    assert 0 < cert.rho.lower <= exact.rho * (1 + 1e-6)
    json.dumps(cert.as_dict(), default=str)


def test_one_propagation_per_site_gives_the_pairwise_bounds():
    source = _source("default")
    for i in range(3):
        row = source_influence_row(source, i)
        assert row[i] == 0.0
        assert all(row[j] == source_influence_upper(source, i, j) for j in range(3) if j != i)


@pytest.mark.parametrize("width, fresh", [(32, "FRESH"), (160, 0)])
def test_fresh_symbols_only_on_models_narrow_enough_for_them_to_pay(monkeypatch, width, fresh):
    import mlmix.empirical.model_constants.relaxation as rx

    torch.manual_seed(0)
    _, tok = tiny_masked_lm(hidden=16, layers=1, seed=1)
    model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=width, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64, max_position_embeddings=16))
    source = MaskedLMConditionals(model.eval(), tok, 2, candidates=" ".join(WORDS[:2]), device="cpu")
    seen = []
    monkeypatch.setattr(rx, "source_influence_row", lambda src, i, fresh=None: seen.append(fresh) or np.zeros(2))
    assert certify_relaxation(source) is not None
    assert seen == [rx.FRESH if fresh == "FRESH" else 0] * 2
