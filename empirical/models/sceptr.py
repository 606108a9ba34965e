"""SCEPTR, a second real pretrained masked LM (T-cell receptors), read from its PyPI wheel.

``sceptr==1.2.0`` (MIT; Nagano et al. 2025, "Contrastive learning of T cell receptor representations")
ships its pretrained variants inside the wheel, ``sceptr/_model_saves/<VARIANT>/{config.json,
state_dict.pt}``; the architecture is in its dependency ``libtcrlm==1.1.3`` (MIT). Neither package
is imported here: the forward pass is re-implemented from the state dict (:class:`SceptrMLM`) and
checked against the original package in ``tests/empirical/test_sceptr.py``. The state dicts are
pickles, read with ``torch.load(weights_only=True)`` from the wheel pinned by its SHA-256.

**Architecture** (libtcrlm's ``Bert`` with ``CdrSimpleEmbedder``, ``SelfAttentionStackWithInitialProjection``
and ``AminoAcidTokenProjector``). A TCR is the sequence ``[CLS]`` followed by the residues of its
CDR loops (CDR1A, CDR2A, CDR3A, CDR1B, CDR2B, CDR3B; absent loops left out). Residue t of a loop of
length m in compartment c is the feature vector

    f_t = [ onehot_22(token) ; (t - 1) / (m - 1)  (1/2 when m = 1) ; onehot_C(c) ]      (E = 22 + 1 + C)

(``[CLS]``: its one-hot, position 0, no compartment); tokens are 0 [PAD] (the zero vector), 1 [MASK],
2 [CLS], 3..22 the amino acids A C D E F G H I K L M N P Q R S T V W Y. Then ``x = W_p f`` (no bias,
E -> d) and ``num_layers`` post-LayerNorm encoder layers (``torch.nn.TransformerEncoderLayer``
defaults: ReLU, feed-forward 4d, LayerNorm eps 1e-5, ``nhead`` heads)

    x <- LN_1(x + MHA(x)),   x <- LN_2(x + W_2 relu(W_1 x + b_1) + b_2),

and the masked-LM head ``logits = W_h x + b_h`` over the 20 amino acids (no other vocabulary:
the head cannot predict a special token). There are no absolute positions: only the relative
position inside a loop and the loop's compartment, so the order of the loops does not matter.

The default variant ``SCEPTR``: 3 layers, d = 64, 8 heads of width 8, trained with MLM and
contrastive losses (validation MLM accuracy 0.87); ``SCEPTR_tiny``: 3 layers, d = 16, 8 heads of
width 2 (MLM accuracy 0.66). Every variant with the simple embedders is supported (``C`` = 6 loops;
2 for the CDR3-only variants; 3 for the single-chain ``A_SCEPTR``/``B_SCEPTR``); the BLOSUM and
left-aligned variants embed differently and are refused.

**Frames.** A frame is written over the tokens above plus one marker per loop, ``[CDR1A] [CDR2A]
[CDR3A] [CDR1B] [CDR2B] [CDR3B]``: each marker opens its loop, whose residues follow it. Text before
the first marker belongs to the variant's CDR3B (CDR3A for ``A_SCEPTR``), so::

    --frame "C A S S _ _ _ E Q F F"                                 # a CDR3B alone, 3 free residues
    --frame "[CDR3A] C A V R D _ _ Y G K L T F [CDR3B] C A S S _ E Q Y F"   # a paired CDR3 frame

The markers are not model inputs: they occupy masked-out positions (no attention to them, like
the original's padding) and only set the compartments and loop lengths of the residues after them.
Each loop appears at most once and is not empty. The alphabet is the 20 amino acids (default).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from mlmix.cache import cache_dir
from mlmix.empirical.models.antiberty import IndexUnreachable, download_wheel
from mlmix.empirical.models.mlm import MaskedLMConditionals
from mlmix.validation import check_weight_values

VERSION = "1.2.0"
WHEEL = f"sceptr-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "aba652a9fb53861d5170cc1ad99a284852da8899328f4b4fd80e78f595d250d5"
#: The architecture's package (MIT): the version whose code :class:`SceptrMLM` re-implements.
LIBTCRLM_VERSION = "1.1.3"
SAVES = "sceptr/_model_saves/"
DEFAULT_VARIANT = "SCEPTR"

#: The 20 amino acids, in the order of the head's outputs and of token ids 3..22.
AMINO_ACIDS = "A C D E F G H I K L M N P Q R S T V W Y"
#: Loop markers of a frame, in libtcrlm's compartment order (``CdrCompartmentIndex`` 1..6).
MARKERS = ("[CDR1A]", "[CDR2A]", "[CDR3A]", "[CDR1B]", "[CDR2B]", "[CDR3B]")
#: Token ids: 0 [PAD], 1 [MASK], 2 [CLS], 3..22 amino acids (libtcrlm's ``AminoAcidTokenIndex``),
#: then the markers and [UNK] (frame text only, never model inputs).
TOKENS = ("[PAD]", "[MASK]", "[CLS]", *AMINO_ACIDS.split(), *MARKERS, "[UNK]")
PAD, MASK, CLS, FIRST_RESIDUE, FIRST_MARKER = 0, 1, 2, 3, 23
RESIDUES = 20

#: Compartment index of each marker (0: not a loop of this embedding), by libtcrlm embedder and
#: tokeniser; the compartment one-hot has max(index) entries.
_LAYOUTS = {
    ("CdrSimpleEmbedder", "CdrTokeniser"): (1, 2, 3, 4, 5, 6),
    ("Cdr3SimpleEmbedder", "Cdr3Tokeniser"): (0, 0, 1, 0, 0, 2),
    ("SingleChainCdrSimpleEmbedder", "AlphaCdrTokeniser"): (1, 2, 3, 0, 0, 0),
    ("SingleChainCdrSimpleEmbedder", "BetaCdrTokeniser"): (0, 0, 0, 1, 2, 3),
}

_PREFIX = "sceptr"


def is_sceptr(name: str | Path) -> bool:
    """True for ``sceptr`` or ``sceptr:VARIANT`` (case-insensitive) when no folder has that name."""
    text = str(name)
    return (text.lower() == _PREFIX or text.lower().startswith(_PREFIX + ":")) and not Path(text).expanduser().exists()


def fetch(dest: str | Path | None = None) -> Path:
    """The wheel in ``dest`` (default ``sceptr-1.2.0/`` in mlmix's user cache), downloaded once with
    ``pip download`` and checked against :data:`WHEEL_SHA256`. Raises
    :class:`~mlmix.empirical.models.antiberty.IndexUnreachable` without network, ValueError otherwise."""
    folder = cache_dir(f"sceptr-{VERSION}") if dest is None else Path(dest)
    return download_wheel("sceptr", VERSION, WHEEL, WHEEL_SHA256, folder)


def variants(wheel: str | Path) -> list[str]:
    """The variant folders shipped in the wheel (``SCEPTR``, ``SCEPTR_tiny``, ...)."""
    with zipfile.ZipFile(wheel) as archive:
        return sorted({m[len(SAVES):].split("/")[0] for m in archive.namelist()
                       if m.startswith(SAVES) and m.endswith("/state_dict.pt")})


def resolve_variant(name: str, available: list[str]) -> str:
    """The variant folder that ``sceptr`` / ``sceptr:VARIANT`` names: ``VARIANT`` matched without
    regard to case, with or without the ``SCEPTR_`` prefix (``sceptr:tiny`` is ``SCEPTR_tiny``)."""
    text = str(name)
    wanted = text.split(":", 1)[1] if ":" in text else DEFAULT_VARIANT
    by_key = {v.lower(): v for v in available}
    for key in (wanted.lower(), f"sceptr_{wanted.lower()}"):
        if key in by_key:
            return by_key[key]
    raise ValueError(f"unknown SCEPTR variant {wanted!r} in {text!r}: the wheel holds {', '.join(available)}")


def load_variant(wheel: str | Path, variant: str) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict, config) of a variant, read from the wheel: ``torch.load(weights_only=True)``."""
    with zipfile.ZipFile(wheel) as archive:
        with archive.open(f"{SAVES}{variant}/state_dict.pt") as handle:
            state = torch.load(handle, map_location="cpu", weights_only=True)
        config = json.loads(archive.read(f"{SAVES}{variant}/config.json"))
    return state, config


_STACK = "_self_attention_stack._standard_stack._self_attention_stack.layers."


class SceptrMLM(torch.nn.Module):
    """SCEPTR's masked LM re-implemented from a libtcrlm state dict (module docstring).

    ``forward(input_ids)`` maps token ids (B, L) over :data:`TOKENS` to hidden states (B, L, d);
    :meth:`head` maps hidden states to logits over the 20 amino acids; :meth:`logits` is both.
    """

    def __init__(self, state: dict[str, torch.Tensor], config: dict, name: str = "sceptr") -> None:
        super().__init__()
        spec = config["model"]
        embedder, tokeniser = spec["token_embedder"]["class"], config["data"]["tokeniser"]["class"]
        stack, head = spec["self_attention_stack"], spec["mlm_token_prediction_projector"]["class"]
        if (embedder, tokeniser) not in _LAYOUTS or stack["class"] != "SelfAttentionStackWithInitialProjection" \
                or head != "AminoAcidTokenProjector":
            raise ValueError(f"SCEPTR variant {name!r} ({embedder}, {tokeniser}, {stack['class']}, {head}) embeds "
                             f"its input differently; supported: the simple one-hot embedders "
                             f"({', '.join(sorted({e for e, _ in _LAYOUTS}))})")
        args = stack["initargs"]
        self.layers_count, self.width, self.heads = int(args["num_layers"]), int(args["d_model"]), int(args["nhead"])
        if self.width % self.heads:
            raise ValueError(f"d_model {self.width} is not a multiple of nhead {self.heads}")
        self.eps = 1e-5  # torch.nn.TransformerEncoderLayer's default layer_norm_eps, which libtcrlm keeps
        self.name_or_path = name
        layout = _LAYOUTS[(embedder, tokeniser)]
        #: compartment index of each marker (0: the variant has no such loop)
        self.layout = layout
        self.config = SimpleNamespace(hidden_size=self.width, intermediate_size=4 * self.width,
                                      num_attention_heads=self.heads)

        def take(key: str) -> torch.Tensor:
            if key not in state:
                raise ValueError(f"the SCEPTR state dict {name!r} lacks {key}: not a libtcrlm {stack['class']}")
            return state[key].detach().to(torch.float32).clone()

        def param(key: str) -> torch.nn.Parameter:
            return torch.nn.Parameter(take(key), requires_grad=False)

        self.register_buffer("tokens_onehot", take("_token_embedder._token_embedding._token_embeddings"))
        self.register_buffer("compartments_onehot", take("_token_embedder._compartment_embedding._token_embeddings"))
        self.project = param("_self_attention_stack._initial_projector.weight")
        features = self.tokens_onehot.shape[1] + 1 + self.compartments_onehot.shape[1]
        if self.project.shape != (self.width, features) or self.compartments_onehot.shape[0] != max(layout) + 1:
            raise ValueError(f"the SCEPTR state dict {name!r} does not match its config (projection "
                             f"{tuple(self.project.shape)}, expected {(self.width, features)})")
        self.layers = torch.nn.ModuleList()
        for i in range(self.layers_count):
            layer = torch.nn.Module()
            for key in ("self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                        "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                        "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"):
                layer.register_parameter(key.replace("self_attn.", "").replace(".", "_"), param(f"{_STACK}{i}.{key}"))
            self.layers.append(layer)
        self.head_weight = param("_mlm_token_prediction_projector.projector.weight")
        self.head_bias = param("_mlm_token_prediction_projector.projector.bias")
        if self.head_weight.shape != (RESIDUES, self.width):
            raise ValueError(f"the SCEPTR head of {name!r} has shape {tuple(self.head_weight.shape)}, not (20, d)")
        codes = torch.zeros(len(TOKENS), dtype=torch.long)
        codes[FIRST_MARKER:FIRST_MARKER + len(MARKERS)] = torch.tensor(layout)
        self.register_buffer("marker_compartment", codes, persistent=False)
        check_weight_values(self.named_parameters(), f"the SCEPTR variant {name}")
        self.eval()

    @property
    def base_model(self) -> "SceptrMLM":
        """The encoder (this module: :meth:`forward` gives hidden states), as ``MaskedLMConditionals`` expects."""
        return self

    def features(self, input_ids: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(f, keep): the input features f (B, L, E) of the module docstring (in ``dtype``, default the
        weights'), and which positions take part in attention (False at [PAD] and at the loop markers)."""
        ids = input_ids.long()
        batch, length = ids.shape
        at = torch.arange(length, device=ids.device).expand(batch, -1)
        marker = ids >= FIRST_MARKER
        residue = (ids == MASK) | ((ids >= FIRST_RESIDUE) & ~marker)
        opened = torch.where(marker, at, torch.full_like(at, -1)).cummax(dim=1).values  # last marker so far
        inside = residue & (opened >= 0)
        start = opened.clamp(min=0)
        compartment = torch.where(inside, self.marker_compartment[ids.gather(1, start)], 0)
        count = inside.long().cumsum(dim=1)
        position = count - count.gather(1, start)  # 1-based index inside the loop
        loop = marker.long().cumsum(dim=1)  # loop number, 0 before the first marker
        sizes = torch.zeros((batch, length + 1), dtype=torch.long, device=ids.device).scatter_add_(1, loop, inside.long())
        size = sizes.gather(1, loop)
        # libtcrlm divides integer tensors: the relative position is float32 whatever the weights' dtype
        relative = torch.where(size > 1, (position - 1) / (size - 1).clamp(min=1), 0.5)
        dtype = self.project.dtype if dtype is None else dtype
        relative = torch.where(inside, relative, 0.0).to(dtype)
        token = torch.where(marker, 0, ids)
        f = torch.cat([self.tokens_onehot[token].to(dtype), relative[..., None],
                       self.compartments_onehot[compartment].to(dtype)], dim=-1)
        return f, ~marker & (ids != PAD)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, L, d) after the last encoder layer."""
        f, keep = self.features(input_ids)
        x = f @ self.project.T
        batch, length, _ = x.shape
        mask = keep[:, None, None, :]
        for layer in self.layers:
            q, k, v = (x @ layer.in_proj_weight.T + layer.in_proj_bias).chunk(3, dim=-1)
            q, k, v = (t.reshape(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(batch, length, -1)
            x = F.layer_norm(x + attended @ layer.out_proj_weight.T + layer.out_proj_bias, (self.width,),
                             layer.norm1_weight, layer.norm1_bias, self.eps)
            inner = torch.relu(x @ layer.linear1_weight.T + layer.linear1_bias) @ layer.linear2_weight.T
            x = F.layer_norm(x + inner + layer.linear2_bias, (self.width,), layer.norm2_weight, layer.norm2_bias,
                             self.eps)
        return x

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Masked-LM logits over the 20 amino acids (..., 20) of hidden states (..., d)."""
        return hidden @ self.head_weight.T + self.head_bias

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, L, 20) at every position of token ids (B, L)."""
        return self.head(self.forward(input_ids))


def sceptr_tokenizer() -> PreTrainedTokenizerFast:
    """A fast tokenizer over :data:`TOKENS` (whitespace-separated, ``[CLS] x``): how frames are read."""
    core = Tokenizer(models.WordLevel({tok: i for i, tok in enumerate(TOKENS)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A", pair="[CLS] $A $B",
                                                        special_tokens=[("[CLS]", CLS)])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   mask_token="[MASK]", additional_special_tokens=list(MARKERS))


class SceptrConditionals(MaskedLMConditionals):
    """Conditionals of SCEPTR's masked-LM head over a frame (module docstring for frames and markers):
    the 20 logits at the [MASK]ed residue, restricted to the alphabet. Everything else (tabulation,
    cache, partial tables, estimates, chains) is :class:`~mlmix.empirical.models.mlm.MaskedLMConditionals`'."""

    def __init__(self, model: SceptrMLM, tokenizer: PreTrainedTokenizerFast | None = None,
                 length: int | None = None, **kwargs) -> None:
        super().__init__(model, sceptr_tokenizer() if tokenizer is None else tokenizer, length, **kwargs)
        self._columns = self._support_t - FIRST_RESIDUE
        self._check_layout()

    @classmethod
    def from_pretrained(cls, model_id_or_path: str | Path = _PREFIX, length: int | None = None, *,
                        trust_remote_code: bool = False, local_files_only: bool | None = None,
                        revision: str | None = None, allow_pickle: bool = False, wheel: str | Path | None = None,
                        **kwargs) -> "SceptrConditionals":
        """The variant ``sceptr`` / ``sceptr:VARIANT`` names, from ``wheel`` or the wheel :func:`fetch`
        downloads once into mlmix's cache. The other loading options of masked LMs do not apply (no
        remote code runs; the pinned wheel's pickles are read with ``weights_only=True``)."""
        if wheel is None:
            try:
                wheel = fetch()
            except IndexUnreachable as err:
                raise ValueError(f"the SCEPTR wheel is not cached and {err}; on a machine with network run "
                                 f"`pip download sceptr=={VERSION} --no-deps -d DIR` and copy DIR/{WHEEL} into "
                                 f"{cache_dir(f'sceptr-{VERSION}')}") from None
        variant = resolve_variant(str(model_id_or_path), variants(wheel))
        state, config = load_variant(wheel, variant)
        return cls(SceptrMLM(state, config, f"sceptr:{variant}"), None, length, **kwargs)

    # ------------------------------------------------------------------ the template
    def _vocab_limit(self) -> int:
        return FIRST_MARKER  # ids the frame's alphabet may use: the amino acids (the specials are excluded)

    def _special_template(self) -> tuple[list[int], list[int]]:
        """``[CLS]``, and the default loop marker when the frame does not open with one."""
        first = self.frame.tokens[0]
        if first is not None and first >= FIRST_MARKER:
            return [CLS], []
        layout = self.model.layout
        default = MARKERS.index("[CDR3B]") if layout[MARKERS.index("[CDR3B]")] else MARKERS.index("[CDR3A]")
        return [CLS, FIRST_MARKER + default], []

    def _check_layout(self) -> None:
        """Every loop of the frame is one this variant embeds, appears once and is not empty; the
        fixed tokens are residues or [MASK]."""
        template = self._template.tolist()
        free = set(self.slots.tolist())
        seen: list[int] = []
        for k, tok in enumerate(template[1:], start=1):
            if k in free:
                continue
            if tok >= FIRST_MARKER + len(MARKERS) or tok in (PAD, CLS):
                raise ValueError(f"the frame holds {TOKENS[tok]}: a SCEPTR frame has residues, [MASK] and the "
                                 f"loop markers {' '.join(MARKERS)} only")
            if tok >= FIRST_MARKER:
                marker = MARKERS[tok - FIRST_MARKER]
                if not self.model.layout[tok - FIRST_MARKER]:
                    loops = " ".join(m for m, c in zip(MARKERS, self.model.layout) if c)
                    raise ValueError(f"{self.model.name_or_path} has no loop {marker} (its loops: {loops})")
                if tok in seen:
                    raise ValueError(f"the frame opens the loop {marker} twice")
                nxt = template[k + 1] if k + 1 < len(template) else None
                if nxt is None or (nxt >= FIRST_MARKER and k + 1 not in free):
                    raise ValueError(f"the loop {marker} of the frame is empty")
                seen.append(tok)

    def max_positions(self) -> int | None:
        """None: SCEPTR has no absolute positions (only the relative position inside a loop)."""
        return None

    def _scored_positions(self) -> int:
        return 1

    # ------------------------------------------------------------------ the masked logits
    def masked_logits_torch(self, token_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits over the support at ``positions`` (N,) of full inputs ``token_ids`` (N, L): the
        encoder on the whole input, the head at the masked position only."""
        rows = torch.arange(token_ids.shape[0], device=self.device)

        def compute(chunk: slice) -> torch.Tensor:
            hidden = self._encoder(token_ids[chunk])
            return self.model.head(hidden[rows[chunk] - chunk.start, positions[chunk]])[:, self._columns]

        return self._batched(token_ids.shape[0], compute, (self.space.vocab_size,))

    def describe(self) -> dict:
        """As :meth:`MaskedLMConditionals.describe`, with the frame written with its loop markers."""
        out = super().describe()
        template = self._template.tolist()
        for slot in self.slots.tolist():
            template[slot] = None
        out["frame"] = " ".join("_" if t is None else TOKENS[t] for t in template[1:])
        return out

