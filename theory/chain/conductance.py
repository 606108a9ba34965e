"""Conductance of sets and chains: exact on small spaces, a certified interval on large ones.

With the ergodic flow Q(x, y) = pi(x) P(x, y) (THEOREMS.md 1.16):

    Phi(S) = Q(S, S^c) / pi(S),            Phi* = min{ Phi(S) : 0 < pi(S) <= 1/2 }.

Under stationarity Q(S, S^c) = Q(S^c, S), so every cut value, hence Phi*, is the same for P and
for its additive reversibilization S = (P + P*)/2, and Cheeger's inequality for S with gap gamma,

    gamma / 2 <= Phi* <= sqrt(2 gamma),

holds for non-reversible P as well. Paper G Thm 8 uses Phi(B) of a basin through
t_mix >= 1/(4 Phi(B)) when pi(B) <= 1/2.

Phi(S) of a given set is computed in log space, log Q(S, S^c) = logsumexp over the cut edges of
log pi(x) + log P(x, y) and log pi(S) = logsumexp over S of log pi, so masses of 1e-300 and flows
of 1e-320 do not underflow, and no subtraction occurs: it is accurate to a few ulps. The chain
conductance is exact by enumeration of all 2^N - 2 sets up to :data:`EXACT_CONDUCTANCE_LIMIT`
states; above, the interval [lower, upper] has lower = gamma_lower / 2 (Cheeger, with the gap's
certified lower end) and upper = Phi of an actual set (the best sweep cut of the slowest mode and of
the stationary-mass ordering), named by its size and mass: both numbers are in [0, 1].

On a matrix-free kernel (:func:`operator_conductance`): Phi* in
[gamma_lower / 2, min(Phi(S), sqrt(2 gamma_upper))], S the best sweep set {f < t} of the gap's Ritz
function over up to :data:`SWEEP_BINS` thresholds (all of them on small chains: then it is the exact
sweep), with Phi(S) recomputed as a sum of non-negative flows for the lighter side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp

from mlmix.limits import EXACT_CONDUCTANCE_LIMIT
from mlmix.theory.linalg.matrices import to_dense
from mlmix.theory.results import EPS, NAMES, Result, VectorResult, renamed
from mlmix.validation import Matrix, check_state_set

if TYPE_CHECKING:
    import torch

    from mlmix.theory.chain.markov_chain import Chain
    from mlmix.theory.chain.spectral import GapResult
    from mlmix.theory.linalg.operator import TransitionOperator

#: pi(S) <= 1/2 is tested as pi(S) <= 1/2 + _HALF_TOL so that sets of mass exactly 1/2 count.
_HALF_TOL = 1e-12

#: Number of the best sweep cuts re-evaluated exactly.
_RECHECK = 16


def log_set_conductance(P: Matrix, mask: np.ndarray, logpi: np.ndarray) -> tuple[float, float]:
    """(log Phi(S), log pi(S)) for the set ``mask``, subtraction-free in log space."""
    coo = sp.coo_array(P)
    cut = mask[coo.row] & ~mask[coo.col] & (coo.data > 0)
    log_mass = float(logsumexp(logpi[mask]))
    if not cut.any():
        return -math.inf, log_mass
    log_cut = float(logsumexp(logpi[coo.row[cut]] + np.log(coo.data[cut])))
    return log_cut - log_mass, log_mass


def set_conductance_result(P: Matrix, S: np.ndarray, logpi: np.ndarray) -> Result:
    """Phi(S) = Q(S, S^c) / pi(S) for a proper subset S (mask or indices), no restriction on pi(S)."""
    mask = check_state_set(S, P.shape[0], "S", proper=True)
    log_phi, log_mass = log_set_conductance(P, mask, logpi)
    phi = math.exp(log_phi)
    return Result.approximate("Phi(S)", phi, 4 * P.shape[0] * EPS, "flows summed in log space (subtraction-free)",
                              set_size=int(mask.sum()), set_mass=math.exp(log_mass), log10_value=log_phi / math.log(10))


def _witness(name: str, phi: float, mask: np.ndarray, log_mass: float) -> dict:
    return {"set_size": int(mask.sum()), "set_mass": math.exp(log_mass), "set": mask,
            "log10_upper": (math.log10(phi) if phi > 0 else None)}


def exact_conductance(P: Matrix, logpi: np.ndarray) -> Result:
    """Phi* by enumerating all 2^N - 2 proper subsets (N <= EXACT_CONDUCTANCE_LIMIT), in vectorised
    chunks; masses are rescaled by the largest so that pi spanning < 600 decades stays in range, and
    the minimiser is re-evaluated exactly in log space."""
    N = P.shape[0]
    if N < 2:
        return Result.missing("conductance", "-", "conductance needs at least 2 states")
    if N > EXACT_CONDUCTANCE_LIMIT:
        raise ValueError(f"exhaustive conductance enumerates 2^N subsets; N = {N} exceeds {EXACT_CONDUCTANCE_LIMIT}")
    dense = to_dense(P)
    shift = float(logpi.max())
    w = np.exp(logpi - shift)  # pi / max pi
    Q = dense * w[:, None]
    half = 0.5 * math.exp(-shift) + _HALF_TOL * math.exp(-shift)
    bits = np.arange(N, dtype=np.int64)
    best, best_code = math.inf, -1
    chunk = 1 << 15
    for start in range(1, 2**N - 1, chunk):
        codes = np.arange(start, min(start + chunk, 2**N - 1), dtype=np.int64)
        member = ((codes[:, None] >> bits) & 1).astype(np.float64)
        mass = member @ w
        ok = (mass <= half) & (mass > 0)
        if not ok.any():
            continue
        cut = ((member @ Q) * (1.0 - member)).sum(axis=1)
        phi = np.where(ok, cut / np.where(ok, mass, 1.0), np.inf)
        i = int(np.argmin(phi))
        if phi[i] < best:
            best, best_code = float(phi[i]), int(codes[i])
    mask = ((best_code >> bits) & 1).astype(bool)
    log_phi, log_mass = log_set_conductance(dense, mask, logpi)
    phi = math.exp(log_phi)
    return Result.approximate("conductance", phi, 4 * N * EPS, f"exhaustive search over the 2^{N} subsets",
                              **_witness("conductance", phi, mask, log_mass))


def _namespace(a: Any) -> Any:
    """numpy, or torch for a torch tensor (then torch is already loaded: nothing new is imported)."""
    if type(a).__module__.startswith("torch"):
        import torch  # the argument is a torch tensor, so torch is already loaded

        return torch
    return np


def sweep_profile(K: int, bucket: Any, mass: Any, pairs: Iterable[tuple[Any, Any, Any]],
                  reduce: Callable[[Any], Any] = lambda t: t) -> tuple[Any, Any]:
    """The sweep of a function over the states, shared by the assembled and the matrix-free chains:
    for the nested sets S_k = {x : bucket(x) < k}, k = 1..K, the cut Q(S_k, S_k^c) and the light-side
    mass min(pi(S_k), 1 - pi(S_k)) (Cheeger's ratio is their quotient).

    ``bucket``: the threshold group of each state (its rank in an ordering: every prefix; or the number
    of thresholds below f(x): binned sets); ``mass``: pi(x), at any common scale; ``pairs``: (bucket(x),
    bucket(y), pi(x) P(x, y)) over the transitions, in chunks. A transition x -> y crosses the cuts
    min < k <= max of its two buckets, so the cuts are one cumulative sum of +-flow at those two ends;
    both directions are counted (Q(S, S^c) = Q(S^c, S) for a stationary pi), hence the halving.
    ``reduce`` sums the two profiles over processes (the identity on one). numpy arrays or torch
    tensors alike (the arithmetic is the same)."""
    xp = _namespace(bucket)
    inside = reduce(xp.bincount(bucket.reshape(-1), weights=mass.reshape(-1), minlength=K + 1))
    diff = None
    for bx, by, flow in pairs:
        lo, hi = xp.minimum(bx, by), xp.maximum(bx, by)  # shapes broadcast with the flow's
        crossing = (flow * (lo != hi)).reshape(-1)
        term = xp.bincount(lo.reshape(-1) + 1, weights=crossing, minlength=K + 2) - \
            xp.bincount(hi.reshape(-1) + 1, weights=crossing, minlength=K + 2)
        diff = term if diff is None else diff + term
    if diff is None:
        raise ValueError("the sweep needs the transitions' flows (no pairs were given)")
    diff = reduce(diff)
    cut = xp.cumsum(diff, 0)[1:K + 1] / 2
    below = xp.cumsum(inside, 0)[:K]
    return cut, xp.minimum(below, inside.sum() - below)


def sweep_candidates(P: Matrix, order: np.ndarray, logpi: np.ndarray) -> list[np.ndarray]:
    """The most promising prefix sets of an ordering of the states (light side, pi <= 1/2), ranked by
    an approximate cut ratio (prefix sums; only a ranking: the winners are re-evaluated exactly)."""
    N = P.shape[0]
    rank = np.empty(N, dtype=np.int64)
    rank[order] = np.arange(N)
    coo = sp.coo_array(P)
    shift = float(logpi.max())
    w = np.exp(logpi - shift)
    cut, light = sweep_profile(N - 1, rank, w, [(rank[coo.row], rank[coo.col], w[coo.row] * coo.data)])
    ratio = np.maximum(cut, 0.0) / np.maximum(light, np.finfo(float).tiny)
    mass = np.cumsum(w[order])[: N - 1]
    total = w.sum()
    picks = np.argsort(ratio, kind="stable")[:_RECHECK]
    out = []
    for k in picks:
        prefix = np.zeros(N, dtype=bool)
        prefix[order[: k + 1]] = True
        out.append(prefix if mass[k] <= total / 2 else ~prefix)
    return out


def conductance_interval(P: Matrix, logpi: np.ndarray, gap: Result, modes: list[np.ndarray]) -> Result:
    """Phi* in [gap_lower / 2, Phi(best named set)] for a chain too large to enumerate; ``modes``:
    functions over the states whose sweep cuts are tried (the slowest mode of (P + P*)/2 ...); the
    stationary-mass ordering is always tried too."""
    N = P.shape[0]
    orders = [np.argsort(f, kind="stable") for f in modes] + [np.argsort(-logpi, kind="stable")]
    best = (math.inf, None, 0.0)
    for order in orders:
        for mask in sweep_candidates(P, order, logpi):
            if not mask.any() or mask.all():
                continue
            log_phi, log_mass = log_set_conductance(P, mask, logpi)
            if log_mass <= math.log(0.5 + _HALF_TOL) and log_phi < best[0]:
                best = (log_phi, mask, log_mass)
    lower = max(gap.lower or 0.0, 0.0) / 2
    if best[1] is None:
        return Result.interval("conductance", min(lower, 1.0), 1.0, "Cheeger lower bound only",
                               "no sweep set with pi(S) <= 1/2 was found")
    upper = math.exp(best[0]) * (1 + 4 * N * EPS)
    lower = min(lower, upper)
    method = ("lower: Cheeger gap/2 of (P+P*)/2 (the gap's certified lower end); upper: Phi of the best sweep "
              "cut of the slowest mode / the stationary-mass order, recomputed in log space")
    reason = "the exact value needs all 2^N subsets; the interval is certified"
    if upper - lower <= 1e-6 * upper:
        return Result.approximate("conductance", upper, (upper - lower) / upper, method,
                                  **_witness("conductance", upper, best[1], best[2]))
    return Result.interval("conductance", lower, upper, method, reason,
                           **_witness("conductance", upper, best[1], best[2]))


# ------------------------------------------------------------ matrix-free (a TransitionOperator)

#: Thresholds tried by the sweep cut (every distinct value of f on chains with fewer states).
SWEEP_BINS = 1 << 16


def _thresholds(op: TransitionOperator, f: torch.Tensor, bins: int) -> torch.Tensor:
    import torch  # deferred: only the matrix-free route loads torch

    stride = max(1, (op.n_states + bins - 1) // bins)
    sample = op.comm.all_gather_cat(f[::stride].contiguous())
    values = torch.unique(sample)  # sorted
    if values.numel() > bins:
        values = values[torch.linspace(0, values.numel() - 1, bins, device=values.device).long()].unique()
    return values


def operator_set_conductance(op: TransitionOperator, S: np.ndarray, pi: VectorResult) -> Result:
    """Phi(S) = Q(S, S^c) / pi(S) of a set (this process's boolean mask) on a matrix-free kernel, flows
    summed as non-negative terms; accurate to the rounding plus 2 x pi's entrywise error bound, and
    unresolved (the value with the computed law in ``details``) where pi's error is not bounded."""
    import torch  # deferred: only the matrix-free route loads torch

    from mlmix.theory.linalg.operator_vectors import global_total

    whole = op.comm.world_size == 1  # sharded: each process holds a slice, so only the mass decides
    mask = torch.as_tensor(check_state_set(S, op.local_size, "S", proper=whole), device=op.device)
    pi_t = torch.as_tensor(pi.value, device=op.device).to(op.dtype)
    mass = global_total(op, torch.where(mask, pi_t, 0.0))
    if not 0 < mass < 1:
        raise ValueError("S must be a proper subset of the states")
    unit = float(torch.finfo(op.dtype).eps) / 2
    value = op.escape_flow(mask, pi_t) / mass
    method = "flows summed as non-negative terms (matrix-free)"
    details = {"set_size": int(mask.sum()), "set_mass": mass}
    if pi.rel_error is None:
        return Result.interval(NAMES["set_conductance"], 0.0, 1.0, method, "the stationary law's error is not "
                               "bounded (its certificate failed), so Phi(S) computed with it is not either",
                               value_with_computed_law=value, **details)
    rel = 8 * unit * (op.terms + math.log2(op.n_states)) + 2 * pi.rel_error
    return Result.approximate(NAMES["set_conductance"], value, rel, method, **details)


def operator_conductance(op: TransitionOperator, pi: VectorResult, gap: GapResult, *,
                         bins: int = SWEEP_BINS) -> Result:
    """Phi* = min over pi(S) <= 1/2 of Q(S, S^c) / pi(S): an interval (module docstring), with the
    named set (``set``: this process's mask), its size, mass and conductance in ``details``."""
    import torch  # deferred: only the matrix-free route loads torch

    from mlmix.theory.linalg.operator_vectors import global_total

    comm = op.comm
    pi_t = torch.as_tensor(pi.value, device=op.device).to(op.dtype)
    f = gap.fiedler
    thr = _thresholds(op, f, bins)
    K = thr.numel()
    bucket = torch.searchsorted(thr, f.contiguous(), right=True)  # number of thresholds <= f(x)
    pairs = ((bx, by, (px * cxy).double()) for px, cxy, (bx,), (by,) in op.fibre_pairs(pi_t, [bucket]))
    cut, light = sweep_profile(K, bucket, pi_t.double(), pairs, reduce=comm.allreduce_)  # sets {bucket < k}
    ratio = torch.where(light > 0, cut / light.clamp(min=1e-300), torch.full_like(cut, math.inf))
    k = int(torch.argmin(ratio)) + 1
    S = bucket < k
    mass_s = global_total(op, torch.where(S, pi_t, 0.0))
    mass_c = global_total(op, torch.where(S, 0.0, pi_t))
    if mass_s > mass_c:
        S, mass_s, mass_c = ~S, mass_c, mass_s
    size = int(comm.allreduce_(S.sum()))
    phi_s = op.escape_flow(S, pi_t) / mass_s
    unit = float(torch.finfo(op.dtype).eps) / 2
    # Phi(S) with the computed law bounds Phi* only where that law's error is bounded
    margin = 8 * unit * (op.terms + math.log2(op.n_states)) + \
        (2 * pi.rel_error if pi.rel_error is not None else math.inf)
    phi_upper = phi_s * (1 + margin) if math.isfinite(margin) else math.inf
    g = gap.gap
    cheeger_upper = math.sqrt(2 * g.upper) if g.upper is not None else math.inf
    upper = min(phi_upper, cheeger_upper, 1.0)
    lower = g.lower / 2 if g.lower is not None else 0.0
    method = ("lower: Cheeger gap/2 (gap's lower bound); upper: "
              + (f"Phi(S) of the best of {K} sweep sets of the Ritz function, recomputed as a sum of flows"
                 if phi_upper <= min(cheeger_upper, 1.0) else "Cheeger sqrt(2 gap)" if cheeger_upper <= 1.0
                 else "Phi* <= 1 (pi's error is not bounded, so neither is Phi(S) of a sweep set)"))
    return Result.interval(NAMES["conductance"], lower, upper, method,
                           "Phi* is a minimum over 2^N sets: only an enclosure is computable at this size",
                           set_size=size, set_mass=mass_s, set=S.cpu().numpy(), set_conductance=phi_s,
                           set_conductance_upper=phi_upper if math.isfinite(phi_upper) else None, log10_upper=math.log10(upper) if upper > 0 else None,
                           sweep_thresholds=K)


# ------------------------------------------------------------ the choice for a Chain

def chain_conductance(chain: Chain) -> Result:
    """Phi* = min{Phi(S) : 0 < pi(S) <= 1/2}, Phi(S) = Q(S, S^c) / pi(S), of a chain
    (:attr:`Chain.conductance <mlmix.theory.chain.markov_chain.Chain.conductance>`). Routes:

    * matrix-free: :func:`operator_conductance` from the gap's Ritz function (timed as ``conductance_s``);
    * several closed classes with a given positive law: exactly 0 (one of mass <= 1/2 has no exit flow);
    * at most :data:`~mlmix.limits.EXACT_CONDUCTANCE_LIMIT` states on the closed class with
      max log pi - min log pi < 600: :func:`exact_conductance` (all 2^N - 2 sets);
    * otherwise (dense or CSR): :func:`conductance_interval`, [gamma_lower / 2, Phi of the best sweep
      set of the slowest mode] (Cheeger; the gap's lower end is already charged for pi's error).

    Matrix routes are widened for P's subnormal entries (exact route) and charged for pi_hat's
    error: Q(S, S^c) and pi(S) are linear in pi."""
    if chain.facts.representation == "operator":
        return operator_conductance(chain.op, chain.stationary, chain.facts.operator_gap, bins=chain.facts.bins)
    core = chain.facts.core
    if chain.facts.reducible_given:
        return Result.exact(NAMES["conductance"], 0.0, "several closed classes: one of mass <= 1/2 has no exit flow")
    lp = core.facts.logpi
    if core.n_states <= EXACT_CONDUCTANCE_LIMIT and np.ptp(lp) < 600:
        phi = chain.facts.rounded_entries(exact_conductance(core.P, lp), (0.0, 1.0))
        return renamed(chain.facts.charged(phi, (0.0, 1.0)), NAMES["conductance"], chain.facts.on_core())
    gap, mode = chain.facts.gap_and_mode  # its lower end is already charged
    return renamed(chain.facts.charged(conductance_interval(core.P, lp, gap, [mode]), (0.0, 1.0)), NAMES["conductance"],
                   chain.facts.on_core())


def chain_set_conductance(chain: Chain, S: np.ndarray) -> Result:
    """Phi(S) = Q(S, S^c) / pi(S) of a set of states (mask or indices): matrix-free by
    :func:`operator_set_conductance` (flows summed as non-negative terms), on a dense or CSR matrix by
    :func:`set_conductance_result` in log space, charged for pi_hat's error."""
    if chain.facts.representation == "operator":
        return operator_set_conductance(chain.op, S, chain.stationary)
    return chain.facts.charged(set_conductance_result(chain.P, S, chain.facts.logpi), (0.0, 1.0))
