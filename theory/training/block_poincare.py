"""Poincaré and approximate-tensorization constants of (adaptive) weighted block dynamics (paper P).

The block dynamics matching a :class:`mlmix.theory.training.pseudolikelihood.MaskDistribution` for a joint mu
(Definitions 6 and 8): draw K ~ p_K(. | X), resample X_K from q(X_K | X_{-K}, K) ∝ mu(X) p_K(K | X).
As a chain on X it is reversible with respect to mu, with Dirichlet form

    E(f, g) = <f, (I - P) g>_mu = E_{(X,K) ~ mu p_K}[Cov_q(f, g | X_{-K}, K)]        (P Prop 1)

and Poincaré constant C = sup_f Var_mu(f) / E(f, f) = 1 / gap (P Definition 5, Theorems 2 and 3).
Prop 1 is stated for functions of the pair (X, K) and the chain C.23 of the paper, which keeps K
and resamples X_K: :func:`mask_conditioned_kernel` builds it, :func:`fibre_dirichlet_form`
computes the right-hand side directly.

Approximate tensorization (P Definition 9): C_AT(mu) is the smallest C with
KL(r || mu) <= C · E_{X~r, K~p_K(.|X)} KL(r(. | X_{-K}, K) || mu(. | X_{-K}, K)) for every law r.
Writing r-bar and mu-bar for the laws of the fibre label (X_{-K}, K), the right-hand expectation is
KL(r || mu) - KL(r-bar || mu-bar), so the ratio is KL / (KL - KL-bar) >= 1 and tends to
Var(phi) / E(phi, phi) as r = mu(1 + eps phi) -> mu. Hence

* lower bound: max(Poincaré constant, the best ratio found at explicit laws r by BFGS from
  several starts) — every value is attained or approached, so C_AT is at least this;
* upper bound: C_AT <= 1/alpha, alpha the log-Sobolev constant of the block chain (since
  Var(sqrt h) <= Ent(h) on each fibre), and alpha >= (1 - 2 mu_*) gap / log(1/mu_* - 1) for a
  reversible chain (Diaconis & Saloff-Coste 1996, Cor. A.4), mu_* = min mu; for fixed weights that
  include the full block [n] with weight w, also C_AT <= 1/w. The method used is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import log_softmax

from mlmix.theory.chain.shortcuts import poincare_constant, spectral_gap
from mlmix.theory.chain.spectral import dirichlet_form
from mlmix.theory.kernels.assembled import adaptive_block_kernel, block_kernel
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.training.pseudolikelihood import MaskDistribution


def _joint(source: Conditionals, masks: MaskDistribution) -> tuple[np.ndarray, np.ndarray]:
    """(log mu normalised, mu) of a compatible source on the masks' space."""
    if masks.space != source.space:
        raise ValueError(f"masks live on {masks.space}, the source on {source.space}")
    lw = source.log_joint()
    if lw is None:
        raise TypeError(f"{type(source).__name__} has no joint law; block dynamics needs a compatible source")
    log_mu = log_softmax(lw)
    return log_mu, np.exp(log_mu)


def block_dynamics_kernel(source: Conditionals, masks: MaskDistribution) -> sp.csr_array:
    """The X-chain of the block dynamics matching ``masks``: :func:`mlmix.theory.kernels.assembled.block_kernel` for
    fixed weights (P Definition 6), :func:`mlmix.theory.kernels.assembled.adaptive_block_kernel` otherwise (Definition 8)."""
    _joint(source, masks)
    if masks.adaptive:
        return adaptive_block_kernel(source, masks.blocks, masks.probs)
    return block_kernel(source, masks.blocks, masks.weights)


def block_poincare_constant(source: Conditionals, masks: MaskDistribution) -> float:
    """C = 1 / gap of the block X-chain with respect to mu (inf when the chain is reducible)."""
    _, mu = _joint(source, masks)
    return poincare_constant(block_dynamics_kernel(source, masks), mu)


def pair_distribution(source: Conditionals, masks: MaskDistribution) -> np.ndarray:
    """mu(x) p_K(K_b | x), shape (|V|^n, m): the stationary law of the pair chains."""
    _, mu = _joint(source, masks)
    return masks.pair_weights(mu)


def _as_pair_function(f: np.ndarray, masks: MaskDistribution, name: str) -> np.ndarray:
    arr = np.asarray(f, dtype=np.float64)
    N, m = masks.space.size, masks.m
    if arr.shape == (N,):
        arr = np.repeat(arr[:, None], m, axis=1)
    if arr.shape != (N, m) or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, of shape ({N},) (a function of X) or ({N}, {m}) (of (X, K))")
    return arr


def fibre_dirichlet_form(source: Conditionals, masks: MaskDistribution, f: np.ndarray,
                         g: np.ndarray | None = None) -> float:
    """E_{(X_{-K}, K)}[Cov_{X_K | X_{-K}, K}(f, g)] computed fibre by fibre (P Prop 1, right side).

    f and g are functions of X (shape (|V|^n,)) or of the pair (X, K) (shape (|V|^n, m)).
    """
    log_mu, mu = _joint(source, masks)
    pairs = masks.pair_weights(mu)
    F = _as_pair_function(f, masks, "f")
    G = F if g is None else _as_pair_function(g, masks, "g")
    total = 0.0
    for b in range(masks.m):
        members, logq = masks.conditionals(log_mu, b)
        q = np.exp(logq)
        mass = pairs[members, b].sum(axis=1)
        fb, gb = F[members, b], G[members, b]
        cov = np.sum(q * fb * gb, axis=1) - np.sum(q * fb, axis=1) * np.sum(q * gb, axis=1)
        total += float(mass @ cov)
    return total


def mask_conditioned_kernel(source: Conditionals, masks: MaskDistribution) -> sp.csr_array:
    """The chain C.23 of paper P on pairs (x, K), index x * m + b: keep K, resample X_K:

        P((x, K), (y, K')) = 1[K' = K] 1[y_{-K} = x_{-K}] q(y_K | x_{-K}, K).

    It leaves mu(x) p_K(K | x) invariant but never changes K (reducible for m > 1). Built from the
    extended kernel of :func:`mlmix.theory.kernels.assembled.adaptive_block_kernel` by summing out the next block.
    """
    _joint(source, masks)
    m, N = masks.m, masks.space.size
    if (masks.probs <= 0).any():
        raise ValueError("the pair chain needs p_K(K | x) > 0 for every state and block")
    ext = adaptive_block_kernel(source, masks.blocks, masks.probs, extended=True)
    to_state = sp.csr_array((np.ones(N * m), (np.arange(N * m), np.repeat(np.arange(N), m))), shape=(N * m, N))
    R = (ext @ to_state).tocoo()  # R[(x, K), y] = q(y | x_{-K}, K)
    cols = R.col * m + R.row % m
    return sp.csr_array((R.data, (R.row, cols)), shape=(N * m, N * m))


def kernel_dirichlet_form(source: Conditionals, masks: MaskDistribution, f: np.ndarray,
                          g: np.ndarray | None = None) -> float:
    """<f, (I - P) g> of the pair chain C.23 under mu p_K (P Prop 1, left side), by
    :func:`mlmix.theory.chain.spectral.dirichlet_form`; f, g as in :func:`fibre_dirichlet_form`."""
    F = _as_pair_function(f, masks, "f")
    G = F if g is None else _as_pair_function(g, masks, "g")
    pairs = pair_distribution(source, masks)
    return dirichlet_form(mask_conditioned_kernel(source, masks), F.ravel(), G.ravel(), pairs.ravel())


def tensorization_ratio(source: Conditionals, masks: MaskDistribution, r: np.ndarray) -> float:
    """KL(r || mu) / E_{X~r, K}[KL(r(.|X_{-K},K) || mu(.|X_{-K},K))] for a law r (P Definition 9).

    Every value is a lower bound on C_AT(mu). ValueError when r = mu (0/0) or r is not a law.
    """
    log_mu, _ = _joint(source, masks)
    r = np.asarray(r, dtype=np.float64)
    if r.shape != log_mu.shape or not np.isfinite(r).all() or (r < 0).any() or abs(r.sum() - 1) > 1e-9:
        raise ValueError(f"r must be a probability vector over the {log_mu.size} states")
    with np.errstate(divide="ignore"):
        log_r = np.log(r)
    kl, denom = tensorization_terms(log_r, log_mu, masks)
    if denom <= 0:
        raise ValueError("the conditional KL vanishes: r agrees with mu on every fibre (r = mu)")
    return kl / denom


def _fibre_log_mass(log_p: np.ndarray, masks: MaskDistribution, b: int) -> np.ndarray:
    members = masks.fibres(b)
    with np.errstate(divide="ignore"):
        w = log_p[members] + np.log(masks.probs[members, b])
    finite = np.isfinite(w).any(axis=1)
    out = np.full(members.shape[0], -np.inf)
    out[finite] = np.logaddexp.reduce(w[finite], axis=1)
    return out


def tensorization_terms(log_r: np.ndarray, log_mu: np.ndarray, masks: MaskDistribution) -> tuple[float, float]:
    """(KL(r||mu), KL(r||mu) - KL(r-bar||mu-bar)) with r-bar, mu-bar the fibre-label laws."""
    live = np.isfinite(log_r)
    kl = float(np.sum(np.exp(log_r[live]) * (log_r[live] - log_mu[live])))
    kl_bar = 0.0
    for b in range(masks.m):
        lr, lm = _fibre_log_mass(log_r, masks, b), _fibre_log_mass(log_mu, masks, b)
        ok = np.isfinite(lr)
        kl_bar += float(np.sum(np.exp(lr[ok]) * (lr[ok] - lm[ok])))
    return kl, kl - kl_bar


def _log_ratio_and_gradient(z: np.ndarray, log_mu: np.ndarray, masks: MaskDistribution,
                            fibre_index: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """-log ratio at r = softmax(log mu + z) and its gradient in z (for minimisation)."""
    log_r = log_softmax(log_mu + z)
    r = np.exp(log_r)
    a_kl = log_r - log_mu
    kl = float(r @ a_kl)
    a_bar = np.zeros_like(r)
    kl_bar = 0.0
    for b, members in enumerate(fibre_index):
        pb = masks.probs[members, b]
        lr = np.log(np.maximum(np.sum(np.exp(log_r[members]) * pb, axis=1), 1e-300))
        lm = np.log(np.maximum(np.sum(np.exp(log_mu[members]) * pb, axis=1), 1e-300))
        kl_bar += float(np.exp(lr) @ (lr - lm))
        a_bar[members] += pb * (lr - lm)[:, None]
    denom = kl - kl_bar
    if kl <= 1e-14 or denom <= 1e-14:
        return 0.0, np.zeros_like(z)
    g_kl = r * (a_kl - kl)
    g_bar = r * (a_bar - r @ a_bar)
    grad = g_kl / kl - (g_kl - g_bar) / denom
    return -float(np.log(kl / denom)), -grad


@dataclass(frozen=True)
class ApproximateTensorization:
    """Bounds on C_AT(mu) for the block dynamics of ``masks`` (see the module docstring).

    ``lower`` is certified (attained at ``witness`` or approached as r -> mu); ``upper`` is the
    bound named by ``upper_method``; ``poincare`` is the block chain's Poincaré constant.
    """

    lower: float
    upper: float
    lower_method: str
    upper_method: str
    poincare: float
    best_ratio: float
    witness: np.ndarray | None


def log_sobolev_upper_bound(source: Conditionals, masks: MaskDistribution) -> tuple[float, str]:
    """C_AT <= 1/alpha <= log(1/mu_* - 1) / ((1 - 2 mu_*) gap), and <= 1/w for a full block of
    fixed weight w; returns (the smaller bound, its method)."""
    _, mu = _joint(source, masks)
    gap = spectral_gap(block_dynamics_kernel(source, masks), mu)
    mu_min = float(mu.min())
    if gap <= 0:
        bound = np.inf
    elif abs(1 - 2 * mu_min) < 1e-12:
        bound = 2.0 / gap
    else:
        bound = float(np.log(1 / mu_min - 1) / ((1 - 2 * mu_min) * gap))
    method = "log-Sobolev (Diaconis & Saloff-Coste Cor. A.4): log(1/mu_* - 1) / ((1 - 2 mu_*) gap)"
    full = tuple(range(masks.space.length))
    if not masks.adaptive and full in masks.blocks:
        w = float(masks.weights[masks.blocks.index(full)])
        if w > 0 and 1.0 / w < bound:
            bound, method = 1.0 / w, "full block [n] with weight w: 1/w"
    return bound, method


def approximate_tensorization(source: Conditionals, masks: MaskDistribution, restarts: int = 4, seed: int = 0,
                              scale_limit: float = 30.0, max_iter: int = 100) -> ApproximateTensorization:
    """Certified lower bound and known upper bound on C_AT (P Definition 9) for small spaces.

    The lower bound maximises the ratio over r = softmax(log mu + z) by BFGS (``max_iter`` steps, the
    result clipped to |z| <= scale_limit and re-evaluated) from starts along the chain's slowest
    eigenfunction and from ``restarts`` random z; it is never below the Poincaré constant (the
    r -> mu limit of the ratio).
    """
    log_mu, mu = _joint(source, masks)
    P = block_dynamics_kernel(source, masks)
    poincare = poincare_constant(P, mu)
    N = mu.size
    fibre_index = [masks.fibres(b) for b in range(masks.m)]
    rng = np.random.default_rng(seed)
    starts = []
    dense = P.toarray()
    s = np.sqrt(mu)
    vals, vecs = np.linalg.eigh((s[:, None] * dense / s[None, :] + (s[:, None] * dense / s[None, :]).T) / 2)
    phi = vecs[:, -2] / s
    phi = phi / np.abs(phi).max()
    for t in (1.0, 6.0):
        starts += [t * phi, -t * phi]
    starts += [rng.normal(scale=3.0, size=N) for _ in range(restarts)]
    best, witness = 1.0, None
    for z0 in starts:
        res = minimize(_log_ratio_and_gradient, z0, args=(log_mu, masks, fibre_index), jac=True,
                       method="BFGS", options={"maxiter": max_iter, "gtol": 1e-8})
        r = np.exp(log_softmax(log_mu + np.clip(res.x, -scale_limit, scale_limit)))
        kl, denom = tensorization_terms(np.log(r), log_mu, masks)
        if denom > 1e-12 and kl / denom > best:
            best, witness = kl / denom, r
    upper, upper_method = log_sobolev_upper_bound(source, masks)
    if poincare >= best:
        lower, lower_method = poincare, "Poincaré constant (limit of the ratio as r -> mu)"
    else:
        lower, lower_method = best, "ratio at the explicit law r = witness (BFGS)"
    return ApproximateTensorization(lower, upper, lower_method, upper_method, poincare, best, witness)
