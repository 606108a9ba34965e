"""Ising and Potts models as exponential families on V^n, by exact enumeration.

A family is p_theta(x) = exp(<theta, T(x)> - A(theta)) with sufficient statistics T: V^n -> R^d and
log-partition A(theta) = log sum_x exp(<theta, T(x)>). Then (paper P, Definition 1)

    grad A = E_theta[T],   Hessian A = Cov_theta(T) = I(theta)  (the Fisher information).

Conventions (paper P eq. (K.57) versus :class:`mlmix.theory.sources.conditionals.IsingModel`):

* ``IsingFamily(graph, convention="unordered")``: theta = (h_0..h_{n-1}, J_e for e in sorted edges),
  T(x) = (sigma_i ; sigma_u sigma_v), i.e. w(x) = sum_i h_i sigma_i + sum_{{u,v} in E} J_uv sigma_u sigma_v,
  each undirected edge counted once, exactly the weight of ``IsingModel(graph, J, h)``.
* ``convention="ordered"``: paper P eq. (5)/(K.57), w(x) = sum_i h_i x_i + sum_{i != j} J_ij x_i x_j
  over *ordered* pairs with J symmetric, so each edge carries 2 J_uv and T_e(x) = 2 sigma_u sigma_v.
  The :class:`IsingModel` built from it has edge weight 2 J_uv (as :func:`clique_ising` does).
  Only J_ij + J_ji is identifiable in (K.57); we take J symmetric. Fisher informations of the two
  conventions differ by the factor 2 on every coupling coordinate: I_ord = D I_unord D, D = diag(1, 2).
* ``PottsFamily(graph, q)``: w(x) = sum_{{u,v} in E} J_uv 1[x_u = x_v] + sum_i h_i(x_i) with the
  reference h_i(0) = 0 (otherwise the fields are not identifiable and I is singular);
  theta = (h_i(v) for i, v = 1..q-1 ; J_e), matching ``PottsModel(graph, q, J, fields)``.

Matrices that must be inverted (I, a pseudolikelihood Hessian) go through :func:`checked_inverse`,
which raises :class:`NearSingularError` instead of silently inverting an ill-conditioned matrix.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import networkx as nx
import numpy as np
from scipy.special import logsumexp

from mlmix.limits import FAMILY_MAX_STATES
from mlmix.theory.sources.conditionals import GibbsModel, IsingModel, PottsModel
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_vector

#: Largest condition number lambda_max / lambda_min accepted before a matrix counts as singular.
MAX_CONDITION = 1e10


CONVENTIONS = ("unordered", "ordered")


class NearSingularError(ValueError):
    """A matrix that must be inverted is singular or too ill-conditioned to invert reliably."""

    def __init__(self, message: str, eigenvalues: np.ndarray) -> None:
        super().__init__(message)
        self.eigenvalues = eigenvalues


def symmetric_eigenvalues(matrix: np.ndarray) -> np.ndarray:
    """Ascending eigenvalues of the symmetric part (M + M^T)/2 of a square matrix."""
    M = np.asarray(matrix, dtype=np.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {M.shape}")
    if not np.isfinite(M).all():
        raise ValueError("matrix contains NaN or infinite entries")
    return np.linalg.eigvalsh((M + M.T) / 2)


def condition_number(matrix: np.ndarray) -> float:
    """lambda_max / lambda_min of a symmetric PSD matrix (inf when lambda_min <= 0)."""
    vals = symmetric_eigenvalues(matrix)
    return float(np.inf) if vals[0] <= 0 else float(vals[-1] / vals[0])


def checked_inverse(matrix: np.ndarray, name: str = "matrix", max_condition: float = MAX_CONDITION) -> np.ndarray:
    """Inverse of a symmetric positive definite matrix by eigendecomposition.

    Raises :class:`NearSingularError` naming ``name``, its smallest and largest eigenvalues and its
    condition number when lambda_min <= lambda_max / ``max_condition`` (or lambda_min <= 0).
    """
    M = np.asarray(matrix, dtype=np.float64)
    M = (M + M.T) / 2
    vals, vecs = np.linalg.eigh(M)
    top = max(abs(vals[-1]), np.finfo(float).tiny)
    if vals[0] <= top / max_condition:
        cond = np.inf if vals[0] <= 0 else vals[-1] / vals[0]
        raise NearSingularError(
            f"{name} is singular or ill-conditioned (eigenvalues from {vals[0]:.3g} to {vals[-1]:.3g}, "
            f"condition number {cond:.3g} > {max_condition:.3g}); refusing to invert it", vals)
    return (vecs / vals) @ vecs.T


class ExponentialFamily(ABC):
    """p_theta(x) ∝ exp(<theta, T(x)>) on all of V^n, with T tabulated once over every state."""

    space: StateSpace
    names: tuple[str, ...]

    def __init__(self, space: StateSpace, names: tuple[str, ...], max_states: int = FAMILY_MAX_STATES) -> None:
        space.check_size(max_states)
        self.space = space
        self.names = tuple(names)
        self._table: np.ndarray | None = None

    @property
    def dimension(self) -> int:
        """d, the number of parameters."""
        return len(self.names)

    @abstractmethod
    def statistics(self, sequences: np.ndarray) -> np.ndarray:
        """T(x) for sequences of shape (B, n): float64 (B, d)."""

    @abstractmethod
    def model(self, theta: np.ndarray) -> GibbsModel:
        """The :mod:`mlmix.theory.sources.conditionals` source with joint p_theta."""

    @abstractmethod
    def parameters(self, model: GibbsModel) -> np.ndarray:
        """theta of a model of this family (inverse of :meth:`model`)."""

    @property
    def table(self) -> np.ndarray:
        """T over all states in index order, shape (|V|^n, d)."""
        if self._table is None:
            self._table = np.asarray(self.statistics(self.space.all_states()), dtype=np.float64)
        return self._table

    def check_theta(self, theta: np.ndarray) -> np.ndarray:
        th = np.asarray(theta, dtype=np.float64)
        if th.shape != (self.dimension,):
            raise ValueError(f"theta must have shape ({self.dimension},) = {self.names}, got {th.shape}")
        if not np.isfinite(th).all():
            raise ValueError("theta must be finite")
        return th

    def log_weights(self, theta: np.ndarray) -> np.ndarray:
        """<theta, T(x)> for every state."""
        return self.table @ self.check_theta(theta)

    def log_partition(self, theta: np.ndarray) -> float:
        """A(theta) = log sum_x exp(<theta, T(x)>)."""
        return float(logsumexp(self.log_weights(theta)))

    def log_probabilities(self, theta: np.ndarray) -> np.ndarray:
        lw = self.log_weights(theta)
        return lw - logsumexp(lw)

    def probabilities(self, theta: np.ndarray) -> np.ndarray:
        """p_theta over all states in index order."""
        return np.exp(self.log_probabilities(theta))

    def mean(self, theta: np.ndarray) -> np.ndarray:
        """E_theta[T] = grad A(theta)."""
        return self.probabilities(theta) @ self.table

    def fisher_information(self, theta: np.ndarray) -> np.ndarray:
        """I(theta) = Cov_theta(T(X)) = Hessian of A (paper P, Definition 1)."""
        p = self.probabilities(theta)
        centred = self.table - p @ self.table
        return (centred * p[:, None]).T @ centred

    def inverse_fisher(self, theta: np.ndarray, max_condition: float = MAX_CONDITION) -> np.ndarray:
        """I(theta)^{-1} = Gamma_MLE; NearSingularError when I is ill-conditioned."""
        return checked_inverse(self.fisher_information(theta), "Fisher information", max_condition)

    def kl(self, p: np.ndarray, theta: np.ndarray) -> float:
        """KL(p || p_theta) for a probability vector p over the states, as sum_x [p log(p/q) - p + q] =
        sum_x q phi(r), r = p/q - 1 = expm1(log p - log q), phi(r) = (1 + r) log1p(r) - r >= 0 (equal to KL when
        both sum to 1): every term is non-negative and phi is summed by its series r^2/2 - r^3/6 + ... for
        |r| < 1e-3, so a p within 1e-10 of p_theta gets its KL of 1e-21 to a relative ~u / |r| (the
        conditioning of r itself; measured 7e-7), where sum p log(p/q) is lost to cancellation (an error of
        1e-16)."""
        p = check_vector(p, self.space.size, "p", probability=True)
        logq = self.log_probabilities(theta)
        q = np.exp(logq)
        live = p > 0
        r = np.expm1(np.log(p[live]) - logq[live])
        small = np.abs(r) < 1e-3
        rs = r[small]
        phi = np.empty_like(r)
        phi[small] = rs * rs * (0.5 - rs * (1 / 6 - rs * (1 / 12 - rs * (1 / 20 - rs / 30))))
        big = r[~small]
        phi[~small] = (1 + big) * np.log1p(big) - big
        return float(np.sum(q[live] * phi) + np.sum(q[~live]))

    def sample(self, theta: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        """Exact i.i.d. draws from p_theta, as state indices (inverse-CDF on the enumerated joint)."""
        cdf = np.cumsum(self.probabilities(theta))
        return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), self.space.size - 1)


def _sorted_edges(graph: nx.Graph) -> list[tuple[int, int]]:
    if not isinstance(graph, nx.Graph) or graph.is_directed() or graph.is_multigraph():
        raise TypeError("graph must be an undirected simple networkx.Graph")
    n = graph.number_of_nodes()
    if set(graph.nodes) != set(range(n)):
        raise ValueError(f"graph nodes must be exactly 0..{n - 1}")
    if any(u == v for u, v in graph.edges):
        raise ValueError("graph must not have self-loops")
    return sorted((min(u, v), max(u, v)) for u, v in graph.edges)


class IsingFamily(ExponentialFamily):
    """Ising models on a fixed graph: theta = (h_0..h_{n-1}, J_e for e in sorted edges).

    ``convention`` chooses the pair statistic: "unordered" T_e = sigma_u sigma_v (each edge once,
    as :class:`IsingModel`), "ordered" T_e = 2 sigma_u sigma_v (paper P eqs. (5), (K.57)).
    Symbol 0 is spin -1, symbol 1 is spin +1.
    """

    def __init__(self, graph: nx.Graph, convention: str = "unordered", max_states: int = FAMILY_MAX_STATES) -> None:
        if convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
        self.edges = _sorted_edges(graph)
        self.graph = graph
        self.convention = convention
        self.pair_factor = 2.0 if convention == "ordered" else 1.0
        n = graph.number_of_nodes()
        names = tuple(f"h{i}" for i in range(n)) + tuple(f"J{u}_{v}" for u, v in self.edges)
        super().__init__(StateSpace(2, n), names, max_states)
        self._u = np.array([e[0] for e in self.edges], dtype=np.int64)
        self._v = np.array([e[1] for e in self.edges], dtype=np.int64)

    @property
    def n_fields(self) -> int:
        return self.space.length

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(h, J_edges) views of theta."""
        th = self.check_theta(theta)
        return th[: self.n_fields], th[self.n_fields:]

    def statistics(self, sequences: np.ndarray) -> np.ndarray:
        s = 2.0 * np.asarray(sequences, dtype=np.float64) - 1.0
        return np.concatenate([s, self.pair_factor * s[:, self._u] * s[:, self._v]], axis=1)

    def model(self, theta: np.ndarray) -> IsingModel:
        h, J = self.split(theta)
        couplings = {e: self.pair_factor * j for e, j in zip(self.edges, J)}
        return IsingModel(self.graph, couplings=couplings, fields=h)

    def parameters(self, model: GibbsModel) -> np.ndarray:
        if not isinstance(model, IsingModel):
            raise TypeError(f"expected an IsingModel, got {type(model).__name__}")
        if model.space != self.space or model.beta != 1.0 or model.temperature != 1.0:
            raise ValueError("model must live on the same graph size with beta = 1 and temperature 1")
        M = model.coupling_matrix()
        off = {e for e in zip(*np.nonzero(np.triu(M)))} - set(self.edges)
        if off:
            raise ValueError(f"model has couplings outside the family's edges: {sorted(off)}")
        J = np.array([M[u, v] for u, v in self.edges]) / self.pair_factor
        return np.concatenate([model.h, J])


class PottsFamily(ExponentialFamily):
    """Potts models with q states on a graph: theta = (h_i(v) for i in [n], v = 1..q-1 ; J_e).

    w(x) = sum_i h_i(x_i) + sum_{{u,v} in E} J_uv 1[x_u = x_v], with h_i(0) = 0 fixed.
    """

    def __init__(self, graph: nx.Graph, q: int, max_states: int = FAMILY_MAX_STATES) -> None:
        self.edges = _sorted_edges(graph)
        self.graph = graph
        n = graph.number_of_nodes()
        space = StateSpace(q, n)
        self.q = space.vocab_size
        names = tuple(f"h{i}({v})" for i in range(n) for v in range(1, self.q)) + \
            tuple(f"J{u}_{v}" for u, v in self.edges)
        super().__init__(space, names, max_states)
        self._u = np.array([e[0] for e in self.edges], dtype=np.int64)
        self._v = np.array([e[1] for e in self.edges], dtype=np.int64)

    @property
    def n_fields(self) -> int:
        return self.space.length * (self.q - 1)

    def statistics(self, sequences: np.ndarray) -> np.ndarray:
        x = np.asarray(sequences)
        onehot = (x[:, :, None] == np.arange(1, self.q)).reshape(x.shape[0], -1).astype(np.float64)
        same = (x[:, self._u] == x[:, self._v]).astype(np.float64)
        return np.concatenate([onehot, same], axis=1)

    def model(self, theta: np.ndarray) -> PottsModel:
        th = self.check_theta(theta)
        n = self.space.length
        fields = np.zeros((n, self.q))
        fields[:, 1:] = th[: self.n_fields].reshape(n, self.q - 1)
        couplings = dict(zip(self.edges, th[self.n_fields:]))
        return PottsModel(self.graph, self.q, couplings=couplings, fields=fields)

    def parameters(self, model: GibbsModel) -> np.ndarray:
        if not isinstance(model, PottsModel):
            raise TypeError(f"expected a PottsModel, got {type(model).__name__}")
        if model.space != self.space or model.beta != 1.0 or model.temperature != 1.0:
            raise ValueError("model must have the same q and n, beta = 1 and temperature 1")
        J = dict(zip(zip(model.edge_u.tolist(), model.edge_v.tolist()), model.J))
        extra = {e for e, j in J.items() if j != 0} - set(self.edges)
        if extra:
            raise ValueError(f"model has couplings outside the family's edges: {sorted(extra)}")
        fields = model.h - model.h[:, :1]  # gauge h_i(0) = 0 (a per-site constant does not change p)
        return np.concatenate([fields[:, 1:].ravel(), [J.get(e, 0.0) for e in self.edges]])
