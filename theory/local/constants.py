"""Paper G's constants of a source of conditionals, side by side with its exact Glauber chain.

For a source on V^n at temperature T (THEOREMS.md section 2A, reconstructed constants [R]):

* influence rho = max_j sum_{i != j} rho_ij(T) (column sums, Def. 2) and Dobrushin's row sum alpha;
  Theorem 5 applies when rho < 1 and gives t_mix(eps) <= ceil(n / (1 - rho) log(n / eps));
* oscillation Delta = max_j sum_{i != j} Delta_ij (section 5.2) and Corollary 7's temperature
  T* = Delta / 4 (rho(T) <= Delta / (4T) < 1 for T > T*);
* rectangle incompatibility R (section 4): max, mean, median and q90 over all rectangles (0 iff
  compatible), streamed (:func:`~mlmix.theory.local.rectangles.rectangle_summary`);
* for a basin B (a cylinder pattern): the margin gamma (Assumption 1) and Theorem 8's bounds
  P(x, B^c) <= (|V| - 1) e^{-gamma/T}, Phi(B) <= (|V| - 1) e^{-gamma/T} and, when pi(B) <= 1/2,
  t_mix(1/4) >= 1 / (4 Phi(B)) >= e^{gamma/T} / (4 (|V| - 1)), next to the exact Phi(B) and t_mix.

Every local quantity is exact (all contexts of V^n; float64 softmax rounding only).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mlmix.limits import CONSTANTS_LIMIT
from mlmix.progress import seconds_for
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.local.influence import aggregate_influence, contraction_temperature, influence_and_oscillation
from mlmix.theory.local.margins import basin_margin, escape_bound, mixing_lower_bound
from mlmix.theory.local.rectangles import rectangle_summary, sample_rectangles
from mlmix.theory.results import EPS, Result
from mlmix.validation import check_memory


def parse_basin(pattern: str, vocab_size: int, length: int) -> np.ndarray:
    """Boolean mask over V^n of the cylinder set given by ``pattern``: n space-separated symbols, each
    an integer in [0, |V|) (fixed) or '*' (free), e.g. "1 1 * *" = {x : x_0 = 1, x_1 = 1}."""
    parts = pattern.split()
    if len(parts) != length:
        raise ValueError(f"basin pattern must have n = {length} entries (symbols or '*'), got {len(parts)}")
    fixed = {}
    for i, p in enumerate(parts):
        if p == "*":
            continue
        if not p.isdigit() or int(p) >= vocab_size:
            raise ValueError(f"basin pattern entry {p!r} must be '*' or a symbol in [0, {vocab_size})")
        fixed[i] = int(p)
    if not fixed:
        raise ValueError("basin pattern fixes no site: it would be the whole space")
    idx = np.arange(vocab_size**length, dtype=np.int64)
    mask = np.ones(idx.size, dtype=bool)
    for i, v in fixed.items():
        mask &= (idx // vocab_size ** (length - 1 - i)) % vocab_size == v
    return mask


def paper_constants_seconds(space: Any) -> float:
    """Expected seconds of :func:`paper_constants` (the local constants and the rectangle statistic):
    about 3,000 N n^2 |V|^2 operations at the dense speed measured here (fitted on Ising cycles of
    4,096 and 16,384 states; a score table took a quarter of that); 0 above CONSTANTS_LIMIT, where
    nothing is computed."""
    if space.size > CONSTANTS_LIMIT:
        return 0.0
    return seconds_for(3000.0 * space.size * space.length**2 * space.vocab_size**2)

def thm5_bound(n: int, rho: Result, eps: float) -> Result:
    """Theorem 5's t_mix bound ceil(n / (1 - rho) log(n / eps)) from the enclosure of rho: the real
    f(r) = n / (1 - r) log(n / eps) increases in r, so the integer lies in [ceil f(rho.lower),
    ceil f(rho.upper)], each f evaluated with its few roundings (relative 8 u) taken outward. Exact when
    both ends agree; missing unless rho's upper end is below 1 (and n > 1)."""
    if n <= 1 or rho.upper is None or rho.upper >= 1:
        return Result.missing("Theorem 5 bound", "-", "needs rho < 1 (its certified upper end)")
    f = lambda r: n / (1 - r) * math.log(n / eps)
    lo = math.ceil(f(max(rho.lower or 0.0, 0.0)) * (1 - 8 * EPS))
    hi = math.ceil(f(rho.upper) * (1 + 8 * EPS))
    method = "ceil(n/(1-rho) log(n/eps)) over the enclosure of rho, rounding outward"
    if lo == hi:
        return Result.exact("Theorem 5 bound", hi, method)
    return Result.interval("Theorem 5 bound", lo, hi, method,
                           "the enclosure of rho straddles a step of the ceiling: the bound is one of these integers")


def paper_constants(source: Any, chain: Chain, eps: float, basin: np.ndarray | None = None, *,
                    contexts: np.ndarray | None = None, rng: np.random.Generator | None = None,
                    rectangles: int = 0, top_k: int | None = None) -> dict[str, Any]:
    """The one report of paper G's constants (module doc) as JSON-ready Results, read by ``mlmix exact``
    and ``mlmix verify --mlm`` alike (chain = the source's Glauber chain).

    ``contexts`` None: every context of V^n, exactly (up to :data:`~mlmix.limits.CONSTANTS_LIMIT`
    states; beyond, only a ``reason``), with the rectangle statistic over all rectangles and, for a
    ``basin``, Theorem 8's figures. A sample of ``contexts``: rho, alpha, Delta and T* over it, each the
    interval [sample maximum, unknown] (a supremum seen on a subset is a lower bound; Theorem 5's bound
    is then missing), and R over ``rectangles`` random rectangles drawn with ``rng`` (replacements from
    the source's top-``top_k``, :func:`~mlmix.theory.local.rectangles.sample_rectangles`); no basin
    figures (the margin is a minimum over the basin's states)."""
    space = source.space
    n, q = space.length, space.vocab_size
    if contexts is not None:
        out: dict[str, Any] = {k: v for k, v in local_constants(source, contexts, rng=rng).items()
                               if k not in ("rho_ij", "delta_ij", "pairs")}
        out["thm5_t_mix_bound"] = thm5_bound(n, out["rho"], eps)
        out["rectangle"] = _sampled_rectangles(source, contexts, rectangles, rng, top_k)
        return out
    if space.size > CONSTANTS_LIMIT:
        return {"reason": f"|V|^n = {space.size} exceeds {CONSTANTS_LIMIT}: the exact local constants are not computed"}
    check_memory(8.0 * space.size * n * q * 3, "the exact local constants (score table of all contexts)")
    out = {k: v for k, v in local_constants(source).items() if k not in ("rho_ij", "delta_ij", "pairs")}
    out["thm5_t_mix_bound"] = thm5_bound(n, out["rho"], eps)
    out["rectangle"] = {**rectangle_summary(source, max_states=CONSTANTS_LIMIT).as_dict(),
                        "note": "R = 0 on every rectangle iff the conditionals are compatible (Prop 4), iff the "
                                "chain is reversible"}
    if basin is not None:
        out["basin"] = _basin_report(source, chain, basin)
    return out


def _sampled_rectangles(source: Any, contexts: np.ndarray, count: int, rng: np.random.Generator | None,
                        top_k: int | None) -> dict[str, Any]:
    """R over ``count`` sampled rectangles: mean, max and count, and the supremum as [max, unknown]."""
    values = sample_rectangles(source, contexts, count, rng, top_k=top_k).values
    if values.size == 0:
        return {"mean": None, "max": None, "count": 0}
    return {"mean": float(values.mean()), "max": float(values.max()), "count": int(values.size),
            "supremum": sampled_supremum("R", float(values.max()), int(values.size), "sampled rectangles")}


def _basin_report(source: Any, chain: Chain, basin: np.ndarray) -> dict[str, Any]:
    q, T = source.space.vocab_size, source.temperature
    margin = basin_margin(source, basin, max_states=CONSTANTS_LIMIT)
    mass = float(np.exp(chain.log_stationary.value[basin]).sum())
    phi = chain.set_conductance(basin)
    rep: dict[str, Any] = {"states": int(basin.sum()), "mass": mass, "gamma": margin.gamma,
                           "assumption_1": margin.holds, "phi_exact": phi}
    if margin.gamma > 0 and math.isfinite(margin.gamma):
        rep["thm8_escape_bound"] = escape_bound(margin.gamma, T, q)
        rep["thm8_t_mix_lower_bound"] = mixing_lower_bound(margin.gamma, T, q) if mass <= 0.5 else None
    if mass <= 0.5 and phi.resolved and phi.value > 0:
        rep["t_mix_lower_bound_from_phi"] = 1.0 / (4.0 * phi.value)
    return rep


def sampled_supremum(name: str, maximum: float, count: int, what: str) -> Result:
    """A supremum over V^n seen only on a sample: the interval [sample maximum, unknown]."""
    return Result.interval(name, maximum, None, f"maximum over {count} {what}",
                           "a maximum over a sample of contexts is a lower bound of the supremum over all of V^n")


def contraction_verdict(rho: float, exact: bool, rounding: float = 0.0) -> str:
    """Theorem 5's condition rho < 1, worded for an exact value (decided only beyond its ``rounding``) or
    a sampled lower bound."""
    if exact:
        return "rho < 1: Theorem 5 applies" if rho < 1 - rounding else "rho >= 1: Theorem 5 does not apply at this temperature"
    if rho >= 1:
        return "rho >= 1: Theorem 5 does not apply (a sampled rho >= 1 is a lower bound, so rho >= 1)"
    return "not refuted: a sampled rho < 1 is only a lower bound of rho"


def local_constants(source: Any, contexts: np.ndarray | None = None, *, replacements: Any = None,
                    rng: np.random.Generator | None = None) -> dict[str, Any]:
    """Paper G's local constants of ``source`` over a context set, the one implementation behind ``mlmix
    exact`` (all of V^n) and ``mlmix estimate`` (a sample): the same keys and meanings either way.

    ``rho`` = max_j sum_{i != j} rho_ij (Def. 2, column sums; Theorem 5 needs rho < 1), ``alpha`` (Dobrushin's
    row sums), ``delta`` = max_j sum_{i != j} Delta_ij and ``contraction_temperature`` T* = Delta / 4
    (Corollary 7), each a :class:`Result`: exact to the softmax rounding over all contexts
    (``contexts=None``), an interval [sample maximum, unknown] over a sample (a supremum seen on a subset
    is a lower bound); ``contraction`` words Theorem 5's verdict accordingly; ``rho_ij``, ``delta_ij``
    and ``pairs`` are the matrices and the pair count behind them. ``replacements`` (sampled path) chooses
    the y = x^{j<-b} of rho_ij and Delta_ij."""
    exact = contexts is None
    space = source.space
    infl, osc = influence_and_oscillation(source, contexts, None if exact else replacements, rng,
                                          max_states=max(CONSTANTS_LIMIT, space.size) if exact else CONSTANTS_LIMIT)
    agg = aggregate_influence(infl.rho_ij)
    t_star = contraction_temperature(osc.delta_ij)
    if exact:
        local = 8 * space.vocab_size * EPS  # softmax / score-difference rounding
        figure = lambda name, value, method: Result.approximate(name, value, local, method + " over all contexts")
    else:
        count = int(np.asarray(contexts).shape[0])
        figure = lambda name, value, method: sampled_supremum(name, value, count, "sampled contexts")
    return {
        "rho": figure("rho", agg.rho, "max_j sum_i rho_ij (column sums)"),
        "alpha": figure("alpha", agg.alpha, "max_i sum_j rho_ij (Dobrushin row sums)"),
        "contraction": contraction_verdict(agg.rho, exact, 8 * space.vocab_size * EPS if exact else 0.0),
        "delta": figure("Delta", 4 * t_star, "max_j sum_i Delta_ij (score oscillation)"),
        "contraction_temperature": figure("T* = Delta/4 (Cor 7)", t_star,
                                          "Corollary 7: rho(T) <= Delta/(4T) < 1 for T > Delta/4"),
        "rho_ij": infl.rho_ij, "delta_ij": osc.delta_ij, "pairs": infl.pairs,
    }
