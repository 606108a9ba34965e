"""Input validation for every public function and CLI option: one home, one message style.

Each ``check_*`` returns the value in canonical form (int, float, float64 array, boolean mask)
or raises :class:`~mlmix.errors.InputTypeError` (wrong kind of object, a :class:`TypeError`) or
:class:`~mlmix.errors.InputValueError` (wrong value, a :class:`ValueError`) with a one-line message
naming the argument: the command line reports these as refused input (exit status 2).
Memory: :func:`check_memory` compares an estimate, made
before a large allocation, with the limit in force (:func:`memory_limit`, set by the CLI's
``--max-memory``; by default 80% of the memory available now) and raises
:class:`~mlmix.errors.MemoryLimitError` with the estimate in its message.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tokenize
import zipfile
import zlib
from contextvars import ContextVar
from typing import Callable, Iterator

import numpy as np
import scipy.sparse as sp

from mlmix.errors import InputTypeError, InputValueError, MemoryLimitError

Matrix = np.ndarray | sp.sparray | sp.spmatrix

#: Rows of a transition matrix and conditional laws (:func:`check_transition_matrix`,
#: :func:`check_log_conditionals`) must sum to 1 within this tolerance.
ROW_SUM_TOL = 1e-9

#: Draws per chain that ``mlmix diagnose`` keeps after warm-up, at least: arviz-stats computes split R-hat and
#: the ESS from 4 draws per chain (two halves of 2) and returns nan below. Both the draws' length and
#: ``--warmup`` are checked against it (:func:`check_warmup`).
MIN_KEPT_DRAWS = 4

# ---------------------------------------------------------------------------------------- scalars


def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (bool refused) within [minimum, maximum]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InputTypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise InputValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InputValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_real(value: object, name: str, *, minimum: float | None = None, maximum: float | None = None,
               open_min: bool = False, open_max: bool = False) -> float:
    """A finite real number in the interval given by minimum/maximum (open ends with open_min/open_max)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputTypeError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:  # an int beyond the float range
        x = math.inf
    if not math.isfinite(x):
        raise InputValueError(f"{name} must be finite, got {value}")
    if minimum is not None and (x < minimum or (open_min and x == minimum)):
        raise InputValueError(f"{name} must be {'>' if open_min else '>='} {minimum:g}, got {value}")
    if maximum is not None and (x > maximum or (open_max and x == maximum)):
        raise InputValueError(f"{name} must be {'<' if open_max else '<='} {maximum:g}, got {value}")
    return x


def check_eps(eps: object, name: str = "eps") -> float:
    """A TV threshold or probability level in the open interval (0, 1)."""
    return check_real(eps, name, minimum=0.0, maximum=1.0, open_min=True, open_max=True)


def check_temperature(temperature: object, name: str = "temperature") -> float:
    """A temperature T: finite and > 0."""
    return check_real(temperature, name, minimum=0.0, open_min=True)


def check_steps(t: object, name: str = "t") -> int:
    """A number of steps: an int >= 0."""
    return check_int(t, name, minimum=0)


def check_sites(values: object, length: int, name: str) -> list[int]:
    """A sequence of site indices (a scan order, a block of a schedule): ints in [0, length); a bool,
    a float such as 2.7 (truncated to 2 by ``int``) or anything else but an integer is refused."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise InputTypeError(f"{name} must be a sequence of site indices, got {type(values).__name__}")
    sites = []
    for s in values:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
            raise InputTypeError(f"{name} must hold integer sites in 0..{length - 1}, got {s!r} "
                                 f"({type(s).__name__})")
        if not 0 <= s < length:
            raise InputValueError(f"{name}: site {s} is outside 0..{length - 1}")
        sites.append(int(s))
    return sites


def check_site_pairs(pairs: object, length: int, name: str = "pairs") -> list[tuple[int, int]]:
    """Ordered pairs (i, j) of distinct sites in [0, length), duplicates dropped (first order kept);
    at least one pair."""
    if isinstance(pairs, (str, bytes, dict)) or not hasattr(pairs, "__iter__"):
        raise InputTypeError(f"{name} must be a sequence of site pairs (i, j), got {type(pairs).__name__}")
    out: list[tuple[int, int]] = []
    for pair in pairs:
        sites = check_sites(pair, length, name)
        if len(sites) != 2 or sites[0] == sites[1]:
            raise InputValueError(f"{name} must hold pairs (i, j) of two different sites, got {pair!r}")
        if tuple(sites) not in out:
            out.append((sites[0], sites[1]))
    if not out:
        raise InputValueError(f"{name} holds no pair")
    return out


def check_array_shape(a: object, shape: tuple[int, ...], name: str, meaning: str = "") -> np.ndarray:
    """A float64 array of exactly ``shape`` without NaN (infinities allowed: log-probabilities of
    removed symbols are -inf); ``meaning`` spells the shape out in the message."""
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InputTypeError(f"{name} must be an array of real numbers: {err}") from None
    if arr.shape != tuple(shape):
        raise InputValueError(f"{name} must have shape {tuple(shape)}{f' ({meaning})' if meaning else ''}, "
                              f"got {arr.shape}")
    if np.isnan(arr).any():
        raise InputValueError(f"{name} contains NaN")
    return arr


# ---------------------------------------------------------------------------------------- arrays


def check_vector(v: object, size: int, name: str, *, nonnegative: bool = False, positive: bool = False,
                 probability: bool = False, tol: float = 1e-9) -> np.ndarray:
    """A finite float64 vector of length ``size``; optionally entrywise >= 0, > 0, or a probability
    vector (>= 0, summing to 1 within ``tol``)."""
    try:
        if np.asarray(v).dtype.kind == "c":
            raise InputTypeError(f"dtype {np.asarray(v).dtype} (the imaginary part would be dropped)")
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InputTypeError(f"{name} must be a vector of real numbers: {err}") from None
    if arr.shape != (size,):
        raise InputValueError(f"{name} must be a vector over the {size} states, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InputValueError(f"{name} contains NaN or infinite values")
    if (nonnegative or probability) and (arr < 0).any():
        raise InputValueError(f"{name} has negative entries")
    if positive and (arr <= 0).any():
        raise InputValueError(f"{name} must be strictly positive ({int((arr <= 0).sum())} entries are <= 0)")
    if probability and abs(arr.sum() - 1.0) > tol:
        raise InputValueError(f"{name} must sum to 1 (tol {tol:g}), sums to {arr.sum()!r}")
    return arr


def check_transition_matrix(P: object, tol: float = ROW_SUM_TOL) -> Matrix:
    """P as float64 (CSR when sparse, with sorted indices and duplicated (i, j) entries summed) after
    checking it is a square, finite, non-negative, row-stochastic matrix of real numbers (rows sum to 1
    within ``tol``; the first offending row is named). A sparse matrix's index arrays are checked in
    full (indices in range, indptr non-decreasing) before any graph algorithm walks them. A torch
    tensor (dense or sparse, any device) is accepted and copied to the CPU (:func:`from_torch`)."""
    P = from_torch(P)
    if sp.issparse(P):
        if P.dtype.kind == "c":
            raise InputTypeError(f"transition matrix must hold real numbers, got dtype {P.dtype}")
        M = _canonical_csr(P)
        data, sums = M.data, np.asarray(M.sum(axis=1)).ravel()
    elif isinstance(P, (np.ndarray, list, tuple)):
        try:
            raw = np.asarray(P)
            if raw.dtype.kind == "c":
                raise InputTypeError(f"dtype {raw.dtype} (the imaginary part would be dropped)")
            M = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise InputTypeError(f"transition matrix must hold real numbers: {err}") from None
        if M.ndim != 2:
            raise InputValueError(f"transition matrix must be 2-dimensional, got shape {M.shape}")
        data, sums = M, M.sum(axis=1)
    else:
        raise InputTypeError(f"transition matrix must be a numpy array or scipy sparse matrix, got {type(P).__name__}")
    if M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise InputValueError(f"transition matrix must be square and non-empty, got shape {M.shape}")
    if not np.isfinite(data).all():
        raise InputValueError("transition matrix contains NaN or infinite entries")
    if (data < 0).any():
        raise InputValueError("transition matrix has negative entries")
    check_row_sums(sums, "transition matrix", tol)
    return M


def check_generator(Q: object, tol: float = ROW_SUM_TOL) -> Matrix:
    """A continuous-time generator as float64 (CSR when sparse): square, finite, real, off-diagonal rates
    >= 0 and every row summing to 0 within ``tol`` times its exit rate |Q_ii| (the first offending row or
    entry is named)."""
    Q = from_torch(Q)
    if sp.issparse(Q):
        M = _canonical_csr(Q)
    elif isinstance(Q, (np.ndarray, list, tuple)) and np.asarray(Q).dtype.kind in "biuf":
        M = np.asarray(Q, dtype=np.float64)
    else:
        raise InputTypeError(f"generator must be a real numpy array or scipy sparse matrix, got {type(Q).__name__}")
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise InputValueError(f"generator must be square and non-empty, got shape {M.shape}")
    C = sp.coo_array(M)
    if not np.isfinite(C.data).all():
        raise InputValueError("generator contains NaN or infinite entries")
    bad = np.flatnonzero((C.row != C.col) & (C.data < 0))
    if bad.size:
        i, j = int(C.row[bad[0]]), int(C.col[bad[0]])
        raise InputValueError(f"generator off-diagonal rates must be >= 0; Q[{i}, {j}] = {float(C.data[bad[0]])!r}")
    sums, diag = np.asarray(M.sum(axis=1)).ravel(), np.abs(M.diagonal())
    rows = np.flatnonzero(~(np.abs(sums) <= tol * diag))
    if rows.size:
        raise InputValueError(f"generator rows must sum to 0 (tol {tol:g} x |Q_ii|); row {int(rows[0])} sums to "
                              f"{float(sums[rows[0]])!r}")
    return M


def check_row_sums(sums: np.ndarray, what: str, tol: float = ROW_SUM_TOL,
                   row_name: Callable[[int], str] = "row {}".format) -> None:
    """Every row sum of a stochastic matrix or table of conditional laws is 1 within ``tol`` (a NaN sum
    fails); the first offending row is named by ``row_name(index)``."""
    bad = np.flatnonzero(~(np.abs(np.asarray(sums, dtype=np.float64) - 1.0) <= tol))
    if bad.size:
        raise InputValueError(f"{what} rows must sum to 1 (tol {tol:g}); {row_name(int(bad[0]))} sums to "
                              f"{float(sums[bad[0]])!r}")


def check_scaled_scores(rows: np.ndarray, what: str, row_name: Callable[[int], str] = "row {}".format) -> None:
    """Rows of scores / T or log-probabilities (..., |V|): no NaN or +inf (-inf, a truncated symbol, is allowed)."""
    rows = rows.reshape(-1, rows.shape[-1]) if rows.ndim else rows.reshape(1, 1)
    broken = np.flatnonzero(np.isnan(rows).any(axis=-1) | np.isposinf(rows).any(axis=-1))
    if broken.size:
        raise InputValueError(f"{what}: {row_name(int(broken[0]))} holds NaN or +inf (scores / T beyond "
                              "float64's range, or a damaged table)")


def check_log_conditionals(log_probs: object, what: str, tol: float = ROW_SUM_TOL,
                           row_name: Callable[[int], str] = "row {}".format) -> np.ndarray:
    """Log-probabilities (..., |V|) whose rows are conditional laws: no NaN or +inf (an overflow of
    scores / T, or a damaged table), and exp(row) summing to 1 within ``tol`` (checked as exp(logsumexp(row)),
    so a row of 1e-300 probabilities is judged on its mass, not underflowed). Returns the rows
    renormalised in log space (row - logsumexp(row)), so a table normalised to ``tol`` yields exact laws; a
    row already normalised to 4 |V| u is returned unchanged."""
    lp = np.asarray(log_probs, dtype=np.float64)
    rows = lp.reshape(-1, lp.shape[-1]) if lp.ndim else lp.reshape(1, 1)
    check_scaled_scores(rows, what, row_name)
    top = rows.max(axis=-1)
    shift = np.where(np.isfinite(top), top, 0.0)[:, None]  # a row of -inf: mass 0, refused below
    with np.errstate(divide="ignore"):
        norms = shift[:, 0] + np.log(np.exp(rows - shift).sum(axis=-1))
    check_row_sums(np.exp(norms), what, tol, row_name)
    # rows normalised to their rounding (4 |V| u) are kept bit for bit: renormalising them would move ties
    # between rows (two equal probabilities of different rows) by an ulp, and a tie-break by position with them
    norms = np.where(np.abs(norms) <= 4 * rows.shape[-1] * np.finfo(np.float64).eps, 0.0, norms)
    return (rows - norms[:, None]).reshape(lp.shape)


def from_torch(x: object) -> object:
    """A torch tensor as float64 numpy (dense) or scipy CSR (sparse COO/CSR layouts); anything else as
    given. torch is not imported: a tensor is recognised by its type's module."""
    if not type(x).__module__.startswith("torch") or not hasattr(x, "detach"):
        return x
    t = x.detach().cpu()
    if t.is_complex():
        raise InputTypeError("transition matrix must hold real numbers, got a complex tensor")
    if str(t.dtype) in ("torch.float16", "torch.bfloat16", "torch.float32"):
        raise InputTypeError(f"transition matrix must be float64, got a {str(t.dtype)[6:]} tensor (its rows sum to 1 "
                             "only to about 1e-7): build it with dtype=torch.float64")
    if str(t.layout) == "torch.sparse_csr":
        return sp.csr_array((t.values().double().numpy(), t.col_indices().numpy(), t.crow_indices().numpy()),
                            shape=tuple(t.shape))
    if str(t.layout) == "torch.sparse_coo":
        t = t.coalesce()
        return sp.csr_array(sp.coo_array((t.values().double().numpy(), tuple(t.indices().numpy())),
                                         shape=tuple(t.shape)))
    if str(t.layout) != "torch.strided":
        raise InputTypeError(f"transition matrix: torch layout {t.layout} is not supported (use dense, COO or CSR)")
    return t.double().numpy()
def _canonical_csr(P: sp.sparray | sp.spmatrix) -> sp.csr_array:
    """A float64 CSR copy with its structure checked in full (ValueError) and duplicates summed."""
    try:
        if P.format == "csr":
            if P.indptr.ndim != 1 or P.indices.ndim != 1 or P.data.ndim != 1:
                raise InputValueError("index arrays must be 1-dimensional")
            M = sp.csr_array((np.asarray(P.data, dtype=np.float64), P.indices.copy(), P.indptr.copy()),
                             shape=P.shape)
            M.check_format(full_check=True)
        else:
            M = sp.csr_array(P, dtype=np.float64)
        M.sum_duplicates()  # also sorts the indices (scipy's graph routines need both)
    except (ValueError, TypeError, IndexError, OverflowError) as err:
        raise InputValueError(f"transition matrix: invalid sparse structure: {err}") from None
    return M


def check_state_set(S: object, n_states: int, name: str = "S", *, nonempty: bool = True,
                    proper: bool = False) -> np.ndarray:
    """A set of states as a boolean mask, from a mask, an index array or a single index.

    ``nonempty`` refuses the empty set; ``proper`` also refuses the whole space.
    """
    arr = np.asarray(S)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.dtype == bool:
        if arr.shape != (n_states,):
            raise InputValueError(f"{name}: a boolean mask must have shape ({n_states},), got {arr.shape}")
        mask = arr.copy()
    else:
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise InputTypeError(f"{name} must be a boolean mask or integer state indices, got dtype {arr.dtype}")
        if arr.ndim != 1:
            raise InputValueError(f"{name}: state indices must be a 1-d array, got shape {arr.shape}")
        if arr.size and (arr.min() < 0 or arr.max() >= n_states):
            raise InputValueError(f"{name}: state indices must lie in [0, {n_states})")
        mask = np.zeros(n_states, dtype=bool)
        mask[arr.astype(np.int64)] = True
    if nonempty and not mask.any():
        raise InputValueError(f"{name} must be a non-empty set of states")
    if proper and mask.all():
        raise InputValueError(f"{name} must be a proper subset of the states, got the whole space")
    return mask



def check_starts(start: object, n_states: int, chains: int | None, name: str = "start") -> np.ndarray:
    """Start states of ``chains`` trajectories, as int64 indices of shape (chains,): one index for every
    chain, or one per chain. ``chains=None`` takes the count from ``start`` (its length; 1 for a single
    index). A list whose length is not ``chains`` is refused with one line (not broadcast)."""
    arr = np.asarray(start)
    if arr.dtype == bool or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise InputTypeError(f"{name} must be state indices (integers in [0, {n_states})), got dtype {arr.dtype}")
    if arr.ndim > 1 or arr.size == 0:
        raise InputValueError(f"{name}: one state index or a 1-d list of them, got shape {arr.shape}")
    count = arr.size if arr.ndim == 1 else 1
    chains = count if chains is None else check_int(chains, "chains", minimum=1)
    if arr.ndim == 1 and count != chains:
        raise InputValueError(f"{name}: {count} start states for chains={chains}; give one state or one per chain "
                              "(or leave chains out: it is then the number of start states)")
    if arr.min() < 0 or arr.max() >= n_states:
        raise InputValueError(f"{name}: state indices must lie in [0, {n_states}), got {arr.min()}..{arr.max()}")
    return np.broadcast_to(arr.astype(np.int64), (chains,)).copy()


def check_count_matrix(C: object) -> Matrix:
    """A square matrix of non-negative finite numbers (counts or transition probabilities), dense or
    scipy.sparse, returned as given (a dense array as float64)."""
    M = sp.csr_array(C) if sp.issparse(C) else np.asarray(C)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise InputValueError(f"a count or transition matrix must be square and non-empty, got shape {M.shape}")
    data = M.data if sp.issparse(M) else M
    if not np.issubdtype(data.dtype, np.number) or np.iscomplexobj(data):
        raise InputTypeError(f"a count or transition matrix must hold real numbers, got dtype {data.dtype}")
    if not np.isfinite(data).all() or (data < 0).any():
        raise InputValueError("a count or transition matrix must hold finite non-negative entries")
    return M if sp.issparse(M) else M.astype(np.float64)


def check_basins(A: object, B: object, n_states: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint non-empty sets of states (masks, index arrays or single indices) as boolean masks: the
    basins of transition path theory and of committors (:func:`check_state_set` for each)."""
    Am = check_state_set(A, n_states, "set A")
    Bm = check_state_set(B, n_states, "set B")
    if (Am & Bm).any():
        raise InputValueError(f"sets A and B must be disjoint; both hold state(s) {np.flatnonzero(Am & Bm)[:5].tolist()}")
    return Am, Bm


#: Rows of a perturbation direction (:func:`check_direction`) must sum to 0 within this fraction of the
#: row's absolute sum.
DIRECTION_TOL = 1e-9


def check_direction(E: object, n_states: int, name: str = "E") -> sp.csr_array:
    """A perturbation direction of a transition matrix that keeps it stochastic: a real finite (N, N)
    matrix (dense or scipy.sparse) whose rows sum to 0 (within :data:`DIRECTION_TOL` of each row's absolute
    sum), returned as the CSR array of its off-diagonal entries (the diagonal is minus their row sum)."""
    M = sp.csr_array(E) if sp.issparse(E) else None
    if M is None:
        try:
            if np.asarray(E).dtype.kind == "c":
                raise InputTypeError(f"{name} must hold real numbers, got dtype {np.asarray(E).dtype}")
            M = sp.csr_array(np.asarray(E, dtype=np.float64))
        except (TypeError, ValueError) as err:
            raise InputTypeError(f"{name} must be a matrix of real numbers: {err}") from None
    if M.ndim != 2 or M.shape != (n_states, n_states):
        raise InputValueError(f"{name} must have the shape of P, ({n_states}, {n_states}), got {M.shape}")
    if np.iscomplexobj(M.data):
        raise InputTypeError(f"{name} must hold real numbers, got dtype {M.data.dtype}")
    M = M.astype(np.float64)
    if not np.isfinite(M.data).all():
        raise InputValueError(f"{name} contains NaN or infinite values")
    sums, size = np.asarray(M.sum(axis=1)).ravel(), np.asarray(abs(M).sum(axis=1)).ravel()
    bad = np.flatnonzero(np.abs(sums) > DIRECTION_TOL * size)
    if bad.size:
        raise InputValueError(f"{name} must keep P stochastic: every row must sum to 0 (row {bad[0]} sums to "
                              f"{sums[bad[0]]:.3g}); put minus the off-diagonal row sum on the diagonal")
    M.setdiag(0.0)
    M.eliminate_zeros()
    return M


# ---------------------------------------------------------------------------------------- array files

#: What reading a damaged .npy / .npz can raise: numpy's header parser (SyntaxError, TokenError),
#: zipfile (BadZipFile, bad CRC; NotImplementedError for a corrupt method field), zlib, truncation.
_ARRAY_FILE_ERRORS = (OSError, ValueError, KeyError, TypeError, EOFError, SyntaxError, NotImplementedError,
                      zipfile.BadZipFile, zlib.error, tokenize.TokenError, MemoryError)


def load_arrays(path: str | os.PathLike, what: str) -> dict[str, np.ndarray]:
    """Every array of a ``.npy`` (under the key "") or ``.npz`` file, read in full (decompressed and
    CRC-checked) without pickles; a missing, truncated or corrupt file is a one-line ValueError
    naming ``what``."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise InputValueError(f"{what} {name} does not exist")
    try:
        if name.lower().endswith(".npy"):
            return {"": np.load(name, allow_pickle=False)}
        with np.load(name, allow_pickle=False) as z:
            return {key: z[key] for key in z.files}
    except _ARRAY_FILE_ERRORS as err:
        raise InputValueError(f"{name} is not a readable {what} ({type(err).__name__}: {err})") from None


def npz_headers(path: str | os.PathLike, what: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The shape and dtype of every array of a ``.npz`` file, read from the ``.npy`` headers of its members
    without reading (or decompressing) their data: what a file claims is checked before anything of that
    size is allocated. A missing or malformed file is a one-line ValueError naming ``what``."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise InputValueError(f"{what} {name} does not exist")
    heads = {}
    try:
        with zipfile.ZipFile(name) as zf:
            for member in zf.namelist():
                with zf.open(member) as fh:
                    version = np.lib.format.read_magic(fh)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
                    else:
                        raise InputValueError(f"member {member}: .npy format version {version} is not supported")
                heads[member.removesuffix(".npy")] = (tuple(int(d) for d in shape), np.dtype(dtype))
    except _ARRAY_FILE_ERRORS as err:
        raise InputValueError(f"{name} is not a readable {what} ({type(err).__name__}: {err})") from None
    return heads


def matrix_from_arrays(arrays: dict[str, np.ndarray]) -> Matrix:
    """The matrix stored in the arrays of a file: a ``.npy`` array, :meth:`Chain.save`'s layout
    (``mlmix_format``, ``kind`` dense/csr) or ``scipy.sparse.save_npz``'s (csr, csc, coo); the structure
    itself is checked by :func:`check_transition_matrix`. ValueError for an unknown layout."""
    keys = set(arrays)
    try:
        if keys == {""}:
            return arrays[""]
        if "mlmix_format" in keys:
            if str(arrays["kind"]) == "csr":
                return sp.csr_array((arrays["data"], arrays["indices"], arrays["indptr"]),
                                    shape=tuple(int(d) for d in arrays["shape"]))
            return arrays["P"]
        if {"format", "shape", "data"} <= keys:
            fmt = arrays["format"].item()
            fmt = fmt.decode("ascii") if isinstance(fmt, bytes) else str(fmt)
            shape = tuple(int(d) for d in arrays["shape"])
            if fmt in ("csr", "csc"):
                cls = sp.csr_array if fmt == "csr" else sp.csc_array
                return cls((arrays["data"], arrays["indices"], arrays["indptr"]), shape=shape)
            if fmt == "coo":
                return sp.coo_array((arrays["data"], (arrays["row"], arrays["col"])), shape=shape)
            raise InputValueError(f"unsupported sparse format {fmt!r}")
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise InputValueError(f"malformed matrix arrays: {err}") from None
    raise InputValueError(f"unknown .npz layout (keys {sorted(keys)})")


def check_output_file(path: str | os.PathLike, name: str, suffixes: tuple[str, ...]) -> None:
    """A file to be written later: one of ``suffixes`` (lower case, with the dot), not an existing
    folder, and not below an existing file; checked before a command writes anything, so a refused
    output leaves no other output behind."""
    path = os.fspath(path)
    if os.path.splitext(path)[1].lower() not in suffixes:
        raise InputValueError(f"{name} must name a {' or '.join(suffixes)} file, got {os.path.basename(path)!r}")
    if os.path.isdir(path):
        raise InputValueError(f"{name}: {path} is a folder; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputValueError(f"{name}: {parent} is a file, not a folder")


# ---------------------------------------------------------------------------------------- model files

#: Bytes per element of the safetensors dtypes.
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
                      "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}

#: Integer tensors a masked-LM checkpoint may hold: index buffers, not weights.
_INDEX_BUFFERS = ("position_ids", "token_type_ids", "_ids", "num_batches_tracked")


def check_safetensors_header(path: str | os.PathLike) -> dict:
    """The header of a ``.safetensors`` weights file after checking it, without reading the tensors:
    an 8-byte little-endian length, a JSON object of tensors (``dtype``, ``shape``, ``data_offsets``)
    whose byte ranges tile the data section exactly and match dtype x shape, and floating-point
    dtypes for every weight (a float tensor relabelled as integers keeps its byte length: its
    values would be read as ~1e9 floats). One-line ValueError naming the file and the tensor."""
    name = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise InputValueError("shorter than its 8-byte header length")
            n = int.from_bytes(head, "little")
            size = os.fstat(fh.fileno()).st_size
            if n > min(size - 8, 100 * 1024**2):
                raise InputValueError(f"header length {n} exceeds the file")
            header = json.loads(fh.read(n).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as err:
        raise InputValueError(f"weights file {name} is corrupt or incomplete (not a valid safetensors file): {err}") from None
    if not isinstance(header, dict):
        raise InputValueError(f"weights file {name}: the header is not a JSON object")
    data = size - 8 - n
    spans = []
    for key, info in header.items():
        if key == "__metadata__":
            continue
        where = f"weights file {name}, tensor {key!r}"
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise InputValueError(f"{where}: header entry lacks dtype, shape or data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in SAFETENSORS_DTYPES:
            raise InputValueError(f"{where}: unknown dtype {dtype!r}")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and 0 <= o <= data for o in offsets) or offsets[0] > offsets[1]):
            raise InputValueError(f"{where}: malformed shape {shape!r} or data_offsets {offsets!r}")
        if math.prod(shape) * SAFETENSORS_DTYPES[dtype] != offsets[1] - offsets[0]:
            raise InputValueError(f"{where}: {dtype} x {shape} does not match its {offsets[1] - offsets[0]} bytes")
        if dtype[0] in "IUB" and not key.endswith(_INDEX_BUFFERS):
            raise InputValueError(f"{where}: a weight stored as {dtype}; a masked LM's weights are floating point "
                                  "(a relabelled dtype?)")
        spans.append(tuple(offsets))
    spans.sort()
    end = 0
    for a, b in spans:
        if a != end:
            raise InputValueError(f"weights file {name}: tensor byte ranges overlap or leave gaps")
        end = b
    if end != data:
        raise InputValueError(f"weights file {name}: the tensors cover {end} of {data} data bytes")
    return header


def check_tokenizer_files(folder: str | os.PathLike) -> None:
    """The tokenizer files of a model folder, parsed before transformers reads them: ``tokenizer.json``
    by the tokenizers library (its schema: model, vocabulary, pre-tokenizer ...), the other JSON
    side files as JSON objects. One-line ValueError naming the file."""
    for name in ("tokenizer_config.json", "special_tokens_map.json", "config.json", "vocab.json"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as fh:
                    obj = json.load(fh)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
                raise InputValueError(f"{path} is unreadable or not valid JSON: {err}") from None
            if not isinstance(obj, dict):
                raise InputValueError(f"{path} must hold a JSON object, got {type(obj).__name__}")
    path = os.path.join(folder, "tokenizer.json")
    if os.path.isfile(path):
        # deferred: tokenizers loads only to check a tokenizer file
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(path)
        except Exception as err:  # the Rust library raises a bare Exception for a schema mismatch
            raise InputValueError(f"{path} is not a valid tokenizer file: {str(err).splitlines()[0] if str(err) else err!r}") \
                from None


def check_law_spec(spec: object, where: str) -> dict:
    """A recorded Potts law (``law.json`` of a trained default model): a JSON object with ``law`` =
    {tokens: list of strings, length: int >= 1, coupling: real, fields: length x len(tokens) reals}."""
    law = spec.get("law") if isinstance(spec, dict) else None
    if not isinstance(law, dict):
        raise InputValueError(f"{where} has no 'law' object")
    missing = [k for k in ("tokens", "length", "coupling", "fields") if k not in law]
    if missing:
        raise InputValueError(f"{where}: the law lacks {', '.join(missing)}")
    tokens = law["tokens"]
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise InputValueError(f"{where}: tokens must be a non-empty list of strings")
    length = check_int(law["length"], f"{where}: length", minimum=1)
    coupling = check_real(law["coupling"], f"{where}: coupling")
    try:
        fields = np.asarray(law["fields"], dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InputValueError(f"{where}: fields must be numbers: {err}") from None
    if fields.shape != (length, len(tokens)) or not np.isfinite(fields).all():
        raise InputValueError(f"{where}: fields must be finite, of shape ({length}, {len(tokens)}), got {fields.shape}")
    return {"tokens": tokens, "length": length, "coupling": coupling, "fields": fields}


def check_weight_values(named: Iterator[tuple[str, object]], what: str, bound: float = 1e6) -> None:
    """Every floating-point weight finite and of magnitude <= ``bound`` (a trained network's weights are
    O(1); values such as 1e9 come from bytes read as the wrong dtype)."""
    for key, w in named:
        if not getattr(w, "is_floating_point", lambda: False)():
            continue
        top = float(w.detach().abs().max()) if w.numel() else 0.0
        if not math.isfinite(top) or top > bound:
            raise InputValueError(f"{what}: weight {key} holds {'non-finite values' if not math.isfinite(top) else f'|w| = {top:.3g}'}"
                                  f" (a corrupt or relabelled checkpoint?)")


# ---------------------------------------------------------------------------------------- sizes and memory

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def parse_size(text: str | int, name: str = "--max-memory") -> int:
    """Bytes from '512MiB', '4G', '2.5GB' or a plain number of bytes."""
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        return check_int(text, name, minimum=1)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise InputValueError(f"{name} must be a size such as 512MiB, 4G or 2.5GB, got {text!r}")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 1:
        raise InputValueError(f"{name} must be at least 1 byte, got {text!r}")
    return int(value)


def parse_duration(text: str | float, name: str = "--budget") -> float:
    """Seconds from '90s', '10m', '1.5h' or a plain number of seconds (> 0)."""
    if isinstance(text, (int, float, np.integer, np.floating)) and not isinstance(text, bool):
        return check_real(text, name, minimum=0.0, open_min=True)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|sec|m|min|h|hr)?\s*", str(text).lower())
    if not m:
        raise InputValueError(f"{name} must be a duration such as 90s, 10m or 1.5h, got {text!r}")
    seconds = float(m.group(1)) * {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}[m.group(2)]
    if seconds <= 0:
        raise InputValueError(f"{name} must be positive, got {text!r}")
    return seconds


def format_bytes(n: float) -> str:
    """'1.5 GiB'-style rendering of a byte count."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def available_memory() -> int:
    """Bytes of memory available to a new allocation now (MemAvailable on Linux; else total/2)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 4 * 1024**3


_LIMIT: ContextVar[int | None] = ContextVar("mlmix_memory_limit", default=None)


@contextlib.contextmanager
def memory_limit(limit: str | int | None) -> Iterator[None]:
    """Within the block, :func:`check_memory` compares estimates with ``limit`` bytes (a size string
    or int); ``None`` keeps the default (80% of the memory available at the time of the check)."""
    token = _LIMIT.set(None if limit is None else parse_size(limit))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def current_memory_limit() -> int:
    """The limit in force: the one set by :func:`memory_limit`, else 80% of the available memory."""
    limit = _LIMIT.get()
    return limit if limit is not None else int(0.8 * available_memory())


def check_memory(nbytes: float, what: str) -> None:
    """Refuse (MemoryLimitError) an allocation of about ``nbytes`` bytes for ``what`` when it exceeds
    the limit in force; the message carries the estimate and the limit."""
    limit = current_memory_limit()
    if nbytes > limit:
        raise MemoryLimitError(f"{what} needs about {format_bytes(nbytes)}, more than the memory limit of "
                               f"{format_bytes(limit)} (raise it with --max-memory, or choose a smaller problem)")


# ---------------------------------------------------------------------------------------- draws

def check_draws(states: object, vocab_size: int, length: int, name: str = "draws") -> np.ndarray:
    """Draws of a user's sampler in mlmix's state encoding: an integer array of shape (chains, steps, n)
    with chains >= 2, steps >= :data:`MIN_KEPT_DRAWS` and every symbol in 0..|V|-1 (bools and
    floats are refused, even integral ones: a float array is a sign of a different encoding). Returns it as
    int64."""
    arr = np.asarray(states)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise InputTypeError(f"{name}: states must be an integer array (symbols 0..{vocab_size - 1}), got dtype {arr.dtype}")
    if arr.ndim != 3 or arr.shape[2] != length:
        raise InputValueError(f"{name}: states must have shape (chains, steps, n = {length}), got {arr.shape}")
    if arr.shape[0] < 2 or arr.shape[1] < MIN_KEPT_DRAWS:
        raise InputValueError(f"{name}: need at least 2 chains of at least {MIN_KEPT_DRAWS} states each, got "
                              f"{arr.shape[0]} x {arr.shape[1]}")
    bad = (arr < 0) | (arr >= vocab_size)
    if bad.any():
        c, t, i = (int(k) for k in np.argwhere(bad)[0])
        raise InputValueError(f"{name}: chain {c}, step {t}, site {i} holds symbol {int(arr[c, t, i])}, outside "
                         f"0..{vocab_size - 1}")
    return arr.astype(np.int64)


def check_warmup(warmup: object, draws: int, name: str = "warmup") -> int:
    """Draws left out at the start of each chain of ``draws`` draws: 0 <= warmup <= draws -
    :data:`MIN_KEPT_DRAWS`, so the diagnostics keep at least that many per chain. ``draws``
    counts the draws only (a simulation's start state is not one; every supplied state is one)."""
    warmup = check_int(warmup, name, minimum=0)
    if draws - warmup < MIN_KEPT_DRAWS:
        raise InputValueError(f"{name} must be <= {draws - MIN_KEPT_DRAWS} ({draws} draws per chain, at least "
                              f"{MIN_KEPT_DRAWS} kept), got {warmup}")
    return warmup


# ---------------------------------------------------------------------------------------- score tables

#: Format tag of score-table files (docs/samplers.md, "Score files").
SCORES_FORMAT = "mlmix-scores-1"


def table_entries(length: int, base: int, vocab_size: int) -> float:
    """n * base^(n-1) * |V|, the entries of a score table over base^(n-1) contexts, as a float (inf when it
    overflows): an estimate for :func:`check_memory` that never forms a huge integer."""
    try:
        return float(length) * float(base) ** (length - 1) * float(vocab_size)
    except OverflowError:
        return math.inf


def array_nbytes(shape: tuple, itemsize: float) -> float:
    """Bytes of an array of ``shape`` and ``itemsize`` as a float (inf when it overflows): an estimate for
    :func:`check_memory` from a file header's claimed shape, however large."""
    try:
        return float(itemsize) * float(math.prod(int(d) for d in shape))
    except OverflowError:
        return math.inf


def check_table_shape(shape: tuple, length: int, base: int, vocab_size: int, what: str) -> None:
    """``shape`` must be (n, base^(n-1), |V|): a score table of n sites over base^(n-1) contexts (base |V|
    for full contexts, |V|+1 for partial ones). base^(n-1) is formed only when its bit length is within one
    of the stored dimension's, so metadata claiming n = 10^12 is refused at once (ValueError)."""
    shape = tuple(int(d) for d in shape)
    small = (length - 1) * math.log2(base) < 63
    middle = base ** (length - 1) if small else f"{base}^{length - 1}"
    fits = (len(shape) == 3 and shape[0] == length and shape[2] == vocab_size and shape[1] >= 1
            and (length - 1) * math.log2(base) <= math.log2(shape[1]) + 1 and base ** (length - 1) == shape[1])
    if not fits:
        raise InputValueError(f"{what} has shape ({length}, {middle}, {vocab_size}), got {shape}")


def _score_scalar(arrays: dict, key: str, where: str, kinds: str, kind_name: str) -> object:
    """The single value stored under ``key``: a 0-d array whose dtype kind is one of ``kinds`` (numpy's
    codes: i/u integers, f floats, U/S strings); TypeError naming the field otherwise."""
    arr = np.asarray(arrays[key])
    if arr.ndim != 0:
        raise InputValueError(f"{where}: {key} must be a single value, got an array of shape {arr.shape}")
    if arr.dtype.kind not in kinds:
        raise InputTypeError(f"{where}: {key} must be {kind_name}, got {arr.dtype} value {arr.item()!r}")
    value = arr.item()
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            raise InputValueError(f"{where}: {key} is not an ASCII string") from None
    return value


def check_score_metadata(arrays: dict, where: str = "score file") -> dict:
    """The metadata of a score-table file (everything but the table's values), checked before the table is
    used: ``mlmix_format`` = :data:`SCORES_FORMAT` and ``kind`` "full" or "partial" (strings), ``vocab_size``
    >= 2 and ``length`` >= 1 (integers: not floats, bools or strings), optional ``temperature`` (a finite
    real > 0, not a bool), ``tokens`` (|V| strings) and ``score_dtype`` (a string: the arithmetic that
    produced the scores, default "exact"), and the table's shape (n, base^(n-1), |V|) (base
    |V| full, |V|+1 partial) with a floating dtype. ``arrays`` may hold the table or only its shape and
    dtype (``table_shape``, ``table_dtype``: read from the file's header before its data). Each refusal
    is one line naming the field. Returns kind, vocab_size, length, temperature, tokens (or None) and
    score_dtype."""
    missing = {"mlmix_format", "kind", "vocab_size", "length"} - set(arrays)
    if "table" not in arrays and "table_shape" not in arrays:
        missing.add("table")
    if missing:
        raise InputValueError(f"{where}: missing arrays {sorted(missing)} (see docs/samplers.md, score files)")
    fmt = _score_scalar(arrays, "mlmix_format", where, "US", "a string")
    if fmt != SCORES_FORMAT:
        raise InputValueError(f"{where}: format {fmt!r} is not {SCORES_FORMAT!r}")
    kind = _score_scalar(arrays, "kind", where, "US", "a string")
    if kind not in ("full", "partial"):
        raise InputValueError(f"{where}: kind must be 'full' or 'partial', got {kind!r}")
    q = check_int(_score_scalar(arrays, "vocab_size", where, "iu", "an integer"), f"{where}: vocab_size", minimum=2)
    n = check_int(_score_scalar(arrays, "length", where, "iu", "an integer"), f"{where}: length", minimum=1)
    T = check_temperature(_score_scalar(arrays, "temperature", where, "iuf", "a real number"),
                          f"{where}: temperature") if "temperature" in arrays else 1.0
    tokens = None
    if "tokens" in arrays:
        tok = np.asarray(arrays["tokens"])
        if tok.ndim != 1 or tok.dtype.kind not in "US":
            raise InputTypeError(f"{where}: tokens must be a 1-d array of strings, got {tok.dtype} of shape {tok.shape}")
        if tok.shape[0] != q:
            raise InputValueError(f"{where}: {tok.shape[0]} tokens for |V| = {q}")
        tokens = [t.decode("ascii", "replace") if isinstance(t, bytes) else str(t) for t in tok.tolist()]
    score_dtype = _score_scalar(arrays, "score_dtype", where, "US", "a string") if "score_dtype" in arrays else "exact"
    if "table" in arrays:
        table = np.asarray(arrays["table"])
        shape, dtype = table.shape, table.dtype
    else:
        shape, dtype = arrays["table_shape"], np.dtype(arrays["table_dtype"])
    if dtype.kind != "f":
        raise InputTypeError(f"{where}: table must hold floats, got {dtype}")
    check_table_shape(shape, n, q if kind == "full" else q + 1, q, f"{where}: a {kind} table of |V| = {q}, n = {n}")
    return {"kind": kind, "vocab_size": q, "length": n, "temperature": T, "tokens": tokens, "score_dtype": score_dtype}


def check_score_values(table: np.ndarray, what: str) -> np.ndarray:
    """Score table entries: finite or -inf (a zero conditional), never NaN or +inf, and a finite entry in
    every row (each context keeps a symbol of positive probability). Returns the table as float64."""
    tab = np.asarray(table, dtype=np.float64)
    if np.isnan(tab).any() or np.isposinf(tab).any():
        raise InputValueError(f"{what}: entries must be finite or -inf (NaN or +inf found)")
    if tab.size and not np.isfinite(tab).any(axis=-1).all():
        raise InputValueError(f"{what}: every row of the table needs a finite score")
    return tab


def check_score_arrays(arrays: dict, where: str = "score file") -> dict:
    """The arrays of a score-table file, checked: the metadata by :func:`check_score_metadata` (before the
    table's values are looked at; the float64 copy is checked against the memory limit), then the table
    by :func:`check_score_values`. Returns them in canonical form (kind, vocab_size, length, table
    float64, temperature, tokens or None)."""
    meta = check_score_metadata(arrays, where)
    table = np.asarray(arrays["table"])
    check_memory(8.0 * table.size, f"{where}: the score table")
    return {**meta, "table": check_score_values(table, where)}
