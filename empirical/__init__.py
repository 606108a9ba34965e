"""Real language models as sources of conditionals, and what is measured on them; three rooms:

- :mod:`mlmix.empirical.models` — masked LMs (any ``AutoModelForMaskedLM``, AntiBERTy, SCEPTR, the shipped
  default) as sources of conditionals on V^n, their frames and exact cached tables.
- :mod:`mlmix.empirical.model_constants` — paper G's constants of a model's frame: estimated from sampled
  contexts, exact by streaming every context, searched lower bounds, relaxed upper bounds, and the
  certified brackets with Theorem 5's verdict (``mlmix estimate [--certify]``).
- :mod:`mlmix.empirical.sampling` — long sampler runs on a model: simulation, convergence diagnostics held
  against the exact truth, semantic drift, trap states.

The package re-exports nothing (``MaskedLMConditionals`` is exported by :mod:`mlmix`), and importing it does
not load torch.
"""

__all__: list[str] = []
