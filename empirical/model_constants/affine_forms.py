"""Affine forms with a certified remainder: the arithmetic of the sound relaxation of a masked LM
(:mod:`mlmix.empirical.model_constants.relaxation`).

A value computed over a set of inputs is carried as an *affine form*

    v(x) = c + sum_a g_a eps_a(x) + e(x),   |e(x)| <= r,

with one noise symbol eps_b per (free position, token beyond its first): for a position with
allowed tokens t_0 .. t_{s-1}, any function of x_k alone (its embedding, their LayerNorm) is
v(t_0) + sum_{b >= 1} lambda_b (v(t_b) - v(t_0)) with lambda_b = 1{x_k = t_b} = (1 + eps_b) / 2. The
eps of a context are known (eps_b = +1 for its token, -1 for the others), and a form is only ever
claimed at those points: each eps_b is +-1 and at most one symbol of a position is +1. So a form
holds *pointwise* (value(x) lies in c + g . eps(x) +- r), its range is the exact range of the
affine part over those points, widened by r, and products of symbols of one position are exact.
Relations between positions, heads and layers are kept in g; only the errors of the nonlinear steps,
the products of symbols of two positions and the rounding go to the interval remainder r (one per
coordinate). The embeddings and their LayerNorm are functions of one position each, hence exact.

Relational remainders (DeepZ / CROWN style, :func:`refresh`): after each nonlinear step (attention
probabilities, GELU / ReLU, each LayerNorm's rsqrt and output) the ``fresh`` largest remainders move
to fresh noise symbols eps_new in [-1, 1], appended after the positions' symbols and shared by every
later form, so that W_2 W_1, the residual stream and LayerNorm's centring act on them signed instead
of through |W|. Products with a fresh symbol are bounded by |.| (eps_new^2 in [0, 1]); a form then
holds pointwise as value(x) in c + g_pos . eps(x) +- (r + |g_fresh|_1) (:meth:`Affine.radius`).
Between layers the hidden state keeps the 4 ``fresh`` heaviest (:func:`compact`: the rest go back
to r). ``fresh = 0`` is the plain remainder arithmetic; with the default :data:`~mlmix.empirical.model_constants.relaxation.FRESH` = 64 no hidden
state, logit or conditional of ``benchmarks/bench_relaxation.py`` (random BERT, AntiBERTy, both
SCEPTRs) was wider than without, at 10-70x the time.

The operations (each sound in real arithmetic, then widened for float64 rounding):

* linear maps (Q/K/V, dense layers, the decoder): exact on c and g, |W| r on the remainder;
* bilinear maps (Q K^T, probabilities times V, LayerNorm's variance and its scaling):
  B(x, y) = B(cx, cy) + [B(cx, gy) + B(gx, cy)] . eps + eps^T M eps + remainder, with
  M_ab = B(gx_a, gy_b); in eps^T M eps, eps_a^2 = 1 and, for two symbols of one position,
  eps_a eps_b = -1 - eps_a - eps_b (at most one is +1): both exact; the pairs of symbols of two
  positions add sum_{a<b} |M_ab + M_ba| to the remainder, which is at most
  |B|(|cx| + |gx|_1 + rx, ry) + |B|(rx, |cy| + |gy|_1);
* unary functions f (exp, 1/x, 1/sqrt(x), GELU) on the form's range [l, u]: a line alpha x + beta
  and a bound delta >= max |f(x) - alpha x - beta| on [l, u]. For the convex ones (exp, 1/x,
  1/sqrt) alpha is the chord's slope, the error's maximum sits at an end and its minimum is bounded
  below by the tangent at the (computed) touching point, so any rounding of alpha or of that point
  stays sound. For GELU = x Phi(x): the tangent at the midpoint m, delta = M2 h^2 / 2 with
  h = max |x - m| and M2 >= max |f''| = phi(x) |2 - x^2| on the interval, or the interval bound
  when that is smaller (GELU decreases to its minimum > -0.17 at x ~ -0.75 and increases after);
* LayerNorm: x - mean exact, var = mean(z^2) bilinear, its range also intersected with
  (rms(c + g . eps) -+ rms(r))^2 (Minkowski), then z * rsqrt(var + eps) bilinear;
* softmax over keys (and over the alphabet at the end) as p_k = 1 / sum_j exp(s_j - s_k): the
  differences keep the scores' relations, sum_j >= 1 (the j = k term is exactly 1).

Rounding: every operation adds gamma(n) = 2 (n + 8) 2^-53 times the magnitude of the terms it
summed (n the length of its sums: |fl(a . b) - a . b| <= gamma_n |a| . |b| in any summation order)
to r, which also covers the rounding of r itself; the transcendental functions (exp, erf, sqrt,
tanh of torch's float64) are assumed accurate to :data:`FUNC_REL` relative (they are within a few
ulp), which is added to every value they produce. A radius that overflows or turns NaN becomes
+inf (vacuous, never wrong). Final bounds are rounded outward by one ulp.

The network (BERT, SCEPTR) built from these operations, and the bounds on conditionals and influences,
are in :mod:`mlmix.empirical.model_constants.relaxation`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: Unit roundoff of float64.
_U = 2.0 ** -53
#: Assumed relative accuracy of torch's float64 exp, erf, sqrt, tanh (a few ulp in practice).
FUNC_REL = 1e-14
#: Smallest radius added by every operation (covers underflow to subnormals).
TINY = 2.0 ** -1000
#: Largest exp argument taken: above it the value is treated as unbounded (radius +inf).
_EXP_MAX = 700.0
#: Elements of the dense eps^T M eps matrices above which the cheaper bound |B|(|gx|_1, |gy|_1) is used.
_DENSE_QUAD = 2 ** 24
#: Global bound on |GELU''| = phi(x) |2 - x^2| (its maximum is 2 phi(0) = 0.79788...).
_GELU_M2 = 0.8
#: A lower bound on min GELU (= -0.16997... at x = -0.75179...).
_GELU_MIN = -0.17
_GELU_ARGMIN = -0.7517916243


def gamma(n: int) -> float:
    """2 (n + 8) u: twice the classical gamma_n bound for a sum of n products, plus slack."""
    return 2.0 * (n + 8) * _U


@dataclass
class Affine:
    """An affine form c + g . eps + [-r, r], elementwise, claimed at the feasible eps in {-1, 1}^m.

    ``c`` and ``r`` have the value's shape, ``g`` that shape plus (m,). float64 throughout. The
    symbols of the free positions come first (group >= 0); after them, *fresh* symbols (group -1,
    :func:`refresh`): one per remainder moved out of r, ranging over [-1, 1] with an unknown value at
    each context, shared by every form computed from that one so that its relations are kept.
    """

    c: torch.Tensor
    g: torch.Tensor
    r: torch.Tensor
    #: (m,) the free position (group) of each noise symbol; at most one symbol of a group is +1
    groups: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.c.shape)

    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact range of c + g . eps over the feasible noise (per group: every symbol -1, or one
        of them +1: -sum_G g + 2 max(0, max_G g) at most), widened by r and rounded outward."""
        up = torch.zeros_like(self.c)
        dn = torch.zeros_like(self.c)
        fresh = self.groups < 0
        for grp in torch.unique(self.groups[~fresh]).tolist():
            gg = self.g[..., self.groups == grp]
            base = -gg.sum(-1)
            up = up + base + 2 * gg.max(-1).values.clamp(min=0)
            dn = dn + base + 2 * gg.min(-1).values.clamp(max=0)
        if bool(fresh.any()):
            spread = self.g[..., fresh].abs().sum(-1)
            up, dn = up + spread, dn - spread
        err = gamma(self.g.shape[-1] + 4) * 3 * self.magnitude()
        lo = torch.nextafter(self.c + dn - self.r - err, torch.tensor(-math.inf, dtype=torch.float64))
        hi = torch.nextafter(self.c + up + self.r + err, torch.tensor(math.inf, dtype=torch.float64))
        bad = ~torch.isfinite(self.r)
        return torch.where(bad, -math.inf, lo), torch.where(bad, math.inf, hi)

    def magnitude(self) -> torch.Tensor:
        """|c| + |g|_1 + r: a bound on |value| (before rounding)."""
        return self.c.abs() + self.g.abs().sum(-1) + self.r

    def evaluate(self, eps: torch.Tensor) -> torch.Tensor:
        """c + g . eps, the centre of the pointwise enclosure at the free positions' noise values
        ``eps`` (the fresh symbols, unknown at a context, taken as 0: :meth:`radius` covers them)."""
        pad = self.g.shape[-1] - eps.shape[-1]
        return self.c + self.g @ torch.cat([eps.to(torch.float64), torch.zeros(pad, dtype=torch.float64)])

    def radius(self) -> torch.Tensor:
        """r + |g_fresh|_1: the value at a context lies within :meth:`evaluate` of its eps +- this."""
        fresh = self.groups < 0
        return self.r + self.g[..., fresh].abs().sum(-1) if bool(fresh.any()) else self.r

    @property
    def discrete(self) -> int:
        """The number of the free positions' symbols (the first columns of g)."""
        return int((self.groups >= 0).sum())


def _clean(r: torch.Tensor) -> torch.Tensor:
    """A radius with NaN and overflow turned into +inf (vacuous, never wrong)."""
    return torch.nan_to_num(r, nan=math.inf, posinf=math.inf)


def affine_form(c: torch.Tensor, g: torch.Tensor, r: torch.Tensor, slack: torch.Tensor, groups: torch.Tensor) -> Affine:
    """Assemble a form, adding the rounding slack to the remainder; unbounded entries get c = 0, g = 0."""
    r = _clean(r + slack + TINY)
    bad = ~torch.isfinite(r) | ~torch.isfinite(c) | ~torch.isfinite(g).all(-1)
    if bool(bad.any()):
        c = torch.where(bad, torch.zeros_like(c), c)
        g = torch.where(bad[..., None], torch.zeros_like(g), g)
        r = torch.where(bad, torch.full_like(r, math.inf), r)
    return Affine(c, g, r, groups)


def _align(x: Affine, y: Affine) -> tuple[Affine, Affine]:
    """x and y over the same symbols: the one with fewer fresh symbols gets zero generators for the
    other's later ones (fresh symbols are appended in order, so one list is a prefix of the other)."""
    mx, my = x.g.shape[-1], y.g.shape[-1]
    if mx == my:
        return x, y
    short, long_ = (x, y) if mx < my else (y, x)
    m = short.g.shape[-1]
    if not torch.equal(long_.groups[:m], short.groups):
        raise RuntimeError("forms over different noise symbols")  # never: symbols are appended in order
    pad = torch.zeros((*short.g.shape[:-1], long_.g.shape[-1] - m), dtype=torch.float64)
    short = Affine(short.c, torch.cat([short.g, pad], -1), short.r, long_.groups)
    return (short, long_) if mx < my else (long_, short)


def refresh(x: Affine, budget: int) -> Affine:
    """The ``budget`` largest finite remainders of x moved to fresh noise symbols (DeepZ / CROWN's
    relational remainders): entry e with remainder r_e becomes c_e + g_e . eps + r_e eps_new, eps_new
    in [-1, 1] (the same set of values, so sound as it stands), and every form later computed from it
    carries eps_new's coefficient instead of |coefficient| r_e, so W_2 W_1, the residual stream and
    LayerNorm's centring can cancel it. Exact: no arithmetic on the values."""
    flat = x.r.reshape(-1)
    usable = torch.isfinite(flat) & (flat > TINY * 4)
    k = min(int(budget), int(usable.sum()))
    if k <= 0:
        return x
    idx = torch.topk(torch.where(usable, flat, torch.full_like(flat, -1.0)), k).indices
    g_new = torch.zeros((flat.numel(), k), dtype=torch.float64)
    g_new[idx, torch.arange(k)] = flat[idx]
    r = flat.clone()
    r[idx] = 0.0
    return Affine(x.c, torch.cat([x.g, g_new.view(*x.c.shape, k)], -1), r.view(x.c.shape),
                  torch.cat([x.groups, torch.full((k,), -1, dtype=torch.long)]))


def compact(x: Affine, cap: int) -> Affine:
    """x with at most ``cap`` fresh symbols: those of least total |coefficient| over x's entries go
    back into the remainder (r += |g_a|, sound for any eps_a in [-1, 1]). Only for a form no other
    live form shares fresh symbols with (the hidden state between layers)."""
    md = x.discrete
    f = x.g.shape[-1] - md
    if f <= cap:
        return x
    weight = x.g[..., md:].abs().reshape(-1, f).sum(0)
    keep = torch.zeros(f, dtype=torch.bool)
    keep[torch.topk(weight, cap).indices] = True
    gf = x.g[..., md:]
    dropped = gf[..., ~keep].abs().sum(-1)
    r = _clean((x.r + dropped) * (1 + gamma(f)) + TINY)
    return Affine(x.c, torch.cat([x.g[..., :md], gf[..., keep]], -1), r,
                  torch.cat([x.groups[:md], torch.full((int(keep.sum()),), -1, dtype=torch.long)]))


# ---------------------------------------------------------------------------- linear operations
def linear(x: Affine, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Affine:
    """x W^T + b along the last axis (a ``torch.nn.Linear``)."""
    w = weight.to(torch.float64)
    wa = w.abs()
    c = x.c @ w.T
    g = torch.einsum("...dm,od->...om", x.g, w)
    r = x.r @ wa.T
    mag = x.magnitude() @ wa.T
    if bias is not None:
        b = bias.to(torch.float64)
        c = c + b
        mag = mag + b.abs()
    return affine_form(c, g, r, gamma(w.shape[1]) * mag, x.groups)


def add(x: Affine, y: Affine) -> Affine:
    """x + y (broadcasting)."""
    x, y = _align(x, y)
    return affine_form(x.c + y.c, x.g + y.g, x.r + y.r, gamma(2) * (x.magnitude() + y.magnitude()), x.groups)


def sub(x: Affine, y: Affine) -> Affine:
    """x - y (broadcasting)."""
    x, y = _align(x, y)
    return affine_form(x.c - y.c, x.g - y.g, x.r + y.r, gamma(2) * (x.magnitude() + y.magnitude()), x.groups)


def scale(x: Affine, a: torch.Tensor | float, b: torch.Tensor | float = 0.0) -> Affine:
    """a x + b, elementwise with broadcastable a, b."""
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return affine_form(a * x.c + b, a[..., None] * x.g if a.dim() else a * x.g, a.abs() * x.r,
                 gamma(2) * (a.abs() * x.magnitude() + b.abs()), x.groups)


def sum_last(x: Affine, axis: int = -1) -> Affine:
    """Sum over one value axis."""
    ax = axis % x.c.dim()
    n = x.c.shape[ax]
    return affine_form(x.c.sum(ax), x.g.sum(ax), x.r.sum(ax), gamma(n) * x.magnitude().sum(ax), x.groups)


def center(x: Affine) -> Affine:
    """x - mean(x) along the last axis (LayerNorm's first step), exact on c and g."""
    d = x.c.shape[-1]
    return affine_form(x.c - x.c.mean(-1, keepdim=True), x.g - x.g.mean(-2, keepdim=True),
                 x.r + x.r.mean(-1, keepdim=True),
                 gamma(d) * (x.magnitude() + x.magnitude().mean(-1, keepdim=True)), x.groups)


# ---------------------------------------------------------------------------- bilinear operations
def bilinear(x: Affine, y: Affine, spec: str, fan: int) -> Affine:
    """B(x, y) = einsum(spec, x, y) for forms over the same noise symbols (see the module docstring).

    ``spec`` is an einsum over the value axes only (e.g. ``"hqd,hkd->hqk"``); ``fan`` the number of
    products summed into each output entry (for the rounding slack).
    """
    x, y = _align(x, y)
    ins, out = spec.split("->")
    xs, ys = ins.split(",")
    m, md = x.g.shape[-1], x.discrete
    cc = torch.einsum(spec, x.c, y.c)
    gl = torch.einsum(f"{xs},{ys}z->{out}z", x.c, y.g) + torch.einsum(f"{xs}z,{ys}->{out}z", x.g, y.c)
    out_size = cc.numel()
    xd, yd = x.g[..., :md], y.g[..., :md]
    if md and out_size * md * md <= _DENSE_QUAD:
        # eps_a^2 = 1; two symbols of one position: eps_a eps_b = -1 - eps_a - eps_b (one-hot);
        # symbols of two positions: |eps_a eps_b| <= 1
        quad = torch.einsum(f"{xs}a,{ys}b->{out}ab", xd, yd)
        same = x.groups[:md, None] == x.groups[None, :md]
        pair = same & ~torch.eye(md, dtype=torch.bool)
        sym = quad + quad.transpose(-1, -2)
        shift = torch.diagonal(quad, dim1=-2, dim2=-1).sum(-1) - (quad * pair).sum((-2, -1))
        gl[..., :md] = gl[..., :md] - (sym * pair).sum(-1)
        qrad = torch.triu(sym.abs() * ~same, diagonal=1).sum((-2, -1))
    else:
        shift = torch.zeros_like(cc)
        qrad = torch.einsum(spec, xd.abs().sum(-1), yd.abs().sum(-1))
    if m > md:  # products with a fresh symbol: |eps_a eps_b| <= 1 (eps_a^2 in [0, 1] too)
        xf, yf = x.g[..., md:].abs().sum(-1), y.g[..., md:].abs().sum(-1)
        qrad = qrad + torch.einsum(spec, xf, yd.abs().sum(-1) + yf) + torch.einsum(spec, xd.abs().sum(-1), yf)
    xm, ym = x.magnitude(), y.magnitude()
    rem = torch.einsum(spec, xm, y.r) + torch.einsum(spec, x.r, y.c.abs() + y.g.abs().sum(-1))
    slack = gamma(fan + md * md + m + 2) * torch.einsum(spec, xm, ym)
    return affine_form(cc + shift, gl, qrad + rem, slack, x.groups)


# ---------------------------------------------------------------------------- unary functions
def _apply_line(x: Affine, alpha: torch.Tensor, beta: torch.Tensor, delta: torch.Tensor) -> Affine:
    """alpha x + beta + [-delta, delta], elementwise."""
    return affine_form(alpha * x.c + beta, alpha[..., None] * x.g, alpha.abs() * x.r + delta,
                 gamma(4) * (alpha.abs() * x.magnitude() + beta.abs()), x.groups)


def _convex_line(f, fprime, touch, lo: torch.Tensor, hi: torch.Tensor):
    """(alpha, beta, delta) with |f(x) - alpha x - beta| <= delta on [lo, hi], f convex there.

    alpha is the chord slope (or f' at the midpoint for a very narrow interval); e(x) = f(x) - alpha x
    is convex, so max e = max(e(lo), e(hi)) and min e >= e(t) + e'(t)(x - t) at any t (the tangent
    lies below), taken at t = touch(alpha) clamped to [lo, hi]. Every evaluation of f or f' is
    widened by FUNC_REL relative.
    """
    w = hi - lo
    mid = lo + w / 2
    flo, fhi = f(lo), f(hi)
    narrow = w <= 1e-7 * (1.0 + mid.abs())
    chord = (fhi - flo) / torch.where(narrow, torch.ones_like(w), w)
    alpha = torch.where(narrow, fprime(mid), chord)
    t = torch.minimum(torch.maximum(torch.nan_to_num(touch(alpha), nan=0.0), lo), hi)
    ft, dt = f(t), fprime(t)

    def err(fx, x):  # e(x) and a bound on its rounding error
        return fx - alpha * x, gamma(2) * (fx.abs() + (alpha * x).abs()) + FUNC_REL * fx.abs()

    e_lo, s_lo = err(flo, lo)
    e_hi, s_hi = err(fhi, hi)
    e_t, s_t = err(ft, t)
    slope = dt - alpha
    tangent_drop = torch.maximum((slope * (lo - t)).abs(), (slope * (hi - t)).abs())
    d_slack = FUNC_REL * dt.abs() * w + gamma(2) * tangent_drop
    top = torch.maximum(e_lo + s_lo, e_hi + s_hi)
    bottom = e_t - s_t - tangent_drop - d_slack
    beta = (top + bottom) / 2
    delta = (top - bottom) / 2 * (1 + gamma(4)) + gamma(4) * beta.abs()
    return alpha, beta, delta


def exp(x: Affine) -> Affine:
    """exp(x); entries whose upper end exceeds 700 become unbounded."""
    lo, hi = x.bounds()
    big = hi > _EXP_MAX
    hi_c = torch.where(big, lo.clamp(max=_EXP_MAX), hi)
    lo_c = torch.minimum(lo, hi_c).clamp(min=-745.0)
    alpha, beta, delta = _convex_line(torch.exp, torch.exp, torch.log, lo_c, hi_c)
    # below -745 exp underflows to 0: exp(x) in [0, exp(lo_c)] there, covered by a line of slope 0
    under = lo < -745.0
    if bool(under.any()):
        top = torch.exp(hi_c) * (1 + FUNC_REL)
        alpha = torch.where(under, torch.zeros_like(alpha), alpha)
        beta = torch.where(under, top / 2, beta)
        delta = torch.where(under, top / 2 * (1 + gamma(2)), delta)
    delta = torch.where(big | ~torch.isfinite(lo), torch.full_like(delta, math.inf), delta)
    return _apply_line(x, alpha, beta, delta)


def reciprocal(x: Affine, floor: float) -> Affine:
    """1 / x for a form known (by the caller's argument) to take values >= ``floor`` > 0."""
    lo, hi = x.bounds()
    lo = lo.clamp(min=floor)
    hi = torch.maximum(hi, lo)
    inf_hi = ~torch.isfinite(hi)
    hi_c = torch.where(inf_hi, lo, hi)
    alpha, beta, delta = _convex_line(torch.reciprocal, lambda t: -1.0 / (t * t),
                                      lambda a: torch.sqrt(-1.0 / a), lo, hi_c)
    # an unbounded form: 1/x in (0, 1/lo], a line of slope 0
    top = (1.0 / lo) * (1 + gamma(2))
    alpha = torch.where(inf_hi, torch.zeros_like(alpha), alpha)
    beta = torch.where(inf_hi, top / 2, beta)
    delta = torch.where(inf_hi, top / 2 * (1 + gamma(2)), delta)
    out = _apply_line(Affine(torch.where(inf_hi, torch.zeros_like(x.c), x.c),
                             torch.where(inf_hi[..., None], torch.zeros_like(x.g), x.g),
                             torch.where(inf_hi, torch.zeros_like(x.r), x.r), x.groups), alpha, beta, delta)
    return out


def rsqrt(x: Affine, floor: float, known_lo: torch.Tensor | None = None,
          known_hi: torch.Tensor | None = None) -> Affine:
    """1 / sqrt(x) for a form known to take values >= ``floor`` > 0 (and, where given, in
    [known_lo, known_hi]: ranges proven otherwise, intersected with the form's own)."""
    lo, hi = x.bounds()
    if known_lo is not None:
        lo, hi = torch.maximum(lo, known_lo), torch.minimum(hi, known_hi)
    lo = lo.clamp(min=floor)
    hi = torch.maximum(hi, lo)
    alpha, beta, delta = _convex_line(torch.rsqrt, lambda t: -0.5 * t ** -1.5,
                                      lambda a: (-2.0 * a) ** (-2.0 / 3.0), lo, hi)
    return _apply_line(x, alpha, beta, delta)


def _gelu(t: torch.Tensor) -> torch.Tensor:
    return 0.5 * t * (1.0 + torch.erf(t / math.sqrt(2.0)))


def gelu(x: Affine) -> Affine:
    """GELU(x) = x Phi(x) (exact erf form): tangent at the midpoint with the second-derivative
    bound, or the interval [min, max] when that is narrower."""
    lo, hi = x.bounds()
    w = hi - lo
    mid = lo + w / 2
    half = torch.maximum(hi - mid, mid - lo) * (1 + 4 * _U)
    phi = lambda t: torch.exp(-t * t / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    dmid = 0.5 * (1.0 + torch.erf(mid / math.sqrt(2.0))) + mid * phi(mid)
    fmid = _gelu(mid)
    # local bound on |f''| = phi(x) |2 - x^2|: phi at the point nearest 0 times the largest |2 - x^2|
    near = torch.where((lo <= 0) & (hi >= 0), torch.zeros_like(lo), torch.minimum(lo.abs(), hi.abs()))
    far2 = torch.maximum(lo * lo, hi * hi)
    m2 = torch.minimum(phi(near) * torch.maximum(torch.full_like(far2, 2.0), far2 - 2.0) * (1 + 1e-12),
                       torch.full_like(near, _GELU_M2))
    taylor = m2 * half * half / 2
    slack = FUNC_REL * (fmid.abs() + dmid.abs() * half) + gamma(4) * (fmid.abs() + (dmid * mid).abs())
    alpha_t, beta_t, delta_t = dmid, fmid - dmid * mid, taylor * (1 + gamma(4)) + slack
    # interval: max at an end, min at the ends or the global minimum
    flo, fhi = _gelu(lo), _gelu(hi)
    top = torch.maximum(flo, fhi)
    top = top + FUNC_REL * top.abs() + gamma(4) * (lo.abs() + hi.abs())
    bottom = torch.minimum(flo, fhi)
    bottom = bottom - FUNC_REL * bottom.abs() - gamma(4) * (lo.abs() + hi.abs())
    bottom = torch.where((lo < _GELU_ARGMIN + 1e-6) & (hi > _GELU_ARGMIN - 1e-6),
                         torch.minimum(bottom, torch.full_like(bottom, _GELU_MIN)), bottom)
    delta_i = (top - bottom) / 2 * (1 + gamma(2))
    use_t = delta_t <= delta_i
    alpha = torch.where(use_t, alpha_t, torch.zeros_like(alpha_t))
    beta = torch.where(use_t, beta_t, (top + bottom) / 2)
    delta = torch.where(use_t, delta_t, delta_i)
    delta = torch.where(torch.isfinite(w), delta, torch.full_like(delta, math.inf))
    return _apply_line(x, alpha, beta, delta)


def relu(x: Affine) -> Affine:
    """max(x, 0) on the form's range [l, u]: 0 for u <= 0, x for l >= 0, else the chord's slope
    alpha = u / (u - l) (DeepZ): e(x) = relu(x) - alpha x is convex and piecewise linear with its kink
    at 0, so it ranges over [min(e(l), 0, e(u)), max(e(l), e(u))] (any rounding of alpha stays sound)."""
    lo, hi = x.bounds()
    cross = (lo < 0) & (hi > 0)
    w = torch.where(cross, hi - lo, torch.ones_like(lo))
    alpha = torch.where(cross, hi / w, (lo >= 0).to(torch.float64))
    e_lo, e_hi = torch.relu(lo) - alpha * lo, torch.relu(hi) - alpha * hi
    slack = gamma(2) * (alpha * lo).abs().maximum((alpha * hi).abs())
    top = torch.maximum(e_lo, e_hi).clamp(min=0) + slack
    bottom = torch.minimum(e_lo, e_hi).clamp(max=0) - slack
    beta = torch.where(cross, (top + bottom) / 2, torch.zeros_like(top))
    delta = torch.where(cross, (top - bottom) / 2 * (1 + gamma(2)), torch.zeros_like(top))
    delta = torch.where(torch.isfinite(lo) & torch.isfinite(hi), delta, torch.full_like(delta, math.inf))
    return _apply_line(x, alpha, beta, delta)


def layer_norm(x: Affine, weight: torch.Tensor, bias: torch.Tensor, eps: float, stats: dict | None = None,
               fresh: int = 0) -> Affine:
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias, biased variance.

    The centred part is exact; var = mean(z^2) is a bilinear form (so it keeps its relations), and
    the product z * rsqrt(var + eps) another; the rsqrt is linearised on [max(var_lo, 0) + eps, var_hi + eps],
    the range of var intersected with (rms(c + g . eps) -+ rms(r))^2 (Minkowski's inequality).
    With ``fresh`` > 0 the remainders of the rsqrt and of the output (up to ``fresh`` of each) become
    fresh noise symbols (:func:`refresh`).
    """
    d = x.c.shape[-1]
    z = center(x)
    var = scale(bilinear(z, z, "...d,...d->...", d), 1.0 / d)
    v_lo, v_hi = var.bounds()
    # Minkowski: rms(z) lies within rms(affine part) +- rms(rest), a tighter range than 2 |z| r when r
    # is wide; the affine part over every symbol (rest r), and over the free positions' only (rest
    # r + |g_fresh|_1: their exact products, where the fresh symbols' would take |.| bounds)
    md = z.discrete
    splits = [(z.g, z.groups, z.r)]
    if md < z.g.shape[-1]:
        splits.append((z.g[..., :md], z.groups[:md], z.radius()))
    for g, groups, rest in splits:
        exact = Affine(z.c, g, torch.zeros_like(z.r), groups)
        a_lo, a_hi = scale(bilinear(exact, exact, "...d,...d->...", d), 1.0 / d).bounds()
        rms_r = torch.sqrt((rest * rest).mean(-1)) * (1 + gamma(d))
        root_lo = torch.sqrt(a_lo.clamp(min=0)) * (1 - gamma(4)) - rms_r
        v_lo = torch.maximum(v_lo, torch.where(root_lo > 0, root_lo * root_lo * (1 - gamma(4)),
                                               torch.zeros_like(v_lo)))
        v_hi = torch.minimum(v_hi, (torch.sqrt(a_hi.clamp(min=0)) * (1 + gamma(4)) + rms_r) ** 2 * (1 + gamma(4)))
    if stats is not None:
        stats.setdefault("var_lower", []).append(float(v_lo.clamp(min=0).min()))
        stats.setdefault("var_upper", []).append(float(v_hi.max()))
    s = rsqrt(scale(var, 1.0, float(eps)), float(eps) * (1 - 4 * _U), (v_lo + float(eps)) * (1 - 4 * _U),
              (v_hi + float(eps)) * (1 + 4 * _U))
    y = bilinear(z, refresh(s, fresh), "...d,...->...d", 1)
    return refresh(scale(y, weight.to(torch.float64), bias.to(torch.float64)), fresh)


# ---------------------------------------------------------------------------- softmax
def softmax(x: Affine, axis: int = -1, temperature: float = 1.0) -> Affine:
    """softmax(x / T) along ``axis`` as p_k = 1 / sum_j exp((x_j - x_k) / T)."""
    x = _move_last(x, axis)
    n = x.c.shape[-1]
    diff = sub(unsqueeze(x, -2), unsqueeze(x, -1))  # [..., k, j] = x_j - x_k
    if temperature != 1.0:
        diff = scale(diff, 1.0 / temperature)
    e = exp(diff)
    eye = torch.eye(n, dtype=torch.bool)
    e = Affine(torch.where(eye, torch.ones_like(e.c), e.c), torch.where(eye[..., None], 0.0, e.g),
               torch.where(eye, torch.zeros_like(e.r), e.r), e.groups)
    z = sum_last(e)
    p = reciprocal(z, 1.0)
    return _move_last(p, -1, axis)


def unsqueeze(x: Affine, axis: int) -> Affine:
    ax = axis % (x.c.dim() + 1)
    return Affine(x.c.unsqueeze(ax), x.g.unsqueeze(ax), x.r.unsqueeze(ax), x.groups)


def _move_last(x: Affine, axis: int, to: int | None = None) -> Affine:
    """Move value axis ``axis`` to the end (or, with ``to``, the last value axis back to ``to``)."""
    nd = x.c.dim()
    src, dst = (axis % nd, nd - 1) if to is None else (nd - 1, to % nd)
    if src == dst:
        return x
    return Affine(x.c.movedim(src, dst), x.g.movedim(src, dst), x.r.movedim(src, dst), x.groups)
