"""Continuous-time chains: a generator Q analysed through its uniformised chain P = I + Q / q.

A generator Q (N x N) has non-negative off-diagonal rates and rows summing to 0; as for a transition matrix,
the chain is defined by its off-diagonal entries (the exit rate of i is sum_{j != i} Q_ij, and Q_ii its
negative). For q >= max_i |Q_ii| the uniformised chain P = I + Q / q is stochastic, and the continuous-time
chain is P's jump chain run at the times of a Poisson process of rate q (Jensen 1953; Norris, "Markov
Chains" 2.1 and 3.5). Hence, for every such q:

* the stationary law is the same (pi Q = 0 iff pi P = pi), and so are committors and hitting
  probabilities (they depend on the jump chain's order of visits only);
* expected hitting times, mean first passage times, the Kemeny constant and the mean first passage time of
  transition path theory are P's divided by q (each step lasts 1 / q on average, independently of the path);
  rates (TPT's k_AB, conductances, spectral gaps) are P's multiplied by q: the eigenvalues of Q are
  q (lambda - 1) for the eigenvalues lambda of P, so gap_Q = q gap_P and the relaxation time is 1 / gap_Q;
* mixing times, d(t) and the asymptotic variance do not carry over this way (d_Q(t) = sum_k Poisson(q t; k)
  d_P(k) mixes all of P's step counts): they are refused by name (:data:`NOT_CARRIED`).

Accuracy: the default q is the smallest power of two >= the largest exit rate, so the entries Q_ij / q are
exact (unless they fall below float64's normal range, which the chain's own underflow handling reports).
With another q each entry of P carries a relative rounding of at most u (unit roundoff); every carried
quantity but the gap is a ratio of sums of products of at most N off-diagonal entries (the Markov chain tree
theorem), so its relative error is widened by c = ((1 + u) / (1 - u))^N - 1. The gap min_f E(f) / Var_pi(f)
moves by a factor within [(1 - c)(1 - u) / (1 + c), (1 + c)(1 + u) / (1 - c)] (the Dirichlet form E by P's
entries and pi's change, the variance by pi's), so it is widened by (1 + c)(1 + u) / (1 - c) - 1. Each
multiplication by q or 1 / q adds 2u.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from mlmix.errors import InputValueError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.transition_paths import TransitionPaths
from mlmix.theory.results import EPS, Result, VectorResult
from mlmix.validation import Matrix, check_generator, check_real

#: Quantities of a chain that do not carry over from the uniformised chain, with the reason.
NOT_CARRIED = {
    "mixing_time": "the continuous-time t_mix is not P's (d_Q(t) = sum_k Poisson(q t; k) d_P(k) mixes every step count)",
    "tv_distance": "the continuous-time d(t) = sum_k Poisson(q t; k) d_P(k) is not P's d at any one step",
    "distance_curve": "the continuous-time d(t) = sum_k Poisson(q t; k) d_P(k) is not P's curve",
    "asymptotic_variance": "sigma^2 of a time average in continuous time is not P's (not implemented)",
    "absolute_spectral_gap": "P's negative eigenvalues depend on q: the continuous-time chain has gap_Q only",
    "multiplicative_gap": "P* P has no continuous-time counterpart independent of q",
}


def rounding_charge(Q: Matrix, q: float) -> float:
    """0 when every off-diagonal Q_ij / q is exact (q a power of two), else ((1 + u) / (1 - u))^N - 1."""
    mantissa, _ = math.frexp(q)
    if mantissa == 0.5:
        return 0.0
    N = Q.shape[0]
    return math.expm1(N * (math.log1p(EPS) - math.log1p(-EPS)))


def _power_of_two_at_least(x: float) -> float:
    m, e = math.frexp(x)
    return math.ldexp(1.0, e - 1) if m == 0.5 else math.ldexp(1.0, e)


def _scaled(r: Result, factor: float, name: str, note: str, charge: float) -> Result:
    """``r`` times ``factor`` > 0 (its relative error plus 2u for the product), widened by ``charge``."""
    up, down = 1 + 2 * EPS, 1 - 2 * EPS
    lo = None if r.lower is None else r.lower * factor * (down if r.lower >= 0 else up)
    hi = None if r.upper is None else r.upper * factor * (up if r.upper >= 0 else down)
    method = r.method + note
    if r.value is None:
        out = Result(name, None, method, None, lo, hi, r.reason, dict(r.details))
    else:
        rel = None if r.rel_error is None else r.rel_error + 2 * EPS
        out = Result(name, r.value * factor, method, rel, lo, hi, None, dict(r.details))
    return out.widened(charge, f"; charged {charge:.1e} for the rounding of Q / q") if charge else out


def _scaled_vector(v: VectorResult, factor: float, name: str, note: str, charge: float) -> VectorResult:
    """A vector result times ``factor`` > 0, its relative error widened by ``charge`` (plus 2u for a factor
    other than 1) and its absolute errors by charge times the vector's size."""
    value = np.asarray(v.value, dtype=np.float64)
    extra = 0.0 if factor == 1 else 2 * EPS
    size = float(np.abs(value[np.isfinite(value)]).sum()) * factor
    rel = None if v.rel_error is None or charge >= 1 else (v.rel_error + charge) / (1 - charge) + extra
    ab = None if v.abs_error is None else v.abs_error * factor * (1 + extra) + charge * size
    details = dict(v.details)
    if details.get("max_abs_error") is not None:
        details["max_abs_error"] = float(details["max_abs_error"]) * factor * (1 + extra) + charge * size
    method = v.method + note + (f"; charged {charge:.1e} for the rounding of Q / q" if charge else "")
    return VectorResult(name, value * factor, method, rel, ab, v.residual, None, details)


class GeneratorChain:
    """The continuous-time chain of a generator Q through its uniformised chain (module doc):
    ``chain`` is the :class:`~mlmix.theory.chain.markov_chain.Chain` of P = I + Q / q (dense or CSR, as Q is
    given), ``rate`` is q. The quantities that carry over are methods here; those that do not
    (:data:`NOT_CARRIED`) raise a one-line ValueError naming them."""

    def __init__(self, Q: Matrix, rate: float | None = None, *, name: str | None = None,
                 dense_limit: int | None = None) -> None:
        Q = check_generator(Q)
        off = Q.copy()
        if sp.issparse(off):
            off.setdiag(0)
            off.eliminate_zeros()
            exits = np.asarray(off.sum(axis=1)).ravel()
        else:
            np.fill_diagonal(off, 0.0)
            exits = off.sum(axis=1)
        top = float(exits.max())
        if not top > 0:
            raise InputValueError("the generator is 0 (no transitions): every state is absorbing")
        q = _power_of_two_at_least(top) if rate is None else check_real(rate, "rate q", minimum=top)
        self.Q, self.rate, self.exit_rates = Q, q, exits
        self.charge = rounding_charge(Q, q)
        P = off / q
        if sp.issparse(P):
            P = sp.csr_array(P + sp.diags_array(1.0 - np.asarray(P.sum(axis=1)).ravel()))
            support = (off > 0).astype(np.float64)
        else:
            P[np.diag_indices_from(P)] = 1.0 - P.sum(axis=1)
            support = off > 0
        self.chain = Chain(P, name=name or f"uniformised generator on {Q.shape[0]} states (q = {q:g})",
                           dense_limit=dense_limit, support=support)
        self.chain.progress = False
        self.n_states = self.chain.n_states

    def __repr__(self) -> str:
        return f"<GeneratorChain on {self.n_states} states, uniformised at q = {self.rate!r}>"

    def __getattr__(self, name: str) -> Any:
        if name in NOT_CARRIED:
            raise InputValueError(f"{name} of a continuous-time chain: {NOT_CARRIED[name]}; not computed")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _note(self, how: str) -> str:
        return f"; of the uniformised chain P = I + Q / q, q = {self.rate!r}{how}"

    # ------------------------------------------------------------------ the same as P's
    @property
    def stationary(self) -> VectorResult:
        """pi with pi Q = 0: P's stationary law."""
        return _scaled_vector(self.chain.stationary, 1.0, "stationary law pi (pi Q = 0)", self._note(""), self.charge)

    def committor(self, A: np.ndarray, B: np.ndarray) -> VectorResult:
        """q(x) = P_x(tau_B < tau_A): P's committor."""
        return _scaled_vector(self.chain.committor(A, B), 1.0, "committor P_x(tau_B < tau_A)", self._note(""),
                              self.charge)

    # ------------------------------------------------------------------ times: P's divided by q
    def _time(self, v: VectorResult, name: str) -> VectorResult:
        return _scaled_vector(v, 1.0 / self.rate, name, self._note(", divided by q"), self.charge)

    def hitting_time(self, target: np.ndarray) -> VectorResult:
        """E_x T_A in continuous time: P's expected hitting steps divided by q."""
        return self._time(self.chain.hitting_time(target), "expected hitting time E_x T_A (continuous time)")

    def mean_first_passage_times(self, target: np.ndarray | int | None = None) -> VectorResult:
        """E_i T_j (continuous time): P's mean first passage times divided by q."""
        return self._time(self.chain.mean_first_passage_times(target), "mean first passage times (continuous time)")

    def kemeny_constant(self) -> Result:
        """sum_j pi_j E_i T_j = sum over the non-zero eigenvalues mu of Q of 1 / (-mu): P's divided by q."""
        return _scaled(self.chain.kemeny_constant, 1.0 / self.rate, "Kemeny constant (continuous time)",
                       self._note(", divided by q"), self.charge)

    # ------------------------------------------------------------------ rates: P's times q
    def _rate(self, r: Callable[[], Result], name: str, charge: float | None = None) -> Result:
        return _scaled(r(), self.rate, name, self._note(", times q"), self.charge if charge is None else charge)

    def spectral_gap(self) -> Result:
        """gap_Q = q (1 - lambda_2(P)) of a reversible Q (a non-reversible one: unresolved, as P's); charged
        (1 + c)(1 + u) / (1 - c) - 1 for the rounding of Q / q (module doc; c = ``self.charge``)."""
        c = self.charge
        charge = 0.0 if not c else ((1 + c) * (1 + EPS) / (1 - c) - 1 if c < 1 else math.inf)
        return self._rate(lambda: self.chain.spectral_gap, "spectral gap of Q", charge)

    def relaxation_time(self) -> Result:
        """1 / gap_Q."""
        return self.spectral_gap().reciprocal("relaxation time 1 / gap_Q")

    def conductance(self) -> Result:
        """Phi*_Q = min over pi(S) <= 1/2 of sum_{i in S, j not in S} pi_i Q_ij / pi(S): P's times q."""
        return self._rate(lambda: self.chain.conductance, "conductance of Q")

    def transition_paths(self, A: np.ndarray, B: np.ndarray) -> tuple[TransitionPaths, dict[str, Result]]:
        """(P's transition paths, the continuous-time figures): committors and pathway shares are P's; the
        total flux and the rates k_AB, k_BA are P's times q, the mean first passage times P's divided by q."""
        tp = self.chain.transition_paths(A, B)
        figures = {}
        for key, factor, how in (("total_flux", self.rate, ", times q"), ("rate", self.rate, ", times q"),
                                 ("rate_back", self.rate, ", times q"), ("mfpt", 1 / self.rate, ", divided by q"),
                                 ("mfpt_back", 1 / self.rate, ", divided by q")):
            r = getattr(tp, key)
            figures[key] = _scaled(r, factor, r.name + " (continuous time)", self._note(how), self.charge)
        return tp, figures
