"""The newcomer's path says what it is doing where it takes seconds: importing torch and transformers
(``from mlmix import MaskedLMConditionals``, ``mlmix estimate``, any ``--mlm``), loading a model's
weights, a command's start-up; each line on standard error only, none below the threshold, none with
``--no-progress`` / ``progress=False``."""

import sys
import time
import types

import pytest

import mlmix
import mlmix.progress as progress
from mlmix import cli
from mlmix.progress import announce, if_late, model_stack_seconds, no_announcements


@pytest.fixture
def no_model_stack(monkeypatch):
    """A process in which torch and transformers are not imported yet (restored afterwards)."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "transformers", raising=False)


@pytest.fixture
def model_stack(monkeypatch):
    """A process in which torch and transformers are already imported."""
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", types.ModuleType("torch")))
    monkeypatch.setitem(sys.modules, "transformers", sys.modules.get("transformers", types.ModuleType("transformers")))


@pytest.fixture
def lazy_heavy(monkeypatch):
    """A lazily exported name whose module counts as importing torch and transformers (a small stdlib
    module stands in for mlmix.empirical.models.mlm, which must not be imported twice)."""
    monkeypatch.setitem(mlmix._LAZY, "rgb_to_hsv", "colorsys")
    monkeypatch.setattr(mlmix, "_MODEL_STACK", {"colorsys"})
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)


def test_model_stack_seconds(no_model_stack):
    assert model_stack_seconds() == progress.TORCH_START + progress.TRANSFORMERS_START >= progress.DEFAULT_THRESHOLD


def test_model_stack_seconds_once_imported(model_stack):
    assert model_stack_seconds() == 0.0


def test_lazy_import_of_the_model_stack_is_announced(no_model_stack, lazy_heavy, capsys, monkeypatch):
    monkeypatch.delenv(progress.THRESHOLD_ENV, raising=False)
    mlmix.rgb_to_hsv  # noqa: B018 - the lazy attribute is the import
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "mlmix: importing torch and transformers for rgb_to_hsv (about 6 s) ...\n"


def test_lazy_import_is_quiet_once_torch_is_loaded(model_stack, lazy_heavy, capsys, monkeypatch):
    monkeypatch.delenv(progress.THRESHOLD_ENV, raising=False)
    mlmix.rgb_to_hsv  # noqa: B018
    assert capsys.readouterr() == ("", "")


def test_light_lazy_names_say_nothing(no_model_stack, capsys, monkeypatch):
    monkeypatch.setenv(progress.THRESHOLD_ENV, "0")
    mlmix.Chain  # noqa: B018 - not a model: no line even at threshold 0
    assert capsys.readouterr().err == ""


def test_announce_threshold_flag_and_silencer(capsys, monkeypatch):
    monkeypatch.delenv(progress.THRESHOLD_ENV, raising=False)
    assert not announce("short", 1.9)
    assert announce("long", 2.0)
    assert not announce("off", 60.0, enabled=False)
    with no_announcements():
        assert not announce("silenced", 60.0)
    with no_announcements(False):
        assert announce("not silenced", 60.0)
    assert capsys.readouterr() == ("", "mlmix: long (about 2 s) ...\nmlmix: not silenced (about 60 s) ...\n")


def test_if_late_says_once_when_late_only(capsys, monkeypatch):
    monkeypatch.setattr(progress, "late_after", lambda: 0.05)
    with if_late("fast"):
        pass
    with if_late("slow"):
        time.sleep(0.5)
    with if_late("slow but off", enabled=False):
        time.sleep(0.3)
    with no_announcements(), if_late("slow but silenced"):
        time.sleep(0.3)
    assert capsys.readouterr() == ("", "mlmix: slow (still running after < 1 s) ...\n")


# ------------------------------------------------------------------ the command line


@pytest.fixture
def fake_command(monkeypatch):
    """Subcommands ``slow`` (0.4 s to configure) and ``estimate`` (its name: a model-loading command)
    backed by a stand-in module, so that no real work runs."""
    module = types.ModuleType("mlmix_fake_command")

    def configure(parser):
        time.sleep(module.delay)
        parser.add_argument("--no-progress", action="store_true")

    module.configure, module.run, module.delay = configure, lambda args: 0, 0.0
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.SUBCOMMANDS, "slow", (module.__name__, "a slow start-up"))
    monkeypatch.setitem(cli.SUBCOMMANDS, "estimate", (module.__name__, "a model"))
    return module


def test_cli_start_up_is_announced_when_late(fake_command, capsys, monkeypatch):
    monkeypatch.setattr(progress, "late_after", lambda: 0.05)
    fake_command.delay = 0.4
    assert cli.main(["slow"]) == 0
    assert capsys.readouterr() == ("", "mlmix: mlmix slow: loading its modules (still running after < 1 s) ...\n")
    assert cli.main(["slow", "--no-progress"]) == 0
    assert capsys.readouterr() == ("", "")


def test_cli_start_up_quiet_when_fast(fake_command, capsys):
    assert cli.main(["slow"]) == 0  # late_after() is 2 s: a fast start-up says nothing
    assert capsys.readouterr() == ("", "")


def test_cli_model_commands_announce_torch(fake_command, no_model_stack, capsys, monkeypatch):
    monkeypatch.delenv(progress.THRESHOLD_ENV, raising=False)
    assert cli.main(["estimate"]) == 0
    assert capsys.readouterr() == ("", "mlmix: mlmix estimate: importing torch and transformers (about 6 s) ...\n")
    assert cli.main(["estimate", "--no-progress"]) == 0
    assert cli.main(["slow"]) == 0  # no model: no line
    assert capsys.readouterr() == ("", "")


def test_cli_model_commands_quiet_once_torch_is_loaded(fake_command, model_stack, capsys, monkeypatch):
    monkeypatch.delenv(progress.THRESHOLD_ENV, raising=False)
    assert cli.main(["estimate"]) == 0
    assert capsys.readouterr() == ("", "")


def test_no_progress_silences_announcements_inside_the_command(fake_command, capsys, monkeypatch):
    monkeypatch.setenv(progress.THRESHOLD_ENV, "0")
    fake_command.run = lambda args: int(announce("loading a big model", 30.0))
    assert cli.main(["slow"]) == 1
    assert capsys.readouterr().err == "mlmix: loading a big model (about 30 s) ...\n"
    assert cli.main(["slow", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------ loading a model


@pytest.fixture(scope="module")
def mlm_module():
    # deferred: torch and transformers, only for the tests that load a model
    from mlmix.empirical.models import mlm

    return mlm


def test_safetensors_parameter_count_matches_the_tensors(mlm_module):
    from safetensors import safe_open

    from mlmix.validation import check_safetensors_header

    for weights in mlm_module.DEFAULT_MODEL_DIR.glob("*.safetensors"):
        with safe_open(weights, framework="numpy") as f:  # the tensors themselves, read in full
            sizes = [f.get_tensor(key).size for key in f.keys()]
        assert mlm_module.safetensors_parameters(check_safetensors_header(weights)) == sum(sizes) > 0


def test_model_load_line(mlm_module, capsys, monkeypatch):
    monkeypatch.setenv(progress.THRESHOLD_ENV, "0")
    mlm_module.load_pretrained(mlm_module.MaskedLMConditionals.auto_class, mlm_module.DEFAULT_MODEL_DIR)
    out, err = capsys.readouterr()
    assert out == ""
    assert "mlmix: loading default_model (72,585 parameters) (about < 1 s) ...\n" in err


def test_model_load_quiet(mlm_module, capsys, monkeypatch):
    monkeypatch.setenv(progress.THRESHOLD_ENV, "0")
    mlm_module.MaskedLMConditionals.from_pretrained(mlm_module.DEFAULT_MODEL_DIR, 6, progress=False)
    with no_announcements():
        mlm_module.load_pretrained(mlm_module.MaskedLMConditionals.auto_class, mlm_module.DEFAULT_MODEL_DIR)
    monkeypatch.delenv(progress.THRESHOLD_ENV)
    mlm_module.load_pretrained(mlm_module.MaskedLMConditionals.auto_class, mlm_module.DEFAULT_MODEL_DIR)
    assert "mlmix:" not in capsys.readouterr().err


def test_load_seconds_grow_with_parameters(mlm_module):
    assert mlm_module.load_seconds(0) == mlm_module.LOAD_START
    assert mlm_module.load_seconds(72_585) < progress.DEFAULT_THRESHOLD <= mlm_module.load_seconds(3 * 10**8)


# ------------------------------------------------------------------ verify and plots, in Python


@pytest.fixture
def late(monkeypatch):
    monkeypatch.setattr(progress, "late_after", lambda: 0.05)


def test_run_one_says_which_check_is_still_running(capsys, monkeypatch):
    from mlmix.verify import runner

    entry = runner.select(["glauber.lemma6"])[0]
    capsys.readouterr()
    monkeypatch.setattr(progress, "late_after", lambda: 0.05)
    monkeypatch.setattr(runner, "search", lambda entry, examples, seed: time.sleep(0.4) or "report")
    assert runner.run_one(entry, 7, 0) == "report"
    n = runner.examples_for(entry, 7)
    assert capsys.readouterr() == ("", f"mlmix: verify: checking glauber.lemma6 on {n} instances "
                                       "(still running after < 1 s) ...\n")
    for _ in progress.steps([0], "verify", total=1, expected=0.0):  # mlmix verify names it already
        runner.run_one(entry, 7, 0)
    assert capsys.readouterr() == ("", "")


def test_run_one_quiet_when_fast(capsys, monkeypatch):
    from mlmix.verify import runner

    monkeypatch.setattr(runner, "search", lambda entry, examples, seed: "report")
    entry = runner.select(["glauber.lemma6"])[0]
    capsys.readouterr()
    runner.run_one(entry, 7, 0)
    assert capsys.readouterr() == ("", "")


def test_save_figure_says_it_is_writing_when_late(late, tmp_path, capsys, monkeypatch):
    from mlmix import plot_style, plots

    monkeypatch.setattr(plot_style, "save", lambda fig, path: time.sleep(0.4))
    plots.save_figure(None, tmp_path / "f.pdf")
    assert capsys.readouterr() == ("", f"mlmix: writing {tmp_path / 'f.pdf'} (still running after < 1 s) ...\n")
    with no_announcements():
        plots.save_figure(None, tmp_path / "g.pdf")
    assert capsys.readouterr() == ("", "")
