"""mlmix: exact and empirical analysis of the Markov chains that masked language models induce."""

__version__ = "0.1.0"
