"""``theory/linalg/operator.py``: the one operator type. A dense ndarray, a CSR matrix, a scipy
``LinearOperator`` and a function apply(v, out) give the same product; what cannot be an operator is
refused in one line; every solver takes each form (a Lanczos run on each gives the same pair)."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from mlmix.theory.linalg.krylov import gmres, lanczos
from mlmix.theory.linalg.operator import Operator, as_operator
from mlmix.theory.linalg.sharding import LOCAL, Comm


def forms(A: np.ndarray) -> dict:
    T = torch.as_tensor(A)
    return {"dense": A, "csr": sp.csr_array(A), "linear operator": spla.aslinearoperator(sp.csr_array(A)),
            "function": lambda v, out: torch.mv(T, v, out=out)}


def test_every_form_applies_the_same_product():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((30, 30)) * (rng.uniform(size=(30, 30)) < 0.3)
    v = torch.as_tensor(rng.standard_normal(30))
    expected = A @ v.numpy()
    for name, form in forms(A).items():
        op = as_operator(form, like=v)
        assert isinstance(op, Operator) and op.n == 30 and op.comm is LOCAL, name
        out = op.new()
        assert op.apply(v, out) is out
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-13, atol=1e-13, err_msg=name)
    op = as_operator(A)
    assert as_operator(op) is op


def test_what_is_not_an_operator_is_refused():
    with pytest.raises(ValueError, match="square"):
        as_operator(np.ones((3, 4)))
    with pytest.raises(TypeError, match="linear operator"):
        as_operator("P.npz")
    with pytest.raises(TypeError, match="like="):
        as_operator(lambda v, out: out)
    with pytest.raises(ValueError, match="communicator"):
        as_operator(as_operator(np.eye(3)), comm=Comm())
    with pytest.raises(ValueError, match="one process"):
        as_operator(np.eye(3), comm=Comm())


def test_every_solver_takes_every_form():
    """The top eigenpair and a linear solve of one symmetric positive definite matrix through each form:
    the same numbers to rounding (the arithmetic is the same product)."""
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    A = (Q * np.linspace(1.0, 5.0, 40)) @ Q.T
    A = (A + A.T) / 2
    b = rng.standard_normal(40)
    top, solution = [], []
    for form in forms(A).values():
        top.append(lanczos(form, np.ones(40), tol=lambda t: 1e-12 * t).value)
        solution.append(gmres(form, torch.as_tensor(b), rtol=1e-13).x.numpy())
    np.testing.assert_allclose(top, 5.0, rtol=1e-11)
    for x in solution:
        np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-9)
