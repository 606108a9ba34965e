"""Sources of single-site conditionals on V^n, the one interface every analysis consumes: the product
space and its indexing, the :class:`~mlmix.theory.sources.conditionals.Conditionals` interface with the
Ising/Potts joints and score tables at a temperature, and batched queries over context sets.

A masked language model (:mod:`mlmix.empirical.models.mlm`) is one more implementation of the same interface.
Modules: :mod:`~mlmix.theory.sources.space`, :mod:`~mlmix.theory.sources.conditionals`,
:mod:`~mlmix.theory.sources.contexts`, :mod:`~mlmix.theory.sources.partial` (partial conditionals) and
:mod:`~mlmix.theory.sources.scorefile` (the ``.npz`` score format). The package re-exports nothing; the
sources users build are exported by :mod:`mlmix`.
"""

__all__: list[str] = []
