"""The engine's interval ends (verify/theorems/intervals.py): the independent references against closed forms,
the three checks on a few instances, and each planted bug (t_mix upper end rounded down, Kemeny lower end
off by one, one-ulp inward rounding) failing its check."""

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from chain_representations import assert_encloses, chain_in

from mlmix.theory import results
from mlmix.theory.chain import mixing
from mlmix.theory.chain import variance as core
from mlmix.theory.local.constants import thm5_bound
from mlmix.theory.results import Result
from mlmix.verify.theorems import intervals as I
from mlmix.verify.verdicts import search


def two_state(a: float, b: float) -> np.ndarray:
    return np.array([[1 - a, a], [b, 1 - b]])


def case(P: np.ndarray, eps: float = 0.25, weights: np.ndarray | None = None,
         representation: str | None = None) -> I.Case:
    """The check's instance on P; ``representation`` (dense, csr) builds its chains with
    :func:`chain_representations.chain_in` instead of the engine's default."""
    make = (lambda **kw: I.Chain(P, **kw)) if representation is None else \
        (lambda **kw: chain_in(representation, P, **kw))
    return I.Case(P, make, eps, {"kind": "test"},
                  {"n": None, "vocab": None, "temperature": None, "states": P.shape[0], "reversible": None}, weights)


# a reversible birth-death chain whose certified t_mix bound t_rel log(1/(eps pi_min)) is not an integer
W_BD = np.array([[2, 1, 0, 0], [1, 2, 1, 0], [0, 1, 2, 1], [0, 0, 1, 3]])
BD = W_BD / W_BD.sum(axis=1, keepdims=True)
# transient states 2 and 3 draining into the closed class {0, 1}
W_TR = np.array([[1, 2, 0, 0], [3, 1, 0, 0], [1, 0, 1, 1], [0, 1, 2, 1]])
TR = W_TR / W_TR.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------------------ references


def test_mixing_reference_matches_the_two_state_closed_form():
    """d(t) = max(a, b)/(a + b) |1 - a - b|^t, so t_mix(eps) = the first t where it is <= eps."""
    a, b = 0.1, 0.3
    ref = I.mixing_reference(two_state(a, b), 0.1)
    d = lambda t: max(a, b) / (a + b) * abs(1 - a - b) ** t
    assert ref.t == next(t for t in range(100) if d(t) <= 0.1) and not ref.beyond
    slow = I.mixing_reference(two_state(1e-4, 1e-4), 0.25)
    assert slow.t is None and slow.beyond


def test_kemeny_references():
    """Two states: K = 1/(a + b); a transient state draining into an absorbing one: K = 0 + 1 = 1;
    the float reference agrees with the exact one."""
    assert I.kemeny_exact(np.array([[3, 1], [1, 1]])) == Fraction(1) / (Fraction(1, 4) + Fraction(1, 2))
    assert I.kemeny_exact(np.array([[0, 1], [0, 1]])) == 1
    K_exact = float(I.kemeny_exact(W_TR))
    K, err = I.kemeny_reference(case(TR))
    assert abs(K - K_exact) <= err + 1e-12 * K_exact
    eig = np.delete(np.linalg.eigvals(TR), np.argmin(np.abs(np.linalg.eigvals(TR) - 1)))
    assert math.isclose(K_exact, float(np.sum(1 / (1 - eig)).real), rel_tol=1e-12)


# ------------------------------------------------------------------------------ the checks hold


@pytest.mark.parametrize("P, weights", [(BD, W_BD), (TR, W_TR), (two_state(0.2, 0.5), None)])
def test_checks_hold_on_small_chains(P, weights, matrix_representation):
    """The interval ends of t_mix hold on chains held dense and CSR; the Kemeny check builds its dense and
    trace-and-gap chains itself, and the Kemeny constant of the chain held each way encloses the
    reference (CSR on the chain with transient states: not resolved, with its reason; matrix-free: refused
    by name, as its solvers need an irreducible chain)."""
    if matrix_representation == "operator" and chain_in("dense", P).structure.transient.any():
        with pytest.raises(ValueError, match="transient state"):
            chain_in(matrix_representation, P).mixing_time()
        return
    for eps in (0.25, 0.01):
        v = I.MixingTimeEnds().check(case(P, eps, weights, matrix_representation))
        assert v.holds and v.trivial is None, v.failing()
    v = I.KemenyEnds().check(case(P, weights=weights))
    assert v.holds and v.trivial is None
    K, err = I.kemeny_reference(case(P, weights=weights))
    assert_encloses(chain_in(matrix_representation, P).kemeny_constant, K, slack=err + 1e-12 * K)


def test_uniform_jump_attains_both_kemeny_ends():
    v = I.KemenyEnds().check(I.uniform_jump(5))
    assert v.holds and [p.name for p in v.parts] == list(I.KEMENY_PARTS)
    assert all(abs(p.tightness - 1) < 1e-12 for p in v.parts)


def test_arithmetic_check_holds_and_searches():
    v = I.IntervalArithmetic().check(I.Arithmetic(Result.exact("a", 0.1, "t"), Result.exact("b", 0.2, "t"), "+"))
    assert v.holds and len(v.parts) == 3
    report = search(I.IntervalArithmetic(), examples=40)
    assert report.status == "holds" and report.weakened == "caught"


# ------------------------------------------------------------------------------ planted bugs are caught


def _floor_upper(self, eps):
    """The certified t_mix upper end of a reversible chain rounded down instead of up (the planted bug)."""
    return math.floor((-math.log(eps) - self.log_pi_min) / self.abs_gap.lower)


def test_t_mix_upper_end_rounded_down_is_caught(monkeypatch):
    c = case(BD, 0.25, W_BD)
    assert I.MixingTimeEnds().check(c).holds
    monkeypatch.setattr(mixing.MixingBounds, "_closed_time_upper", _floor_upper)
    v = I.MixingTimeEnds().check(c)
    assert not v.holds and v.failing() == ["certified upper end >= the real bound it rounds up"]


def test_kemeny_lower_end_off_by_one_is_caught(monkeypatch):
    """The reported bug: [2, 1] for K = 1 (here [N, N - 1] on J/N and a lower end above K elsewhere)."""
    original = core.kemeny_interval

    def off_by_one(*args, **kwargs):
        r = original(*args, **kwargs)
        return Result(r.name, r.value, r.method, r.rel_error, r.lower + 1, r.upper, r.reason, dict(r.details))

    monkeypatch.setattr(core, "kemeny_interval", off_by_one)
    for c in (I.uniform_jump(4), case(two_state(0.5, 0.5))):  # K = 3 in [4, 3]; K = 1 in [2, 1]
        v = I.KemenyEnds().check(c)
        assert not v.holds, c.about


@pytest.mark.parametrize("end", ["_up", "_down"])
def test_one_ulp_inward_rounding_is_caught(monkeypatch, end):
    towards = -math.inf if end == "_up" else math.inf
    monkeypatch.setattr(results, end, lambda x: math.nextafter(x, towards) if math.isfinite(x) else x)
    inst = I.Arithmetic(Result.interval("a", 1.0, 2.0, "t", "r"), Result.interval("b", 3.0, 4.0, "t", "r"), "+")
    v = I.IntervalArithmetic().check(inst)
    assert not v.holds
    resolved = I.Arithmetic(Result.exact("a", 0.1, "t"), Result.exact("b", 0.2, "t"), "+")
    assert not I.IntervalArithmetic().check(resolved).holds  # the constructor refuses: a failed check, no crash


# ------------------------------------------------------------------------------ Theorem 5's integer bound


def test_theorem5_bound_is_the_ceiling_over_the_enclosure_of_rho():
    """ceil(n/(1-rho) log(n/eps)): exact when rho's enclosure decides the ceiling; when f(rho) = 23 lies
    inside f(enclosure), both 23 and 24 are possible and the result is the interval [23, 24]; its upper end
    is at least the real f(rho.upper) (mpmath, 50 digits)."""
    n, eps = 4, 0.25
    f = lambda r: mp.mpf(n) / (1 - mp.mpf(r)) * mp.log(mp.mpf(n) / mp.mpf(eps))
    assert thm5_bound(n, Result.exact("rho", 0.5, "t"), eps) == 23  # 8 log 16 = 22.18
    r = 1 - 4 * math.log(16) / 23  # f(r) = 23 up to rounding
    b = thm5_bound(n, Result.approximate("rho", r, 1e-9, "t"), eps)
    assert (b.value, b.lower, b.upper) == (None, 23, 24)
    with mp.workdps(50):
        assert b.upper >= f(Result.approximate("rho", r, 1e-9, "t").upper)
        assert b.lower <= mp.ceil(f(Result.approximate("rho", r, 1e-9, "t").lower))
    assert thm5_bound(n, Result.interval("rho", 0.5, None, "t", "sampled"), eps).value is None
