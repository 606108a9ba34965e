"""Which mlmix made an output, and from which inputs: the one header of every JSON output.

Every JSON document mlmix writes (``--json`` of ``mlmix exact``, ``decode``, ``diagnose``, ``estimate``
and ``verify``, the ``run.json`` manifest of ``mlmix run``) starts with

* ``mlmix_version``: the installed version (:data:`mlmix.__version__`);
* ``schema``: ``"mlmix.<kind>/<version>"``, the layout of the document (:data:`SCHEMA_VERSION`;
  ``docs/schema/<command>.schema.json`` publishes those of the commands, see its README);
* ``inputs``: the structured inputs, always with the keys of :data:`INPUT_KEYS` (None where they do
  not apply): ``source`` (what defines the chain: a built-in model with its parameters, a matrix
  file with its SHA-256, or a masked LM), ``kernel``, ``temperature``, ``seed``, ``frame`` and
  ``model_hash`` (SHA-256 of the model's weights), plus what else the command used.

:func:`stamp` builds the header; the commands call it and nothing else writes one.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

from mlmix.version import __version__

#: Layout version of mlmix's JSON outputs (raised when a key changes meaning or is removed).
SCHEMA_VERSION = 1

#: Keys every ``inputs`` record has.
INPUT_KEYS = ("source", "kernel", "temperature", "seed", "frame", "model_hash")


def inputs(*, source: Any = None, kernel: Any = None, temperature: float | None = None, seed: int | None = None,
           frame: str | None = None, model_hash: str | None = None, **more: Any) -> dict[str, Any]:
    """The structured inputs of an output: the keys of :data:`INPUT_KEYS` (None where they do not
    apply), then ``more`` (command-specific inputs)."""
    return {"source": source, "kernel": kernel, "temperature": temperature, "seed": seed, "frame": frame,
            "model_hash": model_hash, **more}


def stamp(kind: str, body: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with the provenance header in front: mlmix_version, schema ``mlmix.<kind>/<version>``
    and ``inputs`` (``given`` completed to :data:`INPUT_KEYS` by :func:`inputs`)."""
    return {"mlmix_version": __version__, "schema": schema_name(kind), "inputs": inputs(**given), **body}


def schema_name(kind: str) -> str:
    return f"mlmix.{kind}/{SCHEMA_VERSION}"


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_model_hash(model: str | os.PathLike) -> str | None:
    """SHA-256 over a local model folder's weight and config files (names and bytes, sorted); None
    for a hub id (its files are only known once loaded)."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    files = sorted(p for p in path.iterdir() if p.is_file() and (p.suffix in (".safetensors", ".bin", ".json")))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name}|{file_sha256(f)}|".encode())
    return digest.hexdigest()


def inputs_from_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The structured inputs of a run from its parameters (``mlmix run NAME`` options): the model
    (with the hash of a local model folder; a list for runs over several models), kernel,
    temperature, seed and frame where the run has them."""
    given = {"kernel": params.get("kernel"), "temperature": params.get("temperature"), "seed": params.get("seed"),
             "frame": params.get("frame")}
    if "mlm" in params:  # the source options of ``mlmix decode``: --mlm MODEL, --scores FILE or a built-in --model
        if params["mlm"] is not None:
            return {**given, "source": {"kind": "mlm", "model": str(params["mlm"])},
                    "model_hash": folder_model_hash(params["mlm"])}
        if params.get("scores") is not None:
            path = Path(params["scores"])
            return {**given, "source": {"kind": "scores-file", "path": str(path),
                                        "sha256": file_sha256(path) if path.is_file() else None}, "model_hash": None}
        return {**given, "source": {"kind": params.get("model")}, "model_hash": None}
    model = params.get("model")
    models = model if isinstance(model, list) else [model] if model is not None else []
    hashes = [folder_model_hash(m) for m in models]
    return {**given, "source": None if model is None else {"kind": "mlm", "model": model},
            "model_hash": hashes if isinstance(model, list) else (hashes or [None])[0]}
