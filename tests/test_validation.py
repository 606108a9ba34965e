"""``mlmix/validation.py``: every ``check_*`` accepts valid input in canonical form and refuses NaN, inf,
out-of-range values, wrong shapes and wrong kinds with a one-line ValueError / TypeError naming the
argument; sizes and durations parse (and round-trip through format_bytes); the memory limit is scoped."""

import json
import struct

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mlmix.errors import MemoryLimitError
from mlmix.validation import (
    SCORES_FORMAT,
    check_eps,
    check_int,
    check_law_spec,
    check_memory,
    check_real,
    check_safetensors_header,
    check_score_arrays,
    check_state_set,
    check_steps,
    check_temperature,
    check_tokenizer_files,
    check_transition_matrix,
    check_vector,
    check_weight_values,
    current_memory_limit,
    format_bytes,
    load_arrays,
    matrix_from_arrays,
    memory_limit,
    parse_duration,
    parse_size,
)


def refused(err, call, *words):
    """call() raises ``err`` with a one-line message containing ``words``."""
    with pytest.raises(err) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


# ---------------------------------------------------------------------------------------- scalars


def test_check_int():
    assert check_int(np.int64(7), "k", minimum=0, maximum=7) == 7 and type(check_int(np.int8(3), "k")) is int
    refused(TypeError, lambda: check_int(True, "k"), "k must be an int", "bool")
    refused(TypeError, lambda: check_int(3.0, "k"), "k must be an int", "float")
    refused(TypeError, lambda: check_int("3", "k"), "str")
    refused(ValueError, lambda: check_int(-1, "k", minimum=0), "k must be >= 0, got -1")
    refused(ValueError, lambda: check_int(8, "k", maximum=7), "k must be <= 7, got 8")


def test_check_real_and_its_special_cases():
    assert check_real(np.float32(0.5), "x") == 0.5 and type(check_real(2, "x")) is float
    assert check_real(0.0, "x", minimum=0.0) == 0.0 and check_real(1.0, "x", maximum=1.0) == 1.0
    for bad in (float("nan"), float("inf"), -np.inf):
        refused(ValueError, lambda b=bad: check_real(b, "x"), "x must be finite")
    refused(TypeError, lambda: check_real(np.bool_(True), "x"), "real number")
    refused(TypeError, lambda: check_real("0.5", "x"), "real number")
    refused(TypeError, lambda: check_real(1j, "x"), "complex")
    refused(ValueError, lambda: check_real(10**400, "x"), "x must be finite")  # not float()'s OverflowError
    refused(ValueError, lambda: check_real(0.0, "x", minimum=0.0, open_min=True), "x must be > 0")
    refused(ValueError, lambda: check_real(1.0, "x", maximum=1.0, open_max=True), "x must be < 1")
    refused(ValueError, lambda: check_real(-1e-300, "x", minimum=0.0), "x must be >= 0")
    assert check_eps(1e-300) == 1e-300 and check_temperature(1e-3) == 1e-3 and check_steps(0) == 0
    for bad in (0.0, 1.0, 1.5):
        refused(ValueError, lambda b=bad: check_eps(b), "eps must be")
    refused(ValueError, lambda: check_temperature(0.0, "T"), "T must be > 0")
    refused(ValueError, lambda: check_steps(-1), "t must be >= 0")
    refused(TypeError, lambda: check_steps(2.0), "t must be an int")


# ---------------------------------------------------------------------------------------- arrays


def test_check_vector():
    v = check_vector([0.25, 0.75], 2, "pi", probability=True)
    assert v.dtype == np.float64 and v.tolist() == [0.25, 0.75]
    assert check_vector(np.array([1, 2, 3]), 3, "f", positive=True).dtype == np.float64
    refused(ValueError, lambda: check_vector([1.0, 2.0], 3, "f"), "over the 3 states", "(2,)")
    refused(ValueError, lambda: check_vector([[1.0, 2.0]], 2, "f"), "(1, 2)")
    refused(ValueError, lambda: check_vector([1.0, np.nan], 2, "f"), "f contains NaN")
    refused(ValueError, lambda: check_vector([1.0, np.inf], 2, "f"), "infinite")
    refused(ValueError, lambda: check_vector([1.0, -1e-300], 2, "f", nonnegative=True), "negative")
    refused(ValueError, lambda: check_vector([1.0, 0.0], 2, "f", positive=True), "1 entries are <= 0")
    refused(ValueError, lambda: check_vector([0.5, 0.6], 2, "pi", probability=True), "must sum to 1")
    refused(TypeError, lambda: check_vector(["a", "b"], 2, "f"), "f must be a vector of real numbers")
    # a complex vector is refused, not cast to its real part
    refused(TypeError, lambda: check_vector(np.array([0.5 + 1j, 0.5]), 2, "pi"), "complex128", "imaginary part")
    # the tolerance is honoured: 1e-10 off passes, 1e-8 does not
    check_vector([0.5, 0.5 + 1e-10], 2, "pi", probability=True)
    refused(ValueError, lambda: check_vector([0.5, 0.5 + 1e-8], 2, "pi", probability=True), "tol 1e-09")


def test_check_transition_matrix_dense():
    P = check_transition_matrix([[0.5, 0.5], [1, 0]])
    assert isinstance(P, np.ndarray) and P.dtype == np.float64
    check_transition_matrix([[0.5, 0.5 + 1e-10], [1, 0]])  # within tol
    refused(ValueError, lambda: check_transition_matrix([[0.5, 0.5], [0.5, 0.6]]), "row 1 sums to")
    refused(ValueError, lambda: check_transition_matrix([[np.nan, 1.0], [1, 0]]), "NaN or infinite")
    refused(ValueError, lambda: check_transition_matrix([[-0.5, 1.5], [1, 0]]), "negative entries")
    refused(ValueError, lambda: check_transition_matrix(np.ones((2, 2, 2)) / 2), "2-dimensional")
    refused(ValueError, lambda: check_transition_matrix(np.ones((2, 3)) / 3), "square and non-empty")
    refused(ValueError, lambda: check_transition_matrix(np.zeros((0, 0))), "non-empty")
    refused(TypeError, lambda: check_transition_matrix(np.eye(2, dtype=complex)), "complex")
    refused(TypeError, lambda: check_transition_matrix([["a", "b"], ["c", "d"]]), "real numbers")
    refused(TypeError, lambda: check_transition_matrix({"P": 1}), "dict")


def test_check_transition_matrix_sparse():
    # duplicated (0, 1) entries are summed and unsorted indices sorted
    M = sp.csr_array((np.array([0.25, 0.5, 0.25, 1.0]), np.array([1, 0, 1, 0]), np.array([0, 3, 4])), shape=(2, 2))
    P = check_transition_matrix(M)
    assert isinstance(P, sp.csr_array) and P.has_canonical_format
    np.testing.assert_array_equal(P.toarray(), [[0.5, 0.5], [1.0, 0.0]])
    assert isinstance(check_transition_matrix(sp.coo_matrix(np.eye(3))), sp.csr_array)
    broken = sp.csr_array(np.eye(2))
    broken.indices[1] = 5
    refused(ValueError, lambda: check_transition_matrix(broken), "invalid sparse structure")
    refused(TypeError, lambda: check_transition_matrix(sp.csr_array(np.eye(2, dtype=complex))), "complex128")
    refused(ValueError, lambda: check_transition_matrix(sp.csr_array([[0.5, 0.0], [0.0, 1.0]])), "row 0 sums")


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_check_transition_matrix_from_torch():
    T = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64)
    np.testing.assert_array_equal(check_transition_matrix(T), T.numpy())
    S = check_transition_matrix(T.to_sparse())
    assert isinstance(S, sp.csr_array) and np.array_equal(S.toarray(), T.numpy())
    assert np.array_equal(check_transition_matrix(T.to_sparse_csr()).toarray(), T.numpy())
    refused(TypeError, lambda: check_transition_matrix(T.float()), "must be float64", "float32")
    refused(TypeError, lambda: check_transition_matrix(T.to(torch.complex128)), "complex tensor")


def test_check_state_set():
    np.testing.assert_array_equal(check_state_set([0, 2], 4), [True, False, True, False])
    np.testing.assert_array_equal(check_state_set(np.int64(3), 4), [False, False, False, True])
    mask = np.array([False, True, False])
    out = check_state_set(mask, 3)
    assert out is not mask and out.tolist() == mask.tolist()
    assert not check_state_set([], 3, nonempty=False).any()
    refused(ValueError, lambda: check_state_set([], 3, "B"), "B must be a non-empty set")
    refused(ValueError, lambda: check_state_set([0, 3], 3, "B"), "B: state indices must lie in [0, 3)")
    refused(ValueError, lambda: check_state_set([-1], 3, "B"), "[0, 3)")
    refused(ValueError, lambda: check_state_set([True, False], 3, "B"), "shape (3,)")
    refused(ValueError, lambda: check_state_set([[0, 1]], 3, "B"), "1-d")
    refused(TypeError, lambda: check_state_set([0.5], 3, "B"), "float64")
    refused(ValueError, lambda: check_state_set([0, 1, 2], 3, "B", proper=True), "proper subset")


# ---------------------------------------------------------------------------------------- array files


def test_load_arrays_and_matrix_from_arrays(tmp_path):
    P = np.array([[0.5, 0.5], [0.25, 0.75]])
    np.save(tmp_path / "p.npy", P)
    arrays = load_arrays(tmp_path / "p.npy", "matrix file")
    assert list(arrays) == [""] and np.array_equal(matrix_from_arrays(arrays), P)
    for fmt in ("csr", "csc", "coo"):
        sp.save_npz(tmp_path / f"{fmt}.npz", getattr(sp, f"{fmt}_array")(P))
        got = matrix_from_arrays(load_arrays(tmp_path / f"{fmt}.npz", "matrix file"))
        assert np.array_equal(sp.csr_array(got).toarray(), P)
    np.savez(tmp_path / "mine.npz", mlmix_format=1, kind="dense", P=P)
    assert np.array_equal(matrix_from_arrays(load_arrays(tmp_path / "mine.npz", "m")), P)
    refused(ValueError, lambda: load_arrays(tmp_path / "absent.npz", "matrix file"), "matrix file", "does not exist")
    data = (tmp_path / "csr.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    refused(ValueError, lambda: load_arrays(tmp_path / "cut.npz", "matrix file"), "not a readable matrix file")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object))
    refused(ValueError, lambda: load_arrays(tmp_path / "obj.npy", "matrix file"), "not a readable")
    refused(ValueError, lambda: matrix_from_arrays({"x": P}), "unknown .npz layout")
    refused(ValueError, lambda: matrix_from_arrays({"format": np.array("dia"), "shape": np.array([2, 2]),
                                                    "data": P}), "unsupported sparse format 'dia'")
    refused(ValueError, lambda: matrix_from_arrays({"mlmix_format": 1, "kind": "csr", "data": P}), "malformed")


# ---------------------------------------------------------------------------------------- model files


def safetensors(path, tensors: dict, edit=None):
    """A .safetensors file written by hand: 8-byte length, JSON header, the bytes (``edit`` alters the header)."""
    header, blobs, at = {}, [], 0
    for key, arr in tensors.items():
        raw = arr.tobytes()
        header[key] = {"dtype": {"float32": "F32", "int64": "I64"}[str(arr.dtype)], "shape": list(arr.shape),
                       "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    if edit:
        edit(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return path


def test_check_safetensors_header(tmp_path):
    tensors = {"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32), "position_ids": np.arange(4)}
    header = check_safetensors_header(safetensors(tmp_path / "ok.safetensors", tensors))
    assert header["w"]["shape"] == [2, 3]
    from safetensors.numpy import save_file  # the library's own writer passes too

    save_file(tensors, str(tmp_path / "lib.safetensors"))
    assert set(check_safetensors_header(tmp_path / "lib.safetensors")) >= set(tensors)

    def retype(h):
        h["w"]["dtype"] = "I32"

    def reshape(h):
        h["w"]["shape"] = [3, 3]

    def unknown(h):
        h["b"]["dtype"] = "F12"

    def gap(h):
        h["b"]["data_offsets"] = [h["b"]["data_offsets"][0] + 4, h["b"]["data_offsets"][1]]
        h["b"]["shape"] = [2]

    for edit, words in ((retype, "a weight stored as I32"), (reshape, "does not match"), (unknown, "unknown dtype"),
                        (gap, "overlap or leave gaps")):
        path = safetensors(tmp_path / f"{edit.__name__}.safetensors", tensors, edit)
        refused(ValueError, lambda p=path: check_safetensors_header(p), str(path), words)
    (tmp_path / "short.safetensors").write_bytes(b"\x01\x02")
    refused(ValueError, lambda: check_safetensors_header(tmp_path / "short.safetensors"), "corrupt or incomplete")
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    refused(ValueError, lambda: check_safetensors_header(tmp_path / "huge.safetensors"), "exceeds the file")


def test_check_tokenizer_files(tmp_path):
    check_tokenizer_files(tmp_path)  # nothing there: nothing to refuse
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    check_tokenizer_files(tmp_path)
    (tmp_path / "vocab.json").write_text("[1, 2]")
    refused(ValueError, lambda: check_tokenizer_files(tmp_path), "vocab.json must hold a JSON object, got list")
    (tmp_path / "vocab.json").write_text('{"a": 0')
    refused(ValueError, lambda: check_tokenizer_files(tmp_path), "vocab.json is unreadable or not valid JSON")
    (tmp_path / "vocab.json").unlink()
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "Nonsense"}}')
    refused(ValueError, lambda: check_tokenizer_files(tmp_path), "tokenizer.json is not a valid tokenizer file")


def test_check_law_spec():
    spec = {"law": {"tokens": ["A", "B"], "length": 2, "coupling": 0.5, "fields": [[0, 1], [1, 0]]}}
    law = check_law_spec(spec, "law.json")
    assert law["fields"].shape == (2, 2) and law["length"] == 2 and law["coupling"] == 0.5
    refused(ValueError, lambda: check_law_spec([], "law.json"), "law.json has no 'law' object")
    refused(ValueError, lambda: check_law_spec({"law": {"tokens": ["A"]}}, "law.json"), "lacks length, coupling, fields")
    bad = json.loads(json.dumps(spec))
    bad["law"]["fields"] = [[0, 1]]
    refused(ValueError, lambda: check_law_spec(bad, "law.json"), "of shape (2, 2), got (1, 2)")
    bad["law"]["fields"] = [[0, float("nan")], [1, 0]]
    refused(ValueError, lambda: check_law_spec(bad, "law.json"), "must be finite")
    bad["law"]["coupling"] = float("inf")
    refused(ValueError, lambda: check_law_spec(bad, "law.json"), "coupling must be finite")
    bad = json.loads(json.dumps(spec))
    bad["law"]["length"] = 0
    refused(ValueError, lambda: check_law_spec(bad, "law.json"), "length must be >= 1")
    bad["law"]["tokens"] = ["A", 1]
    refused(ValueError, lambda: check_law_spec(bad, "law.json"), "non-empty list of strings")


def test_check_weight_values():
    check_weight_values([("w", torch.ones(3)), ("ids", torch.tensor([10**9])), ("e", torch.empty(0))], "model")
    refused(ValueError, lambda: check_weight_values([("w", torch.tensor([1.0, 2e9]))], "model"), "weight w", "2e+09")
    refused(ValueError, lambda: check_weight_values([("w", torch.tensor([np.nan]))], "model"), "non-finite")
    check_weight_values([("w", torch.tensor([5.0]))], "model", bound=5.0)
    refused(ValueError, lambda: check_weight_values([("w", torch.tensor([5.5]))], "model", bound=5.0), "|w| = 5.5")


# ---------------------------------------------------------------------------------------- sizes and memory


@pytest.mark.parametrize("text, size", [("512MiB", 512 * 2**20), ("4G", 4 * 10**9), ("2.5GB", 2_500_000_000),
                                        (" 3 kib ", 3072), ("1e3", 1000), ("100", 100), (7, 7), ("1TiB", 2**40)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("n, text", [(1, "1 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                     (5 * 2**20, "5.0 MiB"), (int(1.5 * 2**30), "1.5 GiB"), (3 * 2**40, "3.0 TiB"),
                                     (2**50, "1024.0 TiB")])
def test_format_bytes_round_trips_through_parse_size(n, text):
    """One decimal of the largest binary unit below n: back to n within half a unit of that decimal (5%)."""
    assert format_bytes(n) == text
    back = parse_size(text.replace(" ", ""))
    assert back == n if n < 1024 else abs(back / n - 1) <= 0.05


@pytest.mark.parametrize("bad", ["", "lots", "5 parsecs", "-1GB", "0", "0.1", "GB", "1,5GB"])
def test_parse_size_refuses(bad):
    refused(ValueError, lambda: parse_size(bad, "--max-memory"), "--max-memory")


def test_parse_size_refuses_non_positive_and_bool():
    refused(ValueError, lambda: parse_size(0), "--max-memory must be >= 1")
    refused(ValueError, lambda: parse_size(True), "--max-memory must be a size")


@pytest.mark.parametrize("text, seconds", [("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("2 min", 120.0),
                                           (" 3 SEC ", 3.0), ("45", 45.0), (0.25, 0.25), ("2hr", 7200.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad, err", [("", ValueError), ("soon", ValueError), ("-5s", ValueError), ("0m", ValueError),
                                      pytest.param(10**400, ValueError, id="10**400"),
                                      ("5 days", ValueError), (0, ValueError), (float("nan"), ValueError),
                                      (float("inf"), ValueError), (True, ValueError)])
def test_parse_duration_refuses(bad, err):
    refused(err, lambda: parse_duration(bad, "--budget"), "--budget")


def test_memory_limit_is_scoped_and_check_memory_refuses_with_both_figures():
    default = current_memory_limit()
    assert default > 0
    with memory_limit("1MiB"):
        assert current_memory_limit() == 2**20
        check_memory(2**20, "a table")
        msg = refused(MemoryLimitError, lambda: check_memory(2**20 + 1, "a table"), "a table needs about 1.0 MiB",
                      "limit of 1.0 MiB")
        with memory_limit(5000):
            assert current_memory_limit() == 5000
        with memory_limit(None):  # None: the default again inside
            assert current_memory_limit() > 2**20
        assert current_memory_limit() == 2**20
    assert "--max-memory" in msg
    assert abs(current_memory_limit() - default) <= 0.2 * default  # restored (the machine's free memory moves)
    assert issubclass(MemoryLimitError, ValueError)
    with pytest.raises(ValueError):
        with memory_limit("nonsense"):
            pass
    with pytest.raises(RuntimeError), memory_limit(100):
        raise RuntimeError("the limit is reset even when the block raises")
    assert current_memory_limit() != 100


# ---------------------------------------------------------------------------------------- score tables


def scores(kind="full", q=2, n=2, **extra):
    base = q if kind == "full" else q + 1
    table = np.random.default_rng(0).standard_normal((n, base ** (n - 1), q))
    return {"mlmix_format": SCORES_FORMAT, "kind": kind, "vocab_size": q, "length": n, "table": table, **extra}


def test_check_score_arrays():
    out = check_score_arrays(scores(temperature=0.5, tokens=np.array(["A", "B"])))
    assert out["temperature"] == 0.5 and out["tokens"] == ["A", "B"] and out["table"].shape == (2, 2, 2)
    partial = scores("partial", q=3, n=2)
    partial["table"][0, 0, :2] = -np.inf
    assert check_score_arrays(partial)["kind"] == "partial" and check_score_arrays(scores())["tokens"] is None
    bad = scores("partial")
    bad["table"][1, 1, :] = -np.inf
    refused(ValueError, lambda: check_score_arrays(bad, "s.npz"), "s.npz: every row of the table needs a finite")
    full = scores()
    full["table"][0, 0, 0] = -np.inf  # a zero conditional (the row keeps a finite entry)
    assert np.isneginf(check_score_arrays(full)["table"][0, 0, 0])
    full["table"][0, 0, 0] = np.nan
    refused(ValueError, lambda: check_score_arrays(full), "entries must be finite")
    refused(ValueError, lambda: check_score_arrays(scores(mlmix_format="v0")), "is not 'mlmix-scores-1'")
    refused(ValueError, lambda: check_score_arrays(scores(kind="full", n=3) | {"length": 2}), "has shape (2, 2, 2)")
    refused(ValueError, lambda: check_score_arrays(scores(kind="odd")), "'full' or 'partial'")
    refused(ValueError, lambda: check_score_arrays({"table": np.zeros(1)}), "missing arrays")
    refused(ValueError, lambda: check_score_arrays(scores(vocab_size=1)), "vocab_size must be >= 2")
    refused(ValueError, lambda: check_score_arrays(scores(temperature=0.0)), "temperature must be > 0")
    refused(ValueError, lambda: check_score_arrays(scores(tokens=np.array(["A"]))), "1 tokens for |V| = 2")
    ints = scores()
    ints["table"] = ints["table"].astype(np.int64)
    refused(TypeError, lambda: check_score_arrays(ints), "table must hold floats")
