"""The ``mlmix`` subcommands: every argument parser and command body lives here.

Each command module exposes ``configure(parser)`` and ``run(args) -> int``; :mod:`mlmix.cli` imports a module
only when its subcommand runs. The modules: :mod:`~mlmix.commands.exact`, :mod:`~mlmix.commands.estimate`,
:mod:`~mlmix.commands.verify` (with :mod:`~mlmix.commands.verify_model` for ``--mlm``),
:mod:`~mlmix.commands.decode`, :mod:`~mlmix.commands.diagnose`, :mod:`~mlmix.commands.convert`,
:mod:`~mlmix.commands.run`; :mod:`~mlmix.commands.options` holds the option groups several commands share, and
:mod:`~mlmix.commands.distributed` is the ``torchrun`` entry point; :mod:`~mlmix.commands.exact_schema` writes the
report's figures into ``docs/schema/exact.schema.json``. The package re-exports nothing.
"""

__all__: list[str] = []
