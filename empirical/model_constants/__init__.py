"""Paper G's constants (rho, alpha, Delta, T*, the rectangle statistic, drift and margins) of a model's frame.

- :mod:`~mlmix.empirical.model_constants.estimated_constants` — from sampled contexts, beside the exact
  values when |V|^n is small (``mlmix estimate``).
- :mod:`~mlmix.empirical.model_constants.streamed_constants` — exact, over every context, streamed and
  resumable, without the chain.
- :mod:`~mlmix.empirical.model_constants.context_search` — searched lower bounds (the worst contexts).
- :mod:`~mlmix.empirical.model_constants.relaxation` — sound upper bounds by affine arithmetic.
- :mod:`~mlmix.empirical.model_constants.certify` — the brackets [lower, upper] and Theorem 5's verdict
  (``mlmix estimate --certify``).
- :mod:`~mlmix.empirical.model_constants.constants_report` — the one entry point, :func:`model_constants`:
  one report of the brackets and Theorem 5 / Corollary 7's verdicts, with the recipe (enumeration, search,
  relaxation) within a budget and a hard pass cap; ``mlmix estimate --certify`` and ``verify --mlm`` view it.

Importing the package does not load torch; it exports :func:`model_constants` and :class:`ModelConstants`.
"""

from mlmix.empirical.model_constants.constants_report import ModelConstants, model_constants

__all__: list[str] = ["ModelConstants", "model_constants"]
