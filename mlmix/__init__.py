"""mlmix: exact and empirical analysis of the Markov chains that masked language models induce.

``mlmix.Chain`` (an exact chain and every quantity of it, with its accuracy), ``mlmix.Result`` and
``mlmix.VectorResult`` are imported lazily, so ``import mlmix`` stays light; the three rooms are
``mlmix.theory``, ``mlmix.verify`` and ``mlmix.empirical``.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("mlmix")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

_LAZY = {"Chain": "mlmix.theory.chain.core", "Result": "mlmix.theory.chain.results", "VectorResult": "mlmix.theory.chain.results"}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mlmix' has no attribute {name!r}")
