"""Reproductions of paper P's synthetic experiments (section 3.1 / L.6 and L.7).

Each module is a command, ``python -m mlmix.verify.reproductions.<name> --out DIR``, that writes a JSON
record, a CSV table and a PNG figure into DIR. Files are written atomically (temporary file in the
same folder, then ``os.replace``), and finished configurations are kept in a checkpoint so that an
interrupted run resumes where it stopped when started again with the same settings.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def atomic_write_csv(path: Path, header: list[str], rows: Iterable[Iterable[Any]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_bytes(path, buf.getvalue().encode())


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (ImportError with advice when missing)."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError("figures need matplotlib (pip install matplotlib); or pass --no-figure") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def atomic_save_figure(fig: Any, path: Path) -> None:
    """Save a matplotlib figure as PNG atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


class Checkpoint:
    """Finished results keyed by strings, persisted atomically after each record.

    An existing checkpoint is reused only when its ``settings`` equal the current ones; otherwise
    the run starts afresh.
    """

    def __init__(self, path: Path, settings: dict) -> None:
        self.path = Path(path)
        self.settings = json.loads(json.dumps(settings))
        self.results: dict[str, Any] = {}
        if self.path.exists():
            try:
                saved = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError):
                saved = {}
            if saved.get("settings") == self.settings:
                self.results = saved.get("results", {})

    def __contains__(self, key: str) -> bool:
        return key in self.results

    def __getitem__(self, key: str) -> Any:
        return self.results[key]

    def record(self, key: str, value: Any) -> None:
        self.results[key] = value
        atomic_write_json(self.path, {"settings": self.settings, "results": self.results})

    def remove(self) -> None:
        if self.path.exists():
            self.path.unlink()
