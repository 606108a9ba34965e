"""The product space V^n and its mixed-radix indexing.

A state x = (x_0, ..., x_{n-1}) with x_i in V = {0, ..., q-1} is stored as the integer
``index(x) = sum_i x_i * q**(n - 1 - i)`` (site 0 most significant), so ``np.arange(q**n)``
enumerates V^n in lexicographic order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlmix.limits import DEFAULT_MAX_STATES
from mlmix.validation import check_int


@dataclass(frozen=True)
class StateSpace:
    """V^n with |V| = ``vocab_size`` >= 2 and n = ``length`` >= 1."""

    vocab_size: int
    length: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "vocab_size", check_int(self.vocab_size, "vocab_size", minimum=2))
        object.__setattr__(self, "length", check_int(self.length, "length", minimum=1))

    @property
    def size(self) -> int:
        """|V|^n."""
        return self.vocab_size**self.length

    @property
    def place_values(self) -> np.ndarray:
        """q**(n-1-i) for each site i (int64); only defined while |V|^n fits in int64."""
        if self.size >= 2**63:
            raise ValueError(f"|V|^n = {self.vocab_size}^{self.length} does not fit in int64 indices")
        return self.vocab_size ** np.arange(self.length - 1, -1, -1, dtype=np.int64)

    def check_size(self, max_states: int = DEFAULT_MAX_STATES) -> None:
        """Refuse exact enumeration when |V|^n exceeds ``max_states``."""
        if self.size > max_states:
            raise ValueError(
                f"|V|^n = {self.vocab_size}^{self.length} = {self.size} states exceeds the exact "
                f"limit of {max_states}; pass a larger max_states if you have the memory"
            )

    def encode(self, sequences: np.ndarray) -> np.ndarray:
        """Integer indices of sequences of shape (..., n)."""
        seq = np.asarray(sequences)
        if seq.size and not (np.issubdtype(seq.dtype, np.integer) or seq.dtype == bool):
            raise TypeError(f"sequences must hold integer symbols, got dtype {seq.dtype}")
        if seq.shape[-1:] != (self.length,):
            raise ValueError(f"sequences must have last dimension n = {self.length}, got {seq.shape}")
        if seq.size and (seq.min() < 0 or seq.max() >= self.vocab_size):
            raise ValueError(f"symbols must lie in [0, {self.vocab_size})")
        return seq.astype(np.int64) @ self.place_values

    def decode(self, indices: np.ndarray | int) -> np.ndarray:
        """Sequences of shape (..., n) for integer indices."""
        raw = np.asarray(indices)
        if raw.size and not np.issubdtype(raw.dtype, np.integer):
            raise TypeError(f"state indices must be integers, got dtype {raw.dtype}")
        idx = raw.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.size):
            raise ValueError(f"state indices must lie in [0, {self.size})")
        return (idx[..., None] // self.place_values) % self.vocab_size

    def all_states(self) -> np.ndarray:
        """Every sequence of V^n, shape (|V|^n, n), in index order."""
        return self.decode(np.arange(self.size, dtype=np.int64))

    def check_site(self, site: int) -> int:
        """Return ``site`` as an int after checking it is an integer in [0, n)."""
        return check_int(site, "site", minimum=0, maximum=self.length - 1)

    def neighbours(self, indices: np.ndarray | int, site: int) -> np.ndarray:
        """Indices of x^{i<-v} for v in V: shape (..., |V|); column x_i is x itself."""
        site = self.check_site(site)
        idx = np.asarray(indices, dtype=np.int64)
        place = int(self.place_values[site])
        base = idx - ((idx // place) % self.vocab_size) * place
        return base[..., None] + place * np.arange(self.vocab_size, dtype=np.int64)

    def hamming(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """Hamming distance between states given by index."""
        return (self.decode(a) != self.decode(b)).sum(axis=-1)
