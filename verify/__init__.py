"""Theorems of papers G and P as checkable objects, searched for counterexamples with Hypothesis."""
