"""Real language models as sources of conditionals, and estimates of the papers' constants.

- :mod:`mlmix.empirical.mlm` — :class:`~mlmix.empirical.mlm.MaskedLMConditionals` (any ``AutoModelForMaskedLM``),
  batched masked forward passes on CPU or CUDA; the shipped default model lives in
  ``empirical/default_model/`` (:data:`~mlmix.empirical.mlm.DEFAULT_MODEL_DIR`).
- :mod:`mlmix.empirical.sceptr` — :class:`~mlmix.empirical.sceptr.SceptrConditionals`, SCEPTR (a small
  pretrained TCR masked LM read from its PyPI wheel, forward pass re-implemented), ``--mlm sceptr[:VARIANT]``.
- :mod:`mlmix.empirical.causal` — :class:`~mlmix.empirical.causal.CausalLMConditionals`, the compatible control
  (conditionals of an autoregressive joint, rectangle statistic 0).
- :mod:`mlmix.empirical.estimated_constants` — rho, Delta, rectangle R, drift and margins from sampled contexts,
  and side by side with the exact values when |V|^n is small (``mlmix estimate``).
- :mod:`mlmix.empirical.streamed_constants` — the exact rho_ij, Delta_ij (and rho, alpha, Delta, T*) over every
  context without the chain: streamed in blocks, checkpointed, resumable.
- :mod:`mlmix.empirical.certify` — certified brackets [lower, upper] of those constants at any n and Theorem 5's
  verdict (``mlmix estimate --certify``, ``mlmix verify --mlm``).

The package re-exports nothing (``MaskedLMConditionals`` is exported by :mod:`mlmix`), and importing it does
not load torch.
"""

__all__: list[str] = []
