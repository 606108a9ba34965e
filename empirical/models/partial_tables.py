"""Partial conditionals of a masked LM over a frame, tabulated exactly and cached.

A decoder needs p_i(. | x_S) for S any subset of the other free positions: the model sees the [MASK]
token at every free position outside S and at i, and the score is the logit at position i, restricted
to the alphabet (the same code path as the Glauber table, :meth:`MaskedLMConditionals.masked_logits_torch`,
so the contexts without a mask reproduce that table bit for bit):

    s_i(v | x_S) = logit_v( encoder(x_S, [MASK] elsewhere) at position i ),   table shape (n, (|V|+1)^(n-1), |V|).

One masked pass per (site, partial context): n (|V|+1)^(n-1) passes (AntiBERTy's 20 residues: 42 at
n = 2, 1,323 at n = 3, 37,044 at n = 4). As for the Glauber table (:mod:`mlmix.empirical.models.tabulate`): the
cost is measured and printed first, a progress bar runs, chunks are checkpointed so an interrupted run
resumes, and the table is cached under the same folder, keyed by the weights, the frame, the alphabet,
the dtype and the kind "partial": the same routine (:meth:`mlmix.empirical.models.tabulate.TableKind.tabulate`),
of which this table is the kind :data:`PARTIAL`. The table does not depend on T.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from mlmix.empirical.models.tabulate import TableKind, Tabulated
from mlmix.theory.kernels.decoders import PartialScoreTable


class MLMPartialTable(Tabulated, PartialScoreTable):
    """The partial score table of a masked LM over a frame, with its alphabet's tokens and provenance."""


def _partial_scores(source, symbols: torch.Tensor, sites: torch.Tensor) -> torch.Tensor:
    """s_i(. | x_S): [MASK] at the site and wherever the symbol is |V|, one masked pass per row."""
    count, q = symbols.shape[0], source.space.vocab_size
    masked = symbols == q
    masked[torch.arange(count, device=source.device), sites] = True
    ids = source.token_ids(torch.where(masked, 0, symbols), validate=False)
    slots = source.slots[None, :].expand(count, -1)
    ids[masked.nonzero(as_tuple=True)[0], slots[masked]] = source.mask_id
    return source.masked_logits_torch(ids, source.slots[sites])


#: The partial table: every partial context x_S of the other sites, in (V + {mask})^(n-1); its cache
#: record is the Glauber table's plus ``kind: partial``.
PARTIAL = TableKind(label="partial table", name="partial table", contexts="partial contexts", masked=True,
                    score=_partial_scores, table_class=MLMPartialTable, tag="tabulate-partial",
                    counter="tabulating partial contexts", extra={"kind": "partial"})


def tabulate_partial(source, *, cache_dir: str | os.PathLike | None = None, use_cache: bool = True,
                     max_passes: int | None = None, progress: bool = True,
                     log: Callable[[str], None] | None = None) -> MLMPartialTable:
    """The exact partial score table of a :class:`~mlmix.empirical.models.mlm.MaskedLMConditionals` (module doc):
    read from the cache when present, else computed in checkpointed chunks and cached."""
    return PARTIAL.tabulate(source, cache_dir=cache_dir, use_cache=use_cache, max_passes=max_passes,
                            progress=progress, log=log)
