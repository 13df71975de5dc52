"""Circuits: immutable sequences of operations, and `Repeat`, a block of stacked layers run by `lax.scan`."""

from collections.abc import Callable, Iterable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._channels import AbstractChannel
from ._checks import as_leaf, is_numeric_leaf, static_count
from ._gates import AbstractGate, AbstractOperation, QubitUnitary, check_unitary


def _validate_ops(ops, where: str) -> tuple[AbstractOperation, ...]:
    if isinstance(ops, AbstractOperation):
        raise TypeError(f"{where}: expected a sequence of operations, got one, {ops!r}; wrap it in a list.")
    ops = tuple(ops)
    for i, op in enumerate(ops):
        if isinstance(op, Circuit):
            raise TypeError(
                f"{where}: operation {i} is a Circuit; concatenate circuits with + or pass circuit.ops."
            )
        if not isinstance(op, AbstractOperation):
            raise TypeError(f"{where}: operation {i} is a {type(op).__name__}, not a qfx operation.")
    return ops


def relabel_ops(ops: tuple, numbering: dict) -> tuple:
    """`ops` with their measurements renumbered: `numbering` maps each measurement's token to its id and
    grows in order of first appearance. Operations that hold measurements define `relabel(numbering)`."""
    return tuple(op.relabel(numbering) if hasattr(op, "relabel") else op for op in ops)


def relabel_circuit(circuit: "Circuit", numbering: dict) -> "Circuit":
    """`circuit` with its measurements renumbered by `numbering` (see `relabel_ops`)."""
    ops = relabel_ops(circuit.ops, numbering)
    if all(a is b for a, b in zip(ops, circuit.ops, strict=True)):
        return circuit
    # Not Circuit(ops): that would number this circuit's measurements afresh, from 0.
    return eqx.tree_at(lambda c: c.ops, circuit, ops)


class Circuit(eqx.Module):
    """An immutable quantum circuit: a tuple of operations on `num_wires` wires starting in |0...0>.

    **Arguments:**

    - `ops`: gates (and `Repeat` blocks), applied in order.
    - `num_wires`: the number of wires; inferred as one more than the largest wire if omitted.

    Gate parameters are array leaves, so `jax.grad(f)(circuit)` returns a circuit-shaped gradient;
    wires and structure are static, so circuits of the same structure share one compilation.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.RX(0.3, wires=0), qfx.CNOT(wires=(0, 1))])
    qfx.expval(circ, qfx.Z(0) @ qfx.Z(1))
    ```
    """

    __getattribute__ = object.__getattribute__  # fast flattening, as `AbstractOperation`'s

    ops: tuple[AbstractOperation, ...]
    num_wires: int = eqx.field(static=True)

    def __init__(self, ops: Iterable[AbstractOperation] = (), num_wires: int | None = None):
        if isinstance(ops, Circuit) and num_wires is None:  # a copy keeps its wires, used or not
            num_wires = ops.num_wires
        # Mid-circuit measurements (qfx/_control/) are numbered in order of first appearance, so that
        # circuits built alike are alike as static structure and share one compilation.
        ops = relabel_ops(_validate_ops(ops, "Circuit"), {})
        used = max((w for op in ops for w in op.wires), default=-1) + 1
        if num_wires is None:
            if not used:  # not 1 by default: "the circuit has 1 wire" would surprise later
                why = "it has no operations" if not ops else "its operations act on no wire"
                raise ValueError(
                    f"Circuit: cannot infer the number of wires ({why}); pass num_wires, e.g. "
                    "qfx.Circuit([], num_wires=2)."
                )
            num_wires = used
        count = static_count(num_wires, 1)
        if count is None:
            raise ValueError(f"Circuit: num_wires must be a positive int, got {num_wires!r}.")
        num_wires = count
        for op in ops:
            bad = [w for w in op.wires if w >= num_wires]
            if bad:
                raise ValueError(
                    f"{op!r} acts on wire {bad[0]}, but the circuit has {wire_range(num_wires)}; "
                    f"pass num_wires={max(op.wires) + 1} or fix the wire."
                )
        self.ops = ops
        self.num_wires = int(num_wires)

    def __len__(self):
        return len(self.ops)

    def __iter__(self):
        return iter(self.ops)

    def __getitem__(self, i):
        return self.ops[i]

    def __add__(self, other: "Circuit") -> "Circuit":
        if not isinstance(other, Circuit):
            return NotImplemented
        return Circuit(self.ops + other.ops, max(self.num_wires, other.num_wires))

    def inverse(self) -> "Circuit":
        """The inverse circuit: operations reversed, each replaced by its adjoint."""
        return Circuit([op.adjoint() for op in reversed(self.ops)], self.num_wires)

    def __repr__(self):
        return f"Circuit(num_wires={self.num_wires}, ops=[{', '.join(map(repr, self.ops))}])"


def wire_range(num_wires: int) -> str:
    """`"3 wires (0..2)"`, `"1 wire (0)"`: how error messages name a circuit's wires."""
    return "1 wire (0)" if num_wires == 1 else f"{num_wires} wires (0..{num_wires - 1})"


def sub_circuit(ops: Iterable[AbstractOperation]) -> Circuit:
    """The `Circuit` of a branch, a loop body or a layer: its `num_wires` is never read (the enclosing
    circuit's counts), so an empty one is allowed (with 1 wire) where `Circuit([])` asks for `num_wires`."""
    ops = tuple(ops)
    if any(isinstance(op, AbstractOperation) and op.wires for op in ops):
        return Circuit(ops)
    return Circuit(ops, num_wires=1)


class Repeat(AbstractOperation):
    """`length` layers of one circuit structure, with parameters stacked on a leading axis.

    Simulated with `jax.lax.scan`, so compile time does not grow with the number of layers. Build it with
    `qfx.repeat(layer_fn, params)`, or from a circuit whose leaves are stacked with `eqx.filter_vmap`:

    ```python
    n, thetas = 3, jnp.ones((4, 3))  # 4 layers on 3 wires

    def layer(theta):  # theta: (n,)
        return qfx.Circuit([qfx.RY(theta[i], wires=i) for i in range(n)])

    block = qfx.Repeat(eqx.filter_vmap(layer)(thetas))
    ```

    **Arguments:**

    - `body`: a `Circuit` whose every leaf has a leading axis of size `length`.
    - `length`: the number of layers; required only when the body has no leaves.
    """

    body: Circuit
    length: int = eqx.field(static=True)

    def __init__(self, body: Circuit, length: int | None = None):
        if not isinstance(body, Circuit):
            raise TypeError(f"Repeat: body must be a Circuit, got {type(body).__name__}.")
        lengths = {x.shape[0] if x.ndim else None for x in jax.tree.leaves(body)}
        if None in lengths:
            raise ValueError(
                "Repeat: every leaf of the body needs a leading layer axis; build the body with "
                "eqx.filter_vmap(layer_fn)(stacked_params) or qfx.repeat."
            )
        if len(lengths) > 1:
            raise ValueError(f"Repeat: the body's leaves have different leading sizes {sorted(lengths)}.")
        if lengths:
            (found,) = lengths
            if length is not None and length != found:
                raise ValueError(f"Repeat: length={length}, but the body's leaves stack {found} layers.")
            length = found
        count = static_count(length)
        if count is None:  # None too
            raise ValueError(
                f"Repeat: pass length= (a non-negative int) for a body with no parameters, got {length!r}."
            )
        self.body = body
        self.length = count

    def check_layers(self) -> None:
        """Raises unless every leaf still stacks `length` layers: a transformation of the leaves (say
        `jax.tree.map(lambda x: x[:2], circuit)`) does not rerun `__init__`, and a short stack would be
        read past its end. Static (shapes only), so it holds under `jit` and inside `vmap`."""
        for leaf in jax.tree.leaves(self.body):
            shape = np.shape(leaf)
            if not shape or shape[0] != self.length:
                raise ValueError(
                    f"Repeat: length={self.length}, but a parameter of its body has shape {shape}, whose "
                    "leading axis should be the layers. Rebuild the block (qfx.repeat) after changing the "
                    "number of layers; a batch of circuits is evaluated with jax.vmap."
                )

    @property
    def wires(self):
        return tuple(sorted({w for op in self.body.ops for w in op.wires}))

    def relabel(self, numbering: dict) -> "Repeat":
        """This block with the measurements in its body renumbered (see `relabel_ops`)."""
        body = relabel_circuit(self.body, numbering)
        return self if body is self.body else eqx.tree_at(lambda r: r.body, self, body)

    def layer(self, i: int) -> Circuit:
        """The circuit of layer `i` (of shapes, for a block made by `jax.eval_shape`: a loop's skeleton)."""

        def pick(x):
            return jax.ShapeDtypeStruct(x.shape[1:], x.dtype) if isinstance(x, jax.ShapeDtypeStruct) else x[i]

        return jax.tree.map(pick, self.body)

    def adjoint(self) -> "Repeat":
        # Invert each layer under vmap, so that a nested Repeat sees its own layer axis (not this
        # block's), then run the layers in reverse order. A batch of circuits (eqx.filter_vmap) has a
        # batch axis before the layers, which the reversal would take for the layers: refused.
        check_parameter_shapes([self], "Circuit.inverse", advice="eqx.filter_vmap(lambda c: c.inverse())(c)")
        if jax.tree.leaves(self.body):
            inverted = eqx.filter_vmap(lambda body: body.inverse())(self.body)
        else:
            inverted = self.body.inverse()
        return Repeat(jax.tree.map(lambda x: x[::-1], inverted), self.length)

    def __repr__(self):
        return f"Repeat(length={self.length}, body={self.body!r})"


def check_parameter_shapes(ops, fn: str, layers: tuple[int, ...] = (), advice: str | None = None) -> None:
    """Raises unless every gate's parameters have the shapes of one circuit (with the leading layer axes of
    the `Repeat` blocks around it). Shapes only, so it holds under `jit` and inside `vmap`; it catches a
    batch of circuits (from `eqx.filter_vmap`) passed to a qfx function without mapping the call, which
    would otherwise fail deep in the kernels or broadcast into a wrong result. `advice`: how to map the call
    (by default `eqx.filter_vmap(lambda c: qfx.<fn>(c, ...))(circuits)`)."""
    advice = advice or f"eqx.filter_vmap(lambda c: qfx.{fn}(c, ...))(circuits)"
    for op in ops:
        if isinstance(op, Repeat):
            if not layers:
                op.check_layers()
            check_parameter_shapes(op.body.ops, fn, (*layers, op.length), advice)
        elif hasattr(op, "check_shapes"):  # control flow (qfx/_control/): its branches, bodies, indices
            op.check_shapes(fn, layers, advice)
        elif isinstance(op, (AbstractGate, AbstractChannel)) and op.parameter_shapes is not None:
            for p, want in zip(op.parameters, op.parameter_shapes, strict=True):
                if not is_numeric_leaf(p):
                    raise TypeError(
                        f"qfx.{fn}: {op.name} on wires {op.wires} has a parameter {p!r}, not a number or an "
                        "array of numbers (a tree that is not a circuit to simulate: the static half of "
                        "eqx.partition, an Optax label tree?)."
                    )
                if want == () and jnp.iscomplexobj(p):  # an eqx.tree_at edit skips the gate's own check
                    raise TypeError(f"qfx.{fn}: {op.name} on wires {op.wires} has a complex angle {p!r}.")
                if np.shape(p) != (*layers, *want):
                    raise ValueError(
                        f"qfx.{fn}: {op.name} on wires {op.wires} has a parameter of shape {np.shape(p)}, "
                        f"expected {(*layers, *want)}. A batch of circuits (from eqx.filter_vmap) runs by "
                        f"mapping the call: {advice}."
                    )
            for gate in _wrapped(op):  # an eqx.tree_at edit skips the constructor's check of the matrix
                if isinstance(gate, QubitUnitary):  # stored in the default dtype: complex64's tolerance
                    check_unitary(gate.U, f"qfx.{fn}: QubitUnitary(wires={gate.wires})", np.complex64)


def _wrapped(gate):
    """`gate` and the gates that `Adjoint` / `Controlled` wrappers around it hold."""
    while gate is not None:
        yield gate
        gate = getattr(gate, "base", None)


def _check_is_circuit(circuit, fn: str) -> None:
    if not isinstance(circuit, Circuit):
        raise TypeError(
            f"qfx.{fn}: expected a qfx.Circuit as the first argument, got {type(circuit).__name__}."
        )
    for k, op in enumerate(circuit.ops):  # `Circuit` checks this, but `eqx.tree_at` edits skip its __init__
        if not isinstance(op, AbstractOperation):
            raise TypeError(
                f"qfx.{fn}: operation {k} of the circuit is {type(op).__name__}, not a qfx operation; "
                "build a new qfx.Circuit after replacing operations."
            )


def check_circuit(circuit, fn: str) -> Circuit:
    """Checks `circuit` and returns it with any Python float or complex leaves as arrays (an `eqx.tree_at`
    edit such as `eqx.tree_at(lambda c: c.ops[0].theta, circ, 0.5)` skips the gate's own conversion)."""
    return check_circuit_flat(circuit, fn)[0]


def check_circuit_flat(circuit, fn: str) -> tuple[Circuit, tuple]:
    """`check_circuit`, also returning `jax.tree.flatten` of the circuit it returns.

    A circuit of array leaves whose structure (tree structure, leaf shapes and dtypes) passed once is not
    walked again: the tree structure fixes the operations' types and wires, the avals the parameters'
    shapes, so a flat list of thousands of gates costs one flatten per call, not a pass per check."""
    if not isinstance(circuit, Circuit):
        _check_is_circuit(circuit, fn)
    flat = jax.tree.flatten(circuit)
    try:  # the avals of array leaves (tracers too); anything else (a Python float, a NumPy array) has none
        key = (flat[1], tuple(x.aval for x in flat[0]))
    except AttributeError:
        key = None
    if key is not None and key in _CHECKED_SHAPES:
        return circuit, flat
    _check_is_circuit(circuit, fn)
    used = max((w for op in circuit.ops for w in op.wires), default=-1)
    if used >= circuit.num_wires:  # `Circuit` checks this, but `eqx.tree_at` edits skip its __init__
        raise ValueError(
            f"qfx.{fn}: an operation acts on wire {used}, but the circuit has "
            f"{wire_range(circuit.num_wires)}; build a new qfx.Circuit (with num_wires=...) after replacing "
            "operations."
        )
    leaves = flat[0]
    converted = not all(isinstance(x, jax.Array) for x in leaves) or any(  # tracers are jax.Arrays too
        x.dtype in (jnp.float16, jnp.bfloat16) for x in leaves
    )
    if converted:
        circuit = jax.tree.map(as_leaf, circuit)
        flat = jax.tree.flatten(circuit)
    check_parameter_shapes(circuit.ops, fn)  # ints and loop bodies (no avals) are checked every time
    if key is not None and not converted:  # this structure passed as it is
        if len(_CHECKED_SHAPES) >= 256:
            _CHECKED_SHAPES.clear()
        _CHECKED_SHAPES.add(key)
    return circuit, flat


# Circuit structures (tree structure, leaf shapes and dtypes) whose parameter shapes were checked.
_CHECKED_SHAPES: set = set()


def repeat(
    layer_fn: Callable[..., Circuit | Iterable[AbstractOperation]], *stacked, num_wires=None
) -> Repeat:
    """Builds a `Repeat` block by mapping `layer_fn` over the leading axis of `stacked` arguments.

    **Arguments:**

    - `layer_fn`: returns one layer (a `Circuit` or a list of operations) from one slice of the arguments.
    - `*stacked`: arrays (or pytrees of arrays) with a leading layer axis.
    - `num_wires`: passed to the layer circuit when `layer_fn` returns a list.

    **Returns:** a `Repeat` whose layers are simulated with `jax.lax.scan`.
    """

    if not callable(layer_fn):
        raise TypeError(f"qfx.repeat: layer_fn must be callable, got {type(layer_fn).__name__}.")
    arrays = [leaf for leaf in jax.tree.leaves(stacked) if eqx.is_array(leaf)]
    if not arrays or any(a.ndim == 0 for a in arrays):  # other leaves pass to every layer unchanged
        raise ValueError(
            "qfx.repeat: the stacked arrays need a leading layer axis (one slice per layer), got "
            f"{[a.shape for a in arrays] or 'no array'} (a Python list of numbers is not mapped: pass "
            "jnp.asarray(...))."
        )

    if len({a.shape[0] for a in arrays}) > 1:
        raise ValueError(
            f"qfx.repeat: the stacked arrays have different numbers of layers {[a.shape for a in arrays]} "
            "(the leading axis is the layer axis)."
        )

    def one(*args):
        out = layer_fn(*args)
        if isinstance(out, Circuit):
            return out
        if not isinstance(out, Iterable):
            raise TypeError(
                "qfx.repeat: layer_fn must return a Circuit or a list of operations, got "
                f"{type(out).__name__}."
            )
        return Circuit(out, num_wires) if num_wires is not None else sub_circuit(out)

    # The length from the arguments: a layer may use none of them (a fixed entangler repeated).
    return Repeat(eqx.filter_vmap(one)(*stacked), length=arrays[0].shape[0])
