"""`qfx.specs`: what a circuit holds and what simulating it needs, counted from its structure without
running it."""

from collections import Counter
from collections.abc import Mapping
import dataclasses
import types

import equinox as eqx
import jax
import numpy as np

from ._channels import AbstractChannel, has_channels
from ._circuit import Circuit, Repeat, _check_is_circuit
from ._control import Cond, ForLoop, MidMeasure, Program, WhileLoop, has_control
from ._custom_types import complex_dtype
from ._measure import _observables
from ._memory import format_bytes
from ._tensornet import TensorNetwork

# --- depth, as a longest path through the wires -------------------------------------------------------
#
# The effect of a sequence of operations on the depth reached on each wire is a max-plus linear map:
# `T[w][v]` is the longest chain of operations from the start of wire `v` to the end of wire `w` (absent:
# no chain; a wire with no row passes through unchanged). Sequences compose by max-plus products, so a
# block of `L` layers is the `L`-th power of its layer, by squaring: exact for any `L` in `log L` products.


def _after_gate(t: dict, wires) -> dict:
    merged: dict = {}
    for u in wires:
        for v, d in t.get(u, {u: 0}).items():
            merged[v] = max(merged.get(v, -1), d)
    out = dict(t)
    row = {v: d + 1 for v, d in merged.items()}
    for w in wires:
        out[w] = row
    return out


def _then(first: dict, second: dict) -> dict:
    """`second` after `first`."""
    out = dict(first)
    for w, row in second.items():
        merged: dict = {}
        for u, d in row.items():
            for v, e in first.get(u, {u: 0}).items():
                merged[v] = max(merged.get(v, -1), d + e)
        out[w] = merged
    return out


def _power(t: dict, n: int) -> dict:
    out: dict = {}
    while n:
        if n & 1:
            out = _then(out, t)
        t = _then(t, t)
        n >>= 1
    return out


def _longest(ts: list[dict]) -> dict:
    """The deepest of alternatives (branches), wire by wire."""
    out: dict = {}
    for w in {w for t in ts for w in t}:
        merged: dict = {}
        for t in ts:
            for v, d in t.get(w, {w: 0}).items():
                merged[v] = max(merged.get(v, -1), d)
        out[w] = merged
    return out


def _depth(t: dict) -> int:
    return max((d for row in t.values() for d in row.values()), default=0)


class _Counter:
    """Counts the operations run, with `Repeat` blocks and loops of static length expanded."""

    def __init__(self):
        self.gates: Counter = Counter()
        self.channels: Counter = Counter()  # noise channels, counted apart from the gates
        self.by_size: Counter = Counter()  # gates by their number of wires
        self.measurements = 0
        self.notes: list[str] = []

    def visit(self, ops, times: int) -> dict:
        """Counts `ops` run `times` times; returns their depth map (see above)."""
        t: dict = {}
        for op in ops:
            if isinstance(op, Repeat):
                t = _then(
                    t, _power(self._one_layer(op.body, times * op.length), op.length) if op.length else {}
                )
            elif isinstance(op, ForLoop):
                if op.length is not None:
                    layer = self.visit(op.skeleton(), times * op.length) if op.length else {}
                    t = _then(t, _power(layer, op.length))
                else:
                    self._unknown(op.skeleton(), f"a for_loop on wires {op.wires} with a traced length")
            elif isinstance(op, WhileLoop):
                bound = "unbounded" if op.max_iterations is None else f"at most {op.max_iterations}"
                self._unknown(op.body.ops, f"a while_loop on wires {op.wires} ({bound})")
            elif isinstance(op, Cond):
                branches = [self.visit(b.ops, times) for b in op.branches]
                t = _then(t, _longest(branches))
                if sum(1 for b in op.branches if b.ops) > 1:
                    self.notes.append(
                        f"A conditional on wires {op.wires}: the gates of all its {len(op.branches)} "
                        "branches are counted, but one runs; the depth is its deepest branch's."
                    )
            elif isinstance(op, AbstractChannel):
                self.channels[op.name] += times
                t = _after_gate(t, op.wires)
            elif isinstance(op, MidMeasure):
                self.measurements += times
                t = _after_gate(t, op.wires)
            else:
                self.gates[op.name] += times
                self.by_size[len(op.wires)] += times
                t = _after_gate(t, op.wires)
        return t

    def _one_layer(self, body: Circuit, times: int) -> dict:
        """A `Repeat` layer, traced from the first layer's shapes (a loop inside calls its body)."""
        out = {}

        def trace(body):
            out["t"] = self.visit(jax.tree.map(lambda x: x[0], body).ops, times)

        jax.eval_shape(trace, body)
        return out["t"]

    def _unknown(self, ops, what: str) -> None:
        """A loop whose trip count is decided at run time: its body, per iteration, in a note."""
        inner = _Counter()
        depth = _depth(inner.visit(ops, 1))
        gates = sum(inner.gates.values())
        self.notes.append(
            f"{what[0].upper()}{what[1:]}: {_plural(gates, 'gate')}, "
            f"{_plural(inner.measurements, 'measurement')} and depth {depth} per iteration, not in the "
            "totals: its number of iterations is known only at run time."
        )
        self.notes.extend(inner.notes)


def _plural(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def _index_leaves(ops) -> list:
    """The leaves that hold a traced branch index or trip count (float leaves, but not parameters)."""
    out = []
    for op in ops:
        if isinstance(op, Cond):
            out += [op.index] if op.index is not None else []
            out += [x for b in op.branches for x in _index_leaves(b.ops)]
        elif isinstance(op, ForLoop):
            out += [op.num_iterations] if op.num_iterations is not None else []
        elif isinstance(op, (Repeat, WhileLoop)):
            out += _index_leaves(op.body.ops)
    return out


@dataclasses.dataclass(frozen=True)
class Specs:
    """What `qfx.specs` returns; `print` it for a summary. Counts are of operations run: `Repeat` blocks
    and `for_loop`s of static length count each layer (iteration).

    **Fields:**

    - `num_wires`: the circuit's wires.
    - `num_gates`, `gate_counts` (by kind, e.g. `{"CNOT": 4, "RY": 6}`), `num_two_qubit_gates`,
      `num_multi_qubit_gates` (three wires or more), `num_measurements` (mid-circuit).
    - `depth`: the longest chain of operations through the wires (measurements included; the classical
      wires of conditions are not).
    - `num_trainable_parameters`: the elements of the circuit's floating-point array leaves (what
      `jax.grad` differentiates), without the leaves that hold a traced branch index or trip count.
    - `memory`: bytes by backend (see `qfx.specs`); None where a backend cannot run the circuit.
    - `num_channels`, `channel_counts`: noise channels (not counted as gates), by kind.
    - `notes`: what the counts leave out or count in a particular way (while loops, conditionals).
    """

    num_wires: int
    num_gates: int
    gate_counts: Mapping[str, int]
    num_two_qubit_gates: int
    num_multi_qubit_gates: int
    num_measurements: int
    num_channels: int
    channel_counts: Mapping[str, int]
    depth: int
    num_trainable_parameters: int
    memory: Mapping[str, int | None]
    notes: tuple[str, ...]

    def __str__(self):
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.gate_counts.items())) or "none"
        lines = [
            f"wires: {self.num_wires}",
            f"gates: {self.num_gates} ({kinds})",
            f"two-qubit gates: {self.num_two_qubit_gates}",
            f"gates on three or more wires: {self.num_multi_qubit_gates}",
            f"mid-circuit measurements: {self.num_measurements}",
        ]
        if self.num_channels:
            noise = ", ".join(f"{k} {v}" for k, v in sorted(self.channel_counts.items()))
            lines.append(f"noise channels: {self.num_channels} ({noise})")
        lines += [
            f"depth: {self.depth}",
            f"trainable parameters: {self.num_trainable_parameters}",
        ]
        lines += [
            f"memory, {k}: " + ("cannot run this circuit" if v is None else format_bytes(v))
            for k, v in self.memory.items()
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def specs(circuit: Circuit, observable=None) -> Specs:
    """Counts a circuit's gates, depth and parameters, and the memory each backend would need to run it.

    Nothing is simulated: the counts come from the structure. `Repeat` blocks and `for_loop`s of static
    length are expanded (a block of 1000 layers counts each layer, without unrolling); a `while_loop` or a
    `for_loop` of traced length has no static count: its body is described per iteration in `notes`, and
    left out of the totals. A conditional counts the gates of all its branches (one runs) and the depth of
    its deepest.

    Memory (bytes, in the default complex dtype: complex64, or complex128 under `jax_enable_x64`):

    - `"state vector"`: one state of `2**num_wires` amplitudes, what `qfx.state` returns.
    - `"StateVector"`: a simulation by the default backend keeps two (each gate reads one and writes the
      other); this is what qfx checks before allocating. With mid-circuit measurements, that is
      `mcm="sampled"`; `"StateVector(mcm='exact')"` is then the classical-quantum state, a density matrix per
      record of outcomes: `2**records * 4**num_wires` entries.
    - A circuit holding noise channels: `"DensityMatrix"`, the two `4**num_wires`-entry mixed states its
      simulation keeps, and `"Trajectories"`, one trajectory's two state vectors (times the number of
      trajectories run at once under `vmap`); `"StateVector"` and `"TensorNetwork"` are None (they refuse
      channels).
    - `"TensorNetwork"`, when `observable` is given: the largest intermediate tensor of the networks that
      `qfx.expval(circuit, observable, backend=qfx.TensorNetwork())` contracts, found by its path
      optimizer (opt_einsum, as that backend does: from milliseconds for a shallow light cone to seconds
      for thousands of gates); None for circuits with control flow, which that backend refuses.

    Derivatives need more: `qfx.diff.Adjoint()` a few more state vectors whatever the depth, reverse-mode
    backpropagation what XLA keeps for the backward pass (about one state per layer of a `Repeat` block).
    These are not estimated here.

    **Arguments:**

    - `circuit`: a `qfx.Circuit`.
    - `observable`: an observable or a list of them, for the tensor-network estimate (optional: without
      it, no tensor-network estimate, which depends on the observable's light cone).

    **Returns:** a frozen `qfx.Specs` dataclass; `print(qfx.specs(circuit))` shows a summary.

    ```python
    layer = lambda t: [qfx.RY(t[0], wires=0), qfx.RY(t[1], wires=1), qfx.CNOT(wires=(0, 1))]
    circ = qfx.Circuit([qfx.H(0), qfx.repeat(layer, jnp.ones((10, 2)))])
    s = qfx.specs(circ, qfx.Z(0) @ qfx.Z(1))
    s.num_gates, s.depth, s.num_trainable_parameters  # 31, 21, 20
    print(s)
    ```
    """
    _check_is_circuit(circuit, "specs")
    counter = _Counter()
    depth = _depth(counter.visit(circuit.ops, 1))
    params = eqx.filter(circuit, eqx.is_inexact_array)
    indices = sum(np.size(x) for x in _index_leaves(circuit.ops))
    num_params = sum(np.size(x) for x in jax.tree.leaves(params)) - indices

    n, itemsize = circuit.num_wires, complex_dtype().itemsize
    memory: dict[str, int | None] = {"state vector": 2**n * itemsize, "StateVector": 2 * 2**n * itemsize}
    control = has_control(circuit.ops)
    noisy = has_channels(circuit.ops)
    if noisy:
        memory = {"state vector": None, "StateVector": None, "DensityMatrix": 2 * 4**n * itemsize}
        memory["Trajectories"] = 2 * 2**n * itemsize
    if control:
        records = len(Program(circuit.ops).slots)
        if records and not noisy:
            memory["StateVector(mcm='exact')"] = 2 ** (records + 2 * n) * itemsize
    if observable is not None:
        lcs = _observables(circuit, observable, "specs")[0]
        if control or noisy:
            memory["TensorNetwork"] = None
        else:
            memory["TensorNetwork"] = TensorNetwork().largest_intermediate(circuit, lcs) * itemsize
    return Specs(
        num_wires=n,
        num_gates=sum(counter.gates.values()),
        gate_counts=types.MappingProxyType(dict(counter.gates)),
        num_two_qubit_gates=counter.by_size[2],
        num_multi_qubit_gates=sum(v for k, v in counter.by_size.items() if k > 2),
        num_measurements=counter.measurements,
        num_channels=sum(counter.channels.values()),
        channel_counts=types.MappingProxyType(dict(counter.channels)),
        depth=depth,
        num_trainable_parameters=int(num_params),
        memory=types.MappingProxyType(memory),
        notes=tuple(dict.fromkeys(counter.notes)),
    )
