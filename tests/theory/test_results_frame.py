"""Chain.summary(as_frame=True): the report as a pandas.DataFrame (theory/results.results_frame), one
row per result with the same numbers as the dict, checked against the two-state closed forms; the
one-line ImportError without pandas."""

import math
import sys

import networkx as nx
import numpy as np
import pytest

from mlmix import Chain
from mlmix.theory.chain.operator_chain import OperatorChain
from mlmix.theory.kernels.operators import kernel_operator
from mlmix.theory.sources.conditionals import IsingModel

pd = pytest.importorskip("pandas", reason="pandas is the optional 'frames' extra (in the 'test' extra for CI)")


def test_two_state_chain_frame_matches_the_closed_forms_and_the_dict():
    """P = [[1-a, a], [b, 1-b]]: gap a + b, lambda_2 = 1 - a - b, absolute gap 1 - |1 - a - b|,
    Kemeny constant 1 / (a + b), pi = (b, a) / (a + b), conductance a: Phi of the lighter state 0
    (pi_0 = 1/4 <= 1/2) is its exit probability P(0, 1)."""
    a, b = 0.3, 0.1
    chain = Chain(np.array([[1 - a, a], [b, 1 - b]]))
    report = chain.summary(progress=False)
    frame = chain.summary(progress=False, as_frame=True)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["name", "value", "lower", "upper", "rel_error", "method", "reason"]
    assert list(frame.index) == [k for k, v in report.items() if hasattr(v, "rel_error") and k != "stationary"]
    closed = {"spectral_gap": a + b, "absolute_spectral_gap": 1 - abs(1 - a - b), "relaxation_time": 1 / (a + b),
              "additive_gap": a + b, "poincare_constant": 1 / (a + b), "kemeny_constant": 1 / (a + b),
              "conductance": a}
    for key, exact in closed.items():
        assert frame.loc[key, "value"] == pytest.approx(exact, rel=1e-12), key
        assert frame.loc[key, "value"] == report[key].value and frame.loc[key, "method"] == report[key].method
    assert frame.attrs["n_states"] == 2 and frame.attrs["eps"] == 0.25
    assert frame.attrs["stationary"]["method"] == report["stationary"]["method"]
    assert frame["value"].dtype == float and frame.loc["t_mix", "value"] == report["t_mix"].value


def test_a_missing_number_is_nan_with_its_reason_and_the_operator_chain_has_the_same_rows():
    src = IsingModel(nx.cycle_graph(4), beta=0.3)
    dense = Chain.from_source(src).summary(progress=False, as_frame=True)
    op = OperatorChain(kernel_operator(src, device="cpu")).summary(progress=False, as_frame=True)
    assert list(op.index) == list(dense.index)
    assert op.loc["spectral_gap", "value"] == pytest.approx(dense.loc["spectral_gap", "value"], rel=1e-6)
    missing = op[op["value"].isna()]
    assert all(isinstance(r, str) and r for r in missing["reason"])  # every NaN says why
    assert not math.isnan(dense.loc["kemeny_constant", "value"])


def test_without_pandas_a_one_line_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"^a DataFrame needs pandas: pip install 'mlmix\[frames\]'"):
        Chain(np.array([[0.5, 0.5], [0.5, 0.5]])).summary(progress=False, as_frame=True)
