"""The papers' reproductions and experiments behind ``mlmix run NAME --out DIR``.

Every module here except :mod:`mlmix.runs.common` (what they share) is a run: it exposes ``DESCRIPTION``
(one line), ``configure(parser)`` (its options, ``--out`` included) and ``run(args) -> int``. The run's
name is the module's name with dashes (``rectangle_table`` -> ``mlmix run rectangle-table``);
:mod:`mlmix.commands.run` discovers them, so a new run is a new module and nothing else. The package
re-exports nothing.
"""

__all__: list[str] = []
