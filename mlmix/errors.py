"""The exceptions mlmix raises.

Bad arguments raise :class:`ValueError` or :class:`TypeError` (or a subclass defined here), with a
one-line message; the checks of :mod:`mlmix.validation` raise :class:`InputValueError` /
:class:`InputTypeError`, both an :class:`InputError`, so the command line tells refused input (exit
status 2) from a bug (any other exception: "internal error", exit status 3). Numerical failures raise
:class:`NumericalError`, a :class:`RuntimeError`, so ``except RuntimeError`` catches every "could not
compute this to its stated accuracy".
"""

from __future__ import annotations

import numpy as np


class InputError(Exception):
    """Refused input: an argument, an option or a file's content that was checked and found wrong.
    Never raised itself: raise :class:`InputValueError` or :class:`InputTypeError`."""


class InputValueError(InputError, ValueError):
    """An input of the right kind with a wrong value (out of range, malformed, inconsistent)."""


class InputTypeError(InputError, TypeError):
    """An input of the wrong kind of object."""


class InvalidResultError(ValueError):
    """A :class:`~mlmix.theory.results.Result` that would break ``lower <= value <= upper``, hold a NaN or a
    negative error bound: a bug of the computation that built it, never refused input (on the command line
    an internal error, exit status 3)."""


class NumericalError(RuntimeError):
    """A computation could not deliver its result to the stated accuracy."""


class ConvergenceError(NumericalError):
    """An iterative solver did not reach its tolerance."""


class UnresolvedError(NumericalError):
    """A result is not known to its accuracy (only bounds, or nothing): raised by ``float(result)``."""


class UnderflowError(NumericalError):
    """Transition probabilities that are positive in exact arithmetic underflow to 0 in float64 and
    change the chain's structure (its float matrix has other communicating or closed classes), so
    what depends on the float matrix (its stationary law, gaps, ...) cannot be computed from it; the
    message says what the exact pattern and the float matrix give."""


class ReducibleChainError(InputValueError):
    """A chain with several closed classes has no unique stationary law; ``closed_classes`` lists
    them as arrays of state indices."""

    def __init__(self, message: str, closed_classes: list[np.ndarray]) -> None:
        super().__init__(message)
        self.closed_classes = closed_classes


class MemoryLimitError(InputValueError):
    """The memory an operation needs, estimated before allocating it, exceeds the limit
    (``--max-memory``, or what the machine has available)."""


class PassCapError(InputValueError):
    """A model source asked for more forward passes than its hard cap (``--max-passes``) allows; the passes
    are refused before any is made."""
