"""Hypothesis strategies: gates from the shared ALL_GATES battery, circuits, and states, on n <= 4 wires."""

import math

import hypothesis.strategies as st
import numpy as np

import qfx
from tests.helpers import ALL_GATES, ANGLE_GATES

MAX_WIRES = 4


@st.composite
def gates(draw, num_wires: int, battery=ALL_GATES):
    """Any gate family of `battery` that fits, on distinct wires in any order, with drawn parameters."""
    name = draw(st.sampled_from(sorted(n for n, (k, _) in battery.items() if k <= num_wires)))
    k, make = battery[name]
    wires = tuple(draw(st.permutations(range(num_wires)))[:k])
    # The factories take a NumPy generator for their angles and unitaries; hypothesis picks its seed.
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return make(rng, wires if k > 1 else wires[0])


@st.composite
def circuits(draw, min_wires: int = 1, max_wires: int = MAX_WIRES, max_depth: int = 6, battery=ALL_GATES):
    n = draw(st.integers(min_wires, max_wires))
    ops = draw(st.lists(gates(n, battery), min_size=0, max_size=max_depth))
    return qfx.Circuit(ops, num_wires=n)


def angle_circuits(**kwargs):
    """Circuits of gates whose parameters are angles (every qfx.diff method differentiates them)."""
    return circuits(battery=ANGLE_GATES, **kwargs)


@st.composite
def pauli_sums(draw, num_wires: int, max_terms: int = 3):
    """A linear combination of 1 to `max_terms` Pauli words on `num_wires` wires, coefficients in [-1, 1]."""
    terms = []
    for _ in range(draw(st.integers(1, max_terms))):
        letters = draw(st.lists(st.sampled_from("IXYZ"), min_size=num_wires, max_size=num_wires))
        coeff = draw(st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False))
        terms.append(coeff * qfx.PauliWord(dict(enumerate(letters))))
    return sum(terms[1:], terms[0])


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
