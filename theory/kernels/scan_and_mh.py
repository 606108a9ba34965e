"""Exact kernels of the scan-order and Metropolis-Hastings samplers people run on masked LMs.

Both need only the single-site conditionals p_i^T(. | x_{-i}) = softmax(s_i(. | x_{-i}) / T) that every
:class:`~mlmix.theory.sources.conditionals.Conditionals` source gives (the table `mlmix exact` tabulates).

* **Systematic scan** (Gibbs with a fixed sweep order; Chen & Ip, "Behaviour of the Gibbs sampler when
  conditional distributions are potentially incompatible", J. Stat. Comput. Simul. 85 (2015)): one
  sweep is the product of heat-bath kernels ``P_sys = P_{i0} P_{i1} ... P_{i(n-1)}`` with
  ``P_i(x, y) = 1[y_{-i} = x_{-i}] p_i^T(y_i | x_{-i})``. With incompatible conditionals its
  stationary law depends on the order and differs from random scan's; with a compatible source
  every order leaves the joint invariant. One step of this chain is one sweep.
* **Metropolis-Hastings with an MLM proposal** (Goyal, Dyer & Berg-Kirkpatrick, ICLR 2022,
  "Exposing the implicit energy networks behind masked language models via Metropolis-Hastings",
  section 3): pick a site i uniformly, propose a ~ p_i^T(. | x_{-i}), accept with
  ``min(1, exp(-E(x')) p_i^T(x_i | x_{-i}) / (exp(-E(x)) p_i^T(a | x_{-i})))``, where

      E_logit(x) = -(1/T) sum_i s_i(x_i | x_{-i}),     E_pll(x) = -sum_i log p_i^T(x_i | x_{-i}).

  The kernel is reversible with respect to exp(-E)/Z (the proposal's reverse move has the same
  context x_{-i}); on a compatible source with E = -log p every proposal is accepted and the kernel
  is random-scan Glauber.

Temperature and truncation: the temperature divides the scores first, p^T = softmax(s / T); top-k and
top-p (:class:`Truncated`) then act on p^T and renormalise, as in generation code (temperature, then
top-k, then top-p). E_logit uses the scores (with -inf on truncated symbols), E_pll the truncated
conditionals.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.special import log_softmax, logsumexp

from mlmix.limits import DEFAULT_MAX_STATES, SYSTEMATIC_LIMIT
from mlmix.theory.kernels.assembled import _zero_digit_states, boolean_pattern, fibre_pairs
from mlmix.theory.results import EPS, Result
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int, check_memory, check_real, check_scaled_scores, check_sites

#: Energies of the Metropolis-Hastings samplers.
ENERGIES = ("logit", "pll")



# ---------------------------------------------------------------------------------------- truncation
def truncate_log_probs(log_probs: np.ndarray, top_k: int | None = None, top_p: float | None = None) -> np.ndarray:
    """Top-k then top-p truncation of log-probabilities along the last axis, renormalised in log space.

    Symbols are ranked by their log-probability; *ties* are symbols whose log-probabilities are equal
    floats, and a tie group is always kept or removed whole, so the kept set is never split by the
    order of equal entries.

    * top-k keeps the symbols whose log-probability is >= the k-th largest: the k most probable and
      every symbol tied with the k-th (possibly more than k).
    * top-p (applied to what top-k kept) keeps the smallest set of most probable symbols whose mass is
      >= p, together with every symbol tied with its least probable member. With the symbols sorted
      by decreasing probability, head_j = mass of the first j + 1 and tail_j = the mass after them, the
      set ends at the first j with head_j >= p (head_j + tail_j), i.e. (1 - p) head_j >= p tail_j. Both
      sides are computed in log space (log1p(-p) + logsumexp of the head against log p + logsumexp
      of the tail, cumulated with logaddexp), so probabilities 1000 nats apart, or a tail of 1e-300,
      are compared to a relative accuracy of a few (|V| + 2) ulps. A comparison within that rounding
      bound counts as reached (the boundary case "mass = p" keeps the smaller set).

    A row from which nothing is removed is returned unchanged, bit for bit: top_k = |V| and top_p = 1
    are the identity (a probability is removed only when the kept mass is >= p without it, so no
    positive probability, however small, is dropped at p = 1). A row that loses symbols gets -inf on
    them and the kept log-probabilities minus their logsumexp (the kept law sums to 1 within a few
    ulps)."""
    lp = np.asarray(log_probs, dtype=np.float64)
    q = lp.shape[-1]
    keep = np.ones(lp.shape, dtype=bool)
    if top_k is not None:
        k = check_int(top_k, "top_k", minimum=1, maximum=q)
        kth = -np.sort(-lp, axis=-1)[..., k - 1:k]
        keep = lp >= kth
    if top_p is not None:
        p_cut = check_real(top_p, "top_p", minimum=0.0, maximum=1.0, open_min=True)
        if p_cut < 1.0:
            keep &= lp >= _top_p_level(np.where(keep, lp, -np.inf), p_cut)
    if keep.all():
        return lp
    with np.errstate(divide="ignore", invalid="ignore"):
        kept = np.where(keep, lp, -np.inf)
        renormalised = kept - logsumexp(kept, axis=-1, keepdims=True)
    return np.where(keep.all(axis=-1, keepdims=True), lp, renormalised)


def _top_p_level(lp: np.ndarray, p: float) -> np.ndarray:
    """The log-probability of the last symbol of the top-p set of every row, (..., 1), for 0 < p < 1
    (:func:`truncate_log_probs`): the first j in decreasing order with
    log1p(-p) + log head_j >= log p + log tail_j - tol, tol the rounding bound of the two cumulations."""
    q = lp.shape[-1]
    s = -np.sort(-lp, axis=-1)  # decreasing; -inf last
    with np.errstate(divide="ignore", invalid="ignore"):
        head = np.logaddexp.accumulate(s, axis=-1)
        tail = np.concatenate([np.flip(np.logaddexp.accumulate(np.flip(s[..., 1:], axis=-1), axis=-1), axis=-1),
                               np.full(s.shape[:-1] + (1,), -np.inf)], axis=-1)
        lhs = math.log1p(-p) + head
        rhs = math.log(p) + tail
        scale = np.where(np.isfinite(s), np.abs(s), 0.0).max(axis=-1, keepdims=True)
        tol = 4.0 * (q + 2) * EPS * (2.0 + scale + abs(math.log(p)) + abs(math.log1p(-p)))
        reached = (lhs >= rhs - tol) | np.isneginf(rhs)  # an empty tail: everything is kept
    first = np.argmax(reached, axis=-1)[..., None]
    return np.take_along_axis(s, first, axis=-1)


class Truncated(Conditionals):
    """A source whose conditionals are ``base``'s at temperature T, truncated by top-k / top-p and
    renormalised (:func:`truncate_log_probs`). Scores are the base scores with -inf on the removed
    symbols, so E_logit gives removed states zero target mass."""

    truncated = True

    def __init__(self, base: Conditionals, top_k: int | None = None, top_p: float | None = None,
                 temperature: float | None = None) -> None:
        super().__init__(base.space, base.temperature if temperature is None else temperature)
        if top_k is not None:
            check_int(top_k, "top_k", minimum=1, maximum=base.space.vocab_size)
        if top_p is not None:
            check_real(top_p, "top_p", minimum=0.0, maximum=1.0, open_min=True)
        self.base, self.top_k, self.top_p = base, top_k, top_p

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        s = np.asarray(self.base.site_scores(contexts, site), dtype=np.float64)
        return np.where(np.isfinite(self._truncate(s)), s, -np.inf)

    def _truncate(self, scores: np.ndarray) -> np.ndarray:
        return truncate_log_probs(log_softmax(scores / self.temperature, axis=-1), self.top_k, self.top_p)

    def log_conditionals(self, contexts: np.ndarray, sites: int | np.ndarray) -> np.ndarray:
        return self._truncate(self.base.scores(contexts, sites))


# ---------------------------------------------------------------------------------------- site tables
def site_fibres(space: StateSpace, site: int) -> tuple[np.ndarray, np.ndarray]:
    """(base, members): the states with x_site = 0 and, row by row, their fibre {x^{site<-a}}, (N/q, q)."""
    base = _zero_digit_states(space, [site])
    return base, base[:, None] + int(space.place_values[site]) * np.arange(space.vocab_size)


def heat_bath_kernel(source: Conditionals, site: int, max_states: int = DEFAULT_MAX_STATES) -> sp.csr_array:
    """P_i(x, y) = 1[y_{-i} = x_{-i}] p_i^T(y_i | x_{-i}): resample site i from its conditional."""
    space = source.space
    space.check_size(max_states)
    i = space.check_site(site)
    q = space.vocab_size
    base, members = site_fibres(space, i)
    probs = np.exp(source.log_conditionals(space.decode(base), i))  # (N/q, q)
    rows = np.repeat(members, q, axis=1).ravel()
    cols = np.tile(members, (1, q)).ravel()
    vals = np.tile(probs, (1, q)).ravel()
    P = sp.csr_array((vals, (rows, cols)), shape=(space.size, space.size))
    P.eliminate_zeros()
    return P


def systematic_support(source: Conditionals, order: Sequence[int] | str | None = None) -> sp.csr_array:
    """The exact support of :func:`systematic_kernel`: the Boolean product, in the sweep ``order``, of the
    heat-bath patterns {x -> x^{i<-a}: log p_i(a | x_{-i}) > -inf}."""
    space = source.space
    N, q = space.size, space.vocab_size
    S = sp.eye_array(N, dtype=np.int64, format="csr")
    for i in check_order(space, order):
        base, members = site_fibres(space, i)
        r, c = fibre_pairs(members, np.isfinite(source.log_conditionals(space.decode(base), i)), q)
        S = sp.csr_array(S @ boolean_pattern(N, r, c).astype(np.int64))
        S.data[:] = 1  # counts of paths can only grow: keep 0/1
    return sp.csr_array(S.astype(bool))


def check_order(space: StateSpace, order: Sequence[int] | str | None) -> list[int]:
    """A scan order: a sequence of sites, ints in [0, n) (bools and floats refused, :func:`check_sites`),
    or a string of integers separated by spaces or commas; default 0, 1, ..., n-1. Every site must
    appear at least once (otherwise the scan never updates it)."""
    if order is None:
        return list(range(space.length))
    if isinstance(order, str):
        try:
            order = [int(tok) for tok in order.replace(",", " ").split()]
        except ValueError:
            raise ValueError(f"order must be integers separated by spaces, got {order!r}") from None
    sites = check_sites(order, space.length, "order")
    missing = sorted(set(range(space.length)) - set(sites))
    if missing:
        raise ValueError(f"the scan order must visit every site; missing {missing}")
    return sites


def systematic_kernel(source: Conditionals, order: Sequence[int] | str | None = None,
                      max_states: int = SYSTEMATIC_LIMIT) -> np.ndarray:
    """One systematic sweep P_sys = P_{i0} P_{i1} ... P_{i(m-1)} (heat bath at each site in ``order``,
    default 0..n-1); dense (every state is reachable in one sweep), at most ``max_states`` states."""
    space = source.space
    space.check_size(max_states)
    sites = check_order(space, order)
    check_memory(24.0 * float(space.size) ** 2, f"the dense systematic-scan kernel on {space.size} states")
    P = np.eye(space.size)
    for i in sites:
        P = np.asarray((heat_bath_kernel(source, i).T @ P.T).T)  # P <- P @ P_i (sparse on the right)
    return P


# ---------------------------------------------------------------------------------------- energies
def energy(source: Conditionals, kind: str, max_states: int = DEFAULT_MAX_STATES) -> np.ndarray:
    """E(x) for every state in index order: ``"logit"``, E = -(1/T) sum_i s_i(x_i | x_{-i}), or
    ``"pll"``, E = -sum_i log p_i^T(x_i | x_{-i}) (the negative pseudo-log-likelihood); +inf where a
    truncated symbol is used."""
    if kind not in ENERGIES:
        raise ValueError(f"energy must be one of {', '.join(ENERGIES)}, got {kind!r}")
    space = source.space
    space.check_size(max_states)
    E = np.zeros(space.size)
    for i in range(space.length):
        base, members = site_fibres(space, i)
        ctx = space.decode(base)
        with np.errstate(over="ignore", invalid="ignore"):
            own = source.scores(ctx, i) / source.temperature if kind == "logit" else source.log_conditionals(ctx, i)
        check_scaled_scores(np.asarray(own), f"the {kind} energy's site {i}", "context {}".format)
        E[members] -= own
    return E


def energy_vector(source: Conditionals, kind: str | np.ndarray) -> np.ndarray:
    """E over the states: a named energy (:func:`energy`) or a given vector (+inf allowed, no NaN)."""
    if isinstance(kind, str):
        return energy(source, kind)
    E = np.asarray(kind, dtype=np.float64)
    if E.shape != (source.space.size,) or np.isnan(E).any() or np.isneginf(E).any():
        raise ValueError(f"an energy must be a vector of {source.space.size} numbers in (-inf, inf]")
    return E


def target_law(source: Conditionals, kind: str | np.ndarray) -> np.ndarray:
    """The MH target exp(-E)/Z, normalised in log space (``kind``: "logit", "pll" or an energy vector)."""
    E = energy_vector(source, kind)
    if not np.isfinite(E).any():
        raise ValueError("every state has infinite energy: the target has no mass")
    w = np.exp(-(E - E[np.isfinite(E)].min()))
    return w / w.sum()


def mh_logs(source: Conditionals, E: np.ndarray, site: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(members, log proposal (N/q, q), log of the accepted proposal mass (N/q, q_from, q_to)) at one site:
    log[ p_i(a|x_{-i}) min(1, exp(E(x) - E(x')) p_i(x_i|x_{-i}) / p_i(a|x_{-i})) ] =
    min(log p_i(a), E(x) - E(x') + log p_i(x_i)); undefined forms (inf - inf) are rejections."""
    space = source.space
    base, members = site_fibres(space, site)
    lp = source.log_conditionals(space.decode(base), site)
    Ex = E[members]
    with np.errstate(invalid="ignore"):
        back = Ex[:, :, None] - Ex[:, None, :] + lp[:, :, None]
        acc = np.minimum(lp[:, None, :], back)
    acc = np.where(np.isnan(acc), -np.inf, acc)
    return members, lp, acc


def mh_kernel(source: Conditionals, kind: str | np.ndarray, max_states: int = DEFAULT_MAX_STATES) -> sp.csr_array:
    """Metropolis-Hastings with the single-site MLM proposal and target exp(-E)/Z (module doc):

        P(x, x^{i<-a}) = (1/n) min(p_i(a | x_{-i}), exp(E(x) - E(x^{i<-a})) p_i(x_i | x_{-i})), a != x_i,

    the rejected mass on the diagonal (held as 1 - the off-diagonal row sum, as :class:`Chain` does).
    ``kind``: "logit", "pll", or any energy vector over the states (E = -log p of a joint p gives
    acceptance 1 on p's own conditionals: random-scan Glauber)."""
    space = source.space
    space.check_size(max_states)
    n, q, N = space.length, space.vocab_size, space.size
    check_memory(48.0 * N * (n * (q - 1) + 1), f"the MH kernel on {q}^{n} states")
    E = energy_vector(source, kind)
    rows, cols, vals = [], [], []
    off = ~np.eye(q, dtype=bool)
    for i in range(n):
        members, _, acc = mh_logs(source, E, i)
        m = members.shape[0]
        rows.append(np.broadcast_to(members[:, :, None], (m, q, q))[:, off].ravel())
        cols.append(np.broadcast_to(members[:, None, :], (m, q, q))[:, off].ravel())
        vals.append(np.exp(acc[:, off].ravel()) / n)
    P = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(N, N))
    diag_off = np.asarray(P.sum(axis=1)).ravel()
    P = P + sp.diags_array(np.maximum(1.0 - diag_off, 0.0)).tocsr()
    P = sp.csr_array(P)
    P.eliminate_zeros()
    P.sort_indices()
    return P


def mh_support(source: Conditionals, energy: str | np.ndarray = "logit") -> sp.csr_array:
    """The exact off-diagonal support of :func:`mh_kernel`: x -> x^{i<-a} (a != x_i) iff
    min(log p_i(a | x_{-i}), E(x) - E(x^{i<-a}) + log p_i(x_i | x_{-i})) > -inf (:func:`mh_logs`); the
    diagonal, 1 - the row's moves, is a difference of floats, so it is left to the float kernel."""
    space = source.space
    N, q = space.size, space.vocab_size
    E = energy_vector(source, energy)
    rows, cols = [], []
    off = ~np.eye(q, dtype=bool)
    for i in range(space.length):
        members, _, acc = mh_logs(source, E, i)
        m = members.shape[0]
        ok = np.isfinite(acc) & off
        rows.append(np.broadcast_to(members[:, :, None], (m, q, q))[ok])
        cols.append(np.broadcast_to(members[:, None, :], (m, q, q))[ok])
    return boolean_pattern(N, rows, cols)


def mh_acceptance(source: Conditionals, kind: str | np.ndarray) -> dict[str, Result]:
    """Acceptance at stationarity of the MH sampler with target pi = exp(-E)/Z:

        acceptance = sum_x pi(x) (1/n) sum_i sum_a p_i(a | x_{-i}) alpha(x, x^{i<-a})

    (a proposal a = x_i is accepted, alpha = 1) and the move rate sum_x pi(x) (1 - P(x, x)), the
    probability that a step changes the state. Both are sums of non-negative terms, accurate to a
    bound of
    16 eps (4 max|E| + n |V| + N): the absolute error of the log-space terms becomes relative after exp)."""
    space = source.space
    n, q = space.length, space.vocab_size
    E = energy_vector(source, kind)
    pi = target_law(source, E)
    accepted = 0.0
    moved = 0.0
    for i in range(n):
        members, lp, acc = mh_logs(source, E, i)
        w = pi[members]  # (N/q, q)
        mass = np.exp(acc)
        same = np.exp(lp)  # a proposal a = x_i (probability p_i(x_i | x_{-i})) is accepted
        moves = mass * (~np.eye(q, dtype=bool))
        accepted += float((w * (moves.sum(axis=2) + same)).sum()) / n
        moved += float((w * moves.sum(axis=2)).sum()) / n
    finite = E[np.isfinite(E)]
    rel = 16.0 * EPS * (4.0 * float(np.abs(finite).max()) + n * q + space.size)  # exp of log-space terms, sums
    label = f"E_{kind}" if isinstance(kind, str) else "E"
    how = f"sum over the {space.size} states of pi(x) times the accepted proposal mass (target exp(-{label})/Z)"
    return {"acceptance_rate": Result.approximate("acceptance rate at stationarity", accepted, rel, how),
            "move_rate": Result.approximate("move rate at stationarity", moved, rel, how)}


def single_site_log_offdiagonal(source: Conditionals, energy: str | None = None) -> np.ndarray:
    """log P(x, y) for x != y, dense (N, N) with -inf off the support, of a single-site kernel whose
    entries are one conditional each: Glauber (``energy`` None), log p_i(a | x_{-i}) - log n, or
    Metropolis-Hastings with target exp(-E_energy)/Z, min(log p_i(a | x_{-i}), E(x) - E(x^{i<-a})
    + log p_i(x_i | x_{-i})) - log n."""
    space = source.space
    N, n, q = space.size, space.length, space.vocab_size
    check_memory(8.0 * N * N, f"the log transition probabilities on {N} states")
    L = np.full((N, N), -np.inf)
    off = ~np.eye(q, dtype=bool)
    E = None if energy is None else energy_vector(source, energy)
    for i in range(n):
        if E is None:
            base, members = site_fibres(space, i)
            lc = source.log_conditionals(space.decode(base), i)  # (N/q, q)
            logs = np.broadcast_to(lc[:, None, :], (members.shape[0], q, q))
        else:
            members, _, logs = mh_logs(source, E, i)
        m = members.shape[0]
        rows = np.broadcast_to(members[:, :, None], (m, q, q))[:, off]
        cols = np.broadcast_to(members[:, None, :], (m, q, q))[:, off]
        L[rows, cols] = logs[:, off] - np.log(n)
    return L
