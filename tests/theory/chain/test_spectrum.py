"""``theory/chain/spectrum.py``: eigenvalues(k) of a reversible chain on the Krylov path (above the dense
limit) against the dense LAPACK path and the closed form of Glauber dynamics on independent sites
(eigenvalues 1 - |S|/n with multiplicity C(n, |S|): the Krylov path must count the repeated ones)."""

import math

import networkx as nx
import numpy as np
import scipy.sparse as sp

from mlmix.theory.chain import spectrum
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.sources.conditionals import IsingModel, PottsModel


def closed_form(n: int, k: int) -> np.ndarray:
    values = [1 - s / n for s in range(n + 1) for _ in range(math.comb(n, s))]
    return np.array(sorted(values, key=lambda x: -abs(x))[:k])


def test_repeated_eigenvalues_on_the_krylov_path_match_the_closed_form(monkeypatch):
    n, k = 9, 12
    P = glauber_kernel(IsingModel(nx.empty_graph(n), couplings=0.0, fields=0.3, beta=1.0))
    dense = spectrum.eigenvalues(P.toarray(), k, True)
    monkeypatch.setattr(spectrum, "DENSE_SPECTRUM_LIMIT", 10)
    krylov = spectrum.eigenvalues(sp.csr_array(P), k, True)
    exact = closed_form(n, k)  # 1, 8/9 (x 9), 7/9 (x 2)
    for ev in (dense, krylov):
        assert np.all(np.abs(np.asarray(ev.value) - exact) <= ev.details["error_bounds"])
    assert "Lanczos" in krylov.method and "LAPACK" in dense.method


def test_krylov_path_against_dense_on_a_random_reversible_chain(monkeypatch):
    P = glauber_kernel(PottsModel.random(nx.cycle_graph(5), 3, seed=4))  # 243 states, distinct eigenvalues
    dense = spectrum.eigenvalues(P.toarray(), 6, True)
    monkeypatch.setattr(spectrum, "DENSE_SPECTRUM_LIMIT", 10)
    krylov = spectrum.eigenvalues(sp.csr_array(P), 6, True)
    bound = np.asarray(dense.details["error_bounds"]) + np.asarray(krylov.details["error_bounds"])
    assert np.all(np.abs(np.asarray(krylov.value) - np.asarray(dense.value)) <= bound)
    assert np.all(np.asarray(krylov.details["error_bounds"]) < 1e-12)


def test_chain_eigenvalues_of_independent_sites_in_every_representation(chain_of):
    """Chain.eigenvalues(k) of Glauber dynamics on 6 independent sites, held dense, CSR or as the
    matrix-free operator: each within its stated error bound of the closed form 1 - |S|/n (multiplicities
    C(n, |S|): 1, 5/6 six times, 2/3)."""
    n, k = 6, 8
    ev = chain_of(source=IsingModel(nx.empty_graph(n), couplings=0.0, fields=0.3, beta=1.0)).eigenvalues(k)
    assert np.all(np.abs(np.asarray(ev.value) - closed_form(n, k)) <= ev.details["error_bounds"])
