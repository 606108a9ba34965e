"""Helpers shared by the tests (the folder is on sys.path through conftest.py, as pytest puts it)."""

import numpy as np


def two_state(a, b):
    """The two-state chain [[1 - a, a], [b, 1 - b]] (gap a + b, pi = (b, a) / (a + b))."""
    return np.array([[1 - a, a], [b, 1 - b]])


def random_chain(seed: int, n: int, reversible: bool, tiny: float = 1.0, *, density: float = 0.5,
                 tiny_back: bool = True, weighted: bool = False) -> np.ndarray:
    """An irreducible random chain on n states: a cycle of moves plus random ones (each pair with probability
    ``density``), symmetric flows when ``reversible`` (then with ``weighted``, over random weights w: P = W /
    (c w), pi proportional to w); ``tiny`` scales the moves out of the first half (and back, with
    ``tiny_back`` or when reversible): a metastable chain for tiny << 1."""
    rng = np.random.default_rng(seed)
    W = rng.random((n, n)) * (rng.random((n, n)) < density)
    for i in range(n):
        W[i, (i + 1) % n] += 0.5
    if reversible:
        W = W + W.T
    np.fill_diagonal(W, 0)
    half = np.arange(n) < n // 2
    W[np.ix_(half, ~half)] *= tiny
    W[np.ix_(~half, half)] *= tiny if (tiny_back or reversible) else 1.0
    if reversible and weighted:
        W = W / (rng.random(n) + 0.1)[:, None]
    P = W / (W.sum(axis=1).max() * 1.25)
    return P + np.diag(1 - P.sum(axis=1))


FR1 = "E V Q L V E S G G G"  # heavy-chain framework 1 (human VH3), the left context
NEXT = {2: "Q P G G S L", 3: "P G G S L R"}  # the six residues that follow n free positions in EVQLVESGGGLVQPGGSLRL


def figure(x):
    """The number behind one of paper G's constants as ``mlmix estimate`` reports it: the value of an exact
    figure, the lower end (the sample maximum) of a sampled supremum; a Result or its JSON."""
    if isinstance(x, dict):
        return x["value"] if x.get("value") is not None else x["lower"]
    return x.value if x.value is not None else x.lower
