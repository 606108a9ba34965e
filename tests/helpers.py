"""Helpers shared by the tests (the folder is on sys.path through conftest.py, as pytest puts it)."""

import numpy as np


def two_state(a, b):
    """The two-state chain [[1 - a, a], [b, 1 - b]] (gap a + b, pi = (b, a) / (a + b))."""
    return np.array([[1 - a, a], [b, 1 - b]])


FR1 = "E V Q L V E S G G G"  # heavy-chain framework 1 (human VH3), the left context
NEXT = {2: "Q P G G S L", 3: "P G G S L R"}  # the six residues that follow n free positions in EVQLVESGGGLVQPGGSLRL


def figure(x):
    """The number behind one of paper G's constants as ``mlmix estimate`` reports it: the value of an exact
    figure, the lower end (the sample maximum) of a sampled supremum; a Result or its JSON."""
    if isinstance(x, dict):
        return x["value"] if x.get("value") is not None else x["lower"]
    return x.value if x.value is not None else x.lower
