"""One Chain on every representation: the same members, names and (within the stated
accuracy) values on dense, CSR and matrix-free chains; the entrywise stationary certificate on the
operator; hitting times, committors, variances and Kemeny bounds on the operator against closed forms
of birth-death chains (independent sites, Curie-Weiss Ising)."""

import inspect
import math

import mpmath as mp
import networkx as nx
import numpy as np
import pytest
import torch
from chain_representations import assert_encloses, chain_in

from mlmix.theory.chain.markov_chain import Chain
from mlmix.theory.chain.operator_chain import OperatorChain
from mlmix.theory.kernels.assembled import glauber_kernel
from mlmix.theory.kernels.operators import kernel_operator
from mlmix.theory.results import NAMES, Result, VectorResult
from mlmix.theory.sources.conditionals import IsingModel, ScoreTable

torch.set_num_threads(1)

REPRESENTATIONS = ("dense", "sparse", "operator")


def _public(cls) -> set[str]:
    return {m for m in dir(cls) if not m.startswith("_")}


#: Members of Chain written only in terms of other public members (valid on every representation), and
#: its constructors and saved description.
GENERIC = {"log_stationary", "is_aperiodic", "closed_classes", "saved_about"}


def test_one_chain_class_holds_the_operator():
    """OperatorChain is a constructor, not a second implementation: it overrides no question of Chain."""
    own = {name for name in vars(OperatorChain) if not (name.startswith("__") and name.endswith("__"))}
    assert own == {"from_source"} and set(_public(OperatorChain)) == set(_public(Chain))
    for name in GENERIC - {"saved_about"}:
        assert "self.P" not in inspect.getsource(getattr(Chain, name).fget)
    dense = Chain(np.array([[0.5, 0.5], [0.25, 0.75]]))
    op = OperatorChain(kernel_operator(IsingModel(nx.cycle_graph(4), beta=0.3), device="cpu"))
    assert {k for k in vars(dense) if not k.startswith("_")} <= {k for k in vars(op) if not k.startswith("_")}


def test_attribute_access_never_raises_and_from_source_returns_a_chain(chain_of):
    src = IsingModel(nx.cycle_graph(8), beta=0.4)
    op = chain_of(source=src)
    assert type(op) is Chain
    for name in sorted(_public(Chain)):
        assert hasattr(op, name), name
    assert hasattr(op, "save") and not hasattr(op, "no_such_member")
    assert op.period == 1 and op.is_aperiodic and len(op.closed_classes) == 1
    if op.representation == "operator":  # a reversible operator is its own reversal
        assert op.time_reversal() is op and op.additive_reversibilization() is op
    else:  # a matrix chain builds the reversal: for a reversible chain, the same matrix
        for rev in (op.time_reversal(), op.additive_reversibilization()):
            np.testing.assert_allclose(rev.to_dense(), op.to_dense(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(op.to_dense(), glauber_kernel(src).toarray(), rtol=0, atol=0)
    f = np.random.default_rng(0).random(src.space.size)
    np.testing.assert_allclose(op.P @ f, glauber_kernel(src) @ f, rtol=1e-13)


def test_names_come_from_one_table():
    assert len(set(NAMES.values())) == len(NAMES)
    assert all(" " in v or v in ("t_mix", "conductance", "d(t)", "Phi(S)") for v in NAMES.values())


# ------------------------------------------------------------------------------------------ one fixture

@pytest.fixture(params=REPRESENTATIONS)
def ising(request):
    """The same 2^8-state Ising chain held each way (dense GTH, CSR Krylov, matrix-free)."""
    src = IsingModel(nx.cycle_graph(8), beta=0.45, fields=0.15)
    kw = {"device": "cpu"} if request.param == "operator" else {}
    return Chain.from_source(src, representation=request.param, **kw)


@pytest.fixture(scope="module")
def reference():
    src = IsingModel(nx.cycle_graph(8), beta=0.45, fields=0.15)
    return Chain.from_source(src, representation="dense")


def _agree(r: Result, ref: Result, rtol: float = 1e-8) -> None:
    assert r.name == ref.name
    if r.resolved:
        assert r.value == pytest.approx(ref.value, rel=rtol)
    else:  # an honest enclosure of the dense value
        assert r.reason and (r.lower is None or r.lower <= ref.value * (1 + rtol))
        assert r.upper is None or ref.value <= r.upper * (1 + rtol)


def test_same_names_and_values_on_every_representation(ising, reference):
    assert ising.representation in REPRESENTATIONS
    a, b = ising.summary(mixing_limit=16), reference.summary(mixing_limit=16)
    assert set(a) == set(b)  # the JSON of `mlmix exact` has the same keys at every size
    for key in ("spectral_gap", "absolute_spectral_gap", "relaxation_time", "additive_gap", "poincare_constant"):
        assert a[key].name == NAMES[key]
        _agree(a[key], b[key])
    assert a["conductance"].name == b["conductance"].name == NAMES["conductance"]
    assert a["t_mix"].name == NAMES["t_mix"] and a["kemeny_constant"].name == NAMES["kemeny_constant"]
    assert ising.stationary.name == NAMES["stationary"]
    np.testing.assert_allclose(ising.stationary.value, reference.stationary.value, rtol=1e-11)
    N = ising.n_states
    A = np.zeros(N, dtype=bool)
    A[0] = True
    B = np.zeros(N, dtype=bool)
    B[-1] = True
    h, h_ref = ising.hitting_time(A), reference.hitting_time(A)
    assert h.name == h_ref.name == NAMES["hitting_time"]
    np.testing.assert_allclose(h.value, h_ref.value, rtol=1e-9)
    q, q_ref = ising.committor(A, B), reference.committor(A, B)
    assert q.name == q_ref.name
    np.testing.assert_allclose(q.value, q_ref.value, rtol=1e-8, atol=1e-13)
    f = np.arange(N) % 3.0
    _agree(ising.asymptotic_variance(f), reference.asymptotic_variance(f))
    assert ising.dirichlet_form(f) == pytest.approx(reference.dirichlet_form(f), rel=1e-12)
    g = np.cos(np.arange(N))
    assert ising.dirichlet_form(f, g) == pytest.approx(reference.dirichlet_form(f, g), rel=1e-9)
    curve, ref_curve = ising.distance_curve(12, start=0), reference.distance_curve(12, start=0)
    assert curve.name == ref_curve.name
    np.testing.assert_allclose(curve.value, ref_curve.value, atol=1e-12)
    hp = ising.hitting_probabilities(A, 30)
    np.testing.assert_allclose(hp.value, reference.hitting_probabilities(A, 30).value, rtol=1e-12)
    assert ising.kemeny_constant.lower <= reference.kemeny_constant.value * (1 + 1e-9)
    assert reference.kemeny_constant.value <= ising.kemeny_constant.upper * (1 + 1e-9)


@pytest.mark.parametrize("rep", REPRESENTATIONS)
def test_metastable_chain_through_every_representation(rep):
    """Ising cycle:8 at beta = 8: gap = 2 / ((e^{4 beta} + 1) 8) ~ 3e-15, enclosed on every representation
    with the same name."""
    beta, n = 8.0, 8
    exact = float(2 / ((mp.exp(4 * mp.mpf(beta)) + 1) * n))
    assert exact < 1e-12
    chain = Chain.from_source(IsingModel(nx.cycle_graph(n), beta=beta), representation=rep,
                              **({"device": "cpu"} if rep == "operator" else {}))
    gap = chain.spectral_gap
    assert gap.name == NAMES["spectral_gap"]
    if gap.resolved:
        assert abs(gap.value / exact - 1) <= max(gap.rel_error, 1e-12)
    else:
        assert gap.reason and gap.lower <= exact * (1 + 1e-12) and exact <= gap.upper * (1 + 1e-12)
    assert chain.stationary.rel_error < 1e-10


def test_metastable_chain_through_passes_pieces_and_blocked_products(monkeypatch):
    """The same metastable chain (gap ~3e-15) on the operator with the CPU's cache paths forced on a
    small vector: moves in passes cut into 16-entry pieces (operators._PIECE) and Krylov basis products
    blocked by 16 columns from padded rows (krylov._COLUMNS). The gap (its value is E(f, f) / Var(f)
    through the one-buffer Dirichlet form) still encloses the closed form to 1e-12, its upper end (that
    Rayleigh quotient) is within 1e-10 of it, and the law is certified."""
    import mlmix.theory.kernels.operators as ops
    import mlmix.theory.linalg.krylov as kr

    monkeypatch.setattr(ops, "_PIECE", 16)
    monkeypatch.setattr(kr, "_COLUMNS", 16)
    beta, n = 8.0, 8
    exact = float(2 / ((mp.exp(4 * mp.mpf(beta)) + 1) * n))
    chain = Chain.from_source(IsingModel(nx.cycle_graph(n), beta=beta), representation="operator", device="cpu")
    op = chain.op
    assert any(len(p.members) > 1 for lay in op._passes for p in lay)
    assert any(len(p.pieces) > 1 for lay in op._passes for p in lay)
    gap = chain.spectral_gap
    if gap.resolved:
        assert abs(gap.value / exact - 1) <= max(gap.rel_error, 1e-12)
    else:
        assert gap.reason and gap.lower <= exact * (1 + 1e-12) and exact <= gap.upper * (1 + 1e-12)
    assert gap.upper <= exact * (1 + 1e-10)
    assert chain.stationary.rel_error < 1e-10


# ------------------------------------------------------------------------------------------ the certificate

@pytest.mark.parametrize("seed", range(3))
def test_operator_certifies_pi_entrywise(seed, chain_of):
    """Every representation's law is within its stated entrywise relative error of GTH's."""
    src = ScoreTable.random(3, 6, seed=seed, scale=1.5)
    ref = Chain(glauber_kernel(src)).stationary  # GTH, entrywise relative accuracy
    op = chain_of(source=src)
    pi = op.stationary
    assert pi.rel_error is not None and pi.rel_error < 1e-9
    assert op.representation == "dense" or "certificate" in pi.method
    assert np.abs(pi.value / ref.value - 1).max() <= pi.rel_error


def test_the_certificate_sees_a_perturbation():
    """A law off by 1e-7 in one entry is not certified below 1e-7 (the bound is not vacuous)."""
    from mlmix.theory.chain.stationary import certify_stationary, operator_stationary

    src = ScoreTable.random(2, 8, seed=4, scale=1.0)
    op = kernel_operator(src, device="cpu")
    pi = operator_stationary(op)
    bad = pi.value.copy()
    bad[5] *= 1 + 1e-7
    bad /= bad.sum()
    cert = certify_stationary(op, VectorResult(pi.name, bad, "perturbed", log_value=np.log(bad)))
    good = certify_stationary(op, pi)
    assert good.rel_error < 1e-10
    true = np.abs(bad / pi.value - 1).max()
    assert cert.rel_error is None or cert.rel_error >= true


# ------------------------------------------------------------------------------------------ closed forms

def _birth_death(src, n: int):
    """(pi_k, up_k, down_k) of the number of ones k under Glauber dynamics of a site-exchangeable
    model, from its log weights (mpmath): a birth-death chain on 0..n."""
    def w(k: int) -> mp.mpf:
        x = np.zeros((1, n), dtype=np.int64)
        x[0, :k] = 1
        return mp.mpf(float(src.log_weight(x)[0]))

    W = [w(k) for k in range(n + 1)]
    pi = [mp.binomial(n, k) * mp.exp(W[k] - W[0]) for k in range(n + 1)]
    Z = mp.fsum(pi)
    pi = [p / Z for p in pi]
    up = [mp.mpf(n - k) / n / (1 + mp.exp(W[k] - W[k + 1])) if k < n else mp.mpf(0) for k in range(n + 1)]
    down = [mp.mpf(k) / n / (1 + mp.exp(W[k] - W[k - 1])) if k > 0 else mp.mpf(0) for k in range(n + 1)]
    return pi, up, down


def _closed_forms(src, n: int):
    """E_k tau_0 = sum_{j <= k} pi([j, n]) / (pi_j down_j), and the committor of {n} against {0}:
    q(k) = sum_{j < k} 1 / (pi_j up_j) / sum_{j < n} 1 / (pi_j up_j) (birth-death chains)."""
    with mp.workdps(40):
        pi, up, down = _birth_death(src, n)
        step = [mp.mpf(0)] + [mp.fsum(pi[j:]) / (pi[j] * down[j]) for j in range(1, n + 1)]
        hit = np.array([float(mp.fsum(step[:k + 1])) for k in range(n + 1)])
        res = [1 / (pi[j] * up[j]) for j in range(n)]
        total = mp.fsum(res)
        comm = np.array([float(mp.fsum(res[:k]) / total) for k in range(n + 1)])
    return hit, comm


def _check_hitting(src, n: int, representation: str = "operator") -> None:
    op = chain_in(representation, source=src)
    k = src.space.decode(np.arange(src.space.size)).sum(axis=1)
    hit, comm = _closed_forms(src, n)
    A, B = k == 0, k == n
    h = op.hitting_time(A)
    if h.rel_error is None:  # CSR's GMRES states the residual it reached, not an error bound
        assert op.representation == "sparse" and "residual" in h.method
    assert (h.rel_error or 1e-8) < 1e-6
    assert np.abs(h.value / np.where(A, 1, hit[k]) - np.where(A, h.value, 1)).max() <= (h.rel_error or 1e-8) + 1e-12
    q = op.committor(A, B)
    err = np.abs(q.value - comm[k])
    if op.representation == "operator":  # an absolute bound
        assert err.max() <= q.details["max_abs_error"] + 1e-15 and q.details["max_abs_error"] < 1e-6
    elif q.rel_error is None:
        assert op.representation == "sparse" and err.max() <= 1e-8
    else:  # entrywise relative
        assert q.rel_error < 1e-6 and (err <= q.rel_error * np.abs(q.value) + 1e-15).all()


@pytest.mark.parametrize("make", [lambda n: IsingModel(nx.empty_graph(n), fields=0.3, beta=1.0),
                                  lambda n: IsingModel(nx.complete_graph(n), couplings=1.0 / n, fields=0.1,
                                                       beta=0.8)],
                         ids=["independent-sites", "curie-weiss"])
def test_hitting_times_and_committors_against_birth_death_closed_forms(make, representation):
    n = 8 if representation == "dense" else 14  # 2^14 states: a 2 GiB dense matrix
    _check_hitting(make(n), n, representation)


@pytest.mark.slow
def test_hitting_times_and_committors_at_2_20_states():
    n = 20
    _check_hitting(IsingModel(nx.complete_graph(n), couplings=1.0 / n, fields=0.1, beta=0.8), n)


def test_variance_dirichlet_form_and_kemeny_of_independent_sites(representation):
    """Independent sites, Glauber: f = number of ones has f - mean an eigenfunction with eigenvalue
    1 - 1/n, so sigma^2(f) = n p q (2n - 1) and E(f, f) = p q; the eigenvalues are 1 - j/n with
    multiplicity C(n, j), so K = sum_j C(n, j) n / j (dense: the value; else bounds from the trace)."""
    n, h = 8 if representation == "dense" else 14, 0.3
    src = IsingModel(nx.empty_graph(n), fields=h, beta=1.0)
    op = chain_in(representation, source=src)
    f = src.space.decode(np.arange(src.space.size)).sum(axis=1).astype(float)
    p = 1 / (1 + math.exp(-2 * h))
    var = op.asymptotic_variance(f)
    assert var.name == NAMES["asymptotic_variance"]
    assert var.value == pytest.approx(n * p * (1 - p) * (2 * n - 1), rel=max(var.rel_error, 1e-12))
    assert abs(var.value / (n * p * (1 - p) * (2 * n - 1)) - 1) <= var.rel_error
    assert op.dirichlet_form(f) == pytest.approx(p * (1 - p), rel=1e-12)
    K = sum(math.comb(n, j) * n / j for j in range(1, n + 1))
    kem = op.kemeny_constant
    assert_encloses(kem, K)
    if representation != "dense":
        assert not kem.resolved and kem.details["trace"] == pytest.approx(2**n / 2, rel=1e-15)  # tr P = N / |V|


def test_public_face():
    """Every name in mlmix.__all__ imports, is the object of its module, and import mlmix stays light."""
    import subprocess
    import sys

    import mlmix
    from mlmix.empirical.models.mlm import MaskedLMConditionals
    from mlmix.theory.kernels import assembled as kernels
    from mlmix.theory.kernels import operators
    from mlmix.theory.sources import conditionals

    for name in mlmix.__all__:
        assert getattr(mlmix, name) is not None, name
    assert mlmix.Chain is Chain and mlmix.OperatorChain is OperatorChain and mlmix.Result is Result
    assert mlmix.IsingModel is conditionals.IsingModel and mlmix.ScoreTable is conditionals.ScoreTable
    assert mlmix.PottsModel is conditionals.PottsModel and mlmix.MaskedLMConditionals is MaskedLMConditionals
    assert mlmix.glauber_kernel is kernels.glauber_kernel and mlmix.kernel_operator is operators.kernel_operator
    assert set(mlmix.__all__) <= set(dir(mlmix))
    with pytest.raises(AttributeError):
        mlmix.no_such_name  # noqa: B018
    code = "import sys, mlmix; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-300:]
