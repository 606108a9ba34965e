"""Reproductions of paper P's synthetic experiments (section 3.1 / L.6 and L.7).

Each module is a run, ``mlmix run <name> --out DIR`` (:mod:`mlmix.run`), that writes a JSON
record, a CSV table and a PNG figure into DIR. Files are written through
:mod:`mlmix.files` (atomically), and finished configurations are kept in a
:class:`~mlmix.files.Checkpoint` so that an interrupted run resumes where it stopped when started
again with the same settings.
"""

from __future__ import annotations
