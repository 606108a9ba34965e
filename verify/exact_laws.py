"""Exact laws of the random quantities in paper P's probability bounds, for checks on small cases.

* :func:`bernoulli_sum_law`: the law of S = sum of independent Bernoulli(p_i) (Poisson binomial), by
  convolution.
* :func:`empirical_tv_law`: the law of TV(p~, p) for the empirical law p~ of n i.i.d. draws from p on M
  points, by enumerating every count vector (multinomial probabilities in log space).
* :func:`upper_quantile`: the largest value v with P(X >= v) > delta. A bound "X < r with probability
  >= 1 - delta" holds exactly when r > upper_quantile(delta): checks compare that quantile with r, so
  that a radius scaled by 1/2 can be seen to fail.
"""

from __future__ import annotations

from itertools import combinations
from math import lgamma

import numpy as np
from scipy.stats import chi2


def bernoulli_sum_law(p: np.ndarray) -> np.ndarray:
    """P(S = k), k = 0..n, for S a sum of independent Bernoulli(p_i)."""
    law = np.ones(1)
    for pi in np.asarray(p, dtype=np.float64):
        law = np.convolve(law, [1.0 - pi, pi])
    return law


def compositions(n: int, parts: int) -> np.ndarray:
    """Every vector of ``parts`` non-negative integers summing to n (stars and bars), shape (C, parts)."""
    rows = []
    for bars in combinations(range(n + parts - 1), parts - 1):
        edges = (-1,) + bars + (n + parts - 1,)
        rows.append([edges[k + 1] - edges[k] - 1 for k in range(parts)])
    return np.array(rows, dtype=np.int64)


def empirical_tv_law(p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of TV(p~, p) = (1/2) sum |c/n - p| over the count vectors c ~ Multinomial(n, p)."""
    p = np.asarray(p, dtype=np.float64)
    counts = compositions(n, p.size)
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    log_coef = lgamma(n + 1) - np.array([sum(lgamma(int(c) + 1) for c in row) for row in counts])
    terms = np.where(counts > 0, counts * logp[None, :], 0.0).sum(axis=1)
    prob = np.exp(log_coef + terms)
    return 0.5 * np.abs(counts / n - p[None, :]).sum(axis=1), prob


def upper_quantile(values: np.ndarray, probs: np.ndarray, delta: float) -> float:
    """max{v among the values : P(X >= v) > delta} (0 when no value has tail mass above delta)."""
    order = np.argsort(values)[::-1]
    v, w = np.asarray(values)[order], np.asarray(probs)[order]
    tail = np.cumsum(w)  # tail[k] = P(X >= v[k]) once ties are merged below
    best = 0.0
    for k in range(v.size):
        if k + 1 < v.size and v[k + 1] == v[k]:
            continue
        if tail[k] > delta:
            best = float(v[k])
            break
    return best


def weighted_chi2_cdf(weights: np.ndarray, x: float, tol: float = 1e-12,
                      max_terms: int = 20000) -> tuple[float, float]:
    """Lower and upper bounds on P(sum_i lambda_i Z_i^2 <= x), Z_i i.i.d. N(0, 1), lambda_i > 0.

    Ruben's (1962) mixture: with beta = min lambda, the sum has the law of beta chi^2_{d + 2K} with
    K ~ c_k, c_0 = prod_i (beta/lambda_i)^{1/2}, c_k = (1/k) sum_{r<k} g_{k-r} c_r,
    g_j = (1/2) sum_i (1 - beta/lambda_i)^j; every c_k >= 0 and sum c_k = 1. The partial sum over
    k < K is a lower bound and, since F_{chi^2_{d+2k}}(x/beta) decreases in k, adding the missing mass
    times F_{chi^2_{d+2K}}(x/beta) an upper bound. Terms are added until the two differ by ``tol``.
    With equal weights (d = 1 in particular) K = 0 and the value is the chi-square cdf.
    """

    lam = np.asarray(weights, dtype=np.float64)
    if lam.ndim != 1 or lam.size == 0 or not (lam > 0).all() or not np.isfinite(lam).all():
        raise ValueError("weights must be a non-empty vector of positive finite numbers")
    d, beta = lam.size, float(lam.min())
    u = 1.0 - beta / lam
    c = [float(np.exp(0.5 * np.log(beta / lam).sum()))]
    powers = np.ones_like(u)
    g: list[float] = [0.0]
    lower = c[0] * float(chi2.cdf(x / beta, d))
    for k in range(1, max_terms + 1):
        missing = max(0.0, 1.0 - sum(c))
        upper_tail = missing * float(chi2.cdf(x / beta, d + 2 * k))
        if upper_tail <= tol:
            return lower, lower + upper_tail
        powers = powers * u
        g.append(0.5 * float(powers.sum()))
        c.append(sum(g[k - r] * c[r] for r in range(k)) / k)
        lower += c[k] * float(chi2.cdf(x / beta, d + 2 * k))
    return lower, lower + max(0.0, 1.0 - sum(c)) * float(chi2.cdf(x / beta, d + 2 * max_terms + 2))
