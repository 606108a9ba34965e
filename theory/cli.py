"""``mlmix exact``: analyse a built-in model's sampler, or a transition matrix from a file, exactly.

Examples::

    mlmix exact                                          # Ising on cycle:6, beta 0.5, Glauber
    mlmix exact --model potts --q 3 --graph grid:2x3 --beta 0.8 --json
    mlmix exact --model scores --vocab 3 --length 5 --temperature 0.5 --seed 0
    mlmix exact --model clique --length 6 --clique-size 4 --coupling 0.3 --field 0.1 --kernel k-gibbs --k 2
    mlmix exact --matrix P.npz --stationary --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import networkx as nx
import numpy as np
import scipy.sparse as sp

from mlmix.theory.analysis import analyse, format_table
from mlmix.theory.conditionals import (
    Conditionals,
    IsingModel,
    PottsModel,
    ScoreTable,
    clique_ising,
)
from mlmix.theory.kernels import (
    glauber_kernel,
    independent_parallel_kernel,
    k_gibbs_kernel,
)
from mlmix.theory.mixing import MIXING_LIMIT
from mlmix.validation import Matrix, check_temperature, check_transition_matrix

MODELS = ("ising", "potts", "scores", "clique")
KERNELS = ("glauber", "k-gibbs", "parallel")

#: Default state limit of the exact t_mix in the CLI: a few seconds of dense products at 2048 states.
CLI_MIXING_LIMIT = 2048


def parse_graph(spec: str) -> nx.Graph:
    """Graph from a spec: cycle:N, path:N, complete:N, star:N (N nodes), grid:RxC (row-major
    labels), random:N:p:seed (Erdos-Renyi G(N, p)). Nodes are always 0..N-1."""
    kind, _, rest = spec.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind in ("cycle", "path", "complete", "star") and len(parts) == 1:
            n = int(parts[0])
            if n < 1 or (kind == "cycle" and n < 3):
                raise ValueError
            return {"cycle": nx.cycle_graph, "path": nx.path_graph, "complete": nx.complete_graph,
                    "star": lambda m: nx.star_graph(m - 1)}[kind](n)
        if kind == "grid" and len(parts) == 1:
            r, c = (int(v) for v in parts[0].lower().split("x"))
            if r < 1 or c < 1:
                raise ValueError
            return nx.convert_node_labels_to_integers(nx.grid_2d_graph(r, c), ordering="sorted")
        if kind == "random" and len(parts) == 3:
            n, p, seed = int(parts[0]), float(parts[1]), int(parts[2])
            if n < 1 or not 0 <= p <= 1:
                raise ValueError
            return nx.gnp_random_graph(n, p, seed=seed)
    except ValueError:
        pass
    raise ValueError(f"bad graph spec {spec!r}: use cycle:N (N >= 3), path:N, complete:N, star:N, grid:RxC "
                     "or random:N:p:seed")


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``mlmix exact``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Examples::", 1)[1]
    src = parser.add_argument_group("chain")
    src.add_argument("--matrix", type=Path, help="transition matrix file: .npy (dense) or .npz (scipy sparse)")
    src.add_argument("--model", choices=MODELS, default="ising", help="built-in source (default ising)")
    src.add_argument("--kernel", choices=KERNELS, default="glauber", help="sampler (default glauber)")
    src.add_argument("--k", type=int, default=2, help="block size of k-Gibbs (default 2)")
    src.add_argument("--temperature", type=float, default=1.0, help="temperature T > 0 (default 1)")
    mod = parser.add_argument_group("models")
    mod.add_argument("--graph", default="cycle:6", help="graph for ising/potts (default cycle:6)")
    mod.add_argument("--beta", type=float, default=0.5, help="inverse temperature of ising/potts (default 0.5)")
    mod.add_argument("--coupling", type=float, default=1.0, help="coupling J on every edge (default 1)")
    mod.add_argument("--field", type=float, default=0.0, help="field h on every site (default 0)")
    mod.add_argument("--q", type=int, default=3, help="number of Potts states (default 3)")
    mod.add_argument("--vocab", type=int, default=3, help="|V| for scores (default 3)")
    mod.add_argument("--length", type=int, default=5, help="n for scores and clique (default 5)")
    mod.add_argument("--clique-size", type=int, default=3, help="|C| for clique, sites 0..|C|-1 (default 3)")
    mod.add_argument("--seed", type=int, default=None,
                     help="seed of random scores (default 0) or of random Potts couplings and fields")
    mod.add_argument("--scale", type=float, default=1.0, help="standard deviation of random scores (default 1)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--stationary", action="store_true", help="include the stationary law")
    out.add_argument("--eps", type=float, default=0.25, help="TV threshold of t_mix (default 0.25)")
    out.add_argument("--mixing-limit", type=int, default=CLI_MIXING_LIMIT,
                     help=f"largest state count for the exact dense t_mix (default {CLI_MIXING_LIMIT}; "
                          f"the API accepts up to {MIXING_LIMIT}, at minutes per call)")


def build_source(args: argparse.Namespace) -> tuple[Conditionals, str]:
    """The built-in source of conditionals the arguments describe, and a one-line description."""
    T = check_temperature(args.temperature)
    if args.model == "ising":
        graph = parse_graph(args.graph)
        src = IsingModel(graph, couplings=args.coupling, fields=args.field, beta=args.beta, temperature=T)
        return src, f"Ising model on {args.graph} (beta={args.beta:g}, J={args.coupling:g}, h={args.field:g})"
    if args.model == "potts":
        graph = parse_graph(args.graph)
        if args.seed is not None:
            src = PottsModel.random(graph, args.q, seed=args.seed, coupling_scale=args.coupling, temperature=T)
            return src, f"random Potts model (q={args.q}) on {args.graph}, seed {args.seed}"
        fields = np.full((graph.number_of_nodes(), args.q), args.field)
        src = PottsModel(graph, args.q, couplings=args.coupling, fields=fields, beta=args.beta, temperature=T)
        return src, f"Potts model (q={args.q}) on {args.graph} (beta={args.beta:g}, J={args.coupling:g})"
    if args.model == "scores":
        seed = 0 if args.seed is None else args.seed
        src = ScoreTable.random(args.vocab, args.length, seed=seed, scale=args.scale, temperature=T)
        return src, f"random score table |V|={args.vocab}, n={args.length}, seed {seed} (generally incompatible)"
    src = clique_ising(args.length, range(args.clique_size), args.coupling, args.field, temperature=T)
    return src, (f"clique Ising of paper P eq. (5): n={args.length}, |C|={args.clique_size}, "
                 f"J={args.coupling:g}, h={args.field:g}")


def build_kernel(source: Conditionals, kernel: str, k: int) -> tuple[Matrix, str]:
    if kernel == "glauber":
        return glauber_kernel(source), f"Glauber dynamics at T={source.temperature:g}"
    if kernel == "k-gibbs":
        return k_gibbs_kernel(source, k), f"{k}-Gibbs block dynamics at T={source.temperature:g}"
    return independent_parallel_kernel(source), f"independent parallel sampler at T={source.temperature:g}"


def load_matrix(path: Path) -> Matrix:
    """A row-stochastic matrix from .npy (dense, no pickles) or .npz (scipy.sparse.save_npz)."""
    if not path.exists():
        raise FileNotFoundError(f"matrix file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        M = np.load(path, allow_pickle=False)
    elif suffix == ".npz":
        try:
            M = sp.load_npz(path)
        except (ValueError, KeyError, OSError) as err:
            raise ValueError(f"{path} is not a scipy.sparse .npz file (save it with scipy.sparse.save_npz): {err}") \
                from err
    else:
        raise ValueError(f"matrix file must end in .npy or .npz, got {path.name}")
    return check_transition_matrix(M)


def run(args: argparse.Namespace) -> int:
    """Analyse the chain and print a table (or JSON with --json)."""
    if args.matrix is not None:
        P = load_matrix(args.matrix)
        title = f"transition matrix {args.matrix} ({P.shape[0]} states)"
    else:
        if args.k < 1:
            raise ValueError(f"--k must be >= 1, got {args.k}")
        source, description = build_source(args)
        P, kernel = build_kernel(source, args.kernel, args.k)
        title = f"{description}; {kernel}; |V|^n = {source.space.vocab_size}^{source.space.length}"
    result = analyse(P, eps=args.eps, include_stationary=args.stationary, mixing_limit=args.mixing_limit)
    if args.json:
        print(json.dumps({"chain": title, **result}, indent=2))
    else:
        print(format_table(result, title))
    return 0
