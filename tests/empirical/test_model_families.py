"""The registry of model families (mlmix.empirical.models.families.MODELS): a name is loaded by the first
family that recognises it, so a throw-away family registered with one line is recognised by all three
commands that read a model (estimate --model, exact --mlm, verify --mlm); the built-in families keep
SCEPTR and Hugging Face names apart."""

import json

import pytest
from mlm_fixtures import tiny_masked_lm

from mlmix.cli import main
from mlmix.commands.source_options import masked_lm_class
from mlmix.empirical.models import families
from mlmix.empirical.models.families import MODELS, ModelFamily, family_of
from mlmix.empirical.models.mlm import MaskedLMConditionals

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
