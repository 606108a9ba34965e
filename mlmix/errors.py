"""The exceptions mlmix raises.

Bad arguments raise :class:`ValueError` or :class:`TypeError` (or a subclass defined here), with a
one-line message; numerical failures raise :class:`NumericalError`, a :class:`RuntimeError`, so
``except RuntimeError`` catches every "could not compute this to its stated accuracy".
"""

from __future__ import annotations

import numpy as np


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


class ReducibleChainError(ValueError):
    """A chain with several closed classes has no unique stationary law; ``closed_classes`` lists
    them as arrays of state indices."""

    def __init__(self, message: str, closed_classes: list[np.ndarray]) -> None:
        super().__init__(message)
        self.closed_classes = closed_classes


class MemoryLimitError(ValueError):
    """The memory an operation needs, estimated before allocating it, exceeds the limit
    (``--max-memory``, or what the machine has available)."""
