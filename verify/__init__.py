"""Theorems of papers G and P as checkable objects, searched for counterexamples with Hypothesis.

Modules: :mod:`~mlmix.verify.verdicts` (theorem objects, verdicts, the registry, the search),
:mod:`~mlmix.verify.runner` (loading, selecting and running the catalogue), :mod:`~mlmix.verify.report`,
:mod:`~mlmix.verify.user` (user theorems, through :mod:`mlmix.theorem`), the theorem modules in
:mod:`~mlmix.verify.theorems`, and the instances they search: :mod:`~mlmix.verify.instances`,
:mod:`~mlmix.verify.regime_instances`, :mod:`~mlmix.verify.chain_instances` (public face:
:mod:`mlmix.strategies`) and :mod:`~mlmix.verify.pitfalls_strategies`, with :mod:`~mlmix.verify.exact_laws`
and :mod:`~mlmix.verify.wasserstein` for the checks. Importing the package points Hypothesis's example
database at mlmix's cache. The package re-exports nothing.
"""

from mlmix.cache import use_cache_for_hypothesis

use_cache_for_hypothesis()

__all__: list[str] = []
