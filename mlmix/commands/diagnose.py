"""``mlmix diagnose``: R-hat, ESS, MCSE and an L-lag coupling bound of simulated chains, next to the
exact truth of the same chain (:mod:`mlmix.empirical.sampling.convergence`).

Examples::

    mlmix diagnose --model ising --graph complete:6 --beta 0.8 --field 0.05 --chains 4 --steps 2000 \\
        --start "0 0 0 0 0 0" --function magnetization --function count:1
    mlmix diagnose --model scores --vocab 3 --length 5 --temperature 0.5 --kernel glauber --json
    mlmix diagnose --model clique --length 6 --kernel k-gibbs --k 2 --function site:0=1
    mlmix diagnose --mlm ./antiberty --frame "E V Q _ _ _ S G" --candidates "A C D" --temperature 0.5
    mlmix diagnose --model ising --graph cycle:6 --beta 0.8 --draws my_draws.npz --function count:1

The source options are those of ``mlmix exact`` (its ``--seed``, the seed of random scores or Potts
couplings, is ``--source-seed`` here; ``--seed`` seeds the chains). Glauber chains are simulated
through the source's conditionals (one batched query per step for all chains); other kernels from
their assembled matrix. An MLM frame is simulated on its tabulated (cached) conditionals, the same
table the exact side analyses.

``--draws FILE`` diagnoses a user's own draws instead of simulating: an ``.npz`` with an integer array
``states`` of shape (chains, steps, n) in mlmix's state encoding (or an ArviZ InferenceData netCDF with
the posterior variable ``states``, when arviz is installed). The start law is the draws' first states; a
transition of probability zero under the chain is refused (the sampler is not the chain it claims); the
simulation options (--chains, --steps, --start, --seed, --lag, --pairs, --coupling-steps) are refused with it.
"""

from __future__ import annotations

import argparse

from mlmix.commands.source_options import add_source_arguments, build_chain, exact_inputs, validate_source
from mlmix.files import dumps_json
from mlmix.validation import check_int


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix diagnose``: the source options of ``mlmix exact`` and the run's own."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Examples::", 1)[1]
    add_source_arguments(parser, seed_flag="--source-seed")
    run = parser.add_argument_group("chains and diagnostics")
    run.add_argument("--draws", metavar="FILE", default=None,
                     help="diagnose these draws (.npz with an integer array 'states' (chains, steps, n), or an "
                          "InferenceData .nc) instead of simulating")
    run.add_argument("--chains", type=int, default=None, help="number of chains m (default 4)")
    run.add_argument("--steps", type=int, default=None, help="steps N per chain (default 1000)")
    run.add_argument("--warmup", type=int, default=0, help="steps left out of the diagnostics (default 0)")
    run.add_argument("--start", default=None,
                     help="start law: uniform (default) or a state \"s_1 ... s_n\" (symbols or alphabet tokens)")
    run.add_argument("--function", action="append", default=None, metavar="F",
                     help="test function (repeatable): magnetization (default), count:SYMBOL, site:I=SYMBOL, "
                          "logpi")
    run.add_argument("--seed", dest="chain_seed", type=int, default=None, help="seed of the chains (default 0)")
    run.add_argument("--lag", type=int, default=None, help="lag L of the coupling bound (default N // 4)")
    run.add_argument("--pairs", type=int, default=None, help="coupled pairs (default max(m, 16))")
    run.add_argument("--coupling-steps", type=int, default=None,
                     help="coupled steps allowed per pair before it counts as not met (default 10 N)")
    run.add_argument("--no-metastable", action="store_true", help="skip the metastable sets")
    run.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Simulate, diagnose, compare; print a table (or JSON)."""
    # deferred: torch loads only when the command runs
    from mlmix.empirical.sampling.convergence import diagnose, read_draws

    validate_source(args)
    for name in ("chains", "steps", "warmup"):
        if getattr(args, name) is not None:
            check_int(getattr(args, name), f"--{name}", minimum=0)
    if args.matrix is not None:
        raise ValueError("--matrix: diagnose needs a source over V^n (its test functions are functions of "
                         "sequences); use a built-in source or --mlm")
    simulation = {"--chains": args.chains, "--steps": args.steps, "--start": args.start, "--seed": args.chain_seed,
                  "--lag": args.lag, "--pairs": args.pairs, "--coupling-steps": args.coupling_steps}
    draws = None
    if args.draws is not None:
        given = [flag for flag, value in simulation.items() if value is not None]
        if given:
            raise ValueError(f"--draws: {', '.join(given)} configure the simulation, which --draws replaces")
        draws = read_draws(args.draws)
    chain, title, source = build_chain(args)
    functions = args.function or ["magnetization"]
    inputs = {"chain": title, **_source_inputs(args, source)}
    if draws is not None:
        inputs["draws_file"] = args.draws
    report = diagnose(chain, source, draws=draws, chains=args.chains, steps=args.steps, start=args.start,
                      functions=functions, seed=args.chain_seed, lag=args.lag, pairs=args.pairs,
                      coupling_budget=args.coupling_steps, warmup=args.warmup, metastable=not args.no_metastable,
                      tokens=getattr(source, "tokens", None), kernel=args.kernel, inputs=inputs)
    print(dumps_json(report) if args.json else format_report(report))
    return 0


def _num(v: object, fmt: str = ".4g") -> str:
    return "-" if v is None else format(v, fmt) if isinstance(v, (int, float)) else str(v)


def _interval(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("value") is not None:
        return _num(r["value"])
    if r.get("lower") is None and r.get("upper") is None:
        return f"not available ({r.get('reason')})"
    return f"[{_num(r.get('lower'))}, {_num(r.get('upper'))}] (not resolved)"


def format_report(rep: dict) -> str:
    """The diagnostics beside the exact values, the verdicts, the coupling bound and the metastable sets."""
    inp, ex, cp = rep["inputs"], rep["exact"], rep["coupling"]
    N = inp["steps"]
    origin = (f"supplied draws ({inp['draws_file']})" if inp.get("draws_file")
              else "supplied draws" if inp.get("draws") == "supplied" else f"seed {inp.get('seed')}")
    lines = [inp.get("chain", ""), f"{inp['chains']} chains x {N} steps from {inp['start']} "
             f"(warm-up {inp['warmup']}), {origin}", ""]
    d = ex.get("d_start")
    lines.append(f"exact: t_mix(1/4) worst start = {_interval(ex['t_mix'])}, spectral gap = "
                 f"{_interval(ex['spectral_gap'])}")
    if d is not None:
        t_q = next((t for t, v in enumerate(d) if v <= 0.25), None)
        err = ex.get("d_start_abs_error") or 0.0
        at = lambda v: f"<= {err:.1g} (below the rounding bound)" if v <= err else f"{v:.4g}"  # noqa: E731
        lines.append(f"exact: d_start(t) from the start law: d(0) = {at(d[0])}, d(N/2) = {at(d[N // 2])}, "
                     f"d(N) = {at(d[-1])}; first t with d <= 1/4: {_num(t_q)}")
    else:
        lines.append(f"exact: {ex.get('reason')}")
    lines += ["", f"{'function':<16}{'':>6}{'mean':>11}{'R-hat':>9}{'ESS bulk':>10}{'ESS tail':>10}{'MCSE':>10}"]
    for f, dg in rep["diagnostics"].items():
        lines.append(f"{f:<16}{'sample':>6}{_num(dg['mean']):>11}{_num(dg['rhat']):>9}{_num(dg['ess_bulk']):>10}"
                     f"{_num(dg['ess_tail']):>10}{_num(dg['mcse']):>10}")
        if f in ex.get("mean", {}):
            se = None
            s2 = ex["sigma2"].get(f)
            if s2 is not None and s2.get("value") is not None:
                se = (s2["value"] / (inp["chains"] * inp["kept_per_chain"])) ** 0.5
            tail = (ex.get("ess_tail") or {}).get(f) or {}
            lines.append(f"{'':<16}{'exact':>6}{_num(ex['mean'][f]):>11}{'':>9}{_num(ex['ess'].get(f)):>10}"
                         f"{_num(tail.get('value')):>10}{_num(se):>10}")
    lines += ["", "verdicts:"]
    for f, vs in rep["verdicts"].items():
        if f in ("coupling", "gap"):
            continue
        parts = [f"{k} {v.get('verdict') or 'undetermined'}" for k, v in vs.items()]
        lines.append(f"  {f}: " + ", ".join(parts))
        rv = vs["rhat"]
        if rv.get("says"):
            lines.append(f"    R-hat: {rv['says']}; exact {rv['truth']}")
        elif rv.get("reason"):
            lines.append(f"    R-hat: {rv['reason']}")
    cv = rep["verdicts"]["coupling"]
    ub = cp["upper_bound"]
    lines += ["", (f"L-lag coupling (L = {cp['lag']}, {cp['pairs']} pairs): " if cp["lag"] is not None
                   else "L-lag coupling: ")
              + (f"bound d(N/2) <= {ub[N // 2]:.3g}, d(N) <= {ub[-1]:.3g}; first t with bound <= 1/4: "
                 f"{_num(cv.get('bound_time_to_quarter'))} (exact {_num(cv.get('exact_time_to_quarter'))}): "
                 f"{cv.get('verdict') or 'undetermined'}" if ub is not None else cp["reason"])]
    g, gv = rep["gap_estimate"], rep["verdicts"]["gap"]
    lines.append(f"absolute spectral gap from the paths (point estimate, {g['visited_states']} states visited): "
                 f"{_num(g['value'])} vs exact {_interval(ex['absolute_spectral_gap'])}: "
                 f"{gv.get('verdict') or 'undetermined'}")
    if rep.get("metastable"):
        lines += ["", "metastable sets of the exact chain (PCCA, slow eigenvectors):"]
        for k, s in enumerate(rep["metastable"]):
            if "reason" in s:
                lines.append(f"  {s['reason']}")
                continue
            lines.append(f"  set {k}: {s['states']} states, pi = {s['mass']:.4g}, mean exit time {s['exit_time']:.4g}"
                         f", e.g. {' '.join(map(str, s['example']))}; visited by {s['chains_visiting']} of "
                         f"{inp['chains']} chains" + ("" if s["visited"] else "  <- NO CHAIN VISITED IT"))
    return "\n".join(lines)


def _source_inputs(args: argparse.Namespace, source) -> dict:
    """The source's structured inputs as ``mlmix exact`` records them, its seed as ``source_seed`` (the
    report's ``seed`` seeds the chains)."""
    given = exact_inputs(args, source)
    given["source_seed"] = given.pop("seed", None)
    return given
