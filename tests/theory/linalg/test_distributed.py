"""The sharded operator and solvers (torch.distributed, gloo on CPU) against the single-process ones:
P f, mu P, the stationary law, the gap, the conductance interval, the t_mix bounds, and the solves
(hitting times, committors, hitting probabilities, the asymptotic variance, a distance curve) agree."""

import os
import socket

import networkx as nx
import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from mlmix.files import atomic_save_npz
from mlmix.theory.chain.hitting import operator_committor, operator_hitting_probabilities, operator_hitting_times
from mlmix.theory.chain.mixing import distance_from
from mlmix.theory.chain.operator_chain import analyse_operator
from mlmix.theory.chain.variance import operator_asymptotic_variance
from mlmix.theory.kernels.operators import kernel_operator
from mlmix.theory.linalg.operator_vectors import hash_uniform
from mlmix.theory.linalg.sharding import LOCAL, Comm
from mlmix.theory.sources.conditionals import IsingModel, LogWeightTable, ScoreTable
from mlmix.theory.sources.space import StateSpace

CASES = {
    "ising-cycle": (lambda: IsingModel(nx.cycle_graph(12), couplings=1.0, fields=0.2, beta=0.5), "glauber"),
    "score-table": (lambda: ScoreTable.random(2, 10, seed=1, scale=1.5), "glauber"),
    "k-gibbs": (lambda: LogWeightTable.random(StateSpace(2, 8), seed=2, scale=1.5), "k-gibbs"),
}


def _figures(comm: Comm, name: str) -> dict[str, np.ndarray]:
    make, kernel = CASES[name]
    op = kernel_operator(make(), kernel, 2, comm=comm, device="cpu")
    start = comm.rank * op.local_size
    f = hash_uniform(start, start + op.local_size, 7, op.device)
    res = analyse_operator(op)
    gap, phi, t = res["additive_gap"], res["conductance"], res["t_mix"]
    local = {"Pf": op.matvec(f), "muP": op.rmatvec(f), "pi": torch.as_tensor(res["stationary"].value),
             "fiedler_set": torch.as_tensor(phi.details["set"]).double()}
    out = {key: comm.all_gather_cat(v.contiguous()).numpy() for key, v in local.items()}
    out["scalars"] = np.array([gap.value, gap.lower, gap.upper, phi.lower, phi.upper, phi.details["set_mass"],
                               t.lower, -1 if t.upper is None else t.upper, res["stationary"].residual])
    # the solves take sets and functions over all states and return them over all states, on every process
    N = op.n_states
    A = np.arange(N) % 7 == 0
    B = (np.arange(N) % 11 == 3) & ~A
    pi = torch.as_tensor(res["stationary"].value).to(op.dtype)
    mu = np.zeros(N)
    mu[3] = 1.0
    var = operator_asymptotic_variance(op, np.cos(np.arange(N)), pi, gap)
    out.update(hitting=operator_hitting_times(op, A, pi).value, committor=operator_committor(op, A, B, pi).value,
               hitting_probabilities=operator_hitting_probabilities(op, A, 5).value,
               distance=distance_from(op, mu, 6, pi, res["stationary"].rel_error).value,
               variance=np.array([var.value if var.value is not None else np.nan, var.lower, var.upper]))
    return out


def _worker(rank: int, world: int, port: int, folder: str) -> None:
    import torch.distributed as dist

    from mlmix.theory.linalg.sharding import DistributedComm

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        comm = DistributedComm()
        for name in CASES:
            figures = _figures(comm, name)
            if rank == 0:
                atomic_save_npz(os.path.join(folder, f"{name}.npz"), **figures)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(world: int, tmp_path) -> None:
    mp.spawn(_worker, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    for name in CASES:
        single = _figures(LOCAL, name)
        with np.load(tmp_path / f"{name}.npz") as sharded:
            np.testing.assert_allclose(sharded["Pf"], single["Pf"], rtol=0, atol=1e-14)
            np.testing.assert_allclose(sharded["muP"], single["muP"], rtol=0, atol=1e-14)
            np.testing.assert_allclose(sharded["pi"], single["pi"], rtol=1e-11, atol=0)
            np.testing.assert_array_equal(sharded["fiedler_set"], single["fiedler_set"])
            np.testing.assert_allclose(sharded["scalars"], single["scalars"], rtol=1e-9, atol=1e-15)
            for key in ("hitting", "committor", "hitting_probabilities", "distance", "variance"):
                np.testing.assert_allclose(sharded[key], single[key], rtol=1e-8, atol=1e-13, err_msg=f"{name} {key}")


def test_two_gloo_processes_equal_one(tmp_path):
    _run(2, tmp_path)


@pytest.mark.slow
def test_four_gloo_processes_equal_one(tmp_path):
    _run(4, tmp_path)


def test_world_size_must_be_a_power_of_the_alphabet():
    class Three(Comm):
        world_size, rank = 3, 0

    with pytest.raises(ValueError, match="power of"):
        kernel_operator(IsingModel(nx.cycle_graph(4)), comm=Three(), device="cpu")


@pytest.mark.slow
def test_torchrun_entry_point_reports_like_mlmix_exact(tmp_path):
    """`torchrun -m mlmix.commands.distributed` (2 gloo processes) against `mlmix exact` on the CSR path."""
    import json
    import subprocess
    import sys

    from mlmix.theory.chain.markov_chain import Chain

    torchrun = [sys.executable, "-m", "torch.distributed.run"]  # the torchrun script, from any environment
    cmd = [*torchrun, "--standalone", "--nproc-per-node=2", "-m", "mlmix.commands.distributed", "--backend", "gloo",
           "--model", "ising", "--graph", "cycle:12", "--beta", "0.5", "--save-stationary", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-500:]
    report = json.loads(out.stdout)
    chain = Chain.from_source(IsingModel(nx.cycle_graph(12), beta=0.5), representation="sparse")
    assert report["spectral_gap"]["value"] == pytest.approx(float(chain.spectral_gap), rel=1e-9)
    pi = np.concatenate([np.load(tmp_path / f"stationary_{r:05d}.npz")["value"] for r in range(2)])
    np.testing.assert_allclose(pi, chain.stationary.value, rtol=1e-12)


def test_entry_point_parser_builds_with_every_mlmix_exact_option(capsys):
    """The torchrun entry point reuses mlmix exact's options (MLM frames included): no option clash."""
    from mlmix.commands.distributed import main as distributed_main

    with pytest.raises(SystemExit) as stop:
        distributed_main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--operator-dtype" in out and "--mlm" in out
