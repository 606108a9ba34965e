"""``torchrun ... -m mlmix.commands.distributed``: the matrix-free analysis of a built-in model's chain
with the state vector sharded over ``torch.distributed`` processes (the communicator is
:mod:`mlmix.theory.linalg.sharding`; docs/distributed.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np
import torch

from mlmix.commands.source_options import add_source_arguments, build_source, validate_source
from mlmix.files import atomic_save_npz, dumps_json
from mlmix.theory.chain.operator_chain import analyse_operator, summary_dict
from mlmix.theory.kernels.operators import DTYPES, kernel_operator
from mlmix.theory.kernels.registry import KERNELS, operator_kernels
from mlmix.theory.linalg.sharding import init_from_environment, local_range
from mlmix.validation import check_eps


def main(argv: Sequence[str] | None = None) -> int:
    """``torchrun ... -m mlmix.commands.distributed [mlmix exact's model options]``: the matrix-free
    analysis of a built-in model's chain with the state vector sharded over the processes. Rank 0
    prints the JSON report; ``--save-stationary DIR`` writes each process's slice of pi."""
    parser = argparse.ArgumentParser(prog="torchrun --nproc-per-node=W -m mlmix.commands.distributed",
                                     description=main.__doc__.splitlines()[0])
    add_source_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="accepted as in mlmix exact: the report is always JSON")
    out.add_argument("--eps", type=float, default=0.25, help="TV threshold of t_mix (default 0.25)")
    run = parser.add_argument_group("distributed")
    run.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                     help="default: nccl when CUDA is available, else gloo")
    run.add_argument("--operator-dtype", choices=tuple(DTYPES), default="float64",
                     help="arithmetic of the operator: float64 (default) or float32 (explicit, labelled in the "
                          "results); --dtype is the compute dtype of an --mlm model")
    run.add_argument("--save-stationary", default=None, metavar="DIR",
                     help="write each process's slice of the stationary law to DIR/stationary_<rank>.npz")
    args = parser.parse_args(argv)
    try:
        check_eps(args.eps, "--eps")
        validate_source(args)
        if args.matrix is not None or KERNELS[args.kernel].build_operator is None:
            raise ValueError(f"the distributed engine analyses a built-in model's {' or '.join(operator_kernels())} "
                             "chain")
        comm = init_from_environment(args.backend)
        device = torch.device(f"cuda:{torch.cuda.current_device()}") if args.backend != "gloo" and \
            torch.cuda.is_available() else torch.device("cpu")
        source, title = build_source(args)
        op = kernel_operator(source, args.kernel, args.k, comm=comm, device=device, dtype=args.operator_dtype)
        res = analyse_operator(op, args.eps, progress=comm.rank == 0)
        if args.save_stationary is not None:
            start, stop = local_range(comm, source.space.vocab_size, source.space.length)
            atomic_save_npz(os.path.join(args.save_stationary, f"stationary_{comm.rank:05d}.npz"),
                            value=res["stationary"].value, log_value=res["stationary"].log_value,
                            start=np.array(start), stop=np.array(stop))
        if comm.rank == 0:
            print(dumps_json({"chain": f"{title}; {op.description}; {comm.world_size} processes",
                              **summary_dict(res)}))
    except (ValueError, TypeError, OSError) as err:
        print(f"mlmix.commands.distributed: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
