"""AntiBERTy (a real pretrained antibody MLM, PyPI wheel antiberty==0.1.3) end to end.

The wheel is fetched once into the pytest cache folder (skipped, with the reason, only when PyPI
cannot be reached). Fast tests (default run): the pickled checkpoint loads only with allow_pickle
and a vocabulary, ``mlmix convert`` reproduces it exactly, unspaced residues are refused, the n = 2
chain on a 5-letter alphabet equals one built from plain ``transformers`` calls, and a cached table
reproduces with no forward pass. Slow tests (``pytest -m slow``): the full n = 2 chain (400 states)
against an independent brute force (transition matrix, Poincaré constant, t_mix, rho, R), and
sampled estimates against the exact suprema at n = 3.
"""

import json
from itertools import product

import numpy as np
import pytest
import torch
from helpers import FR1, NEXT, figure
from scipy.special import log_softmax

from mlmix.cli import main
from mlmix.empirical.models import antiberty as ab
from mlmix.empirical.models import tabulate as tab
from mlmix.empirical.models.mlm import MaskedLMConditionals, load_pretrained
from mlmix.empirical.models.vocab import tokenizer_from_vocab
from mlmix.theory.kernels.assembled import glauber_kernel


def brute_conditionals(plain, frame: str, alphabet: list[str]) -> np.ndarray:
    """log pi_i(v | x_{-i}) for every state x of alphabet^n and site i, from one plain forward pass per
    (x, i): the frame's text with x filled in, tokenized by the tokenizer, [MASK] put at the site by
    hand, and the logits of the alphabet's tokens at that position. Shape (|V|^n, n, |V|)."""
    model, tok = plain
    pieces = frame.split()
    free = [k for k, p in enumerate(pieces) if p == "_"]
    n, q = len(free), len(alphabet)
    columns = torch.tensor(tok.convert_tokens_to_ids(alphabet))
    out = np.empty((q**n, n, q))
    for index, x in enumerate(product(range(q), repeat=n)):
        words = list(pieces)
        for k, v in zip(free, x):
            words[k] = alphabet[v]
        ids = tok(" ".join(words))["input_ids"]  # [CLS] ... [SEP]
        for i, k in enumerate(free):
            masked = list(ids)
            masked[1 + k] = tok.mask_token_id
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([masked])).logits[0, 1 + k, columns].double().numpy()
            out[index, i] = log_softmax(logits)
    return out


def brute_kernel(cond: np.ndarray) -> np.ndarray:
    """Random-scan Glauber P(x, x^{i<-v}) = (1/n) pi_i(v | x_{-i}), dense, states in index order."""
    N, n, q = cond.shape
    P = np.zeros((N, N))
    for x in range(N):
        digits = np.array(np.unravel_index(x, (q,) * n))
        for i in range(n):
            for v in range(q):
                y = digits.copy()
                y[i] = v
                P[x, np.ravel_multi_index(tuple(y), (q,) * n)] += np.exp(cond[x, i, v]) / n
    return P


# ------------------------------------------------------------------------------------------------ fast


def test_the_wheel_checkpoint_needs_allow_pickle_and_a_vocabulary(wheel):
    model_dir, vocab = wheel
    with pytest.raises(ValueError, match="only pickled weights.*--allow-pickle.*mlmix convert"):
        MaskedLMConditionals.from_pretrained(model_dir, 2)
    with pytest.raises(ValueError, match="has no tokenizer.*--vocab"):
        MaskedLMConditionals.from_pretrained(model_dir, 2, allow_pickle=True)
    model, tok = load_pretrained(MaskedLMConditionals.auto_class, model_dir, allow_pickle=True,
                                 tokenizer=tokenizer_from_vocab(vocab))
    mlm = MaskedLMConditionals(model, tok, 2, device="cpu")
    assert " ".join(mlm.decode(np.arange(mlm.space.vocab_size))) == ab.AMINO_ACIDS  # 20 residues, no specials


def test_convert_gives_the_same_model_and_the_same_cache_key(wheel, converted):
    model_dir, vocab = wheel
    model, tok = load_pretrained(MaskedLMConditionals.auto_class, model_dir, allow_pickle=True,
                                 tokenizer=tokenizer_from_vocab(vocab))
    raw = MaskedLMConditionals(model, tok, frame=f"{FR1} _ _ _", device="cpu")
    copy = MaskedLMConditionals.from_pretrained(converted, frame=f"{FR1} _ _ _", device="cpu")
    x = np.random.default_rng(0).integers(0, 20, (5, 3))
    np.testing.assert_array_equal(raw.all_log_conditionals(x), copy.all_log_conditionals(x))
    assert tab.table_key(raw)[0] == tab.table_key(copy)[0]  # a table computed from either serves both


def test_unspaced_residues_and_multi_letter_candidates_are_refused(converted):
    with pytest.raises(ValueError, match="'EVQLVESGGG'.*separated by spaces"):
        MaskedLMConditionals.from_pretrained(converted, frame="EVQLVESGGG _ _", device="cpu")
    with pytest.raises(ValueError, match="unknown candidate token 'ACD'"):
        MaskedLMConditionals.from_pretrained(converted, 2, candidates="ACD E", device="cpu")


def test_n2_chain_on_five_letters_equals_plain_transformers_calls(converted, plain, tmp_path):
    frame, letters = f"{FR1} _ _ {NEXT[2]}", "A C D E G"
    mlm = MaskedLMConditionals.from_pretrained(converted, frame=frame, candidates=letters, device="cpu")
    table = tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    cond = brute_conditionals(plain, frame, letters.split())
    np.testing.assert_allclose(glauber_kernel(table).toarray(), brute_kernel(cond), atol=2e-6)


def test_a_cached_table_reproduces_with_no_forward_pass(converted, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path))
    args = ["exact", "--mlm", str(converted), "--frame", f"{FR1} _ _ {NEXT[2]}", "--candidates", ab.AMINO_ACIDS,
            "--json", "--no-progress"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    calls = []
    monkeypatch.setattr(MaskedLMConditionals, "masked_logits_torch", lambda *a: calls.append(a))
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert calls == [] and "read from the cache" in second["chain"]
    first.pop("chain"), second.pop("chain")
    a, b = leaves(first), leaves(second)
    assert a.keys() == b.keys()
    for path, value in a.items():  # the same table: the same numbers (LAPACK may vary in the last bits)
        assert b[path] == (pytest.approx(value, rel=1e-12, abs=1e-300) if isinstance(value, float) else value), path


def leaves(obj, path=()):
    """Every leaf of a JSON object, by path."""
    if isinstance(obj, dict):
        return {k: v for key, value in obj.items() for k, v in leaves(value, (*path, key)).items()}
    if isinstance(obj, list):
        return {k: v for i, value in enumerate(obj) for k, v in leaves(value, (*path, i)).items()}
    return {path: obj}


# ------------------------------------------------------------------------------------------------ slow


@pytest.mark.slow
def test_exact_n2_chain_and_constants_against_an_independent_brute_force(converted, plain, tmp_path, capsys,
                                                                          monkeypatch):
    """400 states: the transition matrix, Poincaré constant, t_mix, rho and R of `mlmix exact --mlm`
    and `mlmix estimate` against the same quantities computed here from 800 plain forward passes."""
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path))
    frame, T = f"{FR1} _ _ {NEXT[2]}", 1.0
    letters = ab.AMINO_ACIDS.split()
    cond = brute_conditionals(plain, frame, letters)
    P = brute_kernel(cond)
    common = ["--frame", frame, "--candidates", ab.AMINO_ACIDS, "--temperature", str(T), "--no-progress"]
    assert main(["exact", "--mlm", str(converted), *common, "--json"]) == 0
    chain = json.loads(capsys.readouterr().out)
    assert main(["estimate", "--model", str(converted), *common, "--json", "--no-records"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plan"]["source"] == "exact table" and report["plan"]["table"]["from_cache"]
    mlm = MaskedLMConditionals.from_pretrained(converted, frame=frame, candidates=ab.AMINO_ACIDS, device="cpu")
    np.testing.assert_allclose(glauber_kernel(tab.cached_table(mlm)).toarray(), P, atol=2e-6)

    # stationary law, additive (Poincaré) gap and worst-start t_mix of the brute-force P, densely
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi /= pi.sum()
    D = np.sqrt(pi)
    S = (D[:, None] * P / D[None, :] + (D[:, None] * P / D[None, :]).T) / 2
    additive_gap = 1 - np.sort(np.linalg.eigvalsh(S))[-2]
    # mlmix's Poincare constant against numpy's eigensolver on the brute-force kernel (two independent
    # routes); rel 1e-5 because the two kernels agree to 2e-6 (float32 forward passes)
    assert 1 / chain["poincare_constant"]["value"] == pytest.approx(additive_gap, rel=1e-5)
    Pt, t = np.eye(400), 0
    while 0.5 * np.abs(Pt - pi).sum(axis=1).max() > chain["eps"]:
        Pt, t = Pt @ P, t + 1
    assert chain["t_mix"]["value"] == t

    # influence rho_ij and rectangles R, from the brute-force conditionals
    prob = np.exp(cond).reshape(20, 20, 2, 20)  # [x0, x1, site, v]
    rho_10 = max(0.5 * np.abs(prob[a, :, 1] - prob[b, :, 1]).sum(-1).max() for a in range(20) for b in range(20))
    rho_01 = max(0.5 * np.abs(prob[:, a, 0] - prob[:, b, 0]).sum(-1).max() for a in range(20) for b in range(20))
    assert report["exact"]["rho_ij"][1][0] == pytest.approx(rho_10, abs=1e-6)
    assert report["exact"]["rho_ij"][0][1] == pytest.approx(rho_01, abs=1e-6)
    lp = cond.reshape(20, 20, 2, 20)
    R = []
    for a, b, a2, b2 in product(range(20), repeat=4):
        if a2 != a and b2 != b:
            R.append(abs(lp[a, b, 0, a2] - lp[a, b, 0, a] + lp[a2, b, 1, b2] - lp[a2, b, 1, b]
                         - lp[a, b, 1, b2] + lp[a, b, 1, b] - lp[a, b2, 0, a2] + lp[a, b2, 0, a]) / T)
    R = np.array(R)
    assert report["exact"]["rectangle"]["count"] == R.size == 400 * 361
    assert report["exact"]["rectangle"]["max"] == pytest.approx(R.max(), abs=1e-4)
    assert report["exact"]["rectangle"]["mean"] == pytest.approx(R.mean(), abs=1e-5)
    assert report["exact"]["rectangle"]["median"] == pytest.approx(np.median(R), abs=1e-4)


@pytest.mark.slow
def test_sampled_estimates_never_exceed_the_exact_suprema(converted, tmp_path, capsys, monkeypatch):
    """n = 3 (8,000 states): estimates queried from the model (--exact no, a few contexts) against the
    exact values from the table; suprema of a sample are lower bounds (float32 rounding apart)."""
    monkeypatch.setenv("MLMIX_CACHE", str(tmp_path))
    common = ["--model", str(converted), "--frame", f"{FR1} _ _ _ {NEXT[3]}", "--candidates", ab.AMINO_ACIDS,
              "--json", "--no-progress", "--no-records", "--rectangles", "60", "--seed", "3"]
    assert main(["estimate", *common, "--exact", "no", "--contexts", "6"]) == 0
    sampled = json.loads(capsys.readouterr().out)
    assert sampled["plan"]["source"] == "model" and sampled["exact"] is None
    assert main(["estimate", *common, "--exact", "yes", "--contexts", "6"]) == 0
    exact = json.loads(capsys.readouterr().out)["exact"]
    assert exact["n_contexts"] == 8000 and exact["rectangle"]["count"] == 8000 * 3 * 361
    for key in ("rho", "alpha", "delta", "contraction_temperature"):
        assert figure(sampled[key]) <= figure(exact[key]) + 1e-5, key
    assert sampled["rectangle"]["max"] <= exact["rectangle"]["max"] + 1e-4
    assert sampled["trap"]["gamma"] <= exact["trap"]["gamma"] + 1e-5
    assert np.all(np.array(sampled["rho_ij"]) <= np.array(exact["rho_ij"]) + 1e-5)
