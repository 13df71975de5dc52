"""Hypothesis strategies: gates from the shared ALL_GATES battery, circuits, and states, on n <= 4 wires."""

import math

import hypothesis.strategies as st
import numpy as np

import qfx
from tests.helpers import ALL_GATES

MAX_WIRES = 4


@st.composite
def gates(draw, num_wires: int):
    """Any gate family of ALL_GATES that fits, on distinct wires in any order, with drawn parameters."""
    name = draw(st.sampled_from(sorted(n for n, (k, _) in ALL_GATES.items() if k <= num_wires)))
    k, make = ALL_GATES[name]
    wires = tuple(draw(st.permutations(range(num_wires)))[:k])
    # The factories take a NumPy generator for their angles and unitaries; hypothesis picks its seed.
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return make(rng, wires if k > 1 else wires[0])


@st.composite
def circuits(draw, min_wires: int = 1, max_wires: int = MAX_WIRES, max_depth: int = 6):
    n = draw(st.integers(min_wires, max_wires))
    ops = draw(st.lists(gates(n), min_size=0, max_size=max_depth))
    return qfx.Circuit(ops, num_wires=n)


def states(num_wires: int):
    """Normalised complex state vectors of 2**num_wires amplitudes (complex128 NumPy arrays)."""
    parts = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)
    dim = 2**num_wires
    vectors = st.lists(st.tuples(parts, parts), min_size=dim, max_size=dim).map(
        lambda xs: np.array([complex(a, b) for a, b in xs])
    )
    return vectors.filter(lambda v: np.linalg.norm(v) > 0.1).map(lambda v: v / np.linalg.norm(v))


@st.composite
def circuits_and_states(draw, **kwargs):
    circ = draw(circuits(**kwargs))
    return circ, draw(states(circ.num_wires))


angles = st.floats(-math.pi, math.pi, allow_nan=False, allow_infinity=False)
