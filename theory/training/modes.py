"""The eq. (5) Ising model of paper P: modes, Assumption 5, and reaching the big mode (Props 4, 5, 8).

p(x) ∝ exp( sum_{i in [n]} h_i x_i + sum_{i != j in C} J x_i x_j ), x in {-1, +1}^n (symbol 1 = +1):
a clique C (|C| >= 2) and n - |C| isolated spins. ``convention="ordered"`` is eq. (5) as written
(ordered pairs, so each edge carries 2J, :func:`mlmix.theory.sources.conditionals.clique_ising`);
``"unordered"`` puts J on each edge once (how the appendix proofs compute conditionals). Every
statement below is checked under both.

Assumption 5: h_G := sum_{i in C} h_i > sum_{i not in C} |h_i| (and h_G > 0), and
J0 := J - ||h||_1 > 0. Modes R_1 = {x_C = +1}, R_-1 = {x_C = -1}.

Reduction to the clique. The isolated spins are independent of the clique, so under k-Gibbs the
clique configuration is itself a Markov chain: K ∩ C = A with probability
binom(n - |C|, k - |A|) / binom(n, k) for each A ⊆ C, then x_A is resampled from p(x_A | x_{C \\ A})
(nothing moves when A is empty). Under the independent parallel sampler the clique spins update
from the clique-only model. Both chains live on 2^|C| states; R_1 is the all-ones clique state.
The reduction is cross-checked against the full 2^n kernels in the tests.

Expected hitting times here are astronomically large (1e16 steps and more for the parallel sampler
at strong coupling): (I - P_BB) is then singular to working precision and a plain linear solve
returns garbage (even negative times). :func:`mlmix.theory.chain.hitting.expected_hitting_times` eliminates states
in the Grassmann-Taksar-Heyman manner, using only sums and products of non-negative numbers, and
stays accurate entrywise.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from math import comb, isfinite

import networkx as nx
import numpy as np
import scipy.sparse as sp

from mlmix.theory.chain.hitting import hitting_probabilities, hitting_time_distribution
from mlmix.theory.kernels.assembled import block_kernel, independent_parallel_kernel
from mlmix.theory.sources.conditionals import IsingModel, clique_ising
from mlmix.theory.sources.space import StateSpace
from mlmix.theory.training.exponential_family import CONVENTIONS
from mlmix.validation import check_eps

SAMPLERS = ("k-gibbs", "parallel")


@dataclass(frozen=True)
class CliqueIsing:
    """Parameters of the eq. (5) model: n spins, clique C, coupling J, fields h (length n)."""

    n: int
    clique: tuple[int, ...]
    J: float
    h: tuple[float, ...]
    convention: str = "ordered"

    def __post_init__(self) -> None:
        clique = tuple(sorted(int(c) for c in self.clique))
        if len(clique) < 2 or len(set(clique)) != len(clique) or clique[0] < 0 or clique[-1] >= self.n:
            raise ValueError(f"clique must hold at least 2 distinct sites of 0..{self.n - 1}, got {self.clique}")
        h = np.broadcast_to(np.asarray(self.h, dtype=np.float64), (self.n,))
        if not np.isfinite(h).all() or not isfinite(float(self.J)):
            raise ValueError("J and h must be finite")
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {self.convention!r}")
        object.__setattr__(self, "clique", clique)
        object.__setattr__(self, "h", tuple(float(v) for v in h))
        object.__setattr__(self, "J", float(self.J))

    @property
    def size(self) -> int:
        """|C|."""
        return len(self.clique)

    @property
    def edge_weight(self) -> float:
        """Weight of each clique edge in :class:`IsingModel` terms: 2J (ordered) or J (unordered)."""
        return 2.0 * self.J if self.convention == "ordered" else self.J

    @property
    def h_G(self) -> float:
        """sum_{i in C} h_i."""
        return float(sum(self.h[i] for i in self.clique))

    @property
    def J0(self) -> float:
        """J - ||h||_1 (the largest J0 Assumption 5 allows; positive when it holds)."""
        return self.J - float(np.abs(self.h).sum())

    def model(self) -> IsingModel:
        """The full model on {-1, +1}^n."""
        if self.convention == "ordered":
            return clique_ising(self.n, list(self.clique), self.J, np.asarray(self.h))
        graph = nx.empty_graph(self.n)
        graph.add_edges_from(combinations(self.clique, 2))
        return IsingModel(graph, couplings=self.J, fields=np.asarray(self.h))

    def clique_model(self) -> IsingModel:
        """The clique alone, sites relabelled 0..|C|-1 in increasing order (the reduced chain's law)."""
        graph = nx.complete_graph(self.size)
        return IsingModel(graph, couplings=self.edge_weight, fields=np.array([self.h[i] for i in self.clique]))

    def clique_state(self, state: int | np.ndarray) -> np.ndarray:
        """Index in {0,1}^|C| of the clique part of full state indices."""
        full = StateSpace(2, self.n).decode(state)
        return StateSpace(2, self.size).encode(full[..., list(self.clique)])


@dataclass(frozen=True)
class Assumption5:
    """Whether Assumption 5 holds, with h_G, J0 and the reason when it fails."""

    holds: bool
    h_G: float
    J0: float
    reason: str = ""


def assumption5(spec: CliqueIsing) -> Assumption5:
    """Check h_G > 0, h_G > sum_{i not in C} |h_i| and J0 = J - ||h||_1 > 0 (paper P Assumption 5)."""
    outside = float(sum(abs(spec.h[i]) for i in range(spec.n) if i not in spec.clique))
    reasons = []
    if not spec.h_G > 0:
        reasons.append(f"h_G = {spec.h_G:.4g} is not > 0")
    if not spec.h_G > outside:
        reasons.append(f"h_G = {spec.h_G:.4g} is not > sum of |h_i| off the clique = {outside:.4g}")
    if not spec.J0 > 0:
        reasons.append(f"J0 = J - ||h||_1 = {spec.J0:.4g} is not > 0")
    return Assumption5(not reasons, spec.h_G, spec.J0, "; ".join(reasons))


def mode_masks(spec: CliqueIsing) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks over the 2^n states of R_1 (clique all +1) and R_-1 (clique all -1)."""
    states = StateSpace(2, spec.n).all_states()[:, list(spec.clique)]
    return states.all(axis=1), (states == 0).all(axis=1)


def clique_sum(spec: CliqueIsing, clique_states: np.ndarray | None = None) -> np.ndarray:
    """sum_{i in C} x_i (spins +-1) for clique states given by index (default: all 2^|C|)."""
    space = StateSpace(2, spec.size)
    idx = np.arange(space.size) if clique_states is None else np.asarray(clique_states)
    return (2 * space.decode(idx) - 1).sum(axis=-1)


def c_R1(spec: CliqueIsing, k: int) -> float:
    """Prop 4: c_R1 = 1 - [binom(n-|C|, k-|C|) / binom(n, k)] e^{2(J0+h_G)} / (e^{2(J0+h_G)} + e^{2 J0} + 2^|C| - 2),
    an upper bound on P(X_{t+1} not in R_1) for k-Gibbs with k >= |C| (J0, h_G from :func:`assumption5`)."""
    if not spec.size <= k <= spec.n:
        raise ValueError(f"Prop 4 needs |C| = {spec.size} <= k <= n = {spec.n}, got k = {k}")
    frac = comb(spec.n - spec.size, k - spec.size) / comb(spec.n, k)
    J0, hG = spec.J0, spec.h_G
    share = 1.0 / (1.0 + np.exp(-2 * hG) + (2.0 ** spec.size - 2.0) * np.exp(-2 * (J0 + hG)))
    return float(1.0 - frac * share)


def prop4_steps(c: float, delta: float) -> int:
    """T = ceil(log_c delta) (at least 1): k-Gibbs visits R_1 within T steps w.p. >= 1 - delta."""
    delta = check_eps(delta, "delta")
    if not 0 <= c < 1:
        raise ValueError(f"c_R1 must lie in [0, 1), got {c}")
    return 1 if c == 0 else max(1, int(np.ceil(np.log(delta) / np.log(c))))


def c_stuck(spec: CliqueIsing) -> float:
    """Prop 5: c_stuck = 2 (-1 + tanh(J0) |C| / 2)^2 / |C|  ((1 - e^{-2 J0}) / (1 + e^{-2 J0}) = tanh J0)."""
    return float(2.0 * (-1.0 + np.tanh(spec.J0) * spec.size / 2.0) ** 2 / spec.size)


def prop5_steps(c: float, delta: float) -> int:
    """T = floor((delta / 2) e^{c_stuck}): the parallel sampler keeps sum_C x <= -2 for t <= T w.p. >= 1 - delta."""
    delta = check_eps(delta, "delta")
    return int(np.floor(delta / 2.0 * np.exp(c)))


def clique_kernel(spec: CliqueIsing, sampler: str, k: int | None = None) -> sp.csr_array | np.ndarray:
    """Exact kernel of the clique configuration (2^|C| states) under k-Gibbs or the parallel sampler."""
    if sampler == "parallel":
        return independent_parallel_kernel(spec.clique_model(), max_states=2 ** 12)
    if sampler != "k-gibbs":
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    if k is None or not 1 <= k <= spec.n:
        raise ValueError(f"k-Gibbs needs 1 <= k <= n = {spec.n}, got {k}")
    c, rest, total = spec.size, spec.n - spec.size, comb(spec.n, k)
    blocks, weights = [], []
    for a in range(1, c + 1):
        w = comb(rest, k - a) / total if 0 <= k - a <= rest else 0.0
        for A in combinations(range(c), a):
            blocks.append(A)
            weights.append(w)
    moving = float(sum(weights))
    stay = 1.0 - moving
    B = block_kernel(spec.clique_model(), blocks, np.asarray(weights) / moving)
    return sp.csr_array(moving * B + stay * sp.identity(2 ** c, format="csr"))


def reach_curve(spec: CliqueIsing, sampler: str, start: int, t_max: int, k: int | None = None) -> np.ndarray:
    """P(tau_{R_1} <= s) for s = 0..t_max from the full state index ``start`` (exact, clique chain)."""
    P = clique_kernel(spec, sampler, k)
    law = np.zeros(2 ** spec.size)
    law[int(spec.clique_state(start))] = 1.0
    return hitting_time_distribution(P, law, [2 ** spec.size - 1], t_max)


def visit_probabilities(P, target: np.ndarray, T: int) -> np.ndarray:
    """P_x(X_t in target for some t in 1..T) for every start x: one step, then hitting within T - 1."""
    if T < 1:
        return np.zeros(P.shape[0])
    return np.asarray(P @ hitting_probabilities(P, target, T - 1)).ravel()


def k_gibbs_visit_probabilities(spec: CliqueIsing, k: int, T: int) -> np.ndarray:
    """For every clique state: P(k-Gibbs visits R_1 at some t in 1..T) (the event of Prop 4)."""
    target = np.zeros(2 ** spec.size, dtype=bool)
    target[-1] = True
    return visit_probabilities(clique_kernel(spec, "k-gibbs", k), target, T)


def parallel_stuck_probabilities(spec: CliqueIsing, T: int) -> np.ndarray:
    """For every clique state with sum_C x <= -2: P(sum_C X_t <= -2 for all t in 1..T) under the
    independent parallel sampler (the event of Prop 5); NaN at the other clique states."""
    P = clique_kernel(spec, "parallel")
    inside = clique_sum(spec) <= -2
    out = np.full(inside.size, np.nan)
    if T < 1:
        out[inside] = 1.0
        return out
    escape = hitting_probabilities(P, ~inside, T)
    out[inside] = 1.0 - escape[inside]
    return out


# ----------------------------------------------------------------------------------------------
# Large cliques with equal fields: the count of +1 spins (Corollary 3)


def clique_count_law(size: int, edge_weight: float, field: float) -> np.ndarray:
    """p(m) for m = 0..|C| (m = number of +1 spins) of the clique model with every clique field equal to
    ``field`` and every edge weight ``edge_weight``: p(m) ∝ binom(|C|, m) exp(field s + w (s^2 - |C|)/2),
    s = 2m - |C| the clique sum (sum_{i<j} x_i x_j = (s^2 - |C|)/2). Computed in log space."""
    m = np.arange(size + 1)
    s = 2 * m - size
    log_binom = np.array([float(np.log(comb(size, int(k)))) for k in m])
    log_w = log_binom + field * s + edge_weight * (s.astype(np.float64) ** 2 - size) / 2
    log_w -= log_w.max()
    p = np.exp(log_w)
    return p / p.sum()


def _binomial_pmf(trials: int, log_p: float, log_q: float) -> np.ndarray:
    """Binomial(trials, p) from log p and log(1 - p) (exact zeros at p = 0 or 1)."""
    k = np.arange(trials + 1)
    log_binom = np.array([float(np.log(comb(trials, int(j)))) for j in k])
    with np.errstate(invalid="ignore"):
        log_pmf = log_binom + np.where(k > 0, k * log_p, 0.0) + np.where(trials - k > 0, (trials - k) * log_q, 0.0)
    return np.exp(log_pmf)


def clique_count_parallel_kernel(size: int, edge_weight: float, field: float) -> np.ndarray:
    """The count m of +1 spins under the independent parallel sampler (P Def. 11) on a clique with equal
    fields: every spin resamples from its conditional given the others, P(x_i = +1 | rest) =
    sigma(2 (field + w sum_{j != i} x_j)); a +1 spin sees rest sum s - 1, a -1 spin s + 1, so the new
    count is Binomial(m, p_+) + Binomial(|C| - m, p_-). Exact (|C|+1) x (|C|+1) kernel."""
    P = np.zeros((size + 1, size + 1))
    for m in range(size + 1):
        s = 2 * m - size
        a_plus, a_minus = 2.0 * (field + edge_weight * (s - 1)), 2.0 * (field + edge_weight * (s + 1))
        # log sigma(a) = -log(1 + e^{-a}), log(1 - sigma(a)) = -log(1 + e^{a}), both stable
        P[m] = np.convolve(_binomial_pmf(m, -np.logaddexp(0.0, -a_plus), -np.logaddexp(0.0, a_plus)),
                           _binomial_pmf(size - m, -np.logaddexp(0.0, -a_minus), -np.logaddexp(0.0, a_minus)))
    return P
