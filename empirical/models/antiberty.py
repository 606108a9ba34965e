"""AntiBERTy, the real pretrained masked LM that mlmix is checked on, fetched from its PyPI wheel.

``antiberty==0.1.3`` (MIT) ships AntiBERTy (Ruffolo et al. 2021): a BERT with 8 layers, hidden size
512, 25.8 million parameters, trained on antibody sequences; vocabulary = 20 amino acids + 5 BERT
specials, residues written space-separated. The wheel holds a pickled ``pytorch_model.bin`` and a
``config.json`` in ``antiberty/trained_models/AntiBERTy_md_smooth/`` and the ``vocab.txt`` one
folder up: exactly the kind of checkpoint ``--allow-pickle`` and ``mlmix convert`` are for::

    pip download antiberty==0.1.3 --no-deps -d DIR
    unzip DIR/antiberty-0.1.3-py3-none-any.whl 'antiberty/trained_models/*' -d DIR
    mlmix convert DIR/antiberty/trained_models/AntiBERTy_md_smooth ./antiberty \\
        --vocab DIR/antiberty/trained_models/vocab.txt

:func:`fetch` does the first two steps (pinned by the wheel's SHA-256). Never use antiberty 1.x
(a different model and layout).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from mlmix.files import atomic_write_bytes

VERSION = "0.1.3"
WHEEL = f"antiberty-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "30d910992b190013871bac49cdc032e01a19339f7d2b958ab99b0eb44638352a"
MODEL_MEMBER = "antiberty/trained_models/AntiBERTy_md_smooth/"
VOCAB_MEMBER = "antiberty/trained_models/vocab.txt"

#: The 20 amino acids of AntiBERTy's vocabulary, in vocabulary order (its alphabet for the chain).
AMINO_ACIDS = "A C D E F G H I K L M N P Q R S T V W Y"

#: Marks of pip failing to reach the package index (as opposed to any other failure).
_OFFLINE = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
            "Network is unreachable", "Name or service not known", "ConnectTimeout", "ProxyError",
            "Failed to establish a new connection", "Could not fetch URL")


class IndexUnreachable(RuntimeError):
    """pip could not reach the package index (no network): the caller may skip, not fail."""


def download_wheel(package: str, version: str, wheel: str, sha256: str, dest: str | Path) -> Path:
    """``dest/wheel``: ``pip download package==version --no-deps --only-binary=:all:`` into ``dest``
    unless the file is already there, then checked against the pinned ``sha256``.

    Raises :class:`IndexUnreachable` when pip cannot reach the index, ValueError for any other
    failure (a wheel with another hash, a pip error).
    """
    dest = Path(dest).expanduser()
    path = dest / wheel
    if not path.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", f"{package}=={version}", "--no-deps",
                               "--only-binary=:all:", "-d", str(dest)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            text = done.stdout + done.stderr
            if any(mark in text for mark in _OFFLINE):
                raise IndexUnreachable(f"pip could not reach the package index: {text.strip().splitlines()[-1]}")
            raise ValueError(f"pip download {package}=={version} failed: {text.strip().splitlines()[-1]}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise ValueError(f"{path} has SHA-256 {digest}, not the pinned {sha256}")
    return path


def fetch(dest: str | Path) -> tuple[Path, Path]:
    """Download the wheel into ``dest`` (once; checked against :data:`WHEEL_SHA256`) and unpack the
    model folder; returns (model folder with config.json + pytorch_model.bin, vocab.txt).

    Raises :class:`IndexUnreachable` when pip cannot reach the index, ValueError for any other
    failure (a wheel with another hash, a pip error).
    """
    dest = Path(dest).expanduser()
    model_dir, vocab = dest / MODEL_MEMBER, dest / VOCAB_MEMBER
    if (model_dir / "pytorch_model.bin").is_file() and (model_dir / "config.json").is_file() and vocab.is_file():
        return model_dir, vocab
    wheel = download_wheel("antiberty", VERSION, WHEEL, WHEEL_SHA256, dest)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member in (MODEL_MEMBER + "config.json", MODEL_MEMBER + "pytorch_model.bin", VOCAB_MEMBER):
                atomic_write_bytes(dest / member, archive.read(member))
    return model_dir, vocab
