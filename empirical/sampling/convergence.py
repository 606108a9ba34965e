"""Convergence diagnostics of simulated chains held against the exact truth of the same chain.

m chains run N steps from a start law mu (uniform on V^n, or a point mass at a named state). On
the draws of a test function f the library ``arviz-stats`` computes the standard diagnostics
(Vehtari, Gelman, Simpson, Carpenter & Buerkner 2021, "Rank-normalization, folding, and
localization"): the rank-normalised split R-hat, the bulk and tail effective sample sizes and the
Monte Carlo standard error of the mean. Beside them:

- the L-lag coupling upper bound (Biswas, Jacob & Vanetti 2019, Theorem 2.5): with X_0, Y_0 ~ mu,
  X run L steps ahead and (X_t, Y_{t-L}) coupled so that they meet at tau and stay together,

      d_mu(t) = TV(mu P^t, pi) <= E[ max(0, ceil((tau - L - t) / L)) ],

  estimated by the average over independent pairs (an upper bound in expectation, not a certified
  bound). Glauber pairs use the coupling of Theorem 5's proof (same site, maximal coupling of the two
  conditionals, :func:`mlmix.empirical.sampling.simulation.run_coupled`); chains simulated from an assembled
  kernel use a maximal coupling of the two rows P(x, .) and P(y, .). Both are faithful: a pair that
  has met never separates.
- the exact values of the same chain (:class:`~mlmix.theory.chain.markov_chain.Chain`): d_mu(t) for t = 0..N by
  propagating mu, the worst-start t_mix(1/4), the stationary mean pi(f), the asymptotic variance
  sigma^2(f) (Poisson equation) and the exact effective sample size of the m N kept draws at
  stationarity,

      ESS = m N Var_pi(f) / sigma^2(f),

  (the CLT: Var(mean of m N stationary draws) ~ sigma^2(f) / (m N)), and the exact tail ESS, the same
  for the indicators 1{f <= q_p} at the pi-quantiles q_p, p = 5% and 95% (:func:`exact_tail_ess`: the
  estimand of arviz's tail ESS); where the chain is too large to assemble, the certified t_mix and gap
  intervals instead.
- a point estimate of the absolute spectral gap from the paths (:func:`empirical_gap`; no interval);
- the metastable sets of the exact chain (:mod:`mlmix.theory.chain.metastable`) and whether any chain
  visited each.

Verdicts (per function and diagnostic): R-hat "says converged" when R-hat < 1.01; it is
*overconfident* when d_mu(N) > 1/4 at the same time, *conservative* when R-hat >= 1.01 while
d_mu(N) <= 1/4, else it *agrees*. An ESS (and the sampled gap estimate) is *overconfident* above twice the exact
value, *conservative* below half of it (against a certified interval, such as the absolute gap of a large
non-reversible chain, only where every point of the interval gives the same verdict): the bulk ESS against the exact ESS of the mean, the tail ESS against the
exact tail ESS (like with like: the tail ESS estimates the ESS of the quantile indicators, not of the mean). The MCSE is *overconfident* when the error of the sampled mean is
more than 3 MCSE or the MCSE is below half the exact sqrt(sigma^2 / (m N)), *conservative* above
twice the exact one. The coupling bound is *overconfident* when it falls to 1/4 before d_mu does,
*conservative* when it does so after twice the exact time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from mlmix.empirical.sampling.simulation import NOT_COUPLED, inverse_cdf, maximal_coupling, run_chains, run_coupled
from mlmix.limits import DENSE_ROWS_LIMIT
from mlmix.provenance import stamp
from mlmix.theory.chain.metastable import metastable_sets
from mlmix.theory.kernels.registry import simulated_from_conditionals
from mlmix.theory.results import Result
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.validation import MIN_KEPT_DRAWS, check_draws, check_int, check_warmup, load_arrays

#: R-hat below this says "converged" (Vehtari et al. 2021).
RHAT_CONVERGED = 1.01
#: The TV threshold of "mixed".
MIXED = 0.25
#: Tail ESS quantiles (the arviz convention).
TAIL_PROB = (0.05, 0.95)


# --------------------------------------------------------------------------- test functions

@dataclass(frozen=True)
class TestFunction:
    """A real function of states: ``evaluate(states (..., n)) -> (...)``."""

    name: str
    evaluate: Callable[[np.ndarray], np.ndarray]
    needs_pi: bool = False


def _symbol(text: str, tokens: Sequence[str] | None, q: int, what: str) -> int:
    if tokens is not None and text in tokens:
        return list(tokens).index(text)
    try:
        k = int(text)
    except ValueError:
        known = f" (the alphabet: {' '.join(tokens)})" if tokens is not None else ""
        raise ValueError(f"{what}: unknown symbol {text!r}{known}") from None
    if not 0 <= k < q:
        raise ValueError(f"{what}: symbol {k} outside 0..{q - 1}")
    return k


def parse_function(spec: str, q: int, n: int, tokens: Sequence[str] | None = None) -> TestFunction:
    """A test function from its spec:

    - ``magnetization``: (1/n) sum_i (2 x_i / (|V| - 1) - 1), the mean spin for |V| = 2;
    - ``count:SYMBOL``: the number of sites holding SYMBOL (a token of the alphabet or an index);
    - ``site:I=SYMBOL``: 1 if site I holds SYMBOL, else 0;
    - ``logpi``: log pi(x) under the exact stationary law (enumerable chains only).
    """
    if spec == "magnetization":
        return TestFunction(spec, lambda s: (2.0 * s / (q - 1) - 1.0).mean(axis=-1))
    if spec == "logpi":
        return TestFunction(spec, lambda s: s, needs_pi=True)
    kind, _, rest = spec.partition(":")
    if kind == "count" and rest:
        a = _symbol(rest, tokens, q, spec)
        return TestFunction(spec, lambda s: (s == a).sum(axis=-1).astype(np.float64))
    if kind == "site" and "=" in rest:
        site, _, sym = rest.partition("=")
        try:
            i = int(site)
        except ValueError:
            raise ValueError(f"{spec}: site must be an integer 0..{n - 1}") from None
        if not 0 <= i < n:
            raise ValueError(f"{spec}: site {i} outside 0..{n - 1}")
        a = _symbol(sym, tokens, q, spec)
        return TestFunction(spec, lambda s: (s[..., i] == a).astype(np.float64))
    raise ValueError(f"bad function {spec!r}: use magnetization, count:SYMBOL, site:I=SYMBOL or logpi")


def as_function(f: str | Callable[[np.ndarray], np.ndarray], q: int, n: int,
                tokens: Sequence[str] | None = None, index: int = 0) -> TestFunction:
    """A test function from a spec (:func:`parse_function`) or from a callable ``f`` that maps an (m, n)
    integer array of states to m real values (vectorised); its name is ``f.__name__`` (``f<index>`` for
    a lambda). The callable's values are checked when it is evaluated (:func:`evaluate`)."""
    if isinstance(f, str):
        return parse_function(f, q, n, tokens)
    if not callable(f):
        raise TypeError(f"a test function is a spec string or a callable on (m, n) states, got {type(f).__name__}")
    name = getattr(f, "__name__", "") or ""
    return TestFunction(name if name.isidentifier() else f"f{index}", f)


def evaluate(f: TestFunction, states: np.ndarray) -> np.ndarray:
    """f on states (..., n) -> (...): a callable is called on the flattened (m, n) array and its output
    checked (one finite real per state)."""
    flat = states.reshape(-1, states.shape[-1])
    values = np.asarray(f.evaluate(flat), dtype=np.float64)
    if values.shape != (flat.shape[0],):
        raise ValueError(f"test function {f.name}: on an array of {flat.shape[0]} states it returned shape "
                         f"{values.shape}, not ({flat.shape[0]},)")
    if not np.isfinite(values).all():
        raise ValueError(f"test function {f.name}: returned a non-finite value (on state "
                         f"{flat[np.flatnonzero(~np.isfinite(values))[0]].tolist()})")
    return values.reshape(states.shape[:-1])


def parse_start(spec: str, q: int, n: int, tokens: Sequence[str] | None = None) -> np.ndarray | None:
    """``uniform`` (None: the uniform law on V^n) or a named state "s_1 ... s_n" (its symbols)."""
    if spec == "uniform":
        return None
    parts = spec.split()
    if len(parts) != n:
        raise ValueError(f"--start: a state needs n = {n} symbols, got {len(parts)} in {spec!r}")
    return np.array([_symbol(p, tokens, q, "--start") for p in parts], dtype=np.int64)


# --------------------------------------------------------------------------- library diagnostics

def library_diagnostics(draws: np.ndarray) -> dict:
    """arviz-stats diagnostics of draws (m chains, N draws): rank-normalised split R-hat, bulk and tail
    ESS, MCSE of the mean, and the mean. Undefined values (constant draws) are None with a reason."""
    from arviz_stats.base import array_stats  # a function-local import: arviz-stats loads only here

    x = np.asarray(draws, dtype=np.float64)
    out = {"mean": float(x.mean()), "draws": int(x.size)}
    if np.ptp(x) == 0:
        return {**out, "rhat": None, "ess_bulk": None, "ess_tail": None, "mcse": 0.0,
                "reason": "every draw has the same value: R-hat and ESS are undefined"}
    with np.errstate(divide="ignore", invalid="ignore"):
        kw = dict(chain_axis=0, draw_axis=1)
        vals = {"rhat": array_stats.rhat(x, method="rank", **kw),
                "ess_bulk": array_stats.ess(x, method="bulk", **kw),
                "ess_tail": array_stats.ess(x, method="tail", prob=TAIL_PROB, **kw),
                "mcse": array_stats.mcse(x, method="mean", **kw)}
    return {**out, **{k: (float(v) if np.isfinite(v) else None) for k, v in vals.items()}}


def coupling_bound(meeting: np.ndarray, lag: int, t_max: int) -> dict:
    """Biswas-Jacob-Vanetti's estimate of an upper bound on d_mu(t), t = 0..t_max, from the meeting
    times tau of independent L-lag pairs: mean over pairs of max(0, ceil((tau - L - t) / L)).

    ``meeting[p]`` is tau (>= L) or -1 when pair p had not met (censored): the estimate is then only
    known from below, and the bound is None with the count of censored pairs."""
    tau = np.asarray(meeting, dtype=np.int64)
    lag = check_int(lag, "lag", minimum=1)
    t = np.arange(t_max + 1)
    met = tau >= 0
    terms = np.maximum(0, -((-(tau[met][:, None] - lag - t[None, :])) // lag))  # ceil division
    estimate = terms.sum(axis=0) / max(len(tau), 1)
    censored = int((~met).sum())
    return {"lag": lag, "pairs": int(len(tau)), "censored": censored, "meeting_times": tau.tolist(),
            "upper_bound": None if censored else estimate.tolist(),
            "reason": (f"{censored} of {len(tau)} pairs did not meet within the step budget: only a lower "
                       "estimate of the bound is known" if censored else None),
            "lower_estimate": estimate.tolist() if censored else None}


def empirical_gap(states: np.ndarray, max_states: int = 2000) -> dict:
    """A point estimate of the absolute spectral gap from sample paths, after Hsu, Kontorovich, Levin,
    Peres & Szepesvari (2019, section 3), in its reversible form: with the transition counts N(x, y)
    pooled over the chains (states (T, m, n)) on the visited states, S = (N + N^T) / 2 and D = diag(S 1),
    the gap 1 - max(|l_2|, |l_min|) of D^{-1/2} S D^{-1/2} (a symmetric matrix with top eigenvalue 1,
    so the estimate lies in [0, 1]). Only the point estimate is computed, not the paper's
    empirical-Bernstein confidence interval; it sees only the visited states (blind to unvisited modes)."""
    T, m, n = states.shape
    visited, code = np.unique(states.reshape(-1, n), axis=0, return_inverse=True)
    code = code.reshape(T, m)
    k = len(visited)
    if k < 2:
        return {"value": None, "visited_states": k, "reason": "one state visited: no transition to estimate from"}
    if k > max_states:
        return {"value": None, "visited_states": k, "reason": f"more than {max_states} states visited"}
    counts = np.zeros((k, k))
    np.add.at(counts, (code[:-1].ravel(), code[1:].ravel()), 1.0)
    S = (counts + counts.T) / 2
    r = 1.0 / np.sqrt(S.sum(axis=1))
    eig = np.linalg.eigvalsh(r[:, None] * S * r[None, :])
    return {"value": float(min(1.0, max(0.0, 1 - max(abs(eig[-2]), abs(eig[0]))))), "visited_states": k,
            "method": "HKS-LPS 2019 point estimator, reversible form (symmetrised transition counts on the visited "
                      "states); no confidence interval"}


# --------------------------------------------------------------------------- simulation

class KernelSampler:
    """Batched simulation from an assembled kernel P (CSR): every chain's row is gathered into one
    padded (B, width) array and sampled by inverse CDF in one call; pairs by a maximal coupling of rows."""

    def __init__(self, P) -> None:
        P = sp.csr_array(P)
        self.indptr, self.indices, self.data = P.indptr.astype(np.int64), P.indices.astype(np.int64), P.data
        self.N = P.shape[0]

    def _rows(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start, stop = self.indptr[x], self.indptr[x + 1]
        width = int((stop - start).max())
        idx = start[:, None] + np.arange(width)[None, :]
        inside = idx < stop[:, None]
        idx = np.where(inside, idx, start[:, None])
        return np.where(inside, self.data[idx], 0.0), self.indices[idx]

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        probs, cols = self._rows(x)
        k = inverse_cdf(torch.from_numpy(probs), torch.from_numpy(u)).numpy()
        return cols[np.arange(len(x)), k]

    def coupled_step(self, x: np.ndarray, y: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        B = len(x)
        if B * self.N > DENSE_ROWS_LIMIT:
            raise ValueError(f"the kernel coupling scatters {B} rows of {self.N} states: more than "
                             f"{DENSE_ROWS_LIMIT} entries; use fewer pairs or the Glauber kernel")
        dense = []
        for z in (x, y):
            probs, cols = self._rows(z)
            rows = np.zeros((B, self.N))
            np.add.at(rows, (np.repeat(np.arange(B), cols.shape[1]), cols.ravel()), probs.ravel())
            dense.append(torch.from_numpy(rows))
        nx_, ny_ = maximal_coupling(dense[0], dense[1], *(torch.from_numpy(u[:, j]) for j in range(3)))
        return nx_.numpy(), ny_.numpy()


def simulate(source: Conditionals | None, P, kernel: str, x0: np.ndarray, steps: int, seed: int,
             space) -> np.ndarray:
    """States (steps + 1, m, n) of m chains from ``x0`` (m, n): Glauber chains through the source's
    conditionals (one batched query per step, :func:`mlmix.empirical.sampling.simulation.run_chains`), other kernels
    from the assembled kernel ``P``."""
    m = x0.shape[0]
    seeds = np.random.SeedSequence(seed).generate_state(m).astype(np.int64)
    if source is not None and simulated_from_conditionals(kernel):
        return run_chains(source, x0, steps, seeds=seeds).states
    if P is None:
        raise ValueError(f"simulating the {kernel} kernel needs its assembled matrix (an enumerable chain)")
    sampler, rng = KernelSampler(P), np.random.default_rng(seeds)
    idx = space.encode(x0)
    out = np.empty((steps + 1, m), dtype=np.int64)
    out[0] = idx
    for t in range(steps):
        idx = sampler.step(idx, rng.random(m))
        out[t + 1] = idx
    return space.decode(out)


def meeting_times(source: Conditionals | None, P, kernel: str, x0: np.ndarray, y0: np.ndarray, lag: int,
                  budget: int, seed: int, space) -> np.ndarray:
    """Meeting times tau = inf{t > L : X_t = Y_{t-L}} of L-lag pairs (X_0, Y_0) = (x0[p], y0[p]): X
    advances ``lag`` steps alone, then (X_t, Y_{t-L}) move coupled until they meet (at most ``budget``
    coupled steps; -1 if not). A pair with X_L = Y_0 meets at tau = L + 1 (the coupling is faithful)."""
    B = x0.shape[0]
    ss = np.random.SeedSequence([seed, 1])
    s_ahead, s_pair = (s.generate_state(B).astype(np.int64) for s in ss.spawn(2))
    if source is not None and simulated_from_conditionals(kernel):
        ahead = run_chains(source, x0, lag, seeds=s_ahead, record_every=lag).states[-1]
        met = run_coupled(source, ahead, y0, budget, seeds=s_pair, record_every=max(budget, 1)).coupling_time
        return np.where(met == NOT_COUPLED, -1, lag + np.maximum(met, 1))
    x = simulate(None, P, kernel, x0, lag, int(s_ahead[0]), space)[-1]
    sampler, rng = KernelSampler(P), np.random.default_rng(s_pair)
    xi, yi = space.encode(x), space.encode(y0)
    tau = np.where(xi == yi, lag + 1, -1)
    for t in range(budget):
        if (tau >= 0).all():
            break
        xi, yi = sampler.coupled_step(xi, yi, rng.random((B, 3)))
        tau[(tau < 0) & (xi == yi)] = lag + t + 1
    return tau


# --------------------------------------------------------------------------- verdicts

def exact_tail_ess(chain, f: np.ndarray, pi: np.ndarray, draws: int) -> dict:
    """The exact counterpart of arviz's tail ESS, min over p in :data:`TAIL_PROB` of the ESS of the indicator
    1{f <= q_p}: for each p the pi-quantile v_p = min{v : pi(f <= v) >= p}, the indicator g_p = 1{f <= v_p}
    and ESS_p = ``draws`` Var_pi(g_p) / sigma^2(g_p), sigma^2 from the Poisson equation as for the mean
    (``draws``: the m N' kept draws). An indicator that is constant under pi (v_p the largest value of f)
    has no variance to estimate and is left out of the minimum (arviz-stats counts it as ``draws`` effective
    draws). Returns ``value`` (None when no quantile has an indicator that varies, or its sigma^2 is not
    resolved), ``quantiles`` (p, v_p, pi(f <= v_p), ESS_p) and ``reason``."""
    values, where = np.unique(np.asarray(f, dtype=np.float64), return_inverse=True)
    below = np.cumsum(np.bincount(where, weights=pi, minlength=values.size))
    rows, found = [], []
    for p in TAIL_PROB:
        k = int(np.argmax(below >= p * (1 - 1e-9)))
        mass = float(min(below[k], 1.0))
        ess = None
        if k < values.size - 1:  # g_p varies: 0 < pi(f <= v_p) < 1
            sigma2 = chain.asymptotic_variance((where <= k).astype(np.float64))
            if sigma2.value is not None and sigma2.value > 0:
                ess = draws * mass * (1 - mass) / float(sigma2.value)
                found.append(ess)
        rows.append({"prob": p, "level": float(values[k]), "mass_at_or_below": mass, "ess": ess})
    if found:
        return {"value": min(found), "quantiles": rows, "reason": None}
    return {"value": None, "quantiles": rows,
            "reason": "no tail indicator 1{f <= q_p} varies under pi with a resolved sigma^2: the exact tail ESS "
                      "is undefined"}


def rhat_verdict(rhat: float | None, d_final: float | None, t_mix: tuple[float | None, float | None] = (None, None),
                 steps: int | None = None) -> dict:
    """R-hat against the exact d_mu(N) (module docstring). ``d_final`` below the rounding bound of the
    curve still decides the verdict: only which side of 1/4 it lies on matters.

    Without d_mu(N) (a chain too large to assemble) the certified worst-start interval ``t_mix`` =
    (lower, upper) decides where it can: t_mix upper <= N gives d_mu(N) <= d(N) <= 1/4 for every start
    (a "not converged" is then conservative); t_mix lower > N gives d(N) > 1/4 for the worst start
    only (a "converged" is then overconfident for the worst start, undetermined for mu)."""
    if rhat is None:
        return {"verdict": None, "reason": "R-hat is undefined (constant draws)"}
    says = rhat < RHAT_CONVERGED
    if d_final is None:
        lo, hi = t_mix
        base = {"rhat": rhat, "t_mix_interval": [lo, hi], "basis": "certified t_mix interval (worst start)"}
        if not says and hi is not None and steps is not None and hi <= steps:
            return {**base, "verdict": "conservative",
                    "reason": f"R-hat {rhat:.4f} says not converged, but t_mix <= {hi:g} <= N: d_mu(N) <= 1/4"}
        if says and lo is not None and steps is not None and lo > steps:
            return {**base, "verdict": "overconfident for the worst start",
                    "reason": f"R-hat {rhat:.4f} says converged, but t_mix >= {lo:g} > N: d(N) > 1/4 from the worst "
                              "start (the start law's distance is not known)"}
        return {**base, "verdict": None, "reason": "d_mu(N) is not known and the certified t_mix interval "
                                                   "does not decide"}
    mixed = d_final <= MIXED
    verdict = "agrees" if says == mixed else ("overconfident" if says else "conservative")
    return {"verdict": verdict, "rhat": rhat, "d_start_final": d_final,
            "says": f"R-hat {rhat:.4f} {'<' if says else '>='} {RHAT_CONVERGED}: "
                    f"{'converged' if says else 'not converged'}",
            "truth": f"d_mu(N) = {d_final:.4g} {'<=' if mixed else '>'} {MIXED}"}


def ratio_verdict(name: str, sampled: float | None, exact: float | None) -> dict:
    """An ESS against the exact one: overconfident above 2x, conservative below 1/2."""
    if sampled is None or exact is None or not math.isfinite(exact) or exact <= 0:
        return {"verdict": None, "reason": f"{name} or the exact ESS is undefined"}
    r = sampled / exact
    verdict = "overconfident" if r > 2 else "conservative" if r < 0.5 else "agrees"
    return {"verdict": verdict, name: sampled, "exact": exact, "ratio": r}


def interval_verdict(name: str, sampled: float | None, lower: float | None, upper: float | None,
                     value: float | None = None) -> dict:
    """:func:`ratio_verdict` against an exact value, or against a certified interval [lower, upper]: decided
    only where every point of it gives the same verdict (overconfident above 2 upper, conservative below
    lower / 2, agrees when sampled / upper >= 1/2 and sampled / lower <= 2), else undetermined with the reason."""
    if value is not None or sampled is None or lower is None or upper is None or not 0 < lower <= upper:
        return ratio_verdict(name, sampled, value)
    if sampled > 2 * upper:
        verdict = "overconfident"
    elif sampled < lower / 2:
        verdict = "conservative"
    elif sampled >= upper / 2 and sampled <= 2 * lower:
        verdict = "agrees"
    else:
        return {"verdict": None, name: sampled, "exact_interval": [lower, upper],
                "reason": f"the exact value is only known to lie in [{lower:.4g}, {upper:.4g}]: the ratio is not decided"}
    return {"verdict": verdict, name: sampled, "exact_interval": [lower, upper],
            "ratio_interval": [sampled / upper, sampled / lower]}


def mcse_verdict(mcse: float | None, mean: float, exact_mean: float | None, exact_se: float | None) -> dict:
    """The MCSE against the exact standard error and the actual error of the mean."""
    if mcse is None or exact_mean is None or exact_se is None or not math.isfinite(exact_se):
        return {"verdict": None, "reason": "the MCSE or the exact standard error is undefined"}
    err = abs(mean - exact_mean)
    if err > 3 * mcse or mcse < exact_se / 2:
        verdict = "overconfident"
    elif mcse > 2 * exact_se:
        verdict = "conservative"
    else:
        verdict = "agrees"
    return {"verdict": verdict, "mcse": mcse, "exact_se": exact_se, "error": err}


def crossing(curve: Sequence[float] | None, level: float = MIXED) -> int | None:
    """The first t with curve[t] <= level (None if never)."""
    if curve is None:
        return None
    hits = np.flatnonzero(np.asarray(curve) <= level)
    return int(hits[0]) if hits.size else None


def coupling_verdict(bound: Sequence[float] | None, d_start: Sequence[float] | None) -> dict:
    """The coupling bound's time to 1/4 against the exact d_mu's."""
    t_b, t_e = crossing(bound), crossing(d_start)
    if bound is None or d_start is None:
        return {"verdict": None, "bound_time_to_quarter": t_b,
                "reason": "the coupling bound or the exact d_mu is not known"}
    if t_e is None:
        verdict = "overconfident" if t_b is not None else "agrees"
    elif t_b is None:
        verdict = "conservative"
    else:
        verdict = "overconfident" if t_b < t_e else "conservative" if t_b > 2 * max(t_e, 1) else "agrees"
    return {"verdict": verdict, "bound_time_to_quarter": t_b, "exact_time_to_quarter": t_e}


# --------------------------------------------------------------------------- a user's own draws

def read_draws(path: str) -> np.ndarray:
    """The ``states`` array of a draws file: a NumPy ``.npz`` (key ``states``, shape (chains, steps, n),
    read without pickle) or an ArviZ InferenceData netCDF (``.nc``: the posterior variable ``states`` with
    dimensions (chain, draw, site); needs arviz). Shape and symbols are checked by :func:`diagnose`."""
    if str(path).endswith(".nc"):
        try:
            import arviz  # deferred: optional, only to read InferenceData files
        except ImportError:
            raise ValueError(f"{path}: reading an InferenceData netCDF needs arviz (pip install arviz); "
                             "or save the states with numpy.savez") from None
        try:
            posterior = arviz.from_netcdf(path).posterior
        except (OSError, ValueError, KeyError, AttributeError) as err:
            raise ValueError(f"{path}: not a readable InferenceData netCDF ({err})") from None
        if "states" not in posterior:
            raise ValueError(f"{path}: the posterior group has no variable 'states'")
        return np.asarray(posterior["states"].values)
    arrays = load_arrays(path, "draws file")
    if "states" not in arrays:
        raise ValueError(f"{path}: no array 'states' (it holds {sorted(arrays) or 'no arrays'}); save the draws "
                         "with numpy.savez(path, states=...)")
    return np.asarray(arrays["states"])


def check_transitions(chain, source: Conditionals | None, kernel: str, states: np.ndarray) -> str:
    """Refuse draws with a transition of probability zero under the chain (ValueError naming the chain,
    the step and the two states): a sign that the sampler is not the chain it claims. ``states`` is
    (T, m, n). Assembled chains look every transition up in P; a Glauber chain that is not assembled
    checks that one site changed at most and that its conditional is positive. Returns how it checked."""
    T, m, n = states.shape
    space = source.space if source is not None else chain.space
    codes = space.encode(states.reshape(-1, n)).reshape(T, m)
    x, y = codes[:-1].ravel(), codes[1:].ravel()
    if hasattr(chain, "P") and getattr(chain, "representation", "") in ("dense", "sparse"):
        P = chain.P
        probs = np.asarray(P[x, y]).ravel() if sp.issparse(P) else np.asarray(P)[x, y]
        positive = probs > 0
        how = "every transition looked up in the assembled kernel"
    elif source is not None and simulated_from_conditionals(kernel):
        a, b = states[:-1].reshape(-1, n), states[1:].reshape(-1, n)
        changed = a != b
        positive = changed.sum(axis=1) <= 1
        site = np.where(changed.any(axis=1), changed.argmax(axis=1), 0)
        for i in np.unique(site[positive]):
            rows = np.flatnonzero(positive & (site == i))
            logp = source.log_conditionals(a[rows], int(i))
            positive[rows] = np.isfinite(logp[np.arange(len(rows)), b[rows, i]])
        how = "Glauber moves: at most one site changed, to a symbol of positive conditional probability"
    else:
        return "not checked (a matrix-free chain of a kernel other than Glauber)"
    if not positive.all():
        k = int(np.flatnonzero(~positive)[0])
        t, c = divmod(k, m)
        raise ValueError(f"draws: chain {c}, step {t} -> {t + 1}: the transition {states[t, c].tolist()} -> "
                         f"{states[t + 1, c].tolist()} has probability 0 under the {kernel} chain (the sampler "
                         "is not the chain it claims)")
    return how


# --------------------------------------------------------------------------- the whole diagnosis

def _result(r) -> dict | None:
    return None if r is None else r.as_dict() if isinstance(r, Result) else r


def diagnose(chain, source: Conditionals | None = None, *, draws: np.ndarray | None = None,
             chains: int | None = None, steps: int | None = None, start: str | None = None,
             functions: Sequence[str | Callable[[np.ndarray], np.ndarray]] = ("magnetization",),
             seed: int | None = None, lag: int | None = None, pairs: int | None = None,
             coupling_budget: int | None = None, warmup: int = 0, metastable: bool = True,
             tokens: Sequence[str] | None = None, kernel: str | None = None, mixing_limit: int = 2048,
             inputs: dict | None = None) -> dict:
    """The library diagnostics of each test function beside the exact truth of ``chain`` (a
    :class:`~mlmix.theory.chain.markov_chain.Chain` built by ``Chain.from_source`` on any representation), with
    the verdicts (module docstring). Two ways in:

    * ``draws=None``: simulate ``chains`` chains (default 4) for ``steps`` steps (default 1000) from
      ``start`` ("uniform", the default, or a state "s_1 ... s_n") with ``seed`` (default 0), and run
      ``pairs`` L-lag coupled pairs (``lag`` defaults to max(1, steps // 4), ``pairs`` to max(chains, 16),
      ``coupling_budget`` coupled steps per pair to 10 * steps);
    * ``draws``: an integer array (chains, steps, n) of states from the user's own sampler, in mlmix's
      state encoding (:func:`read_draws` reads one from a file). Every draw enters the diagnostics (the
      first included, as ArviZ does); the start law is the empirical law of the draws' first states,
      d_mu(t) is exact from it, the chain count and length are the draws', and
      a transition of probability zero under ``chain`` is refused (:func:`check_transitions`). The
      coupling bound needs pairs run by mlmix and is not computed; the simulation options are refused.

    ``functions`` are specs (:func:`parse_function`) or callables on an (m, n) array of states returning
    m reals. Draws after ``warmup`` steps enter the diagnostics. ``kernel`` names the sampler when the
    chain does not (a matrix-free chain). ``mixing_limit`` is the largest state count for the exact dense
    t_mix (``mlmix exact``'s default; larger chains get certified bounds). The absolute gap is
    :attr:`Chain.absolute_spectral_gap` on every chain (its routes: a certified value, or beyond the dense size
    of a non-reversible chain the enclosure [1 - sigma_2, 1]), as ``mlmix run samplers`` reports it. Returns a JSON-ready dict with keys ``exact``, ``diagnostics``, ``coupling``,
    ``verdicts``, ``metastable``, ``inputs`` and ``mlmix_version``."""
    if source is None:
        source = getattr(chain, "source", None)
    kernel = kernel or getattr(chain, "kernel", None) or "matrix"
    if source is None:
        raise ValueError("diagnose needs the chain's source of conditionals (a built-in source or an MLM frame)")
    space = source.space
    n, q = space.length, space.vocab_size
    fns = [as_function(f, q, n, tokens, k) for k, f in enumerate(functions)]
    if not fns:
        raise ValueError("give at least one test function")
    assembled = hasattr(chain, "P") and getattr(chain, "representation", "") in ("dense", "sparse")
    if any(f.needs_pi for f in fns) and not assembled:
        raise ValueError("logpi needs the exact stationary law of an assembled (enumerable) chain")
    P = chain.P if assembled else None
    if draws is not None:
        given_sim = {k: v for k, v in dict(chains=chains, steps=steps, start=start, seed=seed, lag=lag, pairs=pairs,
                                           coupling_budget=coupling_budget).items() if v is not None}
        if given_sim:
            raise ValueError(f"with draws, {', '.join(sorted(given_sim))} come from the draws or are not used: "
                             "leave them out")
        states = np.ascontiguousarray(check_draws(draws, q, n).transpose(1, 0, 2))  # (T, m, n)
        steps, chains = states.shape[0] - 1, states.shape[1]
        warmup = check_warmup(warmup, steps + 1)  # every supplied state is a draw
        checked = check_transitions(chain, source, kernel, states)
        first = np.unique(states[0], axis=0)
        start = "the draws' first states" + (f" ({len(first)} distinct)" if len(first) > 1 else
                                             f" ({' '.join(map(str, first[0]))})")
        state = first[0] if len(first) == 1 else None
        coupling = {"lag": None, "pairs": 0, "censored": 0, "meeting_times": [], "upper_bound": None,
                    "lower_estimate": None,
                    "reason": "not computed for supplied draws: the L-lag coupling needs pairs run by mlmix's sampler"}
        source_of_draws = {"draws": "supplied", "seed": None, "transitions_checked": checked}
        mu_codes = space.encode(states[0])
    else:
        chains = check_int(4 if chains is None else chains, "chains", minimum=2)
        steps = check_int(1000 if steps is None else steps, "steps", minimum=MIN_KEPT_DRAWS)
        seed = 0 if seed is None else seed
        start = "uniform" if start is None else start
        warmup = check_warmup(warmup, steps)  # the start state is not a draw
        lag = max(1, steps // 4) if lag is None else check_int(lag, "lag", minimum=1)
        pairs = max(chains, 16) if pairs is None else check_int(pairs, "pairs", minimum=1)
        budget = 10 * steps if coupling_budget is None else check_int(coupling_budget, "coupling_budget", minimum=1)
        state = parse_start(start, q, n, tokens)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
        draw_start = ((lambda k: rng.integers(0, q, size=(k, n))) if state is None else
                      (lambda k: np.tile(state, (k, 1))))
        x0 = draw_start(chains)
        states = simulate(source, P, kernel, x0, steps, seed, space)  # (steps + 1, m, n)
        x_pairs, y_pairs = draw_start(pairs), draw_start(pairs)
        tau = meeting_times(source, P, kernel, x_pairs, y_pairs, lag, budget, seed, space)
        coupling = coupling_bound(tau, lag, steps)
        source_of_draws = {"draws": "simulated", "seed": seed, "lag": lag, "pairs": pairs, "coupling_budget": budget}
        mu_codes = None

    # exact side
    exact: dict = {"kernel": kernel, "n_states": int(getattr(chain, "n_states", space.size))}
    exact["t_mix"] = _result(chain.mixing_time(MIXED, max_states=mixing_limit) if assembled else chain.mixing_time(MIXED))
    exact["spectral_gap"] = _result(chain.spectral_gap)
    exact["absolute_spectral_gap"] = _result(chain.absolute_spectral_gap)  # Chain's routes, as in `mlmix run samplers`
    d_start = None
    pi = None
    if assembled:
        pi = np.asarray(chain.stationary, dtype=np.float64)
        if mu_codes is not None:  # the empirical law of the draws' first states
            mu = np.bincount(mu_codes, minlength=chain.n_states) / len(mu_codes)
        elif state is None:
            mu = np.full(chain.n_states, 1.0 / chain.n_states)
        else:
            mu = np.zeros(chain.n_states)
            mu[int(space.encode(state))] = 1.0
        curve = chain.distance_curve(steps, start=mu)
        d_start = [float(v) for v in curve.value]
        exact["d_start"] = d_start
        exact["d_start_abs_error"] = curve.abs_error
        exact["d_start_method"] = curve.method
    else:
        exact["d_start"] = None
        exact["reason"] = ("the chain is too large to assemble: the exact side is mlmix's certified t_mix and gap "
                           "intervals (worst start), and the verdicts that need d_mu(t) are left undetermined")
    exact.update(mean={}, ess={}, ess_tail={}, sigma2={}, variance={})

    # per function
    # the draws after warm-up: a simulation's start state is not a draw; supplied draws are all draws
    kept = states[warmup + (0 if draws is not None else 1):]  # (kept, m, n)
    keep_n = kept.shape[0]
    diagnostics, verdicts = {}, {}
    visited = space.encode(states.reshape(-1, n)) if assembled else None
    log_pi = np.asarray(chain.log_stationary, dtype=np.float64) if any(f.needs_pi for f in fns) else None
    for f in fns:
        values = log_pi[space.encode(kept)].T if f.needs_pi else evaluate(f, kept).T  # (m, N)
        diag = library_diagnostics(values)
        diagnostics[f.name] = diag
        ex_mean = ex_se = ess = None
        if assembled:
            fvec = log_pi if f.needs_pi else evaluate(f, space.all_states())
            ex_mean = float(pi @ fvec)
            var = float(pi @ (fvec - ex_mean) ** 2)
            sigma2 = chain.asymptotic_variance(fvec) if var > 0 else None
            exact["mean"][f.name] = ex_mean
            exact["variance"][f.name] = var
            exact["sigma2"][f.name] = _result(sigma2)
            if sigma2 is not None and sigma2.value is not None and sigma2.value > 0:
                ess = chains * keep_n * var / float(sigma2.value)
                ex_se = math.sqrt(float(sigma2.value) / (chains * keep_n))
            exact["ess"][f.name] = ess
            exact["ess_tail"][f.name] = exact_tail_ess(chain, fvec, pi, chains * keep_n)
        tm = exact["t_mix"]
        verdicts[f.name] = {
            "rhat": rhat_verdict(diag["rhat"], None if d_start is None else d_start[-1],
                                 (tm["lower"], tm["upper"]), steps),
            "ess_bulk": ratio_verdict("ess_bulk", diag["ess_bulk"], ess),
            "ess_tail": ratio_verdict("ess_tail", diag["ess_tail"],
                                      exact["ess_tail"][f.name]["value"] if assembled else None),
            "mcse": mcse_verdict(diag["mcse"], diag["mean"], ex_mean, ex_se),
        }
    verdicts["coupling"] = coupling_verdict(coupling["upper_bound"], d_start)
    gap_hat = empirical_gap(states)
    abs_gap = exact["absolute_spectral_gap"] or {}
    verdicts["gap"] = interval_verdict("gap_estimate", gap_hat["value"], abs_gap.get("lower"), abs_gap.get("upper"),
                                       abs_gap.get("value"))

    sets = []
    if metastable and assembled:

        start_idx = None if state is None else int(space.encode(state))
        try:
            found = metastable_sets(chain)
        except ValueError as err:
            found, sets = [], [{"reason": f"metastable sets not computed: {err}"}]
        for s in found:
            members = np.flatnonzero(s.states)
            sets.append({"states": int(s.states.sum()), "mass": s.mass, "exit_time": s.exit_time,
                         "example": space.decode(members[np.argmax(pi[members])]).tolist(),
                         "visited": bool(s.states[visited].any()),
                         "chains_visiting": int(s.states[visited.reshape(steps + 1, chains)].any(axis=0).sum()),
                         "contains_start": None if start_idx is None else bool(s.states[start_idx])})
    given = {**(inputs or {}), "chains": chains, "steps": steps, "warmup": warmup, "start": start,
             "functions": [f.name for f in fns], "kernel": kernel, "kept_per_chain": keep_n, **source_of_draws}
    return stamp("diagnose", {"exact": exact, "diagnostics": diagnostics, "coupling": coupling,
                              "gap_estimate": gap_hat, "verdicts": verdicts,
                              "metastable": sets if assembled else None}, given)
