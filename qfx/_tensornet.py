"""The tensor-network backend: expectations, amplitudes and marginals without a state vector.

A state vector stops fitting at about 30 qubits; a shallow circuit measured by local observables stays a
small tensor network far beyond that. `qfx.TensorNetwork()` is passed as `backend=` to `qfx.expval`,
`qfx.probs` and `qfx.amplitude`:

- each Pauli word (or Hermitian term) becomes the network of `<0|C^dagger O C|0>`, keeping only the gates
  in the term's backward light cone (the others cancel against their adjoints);
- a marginal `p(x_W)` is the same network with a copy tensor joining the ket, the bra and an open index on
  each measured wire; an amplitude `<b|C|0>` is the ket network closed by one-hot vectors;
- each network gets its contraction path once per structure, from opt_einsum on shapes alone, outside any
  trace; paths are cached on the wires of the (unrolled) gates and on the task, never on parameters;
- networks of the same shape (the interior terms of a translation-invariant sum, say) are stacked and
  contracted together, as one network with a batch index;
- the contraction is `jnp.einsum` along that path (so backprop, `jit` and `vmap` just work), or
  NVIDIA cuTensorNet (`contractor="cutensornet"`, see `qfx/_cutensornet.py`).

Every index has extent 2; gate tensors are `matrix()` reshaped to `(2,) * 2k` (outputs first, wire 0 of
the gate most significant), so controlled and diagonal gates need no special case.
"""

from collections.abc import Sequence
import copy
import dataclasses
import functools
import itertools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike
import numpy as np
import opt_einsum

from . import _cutensornet, _kernels
from ._circuit import Circuit, Repeat, check_circuit
from ._control_run import has_control, run_control
from ._custom_types import (
    EXACT,
    as_dtype,
    as_numeric,
    complex_dtype,
    is_concrete,
    real_dtype,
    with_auto_axes,
)
from ._gates import AbstractGate
from ._observables import Hermitian, LinearCombination, PauliWord
from .diff import AbstractDiffMethod, Backprop, FiniteDiff, ParameterShift
from .diff._parameter_shift import _gate_rules
from .diff._shifts import check_rules, instantiate, is_zero, leaves_with_zeros, shifted_jvp

_PAULI = {
    "X": np.array([[0, 1], [1, 0]]),
    "Y": np.array([[0, -1j], [1j, 0]]),
    "Z": np.array([[1, 0], [0, -1]]),
}
_COPY = np.zeros((2, 2, 2))
_COPY[0, 0, 0] = _COPY[1, 1, 1] = 1
_BACKPROP = Backprop()
# How many networks of one structure are kept (each holds an equation and a path).
_CACHE_SIZE = 4096


# --- the network -----------------------------------------------------------------------------------
#
# A network is static: the modes of each operand, the output modes, a recipe saying where each operand's
# values come from, and the contraction path. Recipes:
#   ("zero",)            |0> on one wire
#   ("gate", i, conj)    gate i of the unrolled circuit as a (2,)*2k tensor, conjugated on the bra side
#   ("pauli", letter)    a Pauli matrix (bra index, ket index)
#   ("hermitian",)       the term's matrix as a (2,)*2k tensor (bra indices, ket indices)
#   ("copy",)            the (2, 2, 2) copy tensor that opens a measured wire
#   ("bit", w)           the one-hot vector of bit w of the bitstring


class _Network(eqx.Module):
    inputs: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    output: tuple[int, ...] = eqx.field(static=True)
    recipe: tuple[tuple, ...] = eqx.field(static=True)
    path: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    flops: float = eqx.field(static=True)
    # The number of entries of the largest intermediate tensor along the path.
    largest: int = eqx.field(static=True)

    @property
    def equation(self) -> str:
        sym = opt_einsum.get_symbol
        ins = ",".join("".join(sym(m) for m in modes) for modes in self.inputs)
        return ins + "->" + "".join(sym(m) for m in self.output)

    @property
    def shape_key(self) -> tuple:
        """Networks with equal keys contract the same way and can be stacked."""
        return self.inputs, self.output, self.path


def _light_cone(skeleton: tuple[tuple[int, ...], ...], wires) -> tuple[tuple[int, ...], set[int]]:
    """The gates (indices into the skeleton) that can influence `wires` at the end, and their wires."""
    live = set(wires)
    keep = []
    for i in reversed(range(len(skeleton))):
        if live.intersection(skeleton[i]):
            keep.append(i)
            live.update(skeleton[i])
    return tuple(reversed(keep)), live


def _sandwich(skeleton, wires) -> tuple[list, list, dict, dict, itertools.count]:
    """The ket and bra halves of `<0|C^dagger . C|0>` on the light cone of `wires`, left open at the end.

    Returns the operand modes, their recipes, the final ket and bra mode of each wire in the cone, and
    the mode counter."""
    keep, cone = _light_cone(skeleton, wires)
    cone = sorted(cone)
    new = itertools.count()
    inputs, recipe = [], []
    finals = []
    for conj in (False, True):
        mode = {w: next(new) for w in cone}
        for w in cone:
            inputs.append((mode[w],))
            recipe.append(("zero",))
        for i in keep:
            gw = skeleton[i]
            outs = tuple(next(new) for _ in gw)
            inputs.append(outs + tuple(mode[w] for w in gw))
            recipe.append(("gate", i, conj))
            mode.update(zip(gw, outs, strict=True))
        finals.append(mode)
    return inputs, recipe, finals[0], finals[1], new


# The largest networks opt_einsum's exhaustive searches are allowed (a 2-qubit circuit of a few gates already
# makes 9 to 23 tensors). Measured (2-core CPU): 'optimal' 1.2 s at 9 tensors, no end at 13; 'branch-all'
# 0.03 s at 9, 6.3 s at 13; 'branch-2' 0.12 s at 15, no end in 20 s at 23.
_EXHAUSTIVE_MAX_TENSORS = {"optimal": 8, "branch-all": 12, "branch-2": 16}


def _close(inputs, output, recipe, optimize) -> _Network:
    """Renames modes in order of appearance (so congruent networks are equal) and finds the path."""
    names: dict[int, int] = {}
    for m in itertools.chain(*inputs, output):
        names.setdefault(m, len(names))
    inputs = tuple(tuple(names[m] for m in t) for t in inputs)
    output = tuple(names[m] for m in output)
    sym = opt_einsum.get_symbol
    equation = ",".join("".join(sym(m) for m in t) for t in inputs) + "->" + "".join(sym(m) for m in output)
    shapes = [(2,) * len(t) for t in inputs]
    if len(inputs) == 1:
        path, flops, largest = ((0,),), 0.0, 2 ** len(inputs[0])
    else:
        if not isinstance(optimize, str):  # an optimizer object serves one contraction: a copy each
            optimize = copy.deepcopy(optimize)
        elif len(inputs) > _EXHAUSTIVE_MAX_TENSORS.get(optimize, len(inputs)):
            raise ValueError(
                f"TensorNetwork: optimize={optimize!r} searches contraction orders exhaustively, which for "
                f"this network of {len(inputs)} tensors would not finish (it is for at most "
                f"{_EXHAUSTIVE_MAX_TENSORS[optimize]}). Use 'auto' (the default), 'auto-hq' or 'dp'."
            )
        path, info = opt_einsum.contract_path(equation, *shapes, shapes=True, optimize=optimize)
        path, flops, largest = tuple(map(tuple, path)), float(info.opt_cost), int(info.largest_intermediate)
    return _Network(inputs, output, tuple(recipe), path, flops, largest)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _expval_network(skeleton, term: tuple, optimize) -> _Network:
    """`<0|C^dagger T C|0>` for a Pauli word `("pauli", word)` or a matrix `("hermitian", wires)`."""
    kind, spec = term
    wires = tuple(w for w, _ in spec) if kind == "pauli" else spec
    inputs, recipe, ket, bra, _ = _sandwich(skeleton, wires)
    if kind == "pauli":
        for w, letter in spec:
            inputs.append((bra[w], ket[w]))
            recipe.append(("pauli", letter))
    else:
        inputs.append(tuple(bra[w] for w in wires) + tuple(ket[w] for w in wires))
        recipe.append(("hermitian",))
    # The identity on the other wires of the cone joins each bra to its ket.
    join = {bra[w]: ket[w] for w in ket if w not in wires}
    inputs = [tuple(join.get(m, m) for m in t) for t in inputs]
    return _close(inputs, (), recipe, optimize)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _probs_network(skeleton, wires: tuple[int, ...], optimize) -> _Network:
    """`<0|C^dagger (|x><x|_wires (x) I) C|0>` with the bits x of `wires` left open, in that order."""
    inputs, recipe, ket, bra, new = _sandwich(skeleton, wires)
    output = tuple(next(new) for _ in wires)
    for w, out in zip(wires, output, strict=True):
        inputs.append((ket[w], bra[w], out))
        recipe.append(("copy",))
    join = {bra[w]: ket[w] for w in ket if w not in wires}
    inputs = [tuple(join.get(m, m) for m in t) for t in inputs]
    return _close(inputs, output, recipe, optimize)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _amplitude_network(skeleton, num_wires: int, optimize) -> _Network:
    """`<b|C|0>`: the whole circuit (no light cone applies), closed by one-hot vectors."""
    new = itertools.count()
    mode = {w: next(new) for w in range(num_wires)}
    inputs = [(mode[w],) for w in range(num_wires)]
    recipe = [("zero",)] * num_wires
    for i, gw in enumerate(skeleton):
        outs = tuple(next(new) for _ in gw)
        inputs.append(outs + tuple(mode[w] for w in gw))
        recipe.append(("gate", i, False))
        mode.update(zip(gw, outs, strict=True))
    for w in range(num_wires):
        inputs.append((mode[w],))
        recipe.append(("bit", w))
    return _close(inputs, (), recipe, optimize)


def clear_cache() -> None:
    """Forgets every cached network and contraction path."""
    for fn in (_expval_network, _probs_network, _amplitude_network):
        fn.cache_clear()


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
                "(backend=None)."
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


# --- the backend -------------------------------------------------------------------------------


def _check_optimize(optimize):
    if isinstance(optimize, str):
        try:
            opt_einsum.paths.get_path_fn(optimize)
        except KeyError:
            raise ValueError(
                f"TensorNetwork: optimize={optimize!r} is not an opt_einsum path optimizer; use one of "
                "'auto', 'auto-hq', 'greedy', 'random-greedy', 'dp', or an opt_einsum.paths.PathOptimizer "
                "instance ('optimal' and 'branch-*' search exhaustively: only for a few tensors)."
            ) from None
    elif not isinstance(optimize, opt_einsum.paths.PathOptimizer):
        raise TypeError(
            f"TensorNetwork: optimize must be an opt_einsum optimizer name or a PathOptimizer instance, "
            f"got {type(optimize).__name__}."
        )
    return optimize


class TensorNetwork(eqx.Module):
    """The tensor-network backend: pass `backend=qfx.TensorNetwork()` to `qfx.expval`, `qfx.probs` or
    `qfx.amplitude`.

    Each Pauli word of an observable becomes the network `<0|C^dagger P C|0>` restricted to the word's
    backward light cone, so the cost depends on the circuit's depth and on the observable's locality,
    not on the number of qubits: a depth-4 brick-wall circuit on 60 qubits is cheap. Amplitudes
    `<b|C|0>` need the whole circuit; marginal probabilities of a few wires need their light cone.
    Contraction paths are found once per circuit structure (by opt_einsum, on shapes alone) and cached;
    new parameter values reuse them, and under `jit` nothing is recompiled.

    **Arguments:**

    - `contractor`: `"jax"` (default) contracts with `jnp.einsum` along the cached path: CPU or GPU, any
      order of derivatives, `jit`, `vmap`. `"cutensornet"` hands the same network to NVIDIA cuTensorNet
      on the GPU, with its own backward pass (reverse mode only); it needs the `gpu` extra and a CUDA
      GPU, see `qfx/_cutensornet.py`.
    - `optimize`: the opt_einsum path optimizer: a name (`"auto"` by default: exhaustive for a few
      tensors, greedy beyond, milliseconds for a 60-qubit light cone; `"auto-hq"` searches longer for
      better paths) or an `opt_einsum.paths.PathOptimizer`. Paths are cached per optimizer.

    Derivatives: `diff=qfx.diff.Backprop()` (the default) differentiates through the contraction, to any
    order; `qfx.diff.ParameterShift()` and `qfx.diff.FiniteDiff()` evaluate shifted networks under one
    `vmap`. `qfx.diff.Adjoint()` un-applies gates to a state vector, which this backend never builds, so
    it raises. Gradients with respect to `QubitUnitary` entries are those of the light-cone network,
    which assumes unitarity: they agree with the state vector's along unitary directions only.

    ```python
    n = 60
    circ = qfx.Circuit(
        [qfx.RY(0.1 * i, wires=i) for i in range(n)]
        + [qfx.CNOT(wires=(i, i + 1)) for i in range(0, n - 1, 2)]
        + [qfx.RY(0.2, wires=i) for i in range(n)]
    )
    tn = qfx.TensorNetwork()
    qfx.expval(circ, qfx.Z(30) @ qfx.Z(31), backend=tn)
    jax.grad(qfx.expval)(circ, qfx.Z(30), backend=tn)
    qfx.probs(circ, wires=(0, 59), backend=tn)
    qfx.amplitude(circ, [0] * n, backend=tn)
    ```
    """

    contractor: Any = eqx.field(static=True)
    optimize: Any = eqx.field(static=True)

    def __init__(self, contractor="jax", optimize="auto"):
        if isinstance(contractor, str):
            if contractor == "cutensornet":
                contractor = _cutensornet.cutensornet_engine()
            elif contractor != "jax":
                raise ValueError(
                    f"TensorNetwork: contractor must be 'jax' or 'cutensornet', got {contractor!r}."
                )
        elif not isinstance(contractor, _cutensornet.AbstractEngine):
            raise TypeError(
                f"TensorNetwork: contractor must be 'jax' or 'cutensornet', got {type(contractor).__name__}."
            )
        self.contractor = contractor
        self.optimize = _check_optimize(optimize)

    # --- contraction ---------------------------------------------------------------------------

    def _check_size(self, net: _Network) -> None:
        _kernels.check_memory(
            net.largest,
            "TensorNetwork: this network's largest intermediate tensor",
            "The light cone is too wide: use fewer layers, a more local observable, or a better path "
            "(optimize='auto-hq' or an opt_einsum.RandomGreedy with more repeats).",
        )

    def _contract(self, inputs, output, path, operands: list[Array]) -> Array:
        if self.contractor == "jax":
            sym = opt_einsum.get_symbol
            equation = ",".join("".join(sym(m) for m in t) for t in inputs) + "->" + "".join(map(sym, output))
            return jnp.einsum(equation, *operands, optimize=list(path), precision=EXACT)
        return _cutensornet.contract(self.contractor, inputs, output, path, operands)

    def _evaluate(self, nets: list[_Network], ops: _Operands, terms=None) -> list[Array]:
        """Contracts each network; networks of one shape are stacked and contracted as one network.
        `terms[k]` is the Hermitian term of network k, if any."""
        terms = [None] * len(nets) if terms is None else terms
        groups: dict[tuple, list[int]] = {}
        for k, net in enumerate(nets):
            self._check_size(net)
            groups.setdefault(net.shape_key, []).append(k)
        out: list = [None] * len(nets)
        limit = _kernels._memory_limit_bytes() // complex_dtype().itemsize  # entries
        for group in groups.values():
            # Stacking multiplies the intermediates by the number of members: as many as fit at once.
            fit = max(1, limit // nets[group[0]].largest)
            for start in range(0, len(group), fit):
                self._evaluate_stacked(nets, group[start : start + fit], ops, terms, out)
        return out

    def _evaluate_stacked(self, nets: list[_Network], members: list[int], ops: _Operands, terms, out) -> None:
        """Contracts the networks `members` (of one shape) as one network, into `out[k]` for k in members."""
        net = nets[members[0]]
        if len(members) == 1:
            operands = [ops.one(e, terms[members[0]]) for e in net.recipe]
            out[members[0]] = self._contract(net.inputs, net.output, net.path, operands)
            return
        # One network with a batch mode on the operands that differ between the members (an index shared
        # by several tensors and the output). The same path applies.
        batch = 1 + max(m for t in net.inputs for m in t)
        operands, inputs, batched = [], [], False
        for j, modes in enumerate(net.inputs):
            x, axis = ops.many([nets[k].recipe[j] for k in members], [terms[k] for k in members])
            operands.append(x)
            inputs.append(modes if axis is None else (batch,) + modes)
            batched |= axis is not None
        if not batched:  # the members are one network (e.g. X(0) + X(1) after fixed gates): contract once
            value = self._contract(net.inputs, net.output, net.path, operands)
            for k in members:
                out[k] = value
            return
        values = self._contract(tuple(inputs), (batch,) + net.output, net.path, operands)
        for i, k in enumerate(members):
            out[k] = values[i]

    # --- tasks ------------------------------------------------------------------------------------

    def expval(self, circuit: Circuit, observables: Sequence[LinearCombination]) -> Array:
        """`<O>` for each observable, as a real array. Called by `qfx.expval(..., backend=self)`."""
        skeleton = _skeleton(circuit.ops)
        # One network per distinct Pauli word (shared between observables) and per Hermitian term.
        networks: list[_Network] = []
        hermitians: list[Hermitian | None] = []
        slot: dict = {}
        slots = []
        for lc in observables:
            slots.append([])
            for t in lc.terms:
                key = ("pauli", t.word) if isinstance(t, PauliWord) else ("hermitian", id(t))
                if key not in slot:
                    if key == ("pauli", ()):
                        slot[key] = None  # the identity: <I> = 1
                    else:
                        term = key if isinstance(t, PauliWord) else ("hermitian", t.wires)
                        slot[key] = len(networks)
                        networks.append(_expval_network(skeleton, term, self.optimize))
                        hermitians.append(t if isinstance(t, Hermitian) else None)
                slots[-1].append(slot[key])
        ops = _Operands(_unroll(circuit.ops), _needed(networks))
        values = self._evaluate(networks, ops, hermitians)
        values = [jnp.real(v).astype(real_dtype()) for v in values]
        one = jnp.ones((), real_dtype())
        out = [
            jnp.dot(lc.coeffs, jnp.stack([one if s is None else values[s] for s in ss]), precision=EXACT)
            if ss
            else jnp.zeros((), real_dtype())  # no terms
            for lc, ss in zip(observables, slots, strict=True)
        ]
        return jnp.stack(out)

    def probs(self, circuit: Circuit, wires: tuple[int, ...]) -> Array:
        """Marginal probabilities of `wires` (first wire most significant). Called by `qfx.probs`."""
        _kernels.check_memory(
            2 ** len(wires),
            f"qfx.probs: the marginal of {len(wires)} wires",
            "With backend=qfx.TensorNetwork() ask for a few wires, e.g. "
            "qfx.probs(circuit, wires=(0, 1), ...).",
        )
        if not wires:  # the marginal of nothing: the norm
            return jnp.ones((1,), real_dtype())
        net = _probs_network(_skeleton(circuit.ops), tuple(wires), self.optimize)
        (value,) = self._evaluate([net], _Operands(_unroll(circuit.ops), _needed([net])))
        return jnp.real(value).reshape(-1).astype(real_dtype())

    def amplitude(self, circuit: Circuit, bits: Array) -> Array:
        """`<b|C|0>` for a bitstring `bits` of shape `(n,)`. Called by `qfx.amplitude`."""
        net = _amplitude_network(_skeleton(circuit.ops), circuit.num_wires, self.optimize)
        (value,) = self._evaluate([net], _Operands(_unroll(circuit.ops), _needed([net]), bits))
        return value


# --- derivatives and the public entry point -------------------------------------------------------


# Shifted evaluations of the whole network run together in chunks of this many (no state vectors here).
_SHIFT_CHUNK = 256


def _differentiate(diff: AbstractDiffMethod, fn, circuit: Circuit, args, *, linear: bool = True):
    """`fn(circuit, args)` with the derivative rule of `diff`.

    Backprop differentiates through the contraction. Parameter shift and finite differences only need
    evaluations, so they apply as they do to the state vector: a custom JVP whose shifted evaluations of
    the network run as one `vmap` (the engine in `qfx/diff/_shifts.py`). The adjoint method un-applies
    gates to a state vector, which this backend never builds. `linear` says whether `fn` is linear in
    `|psi><psi|` (expectations and probabilities are; amplitudes are not), as parameter shift needs."""
    if isinstance(diff, Backprop):
        return fn(circuit, args)
    if not isinstance(diff, (ParameterShift, FiniteDiff)):
        raise ValueError(
            f"diff={diff!r} works on the state vector, which backend=qfx.TensorNetwork() never builds; use "
            "qfx.diff.Backprop() (the default), qfx.diff.ParameterShift() or qfx.diff.FiniteDiff()."
        )
    if isinstance(diff, ParameterShift) and not linear:
        raise ValueError(
            "qfx.diff.ParameterShift() differentiates measurements linear in |psi><psi| (expectations, "
            "probabilities); an amplitude is not. Use diff=qfx.diff.Backprop() or qfx.diff.FiniteDiff()."
        )
    params, params_static = eqx.partition(circuit, eqx.is_inexact_array)
    args_diff, args_rest = eqx.partition(args, eqx.is_inexact_array)
    chunk = _SHIFT_CHUNK if diff.batch_size is None else diff.batch_size

    def evaluate(params, args_diff):
        return fn(eqx.combine(params, params_static), eqx.combine(args_diff, args_rest))

    shifted = jax.custom_jvp(evaluate)
    num_args = len(jax.tree.leaves(args_diff))
    if isinstance(diff, ParameterShift):
        rules, owners = _gate_rules(params)
        arg_rules = [None] * num_args  # coefficients: differentiated through the contraction
    else:  # the network is contracted in the default complex dtype
        rules, owners = [diff.rule(x, complex_dtype()) for x in jax.tree.leaves(params)], None
        arg_rules = [diff.rule(x, complex_dtype()) for x in jax.tree.leaves(args_diff)]

    def jvp(primals, tangents):
        params, args_diff = primals
        t_params, t_args = tangents
        if owners is not None:
            check_rules(
                t_params,
                rules,
                owners,
                "Differentiate with respect to other leaves only (wrap them in jax.lax.stop_gradient), "
                "or use diff=qfx.diff.Backprop() or qfx.diff.FiniteDiff().",
            )
        out = shifted(*primals)
        t_out = jnp.zeros_like(out)
        if owners is not None and not all(is_zero(t) for t in leaves_with_zeros(t_args)):
            _, t_coeffs = jax.jvp(
                lambda a: evaluate(params, a), (args_diff,), (instantiate(t_args, args_diff),)
            )
            t_out = t_out + t_coeffs
        t_shift = shifted_jvp(shifted, primals, tangents, (rules, arg_rules), lambda p, b: p, chunk)
        return out, t_out if t_shift is None else t_out + t_shift

    shifted.defjvp(jvp, symbolic_zeros=True)
    return shifted(params, args_diff)


def _check_backend(backend, fn: str) -> None:
    if not isinstance(backend, TensorNetwork):
        raise TypeError(
            f"qfx.{fn}: backend must be None (the state vector) or qfx.TensorNetwork(), got {backend!r}."
        )


def _no_initial_state(initial_state, fn: str) -> None:
    if initial_state is not None:
        raise ValueError(
            f"qfx.{fn}: backend=qfx.TensorNetwork() starts from |0...0> and takes no initial_state; build "
            "the initial state with gates, or use backend=None."
        )


def backend_expval(backend, circuit: Circuit, observables, diff, *, initial_state=None, shots=None) -> Array:
    """`qfx.expval(..., backend=...)`, once `qfx.expval` has checked the circuit and the observables."""
    _check_backend(backend, "expval")
    _no_initial_state(initial_state, "expval")
    if shots is not None:
        raise ValueError(
            f"qfx.expval: shots={shots} is not available with backend=qfx.TensorNetwork(), which computes "
            "exact expectations; drop shots=, or use backend=None."
        )
    return _differentiate(diff, lambda c, obs: backend.expval(c, obs), circuit, observables)


def backend_probs(backend, circuit: Circuit, wires, diff, *, initial_state=None) -> Array:
    """`qfx.probs(..., backend=...)`, once `qfx.probs` has checked the circuit and the wires."""
    _check_backend(backend, "probs")
    _no_initial_state(initial_state, "probs")
    return _differentiate(diff, lambda c, _: backend.probs(c, wires), circuit, None)


def _bitstring(circuit: Circuit, bitstring) -> Array:
    n = circuit.num_wires
    if isinstance(bitstring, str):
        if set(bitstring) - {"0", "1"}:
            raise ValueError(f"qfx.amplitude: a bitstring has only '0' and '1', got {bitstring!r}.")
        bitstring = [int(c) for c in bitstring]
    bits = as_numeric(bitstring, "qfx.amplitude: the bitstring")
    if not jnp.issubdtype(bits.dtype, jnp.integer) and bits.dtype != jnp.bool_:
        raise TypeError(f"qfx.amplitude: the bitstring must hold integers 0 or 1, got dtype {bits.dtype}.")
    if bits.shape != (n,):
        raise ValueError(
            f"qfx.amplitude: expected {n} bits (one per wire, wire 0 first), got shape {bits.shape}. "
            "For several bitstrings, map with jax.vmap."
        )
    bits = as_dtype(bits, jnp.int32)
    if is_concrete(bits):  # on the host: inside a jit trace, JAX operations on a constant are traced
        host = np.asarray(bits)
        if np.any((host != 0) & (host != 1)):
            raise ValueError(f"qfx.amplitude: bits must be 0 or 1, got {host.tolist()}.")
        return bits
    return eqx.error_if(bits, jnp.any((bits != 0) & (bits != 1)), "qfx.amplitude: bits must be 0 or 1.")


@with_auto_axes
def amplitude(
    circuit: Circuit,
    bitstring: str | ArrayLike,
    *,
    diff: AbstractDiffMethod = _BACKPROP,
    backend: TensorNetwork | None = None,
) -> Array:
    """The amplitude `<b|C|0...0>` of one computational basis state.

    **Arguments:**

    - `circuit`: the circuit, run from |0...0>.
    - `bitstring`: `n` bits, wire 0 first (the most significant bit): `"0110"`, `[0, 1, 1, 0]` or an
      integer array of shape `(n,)` (it may be traced: map over bitstrings with `jax.vmap`).
    - `diff`: the differentiation method.
    - `backend`: `None` (the state vector) or `qfx.TensorNetwork()`, which never builds the state and so
      works far beyond 30 qubits for shallow circuits.

    **Returns:** a complex scalar.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1))])
    qfx.amplitude(circ, "11")  # 1/sqrt(2)
    qfx.amplitude(circ, "11", backend=qfx.TensorNetwork())
    ```
    """
    circuit = check_circuit(circuit, "amplitude")
    if not isinstance(diff, AbstractDiffMethod):
        raise TypeError(
            f"qfx.amplitude: diff must be a qfx.diff method such as qfx.diff.Backprop(), got {diff!r}."
        )
    bits = _bitstring(circuit, bitstring)
    if backend is None:
        n = circuit.num_wires
        index = jnp.sum(bits * (2 ** jnp.arange(n - 1, -1, -1, dtype=jnp.int32)))
        if has_control(circuit.ops):  # loops and conditionals (a pure state: no measurements)
            pure = lambda psi, i: psi[i]  # noqa: E731
            return run_control(
                circuit,
                _kernels.zero_state(n),
                index,
                pure=pure,
                mixed=None,
                mcm=None,
                key=None,
                diff=diff,
                fn="amplitude",
            )
        return diff(lambda psi, i: psi[i], circuit, _kernels.zero_state(n), index)
    _check_backend(backend, "amplitude")
    return _differentiate(diff, lambda c, b: backend.amplitude(c, b), circuit, bits, linear=False)
