"""A law on V^n as a table of its most probable states, in the alphabet's tokens (``mlmix decode --law``)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlmix.theory.sources.space import StateSpace
from mlmix.validation import check_int


def law_table(log_law: np.ndarray, space: StateSpace, tokens: Sequence[str] | None = None, rows: int = 20) -> dict:
    """The ``rows`` most probable states (0: all), by decreasing probability (ties: lower state index
    first), each with its index (state order of ``mlmix exact --stationary``), its text (the tokens, or
    the symbols' numbers, separated by spaces), its probability and log-probability (a probability below
    float64's range is 0 there, its log finite); and the number and total mass of the other states."""
    rows = check_int(rows, "--law-rows", minimum=0)
    log_law = np.asarray(log_law, dtype=np.float64)
    order = np.argsort(-log_law, kind="stable")
    shown = order if rows == 0 else order[:rows]
    names = [str(t) for t in tokens] if tokens is not None else [str(v) for v in range(space.vocab_size)]
    symbols = space.decode(shown) if shown.size else np.zeros((0, space.length), np.int64)
    out = [{"index": int(i), "state": " ".join(names[v] for v in row), "probability": float(np.exp(lp)),
            "log_probability": float(lp) if np.isfinite(lp) else None}
           for i, row, lp in zip(shown, symbols, log_law[shown])]
    rest = order[shown.size:]
    return {"rows": out, "others": {"states": int(rest.size), "mass": float(np.exp(log_law[rest]).sum())}}


def format_law_table(table: dict) -> list[str]:
    """The text lines of :func:`law_table`: rank, state, probability (e^log when it underflows), index."""
    width = max([len(r["state"]) for r in table["rows"]] + [5])
    lines = [f"  {'#':>4}  {'state':<{width}}  {'probability':>14}  {'index':>8}"]
    for rank, r in enumerate(table["rows"], 1):
        p = r["probability"]
        shown = f"{p:.6g}" if p > 0 or r["log_probability"] is None else f"e^{r['log_probability']:.8g}"
        lines.append(f"  {rank:>4}  {r['state']:<{width}}  {shown:>14}  {r['index']:>8}")
    rest = table["others"]
    if rest["states"]:
        lines.append(f"  the other {rest['states']:,} states: mass {rest['mass']:.6g}")
    return lines
