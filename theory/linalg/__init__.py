"""Linear algebra under the chain quantities: subtraction-free GTH elimination and the solves built on
it, Krylov solvers over matrix-free operators (Lanczos, GMRES), format helpers for transition matrices,
and the ``torch.distributed`` communicator that shards a state tensor over processes.

Imports nothing else from :mod:`mlmix.theory`; it is the ground floor. Modules:
:mod:`~mlmix.theory.linalg.elimination`, :mod:`~mlmix.theory.linalg.krylov`, :mod:`~mlmix.theory.linalg.operator`
(the one operator type), :mod:`~mlmix.theory.linalg.operator_vectors` (vectors over an operator's states, sharded
or not, and the rounding of one application), :mod:`~mlmix.theory.linalg.matrices` and
:mod:`~mlmix.theory.linalg.sharding`. The package re-exports nothing.
"""

__all__: list[str] = []
