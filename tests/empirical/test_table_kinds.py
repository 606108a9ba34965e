"""The one tabulation routine (mlmix.empirical.models.tabulate.TableKind.tabulate) through both its kinds, the exact
(Glauber) table and the partial table: the cache key against a record built by hand, the cap refused
with each kind's own message (and not one pass early), an interrupted run resumed from its checkpoint
folder, a damaged cache entry reported and recomputed, and the tokens and provenance both tables carry."""

import hashlib
import json
import re

import numpy as np
import pytest
import torch
from mlm_fixtures import tiny_masked_lm

from mlmix.empirical.models import partial_tables as pt
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.files import atomic_save_npz

LETTERS = ["a", "b", "c", "!"]

#: (public entry point, kind, passes n B^(n-1) of the frame "c _ ! _ _", the (n, B) phrase of its messages)
KINDS = {"exact": (tab.tabulate, tab.EXACT, 3 * 4 ** 2, "n = 3 sites x 4^2 contexts"),
         "partial": (pt.tabulate_partial, pt.PARTIAL, 3 * 5 ** 2, "n = 3 sites x 5^2 partial contexts")}


@pytest.fixture()
def mlm():
    torch.set_num_threads(1)
    model, tok = tiny_masked_lm("bert", seed=13)
    return MaskedLMConditionals(model, tok, frame="c _ ! _ _", candidates=" ".join(LETTERS), device="cpu",
                                temperature=0.9)


class Passes:
    """Counts the masked rows every MaskedLMConditionals scores while installed; raises KeyboardInterrupt
    at call number ``stop`` (the machine "dies")."""

    def __init__(self, monkeypatch, stop: int | None = None):
        self.rows, self.calls = 0, 0
        original = MaskedLMConditionals.masked_logits_torch

        def counted(source, token_ids, positions):
            self.calls += 1
            if self.calls == stop:
                raise KeyboardInterrupt
            self.rows += int(token_ids.shape[0])
            return original(source, token_ids, positions)

        monkeypatch.setattr(MaskedLMConditionals, "masked_logits_torch", counted)


def quiet(kind: str, source, **kwargs):
    return KINDS[kind][0](source, progress=False, log=kwargs.pop("log", lambda _: None), **kwargs)


def test_the_cache_keys_are_the_records_built_by_hand(mlm):
    """The key is the first 32 hex digits of the SHA-256 of the sorted JSON record (format 2, weights,
    architecture, template with -1 at the free positions, alphabet ids, dtype), plus kind: partial for the
    partial table: existing caches stay readable."""
    tok = mlm.tokenizer
    template = tok("c a ! a a")["input_ids"]
    for position in (2, 4, 5):  # [CLS] c _ ! _ _ [SEP]
        template[position] = -1
    record = {"format": 2, "weights": tab.weights_hash(mlm.model), "architecture": "BertForMaskedLM",
              "template": template, "alphabet": tok.convert_tokens_to_ids(LETTERS), "dtype": "float32"}
    for kind, extra in [("exact", {}), ("partial", {"kind": "partial"})]:
        want = {**record, **extra}
        key = hashlib.sha256(json.dumps(want, sort_keys=True).encode()).hexdigest()[:32]
        assert KINDS[kind][1].key(mlm) == (key, want)
    assert tab.table_key(mlm) == tab.EXACT.key(mlm) != pt.PARTIAL.key(mlm)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_refuses_over_the_cap_with_its_own_message_and_not_at_it(kind, mlm, tmp_path, monkeypatch):
    _, table_kind, total, shape = KINDS[kind]
    passes = Passes(monkeypatch)
    want = (f"the {table_kind.label} needs {total:,} masked forward passes ({shape}), more than --max-passes "
            f"{total - 1:,}")
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        quiet(kind, mlm, cache_dir=tmp_path, max_passes=total - 1)
    assert passes.rows == 0 and not any(tmp_path.iterdir())  # refused before any pass or file
    notes = []
    table = quiet(kind, mlm, cache_dir=tmp_path, max_passes=total, log=notes.append)
    assert passes.rows == 2 * 32 + total  # the rate measurement and one pass per row
    assert table.table.shape == (3, total // 3, 4)
    assert notes[0].startswith(f"{total} masked forward passes, ") and notes[0].endswith(
        f" ({shape}); use --max-passes to cap")
    assert notes[1] == f"{table_kind.label} cached as {tmp_path / (table_kind.key(mlm)[0] + '.npz')}"


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_resumes_from_its_checkpoint_folder(kind, mlm, tmp_path, monkeypatch):
    _, table_kind, total, _ = KINDS[kind]
    monkeypatch.setattr(tab, "MIN_CHUNK_ROWS", 10)
    monkeypatch.setattr(tab, "CHUNK_SECONDS", 1e-9)  # chunks of 10 rows
    ref = quiet(kind, mlm, use_cache=False)
    assert not any(tmp_path.iterdir())
    with monkeypatch.context() as m:
        Passes(m, stop=5)  # two calls to measure the rate, two chunks, then the interruption
        with pytest.raises(KeyboardInterrupt):
            quiet(kind, mlm, cache_dir=tmp_path)
    folder = tmp_path / f"{table_kind.key(mlm)[0]}.partial"
    assert sorted(p.name for p in folder.glob("chunk-*")) == ["chunk-000000000000.npz", "chunk-000000000010.npz"]
    assert json.loads((folder / "run.json").read_text())["command"] == table_kind.tag
    passes = Passes(monkeypatch)
    resumed = quiet(kind, mlm, cache_dir=tmp_path)
    assert passes.rows == 2 * 32 + (total - 20)  # the rate measurement and only the missing chunks
    np.testing.assert_array_equal(resumed.table, ref.table)
    assert type(resumed) is table_kind.table_class and not folder.exists()


@pytest.mark.parametrize("damage", ["tamper", "garbage", "record"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_reports_and_recomputes_a_damaged_cache_entry(kind, damage, mlm, tmp_path, monkeypatch):
    """Edited values (same layout: only the content hash tells), an archive that is no archive, a record
    that is no JSON object: never used, never a crash; the table is recomputed and cached whole again."""
    _, table_kind, total, _ = KINDS[kind]
    first = quiet(kind, mlm, cache_dir=tmp_path)
    key = table_kind.key(mlm)[0]
    data = tmp_path / f"{key}.npz"
    if damage == "tamper":
        with np.load(data) as npz:
            edited = npz["table"].copy()
        edited[0, 0, 0] += 1.0
        atomic_save_npz(data, table=edited)
    elif damage == "garbage":
        data.write_bytes(b"not a zip file at all")
    else:
        (tmp_path / f"{key}.json").write_text("[1, 2]")
    passes, notes = Passes(monkeypatch), []
    again = quiet(kind, mlm, cache_dir=tmp_path, log=notes.append)
    assert passes.rows == 2 * 32 + total  # recomputed
    np.testing.assert_array_equal(again.table, first.table)
    if damage != "record":  # a record that is not the table's is no cache entry of it: recomputed silently
        why = "does not match the content hash" if damage == "tamper" else "is damaged"
        assert notes[0].startswith(f"the cached {table_kind.name} {data} {why}") and notes[0].endswith(
            "; recomputing it") and "\n" not in notes[0]
    assert not any("read from the cache" in n for n in notes)
    passes.rows = 0
    notes.clear()
    cached = quiet(kind, mlm.at_temperature(2.0), cache_dir=tmp_path, log=notes.append)
    assert passes.rows == 0 and notes == [f"{table_kind.label} read from the cache {data} (no forward pass)"]
    np.testing.assert_array_equal(cached.table, first.table)
    assert cached.temperature == 2.0 and cached.describe()["table"]["from_cache"]


@pytest.mark.parametrize("kind", KINDS)
def test_both_tables_carry_their_tokens_and_provenance(kind, mlm):
    table = quiet(kind, mlm, use_cache=False)
    assert table.tokens == LETTERS and table.decode(np.array([3, 0, 2])) == ["!", "a", "c"]
    d = table.describe()["table"]
    assert d["passes"] == KINDS[kind][2] and not d["from_cache"]
    assert d.get("kind") == ("partial" if kind == "partial" else None)
    with pytest.raises(ValueError, match="3 alphabet tokens for an alphabet of 4 symbols"):
        type(table)(table.space, table.table, tokens=LETTERS[:3], info={})
