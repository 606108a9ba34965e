"""Real language models as sources of conditionals on V^n, and their exact tables.

- :mod:`~mlmix.empirical.models.mlm` — :class:`~mlmix.empirical.models.mlm.MaskedLMConditionals` (any
  ``AutoModelForMaskedLM``), batched masked forward passes on CPU or CUDA; the shipped default model in
  ``default_model/``.
- :mod:`~mlmix.empirical.models.antiberty`, :mod:`~mlmix.empirical.models.sceptr` — the two real pretrained
  MLMs read from their PyPI wheels; :mod:`~mlmix.empirical.models.causal` — the compatible control.
- :mod:`~mlmix.empirical.models.families` — the registry :data:`~mlmix.empirical.models.families.MODELS`:
  per model family how a name is recognised, its loader, score accuracy, certified-bound adapter and cache identity.
- :mod:`~mlmix.empirical.models.frames` — where the n free positions sit and which tokens they take.
- :mod:`~mlmix.empirical.models.tabulate`, :mod:`~mlmix.empirical.models.partial_tables` — every
  conditional of a frame, tabulated exactly and cached on disk.
- :mod:`~mlmix.empirical.models.checkpoint_copy`, :mod:`~mlmix.empirical.models.vocab` — safetensors
  copies of checkpoints with a working tokenizer; :mod:`~mlmix.empirical.models.shipped_model` trains the
  shipped model.

Importing the package does not load torch; it re-exports nothing.
"""

__all__: list[str] = []
