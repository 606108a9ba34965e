"""Sources of single-site conditionals on V^n: the one interface every analysis consumes.

A source gives, for a site i and contexts x_{-i}, scores s_i(v | x_{-i}) (independent of x_i)
and, at temperature T > 0, the conditionals (paper G, section 3.1)

    pi_i^T(v | x_{-i}) = exp(s_i(v | x_{-i}) / T) / sum_u exp(s_i(u | x_{-i}) / T).

Compatible sources come from a joint law mu(x) ∝ exp(w(x)) with scores s_i(v|x_{-i}) = w(x^{i<-v})
(Gibbs, Ising, Potts, any log-weight table); their tempered joint is mu_T ∝ exp(w / T).
Score tables are generally incompatible, like a masked language model, which is just another
source (``mlmix.empirical.models.mlm``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from itertools import combinations
from typing import Mapping

import networkx as nx
import numpy as np
from scipy.special import log_softmax

from mlmix.theory.sources.score_accuracy import EXACT, ScoreAccuracy, max_abs_score, source_accuracy
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_memory, check_score_values, check_table_shape, check_temperature, table_entries


class Conditionals(ABC):
    """Interface: scores and log-conditionals at one site for a batch of contexts.

    Contexts are integer arrays of shape (B, n) with symbols in [0, |V|); the symbol at the
    queried site is ignored. ``sites`` is one site for the whole batch or one per context.

    A source declares its capabilities, which the kernels and commands read instead of its class:
    :attr:`has_joint` (a compatible source: :meth:`log_joint` gives its joint law), :attr:`has_table`
    (its conditionals are a stored score table, :meth:`score_table` is free),
    :attr:`partial_conditionals` (it also gives conditionals given partially masked contexts, what a
    decoder reads), :attr:`truncated` (another source's conditionals cut by top-k / top-p),
    :attr:`masked_lm` (its conditionals are a masked LM's forward passes) and :meth:`local_factors` (its log-weight as a sum of small factors).
    """

    space: StateSpace
    temperature: float
    #: Whether :meth:`log_joint` gives the joint law mu_T (the conditionals are compatible).
    has_joint: bool = False
    #: Whether the conditionals are a stored table (``table`` of :class:`ScoreTable`'s layout).
    has_table: bool = False
    #: Whether the source gives p_i(. | x_S) for partial contexts x_S (:class:`~mlmix.theory.sources.partial.PartialScoreTable`).
    partial_conditionals: bool = False
    #: Whether the conditionals are another source's truncated by top-k / top-p
    #: (:class:`~mlmix.theory.kernels.scan_and_mh.Truncated`): paper G's constants are computed for that
    #: source, not for its truncation.
    truncated: bool = False
    #: Whether each conditional is a masked LM's forward pass
    #: (:class:`~mlmix.empirical.models.mlm.MaskedLMConditionals`): its table is tabulated once, at a
    #: measured pass rate, and cached.
    masked_lm: bool = False

    def __init__(self, space: StateSpace, temperature: float = 1.0) -> None:
        self.space = space
        self.temperature = check_temperature(temperature)

    @abstractmethod
    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        """Scores s_i(. | x_{-i}) at T = 1 for one site: float64 array (B, |V|)."""

    def scores(self, contexts: np.ndarray, sites: int | np.ndarray) -> np.ndarray:
        """Scores s_i(v | x_{-i}) for each context and its site: float64 (B, |V|)."""
        ctx = self.check_contexts(contexts)
        if np.ndim(sites) == 0:
            return np.asarray(self.site_scores(ctx, self.space.check_site(sites)), dtype=np.float64)
        site_arr = np.asarray(sites, dtype=np.int64)
        if site_arr.shape != (ctx.shape[0],):
            raise ValueError(f"sites must be a scalar or have shape ({ctx.shape[0]},), got {site_arr.shape}")
        out = np.empty((ctx.shape[0], self.space.vocab_size))
        for site in np.unique(site_arr):
            rows = site_arr == site
            out[rows] = self.site_scores(ctx[rows], self.space.check_site(site))
        return out

    def log_conditionals(self, contexts: np.ndarray, sites: int | np.ndarray) -> np.ndarray:
        """log pi_i^T(v | x_{-i}) = log_softmax(s_i / T): float64 (B, |V|)."""
        return log_softmax(self.scores(contexts, sites) / self.temperature, axis=-1)

    def all_log_conditionals(self, contexts: np.ndarray) -> np.ndarray:
        """log pi_i^T(. | x_{-i}) at every site: float64 (B, n, |V|)."""
        ctx = self.check_contexts(contexts)
        return np.stack([self.log_conditionals(ctx, i) for i in range(self.space.length)], axis=1)

    def at_temperature(self, temperature: float) -> "Conditionals":
        """The same scores at another temperature (a shallow copy)."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.temperature = check_temperature(temperature)
        return clone

    def log_joint(self) -> np.ndarray | None:
        """Unnormalised log mu_T over all states for a compatible source, else None."""
        return None

    def local_factors(self) -> list[tuple[tuple[int, ...], np.ndarray]] | None:
        """The log-weight at T = 1 as a sum of small factors, w(x) = sum_f table_f[x_{axes_f}] (a list of
        (axes, table)), or None: a source without such a form (the matrix-free kernels then build each
        site's conditional from the factors touching it instead of a table of n |V|^n numbers)."""
        return None

    def score_table(self) -> "ScoreTable":
        """The scores of every site and context as a :class:`ScoreTable` (the source itself when it is
        one, :attr:`has_table`; otherwise every context is queried once)."""
        return ScoreTable.from_conditionals(self)

    def tabulated(self) -> "Conditionals":
        """The source as the kernel builders read it, every conditional at hand: the source itself
        here; a masked LM overrides this to tabulate its n |V|^(n-1) conditionals over the frame
        once (cached), so that an MLM is one more source of conditionals for ``Chain.from_source``."""
        return self

    @property
    def label(self) -> str | None:
        """A short name for a chain built on this source, or None."""
        return None

    def check_contexts(self, contexts: np.ndarray) -> np.ndarray:
        """Validate a batch of contexts: integer array (B, n) with symbols in [0, |V|)."""
        ctx = np.asarray(contexts)
        if ctx.ndim != 2 or ctx.shape[1] != self.space.length:
            raise ValueError(f"contexts must have shape (B, {self.space.length}), got {ctx.shape}")
        if not np.issubdtype(ctx.dtype, np.integer):
            raise TypeError(f"contexts must be integer symbols, got dtype {ctx.dtype}")
        if ctx.size and (ctx.min() < 0 or ctx.max() >= self.space.vocab_size):
            raise ValueError(f"context symbols must lie in [0, {self.space.vocab_size})")
        return ctx


class GibbsModel(Conditionals):
    """A joint law mu(x) ∝ exp(w(x)) given by a log-weight function w; scores s_i(v) = w(x^{i<-v}).

    Subclasses implement :meth:`log_weight` for a batch of sequences.
    """

    has_joint = True

    @abstractmethod
    def log_weight(self, sequences: np.ndarray) -> np.ndarray:
        """w(x) for sequences of shape (B, n): float64 (B,)."""

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        q = self.space.vocab_size
        subst = np.repeat(contexts[:, None, :], q, axis=1)
        subst[:, :, site] = np.arange(q)
        return self.log_weight(subst.reshape(-1, self.space.length)).reshape(-1, q)

    def log_joint(self) -> np.ndarray:
        """log mu_T(x) up to a constant, w(x) / T, for every state in index order."""
        return self.log_weight(self.space.all_states()) / self.temperature

    def joint(self, max_states: int | None = None) -> np.ndarray:
        """The normalised tempered joint mu_T over all states (float64)."""
        if max_states is not None:
            self.space.check_size(max_states)
        lw = self.log_joint()
        p = np.exp(lw - lw.max())
        return p / p.sum()


class LogWeightTable(GibbsModel):
    """Joint law from a table of log-weights w(x) over all |V|^n states in index order."""

    def __init__(self, space: StateSpace, log_weights: np.ndarray, temperature: float = 1.0) -> None:
        super().__init__(space, temperature)
        lw = np.asarray(log_weights, dtype=np.float64)
        if lw.shape != (space.size,):
            raise ValueError(f"log_weights must have shape ({space.size},), got {lw.shape}")
        if np.isnan(lw).any() or np.isposinf(lw).any():
            raise ValueError("log_weights contain NaN or +inf")
        if not np.isfinite(lw).any():
            raise ValueError("log_weights give zero mass to every state")
        self.log_weights = lw

    def log_weight(self, sequences: np.ndarray) -> np.ndarray:
        return self.log_weights[self.space.encode(sequences)]

    @classmethod
    def from_probabilities(cls, space: StateSpace, probabilities: np.ndarray) -> "LogWeightTable":
        """The joint with the given probabilities over V^n (zeros allowed: log weight -inf)."""
        p = np.asarray(probabilities, dtype=np.float64)
        if p.shape != (space.size,) or np.isnan(p).any() or (p < 0).any() or p.sum() <= 0:
            raise ValueError("probabilities must be a non-negative, non-NaN vector over all states")
        with np.errstate(divide="ignore"):
            return cls(space, np.log(p / p.sum()))

    @classmethod
    def random(cls, space: StateSpace, seed: int | None = None, scale: float = 1.0,
               temperature: float = 1.0) -> "LogWeightTable":
        """Log-weights i.i.d. N(0, scale^2): a random strictly positive joint."""
        rng = np.random.default_rng(seed)
        return cls(space, scale * rng.standard_normal(space.size), temperature)


def _graph_sites(graph: nx.Graph, n: int | None) -> int:
    if not isinstance(graph, nx.Graph):
        raise TypeError(f"graph must be a networkx graph, got {type(graph).__name__}")
    nodes = set(graph.nodes)
    size = graph.number_of_nodes() if n is None else int(n)
    if nodes != set(range(size)):
        raise ValueError(f"graph nodes must be exactly 0..{size - 1}, got {sorted(nodes, key=str)}")
    return size


def _edge_couplings(graph: nx.Graph, couplings: float | Mapping | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    edges = np.array(sorted((min(u, v), max(u, v)) for u, v in graph.edges), dtype=np.int64).reshape(-1, 2)
    if couplings is None:
        vals = [graph.edges[u, v].get("J", 1.0) for u, v in edges]
    elif isinstance(couplings, Mapping):
        vals = [couplings.get((u, v), couplings.get((v, u), 0.0)) for u, v in edges]
    else:
        vals = [float(couplings)] * len(edges)
    J = np.asarray(vals, dtype=np.float64)
    if not np.isfinite(J).all():
        raise ValueError("couplings must be finite")
    return edges[:, 0], edges[:, 1], J


class IsingModel(GibbsModel):
    """Ising model on a graph, spins sigma = 2x - 1 in {-1, +1} (symbol 0 is -1):

        w(x) = beta * ( sum_{ {i,j} in E } J_ij sigma_i sigma_j + sum_i h_i sigma_i ),

    each undirected edge counted once. Couplings come from ``couplings`` (scalar or dict keyed by
    edge) or the edge attribute ``J`` (default 1).
    """

    def __init__(self, graph: nx.Graph, couplings: float | Mapping | None = None,
                 fields: float | np.ndarray | None = None, beta: float = 1.0, n: int | None = None,
                 temperature: float = 1.0) -> None:
        size = _graph_sites(graph, n)
        super().__init__(StateSpace(2, size), temperature)
        self.graph = graph
        self.beta = float(beta)
        if not np.isfinite(self.beta):
            raise ValueError("beta must be finite")
        self.edge_u, self.edge_v, self.J = _edge_couplings(graph, couplings)
        h = np.zeros(size) if fields is None else np.broadcast_to(np.asarray(fields, dtype=np.float64), (size,)).copy()
        if not np.isfinite(h).all():
            raise ValueError("fields must be finite")
        self.h = h

    def coupling_matrix(self) -> np.ndarray:
        """Symmetric (n, n) matrix with J_ij = J_ji on edges, zero diagonal."""
        M = np.zeros((self.space.length,) * 2)
        M[self.edge_u, self.edge_v] = self.J
        M[self.edge_v, self.edge_u] = self.J
        return M

    def log_weight(self, sequences: np.ndarray) -> np.ndarray:
        s = 2.0 * np.asarray(sequences, dtype=np.float64) - 1.0
        pair = (s[:, self.edge_u] * s[:, self.edge_v]) @ self.J
        return self.beta * (pair + s @ self.h)

    def local_factors(self) -> list[tuple[tuple[int, ...], np.ndarray]] | None:
        """Edge tables beta J_ij sigma sigma' and field tables beta h_i sigma (zero terms dropped); None
        for a subclass with its own :meth:`log_weight`."""
        if type(self).log_weight is not IsingModel.log_weight:
            return None
        sigma = np.array([-1.0, 1.0])
        factors = [((int(u), int(v)), self.beta * J * np.outer(sigma, sigma))
                   for u, v, J in zip(self.edge_u, self.edge_v, self.J) if J != 0]
        return factors + [((i,), self.beta * h * sigma) for i, h in enumerate(self.h) if h != 0]


def clique_ising(n: int, clique: list[int] | range, J: float, fields: float | np.ndarray,
                 temperature: float = 1.0) -> IsingModel:
    """Paper P eq. (5): p(x) ∝ exp( sum_i h_i x_i + sum_{i != j in C} J x_i x_j ).

    The sum runs over *ordered* pairs of the clique C, so each unordered edge carries 2J; the
    other n - |C| spins are isolated and feel only their fields.
    """
    clique = sorted(int(c) for c in clique)
    if len(clique) < 2 or len(set(clique)) != len(clique) or clique[0] < 0 or clique[-1] >= n:
        raise ValueError(f"clique must hold at least 2 distinct sites of 0..{n - 1}, got {clique}")
    graph = nx.empty_graph(n)
    graph.add_edges_from(combinations(clique, 2))
    model = IsingModel(graph, couplings=2.0 * float(J), fields=fields, temperature=temperature)
    model.clique = clique
    return model


class PottsModel(GibbsModel):
    """Potts model with q states on a graph:

        w(x) = beta * ( sum_{ {i,j} in E } J_ij 1[x_i = x_j] + sum_i h_i(x_i) ),

    fields of shape (n, q) (default zero), couplings as for :class:`IsingModel`.
    """

    def __init__(self, graph: nx.Graph, q: int, couplings: float | Mapping | None = None,
                 fields: np.ndarray | None = None, beta: float = 1.0, n: int | None = None,
                 temperature: float = 1.0) -> None:
        size = _graph_sites(graph, n)
        super().__init__(StateSpace(q, size), temperature)
        self.graph = graph
        self.beta = float(beta)
        if not np.isfinite(self.beta):
            raise ValueError("beta must be finite")
        self.edge_u, self.edge_v, self.J = _edge_couplings(graph, couplings)
        h = np.zeros((size, q)) if fields is None else np.asarray(fields, dtype=np.float64)
        if h.shape != (size, q) or not np.isfinite(h).all():
            raise ValueError(f"fields must be a finite array of shape ({size}, {q})")
        self.h = h

    def log_weight(self, sequences: np.ndarray) -> np.ndarray:
        x = np.asarray(sequences)
        same = (x[:, self.edge_u] == x[:, self.edge_v]).astype(np.float64)
        field = self.h[np.arange(self.space.length), x].sum(axis=1)
        return self.beta * (same @ self.J + field)

    def local_factors(self) -> list[tuple[tuple[int, ...], np.ndarray]] | None:
        """Edge tables beta J_ij 1[x = x'] and field tables beta h_i(x) (zero terms dropped); None for a
        subclass with its own :meth:`log_weight`."""
        if type(self).log_weight is not PottsModel.log_weight:
            return None
        q = self.space.vocab_size
        factors = [((int(u), int(v)), self.beta * J * np.eye(q))
                   for u, v, J in zip(self.edge_u, self.edge_v, self.J) if J != 0]
        return factors + [((i,), self.beta * h) for i, h in enumerate(self.h) if np.any(h != 0)]

    @classmethod
    def random(cls, graph: nx.Graph, q: int, seed: int | None = None, coupling_scale: float = 1.0,
               field_scale: float = 0.5, temperature: float = 1.0) -> "PottsModel":
        """Couplings N(0, coupling_scale^2) per edge and fields N(0, field_scale^2)."""
        rng = np.random.default_rng(seed)
        n = graph.number_of_nodes()
        edges = sorted((min(u, v), max(u, v)) for u, v in graph.edges)
        J = dict(zip(edges, coupling_scale * rng.standard_normal(len(edges))))
        return cls(graph, q, J, field_scale * rng.standard_normal((n, q)), temperature=temperature)


class ScoreTable(Conditionals):
    """Local scores s_i(v | x_{-i}) stored for every site and context (generally incompatible).

    ``table[i, c, v]`` with c the index of x_{-i} in V^{n-1} (mixed radix, remaining sites in
    order). Shape (n, |V|^(n-1), |V|). Entries are finite or -inf (p_i(v | x_{-i}) = 0: the chain may
    then be reducible, which the analysis reports), never NaN or +inf, with a finite entry in every row.
    ``score_accuracy``: how far each entry may be from the scores it stands for
    (:mod:`mlmix.theory.sources.score_accuracy`): :data:`~mlmix.theory.sources.score_accuracy.EXACT` for a
    table given as numbers (the table is the source), the charge of the model's arithmetic for a table
    tabulated from a model; every certified bracket built from the table carries it.
    """

    has_table = True

    def __init__(self, space: StateSpace, table: np.ndarray, temperature: float = 1.0, *,
                 score_accuracy: ScoreAccuracy = EXACT) -> None:
        super().__init__(space, temperature)
        tab = np.asarray(table)
        check_table_shape(tab.shape, space.length, space.vocab_size, space.vocab_size,
                          f"a score table of |V| = {space.vocab_size}, n = {space.length}")
        self.table = check_score_values(tab, "score table")
        if not isinstance(score_accuracy, ScoreAccuracy):
            raise TypeError(f"score_accuracy must be a ScoreAccuracy, got {type(score_accuracy).__name__}")
        self.score_accuracy = score_accuracy

    def _context_index(self, contexts: np.ndarray, site: int) -> np.ndarray:
        rest = np.delete(contexts, site, axis=1).astype(np.int64)
        q, n = self.space.vocab_size, self.space.length
        return rest @ (q ** np.arange(n - 2, -1, -1, dtype=np.int64))

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        return self.table[site, self._context_index(contexts, site)]

    def score_table(self) -> "ScoreTable":
        """The table itself."""
        return self

    @classmethod
    def random(cls, vocab_size: int, length: int, seed: int | None = None, scale: float = 1.0,
               temperature: float = 1.0) -> "ScoreTable":
        """Scores i.i.d. N(0, scale^2) for every (site, context, symbol)."""
        space = StateSpace(vocab_size, length)
        check_memory(8.0 * table_entries(length, vocab_size, vocab_size), f"a score table of {vocab_size}^{length - 1} contexts")
        rng = np.random.default_rng(seed)
        shape = (length, vocab_size ** (length - 1), vocab_size)
        return cls(space, scale * rng.standard_normal(shape), temperature)

    @classmethod
    def from_conditionals(cls, source: Conditionals, batch_size: int = 65536) -> "ScoreTable":
        """Tabulate any source (an MLM included) by querying every context at every site; the table
        carries the source's score accuracy (:func:`~mlmix.theory.sources.score_accuracy.source_accuracy`)."""
        space = source.space
        q, n = space.vocab_size, space.length
        table = np.empty((n, q ** (n - 1), q))
        place = q ** np.arange(n - 2, -1, -1, dtype=np.int64)
        rest = (np.arange(q ** (n - 1), dtype=np.int64)[:, None] // place) % q if n > 1 else np.zeros((1, 0), np.int64)
        for i in range(n):
            ctx = np.insert(rest, i, 0, axis=1)
            for start in range(0, ctx.shape[0], batch_size):
                table[i, start:start + batch_size] = source.scores(ctx[start:start + batch_size], i)
        return cls(space, table, source.temperature, score_accuracy=source_accuracy(source, max_abs_score(table)))
