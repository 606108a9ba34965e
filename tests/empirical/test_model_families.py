"""The registry of model families (mlmix.empirical.models.families.MODELS): a name is loaded by the first
family that recognises it, so a throw-away family registered with one line is recognised by all three
commands that read a model (estimate --model, exact --mlm, verify --mlm); the built-in families keep
SCEPTR and Hugging Face names apart."""

import json

import pytest
import torch
from mlm_fixtures import tiny_masked_lm
from transformers import BertForMaskedLM

from mlmix.cli import main
from mlmix.commands.source_options import masked_lm_class
from mlmix.empirical.model_constants.constants_report import model_constants
from mlmix.empirical.model_constants.head_bound import HeadNotNormalised, head_parts, source_head_bound
from mlmix.empirical.model_constants.relaxation import _check_model
from mlmix.empirical.models import families
from mlmix.empirical.models.families import HF_HEADS, MODELS, HeadAdapter, ModelFamily, family_of, head_adapter
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.empirical.models.tabulate import weights_hash

LOADED: list[str] = []


class Throwaway(MaskedLMConditionals):
    """A family of one tiny random BERT, whatever the name after ``throwaway:``."""

    @classmethod
    def from_pretrained(cls, name, length=None, *, trust_remote_code=False, allow_pickle=False, **kwargs):
        LOADED.append(str(name))
        model, tok = tiny_masked_lm("bert", seed=3)
        return cls(model, tok, length, **kwargs)


@pytest.fixture
def registered(monkeypatch, tmp_path):
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    family = ModelFamily("throwaway", lambda name: name.startswith("throwaway:"), Throwaway)
    monkeypatch.setattr(families, "MODELS", {"throwaway": family, **MODELS})  # one registry line
    LOADED.clear()


def test_the_built_in_families_and_their_order():
    assert list(MODELS)[-1] == "hugging-face" and family_of("sceptr:tiny").name == "sceptr"
    assert family_of("bert-base-uncased").name == "hugging-face"
    assert masked_lm_class("./some-folder") is MaskedLMConditionals
    assert all(f.bound_adapter is None for f in MODELS.values())


@pytest.mark.parametrize("command", [
    ["estimate", "--model", "throwaway:a", "--contexts", "2", "--rectangles", "2", "--certify"],
    ["exact", "--mlm", "throwaway:a"],
    ["verify", "--mlm", "throwaway:a"],
])
def test_a_registered_family_is_recognised_by_every_command(registered, capsys, command):
    code = main([*command, "--frame", "_ _ a", "--candidates", "a b", "--json", "--no-progress"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert LOADED == ["throwaway:a"] and json.loads(out.out)


class TinyBert(BertForMaskedLM):
    """A network class no family knows until one registers its head adapter."""


IDENTITIES: list[str] = []


def tiny_identity(model) -> str:
    IDENTITIES.append(type(model).__name__)
    return "tiny-" + weights_hash(model)


class TinyBertSource(MaskedLMConditionals):
    """Loads a TinyBert (the weights of a tiny random BERT) for any ``tinybert:`` name."""

    @classmethod
    def from_pretrained(cls, name, length=None, *, trust_remote_code=False, allow_pickle=False, **kwargs):
        LOADED.append(str(name))
        model, tok = tiny_masked_lm("bert", seed=4)
        tiny = TinyBert(model.config).eval()
        tiny.load_state_dict(model.state_dict())
        return cls(tiny, tok, length, **kwargs)


def tinybert_family() -> ModelFamily:
    adapter = HeadAdapter("cls", "cls.predictions.transform.LayerNorm", "cls.predictions.decoder", relaxation="bert")
    return ModelFamily("tinybert", lambda name: name.startswith("tinybert:"), TinyBertSource,
                       heads={"TinyBert": adapter}, cache_identity=tiny_identity)


def test_an_unregistered_network_class_has_no_head_and_no_head_bound():
    model, _ = tiny_masked_lm("bert", seed=4)
    tiny = TinyBert(model.config)
    assert head_adapter(tiny) is None and head_adapter(model) is HF_HEADS["BertForMaskedLM"]
    with pytest.raises(HeadNotNormalised, match="TinyBert's head is not known"):
        head_parts(tiny, [5, 6])
    with pytest.raises(ValueError, match="got TinyBert"):
        _check_model(tiny)


def test_a_registered_network_class_is_recognised_loaded_and_bounded(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(families, "MODELS", {"tinybert": tinybert_family(), **MODELS})  # one registry line
    LOADED.clear()
    IDENTITIES.clear()
    source = TinyBertSource.from_pretrained("tinybert:x", 3, candidates="a b c", device="cpu")
    assert source._head is source.model.cls  # the registered head, not the full forward pass
    direct = source.model(input_ids=source.token_ids(torch.zeros((1, 3), dtype=torch.long))).logits
    assert torch.isfinite(direct).all()
    H = source_head_bound(source).delta
    report = model_constants(source, how="bounds", max_passes=0, budget=None, folder=None)
    assert report.passes == 0 and "LayerNorm head bound" in report.method
    assert report.delta.upper == pytest.approx(2 * H, rel=1e-12) and report.threshold["temperature"] is not None
    assert _check_model(source.model) == "bert"  # the affine relaxation's network, from the adapter
    code = main(["exact", "--mlm", "tinybert:y", "--frame", "_ _ a", "--candidates", "a b", "--json", "--no-progress"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert LOADED[-1] == "tinybert:y" and "TinyBert" in IDENTITIES  # the cache is keyed by the family's identity
    assert json.loads(out.out)["model_constants"]["theorem5_threshold"]["temperature"] is not None
