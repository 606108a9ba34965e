"""The ``mlmix`` pytest plugin (entry point ``pytest11``, loaded wherever mlmix is installed).

* ``--mlmix-thorough``: search user theorems with the thorough profile (500 instances per theorem
  instead of 100, and every declared hypothesis violation), and raise the Hypothesis budget of the
  session's other ``@given`` tests to at least 500 examples.
* Fixtures: ``ising_source`` (Ising on a 6-cycle, beta 0.5: the default of ``mlmix exact``),
  ``score_table_source`` (a Gaussian score table |V| = 3, n = 4, seed 0: incompatible, non-reversible),
  ``metastable_chain`` (the two-state chain with P(0,1) = 1e-12, P(1,0) = 2e-12: spectral gap 3e-12
  to the last digit) and ``exact_chain`` (a factory: ``exact_chain(source, kernel="glauber")``).
* A summary line of the theorems checked through :func:`mlmix.theorem.check` / ``assert_holds``.

Nothing of mlmix, numpy or Hypothesis is imported until a fixture or option needs it, so the plugin
costs nothing in a session that does not use it.
"""

from __future__ import annotations

from typing import Any

import pytest

#: Set by ``--mlmix-thorough`` (read by :func:`mlmix.verify.user.check`).
THOROUGH = False

#: The theorem reports of this session (appended by :func:`mlmix.verify.user.check`).
REPORTS: list = []


def record(report: Any) -> None:
    REPORTS.append(report)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mlmix")
    group.addoption("--mlmix-thorough", action="store_true", default=False,
                    help="mlmix: 5x more instances per theorem, hypothesis-violation searches, and >= 500 "
                         "Hypothesis examples for @given tests")


def pytest_configure(config: pytest.Config) -> None:
    global THOROUGH
    THOROUGH = bool(config.getoption("mlmix_thorough", False))
    if THOROUGH:
        # deferred: the plugin loads in every pytest session where mlmix is installed
        from hypothesis import settings

        from mlmix.verify.runner import PROFILES

        current = settings.default
        settings.register_profile("mlmix-thorough", parent=current,
                                  max_examples=max(current.max_examples, PROFILES["thorough"]["examples"]))
        settings.load_profile("mlmix-thorough")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORTS:
        return
    counts: dict[str, int] = {}
    for r in REPORTS:
        counts[r.status] = counts.get(r.status, 0) + 1
    held = [r for r in REPORTS if r.status == "holds"]
    caught = sum(r.weakened == "caught" for r in held)
    parts = ", ".join(f"{v} {k}" for k, v in counts.items())
    terminalreporter.write_line(
        f"mlmix: {len(REPORTS)} theorem check(s) ({'thorough' if THOROUGH else 'default'} budget): {parts}; "
        f"weakened bound caught for {caught} of {len(held)} that hold; "
        f"{sum(r.examples for r in REPORTS)} instances")


@pytest.fixture
def ising_source() -> Any:
    """Ising model on the 6-cycle, J = 1, h = 0, beta = 0.5, T = 1 (``mlmix exact``'s default source)."""
    # deferred: the plugin loads in every pytest session where mlmix is installed
    import networkx as nx

    from mlmix.theory.sources.conditionals import IsingModel

    return IsingModel(nx.cycle_graph(6), couplings=1.0, fields=0.0, beta=0.5)


@pytest.fixture
def score_table_source() -> Any:
    """Gaussian scores N(0, 1), |V| = 3, n = 4, seed 0, T = 1: incompatible conditionals, like an MLM."""
    # deferred: the plugin loads in every pytest session where mlmix is installed
    from mlmix.theory.sources.conditionals import ScoreTable

    return ScoreTable.random(3, 4, seed=0)


@pytest.fixture
def metastable_chain() -> Any:
    """Two states, P(0,1) = 1e-12, P(1,0) = 2e-12: spectral gap exactly 3e-12 (a closed form),
    pi = (2/3, 1/3)."""
    # deferred: the plugin loads in every pytest session where mlmix is installed
    import numpy as np

    from mlmix.theory.chain.markov_chain import Chain

    a, b = 1e-12, 2e-12
    return Chain(np.array([[1 - a, a], [b, 1 - b]]))


@pytest.fixture
def exact_chain() -> Any:
    """A factory: ``exact_chain(source, kernel="glauber", **options)`` is
    :meth:`mlmix.theory.chain.markov_chain.Chain.from_source` (exact, with certified accuracy)."""
    # deferred: the plugin loads in every pytest session where mlmix is installed
    from mlmix.theory.chain.markov_chain import Chain

    def build(source: Any, kernel: str = "glauber", **options: Any) -> Chain:
        return Chain.from_source(source, kernel, **options)

    return build
