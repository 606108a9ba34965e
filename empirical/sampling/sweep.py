"""Sweeps as independent tasks through a ``concurrent.futures`` executor (no scheduler of our own).

A sweep is a list of parameter dicts (temperature x length x model x seed, ...) and one picklable
module-level function ``fn(params) -> JSON-serialisable dict``. Each finished task is written
atomically to ``out_dir/<key>.json`` (``{"params": ..., "result": ...}``); a rerun skips every task
whose file exists, so an interrupted sweep resumes where it stopped.

Executors: local processes by default (``spawn`` start method, safe with torch and CUDA), or a
Dask distributed cluster when an address is given (``Client(address).get_executor()``), or any
``concurrent.futures.Executor`` the caller passes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from tqdm.auto import tqdm

from mlmix.files import atomic_write_text, dumps_json

Task = Mapping[str, Any]


def task_key(params: Task) -> str:
    """A file-name-safe key that identifies a parameter dict: readable part plus a content hash."""
    canonical = json.dumps(params, sort_keys=True, default=str)
    readable = "_".join(f"{k}={params[k]}" for k in sorted(params))
    readable = re.sub(r"[^A-Za-z0-9=._-]+", "-", readable)[:80]
    return f"{readable}_{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"


@contextmanager
def sweep_executor(address: str | None = None, max_workers: int | None = None) -> Iterator[Executor]:
    """Local process pool (``address`` None) or the executor of the Dask scheduler at ``address``."""
    if address is None:
        with ProcessPoolExecutor(max_workers=max_workers, mp_context=multiprocessing.get_context("spawn")) as ex:
            yield ex
        return
    try:
        # deferred: dask is optional (the test extra), needed only for a cluster sweep
        from dask.distributed import Client
    except ImportError as err:  # optional dependency
        raise ImportError("a cluster address needs dask.distributed (pip install 'dask[distributed]')") from err
    with Client(address) as client:
        yield client.get_executor()


def run_sweep(fn: Callable[[dict], dict], tasks: Sequence[Task], out_dir: str | os.PathLike, *,
              executor: Executor | None = None, address: str | None = None, max_workers: int | None = None,
              progress: bool = True) -> list[dict]:
    """Run ``fn`` on every task not finished in ``out_dir``; return the results in task order.

    ``executor`` (any ``concurrent.futures.Executor``) wins over ``address``/``max_workers``;
    ``max_workers=0`` without an address runs the tasks one by one in this process. A task
    that raises does not stop the others: they finish and are saved, then the first error is
    raised naming its task.
    """
    out = Path(out_dir)
    params = [dict(t) for t in tasks]
    keys = [task_key(p) for p in params]
    if len(set(keys)) != len(keys):
        raise ValueError("the sweep lists the same task twice")
    results: dict[str, dict] = {}
    for p, k in zip(params, keys):
        f = out / f"{k}.json"
        if f.exists():
            saved = json.loads(f.read_text(encoding="utf-8"))
            if saved.get("params") != json.loads(json.dumps(p, default=str)):
                raise ValueError(f"{f} holds another task's result")
            results[k] = saved["result"]
    todo = [(p, k) for p, k in zip(params, keys) if k not in results]
    if todo:
        if executor is not None:
            _drain(executor, fn, todo, out, results, progress)
        elif max_workers == 0 and address is None:
            _drain(None, fn, todo, out, results, progress)
        else:
            with sweep_executor(address, max_workers) as ex:
                _drain(ex, fn, todo, out, results, progress)
    return [results[k] for k in keys]


def _drain(ex: Executor | None, fn: Callable, todo: list[tuple[dict, str]], out: Path, results: dict,
           progress: bool) -> None:
    """Run the tasks (in this process, one by one, when ``ex`` is None), saving each as it finishes."""
    if ex is None:
        outcomes: Iterator = ((p, k, _call(fn, p)) for p, k in todo)
    else:
        futures: dict[Future, tuple[dict, str]] = {ex.submit(fn, p): (p, k) for p, k in todo}
        outcomes = ((*futures[f], _outcome(f)) for f in as_completed(futures))
    errors = []
    for p, k, (res, err) in tqdm(outcomes, total=len(todo), disable=not progress, desc="sweep", unit="task"):
        if err is not None:  # keep the others running; report after
            errors.append((k, err))
            continue
        text = dumps_json({"params": p, "result": res}, indent=None)
        atomic_write_text(out / f"{k}.json", text)
        results[k] = json.loads(text)["result"]
    if errors:
        key, err = errors[0]
        message = f"{len(errors)} sweep task(s) failed; first {key}: {err}"
        if all(isinstance(e, (ValueError, TypeError)) for _, e in errors):  # bad input: a one-line error
            raise type(err)(message) from err
        raise RuntimeError(message) from err


def _call(fn: Callable, params: dict) -> tuple[Any, Exception | None]:
    try:
        return fn(params), None
    except Exception as err:  # reported by _drain with the task's key
        return None, err


def _outcome(fut: Future) -> tuple[Any, Exception | None]:
    try:
        return fut.result(), None
    except Exception as err:  # reported by _drain with the task's key
        return None, err
