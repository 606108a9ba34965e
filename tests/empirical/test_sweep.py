"""Sweeps through a process pool and through a Dask cluster give the same, resumable results."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from dask import distributed

from mlmix.empirical.sampling.simulation import run_coupled
from mlmix.empirical.sampling.sweep import run_sweep, task_key
from mlmix.files import atomic_write_text
from mlmix.theory.sources.conditionals import ScoreTable

TASKS = [{"temperature": T, "length": n, "seed": s} for T in (0.5, 2.0) for n in (2, 3) for s in (0, 1)]


def coupling_task(params: dict) -> dict:
    """Coupling times of 8 pairs on a random score table (module level: picklable for workers)."""
    src = ScoreTable.random(3, params["length"], seed=params["seed"], temperature=params["temperature"])
    rng = np.random.default_rng(params["seed"])
    x0, y0 = rng.integers(0, 3, (2, 8, params["length"]))
    tr = run_coupled(src, x0, y0, 400, seeds=np.arange(8) + 100 * params["seed"])
    return {"coupling_time": tr.coupling_time.tolist()}


def failing_task(params: dict) -> dict:
    if params["seed"] == 1:
        raise RuntimeError("boom")
    return {"ok": params["seed"]}


def test_process_pool_and_dask_cluster_agree(tmp_path):
    local = run_sweep(coupling_task, TASKS, tmp_path / "local", max_workers=1, progress=False)
    direct = [coupling_task(t) for t in TASKS]
    assert local == direct
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        remote = run_sweep(coupling_task, TASKS, tmp_path / "dask", address=cluster.scheduler_address, progress=False)
    assert remote == local
    assert run_sweep(coupling_task, TASKS, tmp_path / "inline", max_workers=0, progress=False) == local
    files = sorted(p.name for p in (tmp_path / "dask").iterdir())
    assert files == sorted(f"{task_key(t)}.json" for t in TASKS)


def test_finished_tasks_are_skipped_on_resume(tmp_path):
    done = TASKS[0]
    atomic_write_text(tmp_path / f"{task_key(done)}.json", json.dumps({"params": done, "result": {"marker": 1}}))
    with ThreadPoolExecutor(2) as ex:
        out = run_sweep(coupling_task, TASKS[:3], tmp_path, executor=ex, progress=False)
    assert out[0] == {"marker": 1}  # not recomputed
    assert out[1:] == [coupling_task(t) for t in TASKS[1:3]]
    atomic_write_text(tmp_path / f"{task_key(TASKS[3])}.json", json.dumps({"params": TASKS[0], "result": {}}))
    with pytest.raises(ValueError, match="another task"):
        run_sweep(coupling_task, TASKS[3:4], tmp_path, executor=ThreadPoolExecutor(1), progress=False)


def test_a_failing_task_does_not_lose_the_others(tmp_path):
    tasks = [{"seed": s} for s in range(3)]
    with pytest.raises(RuntimeError, match="seed=1.*boom"):
        run_sweep(failing_task, tasks, tmp_path, executor=ThreadPoolExecutor(2), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{task_key(t)}.json" for t in (tasks[0], tasks[2]))
    with pytest.raises(ValueError, match="twice"):
        run_sweep(failing_task, [tasks[0], tasks[0]], tmp_path, executor=ThreadPoolExecutor(1), progress=False)


def test_write_atomic_leaves_no_temporary_files(tmp_path):
    atomic_write_text(tmp_path / "a" / "r.json", "1")
    atomic_write_text(tmp_path / "a" / "r.json", "2")
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["r.json"]
    assert (tmp_path / "a" / "r.json").read_text() == "2"
