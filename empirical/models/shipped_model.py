"""Train the shipped default masked LM on samples of a known joint law (reproducible, one CPU thread).

The true law is a q-state Potts chain on n sites (``mlmix.theory.sources.conditionals.PottsModel`` on a path):

    mu(x) ∝ exp( sum_{i=0}^{n-2} J 1[x_i = x_{i+1}] + sum_i h_i(x_i) ),

with fixed coupling J and seeded fields h. A tiny BERT is trained by plain masked-LM training:
each step masks one uniformly chosen site of each sequence of a fixed sample from mu and minimises
the cross-entropy of the true token at the mask. The model learns the conditionals well on average
(small KL) but not uniformly over all contexts, so its conditionals are incompatible: the
rectangle statistic is positive and its influence differs from the true law's.

    mlmix run train-default --out DIR --seed 0 --steps 3000
    mlmix run train-default --out empirical/models/default_model --overwrite     # replace the shipped model

A run with the same seed and torch version reproduces the weights exactly. The folder gets
``model.safetensors``, ``config.json``, the tokenizer files and ``law.json`` (the true law,
the training settings and the measured KL to the true conditionals).
"""

from __future__ import annotations

import time
from pathlib import Path

import networkx as nx
import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from mlmix.files import atomic_write_json, read_json
from mlmix.theory.sources.conditionals import Conditionals, PottsModel
from mlmix.theory.sources.contexts import score_table
from mlmix.validation import check_law_spec

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENS = ("a", "b", "c", "!")
LENGTH = 6
COUPLING = 1.2
FIELD_SCALE = 0.5


def potts_chain(q: int, n: int, coupling: float, fields: np.ndarray) -> PottsModel:
    """The Potts chain mu(x) ∝ exp(J sum_i 1[x_i = x_{i+1}] + sum_i h_i(x_i))."""
    return PottsModel(nx.path_graph(n), q, couplings=coupling, fields=np.asarray(fields, dtype=np.float64))


def true_law(seed: int = 0) -> PottsModel:
    """The default law: |V| = len(TOKENS), n = LENGTH, J = COUPLING, h ~ N(0, FIELD_SCALE^2) seeded."""
    rng = np.random.default_rng(seed)
    return potts_chain(len(TOKENS), LENGTH, COUPLING, FIELD_SCALE * rng.standard_normal((LENGTH, len(TOKENS))))


def law_spec(folder: str | Path) -> dict:
    """The law recorded in ``folder/law.json`` by :func:`train`, checked
    (:func:`~mlmix.validation.check_law_spec`; one-line ValueError)."""
    path = Path(folder) / "law.json"
    return check_law_spec(read_json(path, "law file"), str(path))


def load_law(folder: str | Path) -> PottsModel:
    """The true law recorded in ``folder/law.json`` by :func:`train`."""
    spec = law_spec(folder)
    return potts_chain(len(spec["tokens"]), spec["length"], spec["coupling"], spec["fields"])


def build_tokenizer(tokens: tuple[str, ...] = TOKENS) -> PreTrainedTokenizerFast:
    """WordLevel tokenizer: specials at ids 0..4, then ``tokens`` (symbol k = id 5 + k); [CLS] x [SEP]."""
    vocab = {t: i for i, t in enumerate(SPECIALS + tuple(tokens))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=LENGTH + 2)


def conditional_kl(truth: Conditionals, model: Conditionals) -> dict:
    """KL(pi_i^true(.|x_{-i}) || pi_i^model(.|x_{-i})) over every site and context, exactly.

    ``mean``: averaged over sites and over x ~ mu (the true joint), i.e. the expected KL that
    masked-LM training minimises; ``max``: worst site and context.
    """
    true_s, model_s = score_table(truth), score_table(model)  # (|V|^n, n, q)
    logp = true_s - np.logaddexp.reduce(true_s, axis=-1, keepdims=True)
    logm = model_s - np.logaddexp.reduce(model_s, axis=-1, keepdims=True)
    kl = (np.exp(logp) * (logp - logm)).sum(-1)  # (|V|^n, n)
    mu = truth.joint()
    return {"mean": float(mu @ kl.mean(axis=1)), "max": float(kl.max())}


def train(out: str | Path, seed: int = 0, steps: int = 3000, samples: int = 20000, batch: int = 128,
          lr: float = 2e-3, hidden: int = 64, layers: int = 2) -> dict:
    """Train the default model into ``out`` and return the summary written to ``law.json``."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    law = true_law(seed)
    space = law.space
    data = space.decode(rng.choice(space.size, size=samples, p=law.joint()))
    tok = build_tokenizer()
    first = len(SPECIALS)
    config = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=2 * hidden, max_position_embeddings=LENGTH + 2,
                        pad_token_id=tok.pad_token_id, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    inputs = torch.tensor(np.concatenate([np.full((samples, 1), tok.cls_token_id), data + first,
                                          np.full((samples, 1), tok.sep_token_id)], axis=1))
    start = time.perf_counter()
    model.train()
    for _ in range(steps):
        rows = torch.from_numpy(rng.integers(0, samples, size=batch))
        pos = torch.from_numpy(rng.integers(1, LENGTH + 1, size=batch))
        ids = inputs[rows].clone()
        labels = torch.full_like(ids, -100)
        labels[torch.arange(batch), pos] = ids[torch.arange(batch), pos]
        ids[torch.arange(batch), pos] = tok.mask_token_id
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    seconds = time.perf_counter() - start
    model.eval()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)

    from mlmix.empirical.models.mlm import (
        MaskedLMConditionals,  # the trained model as a source of conditionals
    )
    kl = conditional_kl(law, MaskedLMConditionals(model, tok, LENGTH, device="cpu"))
    summary = {
        "law": {"kind": "potts_chain", "tokens": list(TOKENS), "length": LENGTH, "coupling": COUPLING,
                "fields": law.h.tolist(), "formula": "mu(x) ∝ exp(J sum_i 1[x_i = x_{i+1}] + sum_i h_i(x_i))"},
        "training": {"seed": seed, "steps": steps, "samples": samples, "batch": batch, "lr": lr, "hidden": hidden,
                     "layers": layers, "objective": "one uniformly chosen site masked per sequence, cross-entropy",
                     "torch": torch.__version__, "command": f"mlmix run train-default --out DIR --seed {seed} "
                     f"--steps {steps} --samples {samples}"},
        "kl_to_true_conditionals": kl,
    }
    atomic_write_json(out / "law.json", summary)
    print(f"trained {steps} steps in {seconds:.1f} s; KL to the true conditionals: mean {kl['mean']:.2e}, "
          f"max {kl['max']:.2e}; saved to {out}")
    return summary
