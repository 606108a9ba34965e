"""mlmix: exact and empirical analysis of the Markov chains that masked language models induce.

The objects users touch are exported here (lazily, so ``import mlmix`` stays light and does not load
torch), so user code never imports the deep module paths, which may move: ``Chain`` (an exact chain
on any representation, every quantity with its accuracy) and ``OperatorChain`` (``Chain`` on a
matrix-free operator, with the solvers' options), ``Result`` / ``VectorResult``, the sources ``IsingModel``, ``PottsModel``, ``LogWeightTable``,
``ScoreTable`` and ``MaskedLMConditionals``, ``model_constants`` (a model's certified constants and
Theorem 5's verdict, :mod:`mlmix.empirical.model_constants.constants_report`), and the kernels (``glauber_kernel``, ``k_gibbs_kernel``,
``block_kernel``, ``adaptive_block_kernel``, ``independent_parallel_kernel``, and the matrix-free
``kernel_operator``). The three rooms are ``mlmix.theory``, ``mlmix.verify`` and ``mlmix.empirical``.

Public modules beside these names: :mod:`mlmix.strategies` (Hypothesis strategies for chains and sources),
:mod:`mlmix.theorem` (your own theorems, searched like the papers'), :mod:`mlmix.testing` (assertions that
never pass or fail on roundoff) and :mod:`mlmix.errors` (the exceptions mlmix raises).
"""

import sys
from importlib import import_module
from typing import Any

from mlmix.version import __version__

_LAZY = {
    "Chain": "mlmix.theory.chain.markov_chain",
    "OperatorChain": "mlmix.theory.chain.operator_chain",
    "Result": "mlmix.theory.results",
    "VectorResult": "mlmix.theory.results",
    "IsingModel": "mlmix.theory.sources.conditionals",
    "PottsModel": "mlmix.theory.sources.conditionals",
    "LogWeightTable": "mlmix.theory.sources.conditionals",
    "ScoreTable": "mlmix.theory.sources.conditionals",
    "MaskedLMConditionals": "mlmix.empirical.models.mlm",
    "model_constants": "mlmix.empirical.model_constants.constants_report",
    "glauber_kernel": "mlmix.theory.kernels.assembled",
    "k_gibbs_kernel": "mlmix.theory.kernels.assembled",
    "block_kernel": "mlmix.theory.kernels.assembled",
    "adaptive_block_kernel": "mlmix.theory.kernels.assembled",
    "independent_parallel_kernel": "mlmix.theory.kernels.assembled",
    "kernel_operator": "mlmix.theory.kernels.operators",
}

__all__ = ["__version__", *_LAZY]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


#: Lazily exported modules that import torch and transformers: their first import takes seconds.
_MODEL_STACK = {"mlmix.empirical.models.mlm"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = _LAZY[name]
        if module in _MODEL_STACK and module not in sys.modules:
            # deferred: the progress module loads numpy and tqdm, which `import mlmix` does not need
            from mlmix.progress import announce, model_stack_seconds

            announce(f"importing torch and transformers for {name}", model_stack_seconds())
        return getattr(import_module(module), name)
    raise AttributeError(f"module 'mlmix' has no attribute {name!r}")
