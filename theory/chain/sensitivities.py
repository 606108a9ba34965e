"""Derivatives of the stationary law, of a simple eigenvalue, of a committor and of a mean first passage
time with respect to the entries of P.

**Convention.** A chain is defined by its off-diagonal entries (the holding probability is what is left of
the row), so derivatives are taken along directions that keep P stochastic: P + t E with every row of E
summing to 0 (a direction whose rows do not sum to 0 is refused). The Jacobians are the derivatives along
E = e_i (e_j - e_i)^T, i.e. with respect to the off-diagonal entry P(i, j) with the holding probability
P(i, i) giving up what P(i, j) gains; ``J[..., i, i] = 0``. msmtools (and deeptime) give instead the raw
partial derivative d/dT_ij of the function of T as a general matrix (rows not kept stochastic: its derivative
of lambda_1 = 1 is pi_i in row i); for any of these quantities the two are related by
``stochastic[..., i, j] = raw[..., i, j] - raw[..., i, i]``.

**Formulas** (Z# the group inverse of I - P, m_jk = E_j tau_k the mean first passage time, m_kk = 0):

* stationary law (Schweitzer 1968; Meyer 1975, Golub & Meyer 1986): d pi = pi E Z#, and as
  Z#_jk - Z#_ik = pi_k (m_ik - m_jk),

      dpi_k / dP(i, j) = pi_i pi_k (m_ik - m_jk),     dpi_k along E = pi_k sum_(i, j) pi_i E_ij (m_ik - m_jk);

* a simple eigenvalue lambda with left and right eigenvectors u, v: d lambda = u^T E v / u^T v, so
  d lambda / dP(i, j) = u_i (v_j - v_i) / u^T v;
* an absorbed quantity h (fixed off the unknown states U, h = P h + c on U with c a constant):
  the forward committor q+ (U = (A u B)^c, b the flow into B) and the mean first passage time to a set T
  (U = T^c, b = 1). Differentiating, dh_U = G (E h)_U with G = (I - P_UU)^-1 (expected visits before
  leaving U), so dh_x / dP(i, j) = G_xi (h_j - h_i) for i in U (0 for i outside U).

**Accuracy** (every bound rigorous and entrywise, except the eigenvalue's). The differences h_j - h_i of an
absorbed quantity (m_jk - m_ik for pi) are never formed by subtracting h_i from h_j, which on a metastable
chain are both 1e200 with a difference of order 1: by the strong Markov property at the first visit to j,
h_j - h_i = s_i h_j - h'_i (s_i = P_i(leave U before visiting j), h' the quantity with j absorbing), two
non-negative terms of the size of the difference, each from a GTH elimination (subtraction-free: within
8 m^3 u relative of the exact value for m unknowns, whatever the metastability). The remaining sums of terms of
both signs are charged with their terms' bounds and the rounding of the sums (n u); G c is solved for the two
signs of c apart; pi enters with its stated entrywise error. The eigenvalue's bound is first order and stated
as such: the eigenvectors within kappa(V) ||r|| / sep of the exact ones (r their residuals plus the rounding
N u ||P||_F, sep the distance to the rest of the spectrum, kappa(V) the condition number of the eigenvector
matrix), pushed through the ratio u^T E v / u^T v.

Routes, the same on every representation: the committor's and the passage time's from the chain's matrix (a
matrix-free chain's, memory permitting; one GTH elimination per state, N^4) up to
:data:`~mlmix.limits.SENSITIVITY_LIMIT` states; pi's from the chain's own certified law and one elimination
per target and state (N^5) up to :data:`~mlmix.limits.PI_SENSITIVITY_LIMIT` states (a law without an entrywise
bound, such as a matrix-free law of a metastable chain, is refused with one line); eigenvalues by dense ``eig``
up to :data:`~mlmix.limits.DENSE_SPECTRUM_LIMIT` states. Beyond, one line naming the limit: a Krylov solve
(the matrix-free engine's) certifies h but not the differences h_j - h_i these derivatives are made of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from mlmix.errors import InputValueError
from mlmix.limits import DENSE_SPECTRUM_LIMIT, PI_SENSITIVITY_LIMIT, SENSITIVITY_LIMIT
from mlmix.theory.linalg.elimination import Elimination, eliminate
from mlmix.theory.results import DEFAULT_RTOL, EPS, Result, VectorResult
from mlmix.validation import Matrix, check_basins, check_direction, check_int, check_memory, check_state_set

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain

#: The convention every result states in ``details['convention']`` (module doc).
CONVENTION = "stochastic: along P + t E with rows of E summing to 0; J[..., i, j] is d/dP(i, j) with P(i, i) compensating"


def _gth_rel(m: int) -> float:
    """The entrywise relative error bound of a GTH solve with m unknowns (O'Cinneide's 8 m^3 u), as a bound
    relative to the computed value (e / (1 - e))."""
    e = min(8.0 * m**3 * EPS, 0.5)
    return e / (1 - e)


def _certified(name: str, value: np.ndarray, bound: np.ndarray, method: str, **details: Any) -> VectorResult:
    """A derivative (vector or Jacobian) with its entrywise absolute bound (``details['bound']``, its maximum in
    ``details['max_abs_error']``, its sum in ``abs_error``); ``rel_error`` the entrywise relative bound where
    every non-zero bound sits on a non-zero value."""
    bound = np.asarray(bound, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(bound > 0, bound / np.abs(value), 0.0)
    worst = float(rel.max()) if rel.size else 0.0
    return VectorResult(name, value, method, worst if math.isfinite(worst) else None, float(bound.sum()),
                        details={"bound": bound, "max_abs_error": float(bound.max()) if bound.size else 0.0,
                                 "convention": CONVENTION, **details})


def _scalar(name: str, value: float, bound: float, method: str, **details: Any) -> Result:
    """A directional derivative of a scalar: a value when its bound is within :data:`DEFAULT_RTOL` of it,
    otherwise the interval [value - bound, value + bound] (rounded outward) with the reason."""
    details = {"convention": CONVENTION, "abs_bound": bound, **details}
    if bound == 0:
        return Result.exact(name, value, method, **details)
    if math.isfinite(bound) and value != 0 and bound <= DEFAULT_RTOL * abs(value):
        return Result.approximate(name, value, bound / abs(value), method, **details)
    if not math.isfinite(bound):
        return Result.interval(name, None, None, method, "no error bound: the eigenvalue is not separated from "
                               "the rest of the spectrum at float64's resolution", **details)
    lo, hi = math.nextafter(value - bound, -math.inf), math.nextafter(value + bound, math.inf)  # rounded outward
    return Result.interval(name, lo, hi, method,
                           f"the bound {bound:.1e} is not within {DEFAULT_RTOL:g} of the value", **details)


# ------------------------------------------------------------------ differences of absorbed quantities

@dataclass(frozen=True)
class Differences:
    """An absorbed quantity h and its differences ``D[i, j] = h_j - h_i`` (rows i in U; 0 elsewhere) with their
    entrywise absolute bounds, and the elimination of I - P_UU that gives G (:func:`differences`)."""

    h: np.ndarray
    D: np.ndarray
    bound: np.ndarray
    elimination: Elimination
    idx: np.ndarray
    rel: float


def differences(P: Matrix, U: np.ndarray, into: np.ndarray | None) -> Differences:
    """h = 1 on ``into``, 0 elsewhere off U, and on U (I - P_UU) h_U = b with b the flow into ``into`` (the
    committor) or b = 1 when ``into`` is None (the passage time to U^c); with D[i, j] = h_j - h_i for i in U
    formed without subtracting large numbers (strong Markov property at the first visit to j):

    * j in U: h_j - h_i = s_i h_j - h'_i, h' the same quantity with j absorbing at 0 and s_i = P_i(leave U
      before visiting j) (both by GTH, non-negative: on a metastable chain both terms are of the size of the
      difference, where h_j and h_i may be 1e200);
    * j in ``into``: 1 - h_i = P_i(leave U elsewhere first), a complementary solve; other j off U: -h_i.

    Each term is within the relative bound of its GTH solve, so |error of D_ij| <= eta (s_i h_j + h'_i)."""
    N = P.shape[0]
    idx = np.flatnonzero(U)
    m = idx.size
    rows = sp.csr_array(P)[idx]

    def flow(mask: np.ndarray) -> np.ndarray:
        return np.asarray(rows[:, np.flatnonzero(mask)].sum(axis=1)).ravel()

    W = rows[:, idx].toarray()
    np.fill_diagonal(W, 0.0)
    out = flow(~U)
    b = np.ones(m) if into is None else flow(into)
    el = eliminate(W, exits=out[:, None], eliminate_mask=np.ones(m, dtype=bool))
    e = _gth_rel(m)
    eta = (1 + e) ** 2 * (1 + 2 * EPS) - 1
    hU = el.solve(b)
    h = np.zeros(N) if into is None else np.asarray(into, dtype=np.float64).copy()
    h[idx] = hU
    D, bound = np.zeros((N, N)), np.zeros((N, N))
    off = np.flatnonzero(~U)
    D[np.ix_(idx, off)] = -hU[:, None]
    bound[np.ix_(idx, off)] = e * hU[:, None]
    if into is not None:
        comp = el.solve(flow(~U & ~np.asarray(into, dtype=bool)))
        on = np.flatnonzero(into)
        D[np.ix_(idx, on)] = comp[:, None]
        bound[np.ix_(idx, on)] = e * comp[:, None]
    for a, j in enumerate(idx if m > 1 else []):  # one unknown: its only difference in U is with itself
        keep = np.arange(m) != a
        sub = eliminate(W[np.ix_(keep, keep)], exits=(out[keep] + W[keep, a])[:, None],
                        eliminate_mask=np.ones(m - 1, dtype=bool))
        s_, h_ = sub.solve(out[keep]), sub.solve(b[keep])
        D[idx[keep], j] = s_ * hU[a] - h_
        bound[idx[keep], j] = eta * (s_ * hU[a] + h_)
    return Differences(h, D, bound, el, idx, e)


def _check_size(N: int, limit: int, what: str) -> None:
    if N > limit:
        raise InputValueError(f"the derivative of {what} takes one GTH elimination per state and target, offered up "
                              f"to {limit} states; this chain has {N}")


def _contract(Eo: sp.csr_array, d: Differences, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """c_i = sum_j E_ij D_ij for i in ``rows`` (E's off-diagonal entries) and its absolute bound."""
    Er = sp.csr_array(Eo[rows])
    r = np.repeat(np.arange(rows.size), np.diff(Er.indptr))
    terms = Er.data * d.D[rows[r], Er.indices]
    c = np.bincount(r, terms, minlength=rows.size)
    n = np.maximum(np.diff(Er.indptr), 1)
    err = np.bincount(r, np.abs(Er.data) * d.bound[rows[r], Er.indices], minlength=rows.size) \
        + (n + 2) * EPS * np.bincount(r, np.abs(terms), minlength=rows.size)
    return c, err


# ------------------------------------------------------------------ absorbed quantities: committor, passage times

def absorbed_sensitivity(P: Matrix, U: np.ndarray, into: np.ndarray | None, E: Matrix | None,
                         name: str) -> VectorResult:
    """dh along E, or with ``E`` None the Jacobian ``J[x, i, j] = dh_x / dP(i, j) = G_xi (h_j - h_i)`` (i in U),
    of the absorbed quantity of :func:`differences` (module doc): c = (E h)_U from the differences, then
    G c+ and G c- solved apart (subtraction-free) and G applied to c's bound."""
    N = P.shape[0]
    if not U.any():  # h is fixed everywhere: it does not depend on P
        if E is not None:
            check_direction(E, N)
        zero = np.zeros((N, N, N) if E is None else N)
        h = np.zeros(N) if into is None else np.asarray(into, dtype=np.float64)
        return _certified(name, zero, np.zeros_like(zero), "no unknown state: h is fixed", h=h)
    d = differences(P, U, into)
    el, idx, e, m = d.elimination, d.idx, d.rel, d.idx.size
    how = (f"GTH eliminations on the {m} unknown states (subtraction-free); dh_U = G (E h)_U with the differences "
           "h_j - h_i from first visits to j")
    if E is None:
        check_memory(8.0 * 3 * N**3, f"the Jacobian of {name} on {N} states")
        G = np.zeros((N, N))
        G[np.ix_(idx, idx)] = el.solve(np.eye(m))
        J = G[:, :, None] * d.D[None, :, :]
        bound = G[:, :, None] * ((1 + e) * d.bound + e * np.abs(d.D))[None, :, :] + 2 * EPS * np.abs(J)
        return _certified(name, J, bound, how + "; J = G_xi (h_j - h_i), each entry charged", h=d.h)
    c, err = _contract(check_direction(E, N), d, idx)
    yp, ym, ys = el.solve(np.maximum(c, 0.0)), el.solve(np.maximum(-c, 0.0)), el.solve(err)
    dh, bound = np.zeros(N), np.zeros(N)
    dh[idx] = yp - ym
    bound[idx] = (e + EPS) * (yp + ym) + (1 + e) * ys
    return _certified(name, dh, bound, how + "; the two signs of E h solved apart", h=d.h)


# ------------------------------------------------------------------ the stationary law

def stationary_sensitivity(P: Matrix, log_pi: np.ndarray, pi_rel: float | None, E: Matrix | None = None) -> VectorResult:
    """d pi along E (a vector over k), or with ``E`` None the Jacobian ``J[k, i, j] = dpi_k / dP(i, j)`` =
    pi_i pi_k (m_ik - m_jk) (module doc), from P, log pi with its entrywise relative error ``pi_rel`` and, per
    target k, the differences m_jk - m_ik of :func:`differences` (the row of k: m_jk itself); products of
    masses in log space (pi to 1e-300 keeps its accuracy)."""
    N = P.shape[0]
    if pi_rel is None or not pi_rel < 1:
        raise InputValueError("the derivative of pi needs pi with an entrywise error bound; this chain's stationary "
                              "law is not bounded entrywise")
    dl = pi_rel / (1 - pi_rel)
    pi = np.exp(log_pi)
    Eo = None if E is None else check_direction(E, N)
    if E is None:
        check_memory(8.0 * 3 * N**3, f"the Jacobian of pi on {N} states")
    out, bound = (np.zeros((N, N, N)), np.zeros((N, N, N))) if E is None else (np.zeros(N), np.zeros(N))
    every = np.arange(N)
    for k in range(N):
        U = every != k
        d = differences(P, U, None)
        D, bD = d.D, d.bound
        D[k], bD[k] = d.h, d.rel * d.h  # m_jk - m_kk = m_jk
        if E is None:
            with np.errstate(under="ignore"):
                pp = np.exp(log_pi + log_pi[k])
            eta = math.expm1(2 * math.log1p(dl) + 8 * EPS * (2 + abs(log_pi[k]) + np.abs(log_pi).max()))
            out[k] = -pp[:, None] * D
            bound[k] = pp[:, None] * ((1 + eta) * bD + eta * np.abs(D))
            continue
        c, err = _contract(Eo, d, every)
        S = float(pi @ c)
        errS = float(pi @ (err + (dl + N * EPS) * np.abs(c)))
        out[k] = -pi[k] * S
        bound[k] = pi[k] * ((1 + dl) * errS + (dl + 2 * EPS) * abs(S))
    how = ("pi_i pi_k (m_ik - m_jk), the differences of mean first passage times from first visits (GTH, "
           "subtraction-free), pi's entrywise error charged")
    return _certified("d pi_k / dP(i, j)" if E is None else "d pi along E", out, bound, how)


# ------------------------------------------------------------------ a simple eigenvalue

def eigenvalue_sensitivity(P: np.ndarray, index: int, E: Matrix | None = None) -> Result | VectorResult:
    """d lambda along E (a :class:`Result`), or with ``E`` None the Jacobian ``J[i, j] = u_i (v_j - v_i) / u^T v``,
    of the eigenvalue at ``index`` by decreasing modulus, then decreasing real part (0 is lambda = 1; the order of
    :meth:`~mlmix.theory.chain.markov_chain.Chain.eigenvalues` but for ties of modulus), which must be real;
    first-order bound (module doc), none where it is not separated from the rest of the spectrum."""
    N = P.shape[0]
    index = check_int(index, "index", minimum=0, maximum=N - 1)
    check_memory(8.0 * 8 * N * N, f"the dense spectrum of {N} states")
    lam, L, R = la.eig(P, left=True, right=True)
    order = np.lexsort((-lam.imag, -lam.real, -np.round(np.abs(lam), 12)))
    lam, L, R = lam[order], L[:, order], R[:, order]
    z = lam[index]
    if abs(z.imag) > 1e3 * EPS * max(abs(z), 1.0):
        raise InputValueError(f"eigenvalue {index} is complex ({z:.6g}): its derivative is offered for real eigenvalues")
    u, v = np.real(L[:, index]), np.real(R[:, index])
    u, v = u / np.linalg.norm(u), v / np.linalg.norm(v)
    c = float(u @ v)
    lr = float(np.real(z))
    scale = N * EPS * np.linalg.norm(P)
    ru = float(np.linalg.norm(u @ P - lr * u)) + scale
    rv = float(np.linalg.norm(P @ v - lr * v)) + scale
    others = np.delete(lam, index)
    sep = float(np.min(np.abs(others - z))) if others.size else math.inf
    Rn = R / np.linalg.norm(R, axis=0)
    kappa = float(np.linalg.cond(Rn))
    du, dv = kappa * ru / sep if sep > 0 else math.inf, kappa * rv / sep if sep > 0 else math.inf
    ok = math.isfinite(du) and math.isfinite(dv) and du + dv < 0.5 * abs(c)
    how = ("LAPACK eig, left and right eigenvectors; d lambda = u^T E v / u^T v; first-order bound: eigenvectors "
           f"within kappa(V) ||r|| / sep (kappa(V) = {kappa:.3g}, sep = {sep:.3g}, 1 / |u^T v| = {1 / abs(c):.3g})")
    den = abs(c) - du - dv
    if E is None:
        J = np.outer(u, v) - (u * v)[:, None]
        J /= c
        if not ok:
            return VectorResult("d lambda / dP(i, j)", J, how + "; not certified: the eigenvalue is not separated",
                                None, None, details={"convention": CONVENTION, "eigenvalue": lr})
        av = np.abs(v)
        bound = (du * (av[None, :] + av[:, None]) + 2 * np.abs(u)[:, None] * dv + 2 * du * dv) / den \
            + np.abs(J) * (du + dv) / den + 4 * EPS * np.abs(J)
        np.fill_diagonal(bound, 0.0)
        np.fill_diagonal(J, 0.0)
        return _certified("d lambda / dP(i, j)", J, bound, how, eigenvalue=lr)
    Eo = sp.csr_array(check_direction(E, N))
    Ev = np.asarray(Eo @ v).ravel() - np.asarray(Eo.sum(axis=1)).ravel() * v  # E v, E's diagonal included
    value = float(u @ Ev) / c
    if not ok:
        return _scalar("d lambda along E", value, math.inf, how, eigenvalue=lr)
    En = float(np.sqrt((Eo.data**2).sum())) + float(np.abs(Eo.sum(axis=1)).max())  # >= ||E||_2
    bound = (En * (du + dv + du * dv) + abs(value) * (du + dv)) / den + 4 * N * EPS * En / abs(c)
    return _scalar("d lambda along E", value, bound, how, eigenvalue=lr)


# ------------------------------------------------------------------ the questions of a Chain

def _irreducible(chain: Chain, what: str) -> None:
    if not chain.is_irreducible:
        raise InputValueError(f"the derivative of {what} needs an irreducible chain; this one has "
                              f"{len(chain.closed_classes)} closed class(es) and transient states")


def chain_stationary_sensitivity(chain: Chain, E: Matrix | None = None) -> VectorResult:
    """The body of :meth:`Chain.stationary_sensitivity`: pi by the chain's own route (GTH, detailed balance,
    the certified matrix-free law), the differences of passage times from its matrix, up to
    :data:`PI_SENSITIVITY_LIMIT` states."""
    _check_size(chain.n_states, PI_SENSITIVITY_LIMIT, "pi")
    _irreducible(chain, "pi")
    if E is not None:
        check_direction(E, chain.n_states)
    st = chain.stationary
    return _with_route(stationary_sensitivity(chain.to_scipy(), np.asarray(st.log_value), st.rel_error, E), chain)


def chain_committor_sensitivity(chain: Chain, A: Any, B: Any, E: Matrix | None = None) -> VectorResult:
    """The body of :meth:`Chain.committor_sensitivity`: q+(x) = P_x(tau_B < tau_A) differentiated."""
    Am, Bm = check_basins(A, B, chain.n_states)
    _check_size(chain.n_states, SENSITIVITY_LIMIT, "a committor")
    _irreducible(chain, "a committor")
    name = "dq+ / dP(i, j)" if E is None else "dq+ along E"
    return _with_route(absorbed_sensitivity(chain.to_scipy(), ~(Am | Bm), Bm, E, name), chain)


def chain_mfpt_sensitivity(chain: Chain, target: Any, E: Matrix | None = None) -> VectorResult:
    """The body of :meth:`Chain.mfpt_sensitivity`: E_x tau_T differentiated."""
    T = check_state_set(target, chain.n_states, "target set")
    _check_size(chain.n_states, SENSITIVITY_LIMIT, "a mean first passage time")
    _irreducible(chain, "a mean first passage time")
    name = "dE_x tau_T / dP(i, j)" if E is None else "dE_x tau_T along E"
    return _with_route(absorbed_sensitivity(chain.to_scipy(), ~T, None, E, name), chain)


def chain_eigenvalue_sensitivity(chain: Chain, index: int, E: Matrix | None = None) -> Result | VectorResult:
    """The body of :meth:`Chain.eigenvalue_sensitivity`, dense up to :data:`DENSE_SPECTRUM_LIMIT` states."""
    if chain.n_states > DENSE_SPECTRUM_LIMIT:
        raise InputValueError(f"the derivative of an eigenvalue uses the dense spectrum, up to {DENSE_SPECTRUM_LIMIT} "
                              f"states; this chain has {chain.n_states}")
    return _with_route(eigenvalue_sensitivity(chain.to_dense(), index, E), chain)


def _with_route(r: Result | VectorResult, chain: Chain) -> Result | VectorResult:
    note = "; the matrix of the matrix-free chain" if chain.facts.representation == "operator" else ""
    if not note:
        return r
    if isinstance(r, VectorResult):
        return VectorResult(r.name, r.value, r.method + note, r.rel_error, r.abs_error, r.residual, r.log_value,
                            dict(r.details))
    return Result(r.name, r.value, r.method + note, r.rel_error, r.lower, r.upper, r.reason, dict(r.details))
