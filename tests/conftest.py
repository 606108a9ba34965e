"""Shared test configuration: one torch thread (2-core CI machines), reproducible Hypothesis."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# exact MLM tables are cached under $MLMIX_CACHE: tests use a fresh folder, never the user's cache
os.environ["MLMIX_CACHE"] = tempfile.mkdtemp(prefix="mlmix-test-cache-")
atexit.register(shutil.rmtree, os.environ["MLMIX_CACHE"], ignore_errors=True)
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("mlmix", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("mlmix")

import torch  # noqa: E402

torch.set_num_threads(1)


# ---------------------------------------------------------------- the real model: AntiBERTy's wheel
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from mlmix.empirical.models import antiberty as ab  # noqa: E402


def _cache(request, name: str) -> Path:
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir(name)) if cache is not None else Path.home() / ".cache" / "mlmix" / name


@pytest.fixture(scope="session")
def wheel(request):
    """(model folder with config.json + pytorch_model.bin, vocab.txt) unpacked from the wheel."""
    try:
        return ab.fetch(_cache(request, f"antiberty-{ab.VERSION}"))
    except ab.IndexUnreachable as err:
        # the pretrained weights exist only inside that wheel: without a cached copy and without the
        # package index there is nothing to test against (the code paths stay covered by the
        # random-weight BERT/RoBERTa/ModernBERT tests); CI and this project's machines reach the index
        pytest.skip(f"PyPI is unreachable, so the AntiBERTy wheel cannot be fetched ({err})")


@pytest.fixture(scope="session")
def converted(wheel, request):
    """The safetensors copy written by ``mlmix convert`` (made once, kept in the pytest cache)."""
    model_dir, vocab = wheel
    dest = _cache(request, f"antiberty-{ab.VERSION}-converted") / "model"
    if not (dest / "config.json").is_file():
        from mlmix.empirical.models.checkpoint_copy import (
            convert,  # deferred: transformers loads only for the real model
        )

        convert(model_dir, dest, vocab=vocab, overwrite=True)
    return dest


@pytest.fixture(scope="session")
def plain(converted):
    """The converted model and tokenizer through plain transformers calls (no mlmix)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    return AutoModelForMaskedLM.from_pretrained(converted).eval(), AutoTokenizer.from_pretrained(converted)
