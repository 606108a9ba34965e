"""One call that computes every exact chain figure ``mlmix exact`` reports, with its method."""

from __future__ import annotations

import math

import numpy as np

from mlmix.theory.conductance import EXACT_CONDUCTANCE_LIMIT, conductance_bounds
from mlmix.theory.matrices import prefer_dense
from mlmix.theory.mixing import MIXING_LIMIT, mixing_time
from mlmix.theory.spectral import (
    absolute_spectral_gap,
    additive_gap,
    is_reversible,
    spectral_gap,
    stationary,
)
from mlmix.validation import Matrix, check_transition_matrix


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def analyse(P: Matrix, eps: float = 0.25, include_stationary: bool = False, mixing_limit: int = MIXING_LIMIT,
            conductance_limit: int = EXACT_CONDUCTANCE_LIMIT) -> dict:
    """Exact figures of an irreducible chain P, as a JSON-ready dict.

    Keys: ``n_states``; ``reversible`` (Kolmogorov's criterion); ``stationary`` (only with
    ``include_stationary``); ``spectral_gap`` 1 - lambda_2 (None unless reversible);
    ``absolute_spectral_gap`` 1 - max |lambda|, lambda != 1; ``relaxation_time`` its inverse;
    ``additive_gap`` gap of (P + P*)/2 and ``poincare_constant`` = 1 / additive_gap;
    ``conductance`` Phi* (a number when exhaustive, else {"lower", "upper"}); ``eps`` and
    ``t_mix`` = t_mix(eps) for the worst-start TV distance (None above ``mixing_limit`` states or
    when d(t) does not fall below eps); ``method``: how each figure was obtained. Infinite values
    (a zero gap) are reported as None with a note in ``method``.
    """
    P = check_transition_matrix(P)
    N = P.shape[0]
    st = stationary(P)
    pi = st.pi
    eig = "dense LAPACK" if prefer_dense(P) else "ARPACK"
    rev = is_reversible(P, pi)
    method: dict[str, str] = {
        "stationary": f"{st.method}; residual ||pi P - pi||_1 = {st.residual:.2e}",
        "reversible": "Kolmogorov's criterion (detailed balance checked in log space on every edge)",
    }
    out: dict = {"n_states": int(N), "reversible": rev}
    if include_stationary:
        out["stationary"] = pi.tolist()
    if rev:
        out["spectral_gap"] = spectral_gap(P, pi)
        method["spectral_gap"] = f"{eig} symmetric eigensolver on D^1/2 P D^-1/2"
    else:
        out["spectral_gap"] = None
        method["spectral_gap"] = "not reversible: see additive_gap / poincare_constant"
    abs_gap = absolute_spectral_gap(P, pi)
    out["absolute_spectral_gap"] = abs_gap
    out["relaxation_time"] = _finite(1.0 / abs_gap) if abs_gap > 0 else None
    method["absolute_spectral_gap"] = (f"{eig} symmetric eigensolver (largest and smallest eigenvalue)" if rev
                                       else f"{eig} eigenvalues of P of largest modulus")
    if abs_gap <= 0:
        method["relaxation_time"] = "infinite: an eigenvalue other than 1 has modulus 1 (periodic chain)"
    add_gap = out["spectral_gap"] if rev else additive_gap(P, pi)  # (P + P*)/2 = P when reversible
    out["additive_gap"] = add_gap
    out["poincare_constant"] = _finite(1.0 / add_gap) if add_gap > 0 else None
    method["poincare_constant"] = ("1 / spectral gap ((P + P*)/2 = P for reversible P)" if rev
                                   else f"1 / gap of (P + P*)/2, {eig} symmetric eigensolver")
    bounds = conductance_bounds(P, pi, max_exact_states=conductance_limit)
    out["conductance"] = bounds.exact if bounds.exact is not None else {"lower": bounds.lower, "upper": bounds.upper}
    method["conductance"] = bounds.method
    out["eps"] = float(eps)
    if N <= mixing_limit:
        try:
            out["t_mix"] = mixing_time(P, eps, pi, max_states=mixing_limit)
            method["t_mix"] = "worst-start TV distance, exact: repeated squaring of dense P and bisection"
        except ValueError as err:
            out["t_mix"] = None
            method["t_mix"] = f"not reached: {err}"
    else:
        out["t_mix"] = None
        method["t_mix"] = f"skipped: {N} states exceed the exact dense limit of {mixing_limit}"
    out["method"] = method
    return out


def format_table(result: dict, title: str) -> str:
    """A readable two-column table of :func:`analyse`'s result."""

    def fmt(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            return f"{value:.6g}"
        if isinstance(value, dict):
            return f"[{value['lower']:.6g}, {value['upper']:.6g}]"
        return str(value)

    rows = [("states", result["n_states"]), ("reversible", result["reversible"]),
            ("spectral gap", result["spectral_gap"]), ("absolute spectral gap", result["absolute_spectral_gap"]),
            ("relaxation time", result["relaxation_time"]), ("additive gap (P+P*)/2", result["additive_gap"]),
            ("Poincare constant", result["poincare_constant"]), ("conductance Phi*", result["conductance"]),
            (f"t_mix({result['eps']:g}), worst-start TV", result["t_mix"])]
    width = max(len(name) for name, _ in rows)
    lines = [title, ""]
    lines += [f"  {name:<{width}}  {fmt(value)}" for name, value in rows]
    lines += ["", "method:"]
    lines += [f"  {key}: {note}" for key, note in result["method"].items()]
    if "stationary" in result:
        pi = np.asarray(result["stationary"])
        lines += ["", "stationary law:", "  " + np.array2string(pi, precision=6, max_line_width=96)]
    return "\n".join(lines)
