"""The ``mlmix`` subcommands: every argument parser and command body lives here.

Each module exposes ``configure(parser)`` and ``run(args) -> int``; :mod:`mlmix.cli` imports a module
only when its subcommand runs.
"""
