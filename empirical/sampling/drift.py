"""Semantic drift of Glauber chains: cosine distance of an embedding to the start (paper G, eq. (B.1)).

    d_t = 1 - cos( e(x_t), e(x_0) ),

with e a sentence embedder. The paper uses a sentence-transformers model (Jina v4); any model the
user has locally plugs in through :class:`SentenceTransformerEmbedder`. :class:`TokenBagEmbedder`
is a self-contained embedder (mean of per-token vectors, e.g. the MLM's own input embeddings, or
one-hot vectors, which makes d_t a closed form in the token counts); :class:`ConcatEmbedder`
concatenates them instead (one-hot: d_t is the normalised Hamming distance to the start). The hitting time of a
distance threshold, tau = min{t : d_t >= threshold}, is the paper's mixing diagnostic (section 6.1).

This is *embedding* drift; the one-step drift of a count statistic (section 5.4) is
:mod:`mlmix.theory.local.margins`'s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import numpy as np
import torch

#: Hitting time of a chain that never reached the threshold within its records.
NOT_HIT = -1


class Embedder(ABC):
    """Maps token states (B, n) to embedding vectors (B, d)."""

    @abstractmethod
    def embed(self, states: np.ndarray) -> np.ndarray:
        """float64 (B, d) embeddings of integer states (B, n)."""


class TokenBagEmbedder(Embedder):
    """e(x) = (1/n) sum_i table[x_i]: the mean of per-symbol vectors (``table`` of shape (|V|, d))."""

    def __init__(self, table: np.ndarray) -> None:
        tab = np.asarray(table, dtype=np.float64)
        if tab.ndim != 2 or tab.shape[0] < 1 or not np.isfinite(tab).all():
            raise ValueError(f"embedding table must be a finite (|V|, d) array, got shape {tab.shape}")
        self.table = tab

    def embed(self, states: np.ndarray) -> np.ndarray:
        return self.table[_check_symbols(states, self.table.shape[0])].mean(axis=1)

    @classmethod
    def one_hot(cls, vocab_size: int) -> "TokenBagEmbedder":
        """One-hot rows (the identity table): for the bag, e(x) is the vector of symbol frequencies."""
        return cls(np.eye(vocab_size))

    @classmethod
    def from_mlm(cls, mlm: object) -> "TokenBagEmbedder":
        """The language model's own input embeddings of its support tokens (rows ``support_ids``),
        for a :class:`mlmix.empirical.models.mlm.TokenConditionals` source."""
        model, ids = getattr(mlm, "model", None), getattr(mlm, "support_ids", None)
        if model is None or ids is None:
            raise TypeError(f"{type(mlm).__name__} is not a language-model source (needs .model and .support_ids)")
        weight = model.get_input_embeddings().weight.detach()
        return cls(weight[torch.as_tensor(np.asarray(ids), device=weight.device)].double().cpu().numpy())


class ConcatEmbedder(TokenBagEmbedder):
    """e(x) = (table[x_0], ..., table[x_{n-1}]) concatenated: order-sensitive. With one-hot rows
    (:meth:`one_hot`), 1 - cos(e(x), e(y)) = d_H(x, y) / n, the normalised Hamming distance."""

    def embed(self, states: np.ndarray) -> np.ndarray:
        x = _check_symbols(states, self.table.shape[0])
        return self.table[x].reshape(x.shape[0], -1)


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model the user has locally, applied to the decoded texts.

    ``decode`` maps states (B, n) to strings (e.g. the MLM's tokenizer). The package
    ``sentence-transformers`` is optional and imported only here.
    """

    def __init__(self, model_name_or_path: str, decode: Callable[[np.ndarray], list[str]], device: str | None = None,
                 batch_size: int = 64) -> None:
        try:
            # deferred: sentence-transformers is optional and heavy, needed only for a sentence embedder
            from sentence_transformers import SentenceTransformer
        except ImportError as err:  # optional dependency
            raise ImportError("SentenceTransformerEmbedder needs the optional package sentence-transformers "
                              "(pip install sentence-transformers); TokenBagEmbedder needs nothing") from err
        self.model = SentenceTransformer(model_name_or_path, device=device, trust_remote_code=False)
        self.decode = decode
        self.batch_size = int(batch_size)

    def embed(self, states: np.ndarray) -> np.ndarray:
        texts = list(self.decode(np.asarray(states)))
        return np.asarray(self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True),
                          dtype=np.float64)


def _check_symbols(states: np.ndarray, vocab_size: int) -> np.ndarray:
    x = np.asarray(states)
    if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"states must be an integer array (B, n), got {x.dtype} {x.shape}")
    if x.size and (x.min() < 0 or x.max() >= vocab_size):
        raise ValueError(f"symbols must lie in [0, {vocab_size})")
    return x


def cosine_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 - <a, b> / (|a| |b|) along the last axis (broadcasting); zero vectors are refused."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    if (na == 0).any() or (nb == 0).any():
        raise ValueError("cosine distance is undefined for a zero embedding vector")
    return np.clip(1.0 - (a * b).sum(axis=-1) / (na * nb), 0.0, 2.0)


def embed_records(embedder: Embedder, states: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """Embeddings of recorded states (R, B, n) -> (R, B, d), queried in batches of rows."""
    x = np.asarray(states)
    if x.ndim != 3:
        raise ValueError(f"recorded states must have shape (R, B, n), got {x.shape}")
    flat = x.reshape(-1, x.shape[-1])
    out = np.concatenate([embedder.embed(flat[s:s + batch_size]) for s in range(0, len(flat), batch_size)])
    return out.reshape(x.shape[0], x.shape[1], -1)


def drift_from_start(embeddings: np.ndarray) -> np.ndarray:
    """d[r, b] = 1 - cos(e(x_b at record r), e(x_b at record 0)) for embeddings (R, B, d): (R, B)."""
    e = np.asarray(embeddings, dtype=np.float64)
    if e.ndim != 3 or e.shape[0] < 1:
        raise ValueError(f"embeddings must have shape (R, B, d) with R >= 1, got {e.shape}")
    return cosine_distance(e, e[:1])


def hitting_times(distances: np.ndarray, steps: np.ndarray, threshold: float) -> np.ndarray:
    """First recorded step with d >= ``threshold`` per chain (B,), :data:`NOT_HIT` if never.

    ``distances`` (R, B) at recorded ``steps`` (R,); the time resolution is the record spacing.
    """
    d = np.asarray(distances, dtype=np.float64)
    st = np.asarray(steps, dtype=np.int64)
    if d.ndim != 2 or st.shape != (d.shape[0],):
        raise ValueError(f"distances (R, B) and steps (R,) do not match: {d.shape} vs {st.shape}")
    if not 0 < threshold <= 2:
        raise ValueError(f"a cosine-distance threshold must lie in (0, 2], got {threshold}")
    hit = d >= threshold
    first = np.argmax(hit, axis=0)
    return np.where(hit.any(axis=0), st[first], NOT_HIT).astype(np.int64)
