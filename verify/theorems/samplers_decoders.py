"""Masked-diffusion decoders against their laws written out in the check, state by state.

:func:`mlmix.theory.kernels.decoders.decoder_law` pushes mass over the (|V|+1)^n partial assignments. The
references here pull it instead: for every complete sequence x they multiply the conditionals along the
unmasking paths that produce x, summing over the visited sets of positions (a recursion over the 2^n subsets,
one vector over V^n per subset). Nothing is shared with the decoder module but the table of partial
conditionals p_i(. | x_S) (:meth:`PartialScoreTable.partial_log_conditionals`). The identities:

* sequential decoding (MDLM, Sahoo et al. 2024): left-to-right in the order o has law
  prod_k p_{o_k}(x_{o_k} | x_{o_<k}) (the chain rule); any-order decoding is its average over the n! orders,
  and with a joint's exact marginal conditionals (:meth:`PartialScoreTable.from_joint`) both are the joint;
* parallel decoding with k per step is the average of the schedule laws prod_t prod_{i in G_t} p_i(x_i | x_{G_<t})
  over the uniformly drawn blocks; k = n is one step, the product of the marginals prod_i p_i(x_i | nothing);
* confidence decoding (LLaDA, Nie et al. 2025) with k = n is that same product; with k = 1 the kept position
  i is the one whose draw is most probable (ties: the lower position), so a step keeps x_i with probability
  p_i(x_i | x_S) prod_{j masked, j != i} P_j(p_j(Y_j | x_S) < p_i(x_i | x_S)) (<= for j > i);
* threshold decoding (Fast-dLLM, Wu et al. 2025) with tau = 1 keeps only the most probable draw (no draw
  has probability 1 here): confidence with k = 1; with tau below every conditional probability it keeps every
  draw: the product of the marginals.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import strategies as st
from scipy.special import logsumexp

from mlmix.theory.kernels.decoders import decoder_law, partial_log_probs
from mlmix.theory.results import EPS
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.verify import instances as S
from mlmix.verify.theorems.sampler_laws import parallel_schedules
from mlmix.verify.theorems.samplers_scan import _ratio_parts
from mlmix.verify.verdicts import Part, Theorem, Verdict, register, verdict

PAPER = "samplers"

#: Largest state count ({0,1,2}^5: 4^5 = 1,024 partial assignments).
MAX_STATES = 243


class References:
    """Decoder laws over V^n computed by pulling each complete sequence x along its unmasking paths.
    ``log_cond(partial, site)``: log p_site(. | partial) for partial sequences (mask = |V|), (B, |V|)."""

    def __init__(self, space: StateSpace, log_cond) -> None:
        self.space, self.log_cond = space, log_cond
        self.states = space.all_states()
        self.n, self.q, self.N = space.length, space.vocab_size, space.size
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def shown(self, seen: int, i: int) -> np.ndarray:
        """log p_i(. | x_S) at every x (the positions outside the bit set S masked): (N, |V|), cached."""
        key = (seen, i)
        if key not in self._cache:
            partial = self.states.copy()
            for j in range(self.n):
                if not seen >> j & 1:
                    partial[:, j] = self.q
            self._cache[key] = self.log_cond(partial, i)
        return self._cache[key]

    def own(self, seen: int, i: int) -> np.ndarray:
        """log p_i(x_i | x_S) at every x: (N,)."""
        return self.shown(seen, i)[np.arange(self.N), self.states[:, i]]

    def blocks(self, blocks: list) -> np.ndarray:
        """prod_t prod_{i in G_t} p_i(x_i | x_{G_<t})."""
        logw, seen = np.zeros(self.N), 0
        for block in blocks:
            logw += sum(self.own(seen, i) for i in block)
            seen |= sum(1 << i for i in block)
        return np.exp(logw)

    def any_order(self) -> np.ndarray:
        """(1/n!) sum over orders of the chain-rule products: g(S + i) += g(S) p_i(x_i | x_S) / (n - |S|)."""
        g = {0: np.ones(self.N)}
        for seen in sorted(range(1 << self.n), key=lambda b: bin(b).count("1")):
            if seen not in g or seen == (1 << self.n) - 1:
                continue
            free = [i for i in range(self.n) if not seen >> i & 1]
            for i in free:
                g[seen | 1 << i] = g.get(seen | 1 << i, 0.0) + g[seen] * np.exp(self.own(seen, i)) / len(free)
        return g[(1 << self.n) - 1]

    def parallel(self, k: int) -> np.ndarray:
        """The average of the schedule laws over the parallel decoder's uniformly drawn blocks."""
        schedules = parallel_schedules(self.n, k)
        return sum(self.blocks(s) for s in schedules) / len(schedules)

    def confidence_one(self) -> np.ndarray:
        """Confidence decoding keeping one draw per step (module doc): the kept site i with x_i beats every
        other masked j, p_j(Y_j) < p_i(x_i) for j < i, <= for j > i (compared as log-probabilities)."""
        g = {0: np.ones(self.N)}
        rows = np.arange(self.N)
        for seen in sorted(range(1 << self.n), key=lambda b: bin(b).count("1")):
            if seen not in g or seen == (1 << self.n) - 1:
                continue
            free = [i for i in range(self.n) if not seen >> i & 1]
            logs = {j: self.shown(seen, j) for j in free}
            for i in free:
                mine = logs[i][rows, self.states[:, i]]  # (N,)
                w = np.exp(mine)
                for j in free:
                    if j == i:
                        continue
                    lose = logs[j] < mine[:, None] if j < i else logs[j] <= mine[:, None]
                    w = w * np.where(lose, np.exp(logs[j]), 0.0).sum(axis=1)
                g[seen | 1 << i] = g.get(seen | 1 << i, 0.0) + g[seen] * w
        return g[(1 << self.n) - 1]

    def min_probability(self) -> float:
        """The smallest conditional probability over every site and shown set."""
        return min(float(np.exp(self.shown(seen, i)).min()) for seen in range(1 << self.n) for i in range(self.n)
                   if not seen >> i & 1)


# ---------------------------------------------------------------------------------------- instances

@st.composite
def decoder_tables(draw, max_states: int = MAX_STATES) -> tuple:
    """(Instance whose source is a PartialScoreTable, the joint's normalised law or None): a joint's exact
    marginal conditionals (Ising, Potts, log-weight tables, Gaussian joints and Potts models) or i.i.d.
    Gaussian partial scores (incompatible, like a masked LM), at a temperature with spread/T <= 30; two
    draws in three on shapes with n >= 4 and |V| >= 3."""
    large = draw(st.sampled_from((False, True, True)))
    if draw(st.booleans()):
        sources = st.one_of(S.gaussian_joint_sources(max_states, large), S.gaussian_potts_sources(max_states, large))
        if not large:
            sources = st.one_of(S.ising_sources(64), S.potts_sources(64), S.log_weight_sources(64), sources)
        inst = draw(S.instances(sources, max_states))
        lw = inst.source.log_joint()
        p = np.exp(lw - logsumexp(lw))
        table = PartialScoreTable.from_joint(inst.source)
        return S.Instance(table, f"marginals-of-{inst.kind}", dict(inst.params, temperature=inst.source.temperature)), p
    q, n = draw(S.shapes(max_states, large=large))
    seed, scale = draw(S.seeds()), draw(st.sampled_from(S.SCALES))
    T = draw(S.temperatures())
    table = PartialScoreTable.random(q, n, seed=seed, scale=scale)
    spread = float((table.table.max(axis=-1) - table.table.min(axis=-1)).max())
    table = table.at_temperature(max(T, spread / 30.0))
    return S.Instance(table, "gaussian-partial", {"seed": seed, "scale": scale}), None


class _DecoderTheorem(Theorem):
    paper = PAPER

    def hypotheses(self, instance: tuple):
        return super().hypotheses(instance[0])

    def regime(self, instance: tuple) -> dict:
        inst = instance[0]
        return {"n": inst.space.length, "vocab": inst.space.vocab_size, "temperature": inst.source.temperature,
                "states": inst.space.size, "joint": instance[1] is not None}

    def describe(self, instance: tuple):
        return {**instance[0].describe(), **dict(zip(self.extras, instance[2:]))}

    extras: tuple[str, ...] = ()


def _rel(laws: list, table: PartialScoreTable) -> float:
    """Relative error of one entry of a reference law: the decoder's own bound (the same sums of products)."""
    return max(law.rel_error for law in laws)


@st.composite
def _sequential(draw) -> tuple:
    inst, p = draw(decoder_tables())
    return inst, p, draw(st.permutations(list(range(inst.space.length))))


@register
class SequentialDecoders(_DecoderTheorem):
    id = "samplers.decoder-sequential"
    number = "One position per step: any-order and left-to-right decoding"
    statement = ("left-to-right decoding in the order o has law prod_k p_{o_k}(x_{o_k} | x_{o_<k}) (chain rule); any-order "
                 "decoding is the average of that law over the n! orders; with a joint's exact marginal conditionals "
                 "both laws are the joint")
    extras = ("order",)

    def strategy(self) -> st.SearchStrategy:
        return _sequential()

    def check(self, instance: tuple) -> Verdict:
        inst, p, order = instance
        table = inst.source
        lp = partial_log_probs(table)
        ref = References(inst.space, table.partial_log_conditionals)
        any_law = decoder_law(table, "any-order", log_probs=lp)
        ltr_law = decoder_law(table, "left-to-right", order=order, log_probs=lp)
        rel = _rel([any_law, ltr_law], table)
        parts, conditions = [], {}
        for name, law, want in (("any-order law", any_law, ref.any_order()),
                                ("left-to-right law", ltr_law, ref.blocks([[i] for i in order]))):
            new, cond = _ratio_parts(name, law.law, want, 2 * rel)
            parts += new
            conditions.update(cond)
        if p is not None:
            for name, law in (("any-order law vs the joint", any_law), ("left-to-right law vs the joint", ltr_law)):
                new, cond = _ratio_parts(name, law.law, p, 2 * rel + 1e-12)
                parts += new
                conditions.update(cond)
        return verdict(*parts, conditions=conditions)


@st.composite
def _parallel(draw) -> tuple:
    inst, p = draw(decoder_tables())
    n = inst.space.length
    k = draw(st.integers(2, n)) if n >= 2 else 1
    perm = draw(st.permutations(list(range(n))))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    schedule = [sorted(perm[a:b]) for a, b in zip(bounds, bounds[1:])]
    return inst, p, k, schedule


@register
class ParallelDecoders(_DecoderTheorem):
    id = "samplers.decoder-parallel"
    number = "Several positions per step: parallel, schedule, confidence and threshold decoding"
    statement = ("parallel decoding with k per step is the average over its uniformly drawn blocks of "
                 "prod_t prod_{i in G_t} p_i(x_i | x_{G_<t}) (a fixed schedule: that product); k = n, confidence with "
                 "k = n and threshold below every probability are the product of the marginals prod_i p_i(x_i); "
                 "confidence with k = 1 keeps the most probable draw (ties: lower position), and threshold tau = 1 "
                 "equals it")
    extras = ("k", "schedule")

    def strategy(self) -> st.SearchStrategy:
        return _parallel()

    def check(self, instance: tuple) -> Verdict:
        inst, _, k, schedule = instance
        table = inst.source
        n = inst.space.length
        lp = partial_log_probs(table)
        ref = References(inst.space, table.partial_log_conditionals)
        product = ref.blocks([list(range(n))])
        greedy = ref.confidence_one()
        laws = {"parallel k": (decoder_law(table, "parallel", k=k, log_probs=lp), ref.parallel(k)),
                "schedule": (decoder_law(table, "schedule", schedule=schedule, log_probs=lp), ref.blocks(schedule)),
                "parallel k = n": (decoder_law(table, "parallel", k=n, log_probs=lp), product),
                "confidence k = n": (decoder_law(table, "confidence", k=n, log_probs=lp), product),
                "confidence k = 1": (decoder_law(table, "confidence", k=1, log_probs=lp), greedy),
                "threshold tau = 1": (decoder_law(table, "threshold", threshold=1.0, log_probs=lp), greedy)}
        tau = 0.5 * ref.min_probability()
        if tau > 1e-300:
            laws["threshold below every probability"] = (decoder_law(table, "threshold", threshold=tau, log_probs=lp),
                                                         product)
        rel = _rel([law for law, _ in laws.values()], table) + 4 * n * EPS
        parts: list[Part] = []
        conditions: dict[str, bool] = {}
        for name, (law, want) in laws.items():
            new, cond = _ratio_parts(f"{name} law", law.law, want, 2 * rel)
            parts += new
            conditions.update(cond)
        return verdict(*parts, conditions=conditions, tau=tau, steps_parallel=math.ceil(n / k))


# ---------------------------------------------------------------------------------------- underflow

#: log(1e-308): a law entry below it underflows in float64 (subnormal or 0 in linear space).
LOG_TINY = math.log(1e-308)


def log_schedule_law(table: PartialScoreTable, blocks) -> np.ndarray:
    """log prod_t prod_{i in G_t} p_i(x_i | x_{G_<t}) at every x, summed in log space straight from
    :meth:`PartialScoreTable.partial_log_conditionals` (no dynamic programme, nothing exponentiated)."""
    states = table.space.all_states()
    partial = np.full_like(states, table.space.vocab_size)
    out = np.zeros(len(states))
    for block in blocks:
        for i in block:
            out += table.partial_log_conditionals(partial, i)[np.arange(len(states)), states[:, i]]
        partial[:, list(block)] = states[:, list(block)]
    return out


@st.composite
def _peaked(draw) -> tuple:
    """A table whose decoder laws reach far below 1e-308: i.i.d. N(0, scale^2) partial scores with scale
    3,000-12,000, or a cold Ising model (beta 400-1,600) read through its marginal conditionals; with k and
    a left-to-right order. An instance whose laws stay above 1e-308 counts as trivial."""
    q, n = draw(S.shapes(81, vocab_sizes=(2, 3), cap=4))
    if draw(st.booleans()):
        seed, scale = draw(S.seeds()), draw(st.sampled_from((3000.0, 6000.0, 12000.0)))
        inst = S.Instance(PartialScoreTable.random(q, n, seed=seed, scale=scale), "peaked-partial",
                          {"seed": seed, "scale": scale})
    else:
        import networkx as nx  # deferred: only the Ising instances need a graph

        from mlmix.theory.sources.conditionals import IsingModel

        beta, field = draw(st.sampled_from((400.0, 800.0, 1600.0))), draw(st.sampled_from((0.1, 0.3)))
        n = max(n, 3)
        ising = IsingModel(nx.cycle_graph(n), couplings=1.0, fields=field, beta=beta)
        inst = S.Instance(PartialScoreTable.from_joint(ising), "cold-ising-marginals",
                          {"graph": f"cycle:{n}", "beta": beta, "field": field})
    n = inst.space.length
    return inst, None, draw(st.integers(2, n)), draw(st.permutations(list(range(n))))


@register
class DecoderUnderflow(_DecoderTheorem):
    id = "samplers.decoder-underflow"
    number = "Decoder laws keep their relative accuracy below float64's range"
    statement = ("on tables whose decoder laws go below 1e-308, the any-order, left-to-right, parallel-k and schedule "
                 "laws equal their closed form (the mean over the decoder's schedules of products of conditionals, "
                 "summed in log space) within the law's stated relative error, entry by entry: law / closed form = 1")
    extras = ("k", "order")

    def strategy(self) -> st.SearchStrategy:
        return _peaked()

    def check(self, instance: tuple) -> Verdict:
        inst, _, k, order = instance
        table = inst.source
        n = inst.space.length
        lp = partial_log_probs(table)
        orders = [[[i] for i in perm] for perm in itertools.permutations(range(n))]
        cases = {"any-order": (decoder_law(table, "any-order", log_probs=lp), orders),
                 "left-to-right": (decoder_law(table, "left-to-right", order=order, log_probs=lp), [[[i] for i in order]]),
                 "parallel k": (decoder_law(table, "parallel", k=k, log_probs=lp), parallel_schedules(n, k)),
                 "schedule": (decoder_law(table, "schedule", schedule=[order[:k], order[k:]] if k < n else [order],
                                          log_probs=lp), [[order[:k], order[k:]] if k < n else [order]])}
        parts: list[Part] = []
        conditions: dict[str, bool] = {}
        lowest = 0.0
        for name, (law, schedules) in cases.items():
            logs = np.stack([log_schedule_law(table, blocks) for blocks in schedules])
            with np.errstate(invalid="ignore"):
                ref = logsumexp(logs, axis=0) - math.log(len(schedules))
            live = np.isfinite(ref)
            lowest = min(lowest, float(ref[live].min()))
            floor = 4 * n * EPS * (1 + float(np.abs(ref[live]).max())) + len(schedules) * EPS
            # law / closed form = exp(log law - log closed form), never exponentiating either alone
            new, _ = _ratio_parts(f"{name} law", np.exp(law.log_law[live] - ref[live]), np.ones(int(live.sum())),
                                  law.rel_error + floor)
            parts += new
            conditions[f"{name} law is 0 where the closed form is"] = bool((law.log_law[~live] == -np.inf).all())
        trivial = None if lowest < LOG_TINY else "no law entry below 1e-308: linear space would do"
        return verdict(*parts, trivial=trivial, conditions=conditions, lowest_log_probability=lowest)
