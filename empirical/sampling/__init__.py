"""Long sampler runs on a model and what they are measured by.

- :mod:`~mlmix.empirical.sampling.simulation` — many random-scan Glauber chains at once, and coupled pairs.
- :mod:`~mlmix.empirical.sampling.convergence` — convergence diagnostics held against the exact truth.
- :mod:`~mlmix.empirical.sampling.drift` — semantic drift of an embedding along a chain (paper G, eq. (B.1)).
- :mod:`~mlmix.empirical.sampling.trap_states` — trap states of long chains beside Theorem 8's escape bound.
- :mod:`~mlmix.empirical.sampling.sweep` — sweeps as independent tasks through an executor.

Importing the package does not load torch; it re-exports nothing.
"""

__all__: list[str] = []
