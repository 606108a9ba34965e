"""Fault battery: valid but unusual chains (transient states at scale, periodic chains,
reducible P* P), planted symlinks in output folders, corrupt and tampered input files, hostile
headers, huge step counts. Each case ends in the right answer or a one-line refusal."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from mlmix.limits import DOUBLING_LIMIT
from mlmix.theory.chain.markov_chain import Chain

# ----------------------------------------------------------------------------- exact references


def _exact_matrix(P: np.ndarray) -> list[list[Fraction]]:
    """The chain a float matrix defines (module doc of chain.py): the off-diagonal entries as exact
    rationals, the diagonal 1 minus their sum."""
    n = P.shape[0]
    M = [[Fraction(float(P[i, j])) if i != j else Fraction(0) for j in range(n)] for i in range(n)]
    for i in range(n):
        M[i][i] = 1 - sum(M[i])
    return M


def _matmul(A: list[list[Fraction]], B: list[list[Fraction]]) -> list[list[Fraction]]:
    n = len(A)
    return [[sum(A[i][k] * B[k][j] for k in range(n) if A[i][k]) for j in range(n)] for i in range(n)]


def _inverse(A: list[list[Fraction]]) -> list[list[Fraction]]:
    """Gauss-Jordan over the rationals."""
    n = len(A)
    M = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(A)]
    for c in range(n):
        p = next(r for r in range(c, n) if M[r][c] != 0)
        M[c], M[p] = M[p], M[c]
        piv = M[c][c]
        M[c] = [x / piv for x in M[c]]
        for r in range(n):
            if r != c and M[r][c] != 0:
                f = M[r][c]
                M[r] = [x - f * y for x, y in zip(M[r], M[c])]
    return [row[n:] for row in M]


def _exact_stationary(M: list[list[Fraction]]) -> list[Fraction]:
    """pi (I - P) = 0, sum pi = 1, by replacing one equation of the transposed system."""
    n = len(M)
    A = [[(Fraction(int(i == j)) - M[j][i]) for j in range(n)] for i in range(n)]
    A[-1] = [Fraction(1)] * n
    Ainv = _inverse(A)
    return [Ainv[i][n - 1] for i in range(n)]


def _exact_distances(M: list[list[Fraction]], pi: list[Fraction], t_max: int) -> list[Fraction]:
    n = len(M)
    out, A = [], [[Fraction(int(i == j)) for j in range(n)] for i in range(n)]
    for _ in range(t_max + 1):
        out.append(max(sum(abs(A[i][j] - pi[j]) for j in range(n)) / 2 for i in range(n)))
        A = _matmul(A, M)
    return out


def _exact_kemeny(M: list[list[Fraction]], pi: list[Fraction]) -> Fraction:
    """sum_{j >= 2} 1 / (1 - lambda_j) = tr((I - P + 1 pi^T)^-1) - 1 (Brauer's rank-one deflation)."""
    n = len(M)
    Z = _inverse([[Fraction(int(i == j)) - M[i][j] + pi[j] for j in range(n)] for i in range(n)])
    return sum(Z[i][i] for i in range(n)) - 1


def _contains(r, truth: Fraction) -> bool:
    lo = -np.inf if r.lower is None else r.lower
    hi = np.inf if r.upper is None else r.upper
    return (lo == -np.inf or Fraction(lo) <= truth) and (hi == np.inf or truth <= Fraction(hi))


def transient_path(N: int) -> sp.csr_array:
    """Closed class {0, 1} (every move 1/2) and k -> k - 1 for k >= 2 (the issue's 5,000-state case)."""
    rows = [0, 0, 1, 1] + list(range(2, N))
    cols = [0, 1, 0, 1] + list(range(1, N - 1))
    vals = [0.5] * 4 + [1.0] * (N - 2)
    return sp.csr_array((vals, (rows, cols)), shape=(N, N))


# ----------------------------------------------------------------------------- transient states


def test_the_5000_state_transient_path_gets_d_t_and_t_mix_right():
    """From 4,999 the chain needs 4,998 steps to enter {0, 1}: d(t) = 1 for t <= 4,997, d(4,998) = 1/2
    (it sits on state 1), d(4,999) = 0; the closed class's spectral bound alone claimed d(1) <= 3e-15."""
    ch = Chain(transient_path(5000))
    for t, truth in ((0, 1.0), (1, 1.0), (100, 1.0), (4997, 1.0), (4998, 0.5)):
        d = ch.tv_distance(t)
        assert d.resolved and d.lower <= truth <= d.upper and abs(float(d) - truth) <= 1e-6, (t, d)
    d = ch.tv_distance(4999)
    assert d.lower == 0 and d.upper < 1e-12
    t_mix = ch.mixing_time(0.25)
    assert t_mix.lower <= 4999 <= t_mix.upper and t_mix.upper - t_mix.lower <= 2
    assert ch.mixing_time(0.75).lower == 4998  # d(4,997) = 1 > 0.75 >= d(4,998)


def test_a_small_transient_chain_is_exact_where_the_closed_class_bound_was_empty():
    """6-state path: t_mix = 5 (d(4) = 1/2 from state 5, d(5) = 0); the call used to raise 'empty'."""
    ch = Chain(transient_path(6).toarray())
    assert float(ch.tv_distance(1)) == pytest.approx(1.0, abs=1e-12)
    assert int(ch.mixing_time(0.25)) == 5
    assert float(ch.tv_distance(4)) == pytest.approx(0.5, abs=1e-12)


def test_the_longest_transient_path_not_the_shortest_bounds_the_entrance():
    """2 -> 0 or 2 -> 1 -> 0 (Hypothesis found it): tau <= 2, not the graph distance 1; d(1) = 1/2."""
    ch = Chain(np.array([[1.0, 0, 0], [1, 0, 0], [0.5, 0.5, 0]]))
    assert float(ch.tv_distance(1)) == pytest.approx(0.5, rel=1e-12)
    assert ch.facts.transient_decay.depth == 1 and ch.facts.transient_decay.longest == 2
    assert int(ch.mixing_time(0.1)) == 2
    with pytest.MonkeyPatch.context() as mp:
        from mlmix.theory.chain import mixing

        mp.setattr(mixing, "MIXING_LIMIT", 0)  # the certified bounds alone
        d = Chain(np.array([[1.0, 0, 0], [1, 0, 0], [0.5, 0.5, 0]])).tv_distance(1)
        assert d.lower <= 0.5 <= d.upper


@pytest.mark.parametrize("P, K", [
    ([[1, 0], [0.1, 0.9]], 10.0),  # the closed class is one state (K_C = 0), mu = 0.9
    ([[1, 0, 0], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]], 6.0),  # tr((I - Q)^-1) = 4 + 2
    ([[0, 1, 0], [1, 0, 0], [0.25, 0.25, 0.5]], 2.5),  # K_C = 1/2 (eigenvalue -1) plus 1/(1 - 1/2)
])
def test_kemeny_constant_of_a_chain_with_transient_states(P, K):
    k = Chain(np.array(P)).kemeny_constant
    assert float(k) == pytest.approx(K, rel=1e-12)
    eig = np.linalg.eigvals(np.array(P))
    eig = np.delete(eig, np.argmin(np.abs(eig - 1)))
    assert float(k) == pytest.approx(float(np.sum(1 / (1 - eig)).real), rel=1e-9)  # a second algorithm


@st.composite
def transient_chains(draw):
    """A chain on n <= 5 states with one closed class {0..c-1} (a cycle plus random moves) and
    transient states c..n-1 (each reaches a lower state)."""
    n = draw(st.integers(2, 5))
    c = draw(st.integers(1, n - 1))
    W = np.zeros((n, n))
    for i in range(n):
        width = c if i < c else n
        W[i, :width] = draw(st.lists(st.integers(0, 4), min_size=width, max_size=width))
        if i < c:
            W[i, (i + 1) % c] += 1
        else:
            W[i, draw(st.integers(0, i - 1))] += 1
    return W / W.sum(axis=1, keepdims=True)


@settings(max_examples=15)
@given(transient_chains(), st.sampled_from([0.1, 0.25, 0.5]))
def test_every_interval_on_a_chain_with_transient_states_contains_the_exact_value(P, eps):
    """d(t), t_mix(eps) and the Kemeny constant against exact rational arithmetic on the chain the
    float matrix defines; the property fails for the closed class's bounds alone."""
    from mlmix.theory.chain import mixing

    M = _exact_matrix(P)
    pi = _exact_stationary(M)
    d = _exact_distances(M, pi, 30)
    mixed = [t for t, v in enumerate(d) if v <= eps]
    for dense in (True, False):  # the exact dense powers, and the certified bounds of large chains
        with pytest.MonkeyPatch.context() as mp:
            if not dense:
                mp.setattr(mixing, "MIXING_LIMIT", 0)
            ch = Chain(P)
            for t in (0, 1, 2, 3, 7, 20):
                assert _contains(ch.tv_distance(t), d[t]), (t, ch.tv_distance(t), float(d[t]))
            t_mix = ch.mixing_time(eps, max_states=P.shape[0] if dense else 0)
        if mixed:
            assert _contains(t_mix, Fraction(mixed[0])), (t_mix, mixed[0])
        else:
            assert t_mix.upper is None or t_mix.upper > 30
    assert _contains(ch.kemeny_constant, _exact_kemeny(M, pi))


def test_the_property_fails_for_the_closed_class_bound_alone():
    """Weakened: the bound of the closed class (no transient part) excludes the true d(1) = 1."""
    from mlmix.theory.chain import mixing

    ch = Chain(transient_path(6).toarray())
    b = ch.facts.mixing_bounds()
    weak = mixing.MixingBounds(b.log_pi_min, b.reversible, b.abs_gap, b.modulus_gap, b.mult_gap)
    assert np.exp(weak.log_distance_upper(1)) < 1e-10  # below the true d(1) = 1
    assert np.exp(b.log_distance_upper(1)) >= 1.0


# ----------------------------------------------------------------------------- refused valid chains


def test_a_periodic_cycle_with_a_large_eps_mixes_at_0():
    """3-cycle: d(0) = 2/3 <= 0.7, so t_mix(0.7) = 0 (P* P = I is reducible: no elimination on it)."""
    ch = Chain(np.roll(np.eye(3), 1, axis=1))
    assert int(ch.mixing_time(0.7)) == 0
    assert float(ch.multiplicative_gap) == 0.0


def test_an_aperiodic_chain_with_reducible_product_is_analysed():
    """[[0,1,0],[0,0,1],[1/2,0,1/2]]: pi = (1/4, 1/4, 1/2), d = 3/4, 3/4, 1/2, 1/4, 1/4, 1/8 (exact), so
    t_mix(0.2) = 5 and t_mix(1/4) = 3 (d(3) = 1/4 exactly: floating point brackets it)."""
    P = np.array([[0, 1, 0], [0, 0, 1], [0.5, 0, 0.5]])
    ch = Chain(P)
    assert np.allclose(np.asarray(ch.stationary), [0.25, 0.25, 0.5], rtol=1e-14)
    assert int(ch.mixing_time(0.2)) == 5
    t = ch.mixing_time(0.25)
    assert t.lower <= 3 <= t.upper
    d = _exact_distances(_exact_matrix(P), [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)], 5)
    assert d == [Fraction(3, 4), Fraction(3, 4), Fraction(1, 2), Fraction(1, 4), Fraction(1, 4), Fraction(1, 8)]
    assert float(ch.multiplicative_gap) == 0.0  # state 1 is absorbing for P* P


def test_sparse_multiplicative_gap_of_a_permutation_is_zero():
    from mlmix.theory.chain.spectral import multiplicative_gap_sparse

    P = sp.csr_array(np.roll(np.eye(5), 1, axis=1))
    assert float(multiplicative_gap_sparse(P, np.full(5, -np.log(5)))) == 0.0


# ----------------------------------------------------------------------------- planted links


def _snapshot(folder):
    return {p: (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("kind", ["file", "folder", "lock"])
def test_output_folder_with_a_planted_link_is_refused_and_nothing_outside_changes(tmp_path, kind):
    from mlmix.files import LOCK, OutputDir

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("precious")
    out = tmp_path / "out"
    with OutputDir(out, "run traps", {"a": 1}):
        pass
    if kind == "file":
        (out / "chains.jsonl").symlink_to(outside / "victim.txt")
    elif kind == "folder":
        (out / "figures").symlink_to(outside, target_is_directory=True)
    else:
        (out / LOCK).symlink_to(outside / "victim.txt")
    before = _snapshot(outside)
    with pytest.raises(ValueError, match="symbolic link"):
        with OutputDir(out, "run traps", {"a": 1}):
            pass
    with pytest.raises(ValueError, match="symbolic link"):
        with OutputDir(out, "run traps", {"a": 2}, overwrite=True):
            pass
    assert _snapshot(outside) == before


def test_mlmix_run_traps_rerun_with_a_planted_link_exits_2_and_leaves_the_target_alone(model_folder, tmp_path,
                                                                                       capsys):
    """The issue's case: a finished `mlmix run traps`, its chains.jsonl replaced by a link to a file
    outside; the rerun (same parameters: it would resume and truncate the record file) is refused."""
    from mlmix.cli import main

    out = tmp_path / "out"
    argv = ["run", "traps", "--out", str(out), "--model", str(model_folder), "--length", "3", "--chains", "2",
            "--steps", "40", "--window", "10", "--record-every", "5", "--embedder", "hamming", "--device", "cpu",
            "--no-progress"]
    assert main(argv) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "chains.jsonl").unlink()
    (out / "chains.jsonl").symlink_to(victim)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "symbolic link" in err[0]
    assert victim.read_text() == "precious"


def test_append_and_truncate_refuse_a_link_planted_during_a_run(tmp_path):
    """A link planted after the folder check (a race): the append-only log opens with O_NOFOLLOW."""
    from mlmix.files import append_text, truncate_file

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "chains.jsonl"
    link.symlink_to(victim)
    with pytest.raises(ValueError, match="symbolic link"):
        append_text(link, "x\n")
    with pytest.raises(ValueError, match="symbolic link"):
        truncate_file(link, 0)
    assert victim.read_text() == "precious"
    append_text(tmp_path / "log.jsonl", "a\n")
    append_text(tmp_path / "log.jsonl", "b\n")
    truncate_file(tmp_path / "log.jsonl", 2)
    assert (tmp_path / "log.jsonl").read_text() == "a\n"


# ----------------------------------------------------------------------------- hangs and blow-ups


def _csr_npz(path, data, indices, indptr, shape=(3, 3)):
    np.savez(path, format=np.array("csr"), shape=np.array(shape), data=np.array(data, dtype=float),
             indices=np.array(indices), indptr=np.array(indptr))


def test_a_duplicated_sparse_entry_is_summed_not_a_hang(tmp_path):
    """scipy .npz with (0, 1) stored twice (1/4 + 1/4): the entries are summed before the graph search
    (which hung on them) and the chain is the 3-state one with P(0, 1) = 1/2."""
    from mlmix.theory.chain.persistence import load_matrix

    _csr_npz(tmp_path / "dup.npz", [0.25, 0.25, 0.5, 1.0, 1.0], [1, 1, 0, 2, 0], [0, 3, 4, 5])
    ch = Chain(load_matrix(tmp_path / "dup.npz"))
    assert ch.P.nnz == 4 and ch.P[0, 1] == 0.5
    dense = Chain(np.array([[0.5, 0.5, 0], [0, 0, 1], [1, 0, 0]]))
    assert np.allclose(np.asarray(ch.stationary), np.asarray(dense.stationary), rtol=1e-14)
    assert np.allclose(np.asarray(ch.stationary), [0.5, 0.25, 0.25], rtol=1e-14)


@pytest.mark.parametrize("indices, indptr, message", [
    ([1, 5, 0, 2, 0], [0, 3, 4, 5], "indices must be < 3"),
    ([1, -1, 0, 2, 0], [0, 3, 4, 5], "indices must be >= 0"),
    ([1, 1, 0, 2, 0], [0, 3, 2, 5], "non-decreasing"),
])
def test_broken_csr_arrays_are_one_line_errors(tmp_path, indices, indptr, message):
    from mlmix.theory.chain.persistence import load_matrix

    _csr_npz(tmp_path / "bad.npz", [0.25, 0.25, 0.5, 1.0, 1.0], indices, indptr)
    with pytest.raises(ValueError, match=message) as err:
        load_matrix(tmp_path / "bad.npz")
    assert "\n" not in str(err.value)
    M = sp.csr_array((np.array([0.25, 0.25, 0.5, 1.0, 1.0]), np.array(indices), np.array(indptr)), shape=(3, 3))
    with pytest.raises(ValueError, match=message):
        Chain(M)


def test_the_class_structure_of_a_long_absorbing_path_is_linear():
    """2 x 10^5 states (the issue's 10^6 takes 4 s), one closed class {0}: the classes are listed by
    one sort (was O(N x classes): 4 x 10^10 steps), and t_mix = N - 1 exactly: state N - 1 needs that
    many steps to reach 0 (graph depth) and every state is there by then (no transient cycle)."""
    import time

    N = 2 * 10**5
    P = sp.csr_array((np.ones(N), (np.arange(N), np.maximum(np.arange(N) - 1, 0))), shape=(N, N))
    t0 = time.perf_counter()
    ch = Chain(P)
    st_ = ch.structure
    assert st_.n_classes == N and len(st_.closed_classes) == 1 and len(st_.classes) == N
    assert int(ch.mixing_time(0.25)) == N - 1  # and no later: no cycle among the transient states
    assert time.perf_counter() - t0 < 30


def test_hitting_probabilities_at_2_to_the_62_steps_use_the_limit_or_doubling():
    """h_t = P_x(tau_A <= t) on a metastable 4-state chain: binary doubling and the step loop agree at
    t = 500 (two algorithms), and at t = 2^62 both doubling and the limit bracket give 1."""
    from mlmix.theory.chain import hitting

    P = np.array([[0.5, 0.5, 0, 0], [0.25, 0.5, 0.25, 0], [0, 1e-3, 0.998, 1e-3], [0, 0, 0.5, 0.5]])
    A = np.array([False, False, False, True])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hitting, "DOUBLING_LIMIT", 0)
        loop = hitting.hitting_probabilities(P, A, 500)
    assert "backward steps" in loop.method
    doubled = hitting.hitting_probabilities(P, A, 500)
    assert "doubling" in doubled.method
    assert np.allclose(loop.value, doubled.value, rtol=1e-11, atol=0)
    assert 0.1 < loop.value[0] < 0.9  # not converged: the comparison can fail
    for doubling_limit in (DOUBLING_LIMIT, 0):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(hitting, "DOUBLING_LIMIT", doubling_limit)
            mp.setattr(hitting, "HITTING_STEPS", 20000)
            far = hitting.hitting_probabilities(P, A, 2**62)
        assert np.allclose(far.value, 1.0, rtol=1e-12, atol=0) and far.rel_error < 1e-6
    # a start that cannot reach A: exactly 0 at every t
    P2 = np.array([[1.0, 0, 0], [0.5, 0, 0.5], [0, 0, 1.0]])
    assert list(hitting.hitting_probabilities(P2, np.array([2]), 2**62).value) == [0.0, 0.5, 1.0]


def test_a_huge_distance_curve_is_a_memory_refusal():
    from mlmix.errors import MemoryLimitError

    ch = Chain(np.array([[0.5, 0.5], [0.5, 0.5]]))
    with pytest.raises(MemoryLimitError, match="distance curve"):
        ch.distance_curve(2**40)
    with pytest.raises(MemoryLimitError, match="distance curve"):
        ch.distance_curve(2**40, start=0)


# ----------------------------------------------------------------------------- tampered and corrupt files


def test_a_complex_matrix_is_refused_not_truncated(tmp_path):
    from mlmix.theory.chain.persistence import load_matrix

    P = np.array([[0.5, 0.5], [0.5, 0.5]]) * (1 + 0j)
    np.save(tmp_path / "c.npy", P)
    with pytest.raises(ValueError, match="real numbers"):
        load_matrix(tmp_path / "c.npy")
    with pytest.raises(TypeError, match="real numbers"):
        Chain(P)
    with pytest.raises(TypeError, match="real numbers"):
        Chain(sp.csr_array(P))


@pytest.mark.parametrize("layout", ["dense", "csr", "scipy", "npy"])
def test_flipped_bytes_and_truncations_of_every_matrix_format_are_one_line_errors(tmp_path, layout):
    """Seeded corruptions (1-3 random bytes, or a truncation) of each matrix format: the file is read
    or refused with a ValueError, never another exception (zlib errors, numpy's header parser)."""
    from mlmix.theory.chain.persistence import load_matrix

    P = np.array([[0.5, 0.5, 0], [0.25, 0.5, 0.25], [0, 0.5, 0.5]])
    src = tmp_path / ("m.npy" if layout == "npy" else "m.npz")
    if layout == "dense":
        Chain(P).save(src)
    elif layout == "csr":
        Chain(sp.csr_array(P)).save(src)
    elif layout == "scipy":
        sp.save_npz(src, sp.csr_matrix(P))
    else:
        np.save(src, P)
    raw = src.read_bytes()
    rng = np.random.default_rng(26)
    bad = tmp_path / src.name.replace("m.", "bad.")
    refused = 0
    for trial in range(60):
        b = bytearray(raw)
        for i in rng.integers(0, len(b), size=rng.integers(1, 4)):
            b[i] = int(rng.integers(256))
        if trial % 3 == 0:
            b = b[: int(rng.integers(len(b)))]
        bad.write_bytes(bytes(b))
        try:
            load_matrix(bad)
        except ValueError as err:
            assert "\n" not in str(err)
            refused += 1
    assert refused >= 20
    assert np.array_equal(np.asarray(sp.csr_array(load_matrix(src)).toarray()), P)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    from mlm_fixtures import save_model, tiny_masked_lm

    model, tok = tiny_masked_lm("bert", seed=5)
    return save_model(model, tok, tmp_path_factory.mktemp("model") / "bert")


def _copy_model(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _rewrite_header(path, edit):
    """Rewrite a safetensors header in place (the tensor bytes unchanged)."""
    import json

    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])


def _first_weight(header):
    return next(k for k in header if k != "__metadata__" and k.endswith("weight"))


@pytest.mark.parametrize("edit, message", [
    (lambda h: h[_first_weight(h)].update(dtype="I32"), "stored as I32"),  # same byte length: the case
    (lambda h: h[_first_weight(h)].update(dtype="F16"), "does not match"),
    (lambda h: h[_first_weight(h)].update(dtype="Q4"), "unknown dtype"),
    (lambda h: h[_first_weight(h)].update(shape=[-1]), "malformed"),
])
def test_a_relabelled_safetensors_header_is_refused(model_folder, tmp_path, edit, message):
    from transformers import AutoModelForMaskedLM

    from mlmix.empirical.models.mlm import load_pretrained

    folder = _copy_model(model_folder, tmp_path / "m")
    _rewrite_header(folder / "model.safetensors", edit)
    with pytest.raises(ValueError, match=message) as err:
        load_pretrained(AutoModelForMaskedLM, folder)
    assert "\n" not in str(err.value)


def test_weights_of_absurd_magnitude_are_refused(model_folder, tmp_path):
    """Value sanity after loading: a weight of 1e9 (what relabelled bytes give) is refused."""
    from safetensors.numpy import load_file, save_file
    from transformers import AutoModelForMaskedLM

    from mlmix.empirical.models.mlm import load_pretrained

    folder = _copy_model(model_folder, tmp_path / "m")
    tensors = load_file(folder / "model.safetensors")
    key = next(k for k in tensors if k.endswith("dense.weight"))
    tensors[key] = tensors[key] * 0 + np.float32(1e9)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="relabelled checkpoint"):
        load_pretrained(AutoModelForMaskedLM, folder)
    load_pretrained(AutoModelForMaskedLM, model_folder)  # the original loads


@pytest.mark.parametrize("content, message", [
    ('{"model": {"type": "WordLevel", "vocab": [1, 2]}}', "not a valid tokenizer file"),
    ("[1, 2]", "not a valid tokenizer file"),
    ("{not json", "not a valid tokenizer file"),
])
def test_a_tokenizer_file_of_the_wrong_schema_is_a_one_line_error(model_folder, tmp_path, content, message):
    from transformers import AutoModelForMaskedLM

    from mlmix.empirical.models.mlm import load_pretrained

    folder = _copy_model(model_folder, tmp_path / "m")
    (folder / "tokenizer.json").write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        load_pretrained(AutoModelForMaskedLM, folder)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("content, message", [
    ("{}", "no 'law' object"),
    ('{"law": {"tokens": ["a"], "length": 2, "coupling": 1.0}}', "lacks fields"),
    ('{"law": {"tokens": ["a"], "length": 2, "coupling": 1.0, "fields": [[0.0]]}}', "shape"),
    ("[", "not valid JSON"),
])
def test_a_damaged_law_file_is_a_one_line_error(tmp_path, content, message):
    from mlmix.empirical.models.shipped_model import load_law

    (tmp_path / "law.json").write_text(content)
    with pytest.raises(ValueError, match=message):
        load_law(tmp_path)


def test_the_shipped_law_file_passes_the_check():
    from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR
    from mlmix.empirical.models.shipped_model import law_spec, load_law

    spec = law_spec(DEFAULT_MODEL_DIR)
    assert load_law(DEFAULT_MODEL_DIR).space.length == spec["length"]


def test_rectangle_table_with_an_unloadable_model_exits_2_in_one_line(tmp_path, capsys):
    from mlmix.cli import main

    bad = tmp_path / "bad-model"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    assert main(["run", "rectangle-table", "--out", str(tmp_path / "out"), "--model", str(bad),
                 "--rectangles", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no weights" in err[0]


@pytest.fixture()
def cached(tmp_path):
    from mlm_fixtures import tiny_masked_lm

    from mlmix.empirical.models import tabulate as tab
    from mlmix.empirical.models.mlm import MaskedLMConditionals

    model, tok = tiny_masked_lm("bert", seed=13)
    mlm = MaskedLMConditionals(model, tok, frame="c _ _", candidates="a b c", device="cpu")
    first = tab.tabulate(mlm, cache_dir=tmp_path, progress=False, log=lambda _: None)
    key = tab.table_key(mlm)[0]
    return mlm, first, tmp_path / f"{key}.npz"


@pytest.mark.parametrize("damage", ["tamper", "truncate", "garbage", "crc"])
def test_a_damaged_or_tampered_cached_table_is_detected_and_recomputed(cached, damage):
    """Edited values (same layout), a truncated archive, garbage, a flipped byte inside the compressed
    member: never used silently; tabulate says so and recomputes the same table; cached_table refuses."""
    import io

    from mlmix.empirical.models import tabulate as tab
    from mlmix.files import atomic_save_npz

    mlm, first, path = cached
    raw = path.read_bytes()
    if damage == "tamper":
        with np.load(io.BytesIO(raw)) as z:
            table = z["table"].copy()
        table[0, 0, 0] += 1.0
        atomic_save_npz(path, table=table)
    elif damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a zip file at all")
    else:
        i = raw.index(b"table.npy") + 200
        path.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:])
    with pytest.raises(ValueError, match="cached table") as err:
        tab.cached_table(mlm, path.parent)
    assert "\n" not in str(err.value)
    notes = []
    again = tab.tabulate(mlm, cache_dir=path.parent, progress=False, log=notes.append)
    assert any("recomputing" in n for n in notes)
    np.testing.assert_array_equal(again.table, first.table)
    assert tab.cached_table(mlm, path.parent) is not None  # rewritten whole


def test_a_damaged_checkpoint_chunk_is_recomputed(cached, monkeypatch):
    from mlmix.empirical.models import tabulate as tab
    from mlmix.files import OutputDir

    mlm, first, path = cached
    key, record = tab.table_key(mlm)
    path.unlink()
    partial = path.parent / f"{key}.partial"
    with OutputDir(partial, "tabulate", {**record, "chunk_rows": tab.MIN_CHUNK_ROWS}):
        pass
    (partial / f"chunk-{0:012d}.npz").write_bytes(b"PK\x03\x04 truncated")
    again = tab.tabulate(mlm, cache_dir=path.parent, progress=False, log=lambda _: None)
    np.testing.assert_array_equal(again.table, first.table)
