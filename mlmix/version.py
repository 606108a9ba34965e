"""The installed version of mlmix (package metadata), in the base layer so that the modules below the
face (e.g. :mod:`mlmix.provenance`) read it without importing :mod:`mlmix` itself."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mlmix")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
