"""``mlmix/files.py``: atomic writes leave the old file (or none) and no temporary when the writer fails;
strict JSON (NaN and inf as null, numpy and results unwrapped, finite floats bit-exact); OutputDir
refuses another run's parameters unless asked to overwrite, resumes with the same ones, refuses planted
links and a second writer; append/truncate refuse links; checkpoints resume only with equal settings."""

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from mlmix import files
from mlmix.files import (
    LOCK,
    MANIFEST,
    Checkpoint,
    OutputDir,
    append_text,
    atomic_save_figure,
    atomic_save_npz,
    atomic_write_bytes,
    atomic_write_csv,
    atomic_write_json,
    atomic_write_text,
    dumps_json,
    jsonable,
    read_json,
    truncate_file,
)
from mlmix.theory.results import Result


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------------------------------- atomic writes


def test_atomic_write_replaces_the_file_readably(tmp_path):
    target = tmp_path / "deep" / "er" / "out.txt"
    atomic_write_text(target, "first\n")
    atomic_write_text(target, "second é\n")
    assert target.read_text(encoding="utf-8") == "second é\n" and listing(target.parent) == ["out.txt"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not mkstemp's 0600
    with pytest.raises(ValueError, match="is a folder") as info:
        atomic_write_bytes(tmp_path, b"x")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fail", ["fsync", "replace"])
def test_a_failing_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, fail):
    target = tmp_path / "result.json"
    atomic_write_json(target, {"value": 1})

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, fail, boom)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_json(target, {"value": 2, "big": list(range(1000))})
    monkeypatch.undo()
    assert read_json(target) == {"value": 1} and listing(tmp_path) == ["result.json"]


def test_an_interrupted_write_of_a_new_file_leaves_nothing(tmp_path, monkeypatch):
    """KeyboardInterrupt during the write (BaseException, not Exception) still removes the temporary."""
    real_fdopen = os.fdopen

    class Interrupting:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fdopen", lambda fd, mode: Interrupting(real_fdopen(fd, mode)))
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(tmp_path / "new.txt", "x" * 10_000)
    monkeypatch.undo()
    assert listing(tmp_path) == []


def test_writers_that_raise_before_writing_create_nothing(tmp_path):
    def rows():
        yield [1, 2.5]
        raise RuntimeError("the producer failed")

    with pytest.raises(RuntimeError):
        atomic_write_csv(tmp_path / "t.csv", ["a", "b"], rows())

    class Figure:
        def savefig(self, buf, **kwargs):
            buf.write(b"%PDF-partial")
            raise RuntimeError("the renderer failed")

    with pytest.raises(RuntimeError):
        atomic_save_figure(Figure(), tmp_path / "f.pdf")
    loop = []
    loop.append(loop)
    with pytest.raises(RecursionError):  # a structure that cannot be serialised: refused before any write
        atomic_write_json(tmp_path / "loop.json", {"ok": 1, "loop": loop})
    assert listing(tmp_path) == []


def test_csv_and_npz_round_trip(tmp_path):
    atomic_write_csv(tmp_path / "t.csv", ["x", "y"], [[np.float64(0.1), np.nan], [np.int64(3), "a,b"]])
    assert (tmp_path / "t.csv").read_text().splitlines() == ["x,y", "0.1,", '3,"a,b"']
    arrays = {"P": np.random.default_rng(0).random((4, 4)), "labels": np.array(["a", "bc"])}
    atomic_save_npz(tmp_path / "a.npz", **arrays)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as z:
        assert set(z.files) == set(arrays) and all(np.array_equal(z[k], arrays[k]) for k in arrays)


# ---------------------------------------------------------------------------------------- strict JSON


@dataclass
class Point:
    x: float
    tags: tuple


def test_strict_json_writes_non_finite_as_null():
    obj = {"nan": float("nan"), "inf": np.float32(np.inf), "ninf": -math.inf, 3: np.arange(3),
           "arr": np.array([1.0, np.nan, np.inf]), "flag": np.bool_(True), "set": {np.int64(2)},
           "path": Path("a") / "b", "point": Point(np.float64(0.5), (1, None))}
    text = dumps_json(obj)
    for token in ("NaN", "Infinity"):
        assert token not in text
    back = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict token {c}"))
    assert back == {"nan": None, "inf": None, "ninf": None, "3": [0, 1, 2], "arr": [1.0, None, None], "flag": True,
                    "set": [2], "path": os.path.join("a", "b"), "point": {"x": 0.5, "tags": [1, None]}}
    assert type(jsonable(np.int32(4))) is int and type(jsonable(np.float16(0.5))) is float
    assert jsonable(object).startswith("<class")  # anything else: its repr, never a crash


def test_results_are_expanded():
    r = Result.approximate("gap", 1e-300, 1e-15, "GTH")
    unknown = Result.interval("gap", 0.0, float("inf"), "Cheeger", "no upper bound")
    out = json.loads(dumps_json({"gap": r, "unknown": unknown}))
    assert out["gap"]["value"] == 1e-300 and out["gap"]["method"] == "GTH" and out["gap"]["rel_error"] == 1e-15
    assert out["unknown"]["value"] is None and out["unknown"]["upper"] is None and out["unknown"]["lower"] == 0.0


def test_finite_floats_round_trip_bit_exactly(tmp_path):
    rng = np.random.default_rng(1)
    values = np.r_[rng.standard_normal(50) * 10.0 ** rng.integers(-300, 300, 50), 5e-324, 1.7976931348623157e308,
                   -0.0]
    atomic_write_json(tmp_path / "v.json", {"v": values})
    back = np.array(read_json(tmp_path / "v.json")["v"])
    assert back.tobytes() == values.tobytes()


def test_read_json_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="run manifest .* does not exist"):
        read_json(tmp_path / "absent.json", "run manifest")
    (tmp_path / "bad.json").write_text('{"a": 1,\n')
    with pytest.raises(ValueError, match="not valid JSON") as info:
        read_json(tmp_path / "bad.json")
    assert "\n" not in str(info.value)
    (tmp_path / "latin.json").write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(ValueError, match="unreadable"):
        read_json(tmp_path / "latin.json")


# ---------------------------------------------------------------------------------------- append and truncate


def test_append_and_truncate(tmp_path):
    log = tmp_path / "sub" / "chains.jsonl"
    append_text(log, '{"a": 1}\n')
    append_text(log, '{"b": 2}\n{"c"')
    assert log.read_text() == '{"a": 1}\n{"b": 2}\n{"c"'
    truncate_file(log, len('{"a": 1}\n{"b": 2}\n'))
    assert log.read_text().splitlines() == ['{"a": 1}', '{"b": 2}']
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    link = tmp_path / "sub" / "link.jsonl"
    link.symlink_to(outside)
    for call in (lambda: append_text(link, "x"), lambda: truncate_file(link, 0)):
        with pytest.raises(ValueError, match="symbolic link") as info:
            call()
        assert "\n" not in str(info.value)
    assert outside.read_text() == "keep"


# ---------------------------------------------------------------------------------------- output folders


def run(folder, params, command="run traps", **kwargs):
    with OutputDir(folder, command, params, **kwargs) as out:
        atomic_write_text(out.file("result.txt"), dumps_json(params))
        return out.resumed


def test_output_dir_resumes_with_the_same_parameters(tmp_path):
    folder = tmp_path / "out"
    params = {"seed": 1, "eps": float("nan"), "sizes": np.array([2, 3])}  # NaN compares equal as null
    assert run(folder, params) is False
    manifest = read_json(folder / MANIFEST)
    assert manifest["command"] == "run traps" and manifest["params"] == {"seed": 1, "eps": None, "sizes": [2, 3]}
    assert manifest["schema"].startswith("mlmix.run/") and "mlmix_version" in manifest
    assert run(folder, dict(params)) is True
    assert listing(folder) == sorted([MANIFEST, "result.txt"])  # the lock is gone after each run


def test_output_dir_refuses_other_parameters_unless_overwrite(tmp_path):
    folder = tmp_path / "out"
    run(folder, {"seed": 1, "n": 3})
    (folder / "extra.csv").write_text("old")
    with pytest.raises(ValueError, match="another run .*seed: 1 there, 2 now") as info:
        run(folder, {"seed": 2, "n": 3})
    assert "\n" not in str(info.value) and "--overwrite" in str(info.value)
    with pytest.raises(ValueError, match="written by run traps"):
        run(folder, {"seed": 1, "n": 3}, command="run other")
    assert read_json(folder / MANIFEST)["params"] == {"seed": 1, "n": 3} and (folder / "extra.csv").exists()
    assert run(folder, {"seed": 2, "n": 3}, overwrite=True) is False
    assert listing(folder) == sorted([MANIFEST, "result.txt"])  # the earlier run's files were removed
    assert read_json(folder / MANIFEST)["params"] == {"seed": 2, "n": 3}


def test_output_dir_refuses_a_foreign_folder_or_a_file(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("precious")
    with pytest.raises(ValueError, match="not empty and was not written by mlmix run traps"):
        run(folder, {"seed": 1})
    assert listing(folder) == ["notes.txt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        run(tmp_path / "file", {})
    assert run(folder, {"seed": 1}, overwrite=True) is False and listing(folder) == sorted([MANIFEST, "result.txt"])


@pytest.mark.parametrize("where", ["top", "nested"])
def test_output_dir_refuses_planted_links_and_writes_nothing_through_them(tmp_path, where):
    folder = tmp_path / "out"
    run(folder, {"seed": 1})
    outside = tmp_path / "victim.txt"
    outside.write_text("keep")
    place = folder / "result.txt" if where == "top" else folder / "sub" / "x.txt"
    place.parent.mkdir(exist_ok=True)
    place.unlink(missing_ok=True)
    place.symlink_to(outside)
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="symbolic link") as info:
            run(folder, {"seed": 1}, overwrite=overwrite)
        assert str(place) in str(info.value) and "\n" not in str(info.value)
    assert outside.read_text() == "keep" and place.is_symlink()


def test_a_second_writer_is_refused_and_the_lock_released(tmp_path):
    folder = tmp_path / "out"
    with OutputDir(folder, "run traps", {"seed": 1}):
        assert (folder / LOCK).exists()
        with pytest.raises(ValueError, match="another mlmix run is writing"):
            with OutputDir(folder, "run traps", {"seed": 1}):
                pass
    assert not (folder / LOCK).exists()
    # a refusal in the manifest check releases the lock too: the next run can enter
    with pytest.raises(ValueError):
        run(folder, {"seed": 2})
    assert not (folder / LOCK).exists() and run(folder, {"seed": 1}) is True


# ---------------------------------------------------------------------------------------- checkpoints


def test_checkpoint_resumes_only_with_equal_settings(tmp_path):
    path = tmp_path / "ck.json"
    ck = Checkpoint(path, {"eps": 0.25, "t": np.int64(3)})
    assert len(ck) == 0 and "a" not in ck
    ck.record("a", {"gap": np.float64(0.5), "bad": float("nan")})
    ck.record("b", [1, 2])
    again = Checkpoint(path, {"eps": 0.25, "t": 3})
    assert len(again) == 2 and again["a"] == {"gap": 0.5, "bad": None} and again["b"] == [1, 2]
    assert len(Checkpoint(path, {"eps": 0.5, "t": 3})) == 0  # other settings: afresh
    path.write_text('{"settings": {"eps"')  # torn file: afresh, not a crash
    assert len(Checkpoint(path, {"eps": 0.25, "t": 3})) == 0
    again.remove()
    assert not path.exists()
    again.remove()  # removing twice is harmless
