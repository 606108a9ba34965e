"""Time correlations, relaxation and fingerprints of observables, with certified error bounds.

    C_fg(t) = E_pi[f(X_0) g(X_t)] = sum_x pi(x) f(x) (P^t g)(x),     E_mu[f(X_t)] = mu P^t f,

and for a reversible chain with right eigenvectors psi_i (orthonormal in <., .>_pi) the spectral decompositions

    C_fg(t) = sum_i lambda_i^t <f, psi_i>_pi <g, psi_i>_pi,    E_mu[f(X_t)] = sum_i lambda_i^t <mu / pi, psi_i>_pi <f, psi_i>_pi;

the **fingerprint** of (f, g) is the implied timescales t_i = -1 / log |lambda_i| with the amplitudes
<f, psi_i>_pi <g, psi_i>_pi (Noe et al., PNAS 108 (2011) 4822; deeptime's ``fingerprint_correlation``;
non-reversible: ((pi f) . r_i) (l_i . g) with l_i . r_i = 1). C_fg(0) = E_pi[fg] and C_fg(t) -> E_pi f E_pi g.
The slowest timescale of a reversible chain is -1 / log(1 - gap) from the chain's certified spectral gap
(:func:`slowest_from_gap`: relative accuracy down to gaps of 1e-300, where eigh's absolute error leaves [t, inf]).

Routes and their bounds (``details['error_bounds']`` per time, absolute):

* **powers** (any chain): P^t g by :mod:`mlmix.theory.chain.propagation` (||error||_inf <= ||g||_inf E(t)), then
  the sum with pi_hat: |error| <= ||f||_inf ||g||_inf (E(t) + ||pi_hat - pi||_1 (1 + E(t)) + gamma_N (1 + E(t))).
* **spectral** (irreducible reversible chains whose law has an entrywise bound delta; dense or from the
  matrix): x^T S^t y with S = D^1/2 P D^-1/2, x = sqrt(pi) f, y = sqrt(pi) g (relaxation: x = mu / sqrt(pi)),
  evaluated as sum_i theta_i^t (V^T x)_i (V^T y)_i from all N eigenpairs of S. With r >= ||S V - V Theta||_2
  (the eigenvalues' residual bounds), omega >= ||V^T V - I||_2, sigma >= ||S_hat - S||_2 (the rounding of
  S's entries and of the holding probabilities), eta = r / sqrt(1 - omega) and m = 1 + sigma + eta:
  S_hat = V Theta V^-1 + R V^-1, so |x^T S^t y - x^T V Theta^t V^T y| / (||x|| ||y||) <=
  (1 + sigma)^t - 1 + t eta m^(t-1) + m^t (1 + omega) omega / (1 - omega), plus the rounding of V^T x, V^T y
  and the sum, and 3 (delta / 2 + u) m^t for pi's error in x and y. The bound is normwise (||x|| = ||f||_pi):
  a small covariance of a metastable chain is an interval, never a wrong digit.

``method="auto"`` takes the spectral route where it applies and its bound is the smaller, powers otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mlmix.limits import DENSE_SPECTRUM_LIMIT
from mlmix.theory.chain.eigenvectors import Eigenpairs, chain_eigenvectors
from mlmix.theory.chain.propagation import chain_stepper, check_times, convention_distance, gamma, start_law
from mlmix.theory.chain.spectrum import implied_timescales
from mlmix.theory.results import EPS, Result, VectorResult
from mlmix.validation import check_int, check_vector

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain

ROUTES = ("auto", "spectral", "powers")


@dataclass(frozen=True)
class SpectralForm:
    """All eigenpairs of S = D^1/2 P D^-1/2 with the terms of the spectral route's bound (module doc)."""

    theta: np.ndarray
    V: np.ndarray
    half_log_pi: np.ndarray
    pi_delta: float
    sigma: float
    eta: float
    omega: float

    def factor(self, t: int) -> float:
        """The bound on |x^T S^t y - computed| / (||x|| ||y||) at time t (module doc)."""
        N = self.theta.size
        m = 1 + self.sigma + self.eta
        log_top, log_growth = t * math.log(max(1.0, float(np.max(np.abs(self.theta))))), t * math.log(m)
        if max(log_top, log_growth) > 700:
            return math.inf
        top, growth = math.exp(log_top), math.exp(log_growth)
        rounding = (2 * gamma(N) * math.sqrt(N) * (1 + self.omega) + gamma(N + 1)) * (1 + self.omega) * top
        s = math.expm1(t * math.log1p(self.sigma)) + t * self.eta * growth / m
        s += growth * (1 + self.omega) * self.omega / (1 - self.omega)
        return s + rounding + 3 * (self.pi_delta / 2 + EPS) * growth

    def bilinear(self, x: np.ndarray, y: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x^T S^t y for each t, the bounds)."""
        a, b = self.V.T @ x, self.V.T @ y
        scale = float(np.linalg.norm(x) * np.linalg.norm(y))
        with np.errstate(under="ignore"):
            values = np.array([float(np.sum(np.power(self.theta, int(t)) * a * b)) for t in times])
        return values, np.array([scale * self.factor(int(t)) for t in times])


def spectral_form(pairs: Eigenpairs, log_pi: np.ndarray, pi_delta: float, rho: float) -> SpectralForm:
    """The :class:`SpectralForm` of a reversible chain's full eigendecomposition (``pairs`` from the symmetric
    route), pi's entrywise bound ``pi_delta`` and ``rho``, the distance of the matrix from the chain's."""
    V = np.asarray(pairs.values.details["vectors"])
    N = V.shape[0]
    r = float(np.linalg.norm(np.asarray(pairs.values.details["error_bounds"]) * np.linalg.norm(V, axis=0)))
    omega = float(np.linalg.norm(V.T @ V - np.eye(V.shape[1]))) + 1.01 * gamma(N) * N
    if not omega < 0.5:
        raise ValueError(f"the eigenvectors of S are not orthonormal (||V^T V - I|| <= {omega:.1e})")
    sigma = rho + 4 * EPS + N * 1.5e-154  # entries of S: 2 ulps each; products below float64's range lost
    return SpectralForm(np.asarray(pairs.values.value, dtype=np.float64), V, log_pi / 2, pi_delta, sigma,
                        r / math.sqrt(1 - omega), omega)


def spectral_refusal(chain: Chain) -> str | None:
    """Why the spectral route does not apply to ``chain`` (None: it does)."""
    if not (chain.is_irreducible and chain.is_reversible):
        return "the chain is not irreducible and reversible (no symmetric decomposition)"
    if chain.n_states > DENSE_SPECTRUM_LIMIT:
        return f"the full spectrum is computed densely up to {DENSE_SPECTRUM_LIMIT} states"
    if chain.stationary.rel_error is None or not chain.stationary.rel_error < 0.5:
        return "the stationary law has no entrywise error bound"
    return None


def pi_l1_bound(st: VectorResult) -> float:
    """A bound on ||pi_hat - pi||_1: from the entrywise bound, else the L1 one, else the trivial 2."""
    if st.rel_error is not None:
        return min(st.rel_error * float(np.sum(st.value)), 2.0)
    return 2.0 if st.abs_error is None else min(st.abs_error, 2.0)


def _packed(name: str, values: np.ndarray, bounds: np.ndarray, times: np.ndarray, alone: bool, method: str,
            **details: Any) -> Result | VectorResult:
    """One :meth:`Result.checked` for a single time, else the vector with its bounds and ends."""
    if alone:
        return Result.checked(name, float(values[0]), float(bounds[0]), method, t=int(times[0]), **details)
    return VectorResult(name, values, method, None, float(np.sum(bounds)),
                        details={"times": times, "error_bounds": bounds, "lower": values - bounds,
                                 "upper": values + bounds, **details})


def _route(chain: Chain, method: str) -> tuple[bool, str | None]:
    """(spectral?, the refusal) for a requested ``method``."""
    if method not in ROUTES:
        raise ValueError(f"method must be one of {', '.join(ROUTES)}, got {method!r}")
    why = None if method == "powers" else spectral_refusal(chain)
    if method == "spectral" and why:
        raise ValueError(f"the spectral route does not apply: {why}")
    return method != "powers" and why is None, why


def _spectral(chain: Chain) -> SpectralForm:
    """The spectral form of the chain's matrix (a matrix-free chain's, memory permitting), whose S is charged
    the distance of P as stored from the chain it defines (:func:`convention_distance`)."""
    st = chain.stationary
    P = chain.facts.matrix_P
    return spectral_form(chain_eigenvectors(chain), st.log_value, float(st.rel_error), convention_distance(P))


def chain_correlation(chain: Chain, f: object, g: object = None, t: object = 0, method: str = "auto"
                      ) -> Result | VectorResult:
    """The body of :meth:`Chain.correlation`: C_fg(t) (g = f when None) at one time (a Result) or at each of a
    sequence of times (a VectorResult with per-time bounds and ends)."""
    f = check_vector(f, chain.n_states, "f")
    g = f if g is None else check_vector(g, chain.n_states, "g")
    times, alone = check_times(t)
    spectral, why = _route(chain, method)
    st = chain.stationary
    stepper = chain_stepper(chain, int(times.max()))
    F, G = float(np.max(np.abs(f))), float(np.max(np.abs(g)))
    pi_l1 = pi_l1_bound(st)
    E = np.array([stepper.error(int(s)) for s in times])
    power_bounds = F * G * (E + pi_l1 * (1 + E) + gamma(chain.n_states + 1) * (1 + pi_l1) * (1 + E))
    name = "C_fg(t) = E_pi[f(X_0) g(X_t)]"
    if spectral:
        form = _spectral(chain)
        half = np.exp(form.half_log_pi)
        values, bounds = form.bilinear(half * f, half * g, times)
        if method == "spectral" or np.all(bounds <= power_bounds):
            return _packed(name, values, bounds, times, alone, "spectral decomposition sum_i lambda_i^t <f, psi_i>_pi "
                           "<g, psi_i>_pi of the symmetric S = D^1/2 P D^-1/2 (all eigenpairs); normwise bound "
                           "from the eigenpairs' residuals and orthogonality")
        why = "its bound is wider than that of the powers"
    h = stepper.powers(g, times, measures=False)
    values = h @ (st.value * f)
    how = "sum_x pi(x) f(x) (P^t g)(x), P^t g by " + stepper.method + (f" (not spectral: {why})" if why else "")
    return _packed(name, values, power_bounds, times, alone, how)


def chain_relaxation(chain: Chain, mu: object, f: object, t: object = 0, method: str = "auto"
                     ) -> Result | VectorResult:
    """The body of :meth:`Chain.relaxation`: E_mu[f(X_t)] = mu P^t f from a start law or state ``mu``."""
    law = start_law(mu, chain.n_states)
    f = check_vector(f, chain.n_states, "f")
    times, alone = check_times(t)
    spectral, why = _route(chain, method)
    stepper = chain_stepper(chain, int(times.max()))
    F = float(np.max(np.abs(f)))
    E = np.array([stepper.error(int(s)) for s in times])
    power_bounds = F * (E + gamma(chain.n_states + 1) * (1 + E))
    name = "E_mu[f(X_t)]"
    if spectral:
        form = _spectral(chain)
        with np.errstate(over="ignore"):
            x = law * np.exp(-form.half_log_pi)
        if np.all(np.isfinite(x)):
            values, bounds = form.bilinear(x, np.exp(form.half_log_pi) * f, times)
            if method == "spectral" or np.all(bounds <= power_bounds):
                return _packed(name, values, bounds, times, alone, "spectral decomposition sum_i lambda_i^t "
                               "<mu / pi, psi_i>_pi <f, psi_i>_pi (all eigenpairs of S); normwise bound")
        why = "its bound is wider than that of the powers"
    values = stepper.powers(f, times, measures=False) @ law
    how = "mu . (P^t f), P^t f by " + stepper.method + (f" (not spectral: {why})" if why else "")
    return _packed(name, values, power_bounds, times, alone, how)


@dataclass(frozen=True)
class Fingerprint:
    """Implied timescales (inf for lambda_1 = 1) and the amplitudes of an observable pair (module doc)."""

    timescales: VectorResult
    amplitudes: VectorResult

    def __repr__(self) -> str:
        return f"<Fingerprint {self.timescales!r}; {self.amplitudes!r}>"


def fingerprint(pairs: Eigenpairs, pi: np.ndarray, f: np.ndarray, g: np.ndarray) -> Fingerprint:
    """Timescales of ``pairs``' eigenvalues and the amplitudes ((pi f) . r_i) (l_i . g); reversible (with
    ``details['angle_bounds']``): each within ||f||_pi ||g||_pi (2 d + d^2), d = sqrt(2) sin(angle) + omega of
    the exact one (the eigenvector moves by d in <., .>_pi), abs_error their sum (None where an angle is not
    bounded: clustered eigenvalues)."""
    ts = implied_timescales(pairs.values)
    inf = np.array([np.inf])
    timescales = VectorResult(ts.name, np.concatenate([inf, ts.value]), ts.method, ts.rel_error,
                              details={"lower": np.concatenate([inf, ts.details["lower"]]),
                                       "upper": np.concatenate([inf, ts.details["upper"]])})
    R, L = pairs.right.value, pairs.left.value
    amp = ((pi * f) @ R) * (g @ L)
    lam = np.asarray(pairs.values.value)
    angles = pairs.right.details.get("angle_bounds")
    if angles is None:
        return Fingerprint(timescales, VectorResult("amplitudes", amp, "((pi f) . r_i) (l_i . g) from LAPACK's "
                                                    "eigenvectors; not certified (non-reversible: the eigenvectors' "
                                                    "conditioning is not bounded)", None, None,
                                                    details={"eigenvalues": lam}))
    V = np.asarray(pairs.values.details["vectors"])
    omega = float(np.max(np.abs(np.linalg.norm(V, axis=0) - 1))) + gamma(V.shape[0])
    d = math.sqrt(2) * angles + omega
    scale = math.sqrt(float(pi @ f**2) * float(pi @ g**2)) * (1 + 1e-12)
    err = scale * (2 * d + d**2)
    total = float(err.sum())
    return Fingerprint(timescales, VectorResult("amplitudes", amp, "<f, psi_i>_pi <g, psi_i>_pi from the "
                                                "eigenvectors of S; each within ||f||_pi ||g||_pi (2 d + d^2), d from "
                                                "its Davis-Kahan angle", None, total if math.isfinite(total) else None,
                                                details={"error_bounds": err, "eigenvalues": lam}))


def chain_fingerprint(chain: Chain, f: object, g: object = None, k: int | None = None) -> Fingerprint:
    """The body of :meth:`Chain.fingerprint`: the ``k`` slowest processes (all when None), from all the eigenpairs
    where they are computed densely (so that every separation, hence every amplitude's bound, is known)."""
    f = check_vector(f, chain.n_states, "f")
    g = f if g is None else check_vector(g, chain.n_states, "g")
    k = chain.n_states if k is None else check_int(k, "k", minimum=1, maximum=chain.n_states)
    full = fingerprint(chain_eigenvectors(chain, None if chain.n_states <= DENSE_SPECTRUM_LIMIT else k),
                       chain.stationary.value, f, g)
    timescales = full.timescales
    if chain.is_irreducible and chain.is_reversible and chain.n_states > 1:
        timescales = slowest_from_gap(timescales, np.asarray(full.amplitudes.details.get("eigenvalues", [])),
                                      chain.spectral_gap)
    return Fingerprint(_first(timescales, k), _first(full.amplitudes, k))


def slowest_from_gap(ts: VectorResult, eigenvalues: np.ndarray, gap: Result) -> VectorResult:
    """The timescale of lambda_2 = 1 - gap (the second largest eigenvalue of a reversible chain) as
    -1 / log(1 - gap) from the chain's certified gap (relative accuracy down to gaps of 1e-300, where eigh's
    absolute error leaves only [t, inf]), its ends from the gap's; unchanged where the gap is not resolved."""
    if not gap.resolved or eigenvalues.size < 2 or not gap.value < 1 or abs(eigenvalues[0] - 1) > 1e-8:
        return ts  # (lambda_1 = -1 first: a periodic chain, whose slot of 1 - gap is not the second)
    j = 1 + int(np.argmax(eigenvalues[1:]))

    def t_of(g: float) -> float:
        return -1.0 / math.log1p(-g) if 0 < g < 1 else (math.inf if g <= 0 else 0.0)

    value, lo, hi = ts.value.copy(), np.array(ts.details["lower"], dtype=float), np.array(ts.details["upper"], dtype=float)
    value[j], lo[j], hi[j] = t_of(float(gap.value)), t_of(float(gap.upper)), t_of(float(gap.lower))
    finite = np.isfinite(value[1:]) & (value[1:] > 0)
    rel = np.maximum(hi[1:] - value[1:], value[1:] - lo[1:])[finite] / value[1:][finite]
    worst = float(rel.max()) if rel.size else 0.0
    return VectorResult(ts.name, value, ts.method + f"; t_{j + 1} = -1 / log(1 - gap) from the spectral gap ({gap.method})",
                        worst if math.isfinite(worst) and finite.all() else None, details={"lower": lo, "upper": hi})


def _first(v: VectorResult, k: int) -> VectorResult:
    """The first ``k`` entries of a vector result and of its per-entry details."""
    details = {key: np.asarray(x)[:k] for key, x in v.details.items()}
    abs_error = v.abs_error
    if "error_bounds" in details:
        total = float(details["error_bounds"].sum())
        abs_error = total if math.isfinite(total) else None
    return VectorResult(v.name, v.value[:k], v.method, v.rel_error, abs_error, details=details)
