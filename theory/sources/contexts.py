"""Batched score queries over a set of contexts: the shared access layer of the local quantities.

Every local quantity of paper G (influence and oscillation, rectangles, margins and drift) takes a
:class:`~mlmix.theory.sources.conditionals.Conditionals` source and a set of contexts:

* ``contexts=None`` enumerates all of V^n (with every replacement symbol): the **exact** value
  (refused past ``max_states`` states);
* an int array ``(B, n)`` of contexts (and optionally a limited set of replacement symbols): an
  **estimate**. Quantities defined as suprema over contexts (rho_ij, Delta_ij, R max) are then
  maxima over a subset, hence LOWER bounds of the true suprema.

Queries to the source are batched into large ``source.scores(contexts, sites)`` calls with a
per-row site array (:data:`QUERY_FLOATS` bounds the memory of one call), so the same code serves
a masked language model with |V| = 30,000 and n = 20. Scores are T-independent; conditionals are
pi_i^T(.|x_{-i}) = softmax(s_i(.|x_{-i}) / T) at the source's temperature.

Replacement symbols b at site j (the y = x^{j<-b} of rho_ij and Delta_ij) are chosen by
``replacements``:

* ``None``: every b in V other than x_j (needed for the exact value);
* an int k: k symbols per (context, site), uniform on V minus {x_j} with replacement, drawn from
  ``rng`` once before any query (so the result does not depend on the batching);
* :class:`TopK` (k): the k highest-scoring symbols of the source's own s_j(.|x_{-j}) other than x_j;
* an int array, shape (R,) (the same candidates for every context) or (B, R): given candidates
  (entries equal to x_j are skipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from mlmix.limits import EXACT_MAX_STATES
from mlmix.theory.sources.conditionals import Conditionals, ScoreTable
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int, check_memory

#: held per working chunk (256 MiB); lower it for a small GPU, raise it for throughput.
QUERY_FLOATS = 2**25



# ----------------------------------------------------------------------------------------------
# Batched access to scores


def rows_per_call(q: int, per_row: int = 1) -> int:
    return max(1, QUERY_FLOATS // (q * per_row))


def query_scores(source: Conditionals, states: np.ndarray, sites: np.ndarray | int) -> np.ndarray:
    """s_i(. | x_{-i}) for each row x of ``states`` and its site: float64 (B, |V|), T-independent.

    Splits the request into calls of at most :data:`QUERY_FLOATS` floats, each one
    ``source.scores(contexts, sites)`` with a per-row site array.
    """
    states = np.asarray(states)
    sites = np.broadcast_to(np.asarray(sites, dtype=np.int64), (states.shape[0],))
    q = source.space.vocab_size
    out = np.empty((states.shape[0], q))
    step = rows_per_call(q)
    for start in range(0, states.shape[0], step):
        out[start:start + step] = source.scores(states[start:start + step], sites[start:start + step])
    return out


def query_all_sites(source: Conditionals, states: np.ndarray) -> np.ndarray:
    """Scores at every site of every state: float64 (B, n, |V|) from one batched request."""
    states = np.asarray(states)
    B, n = states.shape
    flat = query_scores(source, np.repeat(states, n, axis=0), np.tile(np.arange(n), B))
    return flat.reshape(B, n, source.space.vocab_size)


class ScoreOracle:
    """Scores s_i(.|x_{-i}) at every site of a batch of states, queried from the source on demand
    (sampled context sets; exact passes read a :func:`context_table` instead)."""

    def __init__(self, source: Conditionals) -> None:
        self.source = source

    def all_sites(self, states: np.ndarray, skip: np.ndarray | None = None,
                  known: np.ndarray | None = None) -> np.ndarray:
        """(E, n, q) scores; with ``skip`` (E,) the skipped site's row is copied from ``known``."""
        if skip is None:
            return query_all_sites(self.source, states)
        E, n = states.shape
        others = np.array([[k for k in range(n) if k != j] for j in range(n)], dtype=np.int64).reshape(n, n - 1)
        sites = others[skip]  # (E, n-1)
        out = np.empty((E, n, self.source.space.vocab_size))
        flat = query_scores(self.source, np.repeat(states, n - 1, axis=0), sites.ravel())
        out[np.arange(E)[:, None], sites] = flat.reshape(E, n - 1, -1)
        out[np.arange(E), skip] = known[np.arange(E), skip]
        return out


def context_table(source: Conditionals, max_states: int = EXACT_MAX_STATES) -> np.ndarray:
    """s_i(. | x_{-i}) for every site and context: float64 (n, |V|^(n-1), |V|), the layout of
    :class:`~mlmix.theory.sources.conditionals.ScoreTable` (a score table's own array is returned as is;
    any other source is queried once per context, n |V|^(n-1) rows). |V| times smaller than
    :func:`score_table`; refused past ``max_states`` states or the memory limit."""
    space = source.space
    space.check_size(max_states)
    if source.has_table:
        return source.table
    check_memory(8 * space.length * space.size, f"the score table of {space.length} x {space.size} scores")
    return ScoreTable.from_conditionals(source).table


def site_tensor(table: np.ndarray, space: StateSpace, site: int) -> np.ndarray:
    """The rows of site i of a :func:`context_table` as a tensor with one axis per other site
    (ascending) and the symbol last: shape (|V|,) * (n - 1) + (|V|,) (a view)."""
    q, n = space.vocab_size, space.length
    return table[site].reshape((q,) * (n - 1) + (q,))


def score_table(source: Conditionals, max_states: int = EXACT_MAX_STATES) -> np.ndarray:
    """s_i(. | x_{-i}) at every site of every state of V^n: float64 (|V|^n, n, |V|), index order.

    Each context x_{-i} is queried once (|V|^(n-1) rows per site) and broadcast over its fibre.
    """
    space = source.space
    space.check_size(max_states)
    check_memory(8 * space.length * space.vocab_size * space.size, "the per-state score table")
    n, q = space.length, space.vocab_size
    idx = np.arange(space.size, dtype=np.int64)
    out = np.empty((space.size, n, q))
    for i in range(n):
        place = int(space.place_values[i])
        base = idx[(idx // place) % q == 0]
        s = query_scores(source, space.decode(base), i)  # (N/q, q)
        for v in range(q):
            out[base + v * place, i] = s
    return out


def state_chunks(space: StateSpace, contexts: np.ndarray | None, rows: int,
                  max_states: int) -> Iterator[np.ndarray]:
    if contexts is None:
        space.check_size(max_states)
        for start in range(0, space.size, rows):
            yield space.decode(np.arange(start, min(start + rows, space.size), dtype=np.int64))
    else:
        ctx = check_states(space, contexts, "contexts")
        for start in range(0, ctx.shape[0], rows):
            yield ctx[start:start + rows]


def check_states(space: StateSpace, states: np.ndarray, name: str = "states") -> np.ndarray:
    arr = np.asarray(states)
    if arr.ndim != 2 or arr.shape[1] != space.length:
        raise ValueError(f"{name} must have shape (B, {space.length}), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be integer symbols, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= space.vocab_size):
        raise ValueError(f"{name} symbols must lie in [0, {space.vocab_size})")
    return arr.astype(np.int64, copy=False)


# ----------------------------------------------------------------------------------------------
# Replacement symbols


@dataclass(frozen=True)
class TopK:
    """Replace x_j by the k symbols the source itself scores highest at site j (x_j excluded)."""

    k: int

    def __post_init__(self) -> None:
        check_int(self.k, "TopK k", minimum=1)


Replacements = None | int | TopK | np.ndarray


def resolve_replacements(replacements: Replacements, space: StateSpace, contexts: np.ndarray | None,
                          rng: np.random.Generator | None, max_states: int) -> None | TopK | np.ndarray:
    """None, TopK, or candidates per context and site as an array (B, n, R) (a broadcast view for
    given arrays; random draws are made once here, so they do not depend on the batching)."""
    if replacements is None or isinstance(replacements, TopK):
        return replacements
    B = context_count(space, contexts)
    n = space.length
    if isinstance(replacements, (int, np.integer)) and not isinstance(replacements, bool):
        check_int(replacements, "replacements count", minimum=1)
        if rng is None:
            raise ValueError("random replacements (an int count) need an rng (np.random.Generator)")
        if contexts is None:
            space.check_size(max_states)
        ctx = space.all_states() if contexts is None else check_states(space, contexts, "contexts")
        return other_symbol(ctx[:, :, None], rng.integers(0, space.vocab_size - 1, size=(B, n, int(replacements))))
    arr = np.asarray(replacements)
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise TypeError("replacements must be None, an int count, TopK(k) or an int array (R,) or (B, R)")
    if arr.min() < 0 or arr.max() >= space.vocab_size:
        raise ValueError(f"replacement symbols must lie in [0, {space.vocab_size})")
    if arr.ndim == 2 and (contexts is None or arr.shape[0] != B):
        raise ValueError("per-context replacements (B, R) need contexts with the same B rows")
    arr = arr.astype(np.int64)
    return np.broadcast_to(arr if arr.ndim == 1 else arr[:, None, :], (B, n, arr.shape[-1]))


def replacement_symbols(rule: None | TopK | np.ndarray, ctx: np.ndarray, site: int, scores_j: np.ndarray,
                         rows: slice, q: int) -> np.ndarray:
    """Candidate b for each context of the chunk at ``site``: (c, R), -1 where there is none."""
    current = ctx[:, site][:, None]
    c = ctx.shape[0]
    if rule is None:
        b = np.broadcast_to(np.arange(q), (c, q)).copy()
    elif isinstance(rule, TopK):
        s = scores_j.copy()
        s[np.arange(c), ctx[:, site]] = -np.inf
        k = min(rule.k, q - 1)
        b = np.argpartition(-s, k - 1, axis=1)[:, :k]
    else:
        b = rule[rows, site].copy()
    b[b == current] = -1
    return b


def context_count(space: StateSpace, contexts: np.ndarray | None) -> int:
    """Number of contexts in a context set (all of V^n when ``contexts`` is None)."""
    return space.size if contexts is None else int(np.asarray(contexts).shape[0])


def other_symbol(current: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Map u uniform on [0, q-1) to a symbol uniform on V minus {current}."""
    return u + (u >= current)
