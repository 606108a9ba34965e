"""The model families mlmix reads, in one registry beside :data:`~mlmix.theory.kernels.registry.KERNELS`.

:data:`MODELS` maps a family's name to its :class:`ModelFamily`: how a name given on the command line
(``mlmix estimate --model``, ``mlmix exact --mlm``, ``mlmix verify --mlm``) is recognised, the source class
that loads it (``from_pretrained(name, length, **frame and device options)``),
its certified-bound adapter (a ``relaxation`` hook of
:func:`~mlmix.empirical.model_constants.certify.certify`: sound upper ends of Delta_ij or rho_ij from the
weights), how its networks' LM heads are read (:class:`HeadAdapter`, by the network's class: the head the
masked positions go through, the LayerNorm and decoder of the head bound, the affine relaxation's network)
and what its cached tables are keyed by (``cache_identity``, a function of the network). The families are
tried in order, the first that recognises a name loads it; the last, Hugging Face masked LMs, takes every
name. Adding a masked LM is one module (its source class) and one line here.

References are ``"module:attribute"`` strings, imported on first use, so reading the registry loads
neither torch nor a model's package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable


def resolve(reference: str | Any) -> Any:
    """The object a ``"module:attribute"`` reference names (anything else is returned as is)."""
    if not isinstance(reference, str):
        return reference
    module, _, attribute = reference.partition(":")
    return getattr(import_module(module), attribute)


@dataclass(frozen=True)
class HeadAdapter:
    """How mlmix reads the LM head of one network class: ``head`` (the attribute path of the module mapping hidden
    states (N, d) to logits, or a reference to ``model -> callable``; None: the full forward pass and a gather);
    ``norm``, ``decoder`` and ``bias``: attribute paths of the head's last LayerNorm, the linear decoder after it
    and a bias added after the decoder (the head bound,
    :func:`~mlmix.empirical.model_constants.head_bound.head_parts`; ``norm`` None: no head bound) or ``parts``, a
    reference to ``(model, alphabet_ids) -> HeadParts`` for a head read otherwise; ``relaxation``: the network of
    the affine relaxation (:mod:`~mlmix.empirical.model_constants.relaxation`: "bert" or "sceptr"; None: none)."""

    head: str | Callable | None = None
    norm: str | None = None
    decoder: str | None = None
    bias: str | None = None
    parts: str | Callable | None = None
    relaxation: str | None = None

    def head_function(self, model: Any) -> Callable | None:
        """hidden (N, d) -> logits (N, vocab) of ``model``, None when the head is not known."""
        if self.head is None:
            return None
        if isinstance(self.head, str) and ":" not in self.head:
            module = model
            for name in self.head.split("."):
                module = getattr(module, name)
            return module
        return resolve(self.head)(model)


def _modernbert_head(model: Any) -> Callable:
    """ModernBERT's head: ``decoder(head(h))``."""
    return lambda h: model.decoder(model.head(h))


#: The heads of the Hugging Face masked LMs mlmix reads, by network class name.
HF_HEADS: dict[str, HeadAdapter] = {
    "BertForMaskedLM": HeadAdapter("cls", "cls.predictions.transform.LayerNorm", "cls.predictions.decoder",
                                   relaxation="bert"),
    "RobertaForMaskedLM": HeadAdapter("lm_head", "lm_head.layer_norm", "lm_head.decoder"),
    "XLMRobertaForMaskedLM": HeadAdapter("lm_head", "lm_head.layer_norm", "lm_head.decoder"),
    "EsmForMaskedLM": HeadAdapter("lm_head", "lm_head.layer_norm", "lm_head.decoder", "lm_head.bias"),
    "ModernBertForMaskedLM": HeadAdapter(_modernbert_head, "head.norm", "decoder"),
}


@dataclass(frozen=True)
class ModelFamily:
    """One family of models: ``recognises`` (name -> bool) and ``loader`` (the source class), as references
    or objects (the stated accuracy of its scores follows its compute dtype:
    :mod:`mlmix.theory.sources.score_accuracy`); ``bound_adapter``: its certified-bound hook (None: none beyond
    the affine relaxation); ``heads``: the :class:`HeadAdapter` of each network class it loads, by class name;
    ``cache_identity``: a reference to ``model -> str``, the identity of the weights its exact tables and streamed
    checkpoints are keyed by (with the frame, the alphabet and the dtype)."""

    name: str
    recognises: str | Callable[[str], bool]
    loader: str | type
    bound_adapter: str | Callable | None = None
    heads: dict[str, HeadAdapter] = field(default_factory=dict)
    cache_identity: str | Callable[[Any], str] = "mlmix.empirical.models.tabulate:weights_hash"

    def source_class(self) -> type:
        """The class whose ``from_pretrained`` loads a model of the family."""
        return resolve(self.loader)

    def knows(self, name: str) -> bool:
        """Whether a name given on the command line is a model of this family."""
        return bool(resolve(self.recognises)(str(name)))


MODELS: dict[str, ModelFamily] = {family.name: family for family in (
    ModelFamily("sceptr", "mlmix.empirical.models.sceptr:is_sceptr",
                "mlmix.empirical.models.sceptr:SceptrConditionals",
                heads={"SceptrMLM": HeadAdapter(parts="mlmix.empirical.model_constants.head_bound:sceptr_parts",
                                                relaxation="sceptr")}),
    ModelFamily("hugging-face", lambda name: True, "mlmix.empirical.models.mlm:MaskedLMConditionals", heads=HF_HEADS),
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


def head_adapter(model: Any) -> HeadAdapter | None:
    """The :class:`HeadAdapter` a family of :data:`MODELS` registers for ``model``'s class (the first), else None."""
    name = type(model).__name__
    return next((f.heads[name] for f in MODELS.values() if name in f.heads), None)


def cache_identity(source: Any) -> str:
    """The identity of a model source's weights for its cache keys: its family's ``cache_identity`` (the SHA-256
    of the state dict for a source of no registered family)."""
    family = family_of_source(source)
    return resolve(family.cache_identity if family is not None else MODELS["hugging-face"].cache_identity)(
        source.model)


def known_heads() -> list[str]:
    """The network classes whose head adapter gives the head bound (a LayerNorm and a decoder, or a reader)."""
    return sorted(k for f in MODELS.values() for k, a in f.heads.items() if a.parts is not None or a.norm is not None)
