"""Silent wrong numbers or structure: truncation that drops mass it should keep, and underflow
reported as structure.

Truncation (top-k / top-p) must be exact in log space: p = 1 and k = |V| are the identity bit for
bit, the kept set is the smallest most-probable set of mass >= p with its boundary ties, checked
against exact rational arithmetic on integer weights spread over 1000 nats. The communicating
classes of a chain built from a source come from the sign pattern of its exact conditionals
(log-conditionals > -inf), not from entries of P that underflowed to 0.
"""

from __future__ import annotations

import math
from fractions import Fraction

import networkx as nx
import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mlmix.theory.kernels.decoders import decoder_law, partial_log_probs
from mlmix.theory.kernels.scan_and_mh import Truncated, truncate_log_probs
from mlmix.theory.sources.conditionals import IsingModel
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.space import StateSpace

EPS = float(np.finfo(np.float64).eps)


# ---------------------------------------------------------------------------------------- truncation
def _weights() -> st.SearchStrategy[list[int]]:
    """Integer weights b * 2^e (b in 1..40, e in 0..1443: up to 1000 nats apart), so the exact law is
    rational and distinct weights differ by a factor of at least 41/40."""
    return st.lists(st.tuples(st.integers(1, 40), st.integers(0, 1443)), min_size=1, max_size=9).map(
        lambda pairs: [b << e for b, e in pairs])


def _log_probs(w: list[int]) -> np.ndarray:
    """log(w / sum w) as floats: math.log of the exact integers (equal weights give equal floats)."""
    total = math.log(sum(w))
    return np.array([math.log(v) - total for v in w])


def _reference_top_p(w: list[int], p: Fraction) -> tuple[set[int], bool]:
    """The exact top-p set of the rational law w / sum w (smallest most-probable set of mass >= p,
    ties with its last member included) and whether some cumulative mass lies within 1e-9 of p
    (where the float decision may go either way)."""
    total = sum(w)
    levels = sorted(set(w), reverse=True)
    head, ambiguous = 0, False
    for level in levels:
        head += level * w.count(level)
        ambiguous |= abs(Fraction(head, total) - p) <= Fraction(1, 10**9) * min(p, 1 - p)
        if Fraction(head, total) >= p:
            return {i for i, v in enumerate(w) if v >= level}, ambiguous
    return set(range(len(w))), ambiguous


@settings(max_examples=150, deadline=None)
@given(_weights(), st.integers(0, 2))
def test_identity_at_p1_and_full_k(w, extra):
    """(a) top_p = 1 and top_k = |V| return the log-probabilities bit for bit, however small the entries."""
    lp = _log_probs(w)
    lp = np.stack([lp] * (extra + 1))
    for out in (truncate_log_probs(lp, top_p=1.0), truncate_log_probs(lp, top_k=lp.shape[-1]),
                truncate_log_probs(lp, top_k=lp.shape[-1], top_p=1.0)):
        assert out.tobytes() == lp.tobytes()


@settings(max_examples=300, deadline=None)
@given(_weights(), st.fractions(Fraction(1, 1000), Fraction(1)) | st.sampled_from(
    [Fraction(1), Fraction(1) - Fraction(1, 2**53), Fraction(1, 2), Fraction(9, 10)]))
def test_top_p_set_matches_exact_rationals(w, p):
    """(b) the kept set is the exact smallest most-probable set of mass >= p, ties included; (c) the
    kept law sums to 1 within a few ulps."""
    p = Fraction(float(p))  # the p the function is given
    assume(0 < p <= 1)
    ref, ambiguous = _reference_top_p(w, p)
    assume(not ambiguous)
    out = truncate_log_probs(_log_probs(w), top_p=float(p))
    assert set(np.flatnonzero(np.isfinite(out))) == ref
    if len(ref) < len(w):  # renormalised (a row left whole is the input, bit for bit)
        assert abs(math.fsum(np.exp(out[np.isfinite(out)])) - 1) <= 4 * len(w) * EPS


@settings(max_examples=200, deadline=None)
@given(_weights(), st.integers(1, 9))
def test_top_k_set_is_k_most_probable_with_ties(w, k):
    k = min(k, len(w))
    kth = sorted(w, reverse=True)[k - 1]
    out = truncate_log_probs(_log_probs(w), top_k=k)
    assert set(np.flatnonzero(np.isfinite(out))) == {i for i, v in enumerate(w) if v >= kth}
    kept = np.exp(out[np.isfinite(out)])
    if kept.size < len(w):
        assert abs(math.fsum(kept) - 1) <= 4 * len(w) * EPS
    exact = [Fraction(v, sum(x for x in w if x >= kth)) for v in w if v >= kth]  # renormalised exactly
    assert max(abs(float(a) / float(b) - 1) for a, b in zip(kept, exact) if float(b) > 1e-300) <= 2e-12


def test_top_p_one_keeps_tiny_probabilities():
    """Probabilities of 1e-17 and 1e-300 survive --top-p 1 (they were removed: the float cumulative
    mass reached 1 before them)."""
    lp = np.array([0.0, math.log(1e-17), math.log(1e-300)])
    assert truncate_log_probs(lp, top_p=1.0).tobytes() == lp.tobytes()
    near = truncate_log_probs(lp, top_p=1 - 2**-53)  # the tail 1e-17 < 1.1e-16 = 1 - p: removed
    assert np.isfinite(near).tolist() == [True, False, False]
    lp2 = np.log(np.array([1 - 1e-15, 1e-15]))  # tail 1e-15 > 1 - p: kept
    assert np.isfinite(truncate_log_probs(lp2, top_p=1 - 2**-53)).all()


def test_top_p_boundary_equality_keeps_smaller_set():
    """Mass exactly p (within rounding) counts as reached: 0.5 alone reaches p = 0.5."""
    lp = np.log(np.array([0.5, 0.3, 0.2]))
    assert np.isfinite(truncate_log_probs(lp, top_p=0.5)).tolist() == [True, False, False]
    assert np.isfinite(truncate_log_probs(lp, top_p=0.8)).tolist() == [True, True, False]


def test_truncated_source_at_p1_is_the_source():
    """Truncated(top_p=1) gives the base conditionals bit for bit (an Ising cycle at beta = 20)."""
    src = _ising(6, 20.0)
    ctx = src.space.all_states()
    for i in range(src.space.length):
        assert Truncated(src, top_p=1.0).log_conditionals(ctx, i).tobytes() == src.log_conditionals(ctx, i).tobytes()


def _ising(n: int, beta: float) -> IsingModel:
    return IsingModel(nx.cycle_graph(n), beta=beta)


def test_exact_cli_top_p1_same_chain(capsys):
    """`mlmix exact --model ising --graph cycle:6 --beta 20 --top-p 1` is the untruncated chain (it was
    reported as 2 closed classes)."""
    import json

    from mlmix.cli import main

    args = ["exact", "--model", "ising", "--graph", "cycle:6", "--beta", "20", "--json", "--no-progress"]
    assert main(args + ["--top-p", "1"]) == 0
    truncated = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert truncated["irreducible"] and truncated["closed_classes"] == 1
    assert truncated["spectral_gap"]["value"] == plain["spectral_gap"]["value"]


def test_decoder_top_p1_keeps_tiny_entries():
    """A decoder at top_p = 1 is the untruncated decoder: its tiny law entries (exp(-60)) are not 0."""
    space = StateSpace(2, 3)
    table = np.zeros((3, 3**2, 2))
    table[..., 1] = -60.0  # symbol 1 has probability about exp(-60) in every context
    src = PartialScoreTable(space, table)
    assert partial_log_probs(src, top_p=1.0).tobytes() == partial_log_probs(src).tobytes()
    law = decoder_law(src, "any-order", top_p=1.0).law
    ref = decoder_law(src, "any-order").law
    assert (ref > 0).all() and ref.min() < 1e-16
    assert np.array_equal(law, ref)
