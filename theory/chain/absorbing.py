"""Chains with transient states, seen class by class (the peers' absorbing-chain and reducible-chain
questions).

With T the transient states, Q = P_TT and the closed classes C_1..C_m (absorbing states are closed
classes of one state; Kemeny and Snell, *Finite Markov Chains*, ch. III):

* the fundamental matrix N = (I - Q)^-1 (N[i, j]: expected visits to j from i before absorption);
* the expected steps to absorption t = N 1;
* the absorption probabilities B = N R, B[i, c] = P_i(the chain enters C_c), R[i, c] = P(i, C_c).

All three come from one subtraction-free GTH elimination of Q with the flows into the classes as
exit columns (:mod:`mlmix.theory.linalg.elimination`): entrywise relative error <= 8 |T|^3 u (O'Cinneide's
worst case; non-negative right-hand sides). Dense: up to :data:`ABSORBING_LIMIT` transient states.

* **Per-class stationary laws** (QuantEcon's ``stationary_distributions``): one law per closed class,
  zero elsewhere, each by :func:`mlmix.theory.chain.stationary.compute_stationary` on its class.
* **Cyclic classes** of a closed class of period d: the states at breadth-first level l fall in the
  class l mod d (the chain moves from cyclic class c to c + 1 mod d).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from mlmix.limits import ABSORBING_LIMIT
from mlmix.theory.chain.stationary import compute_stationary
from mlmix.theory.chain.structure import PositiveStructure, Structure, chain_structure, tree_depths
from mlmix.theory.linalg.elimination import Elimination, eliminate
from mlmix.theory.results import EPS, VectorResult
from mlmix.validation import Matrix, check_memory

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain


@dataclass(frozen=True, eq=False)
class Absorption:
    """The elimination of Q with the flows into each closed class as exits (module docstring)."""

    transient: np.ndarray            # indices of the transient states
    classes: list[np.ndarray]        # the closed classes
    elimination: Elimination | None  # None when there is no transient state
    rel_error: float


def absorption(P: Matrix, structure: Structure) -> Absorption:
    """Eliminate the transient part of P once (dense, at most :data:`ABSORBING_LIMIT` transient states)."""
    T = np.flatnonzero(structure.transient)
    classes = structure.closed_classes
    if T.size == 0:
        return Absorption(T, classes, None, 0.0)
    if T.size > ABSORBING_LIMIT:
        raise ValueError(f"absorbing-chain quantities are computed for up to {ABSORBING_LIMIT} transient states; "
                         f"this chain has {T.size}")
    check_memory(8.0 * 3 * T.size * T.size, f"the elimination of {T.size} transient states")
    rows = sp.csr_array(P)[T]
    Q = rows[:, T].toarray()
    exits = np.stack([np.asarray(rows[:, C].sum(axis=1)).ravel() for C in classes], axis=1)
    el = eliminate(Q, exits=exits, eliminate_mask=np.ones(T.size, dtype=bool))
    return Absorption(T, classes, el, min(8.0 * T.size**3 * EPS, 1.0))


def fundamental_matrix(ab: Absorption) -> VectorResult:
    """N = (I - Q)^-1 over the transient states (rows and columns in ``details['transient']`` order)."""
    m = ab.transient.size
    value = np.zeros((0, 0)) if ab.elimination is None else ab.elimination.solve(np.eye(m))
    return VectorResult("fundamental matrix (I - Q)^-1", value, _method(ab), ab.rel_error,
                        details={"transient": ab.transient})


def expected_steps(ab: Absorption) -> VectorResult:
    """t = N 1: the expected number of steps before a closed class is entered, per transient state."""
    m = ab.transient.size
    value = np.zeros(0) if ab.elimination is None else ab.elimination.solve(np.ones(m))
    return VectorResult("expected steps to absorption", value, _method(ab), ab.rel_error,
                        details={"transient": ab.transient})


def absorption_probabilities(ab: Absorption) -> VectorResult:
    """B[i, c] = P_i(enter closed class c), rows over the transient states, columns over the classes."""
    value = np.zeros((0, len(ab.classes))) if ab.elimination is None else ab.elimination.exit_solution()
    return VectorResult("absorption probabilities", value, _method(ab), ab.rel_error,
                        details={"transient": ab.transient, "classes": ab.classes})


def _method(ab: Absorption) -> str:
    if ab.elimination is None:
        return "no transient state"
    return (f"GTH elimination of the {ab.transient.size} transient states with the flows into the "
            f"{len(ab.classes)} closed classes as exits (subtraction-free; O'Cinneide's worst case 8 m^3 u)")


def stationary_distributions(P: Matrix, structure: Structure) -> VectorResult:
    """One stationary law per closed class (rows), zero off its class; ``rel_error`` the largest of
    the classes' entrywise bounds (None when one is only normwise)."""
    N = P.shape[0]
    rows, rels, methods = [], [], []
    for C in structure.closed_classes:
        sub = sp.csr_array(P)[C][:, C] if sp.issparse(P) else np.asarray(P)[np.ix_(C, C)]
        law = compute_stationary(sub, chain_structure(sub))
        row = np.zeros(N)
        row[C] = law.value
        rows.append(row)
        rels.append(law.rel_error)
        methods.append(law.method)
    rel = None if any(r is None for r in rels) else max(rels)
    return VectorResult("stationary laws of the closed classes", np.array(rows),
                        "per closed class: " + "; ".join(sorted(set(methods))), rel,
                        details={"classes": structure.closed_classes})


def cyclic_classes(structure: Structure, states: np.ndarray) -> list[np.ndarray]:
    """The d cyclic classes of the closed class ``states`` (period d), in the order the chain visits
    them, starting with the class of ``states[0]``."""
    d = structure.period(states)
    if d == 1:
        return [np.sort(states)]
    G = sp.csr_array(structure.graph[states][:, states])
    _, pred = breadth_first_order(G, 0, directed=True, return_predecessors=True)
    level = tree_depths(pred, root=0).astype(np.int64) % d
    return [np.sort(states[level == c]) for c in range(d)]


# ------------------------------------------------------------ the choice for a Chain

def chain_stationary_distributions(chain: Chain) -> VectorResult:
    """One stationary law per closed class (rows) of a chain
    (:meth:`Chain.stationary_distributions <mlmix.theory.chain.markov_chain.Chain.stationary_distributions>`).
    Routes: a matrix-free kernel with positive conditionals has one closed class, whose law is the
    chain's :attr:`stationary`; other matrix-free kernels ask their matrix (memory permitting); a dense
    or CSR matrix (UnderflowError where P cannot stand for the chain): :func:`stationary_distributions`."""
    if chain.facts.representation == "operator":
        if not isinstance(chain.structure, PositiveStructure):
            return chain.facts.matrix.stationary_distributions()
        pi = chain.stationary
        return VectorResult("stationary laws of the closed classes", pi.value[None, :], pi.method, pi.rel_error,
                            details={"classes": chain.structure.closed_classes})
    chain.facts.check_resolved()
    return stationary_distributions(chain.P, chain.structure)


def chain_absorption(chain: Chain) -> Absorption:
    """The class-by-class analysis of a chain's transient states
    (:attr:`ChainFacts.absorption <mlmix.theory.chain.chain_facts.ChainFacts.absorption>`). Routes: a matrix-free
    kernel with positive conditionals has no transient state (one closed class); other matrix-free
    kernels ask their matrix; a dense or CSR matrix (UnderflowError where P cannot stand for the chain):
    :func:`absorption`."""
    if chain.facts.representation == "operator":
        if not isinstance(chain.structure, PositiveStructure):
            return chain.facts.matrix.facts.absorption
        return Absorption(np.zeros(0, dtype=np.int64), chain.structure.closed_classes, None, 0.0)
    chain.facts.check_resolved()
    return absorption(chain.P, chain.structure)
