"""MCMC asymptotic variance of ergodic averages, and the Kemeny constant, through the group inverse.

For a stationary chain and f: X -> R the CLT variance of (1/t) sum_{s<t} f(X_s) is (THEOREMS.md 1.23)

    sigma^2(f) = Var_pi(f) + 2 sum_{k>=1} Cov_pi(f(X_0), f(X_k)) = 2 <f_bar, g>_pi - <f_bar, f_bar>_pi,

with f_bar = f - pi(f) and g any solution of the Poisson equation (I - P) g = f_bar (g is the
group inverse applied to f_bar up to a constant, which <f_bar, .>_pi does not see). Grounding the
solution at the heaviest state z (g_z = 0) leaves the non-singular M-matrix system
(I - P)_RR g_R = f_bar_R, R = all states but z, solved with the subtraction-free GTH factors of
:mod:`mlmix.theory.linalg.elimination`. The right-hand side has both signs, so the solve is not
subtraction-free; its error is bounded a posteriori by solving with |f_bar| (the factors' inverses
are non-negative): |g - g~| <= c N u (I - P)_RR^{-1} |f_bar| componentwise, plus the effect of the
rounding of pi(f). The result carries that bound (an interval when it exceeds the target).

The Kemeny constant K = sum_j pi_j E_i tau_j (tau_j = 0 when i = j; the same for every i) equals
sum over the eigenvalues lambda != 1 of 1/(1 - lambda) = tr(A^#), A^# the group inverse of I - P;
with G the grounded inverse (zero row and column at z), A^# = (I - 1 pi^T) G (I - 1 pi^T), so
K = tr(G) - pi^T G 1, a difference of two non-negative sums (grounding at the heaviest state keeps
the cancellation mild); its bound is stated the same way.

With transient states T and one closed class C, P is block triangular (C first), so its eigenvalues
are those of P_CC and of P_TT: K = K_C + sum over the eigenvalues mu of P_TT of 1/(1 - mu)
= K_C + tr((I - P_TT)^{-1}), the trace of the fundamental matrix (expected visits to x from x before
entering C), a sum of non-negative terms from a subtraction-free GTH solve. (Kemeny's identity
K = sum_j pi_j E_i tau_j then holds for starts i in C only.)

A sparse chain (:func:`asymptotic_variance_sparse`) uses the same grounded GTH factors up to
:data:`~mlmix.limits.DENSE_POISSON_LIMIT` states (Krylov solvers stall on metastable chains) and a
Krylov solve above, with the residual bound below, or the enclosure 0 <= sigma^2 <= (2 / gap - 1)
Var_pi(f) when the solve does not converge.

On a matrix-free kernel: sigma^2(f) = 2 <f_bar, g>_pi - <f_bar, f_bar>_pi with
(I - P + 1 pi^T) g = f_bar (:func:`operator_asymptotic_variance`; conjugate gradients on the
symmetric form when reversible, else GMRES): |error| <= 2 ||f_bar||_pi ||r||_pi / gamma with r the
residual and gamma a lower bound on the additive gap (E(h, h) >= gamma Var_pi(h)). The Kemeny
constant (:func:`kemeny_bounds`) of a reversible heat-bath kernel (positive semi-definite),
K = sum_{j >= 2} 1 / (1 - lambda_j) with 0 <= lambda_j <= 1 - gamma: 1 + lambda <= 1 / (1 - lambda)
<= 1 + lambda / gamma (the chord of a convex function), and sum_{j >= 2} lambda_j = tr P - 1 with
tr P = N sum_K w_K |V|^-|K| exactly (the conditionals of a block sum to 1 over its values), so K lies
in [N - 2 + tr P, N - 1 + (tr P - 1) / gamma]. A non-reversible kernel: Re lambda_j in
[-1, 1 - gamma_add] and 1/2 <= Re 1/(1 - lambda_j) <= 1/Re(1 - lambda_j) give
K in [(N - 1)/2, (N - 1)/2 + (tr P + N - 2) / (2 gamma_add)] (:func:`kemeny_interval`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mlmix.errors import ConvergenceError
from mlmix.limits import DENSE_POISSON_LIMIT
from mlmix.theory.linalg.elimination import Elimination, eliminate
from mlmix.theory.linalg.matrices import krylov_solve, to_dense
from mlmix.theory.results import DEFAULT_RTOL, EPS, NAMES, Result
from mlmix.validation import Matrix, check_memory, check_vector

if TYPE_CHECKING:
    import torch

    from mlmix.theory.chain.markov_chain import Chain
    from mlmix.theory.linalg.operator import TransitionOperator


def asymptotic_variance_dense(el: Elimination, P: Matrix, f: np.ndarray, pi: np.ndarray, pi_rel_error: float,
                              gap: Result, *, rtol: float = DEFAULT_RTOL) -> Result:
    """sigma^2(f) from the GTH factors ``el`` of the chain P grounded at a heavy state.

    Error bound: the effect of pi's entrywise relative error (against the centred solution), plus the
    smaller of two bounds on the solve: componentwise from the solve with |f_bar| (sharp for
    metastable chains), and 2 ||f_bar||_pi ||r||_pi / gap from the residual r of the Poisson equation
    and the additive gap's certified lower end (sharp for well-mixing chains; ||(I - P)h||_pi >=
    gap ||h||_pi for pi(h) = 0 holds for non-reversible chains too)."""
    N = f.size
    mean = float(pi @ f)
    fbar = f - mean
    g = el.solve(fbar)
    ghat = g - float(pi @ g)
    var = float(pi @ (fbar * fbar))
    sigma2 = 2.0 * float(pi @ (fbar * ghat)) - var
    c = 8.0 * N * EPS
    weight = 2.0 * float(pi @ np.abs(fbar * ghat)) + var
    err_pi = 3.0 * pi_rel_error * weight if weight else 0.0  # an unbounded pi's error (inf) moves no 0
    g_abs, g_one = el.solve(np.abs(fbar)), el.solve(np.ones(N))
    mean_err = 4 * N * EPS * float(pi @ np.abs(f))
    err_gth = (2.0 * float(pi @ (np.abs(fbar) * (c * g_abs + mean_err * g_one))) + c * var
               + 4 * N * EPS * (2 * abs(float(pi @ (fbar * ghat))) + var))
    err_res = np.inf
    if gap.lower:
        Pg = P @ ghat
        r = np.abs(fbar - (ghat - Pg)) + 4 * EPS * (np.abs(ghat) + P @ np.abs(ghat)) + mean_err
        scale = float(r.max())
        if scale > 0 and np.isfinite(scale):  # ||r||_pi without overflow; an infinite bound just loses the min
            with np.errstate(over="ignore"):
                err_res = 2.0 * np.sqrt(var) * scale * np.sqrt(float(pi @ ((r / scale) ** 2))) / gap.lower
    # + the square of the centring's rounding: f_bar off by a constant d = pi(f_bar) adds d^2 to pi(f_bar^2)
    # (a constant f gives sigma2 = -d^2, not 0)
    shift = abs(float(pi @ fbar)) + 2 * N * EPS * float(pi @ np.abs(fbar))
    err = err_pi + min(err_gth, err_res) + 2.0 * shift**2
    method = ("Poisson equation grounded at the heaviest state, GTH factors; error bounded a posteriori (solve with "
              "|f - pi(f)|, or residual / gap)")
    return Result.checked("asymptotic variance", sigma2, err, method, rtol=rtol, lower=0.0, upper=None)


def asymptotic_variance_sparse(P: Matrix, f: np.ndarray, pi: np.ndarray, gap: Result, pi_rel_error: float = 0.0,
                               *, rtol: float = DEFAULT_RTOL, direct_limit: int = DENSE_POISSON_LIMIT) -> Result:
    """sigma^2(f) on a sparse chain, the algorithm chosen by size here (one place):

    * up to ``direct_limit`` states (:data:`~mlmix.limits.DENSE_POISSON_LIMIT`): the GTH factors of P
      grounded at the heaviest state and the certified bound of :func:`asymptotic_variance_dense` (Krylov
      solvers stall on metastable chains, where the subtraction-free factors stay accurate);
    * above: a Krylov solve of (I - P + 1 pi^T) g = f_bar with its residual r; |sigma^2 error| <=
      2 ||f_bar||_pi ||r||_pi / gap (the gap's lower end), an interval when that is too large or unknown.
      When the solve does not converge within its budget: the interval 0 <= sigma^2 <= (2 / gap - 1)
      Var_pi(f) (||g||_pi <= ||f_bar||_pi / gap for pi(g) = 0) with the solver's reason.

    ``pi_rel_error``: the entrywise relative error of ``pi`` (the direct route charges it)."""
    N = f.size
    if N <= direct_limit:
        el = eliminate(to_dense(P), last=int(np.argmax(pi)))
        return asymptotic_variance_dense(el, P, f, pi, pi_rel_error, gap, rtol=rtol)
    P = sp.csr_array(P)
    fbar = f - float(pi @ f)
    op = sp.linalg.LinearOperator((N, N), matvec=lambda v: v - P @ v + pi @ v, dtype=np.float64)
    check_memory(8.0 * 70 * N, "the Krylov solve of the Poisson equation")
    var = float(pi @ fbar**2)
    g_lo = gap.lower or 0.0
    try:
        g, method = krylov_solve(op, fbar, spd=False, diagonal=1.0 - P.diagonal() + pi, what="Poisson equation")
    except ConvergenceError as exc:
        upper = (2.0 / g_lo - 1.0) * var * (1 + 4 * N * EPS) if g_lo > 0 else None
        return Result.interval("asymptotic variance", 0.0, upper, "Krylov solve of (I - P + 1 pi^T) g = f - pi(f); "
                               "enclosure 0 <= sigma^2 <= (2 / gap - 1) Var_pi(f)", f"{exc}; the GTH solve that "
                               f"metastable chains need runs up to {direct_limit} states")
    r = op @ g - fbar
    sigma2 = 2.0 * float(pi @ (fbar * g)) - var
    shift = abs(float(pi @ fbar)) + 2 * N * EPS * float(pi @ np.abs(fbar))  # the centring's rounding (dense case)
    err = (2.0 * np.sqrt(var * float(pi @ r**2)) / g_lo + 2.0 * shift**2) if g_lo > 0 else np.inf
    return Result.checked("asymptotic variance", sigma2, err, method + "; error <= 2 ||f||_pi ||residual||_pi / gap",
                          rtol=rtol, lower=0.0)


def kemeny_constant_dense(el: Elimination, pi: np.ndarray, pi_rel_error: float, *,
                          rtol: float = DEFAULT_RTOL) -> Result:
    """K = tr(G) - pi^T G 1 from the grounded inverse G (module docstring); O(N^3)."""
    N = pi.size
    check_memory(8.0 * N * N * 3, f"the grounded inverse of {N} states")
    G = el.solve(np.eye(N))
    tr = float(np.trace(G))
    hit = float(pi @ G.sum(axis=1))
    err = (16.0 * N * EPS + pi_rel_error) * (tr + hit)
    return Result.checked("Kemeny constant", tr - hit, err,
                          "trace of the group inverse from the grounded GTH inverse: tr(G) - pi^T G 1", rtol=rtol,
                          lower=0.0)


def kemeny_interval(n_states: int, trace: float, gap: Result, lambda_min: float = -1.0, *,
                    how: str = "", reversible: bool = True) -> Result:
    """Bounds on K = sum_{j >= 2} 1 / (1 - lambda_j) from the trace and a gap alone (no eigenvector).

    Reversible: every lambda_j (j >= 2) lies in [a, b], a = ``lambda_min`` (a lower bound on the
    smallest eigenvalue: -1 in general, 0 for a positive semi-definite kernel), b = 1 - gap; with
    sum_{j >= 2} lambda_j = tr P - 1, the tangent 1/(1 - lambda) >= 1 + lambda and the chord of the
    convex 1/(1 - lambda) over [a, b] give

        N - 2 + tr P  <=  K  <=  (N - 1) / (1 - a) + (tr P - 1 - (N - 1) a) / ((1 - a)(1 - b)).

    Not reversible (``gap`` the additive gap, of (P + P*)/2): a right eigenvector f of lambda_j != 1 has
    pi(f) = 0, so Re lambda_j = <f, (P + P*)/2 f>_pi / <f, f>_pi lies in [-1, 1 - gap], and |lambda_j| <= 1.
    K is real (conjugate pairs), K = sum_j Re 1/(1 - lambda_j), and for z = 1 - lambda with Re z = x,
    1/2 <= Re 1/z = x / |z|^2 <= 1/x (the disc |lambda| <= 1; real lambda). The chord of 1/x over
    [gap, 2] with sum_j Re(1 - lambda_j) = N - tr P gives the upper end above with a = -1; the lower end
    is (N - 1)/2 (attained in the limit of eigenvalues on the unit circle).

    ``trace`` is taken as exact to N u (a sum of N non-negative terms); the upper end needs the gap's
    lower end."""
    N = int(n_states)
    slack = 1 + 4 * N * EPS
    if not reversible:
        lambda_min = -1.0
    lo = (N - 2 + trace) / slack if reversible else (N - 1) / 2 / slack
    hi = None
    if gap.lower:
        a = float(lambda_min)
        hi = ((N - 1) / (1 - a) + (trace - 1 - (N - 1) * a) / ((1 - a) * gap.lower)) * slack
    method = (f"tangent and chord of 1/(1 - lambda) over [{lambda_min:g}, 1 - gap] with sum lambda_j = tr P - 1{how}"
              if reversible else f"Re 1/(1 - lambda_j) in [1/2, 1/Re(1 - lambda_j)], Re lambda_j in [-1, 1 - additive "
              f"gap], chord with sum Re lambda_j = tr P - 1 (non-reversible){how}")
    return Result.interval("Kemeny constant", lo, hi, method,
                           "the Kemeny constant needs every eigenvalue (or a dense grounded inverse): only bounds "
                           "from the trace and the gap are computed at this size", trace=trace)
def kemeny_constant_transient(P: Matrix, transient: np.ndarray, closed: Result, *,
                              rtol: float = DEFAULT_RTOL) -> Result:
    """K = K_C + tr((I - P_TT)^{-1}) for a chain with transient states T and Kemeny constant K_C of its
    closed class (module docstring); O(|T|^3). The trace's entries are solved subtraction-free (relative
    error <= 8 |T|^3 u, O'Cinneide's bound as for the hitting times)."""
    T = np.flatnonzero(transient)
    m = T.size
    check_memory(8.0 * m * m * 3, f"the fundamental matrix of {m} transient states")
    Ps = sp.csr_array(P)
    rows = Ps[T]
    Q = rows[:, T].toarray()
    C = np.ones(Ps.shape[0], dtype=bool)
    C[T] = False
    exits = np.asarray(rows[:, np.flatnonzero(C)].sum(axis=1)).reshape(m, 1)
    el = eliminate(Q, exits=exits, eliminate_mask=np.ones(m, dtype=bool))
    trace = float(np.trace(el.solve(np.eye(m))))
    rel = min(8.0 * m**3 * EPS, 1.0)
    method = (f"K of the closed class ({closed.method}) plus tr((I - P_TT)^-1) over the {m} transient states "
              "(GTH solve, subtraction-free)")
    if closed.lower is None or closed.upper is None:
        return Result.interval("Kemeny constant", None, None, method,
                               f"the closed class's Kemeny constant is not known: {closed.reason}")
    lo = closed.lower + trace * (1 - rel)
    hi = closed.upper + trace * (1 + rel)
    value = (closed.value if closed.value is not None else (closed.lower + closed.upper) / 2) + trace
    return Result.checked("Kemeny constant", value, max(value - lo, hi - value), method, rtol=rtol, lower=lo, upper=hi)


# ------------------------------------------------------------ matrix-free (a TransitionOperator)

def operator_asymptotic_variance(op: TransitionOperator, f: np.ndarray, pi: torch.Tensor, gap: Result,
                        pi_rel_error: float | None = None) -> Result:
    """sigma^2(f) through the Poisson equation (module docstring), on one process or sharded. The error
    bound adds the effect of pi's entrywise relative error ``pi_rel_error`` on 2 <f_bar, g>_pi - Var_pi(f),
    3 rel (2 <|f_bar g|>_pi + Var_pi f), as on the dense route."""

    from mlmix.theory.linalg.krylov import conjugate_gradient, gmres
    from mlmix.theory.linalg.operator_vectors import MAX_MATVECS, SOLVE_RTOL, global_total, local_part, rounding

    ft = local_part(op, f).to(op.dtype)
    fbar = ft - global_total(op, pi * ft)
    if op.reversible:  # D^1/2 (I - P + 1 pi^T) D^-1/2 = I - B + sqrt(pi) sqrt(pi)^T: positive definite
        r = pi.sqrt()

        def sym(y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            op.apply(y, "symmetric", out)
            return out.neg_().add_(y).add_(r, alpha=global_total(op, r * y))

        sol = conjugate_gradient(sym, fbar * r, comm=op.comm, rtol=SOLVE_RTOL, max_matvecs=MAX_MATVECS)
        g = sol.x / r
        how = f"conjugate gradients on D^1/2 (I - P + 1 pi^T) D^-1/2, {sol.matvecs} applications"
    else:
        def apply(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            op.apply(x, "functions", out)
            return out.neg_().add_(x).add_(global_total(op, pi * x))

        sol = gmres(apply, fbar, comm=op.comm, restart=50, rtol=SOLVE_RTOL, max_matvecs=MAX_MATVECS)
        g = sol.x
        how = f"GMRES(50) on (I - P + 1 pi^T) g = f_bar, {sol.matvecs} applications"
    Pg = op.apply(g, "functions")
    res = fbar - (g - Pg + global_total(op, pi * g))
    res = res.abs_().add_(op.apply(g.abs(), "functions").add_(g.abs()).add_(fbar.abs()), alpha=rounding(op))
    var = global_total(op, pi * fbar.square())
    sigma2 = 2.0 * global_total(op, pi * fbar * g) - var
    g_lo = gap.lower or 0.0
    err = 2.0 * math.sqrt(var * global_total(op, pi * res.square())) / g_lo if g_lo > 0 else math.inf
    err += 8 * EPS * op.n_states ** 0.5 * (abs(sigma2) + var)  # the inner products
    err += 3.0 * (pi_rel_error or 0.0) * (2.0 * global_total(op, pi * (fbar * g).abs()) + var)  # pi's own error
    return Result.checked(NAMES["asymptotic_variance"], sigma2, err, how + "; error <= 2 ||f_bar||_pi ||r||_pi / gap "
                          "(r with its rounding)", lower=0.0)


def kemeny_bounds(op: TransitionOperator, gap: Result) -> Result:
    """Bounds on K from tr P (``op.trace()``: N sum_K w_K |V|^-|K| for a heat-bath kernel, exact as a
    block's conditionals sum to 1 over its values; the holding probabilities' sum for a matrix) and
    ``gap``, the additive gap: the interval of :func:`mlmix.theory.chain.variance.kemeny_interval`, with
    lambda_min = ``op.lambda_min`` for a reversible P (0 for a heat-bath kernel, positive semi-definite;
    Gershgorin's bound for a matrix) and the non-reversible bounds otherwise (module docstring)."""
    lam = op.lambda_min
    how = f", tr P = {op.trace():.6g}" + (f" (lambda_min >= {lam:g})" if op.reversible else "")
    return kemeny_interval(op.n_states, op.trace(), gap, lam, how=how, reversible=op.reversible)


# ------------------------------------------------------------ the questions of a Chain

def chain_asymptotic_variance(chain: Chain, f: np.ndarray) -> Result:
    """The body of :meth:`Chain.asymptotic_variance`."""
    f = check_vector(f, chain.n_states, "f")
    if chain.facts.representation == "operator":
        return operator_asymptotic_variance(chain.op, f, chain.facts.pi_t, chain.additive_gap, chain.facts.pi_rel_error)
    core = chain.facts.core
    if core is not chain:
        f = f[chain.facts.recurrent]
    pi = np.exp(core.facts.logpi)
    if core.facts.representation == "dense":
        return asymptotic_variance_dense(core.facts.grounded, core.P, f, pi, chain.facts.pi_error[0],
                                         chain.additive_gap)
    return asymptotic_variance_sparse(core.P, f, pi, chain.additive_gap, chain.facts.pi_error[0])


def chain_kemeny_constant(chain: Chain) -> Result:
    """The body of :meth:`Chain.kemeny_constant`."""
    if chain.facts.representation == "operator":
        return kemeny_bounds(chain.op, chain.additive_gap)
    core = chain.facts.core
    if core is chain and core.facts.representation != "dense":  # bounds from the trace and the (additive) gap
        return kemeny_interval(core.n_states, float(core.P.diagonal().sum()),
                               chain.spectral_gap if core.is_reversible else chain.additive_gap,
                               how=f"{chain.facts.on_core()}; the exact value needs a dense grounded inverse "
                               f"(<= {chain.dense_limit} states)", reversible=core.is_reversible)
    if chain.facts.representation != "dense" or core.facts.representation != "dense":
        return Result.missing("Kemeny constant", "-",
                              f"needs a dense grounded inverse (<= {chain.dense_limit} states)")
    closed = kemeny_constant_dense(core.facts.grounded, np.exp(core.facts.logpi), chain.facts.pi_error[0])
    if core is not chain:
        closed = kemeny_constant_transient(chain.P, chain.structure.transient, closed)
    return chain.facts.rounded_entries(closed, (0.0, math.inf))
