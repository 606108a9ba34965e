"""The exact expected KL of a random-order unmasking schedule, its sharp bound and the optimal schedule.

Setting (Li & Cai 2025, arXiv:2505.21400; Chen, Cong & Li 2025, arXiv:2511.04647): a joint p on V^L is
decoded in T steps of sizes k_1, ..., k_T (sum L); before step t, r_t = k_1 + ... + k_(t-1) positions are
revealed, and k_t new positions, uniform among the masked ones, are drawn from the product of their exact
conditionals given the revealed ones. With the *entropy curve*

    h(m) = (1/L) sum_i E_S H(X_i | X_S),   S uniform among the m-subsets of [L] \\ {i},   m = 0..L-1,

(non-increasing; h(0) - h(L-1) = (1/L) sum_i I(X_i; X_-i)), the chain rule gives, for the uniformly random
ordered blocks G = (G_1, ..., G_T) and the schedule law q_G(x) = prod_t prod_{i in G_t} p(x_i | x_{G_<t}),

    E_G KL(p || q_G) = sum_t sum_{j=0}^{k_t - 1} [h(r_t) - h(r_t + j)]                     (identity)

(KL(p || q_G) = sum_t [sum_{i in G_t} H(X_i | X_{G<t}) - H(X_{G_t} | X_{G<t})]; averaged over G, the first
sum is k_t h(r_t) and the second, by the chain rule in a uniform order inside G_t, sum_j h(r_t + j)). It is
the exact characterisation of Chen, Cong & Li (the area between h and its step approximation), in the form
derived here. Consequences:

* sharp bound: E KL <= (s_max - 1)(h(0) - h(L-1)) = ((s_max - 1)/L) sum_i I(X_i; X_-i), s_max = max k_t
  (each block's terms are at most (k_t - 1)(h(r_t) - h(r_(t+1) - 1)) and the ranges [r_t, r_(t+1) - 1] are
  disjoint); attained by the copy law (all tokens equal, uniform on V) whenever k_1 = s_max;
* the optimal K-step schedule minimises a sum of block costs c(r, k) = k h(r) - sum_{j<k} h(r + j): a
  dynamic programme over r in {0..L}, O(L^2 K) (:func:`optimal_schedule`).

h needs the 2^L marginal entropies H(X_A), computed here in log space (log-sum-exp marginals, a depth-first
walk over subsets: |V| (|V|+1)^L work). :func:`expected_kl_by_orders` computes the left side independently,
averaging KL(p || q_G) over every ordered block partition with the decoder laws of
:func:`mlmix.theory.kernels.decoders.decoder_law`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Iterator, Sequence

import numpy as np
from scipy.special import logsumexp

from mlmix.limits import ORDER_AVERAGE_LIMIT, SUBSET_ENTROPY_LIMIT
from mlmix.theory.kernels.decoders import decoder_law, partial_log_probs, tv_kl
from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.validation import check_int, check_memory


@dataclass(frozen=True)
class EntropyCurve:
    """h(m), m = 0..L-1 (module doc), in nats, each entry within ``abs_error``; ``subset_entropies[A]`` is
    H(X_A) for the bit set A (site i is bit i)."""

    h: np.ndarray
    abs_error: float
    subset_entropies: np.ndarray
    method: str

    @property
    def length(self) -> int:
        return int(self.h.size)

    def mutual_information_sum(self) -> Result:
        """sum_i I(X_i; X_-i) = L (h(0) - h(L-1))."""
        L = self.length
        return Result.checked("sum_i I(X_i; X_-i)", L * (self.h[0] - self.h[-1]), 2 * L * self.abs_error,
                              f"L (h(0) - h(L-1)); {self.method}", lower=0.0)

    def as_result(self) -> dict:
        return {"h": self.h.tolist(), "abs_error": self.abs_error, "method": self.method}


def _log_joint(source: Conditionals) -> np.ndarray:
    lw = source.log_joint()
    if lw is None:
        raise TypeError(f"the entropy curve needs a joint law; {type(source).__name__} has none")
    lw = np.asarray(lw, dtype=np.float64)
    return lw - logsumexp(lw)


def entropy_curve(source: Conditionals, law_rel_error: float = 0.0) -> EntropyCurve:
    """The entropy curve h(m) of the (tempered) joint of ``source`` and its 2^L marginal entropies.
    ``law_rel_error``: an entrywise relative error of the joint itself (a computed stationary law), carried
    into every entropy as 2 delta (1 + max|log p|)."""
    space = source.space
    q, n = space.vocab_size, space.length
    work = q * (q + 1) ** n
    if work > SUBSET_ENTROPY_LIMIT:
        raise ValueError(f"the 2^{n} marginal entropies of a joint on {q}^{n} states need |V| (|V|+1)^n = {work:,} "
                         f"operations, above the limit {SUBSET_ENTROPY_LIMIT:,}")
    check_memory(8.0 * 4 * q**n, f"the joint on {q}^{n} states and its marginals")
    logp = _log_joint(source)
    finite = logp[np.isfinite(logp)]
    big = float(np.abs(finite).max())
    H = np.empty(1 << n)

    def walk(lm: np.ndarray, kept: list[int], mask: int, start: int) -> None:
        p = np.exp(lm)
        H[mask] = float(-np.where(p > 0, p * np.where(p > 0, lm, 0.0), 0.0).sum())
        for j in (s for s in kept if s >= start):
            walk(logsumexp(lm, axis=kept.index(j)), [s for s in kept if s != j], mask & ~(1 << j), j + 1)

    walk(logp.reshape((q,) * n), list(range(n)), (1 << n) - 1, 0)
    # log-marginals: each of the <= n axis sums of q terms adds <= (q + 2) eps; H = -sum p log p then errs by
    # (log error)(1 + max|log p|) plus the rounding of a sum of q^n terms of size <= max|log p|.
    err_H = EPS * ((n * (q + 2) + 4) * (1.0 + big) + q**n * big) + 2 * float(law_rel_error) * (1.0 + big)
    pop = np.array([bin(a).count("1") for a in range(1 << n)])
    acc = np.zeros(n)
    for i in range(n):
        S = np.array([a for a in range(1 << n) if not a >> i & 1])
        np.add.at(acc, pop[S], H[S | 1 << i] - H[S])
    h = acc / (n * np.array([math.comb(n - 1, m) for m in range(n)], dtype=np.float64))
    method = (f"h(m) = mean over i and m-subsets S of H(X_{{S+i}}) - H(X_S), from the 2^{n} marginal entropies "
              "(log-sum-exp marginals of the normalised joint)")
    return EntropyCurve(h, 2 * err_H + 2 * n * EPS * float(np.abs(h).max()), H, method)


def check_sizes(sizes: Sequence[int] | str, length: int) -> tuple[int, ...]:
    """Block sizes k_1, ..., k_T: positive integers summing to the length ("3,1" as a string)."""
    if isinstance(sizes, str):
        try:
            sizes = [int(t) for t in sizes.replace(",", " ").split()]
        except ValueError:
            raise ValueError(f"block sizes are positive integers separated by commas, got {sizes!r}") from None
    if isinstance(sizes, (bytes, dict)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"block sizes must be a sequence of integers, got {type(sizes).__name__}")
    out = tuple(check_int(k, "block size", minimum=1) for k in sizes)
    if sum(out) != length:
        raise ValueError(f"block sizes must sum to the length {length}, got {list(out)} (sum {sum(out)})")
    return out


def block_cost(h: np.ndarray, r: int, k: int) -> float:
    """c(r, k) = sum_{j<k} [h(r) - h(r + j)]: the expected KL of unmasking k of the positions after r."""
    return float(sum(h[r] - h[r + j] for j in range(1, k)))


def schedule_kl(curve: EntropyCurve, sizes: Sequence[int] | str) -> Result:
    """E_G KL(p || q_G) for block sizes k_1..k_T in a uniformly random order, by the identity (module doc)."""
    ks = check_sizes(sizes, curve.length)
    r, total, terms = 0, 0.0, 0
    for k in ks:
        total += block_cost(curve.h, r, k)
        terms += k - 1
        r += k
    err = 2 * terms * curve.abs_error + 2 * terms * EPS * abs(total)
    return Result.checked(f"E KL(p || q), schedule {list(ks)}", max(total, 0.0), err,
                          "sum_t sum_{j<k_t} [h(r_t) - h(r_t + j)] (the chain-rule identity)", lower=0.0)


def sharp_bound(curve: EntropyCurve, sizes: Sequence[int] | str) -> Result:
    """((s_max - 1)/L) sum_i I(X_i; X_-i) = (s_max - 1)(h(0) - h(L-1)): the sharp upper bound of
    :func:`schedule_kl` (module doc; attained by the copy law when the first block is the largest)."""
    ks = check_sizes(sizes, curve.length)
    s = max(ks)
    v = (s - 1) * (curve.h[0] - curve.h[-1])
    return Result.checked(f"((s_max - 1)/L) sum_i I(X_i; X_-i), s_max = {s}", max(v, 0.0),
                          2 * (s - 1) * curve.abs_error + 2 * EPS * abs(v), "(s_max - 1)(h(0) - h(L-1))", lower=0.0)


def compositions(length: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every composition of ``length`` into ``parts`` positive parts (C(length - 1, parts - 1) of them)."""
    for cuts in combinations(range(1, length), parts - 1):
        bounds = (0, *cuts, length)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:]))


def optimal_schedule(curve: EntropyCurve, steps: int) -> tuple[tuple[int, ...], Result]:
    """The K-step block sizes minimising :func:`schedule_kl`, by dynamic programming over the revealed count
    r: V_t(R) = min_{r < R} V_(t-1)(r) + c(r, R - r), V_0(0) = 0 (O(L^2 K); ties: the smaller r)."""
    L = curve.length
    K = check_int(steps, "steps", minimum=1, maximum=L)
    h = curve.h
    prefix = np.concatenate(([0.0], np.cumsum(h)))
    cost = np.full((L + 1, L + 1), np.inf)  # cost[r, R]: one block from r to R
    for r in range(L):
        for R in range(r + 1, L + 1):
            cost[r, R] = (R - r) * h[r] - (prefix[R] - prefix[r])
    value = np.full(L + 1, np.inf)
    value[0] = 0.0
    back = []
    for _ in range(K):
        cand = value[:, None] + cost  # (r, R)
        arg = np.argmin(cand, axis=0)
        value = cand[arg, np.arange(L + 1)]
        back.append(arg)
    sizes, R = [], L
    for arg in reversed(back):
        r = int(arg[R])
        sizes.append(R - r)
        R = r
    best = tuple(reversed(sizes))
    r = schedule_kl(curve, best)
    return best, Result(f"optimal {K}-step E KL", r.value, f"dynamic programme over r in 0..{L}; {r.method}",
                        r.rel_error, r.lower, r.upper, r.reason, {"schedule": list(best)})


def _from_revealed(real: Sequence[float], length: int) -> tuple[int, ...]:
    """Block sizes from real revealed counts R_0 = 0 < ... < R_K = L: rounded, then each step kept >= 1."""
    K = len(real) - 1
    R = [0]
    for t in range(1, K + 1):
        R.append(min(max(int(round(real[t])), R[-1] + 1), length - (K - t)))
    R[-1] = length
    return tuple(b - a for a, b in zip(R, R[1:]))


def common_schedules(length: int, steps: int) -> dict[str, tuple[int, ...]]:
    """Fixed K-step schedules of the literature, as block sizes (revealed counts rounded, >= 1 per step):
    uniform blocks (sizes as equal as possible, the larger last); cosine (MaskGIT: masked fraction
    cos(pi t / 2K) after step t); log-linear (the log-linear noise schedule of SEDD / MDLM: masked fraction
    1 - t/K); geometric (masked count L^(1 - t/K), halving-like); front-loaded (reversed cosine)."""
    L = check_int(length, "length", minimum=1)
    K = check_int(steps, "steps", minimum=1, maximum=L)
    t = np.arange(K + 1)
    base, extra = divmod(L, K)
    cosine = _from_revealed(L * (1 - np.cos(np.pi * t / (2 * K))), L)
    return {"uniform": (base,) * (K - extra) + (base + 1,) * extra,
            "cosine": cosine,
            "log-linear": _from_revealed(L * t / K, L),
            "geometric": _from_revealed(L - L ** (1 - t / K), L),
            "cosine reversed": tuple(reversed(cosine))}


def randomised_schedule_kl(curve: EntropyCurve, steps: int) -> Result:
    """The expected KL when the K block sizes are a uniformly random composition of L (sizes drawn once,
    then positions uniform), exactly: the mean of :func:`schedule_kl` over the C(L-1, K-1) compositions."""
    K = check_int(steps, "steps", minimum=1, maximum=curve.length)
    rs = [schedule_kl(curve, c) for c in compositions(curve.length, K)]
    lo, hi = float(np.mean([r.lower for r in rs])), float(np.mean([r.upper for r in rs]))
    return Result.checked(f"E KL, uniform random composition into {K} blocks", 0.5 * (lo + hi), 0.5 * (hi - lo),
                          f"mean over the {len(rs)} compositions of the identity", lower=0.0)


def schedule_gaps(curve: EntropyCurve, steps: int) -> list[dict]:
    """The optimal K-step schedule and each common one (with the randomised sizes), their expected KL and
    their gap to the optimum (KL - optimum, and the ratio KL / optimum when the optimum is resolved)."""
    best, opt = optimal_schedule(curve, steps)
    rows = [{"schedule": "optimal", "sizes": list(best), "kl": opt}]
    for name, sizes in common_schedules(curve.length, steps).items():
        rows.append({"schedule": name, "sizes": list(sizes), "kl": schedule_kl(curve, sizes)})
    rows.append({"schedule": "randomised sizes", "sizes": None, "kl": randomised_schedule_kl(curve, steps)})
    for row in rows:
        r = row["kl"]
        if row["sizes"] == list(best):
            row["gap"] = Result.exact("gap to the optimum", 0.0, "the optimal block sizes themselves")
        elif r.resolved and opt.resolved:
            row["gap"] = Result.checked("gap to the optimum", r.value - opt.value,
                                        r.upper - r.value + opt.upper - opt.value, "E KL - optimal E KL", lower=0.0)
        else:
            row["gap"] = Result.interval("gap to the optimum", max(r.lower - opt.upper, 0.0), r.upper - opt.lower,
                                         "E KL - optimal E KL", "an end is not resolved above the floating-point floor")
        row["ratio"] = float(r.value / opt.value) if r.resolved and opt.resolved and opt.value > 0 else None
    return rows


def ordered_blocks(sizes: Sequence[int]) -> Iterator[list[tuple[int, ...]]]:
    """Every ordered partition of 0..L-1 into blocks of the given sizes (L! / prod k_t! of them)."""
    def rest(free: tuple[int, ...], ks: Sequence[int]) -> Iterator[list[tuple[int, ...]]]:
        if not ks:
            yield []
            return
        for block in combinations(free, ks[0]):
            left = tuple(s for s in free if s not in block)
            for tail in rest(left, ks[1:]):
                yield [block, *tail]
    yield from rest(tuple(range(sum(sizes))), tuple(sizes))


def expected_kl_by_orders(source: Conditionals, sizes: Sequence[int] | str) -> Result:
    """E_G KL(p || q_G) independently of the identity: the mean of KL(p || decoder law) over every ordered
    partition G into blocks of the given sizes, each law by :func:`decoder_law` (``schedule``) on the
    joint's exact marginal conditionals."""
    ks = check_sizes(sizes, source.space.length)
    count = math.factorial(sum(ks)) // math.prod(math.factorial(k) for k in ks)
    if count > ORDER_AVERAGE_LIMIT:
        raise ValueError(f"{count:,} ordered block partitions exceed the limit {ORDER_AVERAGE_LIMIT:,}")
    table = PartialScoreTable.from_joint(source)
    lp = partial_log_probs(table)
    logp = _log_joint(source)
    p = np.exp(logp)
    p_rel = 4 * EPS * (2 + float(np.abs(logp[np.isfinite(logp)]).max())) + p.size * EPS
    lo = hi = 0.0
    for blocks in ordered_blocks(ks):
        law = decoder_law(table, "schedule", schedule=[list(b) for b in blocks], log_probs=lp)
        kl = tv_kl(law.law, law.rel_error, p, p_rel, "p")["kl"]
        lo, hi = lo + kl.lower, hi + kl.upper
    lo, hi = lo / count, hi / count
    return Result.checked(f"E KL(p || q), schedule {list(ks)}, by orders", 0.5 * (lo + hi), 0.5 * (hi - lo),
                          f"mean of KL(p || schedule law) over the {count} ordered block partitions (decoder DP)",
                          lower=0.0)
