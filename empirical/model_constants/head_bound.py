"""A certified upper bound of every score oscillation Delta_ij of a masked LM, from its head's weights alone.

A BERT-family masked LM's logits are an affine map of a normalised state: l(x) = W (gamma o u(x)) + c, with
u = (y - mean y) / sqrt(var y + eps) the LayerNorm of some state y (population variance, eps >= 0), W the
decoder's rows over the alphabet, gamma the norm's weight and c collecting its bias and the decoder's. Whatever
the context, ||u||_2^2 = d var / (var + eps) <= d and sum(u) = 0 (for RMSNorm, u = y / sqrt(mean y^2 + eps):
||u||_2 <= sqrt(d), no sum constraint). So for tokens a, b with w_ab = gamma o (W_a - W_b) (c cancels):

    (l_a - l_b)(x) - (l_a - l_b)(y) = w_ab . (u(x) - u(y)) <= 2 sqrt(d) ||P0 w_ab||_2,

P0 the projection off the all-ones vector (the identity for RMSNorm), attained when u(x) and u(y) are
+-sqrt(d) P0 w_ab / ||P0 w_ab||. The oscillation of paper G (THEOREMS.md 1.19) is
osc_v(s_i(v | x) - s_i(v | y)) = max_{a, b} [(l_a - l_b)(x) - (l_a - l_b)(y)], hence

    Delta_ij <= H = 2 sqrt(d) max_{a, b in V} ||P0 (gamma o (W_a - W_b))||_2

for every pair of sites, every frame and every n: 0 forward passes. Lemma 6 (rho_ij(T) <= tanh(Delta_ij /
(4T))) and Corollary 7 (T* = (1/4) max_j sum_i Delta_ij <= (n - 1) H / 4) turn it into upper ends of rho_ij,
rho, alpha and T* (:func:`head_bound_upper`, the ``head_bound`` hook of
:func:`mlmix.empirical.model_constants.certify.certify`).

It bounds the network in exact arithmetic on its stored weights (float32 or bfloat16 weights are exact in
float64). The float64 evaluation is rounded outward (:func:`oscillation_bound`): each pair's norm carries
the a-priori rounding of its sums, so H is an upper end, not an estimate.

Heads that qualify (:func:`head_parts`) are those whose family's head adapter
(:data:`~mlmix.empirical.models.families.MODELS`, :class:`~mlmix.empirical.models.families.HeadAdapter`) names
the LayerNorm and the decoder, or a reader: ``BertForMaskedLM`` (``cls.predictions.transform.LayerNorm``, then
the decoder), ``RobertaForMaskedLM`` / ``XLMRobertaForMaskedLM`` and ``EsmForMaskedLM``
(``lm_head.layer_norm``, then ``lm_head.decoder``), ``ModernBertForMaskedLM`` (``head.norm``, then
``decoder``) and SCEPTR (:func:`sceptr_parts`). Any other model: :class:`HeadNotNormalised` with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlmix.empirical.models.families import head_adapter, known_heads, resolve
from mlmix.theory.results import EPS, Result


class HeadNotNormalised(ValueError):
    """The model's logits are not known to be an affine map of a normalised state: no head bound."""


@dataclass(frozen=True)
class HeadParts:
    """What the bound needs of a head: the norm's weight ``gamma`` (d,), the decoder rows ``rows`` (|V|, d) of
    the alphabet (float64 copies of the stored weights), whether the norm centres (LayerNorm: True; RMSNorm:
    False), where they were read, and the logits' constant part ``offset`` (|V|,): c = W beta + the biases
    (l = W (gamma o u) + c), computed in float64 within ``offset_error`` (:func:`_offset`)."""

    gamma: np.ndarray
    rows: np.ndarray
    centred: bool
    where: str
    offset: np.ndarray
    offset_error: np.ndarray


@dataclass(frozen=True)
class HeadBound:
    """H, the certified upper bound of every Delta_ij (module docstring), the alphabet pair (a, b) attaining
    the maximum over pairs, the width d and where the head was read."""

    delta: float
    pair: tuple[int, int]
    width: int
    where: str

    def result(self) -> Result:
        """H as a Result: the enclosure [0, H] of every Delta_ij."""
        return Result.interval("Delta_ij (head bound)", 0.0, self.delta, "LayerNorm head bound",
                               "2 sqrt(d) max_{a,b} ||P0(gamma o (W_a - W_b))||, rounded up: every Delta_ij "
                               "of every frame and every n is at most it", pair=list(self.pair), width=self.width,
                               where=self.where)


def _attribute(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _float64(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().double().numpy()


def head_parts(model: Any, alphabet_ids: np.ndarray) -> HeadParts:
    """The normalised state the logits of ``model`` read (:class:`HeadParts`), the decoder rows at the token ids
    ``alphabet_ids``, as the head adapter of the model's family says
    (:func:`~mlmix.empirical.models.families.head_adapter`: a ``parts`` reader, or the attribute paths of the
    LayerNorm, the decoder and a bias after it); :class:`HeadNotNormalised` (a ValueError) with the reason when
    the head does not qualify."""
    name = type(model).__name__
    ids = np.asarray(alphabet_ids, dtype=np.int64)
    adapter = head_adapter(model)
    if adapter is not None and adapter.parts is not None:
        return resolve(adapter.parts)(model, ids)
    if adapter is None or adapter.norm is None or adapter.decoder is None:
        raise HeadNotNormalised(f"{name}'s head is not known to read a normalised state (known: "
                                f"{', '.join(known_heads())})")
    norm_path, decoder_path, extra_path = adapter.norm, adapter.decoder, adapter.bias
    norm, decoder = _attribute(model, norm_path), _attribute(model, decoder_path)
    if norm is None or decoder is None or getattr(decoder, "weight", None) is None:
        raise HeadNotNormalised(f"{name} has no {norm_path} then {decoder_path}")
    kind = type(norm).__name__
    if kind != "LayerNorm":
        raise HeadNotNormalised(f"{name}'s {norm_path} is a {kind}, not a LayerNorm")
    eps = float(norm.eps)
    if not eps >= 0:
        raise HeadNotNormalised(f"{name}'s {norm_path} has eps {eps!r} < 0: ||u|| <= sqrt(d) needs eps >= 0")
    shape = tuple(getattr(norm, "normalized_shape", ()))
    if len(shape) != 1:
        raise HeadNotNormalised(f"{name}'s {norm_path} does not normalise one axis")
    gamma = np.ones(shape[0]) if norm.weight is None else _float64(norm.weight)
    rows = _float64(decoder.weight)[ids]
    bias = np.zeros(len(ids))
    for b in (getattr(decoder, "bias", None), _attribute(model, extra_path) if extra_path else None):
        bias = bias + (0.0 if b is None else _float64(b)[ids])
    beta = np.zeros(shape[0]) if getattr(norm, "bias", None) is None else _float64(norm.bias)
    return HeadParts(gamma, rows, True, f"{norm_path} -> {decoder_path}", *_offset(rows, beta, bias))


def sceptr_parts(model: Any, ids: np.ndarray) -> HeadParts:
    """SCEPTR's head (post-LN encoder layers: its linear head reads the last layer's ``norm2`` output), the
    ``parts`` reader of its head adapter."""
    # deferred: sceptr imports tokenizers
    from mlmix.empirical.models.sceptr import FIRST_RESIDUE

    if not len(model.layers):
        raise HeadNotNormalised("SCEPTR with no encoder layer: its head reads the embedding, not a LayerNorm")
    last = model.layers[-1]
    rows = _float64(model.head_weight)[ids - FIRST_RESIDUE]
    return HeadParts(_float64(last.norm2_weight), rows, True, f"layers[{len(model.layers) - 1}].norm2 -> head_weight",
                     *_offset(rows, _float64(last.norm2_bias), _float64(model.head_bias)[ids - FIRST_RESIDUE]))


def _offset(rows: np.ndarray, beta: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """c = W beta + bias, the logits' part that does not depend on the context (float64), and a bound of its
    rounding: 2 (d + 8) u (|W| |beta| + |bias|) (a dot product of d terms and one addition)."""
    d = rows.shape[1]
    return rows @ beta + bias, 2.0 * (d + 8) * EPS * (np.abs(rows) @ np.abs(beta) + np.abs(bias))


def pair_norms_upper(gamma: np.ndarray, rows: np.ndarray, centred: bool = True) -> np.ndarray:
    """(|V|, |V|) upper bounds of ||P0 (gamma o (W_a - W_b))||_2 (P0 the identity when not ``centred``), rounded
    outward: with N the computed norm and M the computed ||gamma o (W_a - W_b)||, the exact norm is at most
    (N + K M)(1 + K), K = 2 (d + 8) u (the differences and products: 3u relative; the mean: gamma_d ||w||
    / sqrt(d) per coordinate; the sums of squares and the root: gamma_d relative)."""
    g = np.asarray(gamma, dtype=np.float64)
    W = np.asarray(rows, dtype=np.float64)
    d = g.size
    w = g * (W[:, None, :] - W[None, :, :])
    r = w - w.mean(axis=-1, keepdims=True) if centred else w
    N = np.sqrt((r * r).sum(axis=-1))
    M = np.sqrt((w * w).sum(axis=-1))
    K = 2.0 * (d + 8) * EPS
    return (N + K * M) * (1 + K)


def oscillation_bound(parts: HeadParts) -> HeadBound:
    """H = 2 sqrt(d) max_{a, b} ||P0 (gamma o (W_a - W_b))||_2 (module docstring), rounded up."""
    norms = pair_norms_upper(parts.gamma, parts.rows, parts.centred)
    a, b = np.unravel_index(int(np.argmax(norms)), norms.shape)
    d = parts.gamma.size
    h = math.nextafter(2.0 * math.sqrt(d) * float(norms[a, b]) * (1 + 4 * EPS), math.inf)
    return HeadBound(h, (int(a), int(b)), d, parts.where)


def _reach(parts: HeadParts) -> np.ndarray:
    """(|V|, |V|) upper ends r_vw of l_v - l_w over every reachable logit vector (the ellipsoid's image):
    c_v - c_w + sqrt(d) ||P0(gamma o (W_v - W_w))||, the offsets moved by their rounding error."""
    d = parts.gamma.size
    return (parts.offset[:, None] - parts.offset[None, :] + parts.offset_error[:, None]
            + parts.offset_error[None, :]
            + math.sqrt(d) * pair_norms_upper(parts.gamma, parts.rows, parts.centred) * (1 + 4 * EPS))


def _slack(q: int) -> float:
    """A relative bound of the rounding of a sum of q exponentials (each within a few units): at least 1e-12."""
    return max(1e-12, 4.0 * (q + 8) * EPS)


def mass_upper(parts: HeadParts, temperature: float) -> np.ndarray:
    """pi_v(T) = 1 / sum_w exp(-r_vw / T) (:func:`_reach`), rounded up: pi_v >= p_v(T) for every reachable
    logit vector (p_v = 1 / sum_w exp((l_w - l_v) / T) and l_w - l_v >= -r_vw)."""
    reach, T = _reach(parts), float(temperature)
    with np.errstate(over="ignore"):
        total = np.exp(-reach / T).sum(axis=1)
    return np.minimum(1.0 / total * (1 + _slack(reach.shape[0])) + 1e-300, 1.0)


def mass_envelope(parts: HeadParts, temperature: float) -> np.ndarray:
    """pibar_v(T) >= sup_{T' >= T} pi_v(T') (:func:`mass_upper`), rounded up; non-increasing in T in exact
    arithmetic (a supremum over a shrinking set). With t = 1/T' and f_v(t) = sum_w exp(-r_vw t),
    pibar_v(T) = 1 / min_{t in [0, 1/T]} f_v(t). f_v is convex (a sum of exponentials), so for any t* in
    [0, t0], t0 = 1/T, min f_v >= f_v(t*) - |f_v'(t*)| max(t*, t0 - t*) (the tangent at t*; t* from bisection
    on the sign of f_v', increasing, so the tangent is nearly flat), and termwise min f_v >= sum_w
    min(1, exp(-r_vw t0)); the larger of the two lower ends, less their rounding, is used."""
    reach = _reach(parts)
    q, t0 = reach.shape[0], 1.0 / float(temperature)
    k = _slack(q)
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = np.zeros(q), np.full(q, t0)
        for _ in range(64):  # the sign of f_v' at the midpoints; f_v' increases
            mid = 0.5 * (lo + hi)
            rising = -(reach * np.exp(-reach * mid[:, None])).sum(axis=1) >= 0
            lo, hi = np.where(rising, lo, mid), np.where(rising, mid, hi)
        t = 0.5 * (lo + hi)
        E = np.exp(-reach * t[:, None])
        slope = np.abs((reach * E).sum(axis=1)) + k * (np.abs(reach) * E).sum(axis=1)
        tangent = E.sum(axis=1) * (1 - k) - slope * np.maximum(t, t0 - t)
        termwise = np.minimum(1.0, np.exp(-reach * t0)).sum(axis=1) * (1 - k)
    low = np.where(np.isfinite(tangent), np.maximum(tangent, termwise), termwise)
    return np.minimum(1.0 / low * (1 + k) + 1e-300, 1.0)


def influence_upper(parts: HeadParts, temperature: float, *, monotone: bool = False) -> float:
    """An upper bound of every rho_ij(T) from the head alone, tighter than Lemma 6 at high T:

        rho_ij(T) <= (sqrt(d) / T) sqrt(lambda_max(sum_v pi_v (a_v - m)(a_v - m)^T)),

    a_v = P0(gamma o W_v), m any vector (here the pi-weighted mean), pi_v = 1 / sum_w exp(-r_vw / T) with
    r_vw = c_v - c_w + sqrt(d) ||P0(gamma o (W_v - W_w))|| the largest l_v - l_w over the ellipsoid, so that
    pi_v >= p_v for every reachable logit vector (:func:`mass_upper`). Why: the logits of two contexts are l and
    l + delta with delta = A z, z = u(y) - u(x), ||z|| <= 2 sqrt(d); along l + t delta (reachable: the image of
    the ellipsoid is convex) the L1 speed of softmax(./T) is MAD_p(delta) / T <= sqrt(z^T Cov_p(a) z) / T, and
    Cov_p(a) <= sum_v p_v (a_v - m)(a_v - m)^T <= sum_v pi_v (a_v - m)(a_v - m)^T; TV is half the L1 path length.
    Rounded up: the offsets by their error, pi as in :func:`mass_upper`, lambda_max by 2 (d + |V| + 8) u of the
    trace and the rows' rounding. Capped at 1.

    ``monotone``: pi_v replaced by its envelope pibar_v(T) >= sup_{T' >= T} pi_v(T') (:func:`mass_envelope`):
    still an upper bound at T, and non-increasing in T, so it can serve a bisection on T (Theorem 5's threshold,
    :func:`~mlmix.empirical.model_constants.certify.theorem5_threshold`). Proof: for weights w <= w'
    (entrywise) and m_w the w-weighted mean, sum w (a - m_w)(a - m_w)^T <= sum w (a - m_w')(a - m_w')^T <=
    sum w' (a - m_w')(a - m_w')^T in the PSD order (the weighted mean minimises the scatter), so lambda_max, the
    trace and the rows' term are non-decreasing in the weights; pibar_v decreases in T and so does 1/T. The
    bound with the plain pi_v is not monotone in general, and neither is the supremum of the TV over the
    reachable logits: the offsets c do not scale with 1/T (with c = (100, 0, 0) and the other two logits moving
    by +-1, the TV is about e^-100 at T = 1 and about 0.1 at T = 50). The computed value is an upper end of the
    exact-arithmetic envelope at every T, which is what a bisection needs."""
    T = float(temperature)
    g, W = parts.gamma, parts.rows
    d, q = g.size, W.shape[0]
    pi = mass_envelope(parts, T) if monotone else mass_upper(parts, T)
    a = g * W
    a = a - a.mean(axis=1, keepdims=True) if parts.centred else a
    centre = (pi[:, None] * a).sum(axis=0) / pi.sum()
    B = np.sqrt(pi)[:, None] * (a - centre)
    gram = B @ B.T
    K = 2.0 * (d + q + 8) * EPS
    lam = max(float(np.linalg.eigvalsh(gram).max()), 0.0) + 2 * K * float(np.trace(gram))
    norms = np.linalg.norm(a, axis=1)
    rows_error = K * (norms + norms.max())  # ||centre|| <= max_v ||a_v||: the same at every T
    S = math.sqrt(lam) + math.sqrt(float((pi * rows_error**2).sum()))
    return min(1.0, math.nextafter(math.sqrt(d) / T * S * (1 + 8 * EPS), math.inf))


def source_head_bound(source: Any) -> HeadBound:
    """:func:`oscillation_bound` of a masked LM source (a ``MaskedLMConditionals`` or SCEPTR's), over its
    alphabet; :class:`HeadNotNormalised` when it has no model or its head does not qualify."""
    model, ids = getattr(source, "model", None), getattr(source, "support_ids", None)
    if model is None or ids is None:
        raise HeadNotNormalised(f"{type(source).__name__} is not a masked LM source (no model weights to read)")
    return oscillation_bound(head_parts(model, np.asarray(ids)))


def head_bound_upper(source: Any) -> dict:
    """The ``head_bound`` hook of :func:`~mlmix.empirical.model_constants.certify.certify`: ``delta_upper``
    (n x n, H off the diagonal, 0 on it), ``rho_upper`` (the ellipsoid bound at the source's temperature),
    ``rho_upper_at`` (T -> n x n: the ellipsoid bound's monotone envelope, valid at every T and non-increasing
    in T, for Theorem 5's threshold), ``rho_upper_at_method`` and ``method``; or ``delta_upper`` None and
    ``method`` saying why the bound is not available."""
    try:
        bound = source_head_bound(source)
    except HeadNotNormalised as err:
        return {"delta_upper": None, "method": f"head bound not available: {err}"}
    n = source.space.length
    off = ~np.eye(n, dtype=bool)
    parts = head_parts(source.model, np.asarray(source.support_ids))
    rho = influence_upper(parts, source.temperature)
    return {"delta_upper": np.where(off, bound.delta, 0.0), "rho_upper": np.where(off, rho, 0.0), "bound": bound,
            "rho_upper_at": lambda T: np.where(off, influence_upper(parts, T, monotone=True), 0.0),
            "rho_upper_at_method": "the head's ellipsoid bound (its non-increasing envelope in T)",
            "method": f"LayerNorm head bound Delta_ij <= {bound.delta:.6g}, rho_ij <= {rho:.6g} "
                      f"(0 passes; {bound.where})"}
