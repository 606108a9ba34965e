"""Frames: where the n free positions of a language model's chain sit, and which tokens they take.

A **frame** is a fixed left context, n free positions (anywhere, not only at the end), a fixed
right context, and an **alphabet** of single tokens. The chain lives on alphabet^n; the fixed
tokens are never resampled. Written as text, ``_`` marks a free position::

    --frame "E V Q _ _ S G"                      # two free residues inside a sequence
    --prefix "E V Q" --length 2 --suffix "S G"   # the same frame
    --frame "the _ sat on the _ ."               # free positions apart from each other

(``--prefix``/``--suffix`` may also surround a ``--frame``.) The fixed text is tokenised segment by
segment, every segment but the first with a leading space, so byte-level BPE tokenizers see words
as they appear inside a sentence. A fixed segment that tokenises to an unknown token is an error
(residues written without spaces, ``EVQ``, are one unknown word to a whitespace tokenizer).

The alphabet is a list of tokens (``--candidates "A C D E"``), a file of whitespace-separated tokens
(``--candidates @alphabet.txt``), or every ordinary token of the vocabulary (specials and
``[unusedN]`` placeholders excluded). Each entry must be exactly one token of the tokenizer.

This module does not import torch: ``mlmix exact`` registers the frame options without loading it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlmix.validation import check_int

#: The free-position marker in frame texts.
BLANK = "_"

#: Tokens that are placeholders in common vocabularies ([unused17], <unused3>, ...).
UNUSED = re.compile(r"^(\[unused\d+\]|<unused\d+>|\[UNUSED_?\d+\]|<\|unused_?\d+\|>)$")


@dataclass(frozen=True)
class Frame:
    """Token ids of a frame's content, ``None`` at each free position, and of its alphabet.

    ``tokens`` excludes the special tokens the tokenizer wraps around a sequence (those are added
    by the conditionals source); ``alphabet[k]`` is the token id of symbol k.
    """

    tokens: tuple[int | None, ...]
    alphabet: tuple[int, ...]

    @property
    def length(self) -> int:
        """n, the number of free positions."""
        return sum(t is None for t in self.tokens)

    @property
    def free(self) -> tuple[int, ...]:
        """Indices of the free positions within ``tokens``."""
        return tuple(k for k, t in enumerate(self.tokens) if t is None)

    @property
    def fixed(self) -> int:
        """Number of fixed (context) tokens."""
        return len(self.tokens) - self.length

    def text(self, tokenizer) -> str:
        """The frame as tokens with ``_`` at the free positions."""
        return " ".join(BLANK if t is None else tokenizer.convert_ids_to_tokens(t) for t in self.tokens)

    def describe(self, tokenizer) -> dict:
        """Plain values for reports and cache keys."""
        return {"frame": self.text(tokenizer), "length": self.length, "fixed_tokens": self.fixed,
                "alphabet": tokenizer.convert_ids_to_tokens(list(self.alphabet))}


def build_frame(tokenizer, *, length: int | None = None, frame: str | None = None, prefix: str | Sequence | None = None,
                suffix: str | Sequence | None = None, candidates: str | Sequence | None = None,
                excluded: set[int] = frozenset(), vocab_limit: int | None = None) -> Frame:
    """The frame ``prefix + frame + suffix`` (``frame`` a text with ``_`` at free positions, or
    ``length`` blanks when there is no frame) over the alphabet ``candidates``.

    ``prefix``/``suffix`` are texts or lists of tokens/ids; ``excluded`` are token ids that cannot
    be symbols (the model's special tokens); ``vocab_limit`` the number of ids the model scores.
    """

    if tokenizer is None:
        raise ValueError("the model has no tokenizer: a frame needs one to read its text and alphabet")
    if frame is None and length is None:
        raise ValueError("give the number of free positions (--length) or a frame with _ at each (--frame)")
    middle: list[int | None]
    if frame is not None:
        middle = _frame_tokens(tokenizer, frame, leading=prefix is not None)
        blanks = sum(t is None for t in middle)
        if blanks == 0:
            raise ValueError(f"frame {frame!r} has no free position: mark each with a separate {BLANK}")
        if length is not None and check_int(length, "length", minimum=1) != blanks:
            raise ValueError(f"--length {length} disagrees with the {blanks} free positions of the frame")
    else:
        middle = [None] * check_int(length, "length", minimum=1)
    left = known_ids(tokenizer, prefix, "prefix") if prefix is not None else []
    right = known_ids(tokenizer, suffix, "suffix", leading=True) if suffix is not None else []
    alphabet = parse_alphabet(tokenizer, candidates, excluded, vocab_limit)
    return Frame(tuple(left + middle + right), tuple(alphabet))


def _frame_tokens(tokenizer, frame: str, leading: bool) -> list[int | None]:
    """Token ids of a frame text, ``None`` for each ``_`` (whitespace-separated)."""
    if not isinstance(frame, str):
        raise TypeError(f"frame must be a text with {BLANK} at free positions, got {type(frame).__name__}")
    out: list[int | None] = []
    segment: list[str] = []

    def flush() -> None:
        if segment:
            out.extend(known_ids(tokenizer, " ".join(segment), "frame", leading=leading or bool(out)))
            segment.clear()

    for piece in frame.split():
        if piece == BLANK:
            flush()
            out.append(None)
        else:
            segment.append(piece)
    flush()
    return out


def known_ids(tokenizer, tokens: str | Sequence, what: str, leading: bool = False) -> list[int]:
    """Token ids of a text (tokenised without specials; with a leading space when ``leading``) or of
    a list of tokens / ids; unknown tokens are an error naming the offending piece."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if isinstance(tokens, str):
        ids = list(tokenizer((" " if leading else "") + tokens, add_special_tokens=False)["input_ids"])
        if unk is not None and unk in ids and tokenizer.unk_token not in tokens:
            bad = [p for p in tokens.split() if unk in tokenizer(p, add_special_tokens=False)["input_ids"]]
            hint = (" (write residues or words separated by spaces)"
                    if any(len(p) > 1 for p in bad) else "")
            raise ValueError(f"{what} text {tokens!r} contains tokens unknown to the tokenizer: "
                             f"{', '.join(map(repr, bad or [tokens]))}{hint}")
        return ids
    ids = []
    for tok in tokens:
        ids.append(_one_token(tokenizer, tok, what))
    return ids


def _one_token(tokenizer, tok: object, what: str) -> int:
    """The id of one token given as an id, a vocabulary entry, or a text that is exactly one token."""
    size = len(tokenizer)
    if isinstance(tok, (int, np.integer)) and not isinstance(tok, bool):
        if not 0 <= int(tok) < size:
            raise ValueError(f"{what} token id {tok} is outside the vocabulary")
        return int(tok)
    if not isinstance(tok, str):
        raise TypeError(f"{what} tokens must be strings or ints, got {type(tok).__name__}")
    unk = getattr(tokenizer, "unk_token_id", None)
    tid = tokenizer.convert_tokens_to_ids(tok)
    if tid is not None and (tid != unk or tok == tokenizer.unk_token):
        return int(tid)
    ids = list(tokenizer(tok, add_special_tokens=False)["input_ids"])
    if len(ids) == 1 and ids[0] != unk:
        return int(ids[0])
    if len(ids) > 1 and unk not in ids:
        pieces = " ".join(tokenizer.convert_ids_to_tokens(ids))
        raise ValueError(f"{what} {tok!r} is {len(ids)} tokens of the tokenizer ({pieces}), not one: "
                         "every entry must be a single token (separate them with spaces)")
    hint = " (separate single tokens with spaces)" if len(tok) > 1 else ""
    raise ValueError(f"unknown {what} token {tok!r}: not in the tokenizer's vocabulary{hint}")


def parse_alphabet(tokenizer, candidates: str | Sequence | None, excluded: set[int] = frozenset(),
                   vocab_limit: int | None = None) -> list[int]:
    """Token ids of the alphabet: ``candidates`` as whitespace-separated tokens, ``@file`` (tokens
    separated by whitespace), a list of tokens or ids, or None for every ordinary token."""
    limit = len(tokenizer) if vocab_limit is None else min(vocab_limit, len(tokenizer))
    if candidates is None:
        tokens = tokenizer.convert_ids_to_tokens(list(range(limit)))
        ids = [i for i, t in enumerate(tokens) if i not in excluded and t is not None and not UNUSED.match(t)]
        if len(ids) < 2:
            raise ValueError(f"the tokenizer has {len(ids)} ordinary tokens among the {limit} the model scores; "
                             "a chain needs at least 2 (is this the model's own tokenizer?)")
        return ids
    if isinstance(candidates, str):
        entries = read_token_list(candidates)
    else:
        entries = list(candidates)
    ids = [_one_token(tokenizer, tok, "candidate") for tok in entries]
    bad = [tokenizer.convert_ids_to_tokens(i) for i in ids if i in excluded or i >= limit]
    if bad:
        raise ValueError(f"candidates must be ordinary tokens of the model, got special/out-of-range {bad}")
    if len(set(ids)) != len(ids):
        dup = sorted({tokenizer.convert_ids_to_tokens(i) for i in ids if ids.count(i) > 1})
        raise ValueError(f"candidates contain duplicates: {dup}")
    if len(ids) < 2:
        raise ValueError(f"the alphabet needs at least 2 tokens, got {len(ids)}")
    return ids


def read_token_list(spec: str) -> list[str]:
    """Whitespace-separated tokens of a text, or of the file named after ``@``."""
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"candidates file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"candidates file {path} is unreadable: {err}") from None
        return text.split()
    return spec.split()
