"""Where mlmix keeps data between runs: one user cache folder, never the working directory.

``$MLMIX_CACHE`` when set, else the platform's user cache folder for mlmix (``platformdirs``:
``~/.cache/mlmix`` on Linux, ``~/Library/Caches/mlmix`` on macOS, ``%LOCALAPPDATA%\\mlmix\\Cache``
on Windows). Tabulated MLM tables live in ``tables/`` there, and Hypothesis's own files (its
example database and constant caches, which it would otherwise create as ``.hypothesis/`` in the
current folder) in ``hypothesis/``.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable that overrides the cache folder.
CACHE_ENV = "MLMIX_CACHE"


def cache_dir(*parts: str) -> Path:
    """The user cache folder of mlmix, or a sub-folder of it (not created here)."""
    base = os.environ.get(CACHE_ENV)
    if base:
        root = Path(base).expanduser()
    else:
        # deferred: only when no $MLMIX_CACHE is set
        import platformdirs

        root = Path(platformdirs.user_cache_dir("mlmix", appauthor=False))
    return root.joinpath(*parts)


def use_cache_for_hypothesis() -> None:
    """Point Hypothesis's storage at ``cache_dir("hypothesis")`` unless the user chose a folder
    (``HYPOTHESIS_STORAGE_DIRECTORY``): ``mlmix verify`` and the theorem checks then leave nothing
    in the working directory."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return
    # deferred: hypothesis is heavy, needed only by the theorem checks
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(cache_dir("hypothesis"))
