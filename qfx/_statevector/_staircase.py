"""Staircases: runs of like gates on consecutive wires, grouped by a pass and applied by one `lax.scan`."""

import copy

import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._gates import AbstractGate
from ._fusion import (
    batchable,
)
from ._kernels import apply_rotating

# --- staircases ----------------------------------------------------------------------------------

# A run of at least this many like gates on consecutive wires is applied by one `lax.scan`, on states of
# STAIRCASE_MIN_WIRES to STAIRCASE_MAX_WIRES wires: there the scan compiles one step where an unrolled
# layer compiles every gate, which cuts the first call (compilation) at the price of a slower
# steady state. Above 12 wires the rotating write costs more than in-place slices, which a long training
# loop pays at every step. Below 10 wires, since CNOT ladders became gathers (8+ wires), a layer compiles
# quickly unrolled, and a scanned staircase's backward keeps every step's input, which batched gradients
# pay most. (Measurements: README.md.)
STAIRCASE_MIN_LENGTH = 7
STAIRCASE_MIN_WIRES = 10
STAIRCASE_MAX_WIRES = 12
# Steps per loop iteration. A step writes a new buffer (its rotated output cannot overwrite its input),
# and a one-step body must then copy it back into the loop's carried buffer: a second pass. With two
# steps the second writes into the carried buffer, which the first has read. It pays in batched
# forwards; the first call compiles a little longer (see README.md).
STAIRCASE_UNROLL = 2


def _rewired(gate: AbstractGate, wires: tuple[int, ...]) -> AbstractGate:
    """`gate` on other wires. Only for `batchable` gates, whose one static field is `_wires`."""
    out = copy.copy(gate)
    object.__setattr__(out, "_wires", wires)  # modules are frozen; this is a fresh copy
    return out


def _step_key(op):
    """What a staircase step of `op` looks like once moved to the first wires; None if it cannot be one.

    Gates of one staircase share this key: the same type, the same relative wires (one wire, or two
    adjacent ones in either order) and leaves of the same shapes, so their leaves stack."""
    if not isinstance(op, AbstractGate) or not batchable(op) or len(op.wires) > 2:
        return None
    low = min(op.wires)
    rel = tuple(w - low for w in op.wires)
    if max(rel) != len(rel) - 1:
        return None
    canonical = _rewired(op, rel)
    shapes = tuple((x.shape, x.dtype) for x in jax.tree.leaves(canonical))
    return jax.tree.structure(canonical), shapes


class Staircase:
    """Like gates `gates[j]` on wires `w + j` (or `w + j, w + j + 1`): one layer of rotations on every
    wire, or a chain of two-qubit gates down the register. Applied by `apply_staircase`."""

    def __init__(self, gates: list[AbstractGate]):
        self.gates = gates


def staircases(ops: list, n: int) -> list:
    """`ops` with each maximal staircase of at least `STAIRCASE_MIN_LENGTH` gates grouped (see `Staircase`).

    A static, trace-time transformation: the gates stay in order and nothing moves past anything."""
    if not STAIRCASE_MIN_WIRES <= n <= STAIRCASE_MAX_WIRES:
        return list(ops)
    out, i = [], 0
    while i < len(ops):
        key = _step_key(ops[i])
        j = i + 1
        if key is not None:
            low = min(ops[i].wires)
            while (
                j < len(ops)
                and min(getattr(ops[j], "wires", None) or (-1,)) == low + (j - i)
                and _step_key(ops[j]) == key
            ):
                j += 1
        if j - i >= STAIRCASE_MIN_LENGTH:
            out.append(Staircase(list(ops[i:j])))
        else:
            out += ops[i:j]
        i = j
    return out


def _rotate(state: Array, k: int, n: int) -> Array:
    """The state with its first `k` wires moved to the end (wire k becomes wire 0)."""
    k %= n
    if k == 0:
        return state
    return state.reshape(2**k, 2 ** (n - k)).T.reshape(state.shape)


def apply_staircase(state: Array, stair: Staircase, n: int) -> Array:
    """Applies a staircase as one `lax.scan`, so it compiles once however many wires it spans.

    The state is rotated so that the first gate's lowest wire comes first; each step applies its gate
    to the first wires and writes the result rotated by one wire in the same pass (`apply_rotating`),
    bringing the next gate's wires to the front; a last rotation restores the order."""
    gates = stair.gates
    low = min(gates[0].wires)
    rel = tuple(w - low for w in gates[0].wires)
    canonical = [_rewired(g, rel) for g in gates]
    treedef = jax.tree.structure(canonical[0])
    xs = [jnp.stack(column) for column in zip(*(jax.tree.leaves(g) for g in canonical), strict=True)]

    fixed = None
    if not xs:  # gates without parameters (CNOT, SWAP, ...): a constant matrix, whose zeros are skipped
        with jax.ensure_compile_time_eval():
            fixed = np.asarray(canonical[0].matrix())

    def step(s, leaves):
        gate = jax.tree.unflatten(treedef, leaves)
        matrix = gate.matrix() if fixed is None else fixed
        return apply_rotating(s, matrix, gate.wires, n), None

    state = _rotate(state, low, n)
    state, _ = jax.lax.scan(step, state, xs, length=len(gates), unroll=STAIRCASE_UNROLL)
    return _rotate(state, n - (low + len(gates)), n)
