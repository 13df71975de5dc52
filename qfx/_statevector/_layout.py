"""Where each qubit of a sharded state vector lives, and the swaps that move qubits between devices.

A state of `n` qubits sharded over `k = 2**g` devices keeps the amplitudes whose top `g` index bits equal
the device's index on that device: the `g` leading *physical positions* are global (device bits), the
other `n - g` local (index bits of each device's `2**(n - g)` amplitudes). A *layout* says which logical
wire sits at each position. It starts as the identity (wire `w` at position `w`) and changes only by
swaps of a global position with a local one (`Swap`: half of each device's amplitudes go to the device
whose bit differs, as cuStateVec's distributed index-bit swap does) and by transposes of the local axes
(`Permute`, no communication).

`schedule` turns a circuit's operations into a static program of `LocalRun`s (gates relabelled to local
axes), `Swap`s, `Permute`s and `Loop`s (`Repeat` blocks, one `lax.scan`), with the swaps chosen at trace
time from the whole circuit: a gate acts where its wires are local; one that is diagonal on its global
wires (a diagonal gate, or a control) acts on the device's slice of its matrix without moving anything;
otherwise each global wire it needs is swapped with the local wire used furthest in the future (Belady's
rule over the rest of the circuit). The schedule reads structure only, never values; the kernels that run
it are `_distributed.py`'s.
"""

import functools
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._circuit import Repeat
from .._gates import AbstractGate


class Relabeled(AbstractGate):
    """A gate `base` on other wires: `wires[i]` for its `i`-th wire. Made here only (a local view)."""

    base: AbstractGate
    mapped: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return self.mapped

    def _map(self, wires):
        return tuple(self.mapped[self.base.wires.index(w)] for w in wires)

    def matrix(self) -> Array:
        return self.base.matrix()

    def diagonal(self):
        return self.base.diagonal()

    def permutation(self):
        return self.base.permutation()

    def control(self):
        c = self.base.control()
        if c is None:
            return None
        controls, values, target = c
        return self._map(controls), values, Relabeled(target, self._map(target.wires))

    def adjoint(self):
        return Relabeled(self.base.adjoint(), self.mapped)


class DeviceSlice(AbstractGate):
    """A gate `base` that is diagonal on some of its wires, which are global: on each device, the block of
    its matrix at the device's bits of those wires, a gate on its other (local) wires. `at` are the
    indices (into `base.wires`) of the global wires, `bits` the device-index bit of each (0 the most
    significant of `g`), `mapped` the local wires of the others (a gate wholly on global wires is a phase:
    then `mapped` holds one local wire, on which it acts as that phase times the identity). Only valid
    traced inside `shard_map` over `axis`. Made here only."""

    base: AbstractGate
    at: tuple[int, ...] = eqx.field(static=True)
    bits: tuple[int, ...] = eqx.field(static=True)
    mapped: tuple[int, ...] = eqx.field(static=True)
    axis: str = eqx.field(static=True)
    g: int = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return self.mapped

    def matrix(self) -> Array:
        k = len(self.base.wires)
        m = self.base.matrix().reshape((2,) * (2 * k))
        device = jax.lax.axis_index(self.axis)
        # Index the row and the column axis of each global wire at the device's bit, the last wire first:
        # after j of them, the column axes start j places earlier.
        for j, (i, b) in enumerate(sorted(zip(self.at, self.bits, strict=True), reverse=True)):
            bit = (device >> (self.g - 1 - b)) & 1
            m = jax.lax.dynamic_index_in_dim(m, bit, axis=k - j + i, keepdims=False)
            m = jax.lax.dynamic_index_in_dim(m, bit, axis=i, keepdims=False)
        rest = k - len(self.at)
        block = m.reshape(2**rest, 2**rest)
        if rest == 0:  # a phase: on one local wire
            return block[0, 0] * jnp.eye(2, dtype=block.dtype)
        return block


class Swap(eqx.Module):
    """Exchanges the qubits at global position `p` and local axis `q` (a device-pair exchange)."""

    p: int = eqx.field(static=True)
    q: int = eqx.field(static=True)


class Permute(eqx.Module):
    """Transposes the local axes: local axis `j` afterwards is local axis `perm[j]` before."""

    perm: tuple[int, ...] = eqx.field(static=True)


class LocalRun(eqx.Module):
    """Gates on the local axes of each device's amplitudes, run by the state-vector pipeline."""

    ops: list


class Loop(eqx.Module):
    """A `Repeat` block: `body` (items with leaves stacked over `length` layers) under `lax.scan`; the
    body ends in the layout it started with."""

    body: list
    length: int = eqx.field(static=True)


class _Shape:
    """What the schedule needs to know of a gate: the wires it acts on other than diagonally (the ones it
    needs local). A gate is diagonal on a wire when its matrix has no entry between states that differ
    there: a control, or any wire of a diagonal gate."""

    def __init__(self, gate: AbstractGate):
        leaves, treedef = jax.tree.flatten(gate)
        spec = tuple((tuple(np.shape(x)), np.dtype(x.dtype)) for x in leaves)
        self.needs = frozenset(gate.wires[i] for i in _needs(treedef, spec))


@functools.lru_cache(maxsize=4096)
def _needs(treedef, spec) -> tuple[int, ...]:
    """The wires (positions in the gate's order) on which a gate of this structure is not diagonal, read
    from the zero pattern of its matrix at generic parameter values (structure, not values: a rotation at
    angle 0 still counts as dense)."""
    rng = np.random.default_rng(0)
    probe = []
    for shape, dtype in spec:
        x = rng.uniform(0.3, 1.3, shape)
        if np.issubdtype(dtype, np.complexfloating):
            x = x + 1j * rng.uniform(0.3, 1.3, shape)
        probe.append(x.astype(dtype))
    with jax.ensure_compile_time_eval():
        m = np.asarray(jax.tree.unflatten(treedef, probe).matrix()) != 0
    k = round(np.log2(m.shape[0]))
    t = m.reshape((2,) * (2 * k))
    needs = []
    for i in range(k):
        flips = np.take(np.take(t, 0, axis=k + i), 1, axis=i) | np.take(np.take(t, 1, axis=k + i), 0, axis=i)
        if flips.any():
            needs.append(i)
    return tuple(needs)


def shapes(ops) -> list:
    """`_Shape`s of `ops`, a `Repeat` block as the list of its body's (read from its first layer: the
    body's leaves are stacked, and a gate's structure does not depend on its values)."""
    out = []
    for op in ops:
        if isinstance(op, Repeat):
            out.append(shapes(jax.tree.map(lambda x: x[0], op.body.ops)))
        else:
            out.append(_Shape(op))
    return out


def _uses(shape, w: int) -> bool:
    """Whether the gate (or block) of `shape` needs wire `w` local."""
    if isinstance(shape, list):
        return any(_uses(s, w) for s in shape)
    return w in shape.needs


class _Layout:
    def __init__(self, n: int, g: int, axis: str):
        self.n, self.g, self.axis = n, g, axis
        self.at = list(range(n))  # the logical wire at each physical position
        self.pos = list(range(n))  # the physical position of each logical wire

    def swap(self, p: int, q: int) -> Swap:
        a, b = self.at[p], self.at[q]
        self.at[p], self.at[q] = b, a
        self.pos[a], self.pos[b] = q, p
        return Swap(p, q - self.g)

    def local(self, w: int) -> int:
        return self.pos[w] - self.g

    def restore(self, target: list[int]) -> list:
        """The items that bring this layout to `target` (the logical wire at each position)."""
        items = []
        for p in range(self.g):
            x = self.pos[target[p]]
            if x == p:
                continue
            if x < self.g:  # in another global position (not yet placed): through a local one
                items.append(self.swap(x, self.g))
                x = self.g
            items.append(self.swap(p, x))
        if self.at[self.g :] != target[self.g :]:
            perm = tuple(self.pos[target[q]] - self.g for q in range(self.g, self.n))
            items.append(Permute(perm))
            self.at = list(target)
            for q, w in enumerate(target):
                self.pos[w] = q
        return items


def _victim(layout: _Layout, busy: set[int], future: list) -> int:
    """The local position to swap a global qubit into: the one whose wire is needed local latest."""
    best, best_t = None, -1
    for q in range(layout.g, layout.n):
        if q in busy:
            continue
        w = layout.at[q]
        t = next((i for i, shape in enumerate(future) if _uses(shape, w)), len(future))
        if t > best_t:
            best, best_t = q, t
            if t == len(future):
                break
    return best


def _gate(op: AbstractGate, shape: _Shape, layout: _Layout, future: list, items: list) -> None:
    g = layout.g
    positions = [layout.pos[w] for w in op.wires]
    far = [i for i, p in enumerate(positions) if p < g]
    needed = [i for i in far if op.wires[i] in shape.needs]  # global wires it acts on non-diagonally
    if needed:
        width = len(positions) - len(far) + len(needed)
        if width > layout.n - g:
            raise ValueError(
                f"{op!r} needs {width} of its wires on each device, but a state of {layout.n} wires sharded "
                f"over {2**g} devices keeps {layout.n - g} there; use fewer devices (a smaller mesh axis)."
            )
        busy = {p for p in positions if p >= g}
        for i in needed:
            q = _victim(layout, busy, future)
            items.append(layout.swap(positions[i], q))
            busy.add(q)
        positions = [layout.pos[w] for w in op.wires]
        far = [i for i, p in enumerate(positions) if p < g]
    if not far:
        _append(items, Relabeled(op, tuple(p - g for p in positions)))
        return
    # Diagonal on its global wires (a diagonal gate, or controls): the device's block, nothing moves.
    near = [p - g for p in positions if p >= g]
    slice_ = DeviceSlice(op, tuple(far), tuple(positions[i] for i in far), tuple(near or [0]), layout.axis, g)
    _append(items, slice_)


def _append(items: list, gate) -> None:
    if items and isinstance(items[-1], LocalRun):
        items[-1].ops.append(gate)
    else:
        items.append(LocalRun([gate]))


def _schedule(ops, shapes: list, layout: _Layout, future: list) -> list:
    items: list = []
    for i, (op, shape) in enumerate(zip(ops, shapes, strict=True)):
        rest = shapes[i + 1 :] + future
        if isinstance(op, Repeat):
            start = list(layout.at)
            # The body's own future is its next layer, then what follows the block.
            body = _schedule(op.body.ops, shape, layout, shape + rest)
            body += layout.restore(start)
            items.append(Loop(body, op.length))
        elif isinstance(op, AbstractGate):
            _gate(op, shape, layout, rest, items)
        else:  # pragma: no cover  (the backend refuses other operations before)
            raise AssertionError(op)
    return items


def schedule(ops, n: int, g: int, axis: str, structure: list | None = None) -> list:
    """The program of `ops` (gates and `Repeat` blocks on `n` wires) on a state whose first `g` positions
    are global, ending in the identity layout.

    `structure` is `shapes(ops)`, read outside `shard_map` (it evaluates the gates' matrices at probe
    values, which JAX refuses inside it) by the caller that then schedules inside."""
    layout = _Layout(n, g, axis)
    ops = list(ops)
    items = _schedule(ops, shapes(ops) if structure is None else structure, layout, [])
    return items + layout.restore(list(range(n)))


def swap_count(items: list) -> int:
    """The swaps of a program, a `Loop`'s body counted once."""
    return sum(swap_count(i.body) if isinstance(i, Loop) else isinstance(i, Swap) for i in items)
