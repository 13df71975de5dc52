"""From a circuit to operand values: gate tensors computed per kind under one vmap."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._circuit import Repeat
from .._custom_types import complex_dtype
from .._gates import AbstractGate
from ._network import _COPY, _PAULI

# --- from a circuit to operands ----------------------------------------------------------------


def _skeleton(ops) -> tuple[tuple[int, ...], ...]:
    """The wires of each unrolled gate: all that the network's shape depends on. Reads no leaves."""
    out: list[tuple[int, ...]] = []
    for op in ops:
        if isinstance(op, Repeat):
            out.extend(_skeleton(op.body.ops) * op.length)
        elif not isinstance(op, AbstractGate):
            raise ValueError(
                "backend=qfx.TensorNetwork() contracts gates and Repeat blocks only, not "
                f"{type(op).__name__} (control flow or a mid-circuit measurement); use the state vector "
                "(backend=qfx.StateVector(), the default)."
            )
        else:
            out.append(op.wires)
    return tuple(out)


def _unroll(ops) -> list[tuple[AbstractGate, int | None]]:
    """The gates in the order of `_skeleton`, as `(gate, layer)`: a gate of a `Repeat` body keeps its
    stacked leaves and says which layer it is; other gates have layer None."""
    out: list[tuple[AbstractGate, int | None]] = []
    for op in ops:
        if not isinstance(op, Repeat):
            out.append((op, None))
            continue
        op.check_layers()
        if any(isinstance(inner, Repeat) for inner in op.body.ops):
            for i in range(op.length):  # nested blocks: slice the outer layers
                out.extend(_unroll(op.layer(i).ops))
        else:
            out.extend((gate, i) for i in range(op.length) for gate in op.body.ops)
    return out


# Static fields that hold wires. A gate's matrix depends on how many wires it has, not on which, so
# gates that differ only in these fields share one vectorised matrix computation.
_WIRE_FIELDS = ("_wires", "controls")


def _kind(gate, stacked: bool) -> tuple:
    """What `gate.matrix()` depends on besides its leaves' values: type, static fields, leaf shapes."""
    parts: list = [type(gate), len(gate.wires)]
    for field in dataclasses.fields(gate):
        value = getattr(gate, field.name)
        if field.name in _WIRE_FIELDS:
            continue
        if isinstance(value, AbstractGate):
            parts.append((field.name, _kind(value, stacked)))
        elif field.metadata.get("static", False):
            parts.append((field.name, value))
        else:
            shape = tuple(np.shape(value))
            dtype = value.dtype if hasattr(value, "dtype") else np.result_type(value)
            parts.append((field.name, shape[1:] if stacked else shape, np.dtype(dtype)))
    return tuple(parts)


class _Operands:
    """Operand values from recipes. Gate tensors are computed per kind of gate, under one `vmap` over
    all the gates of that kind that the networks use (one computation for 60 RY gates, not 60)."""

    def __init__(self, unrolled, needed, bits=None):
        self.dtype = complex_dtype()
        self.bits = bits
        # Group the distinct gate objects (a Repeat body gate stands for all its layers) by kind.
        sources: dict[int, tuple[AbstractGate, bool]] = {}
        for i in needed:
            gate, layer = unrolled[i]
            sources.setdefault(id(gate), (gate, layer is not None))
        kinds: dict[tuple, list[int]] = {}
        for key, (gate, stacked) in sources.items():
            kinds.setdefault(_kind(gate, stacked), []).append(key)
        self.tensors: dict[tuple, Array] = {}  # (kind, conj) -> (count, 2, ..., 2), or (2, ..., 2)
        self.where: dict[int, tuple[tuple, int | None]] = {}  # unrolled index -> (kind, row or None)
        offsets: dict[int, int] = {}
        for kind, keys in kinds.items():
            gates = [sources[k] for k in keys]
            gate0 = gates[0][0]
            k = len(gate0.wires)
            treedef = jax.tree.structure(gate0)
            if not jax.tree.leaves(gate0):  # a constant gate (CNOT, H, ...): one tensor for all
                self.tensors[kind, False] = _gate_tensor(gate0, self.dtype)
                for key in keys:
                    offsets[key] = -1
                continue
            columns, total = [], 0
            for key, (gate, stacked) in zip(keys, gates, strict=True):
                leaves = jax.tree.leaves(gate)
                columns.append([jnp.asarray(x) if stacked else jnp.asarray(x)[None] for x in leaves])
                offsets[key] = total
                total += leaves[0].shape[0] if stacked else 1
            stacked_leaves = [jnp.concatenate(col) for col in zip(*columns, strict=True)]

            def matrices(*leaves, treedef=treedef):
                return _gate_tensor(jax.tree.unflatten(treedef, leaves), self.dtype)

            self.tensors[kind, False] = jax.vmap(matrices)(*stacked_leaves).reshape((total,) + (2,) * (2 * k))
        for i in needed:
            gate, layer = unrolled[i]
            kind = _kind(gate, layer is not None)
            offset = offsets[id(gate)]
            self.where[i] = (kind, None if offset < 0 else offset + (layer or 0))

    def _table(self, kind, conj: bool) -> Array:
        if (kind, conj) not in self.tensors:
            self.tensors[kind, conj] = jnp.conj(self.tensors[kind, False])
        return self.tensors[kind, conj]

    def const(self, entry) -> np.ndarray | None:
        """The value of a recipe entry that does not depend on the circuit, else None."""
        if entry[0] == "zero":
            return np.array([1, 0], self.dtype)
        if entry[0] == "pauli":
            return _PAULI[entry[1]].astype(self.dtype)
        if entry[0] == "copy":
            return _COPY.astype(self.dtype)
        return None

    def one(self, entry, term=None) -> Array:
        """The operand of one network."""
        kind = entry[0]
        if kind == "gate":
            _, i, conj = entry
            gkind, row = self.where[i]
            table = self._table(gkind, conj)
            return table if row is None else table[row]
        if kind == "hermitian":
            return term.matrix.astype(self.dtype).reshape((2,) * (2 * len(term.wires)))
        if kind == "bit":
            b = self.bits[entry[1]]
            return jnp.stack([1 - b, b]).astype(self.dtype)
        return jnp.asarray(self.const(entry))

    def many(self, entries, terms) -> tuple[Array, int | None]:
        """The operands of several networks of one shape, stacked on axis 0 (or shared: axis None)."""
        first = entries[0]
        if self.const(first) is not None and all(e == first for e in entries):
            return jnp.asarray(self.const(first)), None
        if all(e[0] == "gate" and e[2] == first[2] for e in entries):
            places = [self.where[e[1]] for e in entries]
            kind = places[0][0]
            if all(p[0] == kind for p in places):
                table = self._table(kind, first[2])
                rows = [p[1] for p in places]
                if rows[0] is None:
                    return table, None
                if all(r == rows[0] for r in rows):
                    return table[rows[0]], None
                # Static slices, not a gather: XLA:CPU (jaxlib 0.10) miscompiles a dot of a gathered
                # operand under nested vmap (an HLO verifier error).
                steps = {b - a for a, b in itertools.pairwise(rows)}
                if len(steps) == 1 and (step := steps.pop()) > 0:
                    return table[rows[0] : rows[-1] + 1 : step], 0
                return jnp.stack([table[r] for r in rows]), 0
        return jnp.stack([self.one(e, t) for e, t in zip(entries, terms, strict=True)]), 0


def _gate_tensor(gate: AbstractGate, dtype) -> Array:
    return gate.matrix().astype(dtype).reshape((2,) * (2 * len(gate.wires)))


def _needed(nets) -> set[int]:
    return {e[1] for net in nets for e in net.recipe if e[0] == "gate"}
