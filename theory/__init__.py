"""Exact finite-state mathematics of the Markov chains induced by local conditionals on V^n."""
