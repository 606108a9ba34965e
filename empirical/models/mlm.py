"""Conditionals of a Hugging Face masked language model on V^n (paper G, section 3.1).

A state is a sequence of n *symbols*; symbol k stands for the token id ``support_ids[k]``. The
support (the frame's alphabet) is the model's vocabulary minus special and unused tokens, or a
restricted candidate set. The model sees ``[specials] frame [specials]`` exactly as its tokenizer
would wrap the text, with x_0 .. x_{n-1} at the frame's free positions (:mod:`mlmix.empirical.models.frames`:
a fixed left context, free positions anywhere, a fixed right context); the fixed tokens are never
resampled. For site i the score is the MLM logit at the masked position,

    s_i(v | x_{-i}) = logit_v( encoder(x with x_i := [MASK]) at position i ),

restricted to the support, so pi_i^T(v | x_{-i}) = softmax_v(s_i / T) over the support.

Only the masked positions go through the LM head (the encoder's hidden states are gathered at
the masked positions first), which gives the same logits as the full forward pass at a fraction
of the cost for large vocabularies. All numbers come from ONE torch implementation
(:meth:`TokenConditionals.scores_torch` and friends, tensors on the model's device, for chain
code); the numpy ``Conditionals`` API wraps it and returns float64.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import socket
import urllib.parse
import urllib.request
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from scipy.special import log_softmax
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel

from mlmix.empirical.models.families import head_adapter
from mlmix.empirical.models.frames import Frame, build_frame, known_ids
from mlmix.empirical.models.tabulate import MLMTable, tabulate
from mlmix.empirical.models.vocab import tokenizer_from_vocab
from mlmix.errors import PassCapError
from mlmix.progress import announce
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int, check_safetensors_header, check_tokenizer_files, check_weight_values

#: The model shipped with mlmix (trained by :func:`mlmix.empirical.models.shipped_model.train`, ``mlmix run train-default``).
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "default_model"

#: Compute dtypes: float32 (CPU default), bfloat16 / float16 (autocast), float64 (the model converted to
#: float64: narrower score accuracy, :mod:`mlmix.theory.sources.score_accuracy`).
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}

#: Files from which ``AutoTokenizer`` builds a tokenizer (a lone vocab.txt is read by :func:`load_tokenizer`).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "spiece.model", "sentencepiece.bpe.model")

#: Pickled checkpoints transformers can read (one file or shards).
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model-*.bin")

#: Largest rows per forward pass when the batch size is chosen from free GPU memory.
_MAX_AUTO_BATCH = 8192
_CPU_BATCH = 256


def hub_offline() -> bool:
    """True when the Hugging Face hub must not be contacted (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return any(os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


#: Seconds to wait for the Hugging Face hub (or the HTTPS proxy) to accept a connection.
HUB_TIMEOUT = 3.0


def hub_unreachable(timeout: float = HUB_TIMEOUT) -> str | None:
    """None when the hub (``HF_ENDPOINT``, default https://huggingface.co; or the HTTPS proxy in
    force) accepts a TCP connection within ``timeout`` seconds, else why not. A quick check made
    before a download, so that an unreachable hub is an error in seconds, not after retries."""

    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    proxy = urllib.request.getproxies().get(endpoint.scheme or "https")
    target = urllib.parse.urlsplit(proxy) if proxy and not urllib.request.proxy_bypass(endpoint.hostname or "") \
        else endpoint
    host, port = target.hostname, target.port or (443 if target.scheme == "https" else 80)
    if not host:
        return f"no host in {urllib.parse.urlunsplit(target)!r}"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"{host}:{port} did not answer within {timeout:g} s: {err}"
    return None


def load_pretrained(auto_class: type, model_id_or_path: str | Path, *, trust_remote_code: bool = False,
                    local_files_only: bool | None = None, revision: str | None = None, allow_pickle: bool = False,
                    tokenizer=None, progress: bool = True):
    """Load (model, tokenizer) in eval mode; safetensors weights unless ``allow_pickle``.

    A local folder needs ``*.safetensors`` weights, or pickled ``pytorch_model.bin`` weights with
    ``allow_pickle=True`` (read by ``torch.load(weights_only=True)``, which refuses arbitrary
    objects); ``mlmix convert`` writes a safetensors copy once. Its tokenizer comes from the usual
    files, or from a lone ``vocab.txt`` (:func:`load_tokenizer`). A hub id is looked up in the local
    cache only when offline (``HF_HUB_OFFLINE``), when ``local_files_only`` is set, or when the hub
    does not answer within :data:`HUB_TIMEOUT` seconds (:func:`hub_unreachable`); if it is not
    there the error says so at once and how to provide a folder. ``trust_remote_code`` stays False unless the
    caller opts in. Weights the architecture needs but the checkpoint lacks are an error (they would
    silently stay random). A ``tokenizer`` given by the caller is used instead of the folder's.
    A load expected to take :func:`mlmix.progress.threshold` seconds or more (:func:`load_seconds`)
    is announced first on standard error, "loading NAME (N parameters) ..." (not with ``progress=False``).
    """
    name = str(model_id_or_path)
    path = Path(name).expanduser()
    down = None
    parameters = 0
    if path.is_dir():
        if not any(path.glob("*.safetensors")):
            pickles = [f for pattern in _PICKLE_WEIGHTS for f in path.glob(pattern)]
            if not pickles:
                raise ValueError(f"model folder {path} holds no weights (*.safetensors or pytorch_model.bin)")
            if not allow_pickle:
                raise ValueError(
                    f"model folder {path} holds only pickled weights ({pickles[0].name}); pickles can run code, so "
                    f"load them explicitly with --allow-pickle (Python: allow_pickle=True; read with "
                    f"torch.load(weights_only=True)), or write a safetensors copy once: mlmix convert {path} DST")
        parameters = sum(safetensors_parameters(check_safetensors_header(weights))
                         for weights in sorted(path.glob("*.safetensors")))
        source, local = str(path), True
    else:
        if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name:
            raise ValueError(f"model folder {name} does not exist")
        source = name
        local = hub_offline() if local_files_only is None else bool(local_files_only)
        if not local and (down := hub_unreachable()):  # fail fast instead of retrying for a minute
            local = True
    options = {"trust_remote_code": bool(trust_remote_code), "local_files_only": local, "revision": revision}
    announce(f"loading {path.name if local and path.is_dir() else name}"
             + (f" ({parameters:,} parameters)" if parameters else ""), load_seconds(parameters), enabled=progress)
    try:
        if tokenizer is None:
            tokenizer = load_tokenizer(source, **options)
        model, info = auto_class.from_pretrained(source, use_safetensors=None if allow_pickle else True,
                                                 weights_only=True, output_loading_info=True, **options)
    except (OSError, ValueError, SafetensorError, pickle.UnpicklingError, EOFError, RuntimeError) as err:
        if local and not path.is_dir():
            why = (f"the Hugging Face hub cannot be reached ({down}) and it is not in the local cache"
                   if down else "it is not available offline (HF_HUB_OFFLINE / local_files_only)")
            raise ValueError(
                f"model {name!r}: {why}: on a machine "
                f"with network run `hf download {name} --local-dir DIR` (it needs the config, tokenizer files "
                f"and *.safetensors weights), copy DIR here and pass its path instead, e.g. "
                f"`mlmix estimate --model DIR`") from err
        if isinstance(err, ValueError) and str(err).startswith("model folder"):
            raise
        raise ValueError(f"could not load model {name!r} (corrupt or incomplete files?): {err}") from err
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise ValueError(f"the checkpoint {name} lacks {len(missing)} weights that {type(model).__name__} needs "
                         f"(e.g. {missing[0]}): they would stay random; is it a masked LM of this architecture?")
    check_weight_values(model.named_parameters(), f"the checkpoint {name}")
    return model.eval(), tokenizer


#: Seconds of a model load besides its weights (tokenizer, configuration, building the modules), and
#: parameters read and placed per second (AntiBERTy's 25.8 million in 0.4 s on a loaded two-core machine).
LOAD_START, PARAMETERS_PER_SECOND = 0.5, 1e8


def load_seconds(parameters: int) -> float:
    """Expected seconds of :func:`load_pretrained` for ``parameters`` weights (0: not counted, a hub id):
    :data:`LOAD_START` + parameters / :data:`PARAMETERS_PER_SECOND`."""
    return LOAD_START + parameters / PARAMETERS_PER_SECOND


def safetensors_parameters(header: dict) -> int:
    """Number of weights in a safetensors header (:func:`mlmix.validation.check_safetensors_header`):
    the sum over its tensors of the product of their shapes."""
    return sum(math.prod(info["shape"]) for key, info in header.items() if key != "__metadata__")


def load_tokenizer(source: str, **options):
    """The tokenizer of a hub id or folder. A folder with no tokenizer files but a ``vocab.txt``
    (e.g. a bare BERT checkpoint) gets a fast tokenizer built from it (see
    :func:`mlmix.empirical.models.vocab.tokenizer_from_vocab`); a folder with neither is an error."""
    path = Path(source)
    if path.is_dir():
        check_tokenizer_files(path)
    if path.is_dir() and not any((path / f).is_file() for f in _TOKENIZER_FILES):
        if (path / "vocab.txt").is_file():
            return tokenizer_from_vocab(path / "vocab.txt")
        raise ValueError(f"model folder {path} has no tokenizer (no tokenizer.json, tokenizer_config.json or "
                         f"vocab.txt): copy the model's tokenizer files into it, or build one from a vocabulary "
                         f"file with: mlmix convert {path} DST --vocab VOCAB.txt")
    return AutoTokenizer.from_pretrained(source, **options)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` -> CUDA when available, else CPU; a requested CUDA device must exist."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch sees no CUDA device")
    if dev.type not in {"cpu", "cuda"}:
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Compute dtype (autocast): ``None``/"auto" -> bf16 on CUDA (fp16 where bf16 is unsupported), float32 on CPU."""
    if dtype is None or dtype == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)} or 'auto', got {dtype!r}")
    return DTYPES[dtype]


@dataclass
class PassLedger:
    """The forward passes a model source has made (``used``: one per masked row), a hard ``cap`` on them
    (None: none; ``mlmix estimate --max-passes``) and the largest |score| they gave (a 0-d tensor on the
    model's device, read without a synchronisation per batch). Temperature copies of a source share it."""

    largest: torch.Tensor
    used: int = 0
    cap: int | None = None

    def left(self) -> float:
        """Passes still allowed (infinite without a cap)."""
        return math.inf if self.cap is None else max(0, self.cap - self.used)

    def check(self, rows: int) -> None:
        """Refuse ``rows`` more passes that would exceed the cap (:class:`~mlmix.errors.PassCapError`)."""
        if rows > self.left():
            raise PassCapError(f"{rows:,} more forward passes would exceed the cap of {self.cap:,} "
                               f"({self.used:,} made): raise --max-passes")

    def record(self, scores: torch.Tensor) -> None:
        """Count the rows of ``scores`` (one pass each) and update the largest |score|."""
        self.used += int(scores.shape[0])
        if scores.numel():
            self.largest = torch.maximum(self.largest, scores.abs().amax())

    @property
    def max_abs_score(self) -> float:
        """The largest |score| of every pass so far (0 before the first): it sizes the stated accuracy of
        the scores (:func:`~mlmix.theory.sources.score_accuracy.source_accuracy`)."""
        return float(self.largest)


class TokenConditionals(Conditionals):
    """Shared machinery of language-model sources: frame, alphabet, special-token template, device.

    Subclasses implement :meth:`scores_torch`. The frame (:func:`mlmix.empirical.models.frames.build_frame`)
    is ``prefix + frame + suffix``: ``frame`` a text with ``_`` at each free position, or ``length``
    free positions when there is none; ``prefix``/``suffix`` texts or token lists, fixed and never
    resampled. ``candidates`` (tokens or ids, a whitespace-separated text, or ``@file``) is the
    alphabet, in that order (default: every ordinary token). ``dtype`` is the compute dtype
    (autocast; default bf16 on CUDA, float32 on CPU); ``device`` a torch device string such as
    ``cuda:0``; ``batch_size`` rows per forward pass (``None``: chosen from free GPU memory on CUDA,
    256 on CPU; results do not depend on it beyond dtype rounding).
    """

    auto_class: type = AutoModelForMaskedLM

    def __init__(self, model: PreTrainedModel, tokenizer, length: int | None = None, *, frame: str | None = None,
                 prefix: str | Sequence[str] | None = None, suffix: str | Sequence[str] | None = None,
                 candidates: str | Sequence | None = None, temperature: float = 1.0,
                 device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
                 batch_size: int | None = None, compile: bool = False) -> None:
        if tokenizer is None:
            raise ValueError("the model has no tokenizer; a language-model source needs one to place its frame")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = str(getattr(model, "name_or_path", "") or type(model).__name__)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        # float64 runs the model itself in float64 (converted in place; every other dtype autocasts)
        self.model.to(self.device, *([torch.float64] if self.dtype == torch.float64 else []))
        self.frame: Frame = build_frame(tokenizer, length=length, frame=frame, prefix=prefix, suffix=suffix,
                                        candidates=candidates, excluded=self._special_ids(),
                                        vocab_limit=self._vocab_limit())
        self.support_ids = np.asarray(self.frame.alphabet, dtype=np.int64)
        super().__init__(StateSpace(len(self.support_ids), self.frame.length), temperature)
        head, tail = self._special_template()
        self._template = torch.tensor(head + [0 if t is None else t for t in self.frame.tokens] + tail,
                                      dtype=torch.long, device=self.device)
        #: input position of each free site (specials and fixed tokens counted)
        self.slots = torch.tensor([len(head) + k for k in self.frame.free], dtype=torch.long, device=self.device)
        limit = self.max_positions()
        if limit is not None and self._template.numel() > limit:
            raise ValueError(
                f"the frame needs {self._template.numel()} positions (n = {self.space.length} free, "
                f"{self.frame.fixed} fixed tokens, {len(head) + len(tail)} specials), longer than the "
                f"{limit} positions the model allows")
        self._support_t = torch.as_tensor(self.support_ids, device=self.device)
        self._symbol_of = {int(t): k for k, t in enumerate(self.support_ids)}
        self.batch_size = (check_int(batch_size, "batch_size", minimum=1) if batch_size is not None
                           else self._auto_batch_size())
        self._encoder = torch.compile(self.model.base_model) if compile else self.model.base_model
        self._forward = torch.compile(self.model) if compile else self.model
        #: called with the number of rows after each forward pass (progress bars)
        self.on_rows: Callable[[int], None] | None = None
        #: the one count of the forward passes this source (and its temperature copies) makes, under a hard cap
        self.ledger = PassLedger(largest=torch.zeros((), dtype=torch.float32, device=self.device))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(cls, model_id_or_path: str | Path, length: int | None = None, *,
                        trust_remote_code: bool = False, local_files_only: bool | None = None,
                        revision: str | None = None, allow_pickle: bool = False, progress: bool = True,
                        **kwargs) -> "TokenConditionals":
        """Load a hub id or local folder (see :func:`load_pretrained`; ``progress=False``: no line on a
        long load) and build the source."""
        model, tokenizer = load_pretrained(cls.auto_class, model_id_or_path, trust_remote_code=trust_remote_code,
                                           local_files_only=local_files_only, revision=revision,
                                           allow_pickle=allow_pickle, progress=progress)
        return cls(model, tokenizer, length, **kwargs)

    def _vocab_limit(self) -> int:
        return min(len(self.tokenizer), int(self.model.get_output_embeddings().weight.shape[0]))

    def _special_ids(self) -> set[int]:
        ids = set(self.tokenizer.all_special_ids)
        ids.update(i for i, t in getattr(self.tokenizer, "added_tokens_decoder", {}).items() if t.special)
        return ids

    def _special_template(self) -> tuple[list[int], list[int]]:
        """Special tokens the tokenizer puts before and after a single sequence (e.g. [CLS], [SEP])."""
        probe = self.tokenizer.convert_ids_to_tokens(int(self.support_ids[0]))
        plain = list(self.tokenizer(probe, add_special_tokens=False)["input_ids"])
        full = list(self.tokenizer(probe, add_special_tokens=True)["input_ids"])
        for start in range(len(full) - len(plain) + 1):
            if plain and full[start:start + len(plain)] == plain:
                return full[:start], full[start + len(plain):]
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        return ([cls] if cls is not None else []), ([sep] if sep is not None else [])

    @property
    def positions(self) -> int:
        """L, the number of input positions: specials + fixed tokens + n free positions."""
        return int(self._template.numel())

    def max_positions(self) -> int | None:
        """Most input positions the model accepts (RoBERTa-style padding offsets subtracted)."""
        limit = getattr(self.model.config, "max_position_embeddings", None)
        embeddings = getattr(self.model.base_model, "embeddings", None)
        pad = getattr(embeddings, "padding_idx", None)
        if limit is not None and pad is not None and hasattr(embeddings, "position_embeddings"):
            limit -= pad + 1
        tok_limit = getattr(self.tokenizer, "model_max_length", None)
        if tok_limit is not None and tok_limit < 10**6:
            limit = tok_limit if limit is None else min(limit, tok_limit)
        return limit

    def _auto_batch_size(self) -> int:
        if self.device.type != "cuda":
            return _CPU_BATCH
        cfg = self.model.config
        hidden = getattr(cfg, "hidden_size", 1024)
        inter = getattr(cfg, "intermediate_size", None) or 4 * hidden
        heads = getattr(cfg, "num_attention_heads", 16)
        width = self.positions
        itemsize = torch.finfo(self.dtype).bits // 8
        per_row = (width * (8 * hidden + 2 * inter + 2 * heads * width) * itemsize
                   + 8 * self._vocab_limit() * self._scored_positions())
        free, _ = torch.cuda.mem_get_info(self.device)
        return int(max(1, min(_MAX_AUTO_BATCH, 0.4 * free // per_row)))

    def _scored_positions(self) -> int:
        """Positions per row at which the LM head runs (for the memory estimate): the masked one,
        or all of them for architectures whose head cannot be run alone (:func:`_head_of`)."""
        return 1 if _head_of(self.model) is not None else self.positions

    # ------------------------------------------------------------------ symbols and tokens
    def encode(self, text: str | Sequence[str], skip_outside: bool = False) -> np.ndarray:
        """Symbols of a text (tokenized without specials) or of a list of tokens.

        Every token must be in the support, unless ``skip_outside`` (then tokens outside the
        support, unknown ones included, are dropped: for drawing contexts from free text).
        """
        if skip_outside:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] if isinstance(text, str) else \
                self.tokenizer.convert_tokens_to_ids(list(text))
            return np.asarray([self._symbol_of[i] for i in ids if i in self._symbol_of], dtype=np.int64)
        ids = known_ids(self.tokenizer, text, "input")
        missing = [self.tokenizer.convert_ids_to_tokens(i) for i in ids if i not in self._symbol_of]
        if missing:
            raise ValueError(f"tokens {missing} are not in the support of this model")
        return np.asarray([self._symbol_of[i] for i in ids], dtype=np.int64)

    def decode(self, symbols: np.ndarray | Sequence[int]) -> list[str]:
        """Tokens of a 1-D sequence of symbols."""
        sym = np.asarray(symbols, dtype=np.int64)
        if sym.ndim != 1 or (sym.size and (sym.min() < 0 or sym.max() >= self.space.vocab_size)):
            raise ValueError(f"symbols must be a 1-D array with values in [0, {self.space.vocab_size})")
        return self.tokenizer.convert_ids_to_tokens(self.support_ids[sym].tolist())

    def to_tensor(self, contexts: np.ndarray) -> torch.Tensor:
        """Validated (B, n) symbols as a long tensor on the model's device."""
        return torch.as_tensor(np.ascontiguousarray(self.check_contexts(contexts)), dtype=torch.long, device=self.device)

    def token_ids(self, symbols: torch.Tensor, validate: bool = True) -> torch.Tensor:
        """Full model inputs (B, L): the frame with the tokens of ``symbols`` at its free positions.

        ``validate=False`` skips the range check of the symbols (a host-device synchronisation on
        CUDA); only for symbols known to be valid, e.g. states produced by a chain.
        """
        sym = self._check_symbols(symbols) if validate else symbols
        ids = self._template.expand(sym.shape[0], -1).clone()
        ids[:, self.slots] = self._support_t[sym]
        return ids

    def _check_symbols(self, symbols: torch.Tensor) -> torch.Tensor:
        if not isinstance(symbols, torch.Tensor):
            raise TypeError(f"symbols must be a torch tensor, got {type(symbols).__name__}")
        if symbols.dim() != 2 or symbols.shape[1] != self.space.length:
            raise ValueError(f"symbols must have shape (B, {self.space.length}), got {tuple(symbols.shape)}")
        if symbols.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"symbols must be an integer tensor, got {symbols.dtype}")
        if symbols.numel():
            lo, hi = torch.aminmax(symbols)
            if int(lo) < 0 or int(hi) >= self.space.vocab_size:
                raise ValueError(f"symbols must lie in [0, {self.space.vocab_size})")
        return symbols.to(self.device, torch.long)

    def _check_sites_torch(self, sites: int | torch.Tensor, batch: int, validate: bool = True) -> torch.Tensor:
        n = self.space.length
        if isinstance(sites, torch.Tensor) and sites.dim() > 1:
            raise ValueError(f"sites must be a scalar or have shape ({batch},), got {tuple(sites.shape)}")
        if isinstance(sites, torch.Tensor) and sites.dim() == 1:
            if sites.shape[0] != batch:
                raise ValueError(f"sites must be a scalar or have shape ({batch},), got {tuple(sites.shape)}")
            if validate and batch:
                lo, hi = torch.aminmax(sites)
                if int(lo) < 0 or int(hi) >= n:
                    raise ValueError(f"sites out of range for length {n}")
            return sites.to(self.device, torch.long)
        site = self.space.check_site(int(sites))
        return torch.full((batch,), site, dtype=torch.long, device=self.device)

    # ------------------------------------------------------------------ torch API
    def autocast(self):
        """The autocast context of this source's dtype (a no-op in float32 and float64)."""
        if self.dtype in (torch.float32, torch.float64):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _batched(self, rows: int, compute: Callable[[slice], torch.Tensor],
                 trailing: tuple[int, ...] = ()) -> torch.Tensor:
        """Concatenate ``compute(chunk)`` (shape (chunk rows, *trailing)) over chunks of ``batch_size`` rows.

        On CUDA out-of-memory the batch size is halved and the chunk retried. Every row is one forward pass,
        counted here (:attr:`ledger`, the one count; refused before any is made when it would pass the cap).
        """
        self.ledger.check(rows)
        parts, start = [], 0
        while start < rows:
            stop = min(rows, start + self.batch_size)
            try:
                with torch.inference_mode(), self.autocast():
                    parts.append(compute(slice(start, stop)).to(self.score_dtype))
            except torch.cuda.OutOfMemoryError:
                if self.batch_size == 1:
                    raise
                self.batch_size //= 2
            else:
                self.ledger.record(parts[-1])
                if self.on_rows is not None:
                    self.on_rows(stop - start)
                start = stop
                continue
            # outside the handler: the exception's frames (the failed chunk's activations) are gone
            torch.cuda.empty_cache()
        return torch.cat(parts) if parts else torch.empty((0, *trailing), device=self.device)

    @property
    def score_dtype(self) -> torch.dtype:
        """The dtype of the scores returned: float64 for a float64 model, else float32."""
        return torch.float64 if self.dtype == torch.float64 else torch.float32

    @abstractmethod
    def scores_torch(self, symbols: torch.Tensor, sites: int | torch.Tensor, *, validate: bool = True) -> torch.Tensor:
        """Scores s_i(. | x_{-i}) at T = 1 for symbols (B, n) and one site per row: (B, |V|) of :attr:`score_dtype`.

        ``validate=False`` skips the range checks of symbols and sites (host-device synchronisations
        on CUDA) for inputs known to be valid, as in the chain loop of :mod:`mlmix.empirical.sampling.simulation`.
        """

    def log_conditionals_torch(self, symbols: torch.Tensor, sites: int | torch.Tensor, *,
                               validate: bool = True) -> torch.Tensor:
        """log pi_i^T(. | x_{-i}) = log_softmax(s_i / T) on the device: float32 (B, |V|)."""
        return torch.log_softmax(self.scores_torch(symbols, sites, validate=validate) / self.temperature, dim=-1)

    # ------------------------------------------------------------------ numpy API (wraps the torch one)
    def scores(self, contexts: np.ndarray, sites: int | np.ndarray) -> np.ndarray:
        ctx = self.check_contexts(contexts)
        if np.ndim(sites) == 0:
            site_t: int | torch.Tensor = self.space.check_site(sites)
        else:
            site_arr = np.asarray(sites)
            if not np.issubdtype(site_arr.dtype, np.integer):
                raise TypeError(f"sites must be integers, got dtype {site_arr.dtype}")
            site_t = torch.tensor(site_arr, dtype=torch.long)
        out = self.scores_torch(torch.tensor(ctx, dtype=torch.long, device=self.device), site_t)
        return out.double().cpu().numpy()

    def site_scores(self, contexts: np.ndarray, site: int) -> np.ndarray:
        return self.scores(contexts, site)

    def describe(self) -> dict:
        """Model, frame, alphabet size, device and dtype as plain values (for reports)."""
        return {"model": self.name, "architecture": type(self.model).__name__, "vocab_size": self.space.vocab_size,
                "length": self.space.length, "frame": self.frame.text(self.tokenizer),
                "fixed_tokens": self.frame.fixed, "device": str(self.device),
                "dtype": str(self.dtype).replace("torch.", ""), "batch_size": self.batch_size}


def _head_of(model: PreTrainedModel) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The LM head applied to hidden states (N, H) -> logits (N, vocab): the one the model's family registers
    for its class (:func:`~mlmix.empirical.models.families.head_adapter`), None when none is known."""
    adapter = head_adapter(model)
    return None if adapter is None else adapter.head_function(model)


class MaskedLMConditionals(TokenConditionals):
    """Conditionals of an ``AutoModelForMaskedLM``: the logits at the [MASK]ed site over the support.

    For BERT, RoBERTa (and XLM-R), ModernBERT and ESM the encoder runs on the whole sequence and the
    head only on the masked positions; other masked LMs fall back to the full forward pass and a
    gather (same numbers, slower).
    """

    auto_class = AutoModelForMaskedLM
    masked_lm = True

    def __init__(self, model: PreTrainedModel, tokenizer, length: int | None = None, **kwargs) -> None:
        if tokenizer is not None and getattr(tokenizer, "mask_token_id", None) is None:
            raise ValueError("the tokenizer has no mask token; a masked language model is required")
        super().__init__(model, tokenizer, length, **kwargs)
        self.mask_id = int(tokenizer.mask_token_id)
        self._head = _head_of(self.model)

    def masked_logits_torch(self, token_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits over the support at ``positions`` (N,) of full inputs ``token_ids`` (N, L), as given.

        The caller places the mask; rows are processed in chunks of ``batch_size``.
        """
        rows = torch.arange(token_ids.shape[0], device=self.device)

        def compute(chunk: slice) -> torch.Tensor:
            ids, pos, idx = token_ids[chunk], positions[chunk], rows[chunk] - chunk.start
            if self._head is None:
                return self._forward(input_ids=ids).logits[idx, pos][:, self._support_t]
            hidden = self._encoder(input_ids=ids)[0]
            return self._head(hidden[idx, pos])[:, self._support_t]

        return self._batched(token_ids.shape[0], compute, (self.space.vocab_size,))

    def scores_torch(self, symbols: torch.Tensor, sites: int | torch.Tensor, *, validate: bool = True) -> torch.Tensor:
        ids = self.token_ids(symbols, validate)
        site_t = self._check_sites_torch(sites, ids.shape[0], validate)
        pos = self.slots[site_t]
        ids[torch.arange(ids.shape[0], device=self.device), pos] = self.mask_id
        return self.masked_logits_torch(ids, pos)

    def all_scores_torch(self, symbols: torch.Tensor) -> torch.Tensor:
        """Scores at every site from the n masked copies of each sequence, one batched pass: (B, n, |V|)."""
        ids = self.token_ids(symbols)
        batch, n = ids.shape[0], self.space.length
        copies = ids.repeat_interleave(n, dim=0)
        pos = self.slots.repeat(batch)
        copies[torch.arange(batch * n, device=self.device), pos] = self.mask_id
        return self.masked_logits_torch(copies, pos).reshape(batch, n, self.space.vocab_size)

    def all_log_conditionals_torch(self, symbols: torch.Tensor) -> torch.Tensor:
        """log pi_i^T(. | x_{-i}) at every site on the device: float32 (B, n, |V|)."""
        return torch.log_softmax(self.all_scores_torch(symbols) / self.temperature, dim=-1)

    def all_log_conditionals(self, contexts: np.ndarray) -> np.ndarray:
        scores = self.all_scores_torch(self.to_tensor(contexts)).double().cpu().numpy()
        return log_softmax(scores / self.temperature, axis=-1)

    def tabulated(self) -> MLMTable:
        """The exact score table over the frame, read from the cache or computed once
        (:func:`~mlmix.empirical.models.tabulate.tabulate`: n |V|^(n-1) masked passes, checkpointed): what
        ``Chain.from_source`` builds the chain of a masked LM from (paper G section 3.1)."""
        return tabulate(self)
