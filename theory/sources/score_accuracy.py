"""The stated accuracy of a model's scores, by the arithmetic that produced them.

A masked LM's score s_i(v | x_{-i}) (a logit at the masked position) computed by a forward pass in a
floating-point format of unit roundoff u is charged the absolute error

    e = SCORE_ULPS[format] * u * M,      M = the largest |score| of the table (or of the scores seen),

against the same network evaluated exactly. Every certified bracket built from such scores, read from a
table or queried from the model, widens by it: a TV distance rho_ij by e / T (Lemma 6 on both
conditionals), an oscillation Delta_ij by 4 e, the rectangle statistic R by 8 e / T.

Why u M, and what is assumed. A forward pass is a chain of dot products, LayerNorms, softmaxes and GELUs;
a worst-case a-priori bound of its rounding (|error| <= gamma_k sum |terms| at every layer, propagated
through the Lipschitz constants of the later layers) is orders of magnitude above the actual error and
depends on norms no one states. The logits are an affine map of the head's LayerNorm output, so their
rounding scales with the logit scale M, not with each logit (a logit near 0 is not accurate to a few of
its own ulps: measured per row, the error reaches 155 u of the row's own largest |score|). The charge is
therefore an *empirical* bound with a margin, and that is the assumption every bracket rests on: the
largest |s_format - s_float64| over every context of AntiBERTy 0.1.3 (frames S, L and LR, n = 2 and 3) and
of the random tiny BERT, RoBERTa and ModernBERT models of the tests (widths 16 and 64, seeds 0-3, n = 2 and
3), in units u M, measured by ``benchmarks/bench_score_accuracy.py`` on CPU (docs/accuracy.md, "Score
accuracy"), is 52 u M in float32 (a random BERT whose logits are small, M = 0.56; AntiBERTy: 35 u M), 6.8
u M in bfloat16 and 11.6 u M in float16 (autocast): the charges, 256, 32 and 64, are 4.9x, 4.7x and 5.5x
above. The ratio grows where M is small against the network's internal scale, so a model far from these
(logits near 0 throughout) should be measured with that script before its brackets are trusted. float64 is
charged the float32 constant in its own unit (2^-53): rounding errors are first order in u for the same
sequence of operations (a float64 table is within 256 float64 units of M of the exact network's scores
under the same assumption; no wider format in torch measures it). A table given as numbers (a
:class:`~mlmix.theory.sources.conditionals.ScoreTable` built by the user) *is* the source: its accuracy
is :data:`EXACT` (error 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Unit roundoff u (half an ulp of 1) of each format.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

#: Charged units u M of each format (module docstring: measured maxima and margins).
SCORE_ULPS = {"float64": 256, "float32": 256, "float16": 64, "bfloat16": 32}


@dataclass(frozen=True)
class ScoreAccuracy:
    """The stated accuracy of a table's or a model's scores: ``dtype`` ("float32", ..., or "exact" for
    scores given as numbers), ``max_abs_score`` M and the absolute ``error`` e charged to every score
    (module docstring)."""

    dtype: str
    max_abs_score: float
    error: float

    @classmethod
    def of(cls, dtype: str, max_abs_score: float) -> "ScoreAccuracy":
        """The charge of scores computed in ``dtype`` whose largest |score| is ``max_abs_score``:
        SCORE_ULPS u M, rounded up; "exact": 0."""
        if dtype == "exact":
            return EXACT
        if dtype not in SCORE_ULPS:
            raise ValueError(f"no stated score accuracy for dtype {dtype!r} (known: {sorted(SCORE_ULPS)}, exact)")
        M = float(max_abs_score)
        if not (M >= 0 and math.isfinite(M)):
            raise ValueError(f"the largest |score| must be finite and >= 0, got {max_abs_score!r}")
        charge = SCORE_ULPS[dtype] * UNIT_ROUNDOFF[dtype] * M
        return cls(dtype, M, math.nextafter(charge, math.inf) if charge > 0 else 0.0)

    def as_dict(self) -> dict:
        """The JSON form: dtype, units charged, unit roundoff, M and the error."""
        return {"dtype": self.dtype, "units": SCORE_ULPS.get(self.dtype, 0), "unit_roundoff": UNIT_ROUNDOFF.get(self.dtype, 0.0),
                "max_abs_score": self.max_abs_score, "error": self.error}


#: Scores given as numbers: the table is the source, error 0.
EXACT = ScoreAccuracy("exact", 0.0, 0.0)


def dtype_name(dtype: object) -> str:
    """"float32" for torch.float32, numpy's float32 or the string itself."""
    return str(dtype).replace("torch.", "")


def max_abs_score(table: np.ndarray) -> float:
    """M, the largest finite |score| of a table (-inf entries, p = 0, are exact); 0 when none."""
    finite = np.abs(np.asarray(table, dtype=np.float64)[np.isfinite(table)])
    return float(finite.max()) if finite.size else 0.0


def source_accuracy(source: object, max_abs_score: float) -> ScoreAccuracy:
    """The accuracy of a source's scores: a table's own (``score_accuracy``), a model's from its compute
    ``dtype`` at the largest |score| seen, else (scores defined by a formula) :data:`EXACT`."""
    own = getattr(source, "score_accuracy", None)
    if isinstance(own, ScoreAccuracy):
        return own
    dtype = getattr(source, "dtype", None)
    return EXACT if dtype is None else ScoreAccuracy.of(dtype_name(dtype), max_abs_score)
