"""The middle of the command layer: the registries drive the CLI's choices and option tables, one source
option group (mlmix.commands.source_options) serves exact, decode, diagnose and verify --mlm, no command
imports another command's module, --threads is set once (by mlmix itself), and Results are rendered by
Result.__format__ alone (its spec mini-language, checked here)."""

import ast
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlmix.cli import SUBCOMMANDS, main
from mlmix.commands.decode import sampler_options_table
from mlmix.commands.options import OneLineParser, torch_threads
from mlmix.commands.source_options import kernel_options_table
from mlmix.theory.kernels import DECODERS, KERNELS, DecoderSpec, KernelSpec
from mlmix.theory.results import Result

ROOT = Path(__file__).resolve().parents[2]


def _choices(command: str, flag: str) -> tuple[str, ...]:
    from importlib import import_module

    parser = OneLineParser()
    import_module(f"mlmix.commands.{command}").configure(parser)
    return tuple(parser._option_string_actions[flag].choices)


def test_the_kernel_registry_is_the_clis_choices_and_option_table(monkeypatch, capsys):
    """A kernel registered in a test is offered by --kernel (exact and diagnose), takes its own options
    and is refused others; it runs through Chain.from_source."""
    glauber = KERNELS["glauber"]
    spec = KernelSpec("glauber-copy", lambda s, order=None: glauber.build_dense(s),
                      lambda s, order=None: glauber.build_csr(s), None, {"order": None}, True,
                      "Glauber again", lambda source, options: "a copy of Glauber dynamics")
    monkeypatch.setitem(KERNELS, "glauber-copy", spec)
    assert "glauber-copy" in _choices("exact", "--kernel") and "glauber-copy" in _choices("diagnose", "--kernel")
    assert kernel_options_table()["glauber-copy"] == {"order": None}
    assert main(["exact", "--graph", "cycle:4", "--kernel", "glauber-copy", "--k", "2"]) == 2
    assert "--k is not an option of --kernel glauber-copy" in capsys.readouterr().err
    assert main(["exact", "--graph", "cycle:4", "--kernel", "glauber-copy", "--json"]) == 0
    copy = capsys.readouterr().out
    assert main(["exact", "--graph", "cycle:4", "--json"]) == 0
    original = capsys.readouterr().out
    assert "a copy of Glauber dynamics" in copy
    gap = lambda text: text.split('"spectral_gap"', 1)[1].split("}", 1)[0]
    assert gap(copy) == gap(original)


def test_the_decoder_registry_is_the_clis_choices_and_option_table(monkeypatch):
    spec = DecoderSpec("any-order-copy", {"k": 2}, "again", DECODERS["any-order"].moves, lambda n, p, v: n,
                       lambda p: "copy")
    monkeypatch.setitem(DECODERS, "any-order-copy", spec)
    assert "any-order-copy" in _choices("decode", "--sampler")
    assert sampler_options_table()["any-order-copy"] == {"k": 2}
    assert sampler_options_table()["threshold"] == {"threshold": 0.9}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_no_module_imports_a_command_but_the_entry_point():
    """Commands share the middle (options, source_options), never each other: the subcommands' modules
    (mlmix/commands/exact.py, decode.py, ...) are imported by mlmix/cli.py alone (by name, when their
    subcommand runs)."""
    commands = {module.rsplit(".", 1)[1] for module, _ in SUBCOMMANDS.values()}
    offenders = []
    for folder in ("mlmix", "theory", "verify", "empirical"):
        for path in (ROOT / folder).rglob("*.py"):
            for name in _imports(path):
                if any(name == f"mlmix.commands.{c}" or name.startswith(f"mlmix.commands.{c}.") for c in commands):
                    offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_threads_are_set_in_one_place():
    """In the commands, torch's thread count is set by options.torch_threads, which mlmix/cli.py calls
    around every command (set_threads is left to the runs, which parse their own options)."""
    calls = []
    for folder in ("mlmix", "theory", "verify", "empirical"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            if any(call in text for call in ("set_num_threads(", "set_threads(", "torch_threads(")):
                calls.append(path.relative_to(ROOT).as_posix())
    commands = sorted(c for c in calls if c.startswith("mlmix/commands/") or c == "mlmix/cli.py")
    assert commands == ["mlmix/cli.py", "mlmix/commands/options.py"]


def test_torch_threads_sets_the_count_when_torch_first_loads():
    code = ("import sys; from mlmix.commands.options import torch_threads\n"
            "with torch_threads(1):\n"
            "    assert 'torch' not in sys.modules\n"
            "    import torch\n"
            "    print(torch.get_num_threads())\n"
            "print(any(type(f).__name__ == '_AfterImport' for f in sys.meta_path))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr[-400:]
    assert out.stdout.split() == ["1", "False"]


def test_torch_threads_refuses_a_bad_count_and_leaves_nothing_behind(capsys):
    with pytest.raises(ValueError, match="--threads"):
        with torch_threads(0):
            pass
    assert not any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)
    assert main(["decode", "--graph", "cycle:3", "--threads", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# ------------------------------------------------------------------------------- Result.__format__

def test_result_format_spec_language():
    exact = Result.exact("gap", 0.25, "closed form")
    approx = Result.approximate("gap", 0.123456789, 1e-8, "Lanczos")
    interval = Result.interval("gap", 0.1, 0.3, "bounds", "not resolved here")
    half = Result.interval("rho", 0.5, None, "sample", "a sample maximum")
    nothing = Result.missing("gap", "-", "not computed")
    point = Result.interval("KL", math.inf, math.inf, "sum", "infinite")
    assert format(exact, ".6g/.4g|a-") == "0.25   (exact)"
    assert format(approx, ".6g/.4g|a-") == "0.123457   (rel. err <= 1e-08)"
    assert format(interval, ".6g/.4g|a-") == "[0.1, 0.3]   (not resolved)"
    assert format(half, ".6g/.4g|a-") == "[0.5, ?]   (not resolved)"
    assert format(nothing, ".6g/.4g|a-") == "-" and format(nothing, ".6g/.4g") == "[?, ?]"
    assert format(point, ".6g/.3g|-=") == "inf" and format(point, ".3g") == "[inf, inf]"
    assert format(half, ".4g|>") == ">= 0.5" and format(approx, ".4g|>") == "0.1235"
    assert format(interval, ".2f") == "[0.10, 0.30]"  # the format it always had
    assert format(exact, "") == str(exact)
    with pytest.raises(ValueError, match="unknown flag"):
        format(exact, ".3g|x")


@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(0, 1e3, allow_nan=False), st.sampled_from(".3g .6g .2e".split()))
def test_result_format_ends_are_the_number_format(lower, width, number):
    """An interval's ends are formatted exactly as the numbers themselves (the default ENDS is NUMBER)."""
    r = Result.interval("x", lower, lower + width, "m", "r")
    assert format(r, number) == f"[{lower:{number}}, {lower + width:{number}}]"
    assert format(r, number + "|a") == f"[{lower:{number}}, {lower + width:{number}}]   (not resolved)"
    assert format(r, f"{number}|>") == f">= {lower:{number}}"


def _renders_results_itself(function: ast.FunctionDef) -> bool:
    """Whether a function branches on a Result being resolved (``x.value is None``) and writes its
    interval ends into a string itself (an f-string of ``x.lower`` / ``x.upper``)."""
    branches = any(isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute)
                   and node.left.attr == "value" and isinstance(node.ops[0], (ast.Is, ast.IsNot))
                   for node in ast.walk(function))
    writes_ends = any(isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Attribute)
                      and node.value.attr in ("lower", "upper") for node in ast.walk(function))
    return branches and writes_ends


def test_the_commands_render_results_through_format_alone():
    """No command or run renders a Result by hand: every Result cell goes through format(result, spec)."""
    offenders = []
    for folder in ("commands", "runs"):
        for path in (ROOT / "mlmix" / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef) and _renders_results_itself(node):
                    offenders.append(f"{folder}/{path.name}:{node.name}")
    assert offenders == []


def test_exact_table_renders_an_unresolved_figure_as_its_interval(capsys):
    """A metastable chain's t_mix is an interval: '[lo, hi]   (not resolved)' in the table."""
    assert main(["exact", "--graph", "cycle:4", "--beta", "1", "--kernel", "mh"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "worst-start TV" in line)
    assert row.rstrip().endswith("(not resolved)") and "[" in row
    lo, hi = (float(x) for x in row.split("[", 1)[1].split("]", 1)[0].split(","))
    assert 1 <= lo <= hi
    assert np.isfinite(hi)
