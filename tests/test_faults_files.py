"""Score files that lie: metadata claiming sizes the stored arrays do not have (length 10^12 in a 1 KB
file), fields of the wrong type (vocab_size 2.7 or "2", bools, NaN temperature), headers claiming
more memory than the limit, and the documented -inf entries (zero conditionals). Each ends in the
right table or a one-line refusal naming the field, within seconds."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlmix.cli import main
from mlmix.errors import MemoryLimitError
from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.sources.conditionals import ScoreTable
from mlmix.theory.sources.partial import PartialScoreTable
from mlmix.theory.sources.scorefile import load_scores
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import SCORES_FORMAT, check_score_arrays, memory_limit


def arrays(table_kind: str = "partial", q: int = 2, n: int = 3, seed: int = 0, **change) -> dict:
    """A valid score file's arrays of kind ``table_kind`` (then ``change`` applied)."""
    base = q if table_kind == "full" else q + 1
    table = np.random.default_rng(seed).standard_normal((n, base ** (n - 1), q))
    out = {"mlmix_format": np.array(SCORES_FORMAT), "kind": np.array(table_kind), "vocab_size": np.array(q),
           "length": np.array(n), "table": table, "temperature": np.array(0.5), "tokens": np.array(["a", "b", "c"][:q])}
    out.update({key: np.asarray(value) for key, value in change.items()})
    return out


def write(path: Path, data: dict) -> Path:
    np.savez(path, **data)
    return path


def one_line(err: BaseException, *words: str) -> str:
    message = str(err)
    assert "\n" not in message and all(w in message for w in words), message
    return message


# ----------------------------------------------------------------------------- sizes that lie


@pytest.mark.parametrize("kind", ["full", "partial"])
def test_length_of_a_trillion_in_a_small_file_is_refused_at_once(tmp_path, kind):
    f = write(tmp_path / "lie.npz", arrays(kind, length=10**12))
    assert f.stat().st_size < 4096
    start = time.perf_counter()
    with pytest.raises(ValueError) as info:
        load_scores(f)
    assert time.perf_counter() - start < 1.0
    one_line(info.value, "n = 1000000000000", "has shape", f"{3 if kind == 'partial' else 2}^999999999999")
    # the constructors refuse a lying space the same way (no 2^(10^12) formed)
    cls = PartialScoreTable if kind == "partial" else ScoreTable
    with pytest.raises(ValueError, match="has shape"):
        cls(StateSpace(2, 10**12), np.asarray(arrays(kind)["table"]))


def test_cli_refuses_a_lying_score_file_within_seconds(tmp_path):
    """Before the fix `mlmix exact --scores` worked for minutes on 3^(10^12 - 1) (13.5 GB after 10 min)."""
    f = write(tmp_path / "lie.npz", arrays("partial", length=10**12))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run([sys.executable, "-m", "mlmix", "exact", "--scores", str(f)], capture_output=True,
                              text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("mlmix exact --scores did not refuse a file claiming n = 10^12 within 60 s")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "n = 1000000000000" in lines[0], done.stderr


@pytest.mark.timeout(60)
def test_decode_refuses_a_lying_score_file_at_once(tmp_path, capsys):
    f = write(tmp_path / "lie.npz", arrays("partial", length=10**12))
    start = time.perf_counter()
    assert main(["decode", "--scores", str(f)]) == 2
    assert time.perf_counter() - start < 5.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "n = 1000000000000" in err[0]


def _claiming_header(path: Path, shape: tuple, extra: dict) -> Path:
    """An .npz whose table.npy header claims ``shape`` (float64) but holds 16 bytes of data."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("table.npy", head.getvalue() + bytes(16))
        for key, value in extra.items():
            buf = io.BytesIO()
            np.save(buf, np.asarray(value))
            zf.writestr(f"{key}.npy", buf.getvalue())
    return path


def test_table_beyond_the_memory_limit_is_refused_before_its_data_is_read(tmp_path, capsys):
    """Shape and metadata agree (|V| = 2, n = 30: 6e10 entries) but the data is 16 bytes: the refusal is
    the memory estimate, made from the header, not a failed read of 480 GB."""
    meta = {"mlmix_format": SCORES_FORMAT, "kind": "full", "vocab_size": 2, "length": 30}
    f = _claiming_header(tmp_path / "big.npz", (30, 2**29, 2), meta)
    with memory_limit("1GiB"), pytest.raises(MemoryLimitError) as info:
        load_scores(f)
    one_line(info.value, "the score table needs about", "memory limit")
    assert main(["exact", "--scores", str(f), "--max-memory", "1GiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs about" in err[0]
    # within the limit, the same header is refused as unreadable (the data is missing), not allocated
    small = _claiming_header(tmp_path / "small.npz", (3, 4, 2), {**meta, "length": 3})
    with pytest.raises(ValueError, match="not a readable"):
        load_scores(small)


def test_headers_claiming_more_than_a_float_can_count_are_refused(tmp_path):
    """A consistent claim of |V| = 2, n = 1200 (2^1199 contexts: beyond 1e308 bytes) and a tokens array of
    10^400 entries: refused by the memory estimate (inf), not an OverflowError traceback."""
    meta = {"mlmix_format": SCORES_FORMAT, "kind": "full", "vocab_size": 2, "length": 1200}
    f = _claiming_header(tmp_path / "huge.npz", (1200, 2**1199, 2), meta)
    with pytest.raises(MemoryLimitError) as info:
        load_scores(f)
    one_line(info.value, "the score table needs about")
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<U1", "fortran_order": False, "shape": (10**400,)})
    g = tmp_path / "tokens.npz"
    with zipfile.ZipFile(g, "w") as zf:
        zf.writestr("tokens.npy", head.getvalue())
    with pytest.raises(MemoryLimitError, match="metadata arrays"):
        load_scores(g)


def test_honest_table_over_the_limit_is_refused(tmp_path):
    f = write(tmp_path / "ok.npz", arrays("full", q=2, n=10))
    with memory_limit("64KiB"), pytest.raises(MemoryLimitError, match="needs about"):
        load_scores(f)
    assert load_scores(f).table.shape == (10, 512, 2)


# ----------------------------------------------------------------------------- metadata types


@pytest.mark.parametrize("field,value,error", [
    ("vocab_size", 2.7, TypeError), ("vocab_size", 2.0, TypeError), ("length", 2.5, TypeError),
    ("vocab_size", "2", TypeError), ("length", "3", TypeError), ("length", True, TypeError),
    ("vocab_size", True, TypeError), ("vocab_size", -2, ValueError), ("length", -3, ValueError),
    ("length", 0, ValueError), ("vocab_size", [2], ValueError), ("temperature", float("nan"), ValueError),
    ("temperature", float("inf"), ValueError), ("temperature", True, TypeError), ("temperature", "0.5", TypeError),
    ("temperature", -1.0, ValueError), ("temperature", [0.5, 0.5], ValueError), ("kind", 1, TypeError),
    ("mlmix_format", 1, TypeError), ("tokens", [[1, 2]], TypeError), ("tokens", ["a", "b", "c", "d"], ValueError),
])
def test_metadata_of_the_wrong_type_is_refused_naming_the_field(tmp_path, field, value, error):
    f = write(tmp_path / "bad.npz", arrays("partial", **{field: value}))
    with pytest.raises(error) as info:
        load_scores(f)
    one_line(info.value, field)
    with pytest.raises(error):
        check_score_arrays(arrays("partial", **{field: value}))


def test_metadata_cli_refusal_is_one_line(tmp_path, capsys):
    f = write(tmp_path / "bad.npz", arrays("partial", vocab_size="2"))
    assert main(["decode", "--scores", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vocab_size" in err[0]


#: Near-valid values (the right number in the wrong type: 2.0, "2", True) and arbitrary ones.
_VALUES = st.one_of(st.sampled_from([1, 2, 3, 2.0, 3.0, 2.5, 0.5, "2", "3", True, False, float("nan"), -2, 10**12,
                                     "full", "partial", SCORES_FORMAT]),
                    st.integers(-3, 10**15), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.text(max_size=3), st.lists(st.integers(0, 4), min_size=0, max_size=3))
_FIELDS = ["mlmix_format", "kind", "vocab_size", "length", "temperature", "tokens", "table"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["full", "partial"]), q=st.integers(2, 3), n=st.integers(1, 3),
       corrupt=st.lists(st.tuples(st.sampled_from(_FIELDS), _VALUES), min_size=1, max_size=2),
       shape=st.lists(st.integers(0, 5), min_size=0, max_size=4), via_file=st.booleans())
def test_corrupted_metadata_is_refused_or_consistent(kind, q, n, corrupt, shape, via_file):
    """Whatever the metadata claims, loading refuses with a one-line ValueError/TypeError or returns a
    table whose sizes are the stored arrays' (n, base^(n-1), |V|), |V| tokens, a positive finite T."""
    data = arrays(kind, q=q, n=n)
    for field, value in corrupt:
        data[field] = np.zeros(tuple(shape)) if field == "table" else np.asarray(value)
    try:
        if via_file:
            with tempfile.TemporaryDirectory() as d:
                src = load_scores(write(Path(d) / "s.npz", data))
            got = {"kind": "partial" if isinstance(src, PartialScoreTable) else "full", "vocab_size": src.space.vocab_size,
                   "length": src.space.length, "table": src.table, "temperature": src.temperature, "tokens": src.tokens}
        else:
            got = check_score_arrays(data)
    except (ValueError, TypeError) as err:
        one_line(err)
        return
    stored = np.asarray(data["table"])
    Q, N = got["vocab_size"], got["length"]
    base = Q if got["kind"] == "full" else Q + 1
    assert got["table"].shape == stored.shape == (N, base ** (N - 1), Q)
    for key, value in (("vocab_size", Q), ("length", N)):  # stored as integers, not truncated from 2.7 or "2"
        stored_value = np.asarray(data[key])
        assert stored_value.shape == () and stored_value.dtype.kind in "iu" and stored_value.item() == value
    T = np.asarray(data["temperature"])
    assert T.shape == () and T.dtype.kind in "iuf" and T.item() == got["temperature"]
    assert math.isfinite(got["temperature"]) and got["temperature"] > 0
    assert got["tokens"] is None or len(got["tokens"]) == Q == np.asarray(data["tokens"]).shape[0]


# ----------------------------------------------------------------------------- -inf: zero conditionals


def copy_table() -> np.ndarray:
    """|V| = 2, n = 2, partial: with both sites shown, each site copies the other (s = 0 on the copy,
    -inf on the other symbol); with the other site masked, uniform. Glauber: 00 and 11 absorb, 01 and
    10 go to either with probability 1/2."""
    t = np.zeros((2, 3, 2))
    for i in range(2):
        for other in range(2):
            t[i, other, 1 - other] = -np.inf
    return t


def save_partial(path: Path, table: np.ndarray) -> Path:
    return write(path, {"mlmix_format": np.array(SCORES_FORMAT), "kind": np.array("partial"),
                        "vocab_size": np.array(2), "length": np.array(2), "table": table})


def test_documented_minus_inf_in_a_full_context_loads_and_analyses(tmp_path, capsys):
    """docs/samplers.md: partial entries are finite or -inf (a zero conditional), a finite entry in every row.
    Such a file is read by exact (its full contexts) and decode; the chain is reducible and said so."""
    f = save_partial(tmp_path / "copy.npz", copy_table())
    src = load_scores(f)
    full = src.full_table()
    assert np.isneginf(full.table).sum() == 4
    chain = Chain.from_source(full, "glauber")
    assert not chain.is_irreducible
    P = np.asarray(chain.P.todense() if hasattr(chain.P, "todense") else chain.P)
    expected = np.array([[1, 0, 0, 0], [0.5, 0, 0, 0.5], [0.5, 0, 0, 0.5], [0, 0, 0, 1]])  # states 00 01 10 11
    assert np.array_equal(P, expected)
    assert main(["exact", "--scores", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["irreducible"] is False and doc["closed_classes"] == 2 and "spectral_gap" not in doc
    assert main(["decode", "--scores", str(f), "--json", "--law"]) == 0
    law = json.loads(capsys.readouterr().out)["law"]
    # any-order: the first site is uniform, the second copies it
    assert np.allclose(law, [0.5, 0, 0, 0.5], atol=1e-15)


def test_minus_inf_in_a_full_context_of_an_irreducible_chain(tmp_path, capsys):
    """One zero conditional that keeps the chain irreducible: site 0 never turns to 0 next to x_1 = 0.
    The stationary law of Glauber on {00, 01, 10, 11} is then the closed form below."""
    t = np.zeros((2, 3, 2))
    t[0, 0, 0] = -np.inf  # p_0(0 | x_1 = 0) = 0
    f = save_partial(tmp_path / "one.npz", t)
    assert main(["exact", "--scores", str(f), "--json", "--stationary"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # P (states 00 01 10 11): site 0 next to x_1 = 0 always turns to 1, every other move is uniform
    P = np.array([[0.25, 0.25, 0.5, 0], [0.25, 0.5, 0, 0.25], [0, 0, 0.75, 0.25], [0, 0.25, 0.25, 0.5]])
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(abs(w - 1))])
    pi /= pi.sum()
    assert np.allclose(doc["stationary"]["value"], pi, rtol=1e-12)
    assert "reason" in doc["paper_g"]  # paper G's constants assume positive conditionals: said, not NaN


def test_a_context_with_every_entry_minus_inf_is_refused(tmp_path, capsys):
    t = copy_table()
    t[1, 2, :] = -np.inf  # site 1 with site 0 masked: no symbol possible
    f = save_partial(tmp_path / "dead.npz", t)
    with pytest.raises(ValueError) as info:
        load_scores(f)
    one_line(info.value, "every row of the table needs a finite score")
    for command in ("exact", "decode"):
        assert main([command, "--scores", str(f)]) == 2
        assert "every row" in capsys.readouterr().err
    full = np.zeros((2, 2, 2))
    full[0, 1, :] = -np.inf
    with pytest.raises(ValueError, match="every row"):
        ScoreTable(StateSpace(2, 2), full)
    full[0, 1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ScoreTable(StateSpace(2, 2), full)
