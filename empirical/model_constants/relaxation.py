"""Certified bounds on a BERT masked LM's conditionals over a set of contexts, by affine arithmetic.

The set: every input x whose free positions k take a token of ``allowed[k]`` (the other positions
fixed, the site i holding [MASK]). Each value the network computes is an affine form with a certified remainder
(:mod:`mlmix.empirical.model_constants.affine_forms`: the forms, their linear, bilinear and unary
operations, softmax and LayerNorm, relational remainders and the float64 rounding).

Entry points: :func:`conditional_bounds` (sound [lower, upper] on p_i(a | x) over the set, the
masked LM's conditional restricted to the alphabet and renormalised at temperature T, as
:mod:`mlmix.empirical.models.mlm` computes it), :func:`influence_upper` (a sound upper bound on
rho_ij, from the score oscillation Delta_ij and paper G Lemma 6, TV <= tanh(osc / 4T)),
:func:`layer_widths` (per layer, how wide the bounds are: where the relaxation loses it) and
:func:`source_conditional_bounds` / :func:`source_influence_upper` for a
:class:`~mlmix.empirical.models.mlm.MaskedLMConditionals` source (symbols instead of token ids).
Supported: ``BertForMaskedLM`` with absolute positions and ``hidden_act="gelu"`` (exact erf GELU),
no padding (every position attended), and SCEPTR
(:class:`~mlmix.empirical.models.sceptr.SceptrMLM`: a one-hot feature embedding, post-LN layers with
ReLU, a linear head; keys only at [CLS] and the residues). Both run through one encoder-layer step
(:class:`LayerPlan`, :func:`_encoder_layer`); ReLU on [l, u] crossing 0 is the chord line of slope
u / (u - l) with the convex error's exact range (DeepZ).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mlmix.empirical.model_constants.affine_forms import (
    FUNC_REL,
    TINY,
    Affine,
    add,
    affine_form,
    bilinear,
    compact,
    gamma,
    gelu,
    layer_norm,
    linear,
    refresh,
    relu,
    scale,
    softmax,
    unsqueeze,
)
from mlmix.empirical.models.families import head_adapter
from mlmix.validation import check_temperature

#: Default number of remainders each nonlinear step moves to fresh noise symbols (:func:`propagate`).
FRESH = 64

#: Widest model (hidden size) on which :func:`certify_relaxation` spends fresh symbols: they made the
#: width-32 and width-64 models tighter (a 2-layer width-32 BERT from vacuous to rho_ij <= 0.0052), left
#: AntiBERTy (width 512) vacuous at every layer where it was vacuous before, and cost 55-83 s instead of
#: 1-3 s per AntiBERTy propagation (docs/real-model.md section 10).
FRESH_WIDTH_LIMIT = 128


# ---------------------------------------------------------------------------- the BERT network
@dataclass
class Propagation:
    """Forms of one propagation: the embedding sum (before its LayerNorm), the hidden states after
    the embeddings and after each layer (``hidden[0]`` .. ``hidden[L]``, shape (positions, hidden)),
    the logits over the alphabet at the site, and per-layer statistics of the internal steps."""

    symbols: list[tuple[int, list[int]]]  # (position, tokens): the free positions and their symbols
    embedding_sum: Affine
    hidden: list[Affine]
    logits: Affine
    stats: list[dict] = field(default_factory=list)

    def eps_of(self, tokens: Sequence[int]) -> torch.Tensor:
        """The noise values eps(x) of an input x (its full token ids): +1 for the token it takes at a
        free position (beyond the first), -1 for the others."""
        out = []
        for pos, toks in self.symbols:
            t = int(tokens[pos])
            if t not in toks:
                raise ValueError(f"token {t} at position {pos} is not allowed there ({toks})")
            out.extend(1.0 if t == s else -1.0 for s in toks[1:])
        return torch.tensor(out, dtype=torch.float64)


def _check_model(model) -> str:
    """The network of a supported model ("bert" or "sceptr": the ``relaxation`` its family's head adapter
    registers, :func:`~mlmix.empirical.models.families.head_adapter`); ValueError for any other."""
    adapter = head_adapter(model)
    kind = None if adapter is None else adapter.relaxation
    if kind is None:
        raise ValueError(f"certified bounds support the networks whose head adapter names a relaxation "
                         f"(BertForMaskedLM and SCEPTR), got {type(model).__name__}")
    if kind == "sceptr":
        return "sceptr"
    cfg = model.config
    if getattr(cfg, "hidden_act", None) != "gelu":
        raise ValueError(f"certified bounds need hidden_act='gelu' (exact erf), got {cfg.hidden_act!r}")
    if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
        raise ValueError("certified bounds need absolute position embeddings")
    return "bert"


def _symbols(frame_tokens: Sequence[int], site: int, allowed: Mapping[int, Sequence[int]]) -> list[tuple[int, list[int]]]:
    length = len(frame_tokens)
    if not 0 <= site < length:
        raise ValueError(f"site {site} is outside the {length} input positions")
    out = []
    for pos in sorted(allowed):
        if not 0 <= int(pos) < length:
            raise ValueError(f"allowed position {pos} is outside the {length} input positions")
        if int(pos) == site:
            continue
        toks = list(dict.fromkeys(int(t) for t in allowed[pos]))
        if not toks:
            raise ValueError(f"allowed[{pos}] is empty")
        out.append((int(pos), toks))
    return out


def _bert_values(word: torch.Tensor, extra: torch.Tensor, ln):
    """BERT's embeddings word[x_k] + extra[k], then their LayerNorm ``ln`` when given, as a value
    function of :func:`_one_hot_form`. The LayerNorm's rounding: the error of the computed z = x - mean
    (dz = gamma_d 2 max|x|), of var (2 gamma_d var + 2 dz rms(z) + dz^2), hence of 1/sqrt(var + eps)
    (relative dvar / (var + eps - dvar), + FUNC_REL) and of the last product and sum."""

    def value(tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = word[tokens] + extra[positions]
        mag = word[tokens].abs() + extra[positions].abs()
        if ln is None:
            return x, gamma(2) * mag
        z = x - x.mean(-1, keepdim=True)
        s = torch.rsqrt((z * z).mean(-1, keepdim=True) + float(ln.eps))
        w, b = ln.weight.detach().to(torch.float64), ln.bias.detach().to(torch.float64)
        y = z * s * w + b
        d = x.shape[-1]
        big = x.abs().amax(-1, keepdim=True)
        dz = gamma(d) * 2 * big  # error of the computed z
        var = (z * z).mean(-1, keepdim=True)  # of the computed z: the true one differs by at most
        rms = torch.sqrt(var * (1 + gamma(d))) + dz  # ... 2 dz rms + dz^2 (Cauchy-Schwarz)
        dvar = 2 * gamma(d) * var + 2 * dz * rms + dz * dz
        room = var + float(ln.eps) - dvar
        rel_s = torch.where(room > dvar, dvar / room.clamp(min=1e-300), torch.full_like(room, math.inf)) + FUNC_REL
        zsw = (z * s * w).abs()
        return y, zsw * rel_s + dz * s * w.abs() * (1 + rel_s) + gamma(4) * (zsw + b.abs())

    return value


def _one_hot_form(value, ids: torch.Tensor, symbols: list[tuple[int, list[int]]], m: int) -> Affine:
    """A function of each position's own token as an exact affine form: ``value(tokens, positions)``
    gives (values, rounding bound) of the rows at those positions holding those tokens. A function
    of one position's token is linear in its indicator lambda, so with v_b = value at token t_b,
    value = v_0 + sum_{b >= 1} lambda_b (v_b - v_0) = c + g . eps with c = v_0 + sum_b (v_b - v_0) / 2,
    g_b = (v_b - v_0) / 2. Only rounding goes to the remainder: the value's own plus gamma(m + 8) |.|
    for the sums."""
    positions = torch.arange(ids.numel())
    c, slack = value(ids, positions)
    c, slack = c.clone(), slack.expand_as(c).clone()
    g = torch.zeros((*c.shape, m), dtype=torch.float64)
    col = 0
    for pos, toks in symbols:
        v, sl = value(torch.as_tensor(toks), torch.full((len(toks),), pos))
        half = (v[1:] - v[0]) / 2
        c[pos] = v[0] + half.sum(0)
        g[pos, :, col:col + len(toks) - 1] = half.T
        col += len(toks) - 1
        slack[pos] = sl.expand_as(v).amax(0) * 2 + gamma(len(toks) + 8) * (v.abs().sum(0) * 2)
    groups = torch.tensor([pos for pos, toks in symbols for _ in toks[1:]], dtype=torch.long)
    return affine_form(c, g, torch.zeros_like(c), slack, groups)


@dataclass
class LayerPlan:
    """One post-LayerNorm encoder layer, the steps BERT and SCEPTR share (weights as (out, in)):

        a = LN_1(h + W_o attention(h) + b_o),   h' = LN_2(a + W_2 act(W_1 a + b_1) + b_2),

    attention with ``heads`` heads, queries scaled by ``scaling``, keys and values only at the
    positions ``keep`` (None: every position). ``act`` is "gelu" (exact erf) or "relu"."""

    query: tuple[torch.Tensor, torch.Tensor]
    key: tuple[torch.Tensor, torch.Tensor]
    value: tuple[torch.Tensor, torch.Tensor]
    scaling: float
    heads: int
    out: tuple[torch.Tensor, torch.Tensor]
    norm1: tuple[torch.Tensor, torch.Tensor, float]
    inner: tuple[torch.Tensor, torch.Tensor]
    act: str
    outer: tuple[torch.Tensor, torch.Tensor]
    norm2: tuple[torch.Tensor, torch.Tensor, float]
    keep: torch.Tensor | None = None


def _bert_plan(layer, heads: int, act: str = "gelu") -> LayerPlan:
    """The :class:`LayerPlan` of a transformers ``BertLayer``."""
    att, out, o = layer.attention.self, layer.attention.output, layer.output

    def lin(mod) -> tuple[torch.Tensor, torch.Tensor]:
        return mod.weight.detach(), mod.bias.detach()

    def norm(mod) -> tuple[torch.Tensor, torch.Tensor, float]:
        return mod.weight.detach(), mod.bias.detach(), float(mod.eps)

    return LayerPlan(lin(att.query), lin(att.key), lin(att.value), float(att.scaling), heads, lin(out.dense),
                     norm(out.LayerNorm), lin(layer.intermediate.dense), act, lin(o.dense), norm(o.LayerNorm))


def _sceptr_plan(model, layer, keep: torch.Tensor) -> LayerPlan:
    """The :class:`LayerPlan` of one of SCEPTR's ``torch.nn.TransformerEncoderLayer`` (ReLU, post-LN;
    the packed in-projection split into Q, K, V; scaled dot-product attention's 1 / sqrt(d_head))."""
    w, b = layer.in_proj_weight.detach(), layer.in_proj_bias.detach()
    d = model.width
    (wq, wk, wv), (bq, bk, bv) = w.split(d), b.split(d)
    return LayerPlan((wq, bq), (wk, bk), (wv, bv), 1.0 / math.sqrt(d // model.heads), model.heads,
                     (layer.out_proj_weight.detach(), layer.out_proj_bias.detach()),
                     (layer.norm1_weight.detach(), layer.norm1_bias.detach(), float(model.eps)),
                     (layer.linear1_weight.detach(), layer.linear1_bias.detach()), "relu",
                     (layer.linear2_weight.detach(), layer.linear2_bias.detach()),
                     (layer.norm2_weight.detach(), layer.norm2_bias.detach(), float(model.eps)), keep)


def _check_ids(tokens, low: int, high: int, what: str) -> None:
    if len(tokens) == 0 or min(tokens) < low or max(tokens) >= high:
        raise ValueError(f"{what} must be non-empty token ids in [{low}, {high})")


def _bert_network(model, ids: torch.Tensor, symbols, m: int, alpha_ids: torch.Tensor):
    """(embedding sum, hidden[0], layer plans, head) of a ``BertForMaskedLM``."""
    bert = model.bert
    emb = bert.embeddings
    word = emb.word_embeddings.weight.detach().to(torch.float64)
    vocab = word.shape[0]
    for _, toks in symbols:
        _check_ids(toks, 0, vocab, "allowed tokens")
    _check_ids(alpha_ids.tolist(), 0, vocab, "the alphabet")
    length = ids.numel()
    extra = (emb.token_type_embeddings.weight.detach().to(torch.float64)[0]
             + emb.position_embeddings.weight.detach().to(torch.float64)[:length])
    e0 = _one_hot_form(_bert_values(word, extra, None), ids, symbols, m)
    h = _one_hot_form(_bert_values(word, extra, emb.LayerNorm), ids, symbols, m)
    plans = [_bert_plan(layer, model.config.num_attention_heads) for layer in bert.encoder.layer]

    def head(t: Affine, fresh: int) -> Affine:
        pred = model.cls.predictions
        t = refresh(gelu(linear(t, pred.transform.dense.weight, pred.transform.dense.bias)), fresh)
        ln = pred.transform.LayerNorm
        t = layer_norm(t, ln.weight, ln.bias, ln.eps, None, fresh)
        dec = pred.decoder
        return linear(t, dec.weight.detach()[alpha_ids], dec.bias.detach()[alpha_ids] if dec.bias is not None else None)

    return e0, h, plans, head


def _sceptr_network(model, ids: torch.Tensor, symbols, m: int, alpha_ids: torch.Tensor):
    """(embedding, hidden[0] (the same: no LayerNorm), layer plans, head) of a
    :class:`~mlmix.empirical.models.sceptr.SceptrMLM`. The embedding W_p f(x)_k is a function of
    position k's token alone (the loop lengths and compartments are the frame's: free positions hold
    residues), so exact; keys and values at [CLS] and the residues only (not at the loop markers)"""
    from mlmix.empirical.models.sceptr import FIRST_MARKER, FIRST_RESIDUE  # deferred: sceptr imports tokenizers

    for _, toks in symbols:
        _check_ids(toks, FIRST_RESIDUE, FIRST_MARKER, "allowed tokens (amino acids)")
    _check_ids(alpha_ids.tolist(), FIRST_RESIDUE, FIRST_MARKER, "the alphabet (amino acids)")
    proj = model.project.detach().to(torch.float64)
    _, keep = model.features(ids[None])
    keep = keep[0]

    def value(tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = ids.repeat(len(tokens), 1)
        batch[torch.arange(len(tokens)), positions] = tokens
        f, _ = model.features(batch, torch.float64)
        f = f[torch.arange(len(tokens)), positions]
        return f @ proj.T, gamma(f.shape[-1]) * (f.abs() @ proj.abs().T)

    h = _one_hot_form(value, ids, symbols, m)
    plans = [_sceptr_plan(model, layer, torch.nonzero(keep).flatten()) for layer in model.layers]
    cols = alpha_ids - FIRST_RESIDUE

    def head(t: Affine, fresh: int) -> Affine:
        return linear(t, model.head_weight.detach()[cols], model.head_bias.detach()[cols])

    return h, h, plans, head


def propagate(model, frame_tokens: Sequence[int], site: int, allowed: Mapping[int, Sequence[int]],
              alphabet: Sequence[int], *, fresh: int | None = None) -> Propagation:
    """Affine forms through a ``BertForMaskedLM`` or a SCEPTR masked LM for every input with
    ``allowed[k]`` at the free positions k (the other positions as in ``frame_tokens``, which holds
    [MASK] at ``site``), up to the logits of the ``alphabet`` tokens at ``site``. float64, no autograd.

    ``fresh``: (default :data:`FRESH`) how many remainders each nonlinear step (attention probabilities, activation, each
    LayerNorm's rsqrt and output) moves to fresh noise symbols (:func:`refresh`; 0: every error stays
    in the interval remainders); the hidden state keeps at most 4 ``fresh`` of them between layers
    (:func:`compact`)."""
    fresh = FRESH if fresh is None else fresh
    if isinstance(fresh, bool) or not isinstance(fresh, int) or fresh < 0:
        raise ValueError(f"fresh must be a non-negative integer, got {fresh!r}")
    kind = _check_model(model)
    symbols = _symbols(frame_tokens, site, allowed)
    m = sum(len(t) - 1 for _, t in symbols)
    ids = torch.as_tensor([int(t) for t in frame_tokens], dtype=torch.long)
    alpha_ids = torch.as_tensor(list(alphabet), dtype=torch.long)
    network = _bert_network if kind == "bert" else _sceptr_network
    with torch.no_grad():
        e0, h, plans, head = network(model, ids, symbols, m, alpha_ids)
        stats: list[dict] = [{}]
        hidden = [h]
        for plan in plans:
            st: dict = {}
            h = _encoder_layer(plan, compact(h, 4 * fresh), st, fresh)
            stats.append(st)
            hidden.append(h)
        logits = head(unsqueeze(Affine(h.c[site], h.g[site], h.r[site], h.groups), 0), fresh)
        logits = Affine(logits.c[0], logits.g[0], logits.r[0], logits.groups)
    return Propagation(symbols, e0, hidden, logits, stats)


def _take(x: Affine, rows: torch.Tensor | None) -> Affine:
    """The rows (positions) ``rows`` of a (positions, ...) form (all of them for None)."""
    return x if rows is None else Affine(x.c[rows], x.g[rows], x.r[rows], x.groups)


def _encoder_layer(plan: LayerPlan, h: Affine, st: dict, fresh: int = 0) -> Affine:
    """One :class:`LayerPlan`: self-attention + dense + residual + LayerNorm, then the MLP + residual +
    LayerNorm; up to ``fresh`` remainders of each nonlinear step become fresh symbols."""
    length, hidden = h.c.shape
    heads = plan.heads
    dh = hidden // heads

    def split(x: Affine) -> Affine:  # (L, H*dh) -> (H, L, dh)
        n = x.c.shape[0]
        return Affine(x.c.view(n, heads, dh).transpose(0, 1), x.g.view(n, heads, dh, -1).transpose(0, 1),
                      x.r.view(n, heads, dh).transpose(0, 1), x.groups)

    kv = _take(h, plan.keep)
    q = split(scale(linear(h, *plan.query), plan.scaling))
    k = split(linear(kv, *plan.key))
    v = split(linear(kv, *plan.value))
    scores = bilinear(q, k, "hqd,hkd->hqk", dh)
    lo, hi = scores.bounds()
    st["score_width"] = float((hi - lo).max())
    probs = refresh(softmax(scores, -1), fresh)
    plo, phi = probs.bounds()
    st["prob_width"] = float((phi.clamp(max=1) - plo.clamp(min=0)).max())
    ctx = bilinear(probs, v, "hqk,hkd->hqd", kv.c.shape[0])
    ctx = Affine(ctx.c.transpose(0, 1).reshape(length, hidden), ctx.g.transpose(0, 1).reshape(length, hidden, -1),
                 ctx.r.transpose(0, 1).reshape(length, hidden), ctx.groups)
    a = layer_norm(add(linear(ctx, *plan.out), h), *plan.norm1, st, fresh)
    pre = linear(a, *plan.inner)
    mid = refresh(gelu(pre) if plan.act == "gelu" else relu(pre), fresh)
    lo, hi = mid.bounds()
    st["mlp_width"] = float((hi - lo).max())
    return layer_norm(add(linear(mid, *plan.outer), a), *plan.norm2, st, fresh)


# ---------------------------------------------------------------------------- conditionals and influence
def probability_bounds(logits: Affine, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Sound [lower, upper] of softmax(logits / T) per entry, clipped to [0, 1]."""
    lo, hi = softmax(unsqueeze(logits, 0), -1, temperature).bounds()
    return lo[0].clamp(0.0, 1.0).numpy(), hi[0].clamp(0.0, 1.0).numpy()


def conditional_bounds(model, frame_tokens: Sequence[int], site: int, allowed: Mapping[int, Sequence[int]],
                       temperature: float = 1.0, *, alphabet: Sequence[int], fresh: int | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Sound (lower, upper) arrays over the alphabet: lower[a] <= p_site(a | x) <= upper[a] for every
    input x with x_k in ``allowed[k]`` at each free position k != site, where
    p_site(a | x) = softmax_a(logit_a(x with [MASK] at site) / T) over the ``alphabet`` token ids
    (as :class:`~mlmix.empirical.models.mlm.MaskedLMConditionals` computes it). ``frame_tokens`` are the
    full input ids (specials included) with [MASK] at ``site``; positions are input positions."""
    prop = propagate(model, frame_tokens, site, allowed, alphabet, fresh=fresh)
    return probability_bounds(prop.logits, check_temperature(temperature))


def _osc_upper(logits: Affine, cols: slice) -> float:
    """Upper bound on max_{a,b} sup (delta_a - delta_b) over pairs of inputs that differ only in the
    symbols ``cols`` (one position): delta = logits(x') - logits(x) = 2 G(lambda' - lambda) + e' - e,
    with lambda a one-hot over the position's symbols beyond the first (lambda = 0 for the first)."""
    g = logits.g[:, cols]  # (V, s-1)
    h = g[:, None, :] - g[None, :, :]  # (V, V, s-1)
    zero = torch.zeros(h.shape[:2] + (1,), dtype=torch.float64)
    hz = torch.cat([h, zero], -1)
    spread = 2 * (hz.max(-1).values - hz.min(-1).values)
    r = logits.radius()  # the fresh symbols take unrelated values at x and x'
    osc = spread + 2 * (r[:, None] + r[None, :])
    s = float(osc.max()) * (1 + gamma(g.shape[-1] + 4)) + TINY
    return s if math.isfinite(s) else math.inf


def influence_upper(model, frame_tokens: Sequence[int], site: int, other: int, allowed: Mapping[int, Sequence[int]],
                    temperature: float = 1.0, *, alphabet: Sequence[int], fresh: int | None = None) -> float:
    """A sound upper bound on rho_ij = sup TV(p_i(. | x), p_i(. | x')) over inputs x, x' in the set
    that differ only at position j = ``other`` (i = ``site``): the least of

    * tanh(Delta / (4T)) (paper G Lemma 6), Delta >= sup osc_a [s_a(x') - s_a(x)] from the logits'
      affine form: the generators of j's symbols give the exact affine part, the remainders 2 r;
    * sum_a max(0, upper_a - lower_a) and 1 - sum_a lower_a from :func:`conditional_bounds`
      (TV = sum_a (p_a - q_a)^+ = 1 - sum_a min(p_a, q_a));
    * 1.
    """
    T = check_temperature(temperature)
    if other == site:
        raise ValueError("rho_ij needs two different positions i != j")
    if other not in allowed:
        raise ValueError(f"position {other} is not free (not in allowed)")
    return _influence_of(propagate(model, frame_tokens, site, allowed, alphabet, fresh=fresh), other, T)


def _influence_of(prop: "Propagation", other: int, T: float) -> float:
    """The bound of :func:`influence_upper` for position ``other`` from the propagated forms of the
    masked site (one propagation serves every j)."""
    col, cols = 0, slice(0, 0)
    for pos, toks in prop.symbols:
        if pos == other:
            cols = slice(col, col + len(toks) - 1)
        col += len(toks) - 1
    if cols.stop == cols.start:
        return 0.0  # a single token at j: x = x'
    delta = _osc_upper(prop.logits, cols)
    lemma6 = math.tanh(delta / (4 * T)) * (1 + FUNC_REL) + TINY if math.isfinite(delta) else 1.0
    lower, upper = probability_bounds(prop.logits, T)
    n = lower.size
    via_box = float(np.maximum(upper - lower, 0).sum()) * (1 + gamma(n))
    via_min = (1.0 - float(lower.sum()) * (1 - gamma(n))) * (1 + gamma(2))
    return float(min(1.0, lemma6, via_box, via_min))


def layer_widths(model, frame_tokens: Sequence[int], site: int, allowed: Mapping[int, Sequence[int]],
                 alphabet: Sequence[int], fresh: int | None = None) -> list[dict]:
    """Per layer (0 = the embeddings' LayerNorm), how wide the relaxation is: max and mean width of the
    hidden states' interval hull, the largest attention-score and probability widths, the largest
    MLP (GELU output) width and the smallest certified LayerNorm variance; a last row for the logits."""
    prop = propagate(model, frame_tokens, site, allowed, alphabet, fresh=fresh)
    rows = []
    for k, (h, st) in enumerate(zip(prop.hidden, prop.stats)):
        lo, hi = h.bounds()
        w = hi - lo
        rows.append({"layer": k, "width_max": float(w.max()), "width_mean": float(w.mean()),
                     "score_width": st.get("score_width"), "prob_width": st.get("prob_width"),
                     "mlp_width": st.get("mlp_width"), "var_lower": min(st.get("var_lower", [math.nan]))})
    lo, hi = prop.logits.bounds()
    rows.append({"layer": "logits", "width_max": float((hi - lo).max()), "width_mean": float((hi - lo).mean()),
                 "score_width": None, "prob_width": None, "mlp_width": None, "var_lower": None})
    return rows


# ---------------------------------------------------------------------------- mlmix sources
def _source_call(source, site: int, allowed_symbols: Mapping[int, Sequence[int]] | None):
    """(model, frame token ids with [MASK] at the site's input position, input site, allowed token
    ids per input position, alphabet ids) of a MaskedLMConditionals source; free sites not in
    ``allowed_symbols`` range over the whole alphabet."""
    n = source.space.length
    site = source.space.check_site(int(site))
    slots = [int(s) for s in source.slots.tolist()]
    support = [int(t) for t in source.support_ids.tolist()]
    tokens = [int(t) for t in source.token_ids(torch.zeros((1, n), dtype=torch.long))[0].tolist()]
    tokens[slots[site]] = int(source.mask_id)
    allowed_symbols = {} if allowed_symbols is None else allowed_symbols
    allowed = {}
    for k in range(n):
        if k == site:
            continue
        syms = allowed_symbols.get(k, range(len(support)))
        syms = [int(s) for s in syms]
        if not syms or min(syms) < 0 or max(syms) >= len(support):
            raise ValueError(f"allowed symbols at site {k} must be a non-empty subset of 0..{len(support) - 1}")
        allowed[slots[k]] = [support[s] for s in syms]
        tokens[slots[k]] = allowed[slots[k]][0]
    return source.model, tokens, slots[site], allowed, support, slots


def source_conditional_bounds(source, site: int, allowed_symbols: Mapping[int, Sequence[int]] | None = None,
                              fresh: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`conditional_bounds` for a MaskedLMConditionals source: bounds on pi_site^T(. | x) over
    the symbols, for every context with x_k in ``allowed_symbols[k]`` (default: every symbol)."""
    model, tokens, pos, allowed, support, _ = _source_call(source, site, allowed_symbols)
    return conditional_bounds(model, tokens, pos, allowed, source.temperature, alphabet=support, fresh=fresh)


def source_influence_upper(source, site: int, other: int,
                           allowed_symbols: Mapping[int, Sequence[int]] | None = None, fresh: int | None = None) -> float:
    """:func:`influence_upper` for a MaskedLMConditionals source (sites i = ``site``, j = ``other``)."""
    model, tokens, pos, allowed, support, slots = _source_call(source, site, allowed_symbols)
    j = source.space.check_site(int(other))
    return influence_upper(model, tokens, pos, slots[j], allowed, source.temperature, alphabet=support, fresh=fresh)


def source_influence_row(source, site: int, fresh: int | None = None) -> np.ndarray:
    """:func:`influence_upper` of a MaskedLMConditionals source for every j at once (row i = ``site``,
    zero at j = i, every symbol allowed at every free site): one propagation of the masked site."""
    model, tokens, pos, allowed, support, slots = _source_call(source, site, None)
    prop = propagate(model, tokens, pos, allowed, support, fresh=fresh)
    T = check_temperature(source.temperature)
    return np.array([0.0 if j == site else _influence_of(prop, slots[j], T) for j in range(source.space.length)])


def certify_relaxation(source) -> dict | None:
    """The ``relaxation`` hook of :func:`mlmix.empirical.model_constants.certify.certify`: ``rho_upper`` (n x n), the bound of
    :func:`source_influence_row` on every rho_ij over every context of the frame, for a masked LM that
    is a ``BertForMaskedLM`` or SCEPTR (:func:`_check_model`); None for any other source, and None as soon as a
    row holds a vacuous bound (>= 1: the relaxation has lost the relation, so the other rows would cost
    their propagation for nothing; the bracket keeps TV <= 1). Fresh symbols (:data:`FRESH`) only on models
    of hidden size at most :data:`FRESH_WIDTH_LIMIT`, where they were measured to pay."""
    model = getattr(source, "model", None)
    if model is None or not hasattr(source, "slots"):
        return None
    try:
        _check_model(model)
    except ValueError:
        return None
    n = source.space.length
    fresh = FRESH if int(model.config.hidden_size) <= FRESH_WIDTH_LIMIT else 0
    upper = np.zeros((n, n))
    for i in range(n):
        upper[i] = np.minimum(source_influence_row(source, i, fresh=fresh), 1.0)
        if (np.delete(upper[i], i) >= 1.0).any():
            return None
    return {"rho_upper": upper, "method": "affine-arithmetic relaxation of the network"}
