"""Weighted pseudolikelihood of an exponential family, exactly, by enumeration (paper P section 2.2).

Masks. A :class:`MaskDistribution` lists blocks K_1..K_m covering [n] and p_K(K_b | x) for every state
x: constant rows for a fixed weighting (Definition 2; k-PL, Definition 3, is uniform over the
k-subsets) or any rows for adaptive masking (Definition 7).

Conditionals. With joint p and masks, the conditional of X_K given (X_{-K}, K) is taken in the joint
p(x) p_K(K | x) (paper P eq. (1)):

    q(x_K | x_{-K}, K) = p(x) p_K(K|x) / sum_{y: y_{-K} = x_{-K}} p(y) p_K(K|y),

which for fixed weights is the plain conditional p(x_K | x_{-K}). A *fibre* is the set of states
sharing x_{-K}, for one block K.

Loss. With pair weights W(x, K) (a law of (X, K): p_X(x) p_K(K|x) for a population, empirical
frequencies for a sample),

    L(theta) = sum_{x,K} W(x,K) [-log q_theta(x_K | x_{-K}, K)].

For an exponential family the per-pair score is s(x,K) = grad log q_theta = T(x) - E_q[T | fibre], so

    grad L = -E_W[s],   Hessian L = E_W[Cov_q(T | fibre)]  (PSD: the loss is convex, P Prop 9),

and the asymptotic covariance of the M-estimator (P Lemma 1) is Gamma_PL = H^{-1} V H^{-1} with V the
covariance of the per-sample gradient. At a realizable theta* (W = p_theta* x p_K), H = V (P Lemma 2
and its adaptive version Lemma 5), so Gamma_PL = H^{-1}. With ``mask_averaged=True`` a sample is one
sequence whose loss averages over all its masks (the usual k-PL objective); then V = Cov_X(E_K s) <= H.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

from mlmix.theory.kernels.assembled import (
    block_fibres,
    check_adaptive_probabilities,
    check_block_weights,
    check_blocks,
    k_subsets,
)
from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.exponential_family import (
    MAX_CONDITION,
    ExponentialFamily,
    checked_inverse,
    condition_number,
)
from mlmix.validation import check_vector


@dataclass(frozen=True, eq=False)
class MaskDistribution:
    """Blocks K_1..K_m covering [n] and p_K(K_b | x) for every state x (rows of ``probs``)."""

    space: StateSpace
    blocks: tuple[tuple[int, ...], ...]
    probs: np.ndarray  # (|V|^n, m)
    adaptive: bool

    @classmethod
    def k_subsets(cls, space: StateSpace, k: int) -> "MaskDistribution":
        """k-pseudolikelihood masks: K uniform over all k-subsets of [n] (P Definition 3)."""
        return cls.weighted(space, k_subsets(space.length, k))

    @classmethod
    def weighted(cls, space: StateSpace, blocks: Sequence[Sequence[int]],
                 weights: Sequence[float] | None = None) -> "MaskDistribution":
        """Fixed weights p_K over ``blocks`` (uniform by default), independent of X (P Definition 2)."""
        blocks = check_blocks(space, blocks)
        w = check_block_weights(weights, len(blocks))
        probs = np.broadcast_to(w, (space.size, len(blocks))).copy()
        return cls(space, tuple(blocks), probs, False)

    @classmethod
    def adaptive_masks(cls, space: StateSpace, blocks: Sequence[Sequence[int]],
                       block_probs: np.ndarray | Callable[[np.ndarray], np.ndarray]) -> "MaskDistribution":
        """Adaptive masks p_K(K | x) (P Definition 7): an array (|V|^n, m) or a function of the sequences."""
        blocks = check_blocks(space, blocks)
        return cls(space, tuple(blocks), check_adaptive_probabilities(space, len(blocks), block_probs), True)

    @property
    def m(self) -> int:
        return len(self.blocks)

    @property
    def weights(self) -> np.ndarray:
        """p_K for fixed weights (ValueError for adaptive masks)."""
        if self.adaptive:
            raise ValueError("adaptive masks have no fixed weights; use probs[x]")
        return self.probs[0]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_fibres", {})

    def fibres(self, b: int) -> np.ndarray:
        """States grouped by x_{-K} for block K_b: (|V|^(n-|K|), |V|^|K|) indices, one fibre per row."""
        if b not in self._fibres:
            K = self.blocks[b]
            self._fibres[b] = block_fibres(self.space, K)
        return self._fibres[b]

    def conditionals(self, log_p: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(fibres, log q) for block K_b: log q(x | x_{-K}, K) ∝ log p(x) + log p_K(K|x) on each fibre.

        ``log_p`` is an (unnormalised) log-joint over the states. Fibres where p_K(K|.) vanishes
        carry no mass and are dropped.
        """
        members = self.fibres(b)
        with np.errstate(divide="ignore"):
            logw = log_p[members] + np.log(self.probs[members, b])
        live = np.isfinite(logw).any(axis=1)
        members, logw = members[live], logw[live]
        return members, logw - logsumexp(logw, axis=1, keepdims=True)

    def pair_weights(self, p_x: np.ndarray) -> np.ndarray:
        """W(x, K_b) = p_X(x) p_K(K_b | x), shape (|V|^n, m)."""
        p = check_vector(p_x, self.space.size, "p_X", probability=True)
        return p[:, None] * self.probs

    def sample(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One block index per state index, K ~ p_K(. | x)."""
        cdf = np.cumsum(self.probs[np.asarray(states, dtype=np.int64)], axis=1)
        u = rng.random(cdf.shape[0])[:, None] * cdf[:, -1:]
        return np.minimum((cdf <= u).sum(axis=1), self.m - 1)


def sample_pair_weights(states: np.ndarray, blocks: np.ndarray | None, masks: MaskDistribution) -> np.ndarray:
    """Empirical law of (X, K) from sampled state indices and block indices, shape (|V|^n, m).

    ``blocks=None`` averages every sample over its masks, W(x, K) = p_hat(x) p_K(K|x) (the usual
    k-PL objective on data, P eq. (2)); otherwise one sampled block per sample (P Definition 2).
    """
    states = np.asarray(states, dtype=np.int64)
    if states.ndim != 1 or states.size == 0:
        raise ValueError("states must be a non-empty 1-d array of state indices")
    if states.min() < 0 or states.max() >= masks.space.size:
        raise ValueError(f"state indices must lie in [0, {masks.space.size})")
    if blocks is None:
        p_hat = np.bincount(states, minlength=masks.space.size) / states.size
        return masks.pair_weights(p_hat)
    blocks = np.asarray(blocks, dtype=np.int64)
    if blocks.shape != states.shape or blocks.min() < 0 or blocks.max() >= masks.m:
        raise ValueError(f"blocks must be one index in [0, {masks.m}) per sample")
    if (masks.probs[states, blocks] <= 0).any():
        raise ValueError("a sampled block has p_K(K | x) = 0 at its sample")
    W = np.zeros((masks.space.size, masks.m))
    np.add.at(W, (states, blocks), 1.0 / states.size)
    return W


class PseudoLikelihood:
    """Weighted pseudolikelihood loss of ``family`` for ``masks`` under a data law.

    ``data``: a probability vector p_X over the states (population loss, P Definitions 2 and 7) or a
    table W(x, K) of (X, K) probabilities, shape (|V|^n, m) (e.g. :func:`sample_pair_weights`).
    """

    def __init__(self, family: ExponentialFamily, masks: MaskDistribution, data: np.ndarray) -> None:
        if masks.space != family.space:
            raise ValueError(f"masks live on {masks.space}, the family on {family.space}")
        self.family = family
        self.masks = masks
        arr = np.asarray(data, dtype=np.float64)
        if arr.ndim == 1:
            W = masks.pair_weights(arr)
        elif arr.shape == (family.space.size, masks.m):
            if not np.isfinite(arr).all() or (arr < 0).any() or abs(arr.sum() - 1) > 1e-9:
                raise ValueError("pair weights W(x, K) must be non-negative and sum to 1")
            if (arr[masks.probs <= 0] > 0).any():
                raise ValueError("pair weights put mass on (x, K) with p_K(K | x) = 0")
            W = arr
        else:
            raise ValueError(f"data must be p_X of shape ({family.space.size},) or W of shape "
                             f"({family.space.size}, {masks.m}), got {arr.shape}")
        self.pair_weights = W

    def _terms(self, theta: np.ndarray):
        """Per block: fibres, pair weights on them, log q_theta, and centred statistics T - E_q[T|fibre]."""
        log_p = self.family.log_weights(theta)
        table = self.family.table
        for b in range(self.masks.m):
            members, logq = self.masks.conditionals(log_p, b)
            T = table[members]
            q = np.exp(logq)
            centred = T - np.einsum("fs,fsd->fd", q, T)[:, None, :]
            yield b, members, self.pair_weights[members, b], logq, q, centred

    def loss(self, theta: np.ndarray) -> float:
        """L(theta) = E_W[-log q_theta(X_K | X_{-K}, K)]."""
        total = 0.0
        for _, _, w, logq, _, _ in self._terms(theta):
            live = w > 0
            total -= float(np.sum(w[live] * logq[live]))
        return total

    def gradient(self, theta: np.ndarray) -> np.ndarray:
        """grad L = -E_W[T(X) - E_q[T | X_{-K}, K]]."""
        g = np.zeros(self.family.dimension)
        for _, _, w, _, _, centred in self._terms(theta):
            g -= np.einsum("fs,fsd->d", w, centred)
        return g

    def loss_and_gradient(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """(L(theta), grad L(theta)) in one pass (for optimisers)."""
        total, g = 0.0, np.zeros(self.family.dimension)
        for _, _, w, logq, _, centred in self._terms(theta):
            live = w > 0
            total -= float(np.sum(w[live] * logq[live]))
            g -= np.einsum("fs,fsd->d", w, centred)
        return total, g

    def hessian(self, theta: np.ndarray) -> np.ndarray:
        """Hessian L = E_W[Cov_q(T | X_{-K}, K)] (a mixture of covariances: PSD, P Prop 9)."""
        d = self.family.dimension
        H = np.zeros((d, d))
        for _, _, w, _, q, centred in self._terms(theta):
            H += np.einsum("f,fs,fsd,fse->de", w.sum(axis=1), q, centred, centred)
        return (H + H.T) / 2

    def gradient_covariance(self, theta: np.ndarray, mask_averaged: bool = False) -> np.ndarray:
        """Covariance of the per-sample gradient of -log q_theta.

        Default: a sample is a pair (X, K) ~ W and the covariance is Cov_W(s(X, K)) (P Lemma 1).
        ``mask_averaged``: a sample is X ~ sum_K W(., K) with gradient E_{K ~ p_K(.|X)} s(X, K).
        """
        d = self.family.dimension
        if mask_averaged:
            p_x = self.pair_weights.sum(axis=1)
            gbar = np.zeros((self.family.space.size, d))
            for b, members, _, _, _, centred in self._terms(theta):
                gbar[members] += self.masks.probs[members, b][..., None] * centred
            mean = p_x @ gbar
            c = gbar - mean
            V = (c * p_x[:, None]).T @ c
        else:
            second = np.zeros((d, d))
            first = np.zeros(d)
            for _, _, w, _, _, centred in self._terms(theta):
                second += np.einsum("fs,fsd,fse->de", w, centred, centred)
                first += np.einsum("fs,fsd->d", w, centred)
            V = second - np.outer(first, first)
        return (V + V.T) / 2

    def excess_loss(self, theta: np.ndarray) -> float:
        """E_W[KL(w(. | X_{-K}, K) || q_theta(. | X_{-K}, K))], w the data's own conditional
        W(x, K) / W(fibre): the loss above its minimum over all conditionals (P Prop 6)."""
        total = 0.0
        for _, _, w, logq, _, _ in self._terms(theta):
            mass = w.sum(axis=1, keepdims=True)
            live = w > 0
            log_data = np.log(np.where(live, w, 1.0)) - np.log(np.where(mass > 0, mass, 1.0))
            total += float(np.sum(w[live] * (log_data[live] - logq[live])))
        return total


@dataclass(frozen=True)
class AsymptoticCovariance:
    """Gamma_PL = H^{-1} V H^{-1} at theta* with its ingredients (P Lemma 1)."""

    gamma: np.ndarray
    hessian: np.ndarray
    gradient_covariance: np.ndarray
    hessian_condition: float
    mask_averaged: bool

    @property
    def trace(self) -> float:
        """Tr(Gamma_PL): n E||theta_hat - theta*||^2 -> Tr(Gamma) (P Remark 2)."""
        return float(np.trace(self.gamma))


def asymptotic_covariance(family: ExponentialFamily, theta_star: np.ndarray, masks: MaskDistribution,
                          mask_averaged: bool = False, max_condition: float = MAX_CONDITION) -> AsymptoticCovariance:
    """Asymptotic covariance of the weighted MPLE at a realizable theta* (data p_X = p_theta*).

    Raises :class:`mlmix.theory.training.exponential_family.NearSingularError` when the Hessian's condition
    number exceeds ``max_condition`` (parameters not identifiable from these masks, or theta* extreme).
    """
    pl = PseudoLikelihood(family, masks, family.probabilities(theta_star))
    H = pl.hessian(theta_star)
    V = pl.gradient_covariance(theta_star, mask_averaged)
    Hinv = checked_inverse(H, "pseudolikelihood Hessian", max_condition)
    gamma = Hinv @ V @ Hinv
    return AsymptoticCovariance((gamma + gamma.T) / 2, H, V, condition_number(H), mask_averaged)


def fit_pseudolikelihood(pl: PseudoLikelihood, theta0: np.ndarray | None = None, gtol: float = 1e-9,
                         max_iter: int = 1000):
    """argmin_theta L(theta) by L-BFGS (scipy) with the exact gradient; returns scipy's OptimizeResult.

    The loss is convex (P Prop 9), so a converged run is a global minimiser; ``result.success``
    is False when the minimiser does not exist (e.g. separable data: parameters run off to infinity).
    """
    x0 = np.zeros(pl.family.dimension) if theta0 is None else pl.family.check_theta(theta0)
    return minimize(pl.loss_and_gradient, x0, jac=True, method="L-BFGS-B",
                    options={"gtol": gtol, "ftol": 1e-13, "maxiter": max_iter})
