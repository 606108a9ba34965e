"""The command line's rough edges: global options anywhere, a closed pipe, plain help, one --threads
default, a fast error for an unreachable hub, no .hypothesis/ in the working folder, python -m mlmix."""

import argparse
import os
import subprocess
import sys
import time

import pytest

from mlmix.cli import main
from mlmix.commands.options import DEFAULT_THREADS, plain
from mlmix.errors import MemoryLimitError


@pytest.mark.parametrize("argv", [
    ["--max-memory", "1", "exact", "--graph", "cycle:3"],
    ["exact", "--max-memory", "1", "--graph", "cycle:3"],
    ["exact", "--graph", "cycle:3", "--max-memory=1"],
])
def test_max_memory_anywhere(argv, capsys):
    assert main(argv) == 2
    assert "memory limit of 1 B" in capsys.readouterr().err


@pytest.mark.parametrize("where", [0, 1, 3, 5])
def test_debug_anywhere_shows_the_exception(where):
    argv = ["exact", "--graph", "cycle:3", "--max-memory", "1"]
    argv.insert(where, "--debug")
    with pytest.raises(MemoryLimitError):
        main(argv)


def test_run_takes_global_options_after_its_name(tmp_path, capsys):
    # without --debug anywhere being taken out, the run's own parser would refuse it (exit 2)
    assert main(["run", "tightness", "--out", str(tmp_path / "o"), "--debug", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


class _ClosedPipe:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_closed_pipe_in_process(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["exact", "--graph", "cycle:3"]) == 141
    assert capsys.readouterr().err == ""


def test_closed_pipe_in_a_subprocess():
    """`mlmix exact | head -0`: the reader is gone before the first line is written."""
    proc = subprocess.Popen([sys.executable, "-m", "mlmix", "exact", "--graph", "cycle:3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()  # nothing but a late start-up's line on a loaded machine (if_late)
    assert proc.wait(timeout=120) == 141 and all("(still running after " in line for line in err.splitlines())


def test_plain_help():
    assert plain("Load ``x.bin`` with :func:`~mlmix.cache.cache_dir` or :class:`Chain`::") == \
        "Load x.bin with cache_dir or Chain:"
    text = subprocess.run([sys.executable, "-m", "mlmix", "convert", "--help"], capture_output=True, text=True,
                          timeout=120).stdout
    assert "pytorch_model.bin" in text and "``" not in text and ":func:" not in text


def test_one_threads_default():
    from mlmix.commands import estimate, exact
    from mlmix.runs.common import add_common_arguments

    parsers = [argparse.ArgumentParser() for _ in range(3)]
    exact.configure(parsers[0])
    estimate.configure(parsers[1])
    add_common_arguments(parsers[2])
    assert [p.get_default("threads") for p in parsers] == [DEFAULT_THREADS] * 3 == [1] * 3


def test_unreachable_hub_fails_fast(monkeypatch):
    from mlmix.empirical.models.mlm import hub_unreachable, load_pretrained

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused at once
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert "127.0.0.1:9" in hub_unreachable()
    start = time.perf_counter()
    with pytest.raises(ValueError, match="cannot be reached .* not in the local cache"):
        from transformers import AutoModelForMaskedLM

        load_pretrained(AutoModelForMaskedLM, "mlmix-test/no-such-model")
    assert time.perf_counter() - start < 10


def test_verify_keeps_hypothesis_files_in_the_user_cache(tmp_path):
    cache = tmp_path / "cache"
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, MLMIX_CACHE=str(cache))
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    done = subprocess.run([sys.executable, "-m", "mlmix", "verify", "--theorem", "glauber.thm8", "--examples", "2"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert list(work.iterdir()) == [] and (cache / "hypothesis").is_dir()
