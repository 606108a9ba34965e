"""Derivatives of the stationary law, of a simple eigenvalue, of a committor and of a mean first passage
time with respect to the entries of P.

**Convention.** A chain is defined by its off-diagonal entries (the holding probability is what is left of
the row), so derivatives are taken along directions that keep P stochastic: P + t E with every row of E
summing to 0 (a direction whose rows do not sum to 0 is refused). The Jacobians are the derivatives along
E = e_i (e_j - e_i)^T, i.e. with respect to the off-diagonal entry P(i, j) with the holding probability
P(i, i) giving up what P(i, j) gains; ``J[..., i, i] = 0``. deeptime and msmtools document instead the raw
partial derivative d/dT_ij of the function of T as a general matrix (rows not kept stochastic); for any of
these quantities the two are related by ``stochastic[..., i, j] = raw[..., i, j] - raw[..., i, i]``.

**Formulas** (Z# the group inverse of I - P, m_jk = E_j tau_k the mean first passage time, m_kk = 0):

* stationary law (Schweitzer 1968; Meyer 1975, Golub & Meyer 1986): d pi = pi E Z#, and as
  Z#_jk - Z#_ik = pi_k (m_ik - m_jk),

      dpi_k / dP(i, j) = pi_i pi_k (m_ik - m_jk),     dpi_k along E = pi_k sum_(i, j) pi_i E_ij (m_ik - m_jk);

* a simple eigenvalue lambda with left and right eigenvectors u, v: d lambda = u^T E v / u^T v, so
  d lambda / dP(i, j) = u_i (v_j - v_i) / u^T v;
* an absorbed quantity h (fixed off the unknown states U, (I - P_UU) h_U = b_U with b independent of P_UU):
  the forward committor q+ (U = (A u B)^c, b the flow into B) and the mean first passage time to a set T
  (U = T^c, b = 1). Differentiating, dh_U = G (E h)_U with G = (I - P_UU)^-1 (expected visits before
  leaving U), so dh_x / dP(i, j) = G_xi (h_j - h_i) for i in U (0 for i outside U).

**Accuracy** (every bound rigorous, entrywise, except the eigenvalue's). The mean first passage times, G and
the absorbed quantities come from GTH elimination (subtraction-free: each entry within its stated relative
error, 8 m^3 u for m unknowns, of the exact one, metastable chains to 1e-300 included), pi with its stated
entrywise error. The only subtractions are the differences above; each is charged with the relative errors of
its two terms times their sum (|a - b| error <= e (a + b)), plus the rounding of the sums (n u). The
eigenvalue's bound is first order and stated as such: the eigenvectors within kappa(V) ||r|| / sep of the
exact ones (r their residuals plus the rounding N u ||P||_F, sep the distance to the rest of the spectrum,
kappa(V) the condition number of the eigenvector matrix), pushed through the ratio u^T E v / u^T v.

Routes: the pi derivatives need m_jk for every target (N certified solves: GTH, or matrix-free the Krylov
solves with their entrywise certificate of :func:`~mlmix.theory.chain.hitting.operator_hitting_times`) and
are offered up to :data:`~mlmix.limits.MFPT_LIMIT` states; committors, passage times and eigenvalues use the
chain's matrix (a matrix-free chain's, memory permitting) with GTH up to
:data:`~mlmix.limits.DENSE_HITTING_LIMIT` unknowns and dense ``eig`` up to
:data:`~mlmix.limits.DENSE_SPECTRUM_LIMIT` states; beyond, a one-line refusal naming the limit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from mlmix.errors import InputValueError
from mlmix.limits import DENSE_HITTING_LIMIT, DENSE_SPECTRUM_LIMIT, MFPT_LIMIT
from mlmix.theory.linalg.elimination import eliminate
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
    otherwise the interval [value - bound, value + bound] with the reason."""
    details = {"convention": CONVENTION, "abs_bound": bound, **details}
    if bound == 0:
        return Result.exact(name, value, method, **details)
    if math.isfinite(bound) and value != 0 and bound <= DEFAULT_RTOL * abs(value):
        return Result.approximate(name, value, bound / abs(value), method, **details)
    if not math.isfinite(bound):
        return Result.interval(name, None, None, method, "no error bound: the eigenvalue is not separated from "
                               "the rest of the spectrum at float64's resolution", **details)
    return Result.interval(name, value - bound, value + bound, method,
                           f"the bound {bound:.1e} is not within {DEFAULT_RTOL:g} of the value", **details)


# ------------------------------------------------------------------ the stationary law

def stationary_sensitivity(log_pi: np.ndarray, pi_rel: float | None, M: VectorResult,
                           E: Matrix | None = None) -> VectorResult:
    """d pi along E (a vector over k), or with ``E`` None the Jacobian ``J[k, i, j] = dpi_k / dP(i, j)`` =
    pi_i pi_k (m_ik - m_jk) (module doc), from log pi with its entrywise relative error ``pi_rel`` and the
    mean first passage times ``M[i, k] = E_i tau_k`` with their entrywise relative error, the products
    a_ik = pi_k m_ik formed in log space (masses to 1e-300 keep their accuracy)."""
    N = log_pi.size
    m = np.asarray(M.value, dtype=np.float64)
    if pi_rel is None or M.rel_error is None or not pi_rel < 1 or not M.rel_error < 1:
        raise InputValueError("the derivative of pi needs pi and the mean first passage times with entrywise "
                              "error bounds; this chain's are not bounded (" + (M.method if M.rel_error is None
                                                                               else "the stationary law") + ")")
    with np.errstate(divide="ignore"):
        log_m = np.log(m)
        a = np.exp(log_m + log_pi[None, :])  # a[i, k] = pi_k m_ik (0 where i = k)
    big = float(np.max(np.abs(log_pi))) + float(np.max(np.abs(log_m[np.isfinite(log_m)]), initial=0.0))
    d = pi_rel / (1 - pi_rel)
    e = M.rel_error / (1 - M.rel_error)
    eta = math.expm1(2 * math.log1p(d) + math.log1p(e) + 8 * EPS * (4 + big)) + 4 * N * EPS
    pi = np.exp(log_pi)
    how = (f"pi_i pi_k (m_ik - m_jk) from the mean first passage times ({M.method}); every difference charged "
           "with its terms' relative errors")
    if E is None:
        check_memory(8.0 * 2 * N**3, f"the Jacobian of pi on {N} states")
        diff = a[None, :, :] - a[:, None, :]  # diff[j, i, k] = a_ik - a_jk
        J = pi[None, :, None] * np.transpose(diff, (2, 1, 0))  # J[k, i, j] = pi_i (a_ik - a_jk)
        summ = a[None, :, :] + a[:, None, :]
        bound = eta * pi[None, :, None] * np.transpose(summ, (2, 1, 0))
        idx = np.arange(N)
        J[:, idx, idx], bound[:, idx, idx] = 0.0, 0.0
        return _certified("d pi_k / dP(i, j)", J, bound, how)
    Eo = check_direction(E, N)
    W = sp.csr_array(Eo.multiply(pi[:, None]))  # W_ij = pi_i E_ij off the diagonal
    r, c = np.asarray(W.sum(axis=1)).ravel(), np.asarray(W.sum(axis=0)).ravel()
    aW = abs(W)
    ra, ca = np.asarray(aW.sum(axis=1)).ravel(), np.asarray(aW.sum(axis=0)).ravel()
    dpi = (r - c) @ a  # sum_ij W_ij (a_ik - a_jk)
    bound = (eta + 2 * N * EPS) * ((ra + ca) @ a)
    return _certified("d pi along E", dpi, bound, how + "; along E: sum_x (row_x - col_x of pi_i E_ij) a_xk")


# ------------------------------------------------------------------ absorbed quantities: committor, passage times

def _absorbed(P: Matrix, U: np.ndarray, b: np.ndarray | None, what: str) -> tuple[Any, np.ndarray, np.ndarray, float]:
    """The GTH elimination of (I - P_UU) (exits: the flows out of U), the indices of U, h_U solving
    (I - P_UU) h_U = b (b = 1 when None, else the flow into the set ``b`` masks) and its relative bound."""
    idx = np.flatnonzero(U)
    m = idx.size
    if m > DENSE_HITTING_LIMIT:
        raise InputValueError(f"the derivative of {what} is certified by GTH elimination up to {DENSE_HITTING_LIMIT} "
                              f"unknown states; this one has {m}")
    rows = sp.csr_array(P)[idx]
    out = np.asarray(rows[:, np.flatnonzero(~U)].sum(axis=1)).ravel()
    el = eliminate(rows[:, idx].toarray(), exits=out[:, None], eliminate_mask=np.ones(m, dtype=bool))
    rhs = np.ones(m) if b is None else np.asarray(rows[:, np.flatnonzero(b)].sum(axis=1)).ravel()
    return el, idx, el.solve(rhs), _gth_rel(m)


def absorbed_sensitivity(P: Matrix, U: np.ndarray, b: np.ndarray | None, fixed: np.ndarray, E: Matrix | None,
                         name: str, what: str) -> VectorResult:
    """dh along E, or with ``E`` None the Jacobian ``J[x, i, j] = dh_x / dP(i, j) = G_xi (h_j - h_i)`` (i in U),
    of h = ``fixed`` off U and (I - P_UU) h_U = b_U on U (module doc), by one GTH elimination: h_U, G b+ and
    G b- (the two signs of E h solved apart, subtraction-free) and the solve with |E| (h_j + h_i) that charges
    h's error; or G itself for the Jacobian."""
    N = P.shape[0]
    if not U.any():  # h is fixed everywhere: it does not depend on P
        zero = np.zeros((N, N, N) if E is None else N)
        if E is not None:
            check_direction(E, N)
        return _certified(name, zero, np.zeros_like(zero), "no unknown state: h is fixed", h=fixed)
    el, idx, hU, e = _absorbed(P, U, b, what)
    h = np.asarray(fixed, dtype=np.float64).copy()
    h[idx] = hU
    herr = np.zeros(N)
    herr[idx] = e * np.abs(hU)
    m = idx.size
    how = f"GTH elimination of I - P_UU on the {m} unknown states (subtraction-free), dh_U = G (E h)_U"
    if E is None:
        check_memory(8.0 * 3 * N**3, f"the Jacobian of {what} on {N} states")
        G = np.zeros((N, N))
        G[np.ix_(idx, idx)] = el.solve(np.eye(m))
        diff = h[None, :] - h[:, None]  # diff[i, j] = h_j - h_i
        J = G[:, :, None] * diff[None, :, :]
        errsum = herr[None, :] + herr[:, None]
        bound = G[:, :, None] * ((1 + e) * (errsum + EPS * np.abs(diff)) + e * np.abs(diff))[None, :, :] \
            + 2 * EPS * np.abs(J)
        ii = np.arange(N)
        J[:, ii, ii], bound[:, ii, ii] = 0.0, 0.0
        return _certified(name, J, bound, how + "; J = G_xi (h_j - h_i), each entry charged", h=h)
    Eo = check_direction(E, N)
    Ec = sp.csr_array(Eo)[idx]
    rows_of = np.repeat(np.arange(m), np.diff(Ec.indptr))
    terms = Ec.data * (h[Ec.indices] - h[idx][rows_of])
    weights = np.abs(Ec.data) * (herr[Ec.indices] + herr[idx][rows_of]
                                 + 2 * EPS * (np.abs(h[Ec.indices]) + np.abs(h[idx][rows_of])))
    plus = np.bincount(rows_of, np.maximum(terms, 0.0), minlength=m)
    minus = np.bincount(rows_of, np.maximum(-terms, 0.0), minlength=m)
    slack = np.bincount(rows_of, weights, minlength=m) + (Ec.indptr[1:] - Ec.indptr[:-1] + 2) * EPS * (plus + minus)
    yp, ym, ys = el.solve(plus), el.solve(minus), el.solve(slack)
    dh = np.zeros(N)
    dh[idx] = yp - ym
    bound = np.zeros(N)
    bound[idx] = e * (yp + ym) + EPS * (yp + ym) + (1 + e) * ys
    return _certified(name, dh, bound, how + "; the two signs of E h solved apart", h=h)


# ------------------------------------------------------------------ a simple eigenvalue

def eigenvalue_sensitivity(P: np.ndarray, index: int, E: Matrix | None = None) -> Result | VectorResult:
    """d lambda along E (a :class:`Result`), or with ``E`` None the Jacobian ``J[i, j] = u_i (v_j - v_i) / u^T v``,
    of the eigenvalue at ``index`` in the order of :meth:`~mlmix.theory.chain.markov_chain.Chain.eigenvalues`
    (decreasing modulus, 0 is lambda = 1), which must be real and simple; first-order bound (module doc)."""
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


def _route(chain: Chain) -> str:
    return "" if chain.op is None else "; from the matrix of the matrix-free chain"


def chain_stationary_sensitivity(chain: Chain, E: Matrix | None = None) -> VectorResult:
    """The body of :meth:`Chain.stationary_sensitivity`: pi and m_jk by the chain's own routes (GTH, or the
    certified matrix-free solves), up to :data:`MFPT_LIMIT` states."""
    _irreducible(chain, "pi")
    if chain.n_states > MFPT_LIMIT:
        raise InputValueError(f"the derivative of pi needs E_j tau_k for every target (one certified solve each), "
                              f"offered up to {MFPT_LIMIT} states; this chain has {chain.n_states}")
    if E is not None:
        check_direction(E, chain.n_states)
    st = chain.stationary
    return stationary_sensitivity(np.asarray(st.log_value), st.rel_error, chain.mean_first_passage_times(), E)


def chain_committor_sensitivity(chain: Chain, A: Any, B: Any, E: Matrix | None = None) -> VectorResult:
    """The body of :meth:`Chain.committor_sensitivity`: q+(x) = P_x(tau_B < tau_A) differentiated."""
    Am, Bm = check_basins(A, B, chain.n_states)
    _irreducible(chain, "a committor")
    out = absorbed_sensitivity(chain.to_scipy(), ~(Am | Bm), Bm, Bm, E,
                               "dq+ / dP(i, j)" if E is None else "dq+ along E", "a committor")
    return _with_route(out, chain)


def chain_mfpt_sensitivity(chain: Chain, target: Any, E: Matrix | None = None) -> VectorResult:
    """The body of :meth:`Chain.mfpt_sensitivity`: E_x tau_T differentiated."""
    T = check_state_set(target, chain.n_states, "target set")
    _irreducible(chain, "a mean first passage time")
    out = absorbed_sensitivity(chain.to_scipy(), ~T, None, np.zeros(chain.n_states), E,
                               "dE_x tau_T / dP(i, j)" if E is None else "dE_x tau_T along E",
                               "a mean first passage time")
    return _with_route(out, chain)


def chain_eigenvalue_sensitivity(chain: Chain, index: int, E: Matrix | None = None) -> Result | VectorResult:
    """The body of :meth:`Chain.eigenvalue_sensitivity`, dense up to :data:`DENSE_SPECTRUM_LIMIT` states."""
    if chain.n_states > DENSE_SPECTRUM_LIMIT:
        raise InputValueError(f"the derivative of an eigenvalue uses the dense spectrum, up to {DENSE_SPECTRUM_LIMIT} "
                              f"states; this chain has {chain.n_states}")
    return _with_route(eigenvalue_sensitivity(chain.to_dense(), index, E), chain)


def _with_route(r: Result | VectorResult, chain: Chain) -> Result | VectorResult:
    note = _route(chain)
    if not note:
        return r
    if isinstance(r, VectorResult):
        return VectorResult(r.name, r.value, r.method + note, r.rel_error, r.abs_error, r.residual, r.log_value,
                            dict(r.details))
    return Result(r.name, r.value, r.method + note, r.rel_error, r.lower, r.upper, r.reason, dict(r.details))
