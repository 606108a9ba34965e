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
