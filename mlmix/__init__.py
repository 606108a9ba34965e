"""mlmix: exact and empirical analysis of the Markov chains that masked language models induce."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mlmix")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
