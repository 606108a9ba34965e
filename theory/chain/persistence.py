"""Saving and reading chains: :meth:`Chain.save <mlmix.theory.chain.markov_chain.Chain.save>` writes P
(dense or CSR) to an ``.npz`` file with the chain's description and the figures computed so far;
:meth:`Chain.load <mlmix.theory.chain.markov_chain.Chain.load>` and :func:`load_matrix` read them back.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from mlmix.files import atomic_save_npz
from mlmix.provenance import stamp
from mlmix.theory.results import dumps_results, loads_results, report_keys
from mlmix.validation import Matrix, check_transition_matrix, load_arrays, matrix_from_arrays

if TYPE_CHECKING:
    from mlmix.theory.chain.markov_chain import Chain

_FORMAT = "mlmix-chain-1"



def save_chain(chain: Chain, path: str | Path) -> None:
    """The body of :meth:`Chain.save` (a matrix-free chain saves its matrix, built from the source)."""

    chain = chain.facts.matrix
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"a chain is saved as .npz, got {path.name}")
    about = stamp("chain", {"name": chain.name, "representation_reason": chain.representation_reason},
                  {"source": None if chain.source is None else type(chain.source).__name__, "kernel": chain.kernel,
                   "temperature": getattr(chain.source, "temperature", None)})
    extra = {"name": np.array(chain.name), "about": np.array(dumps_results(about)),
             "figures": np.array(dumps_results(chain.computed(tuple(report_keys(saved=True)))))}
    if sp.issparse(chain.P):
        P = sp.csr_array(chain.P)
        atomic_save_npz(path, mlmix_format=np.array(_FORMAT), kind=np.array("csr"), data=P.data,
                        indices=P.indices, indptr=P.indptr, shape=np.array(P.shape), **extra)
    else:
        atomic_save_npz(path, mlmix_format=np.array(_FORMAT), kind=np.array("dense"), P=np.asarray(chain.P),
                        **extra)


def load_chain(cls: type[Chain], path: str | Path) -> Chain:
    """The body of :meth:`Chain.load` (``cls``: the class to build)."""

    chain = cls(load_matrix(path), name=str(Path(path).name))
    if Path(path).suffix.lower() != ".npz":
        return chain
    with np.load(path, allow_pickle=False) as z:
        if "about" not in z.files:
            return chain
        try:
            chain.saved_about = loads_results(str(z["about"]))
            figures = loads_results(str(z["figures"]))
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"{path}: the saved description or figures are unreadable: {err}") from None
        chain.name = str(z["name"])
    chain.restore({k: v for k, v in figures.items() if k in report_keys(saved=True)})
    return chain


def load_matrix(path: str | Path) -> Matrix:
    """A row-stochastic matrix from ``.npz`` (:meth:`Chain.save` or scipy.sparse.save_npz) or ``.npy``
    (no pickles); one-line ValueError for a missing, corrupt or invalid file
    (:func:`~mlmix.validation.load_arrays`, :func:`~mlmix.validation.matrix_from_arrays`)."""
    path = Path(path)
    if path.suffix.lower() not in (".npy", ".npz"):
        raise ValueError(f"matrix file must end in .npy or .npz, got {path.name}")
    arrays = load_arrays(path, "matrix file")
    try:
        return check_transition_matrix(matrix_from_arrays(arrays))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None
