"""Everything mlmix writes to disk goes through here: atomic writes, strict JSON, output folders.

* Atomic writes: a temporary file in the destination folder, flushed and fsynced, then
  ``os.replace``; a reader never sees a half-written file and an interrupted run leaves none.
* Strict JSON: numpy values unwrapped, results (anything with ``as_dict()``) expanded, and
  non-finite floats written as ``null`` (never the invalid tokens NaN / Infinity).
* :class:`OutputDir`: a folder owned by one run. A lock file keeps a second run out while the
  first writes; a manifest (``run.json``) records the parameters (after the provenance header of
  :mod:`mlmix.provenance`), and a later run with other
  parameters is refused (or must ask to overwrite) instead of mixing its results with the old ones.
* :class:`Checkpoint`: finished records of a long run, kept in the output folder so that a rerun
  with the same settings resumes where it stopped.
* :func:`recording_writes`: the result files one command wrote, which the command line names in
  one line at the end (``mlmix: wrote out/samplers.json, out/samplers.png``).
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import dataclasses
import errno
import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from mlmix.provenance import inputs_from_params, stamp

try:  # POSIX advisory locks; elsewhere the lock file alone (O_EXCL) keeps runs apart
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

# ---------------------------------------------------------------------------------------- atomic writes


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, fsync, os.replace).

    ValueError when ``path`` names an existing folder.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are ordinary readable files
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    written = _WRITTEN.get()
    if written is not None:
        written.append(path)


#: The paths :func:`atomic_write_bytes` wrote inside a :func:`recording_writes` block (None outside one).
_WRITTEN: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar("mlmix_written", default=None)


@contextlib.contextmanager
def recording_writes() -> Iterator[list[Path]]:
    """Collect the result files written inside the block: the list it yields is filled, when the
    block ends, with every path written through this module, once each in the order first written,
    less the bookkeeping (the run manifest and lock, hidden files, checkpoints in ``*.partial``
    folders, anything in mlmix's cache folder, :func:`mlmix.cache.cache_dir`)."""
    # deferred: the cache module reads the environment only when asked
    from mlmix.cache import cache_dir

    paths: list[Path] = []
    token = _WRITTEN.set(paths)
    result: list[Path] = []
    try:
        yield result
    finally:
        _WRITTEN.reset(token)
        cache = cache_dir().resolve()
        for path in dict.fromkeys(paths):
            full = path.resolve()
            if (path.name in (MANIFEST, LOCK) or path.name.startswith(".") or full.is_relative_to(cache)
                    or any(part.endswith(".partial") for part in full.parent.parts)):
                continue
            result.append(path)


def describe_written(paths: list[Path]) -> str:
    """The files of :func:`recording_writes` in a few words: one path as it is; several as their
    common folder and the names in it, a sub-folder of more than three as ``sub/ (k files)``
    (``runs/d: diagnostics.json, diagnostics.png, cases/ (7 files)``)."""
    if len(paths) == 1:
        return str(paths[0])
    common = Path(os.path.commonpath([str(p.parent) for p in paths]))
    groups: dict[str, list[str]] = {}
    for p in paths:
        rel = p.relative_to(common)
        key = rel.parts[0] + "/" if len(rel.parts) > 1 else str(rel)
        groups.setdefault(key, []).append(str(rel))
    names = [", ".join(rels) if len(rels) <= 3 else f"{key} ({len(rels)} files)" for key, rels in groups.items()]
    return f"{common}: {', '.join(names)}"


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _open_nofollow(path: Path, flags: int) -> int:
    """os.open that refuses a symbolic link at ``path`` (O_NOFOLLOW: a planted link must not redirect
    a write outside the output folder)."""
    try:
        return os.open(path, flags | _NOFOLLOW, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            raise ValueError(f"{path} is a symbolic link; mlmix does not write through links") from None
        raise


def append_text(path: str | os.PathLike, text: str) -> None:
    """Append ``text`` (UTF-8) to ``path`` and fsync (an append-only log such as chains.jsonl); a
    symbolic link at ``path`` is refused."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(fd, "ab") as fh:
        fh.write(text.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def truncate_file(path: str | os.PathLike, size: int) -> None:
    """Cut ``path`` to ``size`` bytes (dropping a torn last line); a symbolic link is refused."""
    fd = _open_nofollow(Path(path), os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> None:
    """Write ``obj`` as strict JSON (see :func:`dumps_json`) atomically."""
    atomic_write_text(path, dumps_json(obj, indent) + "\n")


def atomic_write_csv(path: str | os.PathLike, header: list[str], rows: Iterable[Iterable[Any]]) -> None:
    """Write a CSV table atomically."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(jsonable(list(r)) for r in rows)
    atomic_write_text(path, buf.getvalue())


def atomic_save_figure(fig: Any, path: str | os.PathLike) -> None:
    """Save a matplotlib figure atomically, as PDF or SVG (vector) or PNG by the suffix (PNG otherwise)."""
    buf = io.BytesIO()
    kind = Path(path).suffix.lower().lstrip(".")
    fig.savefig(buf, format=kind if kind in ("pdf", "svg") else "png", dpi=120, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def atomic_save_npz(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    """Save arrays with ``numpy.savez_compressed`` atomically (loaded back with allow_pickle=False)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend."""
    # deferred: matplotlib loads only when a figure is written
    import matplotlib

    matplotlib.use("Agg")
    # deferred: matplotlib loads only when a figure is written
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------------------- strict JSON


def jsonable(value: Any) -> Any:
    """Plain JSON values: numpy scalars and arrays unwrapped, results expanded with ``as_dict()``,
    dataclasses as dicts, paths as strings, and non-finite floats as None (JSON null)."""
    if hasattr(value, "as_dict") and callable(value.as_dict):
        return jsonable(value.as_dict())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    return repr(value)


def dumps_json(obj: Any, indent: int | None = 1) -> str:
    """Strict JSON text of ``obj`` (no NaN or Infinity tokens: non-finite floats become null)."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False)


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Parse a JSON file; a missing, unreadable or corrupt file is a one-line ValueError."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{what} {path} is unreadable or not valid JSON: {err}") from None


# ---------------------------------------------------------------------------------------- output folders

MANIFEST = "run.json"
LOCK = ".mlmix.lock"


class OutputDir:
    """A folder that one run writes its results into (use as a context manager).

    On entry: create the folder; refuse it when it holds a symbolic link (mlmix never writes links, so
    one was planted: writing through it could reach a file outside the folder); take an exclusive lock (a second run on the same folder gets a
    ValueError at once); compare ``params`` (JSON-able) with the manifest ``run.json`` of an
    earlier run. Equal parameters: the run resumes (its checkpoints are reused). Different
    parameters: ValueError naming the differing keys, unless ``overwrite`` (the earlier run's files
    are then removed first). The manifest is written before any result. On exit the lock is released.
    """

    def __init__(self, path: str | os.PathLike, command: str, params: dict, *, overwrite: bool = False) -> None:
        self.path = Path(path)
        self.command = command
        self.params = json.loads(dumps_json(params))
        self.overwrite = overwrite
        self._lock_fd: int | None = None
        self.resumed = False

    def __enter__(self) -> "OutputDir":
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"output folder {self.path} exists and is not a folder")
        self.path.mkdir(parents=True, exist_ok=True)
        _refuse_links(self.path)
        self._acquire()
        try:
            self._check_manifest()
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._release()

    def file(self, name: str) -> Path:
        """Path of an output file inside the folder."""
        return self.path / name

    def _acquire(self) -> None:
        lock = self.path / LOCK
        fd = _open_nofollow(lock, os.O_RDWR | os.O_CREAT)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise ValueError(f"another mlmix run is writing to {self.path}; wait for it or use another "
                                     "folder") from None
                raise
        self._lock_fd = fd

    def _release(self) -> None:
        if self._lock_fd is not None:
            (self.path / LOCK).unlink(missing_ok=True)  # a waiting run was refused at once: no race
            if fcntl is not None:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _check_manifest(self) -> None:
        manifest = self.path / MANIFEST
        record = {"command": self.command, "params": self.params}
        if manifest.exists():
            old = read_json(manifest, "run manifest")
            if isinstance(old, dict) and {key: old.get(key) for key in record} == record:  # provenance aside
                self.resumed = True
                return
            if not self.overwrite:
                raise ValueError(f"{self.path} holds results of another run ({_difference(old, record)}); "
                                 "use another folder, or --overwrite to replace them")
            self._clear()
        elif any(p.name not in (LOCK,) for p in self.path.iterdir()) and not self.overwrite:
            raise ValueError(f"{self.path} is not empty and was not written by mlmix {self.command}; "
                             "use another folder, or --overwrite to replace its contents")
        elif self.overwrite:
            self._clear()

        atomic_write_json(manifest, stamp(self.command.split()[0], record, inputs_from_params(self.params)))

    def _clear(self) -> None:
        for p in self.path.iterdir():
            if p.name == LOCK:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()


def _refuse_links(folder: Path) -> None:
    """ValueError naming the first symbolic link found in ``folder`` (recursively; links not followed)."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            p = Path(root) / name
            if p.is_symlink():
                raise ValueError(f"output folder {folder} holds a symbolic link {p} that mlmix did not write; "
                                 "remove it or use another folder")


def _difference(old: Any, new: dict) -> str:
    if not isinstance(old, dict) or old.get("command") != new["command"]:
        return f"written by {old.get('command') if isinstance(old, dict) else 'something else'}"
    a, b = old.get("params") or {}, new["params"]
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    shown = ", ".join(f"{k}: {a.get(k)!r} there, {b.get(k)!r} now" for k in keys[:4])
    return f"different parameters: {shown}" + (" ..." if len(keys) > 4 else "")


class Checkpoint:
    """Finished records keyed by strings, persisted atomically after each record.

    An existing checkpoint is reused only when its ``settings`` equal the current ones; otherwise
    the run starts afresh (the caller's :class:`OutputDir` has already refused foreign folders).
    """

    def __init__(self, path: str | os.PathLike, settings: dict) -> None:
        self.path = Path(path)
        self.settings = json.loads(dumps_json(settings))
        self.results: dict[str, Any] = {}
        if self.path.exists():
            try:
                saved = read_json(self.path, "checkpoint")
            except ValueError:
                saved = {}
            if isinstance(saved, dict) and saved.get("settings") == self.settings:
                self.results = saved.get("results", {})

    def __contains__(self, key: str) -> bool:
        return key in self.results

    def __getitem__(self, key: str) -> Any:
        return self.results[key]

    def __len__(self) -> int:
        return len(self.results)

    def record(self, key: str, value: Any) -> None:
        self.results[key] = jsonable(value)
        atomic_write_json(self.path, {"settings": self.settings, "results": self.results})

    def remove(self) -> None:
        if self.path.exists():
            self.path.unlink()
