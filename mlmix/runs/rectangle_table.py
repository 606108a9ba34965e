"""Paper G Table 1: mean rectangle statistic R per model over random rectangles (section 4).

For each masked LM: ``--rectangles`` rectangles (x, i, j, a', b') with x a start state (a passage
of ``--texts`` or random tokens), i != j uniform, a' and b' drawn from the model's own top-``--top-k``
predictions at i and j (:func:`mlmix.theory.local.rectangles.sample_rectangles`), and

    R = | [l(x00->x10) + l(x10->x11)] - [l(x00->x01) + l(x01->x11)] |   (T = 1).

Controls, whose R vanishes by telescoping (Prop. 4): each causal LM of ``--causal``
(:class:`mlmix.empirical.models.causal.CausalLMConditionals`, on a random ``--causal-support`` tokens of its
vocabulary because one query costs one forward pass per support token), and, for a model folder
with ``law.json`` (the shipped model), the true joint law it was trained on.

    mlmix run rectangle-table --out runs/rect
    mlmix run rectangle-table --out runs/rect --model bert-base-uncased roberta-base \\
        --causal gpt2 --texts msmarco.txt --length 20

Writes rectangles.csv (every rectangle), rectangle_table.json, rectangle_table.csv and
rectangle_table.png. Each model is one resumable sweep task (``--workers``, ``--address``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mlmix.commands.options import set_threads
from mlmix.empirical.sampling.sweep import run_sweep
from mlmix.plot_style import legend, pyplot
from mlmix.runs.common import (
    add_common_arguments,
    load_model,
    save_figure,
    start_states,
    write_csv,
    write_json,
)
from mlmix.theory.local.rectangles import sample_rectangles

#: One line for ``mlmix run --list``.
DESCRIPTION = "paper G section 4, Table 1: mean R per model"

#: Paper G Table 1 (mean R, 300 rectangles, top-50 replacements, MS MARCO), by model id.
PAPER_MEAN_R = {"bert-base-uncased": 0.644, "bert-large-uncased": 0.798, "roberta-base": 0.705,
                "roberta-large": 0.735, "modernbert-base": 0.753, "gpt2": 0.000}


def paper_value(model: str) -> float | None:
    """The paper's mean R for a model id or folder named like one (last path component)."""
    return PAPER_MEAN_R.get(Path(str(model).rstrip("/")).name.lower())


def configure(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, many_models=True)
    parser.add_argument("--causal", nargs="*", default=[], help="causal LMs for the compatible control (e.g. gpt2)")
    parser.add_argument("--rectangles", type=int, default=300, help="rectangles per model (paper: 300)")
    parser.add_argument("--top-k", type=int, default=50, help="replacements from the model's top k (paper: 50)")
    parser.add_argument("--length", type=int, default=None, help="content tokens n (default: up to 20 the model fits)")
    parser.add_argument("--causal-support", type=int, default=256,
                        help="tokens in the causal control's support when its vocabulary is larger")
    parser.add_argument("--workers", type=int, default=0, help="local worker processes (0: this process)")
    parser.add_argument("--address", default=None, help="Dask scheduler address to run the models on")


def rectangle_task(params: dict) -> dict:
    """Rectangles of one model (a sweep task): the R values and their records."""
    args = argparse.Namespace(**params)
    rng = np.random.default_rng(params["seed"])
    if params["kind"] == "causal":
        source = _causal_source(params, rng)
        states = rng.integers(0, source.space.vocab_size, size=(params["rectangles"], source.space.length))
    else:
        source = load_model(params["model"], params["length"], args)
        texts = None if params["texts"] is None else Path(params["texts"])
        states = start_states(source, params["rectangles"], rng, texts)
        if params["kind"] == "law":
            # deferred: torch and transformers; `mlmix run --list` imports every run
            from mlmix.empirical.models.shipped_model import load_law

            law = load_law(params["model"])
            if law.space != source.space:
                raise ValueError(f"law.json of {params['model']} does not match the model's space {source.space}")
            source = law
    rects = sample_rectangles(source, states, params["rectangles"], rng, top_k=params["top_k"])
    return {"R": rects.values.tolist(), "rectangles": [rects.record(k) for k in range(rects.count)],
            "length": source.space.length, "vocab_size": source.space.vocab_size}


def _causal_source(params: dict, rng: np.random.Generator):
    # deferred: torch and transformers; `mlmix run --list` imports every run
    from mlmix.empirical.models.causal import CausalLMConditionals
    from mlmix.empirical.models.mlm import load_pretrained

    set_threads(params["threads"])
    model, tok = load_pretrained(CausalLMConditionals.auto_class, params["model"],
                                 trust_remote_code=params["trust_remote_code"])
    options = dict(device=params["device"], dtype=params["dtype"])
    length = params["length"] or 20
    full = CausalLMConditionals(model, tok, length, **options)
    if full.space.vocab_size <= params["causal_support"]:
        return full
    ids = np.sort(rng.choice(full.support_ids, size=params["causal_support"], replace=False))
    return CausalLMConditionals(model, tok, length, candidates=ids.tolist(), **options)


def run(args: argparse.Namespace) -> int:
    if args.rectangles < 1 or args.top_k < 1:
        raise ValueError("--rectangles and --top-k must be positive")
    common = dict(length=args.length, rectangles=args.rectangles, top_k=args.top_k, seed=args.seed,
                  texts=None if args.texts is None else str(args.texts), device=args.device,
                  dtype=args.dtype, trust_remote_code=args.trust_remote_code, threads=args.threads,
                  causal_support=args.causal_support)
    tasks = [dict(common, model=m, kind="masked") for m in args.model]
    tasks += [dict(common, model=m, kind="law") for m in args.model if (Path(m) / "law.json").is_file()]
    tasks += [dict(common, model=m, kind="causal") for m in args.causal]
    results = run_sweep(rectangle_task, tasks, args.out / "tasks", address=args.address, max_workers=args.workers,
                        progress=not args.no_progress)
    table, per_rect = [], []
    for task, res in zip(tasks, results):
        R = np.asarray(res["R"])
        name = task["model"] if task["kind"] == "masked" else f"{task['model']} ({task['kind']} control)"
        table.append({"model": name, "kind": task["kind"], "length": res["length"], "vocab_size": res["vocab_size"],
                      "rectangles": int(R.size), "mean_R": float(R.mean()), "median_R": float(np.median(R)),
                      "max_R": float(R.max()), "paper_mean_R": paper_value(task["model"]) if task["kind"] != "law"
                      else None})
        per_rect += [{"model": name, **rec} for rec in res["rectangles"]]
    write_csv(args.out / "rectangles.csv", per_rect)
    write_csv(args.out / "rectangle_table.csv", table)
    write_json(args.out / "rectangle_table.json", {"settings": common, "table": table})
    _figure(table, args.out / "rectangle_table.png", common)
    for row in table:
        paper = "" if row["paper_mean_R"] is None else f"  (paper {row['paper_mean_R']:.3f})"
        print(f"{row['model']:>48}  mean R {row['mean_R']:.3f}{paper}")
    return 0


def _figure(table: list[dict], path: Path, settings: dict) -> None:
    """Mean R per model: bars with their value written on them (a control's R near 0 would otherwise
    be an invisible bar), the paper's values as diamonds, the settings in the title."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2.4 + 1.2 * len(table), 3.8))
    x = np.arange(len(table))
    bars = ax.bar(x, [r["mean_R"] for r in table], edgecolor="black", linewidth=0.6,
                  color=["tab:blue" if r["kind"] == "masked" else "tab:gray" for r in table], label="ours (mean R)")
    ax.bar_label(bars, labels=[f"{r['mean_R']:.3g}" for r in table], fontsize=7, padding=2)
    ax.set_ylim(0, 1.15 * max(max(r["mean_R"] for r in table),
                              max((r["paper_mean_R"] or 0.0) for r in table), 1e-12))
    ax.set_title(f"rectangle statistic R (paper G Table 1): {settings['rectangles']} rectangles per model, "
                 f"n = {settings['length'] or 'auto'}, top-k {settings['top_k']}, seed {settings['seed']}, "
                 f"texts {Path(settings['texts']).name if settings['texts'] else 'random tokens'}", fontsize=8)
    paper = [(k, r["paper_mean_R"]) for k, r in enumerate(table) if r["paper_mean_R"] is not None]
    if paper:
        ax.scatter(*zip(*paper), color="black", marker="D", zorder=3, label="paper G Table 1")
    ax.set_xticks(x, [Path(r["model"]).name or r["model"] for r in table], rotation=20, ha="right", fontsize=8)
    ax.set_xlabel("model")
    ax.set_ylabel("mean rectangle statistic $R$")
    legend(ax)
    save_figure(fig, path)

