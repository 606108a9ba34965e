"""Paper G's constants (rho, alpha, Delta, T*, the rectangle statistic, drift and margins) of a model's frame.

- :mod:`~mlmix.empirical.model_constants.estimated_constants` — from sampled contexts, beside the exact
  values when |V|^n is small (``mlmix estimate``).
- :mod:`~mlmix.empirical.model_constants.streamed_constants` — exact, over every context, streamed and
  resumable, without the chain.
- :mod:`~mlmix.empirical.model_constants.context_search` — searched lower bounds (the worst contexts).
- :mod:`~mlmix.empirical.model_constants.relaxation` — sound upper bounds by affine arithmetic.
- :mod:`~mlmix.empirical.model_constants.certify` — the brackets [lower, upper] and Theorem 5's verdict
  (``mlmix estimate --certify``).

Importing the package does not load torch; it re-exports nothing.
"""

__all__: list[str] = []
