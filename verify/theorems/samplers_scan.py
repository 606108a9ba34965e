"""Scan-order and Metropolis-Hastings kernels against kernels assembled in the check from the conditionals.

:mod:`mlmix.verify.theorems.sampler_laws` checks properties every correct kernel has (invariance of a joint,
detailed balance); a kernel built in the wrong order, with a site missing or with the wrong energy has them
too. The checks here rebuild each object from the source's conditionals alone, with code that shares nothing
with :mod:`mlmix.theory.kernels.scan_and_mh`, and compare entry by entry:

* the systematic sweep P_sys = P_{i_1} ... P_{i_m}: one dense row block per state, a heat-bath update at
  site i written as "sum the mass over the values of site i, then multiply by p_i(y_i | y_{-i})" on the
  (|V|,)*n cube of target states; for an order without repeats this is
  P_sys(x, y) = prod_k p_{i_k}(y_{i_k} | y_{i_1..i_{k-1}}, x elsewhere), so every entry is positive when
  the conditionals are;
* the MH targets exp(-E)/Z with E_logit(x) = -(1/T) sum_i s_i(x_i | x_{-i}) and
  E_pll(x) = -sum_i log p_i^T(x_i | x_{-i}) from the source's scores and conditionals, and the MH kernel
  (1/n) min(p_i(a | x_{-i}), exp(E(x) - E(x^{i<-a})) p_i(x_i | x_{-i})) entry by entry;
* properties that tell the two energies apart: on a product measure both targets are the product law; a
  per-context shift s_i(. | x_{-i}) + c_i(x_{-i}) leaves E_pll unchanged and multiplies exp(-E_logit) by
  exp(sum_i c_i(x_{-i}) / T).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from mlmix.theory.kernels.scan_and_mh import mh_kernel, systematic_kernel, target_law
from mlmix.theory.results import EPS
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.verify import instances as S
from mlmix.verify.verdicts import OnFirst, Part, Theorem, Verdict, register, verdict

PAPER = "samplers"

#: Largest state count of the scan and MH instances ({0,1,2}^5 = 243: n >= 4 and |V| >= 3 fit).
MAX_STATES = 243


def _ratio_parts(name: str, lib: np.ndarray, ref: np.ndarray, rel: float) -> tuple[list[Part], dict[str, bool]]:
    """Parts max / min of lib / ref = 1 over the entries where ref > 0, and the condition that lib is 0
    wherever ref is (``rel``: the relative error of one entry of either side). A NaN entry of lib (a
    truncation that kept nothing and renormalised 0 / 0) is an infinite ratio: the part fails, naming the
    check, rather than the check crashing on an undefined side."""
    lib, ref = np.asarray(lib, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    live = ref > 0
    r = lib[live] / ref[live] if live.any() else np.ones(1)
    r = np.where(np.isnan(r), np.inf, r)
    top = float(r.max())
    parts = [Part(f"max {name} / reference = 1", top, 1.0, "==", 2 * rel * top if math.isfinite(top) else 0.0, 0.0,
                  ratio=False),
             Part(f"min {name} / reference = 1", float(r.min()), 1.0, "==", 2 * rel * float(abs(r.min())), 0.0,
                  ratio=False)]
    return parts, {f"{name} is 0 where the reference is": bool((lib[~live] == 0).all())}


def _log_conditional_table(source: Conditionals) -> np.ndarray:
    """log p_i^T(. | x_{-i}) at every state and site, (N, n, |V|), from ``source.log_conditionals``."""
    space = source.space
    states = space.all_states()
    return np.stack([source.log_conditionals(states, i) for i in range(space.length)], axis=1)


def _probability_rows(log_probs: np.ndarray) -> bool:
    """Whether every row of log-probabilities (last axis) is a probability vector: no NaN, a finite entry,
    mass 1 within 1e-9 (a truncation that keeps nothing or forgets to renormalise fails here, not in a crash)."""
    if np.isnan(log_probs).any() or not np.isfinite(log_probs).any(axis=-1).all():
        return False
    return bool(np.abs(np.exp(log_probs).sum(axis=-1) - 1.0).max() <= 1e-9)


def reference_sweep(source: Conditionals, order: list[int]) -> np.ndarray:
    """P_sys for ``order``, assembled from the conditionals: start from the identity (rows x, columns y
    on the cube V^n) and for each site i in turn sum each row over the values of y_i and multiply by
    p_i(y_i | y_{-i}) (module doc)."""
    space = source.space
    n, q, N = space.length, space.vocab_size, space.size
    states = space.all_states()
    L = _log_conditional_table(source)
    own = np.exp(L[np.arange(N)[:, None], np.arange(n)[None, :], states])  # p_i(y_i | y_{-i}): (N, n)
    M = np.eye(N).reshape((N,) + (q,) * n)
    for i in order:
        M = M.sum(axis=1 + i, keepdims=True) * own[:, i].reshape((1,) + (q,) * n)
    return M.reshape(N, N)


@st.composite
def scan_orders(draw, n: int) -> list[int]:
    """A permutation of the sites, sometimes followed by up to two repeated sites."""
    order = draw(st.permutations(list(range(n))))
    extra = draw(st.lists(st.integers(0, n - 1), max_size=2))
    return list(order) + extra


def scan_instances() -> st.SearchStrategy:
    """Any source (incompatible twice as often, half with n >= 4 and |V| >= 3), one time in four a
    top-k / top-p truncation of one (conditionals with zeros)."""
    plain = S.instances(S.any_sources(MAX_STATES), MAX_STATES)
    return st.sampled_from((False, False, False, True)).flatmap(
        lambda cut: S.truncated_instances(MAX_STATES) if cut else plain)


@st.composite
def _with_order(draw) -> tuple:
    inst = draw(scan_instances())
    return inst, draw(scan_orders(inst.space.length))


@register
class SystematicSweep(OnFirst, Theorem):
    id = "samplers.systematic-sweep"
    paper = PAPER
    number = "Systematic scan: the sweep assembled from the conditionals"
    statement = ("one sweep in the order i_1, ..., i_m is P_sys = P_{i_1} ... P_{i_m}, P_i(x, y) = 1[y_{-i} = x_{-i}] "
                 "p_i^T(y_i | x_{-i}); for an order without repeats P_sys(x, y) = prod_k p_{i_k}(y_{i_k} | y_{i_1..i_{k-1}}, "
                 "x elsewhere), positive everywhere when every conditional is")
    extras = ("order",)

    def strategy(self) -> st.SearchStrategy:
        return _with_order()

    def check(self, instance: tuple) -> Verdict:
        inst, order = instance
        L = _log_conditional_table(inst.source)
        if not _probability_rows(L):
            mass = np.exp(L).sum(axis=-1).ravel()
            # a row that kept nothing (0 / 0 = NaN) is infinitely far from mass 1: the part fails, no crash
            worst = float("inf") if np.isnan(mass).any() else float(mass[np.argmax(np.abs(mass - 1.0))])
            return verdict(Part("conditional mass = 1 (worst row)", worst, 1.0, "==", 1e-9, 0.0, ratio=False),
                           conditions={"every conditional is a probability vector": False}, order=order)
        lib = systematic_kernel(inst.source, order)
        ref = reference_sweep(inst.source, order)
        finite = np.abs(L[np.isfinite(L)])
        rel = 16 * EPS * len(order) * (2 + float(finite.max()) + inst.space.vocab_size)
        parts, conditions = _ratio_parts("P_sys", lib, ref, rel)
        if np.isfinite(L).all():
            conditions["every state reachable in one sweep (P_sys > 0)"] = bool((lib > 0).all())
        return verdict(*parts, conditions=conditions, order=order)


# ---------------------------------------------------------------------------------------- MH


def reference_energy(source: Conditionals, kind: str) -> np.ndarray:
    """E_logit(x) = -(1/T) sum_i s_i(x_i | x_{-i}) from ``source.scores``, or E_pll(x) = -sum_i log p_i^T(x_i | x_{-i})
    from ``source.log_conditionals``, summed state by state."""
    space = source.space
    states = space.all_states()
    rows = np.arange(space.size)
    E = np.zeros(space.size)
    for i in range(space.length):
        table = source.scores(states, i) / source.temperature if kind == "logit" else source.log_conditionals(states, i)
        E -= table[rows, states[:, i]]
    return E


def _normalised(E: np.ndarray) -> np.ndarray:
    w = np.exp(-(E - E.min()))
    return w / w.sum()


def reference_mh(source: Conditionals, E: np.ndarray) -> np.ndarray:
    """The MH kernel with the single-site MLM proposal and target exp(-E)/Z, dense, from the definition:
    P(x, x^{i<-a}) = (1/n) p_i(a | x_{-i}) min(1, exp(E(x) - E(x^{i<-a})) p_i(x_i | x_{-i}) / p_i(a | x_{-i}))."""
    space = source.space
    n, q, N = space.length, space.vocab_size, space.size
    states = space.all_states()
    L = _log_conditional_table(source)
    P = np.zeros((N, N))
    for x in range(N):
        for i in range(n):
            for a in range(q):
                if a == states[x, i]:
                    continue
                y = x + (a - states[x, i]) * int(space.place_values[i])
                prop = np.exp(L[x, i, a])
                ratio = np.exp(E[x] - E[y] + L[x, i, states[x, i]] - L[x, i, a])
                P[x, y] += prop * min(1.0, ratio) / n
    P[np.arange(N), np.arange(N)] = 1.0 - P.sum(axis=1)
    return P


def _shifted(source: Conditionals, seed: int) -> tuple[ScoreTable, np.ndarray]:
    """The source's scores plus c_i(x_{-i}) ~ N(0, 1) per site and context (a per-context shift), and the
    shift summed over the sites at every state, sum_i c_i(x_{-i})."""
    base = ScoreTable.from_conditionals(source)
    space = source.space
    n, q = space.length, space.vocab_size
    c = np.random.default_rng(seed).standard_normal(base.table.shape[:2])
    states = space.all_states()
    total = np.zeros(space.size)
    for i in range(n):
        rest = np.delete(states, i, axis=1)
        idx = rest @ (q ** np.arange(n - 2, -1, -1, dtype=np.int64)) if n > 1 else np.zeros(space.size, np.int64)
        total += c[i, idx]
    return ScoreTable(space, base.table + c[:, :, None], source.temperature), total


@st.composite
def _mh_instances(draw) -> tuple:
    large = draw(st.sampled_from((False, True, True)))
    inst = draw(S.instances(S.large_sources(MAX_STATES) if large else S.any_sources(81), MAX_STATES))
    product = draw(S.instances(S.product_sources(MAX_STATES), MAX_STATES))
    return inst, product, draw(st.integers(0, 2**31 - 1))


def _ratio_of(lib: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    r = lib / ref
    return float(r.max()), float(r.min())


@register
class MHEnergies(Theorem):
    id = "samplers.mh-energies"
    paper = PAPER
    number = "MH targets and kernel (Goyal, Dyer & Berg-Kirkpatrick 2022, section 3) from the definitions"
    statement = ("E_logit(x) = -(1/T) sum_i s_i(x_i | x_{-i}) and E_pll(x) = -sum_i log p_i^T(x_i | x_{-i}): the targets "
                 "exp(-E)/Z and the MH kernel (1/n) min(p_i(a | x_{-i}), exp(E(x) - E(x')) p_i(x_i | x_{-i})) equal their "
                 "definitions; on a product measure both targets are the product law; a per-context score shift "
                 "c_i(x_{-i}) leaves the E_pll target unchanged and multiplies the E_logit one by exp(sum_i c_i / T)")

    def strategy(self) -> st.SearchStrategy:
        return _mh_instances()

    def hypotheses(self, instance: tuple):
        return super().hypotheses(instance[0])

    def regime(self, instance: tuple) -> dict:
        return super().regime(instance[0])

    def describe(self, instance: tuple):
        return {**super().describe(instance[0]), "product": instance[1].describe(), "shift_seed": instance[2]}

    def check(self, instance: tuple) -> Verdict:
        inst, prod, seed = instance
        src = inst.source
        n, T = inst.space.length, src.temperature
        parts: list[Part] = []
        conditions: dict[str, bool] = {}
        scale = float(np.abs(ScoreTable.from_conditionals(src).table).max()) / T
        rel = 32 * EPS * n * (2 + scale) * (1 + scale)
        for kind in ("logit", "pll"):
            E = reference_energy(src, kind)
            ref = _normalised(E)
            new, cond = _ratio_parts(f"target_{kind}", target_law(src, kind), ref, 4 * rel)
            parts += new
            conditions.update(cond)
            if kind == "logit" or inst.space.size <= 81:  # the dense reference kernel is O(N n |V|) Python steps
                lib = mh_kernel(src, kind).toarray()
                mh = reference_mh(src, E)
                off = ~np.eye(inst.space.size, dtype=bool)
                new, cond = _ratio_parts(f"P_MH[{kind}] off the diagonal", lib * off, mh * off, 4 * rel)
                parts += new
                conditions.update(cond)
                conditions[f"P_MH[{kind}] diagonal within 1e-12"] = bool(np.abs(np.diag(lib) - np.diag(mh)).max() <= 1e-12)
        # a product measure: both targets are p = prod_i p_i
        ps = prod.source
        p = _normalised(reference_energy(ps, "pll"))  # prod_i p_i(x_i), the sites ignoring each other
        prod_rel = 32 * EPS * prod.space.length * (2 + float(np.abs(ScoreTable.from_conditionals(ps).table).max())
                                                   / ps.temperature)
        for kind in ("logit", "pll"):
            hi, lo = _ratio_of(target_law(ps, kind), p)
            parts += [Part(f"product measure: max target_{kind} / p = 1", hi, 1.0, "==", 4 * prod_rel, 0.0, ratio=False),
                      Part(f"product measure: min target_{kind} / p = 1", lo, 1.0, "==", 4 * prod_rel, 0.0, ratio=False)]
        # a per-context shift of the scores
        shifted, total = _shifted(src, seed)
        hi, lo = _ratio_of(target_law(shifted, "pll"), target_law(src, "pll"))
        parts += [Part("shift: max target_pll' / target_pll = 1", hi, 1.0, "==", 8 * rel, 0.0, ratio=False),
                  Part("shift: min target_pll' / target_pll = 1", lo, 1.0, "==", 8 * rel, 0.0, ratio=False)]
        expect = _normalised(reference_energy(src, "logit") - total / T)
        hi, lo = _ratio_of(target_law(shifted, "logit"), expect)
        parts += [Part("shift: max target_logit' / (target_logit e^{sum c / T}) = 1", hi, 1.0, "==", 8 * rel, 0.0,
                       ratio=False),
                  Part("shift: min target_logit' / (target_logit e^{sum c / T}) = 1", lo, 1.0, "==", 8 * rel, 0.0,
                       ratio=False)]
        moved = float(np.abs(target_law(shifted, "logit") - target_law(src, "logit")).sum())
        return verdict(*parts, conditions=conditions, logit_target_moved_by_shift=moved)
