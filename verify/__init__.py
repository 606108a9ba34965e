"""Theorems of papers G and P as checkable objects, searched for counterexamples with Hypothesis."""

from mlmix.cache import use_cache_for_hypothesis

use_cache_for_hypothesis()
