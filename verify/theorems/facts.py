"""The standard Markov-chain facts the proofs and the exact engine rely on (THEOREMS.md section 2C),
checked on non-reversible Glauber chains of score tables and on metastable two-well chains (spectral
gaps down to ~1e-30, computed to relative accuracy by :class:`mlmix.theory.chain.markov_chain.Chain`).

1. Dirichlet form: E(f, f) = <f, (I - P) f>_pi = (1/2) sum pi(x) P(x, y) (f(x) - f(y))^2, the same for P
   and its additive reversibilization (two formulas).
2. Conductance: Q(S, S^c) = Q(S^c, S), so Phi_P(S) = Phi_{P_add}(S); Cheeger for P_add: Phi*^2 / 2 <= gap <= 2 Phi*
   (Phi* by enumerating subsets with direct sums of pi P, against the engine's exact Phi*; <= 16 states).
3. Every eigenvalue lambda != 1 bounds the worst-start distance below: d(t) >= |lambda|^t / 2.
4. Fill: 4 TV(P^t(x, .), pi)^2 <= sigma_2^{2t} (1 - pi(x)) / pi(x), sigma_2^2 = 1 - gap(P* P).
5. Paulin: the block form 4 TV(P^t(x, .), pi)^2 <= (1 - gap((P*)^k P^k))^{floor(t/k)} (1 - pi(x))/pi(x)
   and its consequences t_mix <= (1 + 2 ln 2 + ln(1/pi_min)) / gamma_ps, gamma_ps >= 1/(2 t_mix).
6. Conductance bound on mixing (no reversibility): t_mix(eps) >= (pi(S^c) - eps) / Phi(S) for every S.
7. Asymptotic variance of ergodic averages: sigma^2(f) = 2 <f~, Z f~>_pi - <f~, f~>_pi with
   Z = (I - P + 1 pi)^{-1}, against the engine's Poisson-equation solution.

and, as a check of the exact engine (``engine.tpt-identities``), the identities of transition path theory
(Metzner, Schuette and Vanden-Eijnden 2009): the reactive flux f(i, j) = pi(i) q-(i) P(i, j) q+(j) is
conserved off A u B, what leaves A arrives in B, as many reactive trajectories go A -> B as B -> A
(F_AB = F_BA), and the time last spent in A or in B sums to 1; and (``engine.correlation-identities``) the
time correlations, relaxation, laws mu P^t and expected transition counts of
:mod:`mlmix.theory.chain.correlations` and :mod:`mlmix.theory.chain.propagation` against numpy's own matrix
powers: C_fg(0) = E_pi[fg], C_fg(t) = (pi f) . P^t g, E_mu[g(X_t)] = mu . P^t g, mu P^t, the counts summing to
n with column sums sum_(1 <= s <= n) mu P^s, and the spectral route equal to the powers on reversible
chains; and (``engine.sensitivities``) the derivatives of pi, of a committor and of a mean first passage time along a direction that keeps P stochastic
(:mod:`mlmix.theory.chain.sensitivities`) against central differences computed at 60+ digits; and
(``engine.generator-uniformisation``) the continuous-time chain of a generator Q through its uniformised chain:
pi Q = 0, the continuous-time hitting times solve Q h = -1 off the target, and the gap of Q is the same at two
uniformisation rates; and (``engine.pcca-coarse``) PCCA+'s coarse-grained matrix has the Ritz values of P on the
span of the memberships, which lie within the residual of P's slow eigenvalues.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from mlmix.errors import NumericalError
from mlmix.theory.chain.correlations import pi_l1_bound, spectral_refusal
from mlmix.theory.chain.generators import GeneratorChain
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.verify import instances as S
from mlmix.verify.regime_instances import basin_instances, metastable_instances
from mlmix.verify.theorems.glauber.glauber_base import mixing_part, two_spin_ising
from mlmix.verify.verdicts import Applicability, Attaining, OnFirst, Part, Theorem, Verdict, part, register, verdict

PAPER = "facts"

#: Unit roundoff.
U = float(np.finfo(float).eps) / 2


def chain_instances(max_states: int, metastable: bool = True, min_length: int = 2) -> st.SearchStrategy:
    """Half of the time (where 81 states fit) a generic chain with n >= 4 and |V| >= 3 (:func:`S.half_large`);
    else Glauber chains of any source (mostly incompatible: non-reversible) and, with ``metastable``,
    basin chains (two wells, or one basin with n >= ``min_length``) and metastable two-well chains at
    gamma/T in [18, 60] (spectral gaps ~1e-8 .. 1e-26)."""
    options = [S.instances(max_states=max_states, max_ratio=40.0)]
    if metastable:
        options += [basin_instances(max_states=max_states, two_wells=True, max_ratio=60.0),
                    basin_instances(max_states=max_states, min_length=min_length, max_ratio=60.0),
                    metastable_instances(min(max_states, 81))]
    return S.half_large(st.one_of(*options), max_states, 40.0)


@st.composite
def single_site_instances(draw) -> S.Instance:
    """n = 1: Glauber resamples the only site from its conditional, an exact sampler (t_mix = 1)."""
    q, seed, scale = draw(st.integers(2, 8)), draw(S.seeds()), draw(st.sampled_from(S.SCALES))
    src = S.ScoreTable.random(q, 1, seed=seed, scale=scale).at_temperature(draw(S.temperatures(0.2, 5.0)))
    return S.Instance(src, "gaussian-table", {"seed": seed, "scale": scale})


def _chain(inst: S.Instance) -> Chain:
    return Chain(glauber_kernel(inst.source))


def _with_function(instance: tuple) -> tuple[Chain, np.ndarray, np.ndarray, np.ndarray]:
    """(chain, dense P, pi, f) for an instance (source instance, seed): f ~ N(0, 1) per state."""
    inst, seed = instance
    chain = _chain(inst)
    pi = chain.stationary.value
    return chain, chain.to_dense(), pi, np.random.default_rng(seed).normal(size=pi.size)


def _worst_start_tv(P: np.ndarray, pi: np.ndarray, t: int) -> np.ndarray:
    """TV(P^t(x, .), pi) for every start x (dense power), and its rounding error t N u + 1e-15."""
    return 0.5 * np.abs(np.linalg.matrix_power(P, t) - pi[None, :]).sum(axis=1)


class _Fact(Theorem):
    paper = PAPER

    def hypotheses(self, instance: S.Instance) -> Applicability:
        table_ok = np.isfinite(S.score_table(instance.source)).all()
        return Applicability(bool(table_ok), "" if table_ok else "zero conditionals")


@register
class Dirichlet(OnFirst, _Fact):
    id = "facts.dirichlet"
    number = "Fact 2C.1 (Dirichlet form)"
    statement = ("for any chain with stationary pi (reversible or not): <f, (I - P) f>_pi = (1/2) sum_{x,y} pi(x) "
                 "P(x,y) (f(x) - f(y))^2, and P and (P + P*)/2 have the same Dirichlet form")

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(chain_instances(243), st.integers(0, 2**16))

    extras = ("f_seed",)

    def check(self, instance) -> Verdict:
        chain, P, pi, f = _with_function(instance)
        quadratic = float(pi @ (f * f) - pi @ (f * (P @ f)))  # <f, (I - P) f>: cancellation, absolute error
        pairs = 0.5 * float((pi[:, None] * P * (f[:, None] - f[None, :]) ** 2).sum())  # positive terms
        scale = float(pi @ (f * f))
        additive = chain.additive_reversibilization().dirichlet_form(f)
        err = 10 * pi.size * U * scale
        return verdict(Part("<f,(I-P)f> = (1/2) sum pi P (f(x)-f(y))^2", quadratic, pairs, "==", err, 1e-12 * pairs, False),
                       Part("E_P(f,f) = E_(P+P*)/2(f,f)", additive, pairs, "==", err, 1e-12 * pairs, False))


def brute_force_conductance(P: np.ndarray, pi: np.ndarray) -> tuple[float, np.ndarray]:
    """min{Q(S, S^c) / pi(S) : 0 < pi(S) <= 1/2} by enumerating every subset (N <= 20 states), with
    Q(x, y) = pi(x) P(x, y) summed directly (positive terms: relative accuracy), and the minimising set."""
    N = pi.size
    if N > 20:
        raise ValueError(f"enumeration of 2^{N} subsets refused (at most 20 states)")
    bits = ((np.arange(1, 2**N - 1)[:, None] >> np.arange(N)) & 1).astype(bool)
    mass = bits @ pi
    keep = (mass > 0) & (mass <= 0.5)  # 0 < pi(S): a set of states whose pi underflows to 0 has no ratio
    bits, mass = bits[keep], mass[keep]
    flow = pi[:, None] * P
    out = np.einsum("mi,ij,mj->m", bits, flow, ~bits)
    k = int(np.argmin(out / mass))
    return float(out[k] / mass[k]), bits[k]


@register
class Cheeger(_Fact):
    id = "facts.cheeger"
    number = "Fact 2C.2 (conductance and Cheeger)"
    statement = ("Phi_P(S) = Phi_{(P+P*)/2}(S) for every S (stationarity alone gives Q(S,S^c) = Q(S^c,S)), and "
                 "Phi*^2/2 <= gap((P+P*)/2) <= 2 Phi*, Phi* = min over pi(S) <= 1/2 (exact by enumeration)")
    conventions = ("The lower Cheeger bound is loose on these chains (gap / (Phi*^2/2) stays far above 2) and is "
                   "checked as a condition; the upper bound is attained by two-state-like chains. Independent "
                   "references: Phi* by enumerating every subset with sums of pi(x) P(x, y) (against the engine's "
                   "conductance), the flow identity Q(S, S^c) = Q(S^c, S) by direct sums at the minimising set, and "
                   "the gap against a dense eigensolver when it is above 1e-6.")

    def strategy(self) -> st.SearchStrategy:
        return chain_instances(16, min_length=1)

    def check(self, instance: S.Instance) -> Verdict:
        chain = _chain(instance)
        gap, phi = chain.additive_gap, chain.conductance
        P, pi = chain.to_dense(), chain.stationary.value
        brute, mask = brute_force_conductance(P, pi)
        flow = pi[:, None] * P
        out_flow, in_flow = float(flow[np.ix_(mask, ~mask)].sum()), float(flow[np.ix_(~mask, mask)].sum())
        gv = float(gap.value)
        # Phi* of the engine: a value, or (a metastable chain's operator route) an enclosure: its centre and radius
        pv = float(phi.value) if phi.resolved else (phi.lower + phi.upper) / 2
        p_err = 1e-9 * pv if phi.resolved else (phi.upper - phi.lower) / 2 + 1e-9 * pv
        conditions = {"Phi*^2 / 2 <= gap": brute**2 / 2 <= gv * (1 + 1e-9)}
        if gv > 1e-6:  # dense symmetric eigensolver: absolute accuracy ~1e-15, relative only above ~1e-6
            s = np.sqrt(pi)
            add = (flow + flow.T) / 2 / s[:, None] / s[None, :]
            dense = 1.0 - float(np.linalg.eigvalsh((add + add.T) / 2)[-2])
            conditions["gap = 1 - lambda_2 of the dense symmetrised (P + P*)/2"] = abs(dense - gv) <= 1e-9 * gv + 1e-13
        return verdict(Part("gap(P_add) <= 2 Phi*", gv, 2 * brute, "<=", (gap.rel_error or 1e-9) * gv, 1e-12 * brute),
                       Part("Phi* (engine) = Phi* (enumeration of pi P)", pv, brute, "==", p_err, 1e-12 * brute, False),
                       part("Q(S, S^c) = Q(S^c, S) at the minimising set", out_flow, in_flow, "==", 1e-10, ratio=False),
                       conditions=conditions, gap=gv, conductance=brute)

    attaining = (Attaining("one uniform binary site (P = [[1/2, 1/2], [1/2, 1/2]]): gap = 1 = 2 Phi*",
                           lambda: S.Instance(S.ScoreTable(S.StateSpace(2, 1), np.zeros((1, 1, 2))), "uniform", {}), looseness=1.0001),)


@register
class EigenvalueLowerBound(_Fact):
    id = "facts.eigenvalue"
    number = "Fact 2C.3 (eigenvalue lower bound)"
    statement = ("every eigenvalue lambda != 1 of P (complex for non-reversible P) gives d(t) >= |lambda|^t / 2; "
                 "checked with the largest |lambda| at t = 1, 2, 4, ... while |lambda|^t / 2 >= 1e-6")

    budget = 0.6  # dense powers on the 81-state shapes

    def strategy(self) -> st.SearchStrategy:
        return chain_instances(81)

    def check(self, instance: S.Instance) -> Verdict:
        chain = _chain(instance)
        gap = chain.absolute_spectral_gap
        if gap.value is None and gap.upper is None:
            return verdict(Part("d(t) >= |lambda|^t / 2", 1.0, 0.0, ">=", 0.0, 0.0),
                           trivial=f"|lambda_2| is not resolved: {gap.reason}")
        # an unresolved gap: the largest value of its interval (the smallest |lambda|, the weakest bound)
        g = float(gap.value) if gap.value is not None else float(gap.upper)
        lam = 1.0 - g
        lam_err = (gap.rel_error or 1e-9) * g + 1e-15
        worst = None
        t = 1
        while lam**t / 2 >= 1e-6 and t <= 2**40:
            try:
                d = chain.tv_distance(t)
            except NumericalError as err:  # the engine's own d(t) enclosure is empty: a wrong number, not a crash
                return verdict(Part("d(t) >= |lambda|^t / 2", 0.0, lam**t / 2, ">=", 0.0, 0.0), t=t,
                               empty_enclosure=str(err))
            lo = float(d.lower)
            if lo <= 0 or float(d.upper) - lo > 0.1 * lo:  # beyond the resolution of the powers
                break
            rhs = lam**t / 2
            if worst is None or rhs / max(lo, 1e-300) > worst[0]:
                worst = (rhs / max(lo, 1e-300), lo, float(d.upper) - lo, rhs, t)
            t *= 2
        if worst is None:
            return verdict(Part("d(t) >= |lambda|^t / 2", 1.0, lam / 2, ">=", 0.0, 0.0),
                           trivial="|lambda|/2 < 1e-6: the bound is vacuous", gap=g)
        _, lo, err, rhs, t = worst
        return verdict(Part("d(t) >= |lambda|^t / 2", lo, rhs, ">=", err, t * lam_err * rhs / max(lam, 1e-300)),
                       t=t, modulus=lam, gap=g)

    attaining = (Attaining("two spins, J = 3, T = 1 (two symmetric wells): d(t) = |lambda_2|^t / 2 to 1e-6",
                           lambda: two_spin_ising(3.0, 1.0), looseness=1.0),)


def _fill_parts(chain: Chain, blocks: tuple[int, ...], times: tuple[int, ...]) -> tuple[Part, dict]:
    """The worst (x, t, k) of 4 TV(P^t(x,.),pi)^2 <= (1 - gap((P*)^k P^k))^{floor(t/k)} (1 - pi(x)) / pi(x)."""
    P = chain.to_dense()
    pi = chain.stationary.value
    rev = chain.time_reversal().to_dense()
    worst = None
    for k in blocks:
        Pk = np.linalg.matrix_power(P, k)
        M = np.linalg.matrix_power(rev, k) @ Pk
        s = np.sqrt(pi)
        lam2 = np.linalg.eigvalsh((s[:, None] * M / s[None, :] + (s[:, None] * M / s[None, :]).T) / 2)[-2]
        rate = min(1.0, max(0.0, float(lam2)))
        for t in times:
            tv = _worst_start_tv(P, pi, t)
            lhs = 4 * tv**2
            rhs = rate ** (t // k) * (1 - pi) / pi
            ratio = lhs / np.maximum(rhs, 1e-300)
            x = int(np.argmax(ratio))
            if worst is None or ratio[x] > worst[0]:
                worst = (ratio[x], lhs[x], rhs[x], 8 * tv[x] * (t + 1) * pi.size * U + 1e-15, t, k, x)
    _, lhs, rhs, err, t, k, x = worst
    return Part("4 TV(P^t(x,.),pi)^2 <= (1-gap_k)^{floor(t/k)} (1-pi(x))/pi(x)", lhs, rhs, "<=", err,
                1e-9 * rhs), {"t": t, "k": k, "start": x}


@register
class Fill(_Fact):
    id = "facts.fill"
    number = "Fact 2C.4 (Fill's bound)"
    statement = ("for every chain (reversible or not), start x and t >= 0: 4 TV(P^t(x,.), pi)^2 <= sigma_2^{2t} "
                 "(1 - pi(x))/pi(x), sigma_2^2 = 1 - gap(P* P) (the multiplicative reversibilization)")
    conventions = "TV is half L1; at t = 0 the bound reads 4 (1 - pi(x))^2 <= (1 - pi(x))/pi(x), attained at pi(x) = 1/2."

    def strategy(self) -> st.SearchStrategy:
        return chain_instances(81)

    def check(self, instance: S.Instance) -> Verdict:
        chain = _chain(instance)
        main, details = _fill_parts(chain, (1,), (0, 1, 2, 4, 8, 16))
        return verdict(main, gap=chain.additive_gap.value, **details)

    attaining = (Attaining("two spins, J = 3, T = 1: pi(00) close to 1/2, the t = 0 bound is attained",
                           lambda: two_spin_ising(3.0, 1.0), looseness=1.0001),)


@register
class Paulin(_Fact):
    id = "facts.paulin"
    number = "Fact 2C.5 (Paulin's pseudo-spectral gap)"
    statement = ("gamma_ps = max_k gap((P*)^k P^k)/k: 4 TV(P^t(x,.),pi)^2 <= (1 - gap((P*)^k P^k))^{floor(t/k)} "
                 "(1-pi(x))/pi(x) for every k, hence t_mix <= (1 + 2 ln 2 + ln(1/pi_min)) / gamma_ps and "
                 "gamma_ps >= 1/(2 t_mix)")
    conventions = ("The two t_mix inequalities are loose by design (bound / t_mix >= 2.2 and 2 gamma_ps t_mix >= 2.9 "
                   "on every family tried, lazy rotations included) and are checked as conditions; the block "
                   "inequality they rest on is the part that can be shown to fail (attained at t = 0, pi(x) = 1/2).")
    budget = 0.5

    def strategy(self) -> st.SearchStrategy:
        return st.one_of(S.instances(max_states=27, max_ratio=8.0),
                         basin_instances(max_states=16, two_wells=True, max_ratio=8.0))

    def check(self, instance: S.Instance) -> Verdict:
        chain = _chain(instance)
        t_mix = chain.mixing_time(0.25)
        if not t_mix.resolved or t_mix.value > 200:
            main, details = _fill_parts(chain, (1, 2, 3), (0, 1, 2, 4, 8))
            return verdict(main, **details)
        t = int(t_mix.value)
        P, rev = chain.to_dense(), chain.time_reversal().to_dense()
        pi = chain.stationary.value
        s = np.sqrt(pi)
        gamma_ps, Pk, Rk = 0.0, np.eye(pi.size), np.eye(pi.size)
        for k in range(1, 2 * t + 2):
            Pk, Rk = Pk @ P, Rk @ rev
            M = Rk @ Pk
            lam2 = np.linalg.eigvalsh((s[:, None] * M / s[None, :] + (s[:, None] * M / s[None, :]).T) / 2)[-2]
            gamma_ps = max(gamma_ps, (1 - float(lam2)) / k)
        main, details = _fill_parts(chain, (1, 2, 3), (0, 1, 2, 4, 8))
        upper = (1 + 2 * math.log(2) + math.log(1 / pi.min())) / gamma_ps
        return verdict(main, conditions={"t_mix <= (1 + 2 ln 2 + ln(1/pi_min)) / gamma_ps": t <= upper * (1 + 1e-9),
                                         "gamma_ps >= 1/(2 t_mix)": gamma_ps >= 1 / (2 * t) * (1 - 1e-9)},
                       gamma_ps=gamma_ps, t_mix=t, **details)

    attaining = (Attaining("two spins, J = 2, T = 1 (t_mix = 39, so the t_mix conditions are checked too): the t = 0 "
                           "block bound is 1/(4 pi(00)(1 - pi(00))) = 1.00032 x 4 TV^2; at t = 8 the ratio is 1.037 "
                           "here and 1.00009 at J = 5 (deeper wells approach equality at every t)",
                           lambda: two_spin_ising(2.0, 1.0), looseness=1.00033),)


@register
class ConductanceMixing(OnFirst, _Fact):
    id = "facts.conductance_mixing"
    number = "Fact 2C.6 (conductance lower bound on mixing)"
    statement = ("for every set S (no reversibility needed): t_mix(eps) >= (pi(S^c) - eps) / Phi(S); with "
                 "pi(S) <= 1/2 this gives Theorem 8's t_mix(1/4) >= 1/(4 Phi(S)). Attained by exact samplers "
                 "(n = 1: t_mix = 1, Phi(S) = pi(S^c)) as eps -> 0")
    budget = 0.5

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(st.one_of(chain_instances(81, min_length=1), single_site_instances()),
                         st.sampled_from((0.25, 0.1, 0.01)), st.integers(0, 2**16))

    extras = ("eps", "set_seed")

    def check(self, instance) -> Verdict:
        inst, eps, seed = instance
        chain = _chain(inst)
        pi = chain.stationary.value
        S_ = inst.basin if inst.basin is not None else np.random.default_rng(seed).random(pi.size) < 0.5
        if S_.all() or not S_.any():
            S_ = np.arange(pi.size) == int(np.argmax(pi))
        mass_out = float(pi[~S_].sum())
        if mass_out <= eps:
            return verdict(Part("t_mix(eps) >= (pi(S^c) - eps)/Phi(S)", 1.0, 0.0, ">=", 0.0, 0.0),
                           trivial="pi(S^c) <= eps: the bound is not positive")
        phi = float(chain.set_conductance(S_).value)
        bound = (mass_out - eps) / phi
        main = mixing_part("t_mix(eps) >= (pi(S^c) - eps)/Phi(S)", chain.to_dense(), eps, pi, bound, ">=")
        return verdict(main, set_size=int(S_.sum()), set_mass=float(pi[S_].sum()))

    attaining = (Attaining("one site, |V| = 3 (an exact sampler: t_mix = 1), eps = 0.01: the bound is 0.97",
                           lambda: (S.Instance(S.ScoreTable.random(3, 1, seed=0), "gaussian-table",
                                               {"seed": 0, "scale": 1.0}), 0.01, 0), looseness=1.0357),)


@register
class AsymptoticVariance(OnFirst, _Fact):
    id = "facts.variance"
    number = "Fact 2C.7 (asymptotic variance)"
    statement = ("for an ergodic chain and f: sigma^2(f) = lim Var(sum_{t<T} f(X_t))/T = 2 <f~, Z f~>_pi - <f~, f~>_pi, "
                 "f~ = f - pi f, Z = (I - P + 1 pi)^{-1}; checked against the engine's Poisson-equation solution")

    budget = 0.4  # 243-state fundamental matrices on the large shapes

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(S.instances(max_states=243, max_ratio=12.0), st.integers(0, 2**16))

    extras = ("f_seed",)

    def check(self, instance) -> Verdict:
        chain, P, pi, f = _with_function(instance)
        engine = chain.asymptotic_variance(f)
        fc = f - pi @ f
        A = np.eye(pi.size) - P + np.outer(np.ones(pi.size), pi)
        Zf = np.linalg.solve(A, fc)
        direct = 2 * float(pi @ (fc * Zf)) - float(pi @ fc**2)
        cond = float(np.linalg.cond(A))
        return verdict(Part("sigma^2 (Poisson equation) = 2<f,Zf> - <f,f> (fundamental matrix)", float(engine.value),
                            direct, "==", (engine.rel_error or 1e-9) * abs(float(engine.value)),
                            10 * pi.size * cond * U * float(pi @ fc**2), False), condition_number=cond)


def _ends(r) -> tuple[float, float] | None:
    """(value, absolute error) of a resolved result, None otherwise."""
    return (float(r.value), float(r.rel_error) * abs(float(r.value))) if r.resolved else None


@register
class TransitionPathIdentities(OnFirst, _Fact):
    paper = "engine"
    id = "engine.tpt-identities"
    number = "Transition path theory identities"
    statement = ("for an irreducible chain and disjoint sets A, B: the reactive flux f(i, j) = pi(i) q-(i) P(i, j) q+(j) "
                 "is conserved at every state outside A u B, the flux leaving A equals the flux entering B, "
                 "F_AB = F_BA, and the stationary time last spent in A plus that last spent in B is 1")
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(chain_instances(81), st.integers(0, 2**16))

    extras = ("sets_seed",)

    def check(self, instance) -> Verdict:
        inst, seed = instance
        chain = _chain(inst)
        n = chain.n_states
        order = np.random.default_rng(seed).permutation(n)
        cut = 1 + seed % max(1, n // 3)
        A, B = order[:cut], order[cut:min(n, 2 * cut)]
        tp = chain.transition_paths(A, B)
        F, F_back = _ends(tp.total_flux), _ends(tp.total_flux_back)
        ZA, ZB = _ends(tp.details["mass_A_last"]), _ends(tp.details["mass_B_last"])
        if F is None or F_back is None or ZA is None or ZB is None or tp.flux.rel_error is None:
            return verdict(Part("F_AB = F_BA", 1.0, 1.0, "==", 0.0, 0.0, False),
                           trivial="the fluxes are not resolved on this chain (intervals)")
        f = tp.flux.value
        out, inn = np.asarray(f.sum(axis=1)).ravel(), np.asarray(f.sum(axis=0)).ravel()
        e = tp.flux.rel_error + 2 * n * U
        C = np.flatnonzero(~(tp.A | tp.B))
        parts = [Part("F_AB = F_BA", F[0], F_back[0], "==", F[1], F_back[1], False),
                 Part("time last in A + time last in B = 1", ZA[0] + ZB[0], 1.0, "==", ZA[1] + ZB[1] + 4 * U, 0.0, False),
                 Part("flux leaving A = flux entering B", float(out[tp.A].sum()), float(inn[tp.B].sum()), "==",
                      e * float(out[tp.A].sum()), e * float(inn[tp.B].sum()), False)]
        if C.size:
            worst = C[int(np.argmax(np.abs(out[C] - inn[C]) / np.maximum(out[C] + inn[C], 1e-300)))]
            parts.append(Part("sum_j f(i, j) = sum_j f(j, i) off A u B", float(out[worst]), float(inn[worst]), "==",
                              e * float(out[worst]), e * float(inn[worst]), False))
        return verdict(*parts, set_sizes=(int(tp.A.sum()), int(tp.B.sum())), reversible=bool(chain.is_reversible))


def _worst(name: str, lhs: np.ndarray, rhs: np.ndarray, lhs_err, rhs_err) -> Part:
    """The entry where lhs = rhs is closest to failing relative to its error bounds (arrays or one bound for
    every entry), as an identity with those bounds."""
    lhs_err, rhs_err = np.broadcast_to(lhs_err, lhs.shape), np.broadcast_to(rhs_err, rhs.shape)
    k = int(np.argmax(np.abs(lhs - rhs) / np.maximum(lhs_err + rhs_err, 1e-300)))
    return Part(name, float(lhs[k]), float(rhs[k]), "==", float(lhs_err[k]), float(rhs_err[k]), False)


@register
class CorrelationIdentities(OnFirst, _Fact):
    paper = "engine"
    id = "engine.correlation-identities"
    number = "Time correlations and propagation"
    statement = ("for any chain, f, g, a start law mu and t: the engine's C_fg(0) = E_pi[fg], C_fg(t) = (pi f) . P^t g, "
                 "E_mu[g(X_t)] = mu . P^t g and mu P^t agree with numpy's matrix powers, the expected transition counts "
                 "over n = t steps sum to n with column sums sum_(1 <= s <= n) mu P^s, and (reversible) the spectral "
                 "decomposition equals the powers, each within the stated errors")
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(chain_instances(81), st.integers(0, 2**16))

    extras = ("function_seed",)

    def check(self, instance) -> Verdict:
        inst, seed = instance
        chain = _chain(inst)
        P = chain.to_dense()
        n = P.shape[0]
        rng = np.random.default_rng(seed)
        f, g, mu = rng.uniform(0.1, 1.0, n), rng.uniform(0.1, 1.0, n), rng.random(n)
        mu /= mu.sum()
        t = 1 + seed % 300
        st_ = chain.stationary
        pi, pi_l1 = st_.value, pi_l1_bound(st_)
        Pt = np.linalg.matrix_power(P, t)
        # numpy's powers: t products of non-negative matrices, each within (2 n u + its rows' distance from 1)
        step = float(np.abs(P.sum(axis=1) - 1).max()) + 2 * (n + 2) * U
        power_err = math.expm1(2 * t * step)
        corr = chain.correlation(f, g, [0, t], method="powers")
        ce = corr.details["error_bounds"]
        direct = float((pi * f) @ (Pt @ g))
        relax = chain.relaxation(mu, g, t)
        law = chain.propagate(mu, t)
        counts = chain.transition_counts(mu, t)
        C = counts.value.toarray()
        occ = counts.details["occupation"]
        parts = [Part("C_fg(0) = E_pi[f g]", float(corr.value[0]), float(pi @ (f * g)), "==", float(ce[0]),
                      pi_l1 + 2 * n * U, False),
                 Part("C_fg(t) = (pi f) . P^t g (numpy powers)", float(corr.value[1]), direct, "==", float(ce[1]),
                      pi_l1 * (1 + power_err) + power_err + 2 * n * U, False),
                 Part("E_mu[g(X_t)] = mu . P^t g", float(relax.value), float(mu @ (Pt @ g)), "==",
                      relax.rel_error * abs(float(relax.value)) if relax.resolved else 1.0, power_err + 2 * n * U,
                      False),
                 _worst("mu P^t = numpy's, worst entry", law.value, mu @ Pt, law.abs_error, power_err + 2 * n * U),
                 Part("sum of expected counts over n steps = n", float(C.sum()), float(t), "==",
                      counts.abs_error + t * n * n * U, 0.0, False),
                 _worst("column sums of E[C] = occupation - mu + mu P^n, worst entry", C.sum(axis=0),
                        occ - mu + law.value, counts.abs_error + t * n * U, counts.abs_error + law.abs_error)]
        if spectral_refusal(chain) is None:
            T = 10**4
            s, p = chain.correlation(f, g, T, method="spectral"), chain.correlation(f, g, T, method="powers")
            parts.append(Part("spectral C_fg(10^4) = powers C_fg(10^4)", _mid(s), _mid(p), "==", _radius(s),
                              _radius(p), False))
        return verdict(*parts, t=t, reversible=bool(chain.is_reversible))


def _mid(r) -> float:
    return float(r.value) if r.resolved else (r.lower + r.upper) / 2


def _radius(r) -> float:
    return float(r.rel_error) * abs(float(r.value)) if r.resolved else (r.upper - r.lower) / 2


def _relative_direction(P: np.ndarray, seed: int) -> np.ndarray:
    """E_ij = r_ij P_ij off the diagonal (r uniform in [-1, 1]), minus the row sums on the diagonal: a direction
    that keeps P stochastic and moves every entry relatively (a step of 1e-20 then stays inside the chain)."""
    E = np.random.default_rng(seed).uniform(-1.0, 1.0, P.shape) * P
    np.fill_diagonal(E, 0.0)
    np.fill_diagonal(E, -E.sum(axis=1))
    return E


def _digits(derivative: np.ndarray, scale: float) -> int:
    """Working digits for a central difference of step 1e-20 that resolves the smallest non-zero derivative
    entry to 30 digits against values of size ``scale``."""
    tiny = np.abs(derivative[derivative != 0])
    spread = math.log10(scale) - math.log10(float(tiny.min())) if tiny.size else 0.0
    return int(min(60 + max(spread, 0.0), 700))


def _difference_part(name: str, got, reference: list) -> Part:
    """The engine's derivative at its entry farthest from the reference relative to the stated bound, against
    that reference (exact to ~30 digits: its error is charged as 1e-25 of its size)."""
    ref = np.array([float(x) for x in reference])
    bound = np.asarray(got.details["bound"])
    value = np.asarray(got.value)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(bound > 0, np.abs(value - ref) / bound, np.where(value == ref, 0.0, np.inf))
    w = int(np.argmax(excess))
    return Part(name, float(value[w]), float(ref[w]), "==", float(bound[w]), 1e-25 * abs(float(ref[w])), False)


@register
class SensitivityDifferences(OnFirst, _Fact):
    paper = "engine"
    id = "engine.sensitivities"
    number = "Sensitivities against finite differences"
    statement = ("for an irreducible chain and a direction E that keeps P stochastic: the derivatives of pi, of the "
                 "committor q+ between two random sets and of E_x tau_T along E lie within their stated entrywise "
                 "bounds of central differences (step 1e-20) of pi, q+ and E tau computed by subtraction-free "
                 "elimination in mpmath at 60 or more digits")
    budget = 0.4

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(chain_instances(27), st.integers(0, 2**16))

    extras = ("direction_seed",)

    def check(self, instance) -> Verdict:
        # deferred: mpmath is the references' dependency, not the engine's
        from mlmix.theory.reference import mp_central_difference, mp_committor, mp_gth_stationary, mp_passage_times

        inst, seed = instance
        chain = _chain(inst)
        n = chain.n_states
        P = chain.to_dense()
        E = _relative_direction(P, seed)
        order = np.random.default_rng(seed).permutation(n)
        cut = 1 + seed % max(1, n // 3)
        A, B = order[:cut].tolist(), order[cut:min(n, 2 * cut)].tolist()
        dpi = chain.stationary_sensitivity(E)
        dq = chain.committor_sensitivity(A, B, E)
        dk = chain.mfpt_sensitivity(B, E)
        parts = [
            _difference_part("d pi along E = central difference", dpi, mp_central_difference(
                mp_gth_stationary, P, E, dps=_digits(dpi.value, 1.0))),
            _difference_part("dq+ along E = central difference", dq, mp_central_difference(
                lambda W: mp_committor(W, A, B), P, E, dps=_digits(dq.value, 1.0))),
            _difference_part("dE tau_B along E = central difference", dk, mp_central_difference(
                lambda W: mp_passage_times(W, B), P, E, dps=_digits(dk.value, max(float(np.max(dk.details["h"])), 1.0))))]
        return verdict(*parts, set_sizes=(len(A), len(B)), reversible=bool(chain.is_reversible),
                       pi_rel_error=dpi.rel_error)


@register
class GeneratorUniformisation(OnFirst, _Fact):
    paper = "engine"
    id = "engine.generator-uniformisation"
    number = "Uniformisation of a continuous-time generator"
    statement = ("for the generator Q = P - I of an instance's chain (off-diagonal rates P_ij) uniformised at a rate q "
                 "that is not a power of two: the stationary law solves pi Q = 0 (inflow = outflow at every state), "
                 "the continuous-time hitting times of a set B solve sum_j Q_ij h_j = -1 off B, and gap_Q at that q "
                 "equals gap_Q at the default q, each within the stated errors")
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(chain_instances(81), st.integers(0, 2**16), st.floats(1.01, 8.0))

    extras = ("set_seed", "stretch")

    def check(self, instance) -> Verdict:
        inst, seed, stretch = instance
        P = _chain(inst).to_dense()
        off = P - np.diag(np.diag(P))
        exits = off.sum(axis=1)
        rate = float(exits.max()) * stretch
        if math.frexp(rate)[0] == 0.5:
            rate = math.nextafter(rate, math.inf)
        Q = off - np.diag(exits)
        g, base = GeneratorChain(Q, rate), GeneratorChain(Q)
        n = Q.shape[0]
        st_ = g.stationary
        B = np.zeros(n, dtype=bool)
        B[np.random.default_rng(seed).permutation(n)[:1 + seed % max(1, n // 3)]] = True
        h = g.hitting_time(B)
        if st_.rel_error is None or h.rel_error is None:
            return verdict(Part("pi Q = 0", 1.0, 1.0, "==", 0.0, 0.0, False),
                           trivial="pi or the hitting times carry no entrywise bound on this chain")
        pi, hv, r, e = st_.value, h.value, st_.rel_error, h.rel_error
        inflow, outflow = pi @ off, pi * exits
        grow = 2 * n * U
        parts = [_worst("pi Q = 0: sum_i pi_i Q_ij = pi_j |Q_jj|", inflow, outflow,
                                (r + grow) * inflow, (r + grow) * outflow)]
        C = ~B
        lhs, rhs = off[C] @ hv + 1.0, exits[C] * hv[C]
        parts.append(_worst("Q h = -1 off B: sum_(j != i) Q_ij h_j + 1 = |Q_ii| h_i", lhs, rhs,
                                    (e + grow) * lhs, (e + grow) * rhs))
        gap, gap0 = g.spectral_gap(), base.spectral_gap()
        if gap.resolved and gap0.resolved:
            parts.append(Part("gap_Q at q = gap_Q at the default q", float(gap.value), float(gap0.value), "==",
                              gap.rel_error * float(gap.value), gap0.rel_error * float(gap0.value), False))
        return verdict(*parts, rate=rate, default_rate=base.rate, set_size=int(B.sum()))


@register
class PCCACoarse(OnFirst, _Fact):
    paper = "engine"
    id = "engine.pcca-coarse"
    number = "PCCA+ coarse-grained matrix"
    statement = ("for a reversible chain (an instance's chain, else its additive reversibilization) and m = 2..4 "
                 "PCCA+ sets: the eigenvalues of P_c = (chi^T D chi)^-1 chi^T D P chi are the Ritz values of P on "
                 "span chi in the pi inner product (computed here from a pi-orthonormal basis), and each Ritz value "
                 "is within the residual norm ||P Y - Y H||_pi of the matching slow eigenvalue of P (Kahan)")
    budget = 0.3

    def strategy(self) -> st.SearchStrategy:
        return st.tuples(chain_instances(81), st.integers(0, 2**16))

    extras = ("m_seed",)

    def check(self, instance) -> Verdict:
        inst, seed = instance
        chain = _chain(inst)
        chain = chain if chain.is_reversible else chain.additive_reversibilization()
        n = chain.n_states
        m = 2 + seed % min(3, n - 2) if n > 2 else 1
        P, pi = chain.to_dense(), chain.stationary.value
        if m < 2 or not (pi > 1e-150).all():
            return verdict(Part("eig(P_c) = Ritz values", 1.0, 1.0, "==", 0.0, 0.0, False),
                           trivial="fewer than 3 states, or pi too small for the symmetrised eigenvectors")
        try:
            out = chain.pcca(m)
        except NumericalError as err:  # fewer distinct slow states than sets: refused by name, not a wrong number
            return verdict(Part("eig(P_c) = Ritz values", 1.0, 1.0, "==", 0.0, 0.0, False), trivial=str(err))
        chi = out.memberships.value
        G = (chi.T * pi) @ chi
        L = np.linalg.cholesky(G)
        Y = np.linalg.solve(L, chi.T).T  # pi-orthonormal basis of span chi
        H = (Y.T * pi) @ P @ Y
        H = (H + H.T) / 2
        ritz = np.sort(np.linalg.eigvalsh(H))[::-1]
        r = np.sqrt(pi)
        resid = float(np.linalg.norm(r[:, None] * (P @ Y - Y @ H), 2))
        slow = np.sort(np.linalg.eigvalsh((r[:, None] * P / r[None, :] + (r[:, None] * P / r[None, :]).T) / 2))[::-1][:m]
        coarse = np.sort(np.linalg.eigvals(out.coarse_matrix.value).real)[::-1]
        cond = float(np.linalg.cond(G))
        tol = 64 * n * U * cond
        parts = []
        for i in range(m):
            parts.append(Part(f"eig_{i + 1}(P_c) = Ritz value {i + 1}", float(coarse[i]), float(ritz[i]), "==",
                              tol, tol, False))
        for i in range(m):
            parts.append(Part(f"Ritz value {i + 1} = lambda_{i + 1}(P)", float(ritz[i]), float(slow[i]), "==",
                              resid + 8 * n * U, 8 * n * U, False))
        return verdict(*parts, m=m, residual=resid, gram_condition=cond, reversible_given=bool(_chain(inst).is_reversible))
