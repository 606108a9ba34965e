"""AntiBERTy's partial conditionals against plain `transformers` calls.

The model comes from the PyPI wheel as in tests/test_antiberty.py (same fixtures). Fast: the n = 2
frame on a 5-letter alphabet, every partial context (12 passes) against one plain forward pass each
with [MASK] put by hand, and the decoders' laws from that table against the laws built from the plain
logits. Slow: the same on all 20 residues, and the n = 2 run of `mlmix run samplers`.
"""

from itertools import product

import numpy as np
import pytest
import torch
from helpers import FR1, NEXT
from scipy.special import softmax

from mlmix.empirical.models import antiberty as ab
from mlmix.empirical.models import partial_tables as pt
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.theory.kernels.decoders import PartialScoreTable, decoder_law


def plain_partial(plain, frame: str, alphabet: list[str]) -> np.ndarray:  # noqa: F811
    """table[i, c, v] from plain calls: the frame with x filled in, [MASK] at the masked free positions
    and at site i, one forward pass, the alphabet's logits at site i."""
    model, tok = plain
    pieces = frame.split()
    free = [k for k, p in enumerate(pieces) if p == "_"]
    n, q = len(free), len(alphabet)
    columns = torch.tensor(tok.convert_tokens_to_ids(alphabet))
    out = np.empty((n, (q + 1) ** (n - 1), q))
    for i in range(n):
        for c, rest in enumerate(product(range(q + 1), repeat=n - 1)):
            x = list(rest[:i]) + [q] + list(rest[i:])
            words = list(pieces)
            for k, v in zip(free, x):
                words[k] = alphabet[v] if v < q else "A"
            ids = tok(" ".join(words))["input_ids"]
            for k, v in zip(free, x):
                if v == q:
                    ids[1 + k] = tok.mask_token_id
            with torch.no_grad():
                out[i, c] = model(input_ids=torch.tensor([ids])).logits[0, 1 + free[i], columns].double().numpy()
    return out


def _check(converted, plain, letters: str, tmp_path):  # noqa: F811
    frame = f"{FR1} _ _ {NEXT[2]}"
    mlm = MaskedLMConditionals.from_pretrained(converted, frame=frame, candidates=letters, device="cpu")
    table = pt.tabulate_partial(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    ref = plain_partial(plain, frame, letters.split())
    assert np.abs(table.table - ref).max() < 1e-5  # float32 logits (equal here; batching may move the last bits)
    probs = softmax(table.table, axis=-1)
    assert np.abs(probs - softmax(ref, axis=-1)).max() < 1e-6
    mine = PartialScoreTable(table.space, ref)
    for sampler, k in (("any-order", 1), ("parallel", 2), ("confidence", 1)):
        a, b = decoder_law(table, sampler, k=k).law, decoder_law(mine, sampler, k=k).law
        assert np.abs(a - b).max() < 1e-5 and abs(a.sum() - 1) < 1e-13


def test_n2_partial_table_on_five_letters_equals_plain_calls(converted, plain, tmp_path):  # noqa: F811
    _check(converted, plain, "A C D E G", tmp_path)


@pytest.mark.slow
def test_n2_partial_table_on_all_residues_equals_plain_calls(converted, plain, tmp_path):  # noqa: F811
    _check(converted, plain, ab.AMINO_ACIDS, tmp_path)
