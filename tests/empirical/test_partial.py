"""Partial conditionals of a masked LM (mlmix.empirical.models.partial_tables): the table against plain forward
passes with [MASK] placed by hand, the Glauber table recovered bit for bit, the cache, resuming, the
cost cap, and `mlmix decode --mlm`."""

import json
from itertools import product

import numpy as np
import pytest
import torch
from mlm_fixtures import save_model, tiny_masked_lm

from mlmix.cli import main
from mlmix.empirical.models import partial_tables as pt
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.progress import Counter
from mlmix.theory.kernels.decoders import decoder_law

FRAME, LETTERS = "c _ ! _ _", ["a", "b", "c", "!"]


@pytest.fixture()
def tiny():
    return tiny_masked_lm("bert", seed=13)


@pytest.fixture()
def mlm(tiny):
    model, tok = tiny
    return MaskedLMConditionals(model, tok, frame=FRAME, candidates=" ".join(LETTERS), device="cpu", temperature=0.9)


def plain_scores(model, tok, x: tuple, site: int) -> np.ndarray:
    """The frame's text with x filled in ("[MASK]" where x is masked and at the site), tokenized, one pass."""
    pieces = FRAME.split()
    free = [k for k, p in enumerate(pieces) if p == "_"]
    words = list(pieces)
    for i, (k, v) in enumerate(zip(free, x)):
        words[k] = "[MASK]" if v == len(LETTERS) or i == site else LETTERS[v]
    enc = tok(" ".join(words), return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0, 1 + free[site]]
    return logits[tok.convert_tokens_to_ids(LETTERS)].double().numpy()


def test_partial_table_equals_plain_forward_passes(tiny, mlm, tmp_path):
    model, tok = tiny
    t = pt.tabulate_partial(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    q, n = 4, 3
    assert t.table.shape == (n, (q + 1) ** (n - 1), q) and t.temperature == 0.9
    worst = 0.0
    for x in product(range(q + 1), repeat=n):
        for i in range(n):
            worst = max(worst, np.abs(t.partial_scores(np.array([x]), i)[0] - plain_scores(model, tok, x, i)).max())
    assert worst < 1e-5
    full = tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    np.testing.assert_array_equal(t.full_table().table, full.table)  # same code path, same numbers
    assert decoder_law(t, "parallel", k=2).law.sum() == pytest.approx(1, abs=1e-14)


def test_cache_resume_and_cap(mlm, tmp_path, monkeypatch):
    monkeypatch.setattr(tab, "MIN_CHUNK_ROWS", 10)
    monkeypatch.setattr(tab, "CHUNK_SECONDS", 1e-9)
    ref = pt.tabulate_partial(mlm, use_cache=False, progress=False, log=lambda _: None)
    original, calls = mlm.masked_logits_torch, []

    def failing(ids, pos):
        calls.append(ids.shape[0])
        if len(calls) == 5:  # two rate measurements, two chunks, then an interruption
            raise KeyboardInterrupt
        return original(ids, pos)

    monkeypatch.setattr(mlm, "masked_logits_torch", failing)
    with pytest.raises(KeyboardInterrupt):
        pt.tabulate_partial(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    folder = next(tmp_path.glob("*.partial"))
    assert len(list(folder.glob("chunk-*"))) == 2
    calls.clear()
    monkeypatch.setattr(mlm, "masked_logits_torch", lambda ids, pos: (calls.append(ids.shape[0]), original(ids, pos))[1])
    resumed = pt.tabulate_partial(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert sum(calls) == 2 * 32 + (75 - 20)  # the rate measurement and only the missing chunks
    np.testing.assert_array_equal(resumed.table, ref.table)
    calls.clear()
    notes = []
    again = pt.tabulate_partial(mlm.at_temperature(2.0), cache_dir=tmp_path, progress=False, log=notes.append)
    assert sum(calls) == 0 and "read from the cache" in notes[0] and again.temperature == 2.0
    with pytest.raises(ValueError, match="needs 75 masked forward passes"):
        pt.tabulate_partial(mlm, cache_dir=tmp_path / "other", max_passes=74, progress=False, log=lambda _: None)


def test_decode_cli_on_a_masked_lm(tmp_path, capsys):
    model, tok = tiny_masked_lm("roberta", seed=3)
    folder = save_model(model, tok, tmp_path / "rb")
    args = ["decode", "--mlm", str(folder), "--frame", "a _ _ !", "--candidates", "a b c", "--sampler", "confidence",
            "--k", "1", "--json", "--law", "--no-progress", "--save-scores", str(tmp_path / "s.npz")]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert "frame 'a _ _ !'" in out["source"] and len(out["law"]) == 9
    assert main(["decode", "--scores", str(tmp_path / "s.npz"), "--sampler", "confidence", "--k", "1", "--json",
                 "--law"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert np.abs(np.asarray(again["law"]) - np.asarray(out["law"])).max() < 1e-15


def test_a_tampered_cached_partial_table_or_chunk_is_detected_and_recomputed(mlm, tmp_path, monkeypatch):
    """The partial cache carries the content hash of the Glauber cache: an edited table or checkpoint chunk
    is reported and recomputed, never used."""
    ref = pt.tabulate_partial(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    data = next(tmp_path.glob("*.npz"))
    with np.load(data) as npz:
        edited = npz["table"].copy()
    edited[0, 0, 0] += 1.0  # same shape and dtype: only the hash can tell
    np.savez(data, table=edited)
    notes = []
    again = pt.tabulate_partial(mlm, cache_dir=tmp_path, progress=False, log=notes.append)
    assert "does not match the content hash" in notes[0] and "recomputing" in notes[0]
    np.testing.assert_array_equal(again.table, ref.table)
    # a checkpoint chunk edited in place is recomputed as well
    monkeypatch.setattr(tab, "MIN_CHUNK_ROWS", 10)
    monkeypatch.setattr(tab, "CHUNK_SECONDS", 1e-9)
    folder = tmp_path / "chunks"
    folder.mkdir()
    ones = np.ones((10, mlm.space.vocab_size), dtype=np.float32)
    np.savez(folder / "chunk-000000000000.npz", scores=ones, sha256=np.array("0" * 64))
    out = tab.compute_chunks(mlm, 10, 10, Counter("test", 10, enabled=False), folder,
                             lambda rows: np.zeros((rows.numel(), mlm.space.vocab_size), dtype=np.float32))
    assert not out.any()  # the damaged chunk was not used


@pytest.mark.parametrize("command,kind", [("decode", "partial"), ("exact", "full")])
def test_help_states_the_pass_count_that_tabulation_makes(mlm, tmp_path, monkeypatch, capsys, command, kind):
    """The --mlm help's pass count, read as a formula in n and |V|, equals the masked forward passes the
    tabulation of that command's table makes (counted on a fake model, the rate measurement excluded)."""
    monkeypatch.setattr(tab, "measure_rate", lambda source, *a, **k: 1000.0)
    rows = []
    original = mlm.masked_logits_torch
    monkeypatch.setattr(mlm, "masked_logits_torch", lambda ids, pos: (rows.append(ids.shape[0]), original(ids, pos))[1])
    run = pt.tabulate_partial if kind == "partial" else tab.tabulate
    run(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert main([command, "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    formula = help_text.split("over the frame (", 1)[1].split(" masked passes", 1)[0]
    n, q = mlm.space.length, mlm.space.vocab_size
    expr = formula.replace("|V|", "V").replace("^", "**").replace(" ", "*")
    assert eval(expr, {"n": n, "V": q}) == sum(rows) == (n * (q + 1) ** (n - 1) if kind == "partial" else n * q ** (n - 1))
