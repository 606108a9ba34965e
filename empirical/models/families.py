"""The model families mlmix reads, in one registry beside :data:`~mlmix.theory.kernels.registry.KERNELS`.

:data:`MODELS` maps a family's name to its :class:`ModelFamily`: how a name given on the command line
(``mlmix estimate --model``, ``mlmix exact --mlm``, ``mlmix verify --mlm``) is recognised, the source class
that loads it (``from_pretrained(name, length, **frame and device options)``),
its certified-bound adapter (a ``relaxation`` hook of
:func:`~mlmix.empirical.model_constants.certify.certify`: sound upper ends of Delta_ij or rho_ij from the
weights) and what its cached tables are keyed by. The families are tried in order, the first that
recognises a name loads it; the last, Hugging Face masked LMs, takes every name. Adding a masked LM is one
module (its source class) and one line here.

References are ``"module:attribute"`` strings, imported on first use, so reading the registry loads
neither torch nor a model's package.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable


def resolve(reference: str | Any) -> Any:
    """The object a ``"module:attribute"`` reference names (anything else is returned as is)."""
    if not isinstance(reference, str):
        return reference
    module, _, attribute = reference.partition(":")
    return getattr(import_module(module), attribute)


@dataclass(frozen=True)
class ModelFamily:
    """One family of models: ``recognises`` (name -> bool) and ``loader`` (the source class), as references
    or objects (the stated accuracy of its scores follows its compute dtype:
    :mod:`mlmix.theory.sources.score_accuracy`); ``bound_adapter``: its certified-bound hook (None: none beyond the affine relaxation); ``cache_identity``:
    what its exact tables and streamed checkpoints are keyed by."""

    name: str
    recognises: str | Callable[[str], bool]
    loader: str | type
    bound_adapter: str | Callable | None = None
    cache_identity: str = "the SHA-256 of the weights, the frame, the alphabet and the dtype"

    def source_class(self) -> type:
        """The class whose ``from_pretrained`` loads a model of the family."""
        return resolve(self.loader)

    def knows(self, name: str) -> bool:
        """Whether a name given on the command line is a model of this family."""
        return bool(resolve(self.recognises)(str(name)))


MODELS: dict[str, ModelFamily] = {family.name: family for family in (
    ModelFamily("sceptr", "mlmix.empirical.models.sceptr:is_sceptr",
                "mlmix.empirical.models.sceptr:SceptrConditionals",
                cache_identity="the SHA-256 of the state dict, the frame, the alphabet and the dtype"),
    ModelFamily("hugging-face", lambda name: True, "mlmix.empirical.models.mlm:MaskedLMConditionals"),
)}


def family_of(name: str) -> ModelFamily:
    """The first family of :data:`MODELS` that recognises ``name``."""
    for family in MODELS.values():
        if family.knows(name):
            return family
    raise ValueError(f"no model family recognises {name!r} (families: {', '.join(MODELS)})")


def family_of_source(source: Any) -> ModelFamily | None:
    """The family whose source class ``source`` is an instance of (the first in :data:`MODELS`), None for a
    source that is no model."""
    if getattr(source, "model", None) is None:
        return None
    return next((f for f in MODELS.values() if isinstance(source, f.source_class())), None)
