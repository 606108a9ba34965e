"""Many random-scan Glauber chains at once, and coupled pairs of chains (paper G, sections 3.2, 6.1).

One Glauber step of every chain b (paper G, section 3.2):

    i_b ~ Uniform(free sites),   x_b[i_b] ~ pi_{i_b}^T( . | x_b[-i_b] ),

with the conditionals of all chains queried in ONE batched call (one site per row). Sites in an
optional fixed prefix ``x[:prefix]`` are never chosen, so the prefix never changes (paper G,
appendix C.4); the kernel on the remaining sites is P_T with n replaced by n - prefix.

Randomness. Chain b owns a numpy ``Generator(PCG64(seed_b))`` and consumes a fixed number of
uniforms per step (site, then symbol by inverse CDF). Its trajectory therefore depends only on its
seed, its start and the source, never on which other chains share the batch, and the stream does
not depend on how steps are grouped into records.

Coupled pairs (the coupling of Theorem 5's proof): both chains update the same site and draw the
new symbols from a maximal coupling of p = pi_i(.|x_{-i}) and q = pi_i(.|y_{-i}): with probability
1 - TV(p, q) one symbol from min(p, q) / (1 - TV), otherwise each from its normalised residual
(p - min(p, q)) / TV and (q - min(p, q)) / TV. Each marginal is exactly p (resp. q). When
x_{-i} = y_{-i} the two conditionals are the same (one query), so a pair that has met never separates.

Recording. Every ``record_every`` steps the states (and optionally decoded text) and every
generator's state go to an append-only JSONL file (a header line, then one line per record). A run
killed midway resumes from its last complete record and continues with the same random streams, so
the finished file equals that of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from mlmix.files import append_text, dumps_json, truncate_file
from mlmix.theory.sources.conditionals import Conditionals
from mlmix.validation import check_int

#: ``coupling_time`` of a pair that did not meet within the step budget.
NOT_COUPLED = -1
FORMAT_VERSION = 1
_PLAIN_DRAWS = 2  # site, symbol
_COUPLED_DRAWS = 4  # site, overlap-or-residual, symbol of x, symbol of y

Decoder = Callable[[np.ndarray], list[str]]


# --------------------------------------------------------------------------- sampling (one implementation)

def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Row-wise inverse-CDF sampling: the smallest k with u * sum(p) < p_0 + ... + p_k.

    ``probs`` (B, |V|) non-negative, unnormalised allowed, each row with positive mass; ``u`` (B,)
    uniforms in [0, 1). A symbol of zero probability is never returned.
    """
    cdf = probs.cumsum(dim=-1)
    target = (u.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    last_positive = probs.shape[-1] - 1 - torch.argmax(torch.flip(probs > 0, dims=(-1,)).to(torch.int8), dim=-1)
    return torch.minimum(idx, last_positive)


def maximal_coupling(p: torch.Tensor, q: torch.Tensor, u_choice: torch.Tensor, u_x: torch.Tensor,
                     u_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One draw (X, Y) per row from a maximal coupling of the rows of ``p`` and ``q`` (B, |V|):

        P(X = Y) = sum_v min(p_v, q_v) = 1 - TV(p, q),   X ~ p,   Y ~ q.
    """
    overlap = torch.minimum(p, q)
    agree = u_choice.to(p.dtype) < overlap.sum(dim=-1)
    res_p, res_q = (p - overlap).clamp_min(0), (q - overlap).clamp_min(0)
    # rounding can leave a residual without mass; the overlap is then the whole law
    res_p = torch.where((res_p.sum(-1, keepdim=True) > 0), res_p, overlap)
    res_q = torch.where((res_q.sum(-1, keepdim=True) > 0), res_q, overlap)
    x = inverse_cdf(torch.where(agree.unsqueeze(-1), overlap, res_p), u_x)
    y = torch.where(agree, x, inverse_cdf(res_q, u_y))
    return x, y


# --------------------------------------------------------------------------- queries

def _log_conditionals(source: Conditionals, states: torch.Tensor, sites: torch.Tensor) -> torch.Tensor:
    """log pi_{sites[b]}^T( . | states[b]) as float64 (B, |V|) on the states' device.

    Sources with a torch path (``log_conditionals_torch``, e.g. :class:`mlmix.empirical.models.mlm.MaskedLMConditionals`)
    are queried on their device without leaving it, with ``validate=False``: the chain's states and
    sites are valid by construction, and the range checks would cost host-device synchronisations
    on every step; others through the numpy interface.
    """
    fast = getattr(source, "log_conditionals_torch", None)
    if fast is not None:
        return fast(states, sites, validate=False).to(torch.float64)
    out = source.log_conditionals(states.cpu().numpy(), sites.cpu().numpy())
    return torch.from_numpy(np.asarray(out, dtype=np.float64)).to(states.device)


def source_device(source: Conditionals) -> torch.device:
    """The device a source computes on (``source.device`` for MLMs, else the CPU)."""
    return torch.device(getattr(source, "device", "cpu"))


def _position(gen: np.random.Generator) -> int:
    """The 128-bit PCG64 state of a chain's generator: with its seed (which fixes the stream's
    increment) it is the whole generator state, since only whole doubles are ever drawn."""
    full = gen.bit_generator.state
    assert not full["has_uint32"], "chains draw doubles only"
    return int(full["state"]["state"])


def _set_position(gen: np.random.Generator, position: int) -> None:
    full = gen.bit_generator.state
    full["state"]["state"] = int(position)
    gen.bit_generator.state = full


# --------------------------------------------------------------------------- results

@dataclass
class Trajectory:
    """Recorded states of B chains: ``states[r, b]`` is chain b after ``steps[r]`` Glauber steps."""

    steps: np.ndarray  # (R,)
    states: np.ndarray  # (R, B, n)
    seeds: np.ndarray  # (B,)
    prefix: int
    texts: list[list[str]] | None = None  # texts[r][b] when a decoder was given


@dataclass
class CoupledTrajectory(Trajectory):
    """Coupled pairs: ``states`` are the x chains, ``states_y`` the y chains (same shape).

    ``coupling_time[b]`` is the first step after which x_b = y_b at every site (0 if they start
    equal), or :data:`NOT_COUPLED` if they had not met by the last step run.
    """

    states_y: np.ndarray | None = None
    coupling_time: np.ndarray | None = None
    texts_y: list[list[str]] | None = None


# --------------------------------------------------------------------------- the runner

class _Chains:
    """State of a batch of (possibly coupled) chains plus their generators and record file."""

    def __init__(self, source: Conditionals, x0: np.ndarray, y0: np.ndarray | None, seeds: Sequence[int] | None,
                 prefix: int, record_every: int, path: str | os.PathLike | None, decode: Decoder | None) -> None:
        if not isinstance(source, Conditionals):
            raise TypeError(f"source must be a Conditionals, got {type(source).__name__}")
        self.source = source
        n, q = source.space.length, source.space.vocab_size
        x0 = np.ascontiguousarray(source.check_contexts(np.asarray(x0)), dtype=np.int64)
        if y0 is not None:
            y0 = np.ascontiguousarray(source.check_contexts(np.asarray(y0)), dtype=np.int64)
            if y0.shape != x0.shape:
                raise ValueError(f"initial states of the two chains differ in shape: {x0.shape} vs {y0.shape}")
        prefix = check_int(prefix, "prefix", minimum=0, maximum=n - 1)
        if y0 is not None and not np.array_equal(x0[:, :prefix], y0[:, :prefix]):
            raise ValueError("coupled chains must share the fixed prefix")
        record_every = check_int(record_every, "record_every", minimum=1)
        B = x0.shape[0]
        if B == 0:
            raise ValueError("at least one chain is required")
        seeds = np.arange(B, dtype=np.int64) if seeds is None else np.asarray(seeds)
        if seeds.shape != (B,) or not np.issubdtype(seeds.dtype, np.integer) or (seeds < 0).any():
            raise ValueError(f"seeds must be {B} non-negative integers (one per chain or pair)")
        self.n, self.q, self.B, self.prefix = n, q, B, int(prefix)
        self.coupled = y0 is not None
        self.draws = _COUPLED_DRAWS if self.coupled else _PLAIN_DRAWS
        self.seeds = seeds.astype(np.int64)
        self.record_every = int(record_every)
        self.decode = decode
        self.device = source_device(source)
        self.header = {
            "format": "mlmix-glauber-chains", "version": FORMAT_VERSION, "coupled": self.coupled,
            "source": type(source).__name__, "source_name": getattr(source, "name", None), "vocab_size": q,
            "length": n,
            "temperature": source.temperature, "prefix": self.prefix, "record_every": self.record_every,
            "seeds": self.seeds.tolist(), "x0": x0.tolist(), "y0": None if y0 is None else y0.tolist(),
        }
        self.records: list[dict] = []
        self.path = None if path is None else Path(path)
        self.step = 0
        self.gens = [np.random.Generator(np.random.PCG64(int(s))) for s in self.seeds]
        self.x = torch.tensor(x0, dtype=torch.long, device=self.device)
        self.y = None if y0 is None else torch.tensor(y0, dtype=torch.long, device=self.device)
        self.met = None
        if self.coupled:
            self.met = np.where((x0 == y0).all(axis=1), 0, NOT_COUPLED).astype(np.int64)
        if self.path is not None and self.path.exists() and self.path.stat().st_size > 0:
            self._resume()
        else:
            self._record(write_header=True)

    # -- file handling
    def _record(self, write_header: bool = False) -> None:
        rec = {"step": self.step, "x": self.x.cpu().numpy().copy()}  # (a CPU tensor shares its memory)
        if self.decode is not None:
            rec["text_x"] = list(self.decode(rec["x"]))
        if self.coupled:
            rec["y"] = self.y.cpu().numpy().copy()
            rec["coupling_time"] = self.met.copy()
            if self.decode is not None:
                rec["text_y"] = list(self.decode(rec["y"]))
        self.records.append(rec)  # arrays in memory; the generator positions only go to the file
        if self.path is None:
            return
        line = {**{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in rec.items()},
                "rng": [_position(g) for g in self.gens]}
        lines = ([dumps_json(self.header, indent=None)] if write_header else []) + [dumps_json(line, indent=None)]
        append_text(self.path, "\n".join(lines) + "\n")

    def _resume(self) -> None:
        raw = self.path.read_bytes()
        lines, good_end = _read_complete_lines(raw)
        if good_end < len(raw):
            truncate_file(self.path, good_end)
        if not lines:
            self.path.unlink()
            self._record(write_header=True)
            return
        header, records = lines[0], lines[1:]
        expected = json.loads(json.dumps(self.header))
        if header != expected:
            diff = sorted(k for k in set(header) | set(expected) if header.get(k) != expected.get(k))
            raise ValueError(f"{self.path} records a different run (it differs in {diff}); use another path")
        if not records:
            self._record()
            return
        self.records = [_arrays(r) for r in records]
        last = self.records[-1]
        self.step = int(last["step"])
        self.x = torch.as_tensor(last["x"], dtype=torch.long, device=self.device).clone()
        if self.coupled:
            self.y = torch.as_tensor(last["y"], dtype=torch.long, device=self.device).clone()
            self.met = last["coupling_time"].copy()
        for g, position in zip(self.gens, records[-1]["rng"]):
            _set_position(g, position)

    # -- dynamics
    def _uniforms(self, steps: int) -> torch.Tensor:
        u = np.stack([g.random((steps, self.draws)) for g in self.gens], axis=1)  # (steps, B, draws)
        return torch.from_numpy(u).to(self.device)

    def _sites(self, u: torch.Tensor) -> torch.Tensor:
        free = self.n - self.prefix
        return self.prefix + torch.clamp((u * free).long(), max=free - 1)

    def _plain_step(self, u: torch.Tensor) -> None:
        sites = self._sites(u[:, 0])
        p = torch.exp(_log_conditionals(self.source, self.x, sites))
        self.x[torch.arange(self.B, device=self.device), sites] = inverse_cdf(p, u[:, 1])

    def _coupled_step(self, u: torch.Tensor) -> None:
        rows = torch.arange(self.B, device=self.device)
        sites = self._sites(u[:, 0])
        differ = self.x != self.y
        differ[rows, sites] = False
        # only these y contexts differ from x's: the others share x's conditional (one sync for the indices)
        need_y = differ.any(dim=1).nonzero().squeeze(1)
        logp = _log_conditionals(self.source, torch.cat([self.x, self.y[need_y]]), torch.cat([sites, sites[need_y]]))
        p = torch.exp(logp[:self.B])
        q = p.clone()
        q[need_y] = torch.exp(logp[self.B:])
        new_x, new_y = maximal_coupling(p, q, u[:, 1], u[:, 2], u[:, 3])
        self.x[rows, sites] = new_x
        self.y[rows, sites] = new_y
        now = (self.x == self.y).all(dim=1).cpu().numpy()
        self.met[(self.met == NOT_COUPLED) & now] = self.step + 1

    def run(self, steps: int, stop_when_coupled: bool, progress: bool) -> None:
        steps = check_int(steps, "steps", minimum=0)
        done = lambda: self.coupled and stop_when_coupled and bool((self.met != NOT_COUPLED).all())  # noqa: E731
        bar = tqdm(total=steps, initial=min(self.step, steps), disable=not progress, desc="glauber", unit="step")
        with torch.no_grad(), bar:
            while self.step < steps and not done():
                chunk = min(steps, (self.step // self.record_every + 1) * self.record_every) - self.step
                before = [_position(g) for g in self.gens]
                u = self._uniforms(chunk)
                for s in range(chunk):
                    (self._coupled_step if self.coupled else self._plain_step)(u[s])
                    self.step += 1
                    bar.update(1)
                    if done() and s + 1 < chunk:  # stop early: leave the generators after step s exactly
                        for g, position in zip(self.gens, before):
                            _set_position(g, position)
                        self._uniforms(s + 1)
                        break
                self._record()

    def result(self) -> Trajectory | CoupledTrajectory:
        return _trajectory(json.loads(json.dumps(self.header)), self.records)


def _arrays(record: dict) -> dict:
    """A record read from the file with its states as int64 arrays and without generator positions."""
    out = {k: v for k, v in record.items() if k != "rng"}
    for key in ("x", "y", "coupling_time"):
        if key in out:
            out[key] = np.asarray(out[key], dtype=np.int64)
    return out


def _trajectory(header: dict, records: list[dict]) -> Trajectory | CoupledTrajectory:
    """Assemble a trajectory from a header and its records (the JSONL lines)."""
    B, n = len(header["seeds"]), header["length"]
    steps = np.array([r["step"] for r in records], dtype=np.int64)
    xs = np.array([r["x"] for r in records], dtype=np.int64).reshape(len(records), B, n)
    texts = [r["text_x"] for r in records] if records and all("text_x" in r for r in records) else None
    seeds = np.asarray(header["seeds"], dtype=np.int64)
    if not header["coupled"]:
        return Trajectory(steps, xs, seeds, header["prefix"], texts)
    ys = np.array([r["y"] for r in records], dtype=np.int64).reshape(xs.shape)
    met = np.array(records[-1]["coupling_time"] if records else [NOT_COUPLED] * B, dtype=np.int64)
    texts_y = [r["text_y"] for r in records] if texts is not None else None
    return CoupledTrajectory(steps, xs, seeds, header["prefix"], texts, states_y=ys, coupling_time=met,
                             texts_y=texts_y)


def run_chains(source: Conditionals, initial: np.ndarray, steps: int, *, seeds: Sequence[int] | None = None,
               prefix: int = 0, record_every: int = 1, path: str | os.PathLike | None = None,
               decode: Decoder | None = None, progress: bool = False) -> Trajectory:
    """Run B Glauber chains from ``initial`` (B, n) for ``steps`` steps each; see the module docstring.

    ``seeds`` (one per chain, default 0..B-1) fix each chain's random stream. With ``path`` the
    records go to that JSONL file; if it already holds records of the same run (same source type,
    temperature, starts, seeds, prefix, record_every) the run resumes from the last one, and a
    larger ``steps`` extends a finished run. ``decode`` maps states (B, n) to texts to store beside
    them. Returns every record (step 0, every ``record_every`` steps, and the last step).
    """
    chains = _Chains(source, initial, None, seeds, prefix, record_every, path, decode)
    chains.run(steps, stop_when_coupled=False, progress=progress)
    return chains.result()


def run_coupled(source: Conditionals, x0: np.ndarray, y0: np.ndarray, steps: int, *,
                seeds: Sequence[int] | None = None, prefix: int = 0, record_every: int = 1,
                path: str | os.PathLike | None = None, decode: Decoder | None = None,
                stop_when_coupled: bool = True, progress: bool = False) -> CoupledTrajectory:
    """Run B coupled pairs (x0[b], y0[b]) for up to ``steps`` steps: same site in both chains and a
    maximal coupling of the two conditionals (Theorem 5's coupling); ``coupling_time[b]`` is the
    first step at which the pair agrees everywhere (:data:`NOT_COUPLED` if not within the budget).

    With ``stop_when_coupled`` the run ends as soon as every pair has met (coupling times do not
    depend on it). Recording, resuming and ``seeds`` (one per pair) work as in :func:`run_chains`.
    """
    chains = _Chains(source, x0, y0, seeds, prefix, record_every, path, decode)
    chains.run(steps, stop_when_coupled=stop_when_coupled, progress=progress)
    return chains.result()


def load_trajectory(path: str | os.PathLike) -> Trajectory | CoupledTrajectory:
    """Read a record file written by :func:`run_chains` or :func:`run_coupled` (complete lines only)."""
    lines = _read_complete_lines(Path(path).read_bytes())[0]
    if not lines or lines[0].get("format") != "mlmix-glauber-chains":
        raise ValueError(f"{path} is not a Glauber chain record file")
    return _trajectory(lines[0], [_arrays(r) for r in lines[1:]])


def _read_complete_lines(raw: bytes) -> tuple[list[dict], int]:
    """Parsed JSON lines up to the first incomplete or corrupt one, and the byte length they span."""
    good_end, lines = 0, []
    for line in raw.split(b"\n")[:-1]:  # a last line without its newline was cut by an interruption
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good_end += len(line) + 1
    return lines, good_end
