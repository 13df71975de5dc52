"""Rolling: a flat list of gates with repeated structure becomes `Repeat` blocks, as `qfx.repeat` would.

A circuit built in Python loops (`[qfx.RY(t[l, i], i) for l in range(L) for i in range(n)] + ...`) holds
the same gate kinds on the same wires again and again. Unrolled, every gate is traced, fused and compiled
on its own, so compile time grows with depth; as a `Repeat` block, one layer is compiled and run by
`lax.scan`. This pass finds the period of such a list from static structure alone (gate types, wires,
static fields, leaf shapes and dtypes, never values) and stacks the repeated layers' leaves, so every
compilation of one circuit structure rolls the same way and new parameter values reuse the program.

The stacking is a JAX function of the original leaves, so derivatives flow back to them: the circuit a
user differentiates keeps its flat shape. Under `jax.jit` it concatenates the leaves in small groups
(`_device_stack`), which XLA compiles far faster than one stack of hundreds of scalars. Results change
only by rounding (fusion then acts within a layer, not across layers).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._channels import AbstractChannel
from ._circuit import Circuit, Repeat
from ._gates import AbstractGate

# A run is rolled when its layers hold at least this many gates in all: below it, unrolled programs compile
# quickly and a scan's per-layer bookkeeping is not worth it.
ROLL_MIN_GATES = 48
# Periods (gates per layer) searched, at most: one layer of a wide circuit (a QAOA layer of all pairs on 30
# wires has 465 two-qubit gates) fits.
ROLL_MAX_PERIOD = 1024


def _key(op) -> object:
    """What a gate's layer-to-layer identity depends on: its pytree structure (type, wires and other static
    fields) and its leaves' shapes and dtypes. None for operations that are not gates (never rolled)."""
    if not isinstance(op, (AbstractGate, AbstractChannel)):  # channels roll like gates: leaves and wires
        return None
    leaves, treedef = jax.tree.flatten(op)
    return treedef, tuple(_aval(x) for x in leaves)


def _aval(x) -> tuple:
    if isinstance(x, (jax.Array, np.ndarray)):  # the common case first: tracers are jax.Arrays too
        return x.shape, x.dtype
    if hasattr(x, "shape") and hasattr(x, "dtype"):  # a `_Tag`, a jax.ShapeDtypeStruct
        return tuple(x.shape), np.dtype(x.dtype)
    return np.shape(x), np.result_type(x)


def _codes(ops) -> np.ndarray:
    """One integer per operation, equal for operations that may share a layer; operations that are not
    gates get distinct negative codes, so no run crosses them."""
    table: dict = {}
    out = np.empty(len(ops), np.int64)
    for i, op in enumerate(ops):
        key = _key(op)
        out[i] = -1 - i if key is None else table.setdefault(key, len(table))
    return out


def _best_run(codes: np.ndarray) -> tuple[int, int, int] | None:
    """`(start, period, layers)` of the run of repeated layers covering the most operations (the shortest
    period among equals), or None when no layer repeats."""
    best = None
    n = len(codes)
    for p in range(1, min(n // 2, ROLL_MAX_PERIOD) + 1):
        same = codes[:-p] == codes[p:]
        if not same.any():
            continue
        edges = np.diff(np.concatenate(([0], same.view(np.int8), [0])))
        starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        j = int(np.argmax(stops - starts))
        layers = (stops[j] - starts[j]) // p + 1
        if layers >= 2 and (best is None or layers * p > best[1] * best[2]):
            best = (int(starts[j]), p, int(layers))
    return best


# Stacking many small leaves traced under the user's `jax.jit` (a flat list's `theta[l, i]`, one per gate):
# as one `jnp.stack`, XLA's CPU compiler merges the concatenation of every scalar slice into one kernel
# whose compile time and memory grow with the number of gates (the flat rows of `benchmarks/first_call.py`).
# Concatenated in groups of `_STACK_ARITY`, each level behind an optimisation barrier (which keeps XLA's
# simplifier from flattening the levels back into one concatenation before the barriers are dropped), the
# kernels stay small. Groups of 16 were as slow as one stack; 4 and 8 alike.
_STACK_ARITY = 4


def _grouped_concatenate(xs: tuple) -> jax.Array:
    ys = [x[None] for x in xs]
    while len(ys) > 1:
        groups = (jnp.concatenate(ys[i : i + _STACK_ARITY]) for i in range(0, len(ys), _STACK_ARITY))
        ys = [jax.lax.optimization_barrier(g) for g in groups]
    return ys[0]


@jax.custom_jvp
def _grouped_stack(xs: tuple) -> jax.Array:
    return _grouped_concatenate(xs)


@_grouped_stack.defjvp
def _grouped_stack_jvp(primals, tangents):
    # The tangent as a plain stack: in reverse mode it is only transposed, to one slice per leaf (the
    # barriers' transposes would be a second tree of kernels).
    (xs,), (dxs,) = primals, tangents
    return _grouped_concatenate(xs), jnp.stack(dxs)


def _device_stack(xs) -> jax.Array:
    """The leaves of one position across the layers (one shape and dtype: `_key`), stacked; keys and
    integers, which have no tangents, as a plain stack."""
    xs = tuple(jnp.asarray(x) for x in xs)
    if not jnp.issubdtype(xs[0].dtype, jnp.inexact):
        return jnp.stack(xs)
    return _grouped_stack(xs)


def _stack(layers: list[Circuit], stack) -> Repeat:
    if not jax.tree.leaves(layers[0]):
        return Repeat(layers[0], len(layers))
    return Repeat(jax.tree.map(lambda *xs: stack(xs), *layers), len(layers))


def roll_ops(ops: tuple, num_wires: int, stack=_device_stack) -> tuple:
    """`ops` with each run of at least `ROLL_MIN_GATES` gates in repeated layers as a `Repeat` block."""
    if len(ops) < ROLL_MIN_GATES:
        return tuple(ops)
    found = _best_run(_codes(ops))
    if found is None or found[1] * found[2] < ROLL_MIN_GATES:
        return tuple(ops)
    start, period, layers = found
    stop = start + period * layers
    blocks = [Circuit(ops[start + k * period : start + (k + 1) * period], num_wires) for k in range(layers)]
    before, after = roll_ops(ops[:start], num_wires, stack), roll_ops(ops[stop:], num_wires, stack)
    return before + (_stack(blocks, stack),) + after


class _Tag:
    """A stand-in for a leaf while a roll is planned: its position among the circuit's leaves (a tuple of
    positions once stacked), with the shape and dtype that the pass reads."""

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, tuple(shape), dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


def _stack_tags(xs) -> _Tag:
    return _Tag(tuple(x.index for x in xs), (len(xs),) + xs[0].shape, xs[0].dtype)


@functools.lru_cache(maxsize=64)
def _plan(treedef, avals: tuple) -> tuple | None:
    """How a circuit of this structure (`avals`: JAX's avals of the leaves, or their shapes and dtypes)
    rolls: the rolled circuit's structure and, for each of its leaves,
    the position of the original leaf or the tuple of positions it stacks; None when nothing rolls."""
    tags = [_Tag(i, *a) if isinstance(a, tuple) else _Tag(i, a.shape, a.dtype) for i, a in enumerate(avals)]
    circuit = jax.tree.unflatten(treedef, tags)
    ops = roll_ops(circuit.ops, circuit.num_wires, _stack_tags)
    if len(ops) == len(circuit.ops):
        return None
    tags, rolled = jax.tree.flatten(Circuit(ops, circuit.num_wires))
    return rolled, tuple(t.index for t in tags)


def roll(circuit: Circuit) -> Circuit:
    """`circuit` with its repeated layers of gates as `Repeat` blocks (see the module's docstring); the
    circuit itself when nothing repeats."""
    ops = roll_ops(circuit.ops, circuit.num_wires)
    if len(ops) == len(circuit.ops):
        return circuit
    return Circuit(ops, circuit.num_wires)


def roll_on_host(circuit: Circuit, flat: tuple | None = None) -> tuple[Circuit, tuple | None]:
    """`roll(circuit)` for concrete leaves (an eager call): the plan is cached per structure and the layers'
    leaves are stacked with NumPy, with no device kernel to run or compile. Also returns where each leaf of
    the rolled circuit comes from: for each, the position of the original leaf or the tuple of positions
    that it stacks (None when nothing rolls). `flat`: `jax.tree.flatten(circuit)`, where the caller has
    it already."""
    leaves, treedef = jax.tree.flatten(circuit) if flat is None else flat
    try:  # JAX's avals where every leaf is an array: read a few times faster than shapes and dtypes
        avals = tuple(x.aval for x in leaves)
    except AttributeError:
        avals = tuple(_aval(x) for x in leaves)
    plan = _plan(treedef, avals)
    if plan is None:
        return circuit, None
    rolled, index = plan
    host = [
        np.stack([np.asarray(leaves[i]) for i in k]) if isinstance(k, tuple) else leaves[k] for k in index
    ]
    return jax.tree.unflatten(rolled, host), index
