"""Convergence diagnostics held against the exact truth on MLM and toy chains (docs/diagnostics.md).

For each case (a source and a start, given as the source options of ``mlmix diagnose``), m chains
run N steps; on the prefixes N' = 50, 100, 200, ... of the same runs the rank-normalised split
R-hat and the bulk ESS of each test function (arviz-stats) are set against the exact distance
d_mu(N') of the chain's law from the stationary law and the exact ESS m N' Var_pi(f) / sigma^2(f)
(:mod:`mlmix.empirical.sampling.convergence`); the full ``mlmix diagnose`` report at N (verdicts, coupling
bound, metastable sets) goes beside them. A "trap" row is one where R-hat < 1.01 while d_mu > 0.9.

    mlmix run diagnostics --out runs/diagnostics
    mlmix run diagnostics --out runs/diagnostics --antiberty ~/.cache/mlmix/antiberty-0.1.3-converted/model

Cases: the shipped model (n = 5), a metastable Ising chain from a trap and from the uniform law,
the same Ising chain under 2-Gibbs, a score table at T = 0.3, and with ``--antiberty`` AntiBERTy's
frame "E V Q L V E S G G G _ _ _" at T = 1 and 0.5. Writes diagnostics.json (one report per case),
diagnostics.csv (one row per case, function and N') and diagnostics.png.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import numpy as np

from mlmix.commands.options import set_threads
from mlmix.commands.source_options import add_source_arguments, build_chain, validate_source
from mlmix.empirical.models.mlm import DEFAULT_MODEL_DIR
from mlmix.empirical.sampling.convergence import (
    MIXED,
    RHAT_CONVERGED,
    diagnose,
    library_diagnostics,
    parse_function,
    parse_start,
    simulate,
)
from mlmix.files import read_json
from mlmix.plot_style import legend, pyplot
from mlmix.runs.common import save_figure, write_csv, write_json

#: One line for ``mlmix run --list``.
DESCRIPTION = "R-hat and ESS over N against the exact d(t) and ESS: shipped model, Ising traps, score table, AntiBERTy"

#: Trap: R-hat says converged while the chain's law is still this far from pi.
TRAP_DISTANCE = 0.9

AA = "A C D E F G H I K L M N P Q R S T V W Y"


def cases(antiberty: str | None) -> list[dict]:
    """The cases: a name, the ``mlmix diagnose`` source options, the start and the test functions."""
    ising = "--model ising --graph complete:8 --beta 0.5 --field 0.3"
    out = [
        {"name": "shipped model, n = 5, T = 1", "source": f"--mlm {DEFAULT_MODEL_DIR} --length 5 --no-progress",
         "start": "uniform", "functions": ["count:!", "site:0=a"]},
        {"name": "Ising K8 (beta 0.5, h 0.3), trap start", "source": ising, "start": " ".join(["0"] * 8),
         "functions": ["magnetization", "logpi"]},
        {"name": "Ising K8 (beta 0.5, h 0.3), uniform start", "source": ising, "start": "uniform",
         "functions": ["magnetization", "logpi"]},
        {"name": "Ising K8, 2-Gibbs, trap start", "source": ising + " --kernel k-gibbs --k 2",
         "start": " ".join(["0"] * 8), "functions": ["magnetization"]},
        {"name": "score table |V| = 3, n = 5, T = 0.3", "source": "--model scores --vocab 3 --length 5 "
         "--temperature 0.3 --source-seed 0", "start": "uniform", "functions": ["count:0", "site:0=1"]},
    ]
    if antiberty is not None:
        for T in (1.0, 0.5):
            out.append({"name": f"AntiBERTy frame L, n = 3, T = {T:g}",
                        "source": f"--mlm {antiberty} --prefix 'E V Q L V E S G G G' --length 3 "
                                  f"--candidates '{AA}' --temperature {T:g} --no-progress",
                        "start": "uniform", "functions": ["count:G", "site:0=L"]})
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder (created; a rerun with the same options resumes)")
    parser.add_argument("--chains", type=int, default=4, help="chains m per case (default 4)")
    parser.add_argument("--steps", type=int, default=4000, help="steps N per chain (default 4000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the chains (default 0)")
    parser.add_argument("--antiberty", default=None, metavar="FOLDER",
                        help="a safetensors copy of AntiBERTy (mlmix convert): adds its n = 3 frame at T = 1 and 0.5")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _source_args(options: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="case")
    add_source_arguments(parser, seed_flag="--source-seed")
    args = parser.parse_args(shlex.split(options))
    validate_source(args)
    return args


def prefixes(steps: int) -> list[int]:
    """50, 100, 200, 500, 1000, ... up to ``steps`` (and ``steps`` itself)."""
    grid = [m * 10**e for e in range(1, 9) for m in (1, 2, 5) if 50 <= m * 10**e < steps]
    return grid + [steps]


def run_case(case: dict, chains: int, steps: int, seed: int) -> dict:
    """The full diagnose report at N and the R-hat / ESS curves over the prefixes."""
    args = _source_args(case["source"])
    chain, title, source = build_chain(args)
    tokens = getattr(source, "tokens", None)
    report = diagnose(chain, source, chains=chains, steps=steps, start=case["start"], functions=case["functions"],
                      seed=seed, tokens=tokens, kernel=args.kernel,
                      inputs={"chain": title, "case": case["name"], "source_options": case["source"]})
    space = source.space
    state = parse_start(case["start"], space.vocab_size, space.length, tokens)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    x0 = rng.integers(0, space.vocab_size, size=(chains, space.length)) if state is None else np.tile(state, (chains, 1))
    states = simulate(source, chain.P, args.kernel, x0, steps, seed + 1, space)
    pi = np.asarray(chain.stationary, dtype=np.float64)
    log_pi = np.asarray(chain.log_stationary, dtype=np.float64)
    all_states = space.all_states()
    d = report["exact"]["d_start"]
    rows = []
    for spec in case["functions"]:
        f = parse_function(spec, space.vocab_size, space.length, tokens)
        fvec = log_pi if f.needs_pi else f.evaluate(all_states)
        draws = (fvec[space.encode(states)] if f.needs_pi else f.evaluate(states))[1:].T  # (m, N)
        var = float(pi @ (fvec - pi @ fvec) ** 2)
        sigma2 = (report["exact"]["sigma2"].get(spec) or {}).get("value")
        for n_prefix in prefixes(steps):
            lib = library_diagnostics(draws[:, :n_prefix])
            exact_ess = chains * n_prefix * var / sigma2 if sigma2 else None
            rhat = lib["rhat"]
            rows.append({"case": case["name"], "function": spec, "N": n_prefix, "rhat": rhat,
                         "ess_bulk": lib["ess_bulk"], "exact_ess": exact_ess, "d_start": d[n_prefix],
                         "mean": lib["mean"], "exact_mean": report["exact"]["mean"][spec],
                         "trap": bool(rhat is not None and rhat < RHAT_CONVERGED and d[n_prefix] > TRAP_DISTANCE)})
    return {"report": report, "curves": rows}


def run(args: argparse.Namespace) -> int:

    set_threads(args.threads)
    out = Path(args.out)
    results = {}
    for case in cases(args.antiberty):
        part = out / "cases" / (case["name"].replace(" ", "_").replace(",", "").replace("|", "")
                                .replace("=", "").replace("(", "").replace(")", "") + ".json")
        if part.exists():  # resumed: this case is done (the run's parameters are locked by mlmix run)
            results[case["name"]] = read_json(part)
            continue
        print(f"mlmix run diagnostics: {case['name']}", flush=True)
        results[case["name"]] = run_case(case, args.chains, args.steps, args.seed)
        write_json(part, results[case["name"]])
    rows = [r for res in results.values() for r in res["curves"]]
    write_csv(out / "diagnostics.csv", rows)
    summary = [summary_row(name, res["report"]) for name, res in results.items()]
    write_json(out / "diagnostics.json", {"summary": summary, "cases": results,
                                          "traps": [r for r in rows if r["trap"]]})
    save_figure(figure(results), out / "diagnostics.png")
    print(format_summary(summary))
    traps = [r for r in rows if r["trap"]]
    print(f"{len(traps)} (case, function, N) rows with R-hat < {RHAT_CONVERGED} while d_mu > {TRAP_DISTANCE}"
          + (": " + "; ".join(f"{r['case']} {r['function']} N={r['N']} R-hat {r['rhat']:.4f} d {r['d_start']:.3f}"
                              for r in traps[:4]) if traps else ""))
    return 0


def summary_row(name: str, rep: dict) -> dict:
    """One line per case and function at the full N: diagnostics, exact values, verdicts."""
    ex, N = rep["exact"], rep["inputs"]["steps"]
    out = []
    for f, dg in rep["diagnostics"].items():
        v = rep["verdicts"][f]
        out.append({"case": name, "function": f, "N": N, "rhat": dg["rhat"], "rhat_verdict": v["rhat"].get("verdict"),
                    "d_start_N": ex["d_start"][-1], "d_start_abs_error": ex["d_start_abs_error"], "ess_bulk": dg["ess_bulk"], "exact_ess": ex["ess"].get(f),
                    "ess_verdict": v["ess_bulk"].get("verdict"), "mean": dg["mean"], "mcse": dg["mcse"],
                    "exact_mean": ex["mean"].get(f), "mcse_verdict": v["mcse"].get("verdict"),
                    "coupling_verdict": rep["verdicts"]["coupling"].get("verdict"),
                    "t_mix": ex["t_mix"].get("value") if ex["t_mix"].get("value") is not None
                    else [ex["t_mix"].get("lower"), ex["t_mix"].get("upper")],
                    "unvisited_mass": sum(s["mass"] for s in rep["metastable"] or [] if not s.get("visited", True))})
    return out


def _n(v, fmt=".3g") -> str:
    return "-" if v is None else format(v, fmt) if isinstance(v, (int, float)) else str(v)


def format_summary(summary: list[list[dict]]) -> str:
    """A markdown table of the summary rows."""
    head = ("| case | f | N | R-hat | d_mu(N) | R-hat verdict | ESS bulk | exact ESS | ESS verdict | mean +- MCSE | "
            "exact mean | coupling | t_mix | unvisited pi |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for rows in summary:
        for r in rows:
            d = r["d_start_N"]
            d = f"<= {r['d_start_abs_error']:.0e} (rounding)" if d <= r["d_start_abs_error"] else _n(d)
            lines.append(f"| {r['case'].replace('|', chr(92) + '|')} | {r['function']} | {r['N']} | {_n(r['rhat'], '.4f')} | {d} | "
                         f"{r['rhat_verdict']} | {_n(r['ess_bulk'])} | {_n(r['exact_ess'])} | {r['ess_verdict']} | "
                         f"{_n(r['mean'], '.4g')} +- {_n(r['mcse'], '.2g')} | {_n(r['exact_mean'], '.4g')} | "
                         f"{r['coupling_verdict']} | {_n(r['t_mix'])} | {_n(r['unvisited_mass'])} |")
    return "\n".join(lines)


def figure(results: dict):
    """Per case: R-hat over N with the exact d_mu(N) on a second axis (left), ESS bulk and exact ESS
    over N (right); every axis labelled, legends beside the panels."""
    plt = pyplot()
    k = len(results)
    fig, axes = plt.subplots(k, 2, figsize=(13, 2.8 * k), squeeze=False, layout="constrained")
    for row, (name, res) in enumerate(results.items()):
        ax_r, ax_e = axes[row]
        curves = res["curves"]
        for f in dict.fromkeys(r["function"] for r in curves):
            rs = [r for r in curves if r["function"] == f]
            N = [r["N"] for r in rs]
            ax_r.plot(N, [np.nan if r["rhat"] is None else r["rhat"] for r in rs], "o-", label=rf"$\hat{{R}}$ of {f}")
            ax_e.plot(N, [np.nan if r["ess_bulk"] is None else r["ess_bulk"] for r in rs], "o-", label=f"ESS of {f}")
            ax_e.plot(N, [np.nan if r["exact_ess"] is None else r["exact_ess"] for r in rs], "k--", lw=1)
        ax_e.plot([], [], "k--", lw=1, label="exact ESS (dashed)")
        rs = [r for r in curves if r["function"] == curves[0]["function"]]
        twin = ax_r.twinx()
        twin.plot([r["N"] for r in rs], [r["d_start"] for r in rs], "r:", lw=2, label=r"exact $d_\mu(N)$")
        twin.set_ylim(0, 1.05)
        twin.axhline(MIXED, color="r", lw=0.5)
        twin.set_ylabel(r"exact $d_\mu(N)$ (total variation)", color="r")
        twin.spines["right"].set_visible(True)
        ax_r.axhline(RHAT_CONVERGED, color="k", lw=0.5)
        ax_r.set_xscale("log")
        ax_r.set_ylabel(r"split $\hat{R}$ (line: 1.01)")
        ax_r.set_title(name)
        handles, labels = ax_r.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax_r.legend(handles + more[0], labels + more[1], loc="upper left", bbox_to_anchor=(1.12, 1.0),
                    borderaxespad=0.0)
        ax_e.set_xscale("log")
        ax_e.set_yscale("log")
        ax_e.set_ylabel("effective sample size")
        ax_e.set_title(f"{name}: ESS bulk (solid) vs exact ESS (dashed)")
        legend(ax_e)
        ax_r.set_xlabel("$N$ (steps per chain)")
        ax_e.set_xlabel("$N$ (steps per chain)")
    return fig
