"""Control flow inside circuits, mid-circuit measurement with feed-forward, and the functional style.

Operations (`eqx.Module`s, so a circuit holding them is still a pytree with parameter leaves):
- `MidMeasure` (`qfx.measure(wire, reset=, postselect=)`): a measurement in the middle of a circuit. It
  doubles as its own outcome, a value usable in `qfx.cond`, `qfx.switch` and `qfx.while_loop`, and in
  arithmetic and boolean combinations (`m0 ^ m1`, `m0 + 2 * m1 == 3`, `~m`).
- `Cond` (`qfx.cond`, `qfx.switch`): branches chosen by a traced value or by measurement outcomes.
- `ForLoop` (`qfx.for_loop`): a body built from the loop index, run by `lax.scan` (static length) or
  `lax.fori_loop` (traced length).
- `WhileLoop` (`qfx.while_loop`): a body repeated while a condition on outcomes holds (repeat until
  success), bounded by `max_iterations` or not.

A circuit with measurements runs in one of two modes, chosen by `mcm=` on the measurement functions:
- `mcm="sampled"` (needs `key=`): one trajectory; each measurement draws its outcome and collapses the
  pure state. `jax.vmap` over keys runs many shots as one batched call.
- `mcm="exact"`: every branch at once, weighted by its probability. The state is a classical-quantum
  state: one (unnormalised) density matrix per value of the classical record (the latest outcome of every
  measurement), so loops and while loops keep a fixed shape; memory `2**num_measurements * 4**num_wires`.
The classical record starts at all zeros: an outcome read before its measurement has run is 0.

They are run by the traversal (`qfx/_control/_traversal.py`), which hands each step to a backend's
simulator (`qfx/_statevector/_simulators.py`) when `qfx.state`, `qfx.probs`, ... get circuits holding
them; circuits without them never go there.
"""

import abc
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike
import numpy as np

from .._checks import as_dtype, as_leaf, as_numeric, static_bit, static_count
from .._circuit import Circuit, Repeat, check_parameter_shapes, relabel_circuit, relabel_ops, sub_circuit
from .._custom_types import real_dtype
from .._gates import AbstractOperation

# --- measurement identity -----------------------------------------------------------------------------

# Each `qfx.measure(...)` call makes a `_Token`: the measurement's identity, which links it with the values
# and conditions made from it. A token is unique, so it cannot be static structure (two circuits built
# alike would differ, and compile twice). So a `Circuit` numbers the measurements it holds 0, 1, 2, ... in
# order of first appearance (`relabel`), and that number, the `id`, is what static structure compares.
# The token travels with the id inside a `_Link`, which equals every other link: the runner
# (`_program.Program`, `_traversal.traverse`) tells measurements apart by token, so the numbers given by
# different circuits (a branch's, a loop body's) never get mixed up. No global counter: nothing global
# changes when measuring.


class _Token:
    """The identity of one `qfx.measure(...)` call (compared by identity); also its `id` until a `Circuit`
    numbers it."""

    __slots__ = ()

    def __repr__(self):
        return "?"


class _Link:
    """Carries a measurement's `_Token` without being static structure: all links compare equal."""

    __slots__ = ("token",)

    def __init__(self, token: _Token):
        self.token = token

    def __eq__(self, other):
        return isinstance(other, _Link)

    def __hash__(self):
        return hash(_Link)

    def __repr__(self):
        return "_Link()"


def _number(link: _Link, numbering: dict) -> int:
    """The id of a measurement in `numbering` (token -> id); the next free one if it is not there yet."""
    return numbering.setdefault(link.token, len(numbering))


def _relabel_expr(expr: tuple, numbering: dict) -> tuple:
    kind = expr[0]
    if kind == "m":
        return ("m", _number(expr[2], numbering), expr[2])
    if kind == "const":
        return expr
    return (kind, *(_relabel_expr(e, numbering) for e in expr[1:]))


def _can_relabel(x) -> bool:
    return isinstance(x, AbstractOperation) and hasattr(x, "relabel")


# --- measurement values -------------------------------------------------------------------------------

# A measurement expression is a static tuple tree: ("m", id, link), ("const", k), (op, a) or (op, a, b),
# where `id` is the measurement's number in its circuit and `link` carries its token (see above).
_BINARY = {
    "and": jnp.bitwise_and,
    "or": jnp.bitwise_or,
    "xor": jnp.bitwise_xor,
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "eq": jnp.equal,
    "ne": jnp.not_equal,
    "lt": jnp.less,
    "le": jnp.less_equal,
    "gt": jnp.greater,
    "ge": jnp.greater_equal,
}
_SYMBOLS = {
    "and": "&", "or": "|", "xor": "^", "add": "+", "sub": "-", "mul": "*",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
}  # fmt: skip


def _as_expr(x, what: str) -> tuple:
    if isinstance(x, MeasurementValue):
        return x.expr
    if isinstance(x, MidMeasure):
        return x._expr()
    if isinstance(x, (bool, np.bool_, int, np.integer)):
        return ("const", int(x))
    raise TypeError(
        f"{what}: expected a measurement value (from qfx.measure) or an int, got {type(x).__name__}. "
        "Traced arrays go straight to qfx.cond / qfx.switch, not into measurement expressions."
    )


class _ValueOps:
    """Operators that combine measurement outcomes into new `MeasurementValue`s."""

    def _expr(self) -> tuple:
        raise NotImplementedError

    def _bin(self, op, other, swap=False):
        a, b = self._expr(), _as_expr(other, f"the operator {_SYMBOLS[op]}")
        return MeasurementValue((op, b, a) if swap else (op, a, b))

    def __invert__(self):  # logical not: outcomes are bits
        return MeasurementValue(("eq", self._expr(), ("const", 0)))

    def __neg__(self):
        return MeasurementValue(("sub", ("const", 0), self._expr()))

    def __and__(self, o):
        return self._bin("and", o)

    def __rand__(self, o):
        return self._bin("and", o, True)

    def __or__(self, o):
        return self._bin("or", o)

    def __ror__(self, o):
        return self._bin("or", o, True)

    def __xor__(self, o):
        return self._bin("xor", o)

    def __rxor__(self, o):
        return self._bin("xor", o, True)

    def __add__(self, o):
        return self._bin("add", o)

    def __radd__(self, o):
        return self._bin("add", o, True)

    def __sub__(self, o):
        return self._bin("sub", o)

    def __rsub__(self, o):
        return self._bin("sub", o, True)

    def __mul__(self, o):
        return self._bin("mul", o)

    def __rmul__(self, o):
        return self._bin("mul", o, True)

    def __lt__(self, o):
        return self._bin("lt", o)

    def __le__(self, o):
        return self._bin("le", o)

    def __gt__(self, o):
        return self._bin("gt", o)

    def __ge__(self, o):
        return self._bin("ge", o)


class MeasurementValue(_ValueOps):
    """An integer computed from mid-circuit measurement outcomes, e.g. `m0 ^ m1` or `m0 + 2 * m1 == 3`.

    Made by the operators on `qfx.measure(...)`; pass it to `qfx.cond`, `qfx.switch`, `qfx.while_loop`.
    It is evaluated during the simulation, so it has no truth value while a circuit is being built (use
    `qfx.cond`, or write `if m:` inside a function wrapped by `qfx.autograph`).
    """

    __slots__ = ("expr",)

    def __init__(self, expr: tuple):
        self.expr = expr

    def _expr(self):
        return self.expr

    def __eq__(self, o):  # type: ignore[override]
        return self._bin("eq", o)

    def __ne__(self, o):  # type: ignore[override]
        return self._bin("ne", o)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self):
        raise TypeError(
            f"The measurement value {_format(self.expr)} is only known during the simulation; use "
            "qfx.cond(value, ops), or write `if value:` inside a function wrapped by qfx.autograph."
        )

    def __repr__(self):
        return f"MeasurementValue({_format(self.expr)})"


def _format(expr: tuple) -> str:
    kind = expr[0]
    if kind == "m":
        return f"m{expr[1]}"
    if kind == "const":
        return str(expr[1])
    if kind == "bool":
        return _format(expr[1])
    a, b = (_format(e) for e in expr[1:])
    return f"({a} {_SYMBOLS[kind]} {b})"


def expr_refs(expr: tuple) -> list[tuple]:
    """The measurements an expression reads, as `("m", id, link)` leaves."""
    if expr[0] == "m":
        return [expr]
    if expr[0] == "const":
        return []
    return [r for e in expr[1:] for r in expr_refs(e)]


def evaluate(expr: tuple, bit: Callable[[_Token], Array]) -> Array:
    """The int32 value of an expression, given each measurement's outcome (by token) as an int32 array."""
    kind = expr[0]
    if kind == "m":
        return bit(expr[2].token)
    if kind == "const":
        return jnp.asarray(expr[1], jnp.int32)
    if kind == "bool":
        return (evaluate(expr[1], bit) != 0).astype(jnp.int32)
    a, b = (evaluate(e, bit) for e in expr[1:])
    return _BINARY[kind](a, b).astype(jnp.int32)


# --- operations ---------------------------------------------------------------------------------------


class AbstractControlOperation(AbstractOperation):
    """Measurements and control flow: run by the control-flow runner, never by the gate kernels."""

    def draw_into(self, drawer, numbering: dict) -> None:
        """Describes the operation to `qfx.draw`'s drawer (`qfx/_drawing.py`), with the circuit's numbering
        of its measurements."""
        draw_op(self, drawer, numbering)

    def check_shapes(self, fn: str, layers: tuple[int, ...], advice: str) -> None:
        """Raises unless the operation's leaves have the shapes of one circuit (inside `Repeat` blocks of
        `layers`): see `qfx/_circuit.py: check_parameter_shapes`, which calls it."""

    @abc.abstractmethod
    def relabel(self, numbering: dict) -> "AbstractControlOperation":
        """This operation with its measurements renumbered: `numbering` maps tokens to ids and grows in
        order of first appearance. Called by `Circuit` (see `qfx/_circuit.py: relabel_ops`)."""


class MidMeasure(AbstractControlOperation, _ValueOps):
    """A mid-circuit measurement of one wire in the computational basis. Made by `qfx.measure`.

    It is also its own outcome (0 or 1): pass it to `qfx.cond`, or combine it (`m == 1`, `~m`,
    `m0 ^ m1`, `m0 + 2 * m1`). Placing the same measurement twice in a circuit (or in a loop) measures
    again and overwrites its outcome: conditions read the latest one.

    `id` is its number in the circuit holding it (0, 1, ... in order of first appearance, shown as `m0`,
    `m1`, ... by `qfx.draw`); a measurement not yet in a `Circuit` has no number (`m?`).
    """

    wire: int = eqx.field(static=True)
    reset: bool = eqx.field(static=True)
    postselect: int | None = eqx.field(static=True)
    id: "int | _Token" = eqx.field(static=True)
    link: _Link = eqx.field(static=True)

    @property
    def wires(self):
        return (self.wire,)

    @property
    def name(self) -> str:
        return "MidMeasure"

    @property
    def token(self) -> _Token:
        """The identity of this measurement, the same in every circuit that holds it."""
        return self.link.token

    def _expr(self):
        return ("m", self.id, self.link)

    def relabel(self, numbering: dict) -> "MidMeasure":
        k = _number(self.link, numbering)
        if isinstance(self.id, int) and k == self.id:
            return self
        return MidMeasure(self.wire, self.reset, self.postselect, k, self.link)

    def __eq__(self, o):  # type: ignore[override]
        return self._bin("eq", o)

    def __ne__(self, o):  # type: ignore[override]
        return self._bin("ne", o)

    def __hash__(self):
        return hash((MidMeasure, self.token))

    def __bool__(self):
        return bool(MeasurementValue(self._expr()))

    def adjoint(self):
        raise ValueError(f"{self!r} is a measurement: it has no inverse, so neither has the circuit.")

    def __repr__(self):
        extra = (", reset=True" if self.reset else "") + (
            f", postselect={self.postselect}" if self.postselect is not None else ""
        )
        return f"MidMeasure(m{self.id}, wires={self.wire}{extra})"


def measure(wire: int, reset: bool = False, postselect: int | None = None) -> MidMeasure:
    """A mid-circuit measurement of `wire`, usable as an operation and as its outcome.

    **Arguments:**

    - `wire`: the wire to measure in the computational basis.
    - `reset`: put the wire back into |0> after measuring it.
    - `postselect`: `0` or `1` to keep only the runs with that outcome (the statistics are conditioned on
      it; in `mcm="sampled"` mode the outcome is forced and the state renormalised, which conditions the
      statistics only where no outcome drawn at random comes before it: otherwise sampled mode refuses).

    **Returns:** a `MidMeasure`. Circuits holding measurements need `mcm="exact"` or `mcm="sampled"` (with
    `key=`) in `qfx.state`, `qfx.probs`, `qfx.expval`, ... Each call makes a new measurement; a `Circuit`
    numbers those it holds in order of first appearance, so circuits built alike (say, rebuilt in a
    training loop outside `jit`) are equal and share one compilation.

    ```python
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.H(0), m, qfx.cond(m, [qfx.X(1)])])
    qfx.probs(circ, mcm="exact")  # [0.5, 0, 0, 0.5]
    ```
    """
    count = static_count(wire)
    if count is None:
        raise ValueError(f"qfx.measure: wire must be a non-negative int, got {wire!r}.")
    bit = None if postselect is None else static_bit(postselect)
    if postselect is not None and bit is None:
        raise ValueError(f"qfx.measure: postselect must be None, 0 or 1 (static), got {postselect!r}.")
    if not isinstance(reset, (bool, np.bool_)):  # bool("no") is True
        raise TypeError(f"qfx.measure: reset must be True or False, got {reset!r}.")
    token = _Token()
    return MidMeasure(count, bool(reset), bit, token, _Link(token))


def _as_circuit(ops, what: str) -> Circuit:
    if isinstance(ops, Circuit):
        return ops
    if isinstance(ops, AbstractOperation):
        ops = [ops]
    if not isinstance(ops, Iterable):
        raise TypeError(f"{what}: expected an operation, a list of operations or a Circuit, got {ops!r}.")
    return sub_circuit(ops)


def _union_wires(ops) -> tuple[int, ...]:
    return tuple(sorted({w for op in ops for w in op.wires}))


def _traced_index(value, what: str) -> Array:
    """A traced (or concrete) predicate or branch index, held as a float leaf so that `jax.grad` over a
    circuit holding it works (its gradient is zero)."""
    value = as_numeric(value, f"{what}: the predicate or index")
    if value.shape != ():
        raise ValueError(f"{what}: the predicate or index must be a scalar, got shape {value.shape}.")
    if jnp.issubdtype(value.dtype, jnp.inexact):
        raise TypeError(f"{what}: the predicate or index must be a bool or an int, got dtype {value.dtype}.")
    exact = 2 ** (np.finfo(real_dtype()).nmant + 1)  # the float leaf holds integers up to this exactly
    if not isinstance(value, jax.core.Tracer) and abs(int(value)) > exact:
        raise ValueError(
            f"{what}: {int(value)} is above {exact}, the largest integer that the {real_dtype()} leaf "
            "holding it represents exactly; enable jax_enable_x64 for larger ones."
        )
    return as_dtype(value, real_dtype())


def _check_index_shape(index, what: str, fn: str, layers: tuple[int, ...], advice: str) -> None:
    if index is not None and np.shape(index) != layers:
        raise ValueError(
            f"qfx.{fn}: a {what} has shape {np.shape(index)}, expected {layers}. A batch of circuits (from "
            f"eqx.filter_vmap) runs by mapping the call: {advice}."
        )


class Cond(AbstractControlOperation):
    """Runs one of `branches`, chosen by a traced index or by mid-circuit measurement outcomes.

    Lowered to `lax.switch` (`lax.cond` for two branches). Build it with `qfx.cond` or `qfx.switch`.

    **Arguments:**

    - `branches`: one `Circuit` per branch; branch `k` runs when the index is `k` (clamped to range).
    - `index`: the traced index (an int or bool given to `qfx.cond` / `qfx.switch`), held as a float
      scalar leaf (rounded when run) so that `jax.grad` over the circuit works, or None. Its gradient is
      zero, but an optimizer with weight decay over all leaves would move it: mask it out.
    - `expr`: a static measurement expression giving the index, or None.
    """

    branches: tuple[Circuit, ...]
    index: Array | None
    expr: tuple | None = eqx.field(static=True)

    def __check_init__(self):
        if (self.index is None) == (self.expr is None):
            raise ValueError("Cond: give exactly one of index (a traced value) and expr (measurements).")

    @property
    def wires(self):
        return _union_wires(op for b in self.branches for op in b.ops)

    def relabel(self, numbering: dict) -> "Cond":
        # The condition is read before a branch runs: its measurements come first.
        expr = None if self.expr is None else _relabel_expr(self.expr, numbering)
        branches = tuple(relabel_circuit(b, numbering) for b in self.branches)
        if expr == self.expr and all(a is b for a, b in zip(branches, self.branches, strict=True)):
            return self
        return Cond(branches, self.index, expr)

    def check_shapes(self, fn: str, layers: tuple[int, ...], advice: str) -> None:
        _check_index_shape(self.index, "qfx.cond's traced predicate or index", fn, layers, advice)
        for b in self.branches:
            check_parameter_shapes(b.ops, fn, layers, advice)

    def adjoint(self) -> "Cond":
        if self.expr is not None:
            raise ValueError("A conditional on measurement outcomes has no inverse.")
        return Cond(tuple(b.inverse() for b in self.branches), self.index, None)

    def __repr__(self):
        pred = _format(self.expr) if self.expr is not None else "index"
        return f"Cond({pred}, branches={list(self.branches)!r})"


def cond(
    predicate: "MeasurementValue | MidMeasure | ArrayLike",
    true_ops: "Circuit | AbstractOperation | Iterable[AbstractOperation]",
    false_ops: "Circuit | AbstractOperation | Iterable[AbstractOperation] | None" = None,
) -> Cond:
    """Runs `true_ops` when `predicate` holds, else `false_ops` (nothing by default).

    **Arguments:**

    - `predicate`: a measurement value (`m`, `m == 0`, `m0 ^ m1`: true when nonzero), or a bool / int
      array, possibly traced.
    - `true_ops`, `false_ops`: an operation, a list of operations or a `Circuit`.

    **Returns:** a `Cond`, lowered to `lax.cond`; in `mcm="exact"` mode both branches run, each on the
    part of the state whose outcomes select it.

    ```python
    m = qfx.measure(0)
    qfx.Circuit([qfx.H(0), m, qfx.cond(m, [qfx.X(1)], [qfx.H(1)])])
    ```
    """
    branches = (
        _as_circuit(() if false_ops is None else false_ops, "qfx.cond"),
        _as_circuit(true_ops, "qfx.cond"),
    )
    if isinstance(predicate, (MeasurementValue, MidMeasure)):
        return Cond(branches, None, ("bool", _as_expr(predicate, "qfx.cond")))
    index = _traced_index(predicate, "qfx.cond")
    return Cond(branches, (index != 0).astype(index.dtype), None)


def switch(index: "MeasurementValue | MidMeasure | ArrayLike", branches: Sequence) -> Cond:
    """Runs `branches[index]`; the index is clamped into range (as `lax.switch` does).

    **Arguments:**

    - `index`: a measurement value such as `m0 + 2 * m1`, or an int array, possibly traced.
    - `branches`: a list whose entries are operations, lists of operations or `Circuit`s.

    **Returns:** a `Cond` with one branch per entry, lowered to `lax.switch`.
    """
    if isinstance(branches, (Circuit, AbstractOperation)) or not branches:
        raise ValueError("qfx.switch: branches must be a non-empty list of branches.")
    circuits = tuple(_as_circuit(b, "qfx.switch") for b in branches)
    if isinstance(index, (MeasurementValue, MidMeasure)):
        return Cond(circuits, None, _as_expr(index, "qfx.switch"))
    return Cond(circuits, _traced_index(index, "qfx.switch"), None)


class _Static(eqx.Module):
    """An int, bool or string argument of a loop body: static structure, not a leaf."""

    value: Any = eqx.field(static=True)

    def __repr__(self):
        return f"static({self.value!r})"


def _static_args(x):
    """Python and NumPy ints, bools and strings among a loop's arguments (counts, wires, labels) wrapped
    as `_Static`: as leaves, an int made `jax.grad(f)(circuit)` refuse the circuit ("grad requires real- or
    complex-valued inputs") and broke `jax.vmap` over batches of circuits."""
    if isinstance(x, (bool, np.bool_)):
        return _Static(bool(x))
    if isinstance(x, (int, np.integer)):
        return _Static(int(x))
    if isinstance(x, str):
        return _Static(str(x))
    return x


def _unwrapped(x):
    return x.value if isinstance(x, _Static) else x


class _Body(eqx.Module):
    """`fn(i, *args)`: a loop body with its (static) function and arguments (see `_static_args`)."""

    fn: Callable = eqx.field(static=True)
    args: tuple

    def __init__(self, fn, args: tuple):
        self.fn = fn
        # Measurements passed as arguments stay whole: `ForLoop.relabel` finds them (see `_can_relabel`).
        self.args = jax.tree.map(_static_args, args, is_leaf=_can_relabel)

    def __call__(self, i):
        args = jax.tree.map(_unwrapped, self.args, is_leaf=lambda x: isinstance(x, _Static))
        return self.fn(i, *args)


def _body_ops(out, what: str) -> tuple[AbstractOperation, ...]:
    if isinstance(out, Circuit):
        return out.ops
    if isinstance(out, AbstractOperation):
        return (out,)
    if isinstance(out, Iterable):
        return _as_circuit(list(out), what).ops
    raise TypeError(
        f"{what}: the body must return an operation, a list of operations or a Circuit, got {out!r}."
    )


class ForLoop(AbstractControlOperation):
    """A loop whose body is built from the index `i`: `body(i)` returns the operations of iteration `i`.

    A static `length` runs under `lax.scan` (compile time independent of the length; reverse-mode
    gradients work); a traced length (`num_iterations`) under `lax.fori_loop`, a while loop, so only
    forward-mode derivatives (`jax.jvp`, `jax.jacfwd`) exist through it. Build it with `qfx.for_loop`.

    **Arguments:**

    - `body`: a callable pytree (its array leaves are parameters) mapping an int32 index to operations.
    - `length`: the static number of iterations, or None when `num_iterations` is given.
    - `num_iterations`: the traced number of iterations (an int given to `qfx.for_loop`), held as a float
      scalar leaf (rounded when run; exact up to 2**24 in float32), or None; like `Cond.index`, keep it out
      of weight decay.
    """

    body: Callable
    length: int | None = eqx.field(static=True)
    num_iterations: Array | None
    _wires: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, body, length=None, num_iterations=None):
        if (length is None) == (num_iterations is None):
            raise ValueError("ForLoop: give exactly one of length (static) and num_iterations (traced).")
        self.body = body
        self.length = length
        self.num_iterations = num_iterations
        self._wires = _union_wires(self.skeleton())

    @property
    def wires(self):
        return self._wires

    def relabel(self, numbering: dict) -> "ForLoop":
        # Only measurements passed in the body's arguments are static structure of the loop; those the
        # body makes when called are not (the runner keys them by their place in the body).
        if not any(_can_relabel(x) for x in jax.tree.leaves(self.body, is_leaf=_can_relabel)):
            return self
        body = jax.tree.map(
            lambda x: x.relabel(numbering) if _can_relabel(x) else x,
            self.body,
            is_leaf=_can_relabel,
        )
        return eqx.tree_at(lambda loop: loop.body, self, body)  # not ForLoop(...): no new skeleton

    def ops_at(self, i) -> tuple[AbstractOperation, ...]:
        """The operations of iteration `i`."""
        return _body_ops(self.body(i), "qfx.for_loop")

    def skeleton(self) -> tuple[AbstractOperation, ...]:
        """The body's operations with shape-only leaves (nothing is computed)."""
        # The loop passed as an argument, so that its own arrays are shapes too.
        index = jax.ShapeDtypeStruct((), jnp.int32)
        return eqx.filter_eval_shape(lambda loop, i: loop.ops_at(i), self, index)

    def check_shapes(self, fn: str, layers: tuple[int, ...], advice: str) -> None:
        _check_index_shape(self.num_iterations, "qfx.for_loop's traced length", fn, layers, advice)

        # The body, called on its leaves' shapes without the layer axes: what it builds must have one
        # circuit's shapes (a batch axis left over would be reversed for the layers by Circuit.inverse).
        def one_layer(x):
            if eqx.is_array(x) and np.ndim(x) >= len(layers):
                return jax.ShapeDtypeStruct(np.shape(x)[len(layers) :], x.dtype)
            return x

        loop = eqx.tree_at(lambda op: op.body, self, jax.tree.map(one_layer, self.body))
        try:
            ops = loop.skeleton()
        except (TypeError, ValueError, IndexError) as e:
            raise ValueError(
                f"qfx.{fn}: a qfx.for_loop's body fails on one circuit's shapes of its arguments ({e}). A "
                f"batch of circuits (from eqx.filter_vmap) runs by mapping the call: {advice}."
            ) from e
        check_parameter_shapes(ops, fn, (), advice)

    def adjoint(self) -> "ForLoop":
        if self.length is None:
            raise ValueError("A qfx.for_loop with a traced number of iterations has no inverse.")
        # The length goes in the static function, not in the leaf arguments (an int leaf breaks jax.grad).
        # The wires stay: no call of the body, whose leaves may be a batch (from eqx.filter_vmap).
        inverse = _Body(_InverseIteration(self.length), (self.body,))
        return eqx.tree_at(lambda loop: loop.body, self, inverse)

    def __repr__(self):
        length = self.length if self.length is not None else "traced"
        return f"ForLoop(length={length}, body={self.body!r})"


class _InverseIteration(eqx.Module):
    """Iteration `i` of a loop's inverse: the inverse of iteration `length - 1 - i`. A module, so that
    inverses of equal loops are equal (static structure: one compilation)."""

    length: int = eqx.field(static=True)

    def __call__(self, i, body):
        return sub_circuit(_body_ops(body(self.length - 1 - i), "qfx.for_loop")).inverse()


def for_loop(length: "int | ArrayLike", body: Callable[..., Any], *args: Any) -> ForLoop:
    """A loop of `length` iterations whose operations `body(i, *args)` may depend on the index `i`.

    **Arguments:**

    - `length`: a non-negative int (static: `lax.scan`, reverse mode works), or an int array, possibly
      traced (`lax.fori_loop`: forward-mode derivatives only).
    - `body`: `body(i, *args)` returns an operation, a list of operations or a `Circuit`. `i` is a traced
      int32 scalar, so index parameters with it (`thetas[i]`), not Python control flow. Its structure must
      not depend on `i`. Use a named function: it is static structure, compared by identity.
    - `*args`: arrays (or pytrees) the body reads; they are the loop's parameter leaves, so `jax.grad`
      over the circuit reaches them. Python floats and NumPy arrays become JAX arrays; ints, bools and
      strings (wires, counts, labels) stay static structure (no leaf, no gradient).

    **Returns:** a `ForLoop`. For parameters stacked per layer, `qfx.repeat` is the same thing.

    ```python
    def layer(i, thetas):
        return [qfx.RX(thetas[i], wires=0), qfx.CNOT(wires=(0, 1))]
    circ = qfx.Circuit([qfx.for_loop(1000, layer, jnp.linspace(0, 1, 1000))])
    ```
    """
    if not callable(body):
        raise TypeError(f"qfx.for_loop: body must be callable, got {body!r}.")
    if isinstance(length, (bool, np.bool_)):
        raise TypeError(f"qfx.for_loop: length must be an int, got {length!r}.")
    # Python floats become array leaves, as gates' do: Equinox's filters (eqx.is_inexact_array, so
    # eqx.filter_grad and an Optax loop over eqx.partition) skip Python floats.
    fn = body if isinstance(body, eqx.Module) and not args else _Body(body, jax.tree.map(as_leaf, args))
    if isinstance(length, (int, np.integer)) and not isinstance(length, bool):  # an array is a leaf
        if length < 0:
            raise ValueError(f"qfx.for_loop: length must be non-negative, got {length}.")
        return ForLoop(fn, int(length))
    return ForLoop(fn, num_iterations=_traced_index(length, "qfx.for_loop"))


class WhileLoop(AbstractControlOperation):
    """Repeats `body` while a condition on measurement outcomes holds; at most `max_iterations` times.

    With `max_iterations` it runs under `lax.scan` with a `lax.cond` per step (reverse mode works);
    without, under `lax.while_loop` (forward-mode derivatives only). Build it with `qfx.while_loop`.
    """

    body: Circuit
    expr: tuple = eqx.field(static=True)
    max_iterations: int | None = eqx.field(static=True)

    @property
    def wires(self):
        return _union_wires(self.body.ops)

    def relabel(self, numbering: dict) -> "WhileLoop":
        expr = _relabel_expr(self.expr, numbering)  # read before the body runs
        body = relabel_circuit(self.body, numbering)
        if expr == self.expr and body is self.body:
            return self
        return WhileLoop(body, expr, self.max_iterations)

    def check_shapes(self, fn: str, layers: tuple[int, ...], advice: str) -> None:
        check_parameter_shapes(self.body.ops, fn, layers, advice)

    def adjoint(self):
        raise ValueError("A qfx.while_loop (it depends on measurement outcomes) has no inverse.")

    def __repr__(self):
        return f"WhileLoop({_format(self.expr)}, max_iterations={self.max_iterations}, body={self.body!r})"


def while_loop(
    condition: "MeasurementValue | MidMeasure",
    body: "Circuit | AbstractOperation | Iterable[AbstractOperation]",
    *,
    max_iterations: int | None = None,
) -> WhileLoop:
    """Runs `body` while `condition` (on measurement outcomes) is nonzero, checked before each iteration.

    Repeat until success: run one attempt, then loop while it failed (here, until wire 0 reads 0):

    ```python
    m = qfx.measure(0)
    attempt = [qfx.H(0), m]
    circ = qfx.Circuit([*attempt, qfx.while_loop(m, attempt, max_iterations=20)])
    ```

    **Arguments:**

    - `condition`: a measurement value; outcomes not yet measured read 0.
    - `body`: an operation, a list of operations or a `Circuit`, typically measuring what `condition`
      reads.
    - `max_iterations`: a bound on the iterations (`lax.scan`: reverse-mode gradients work, and in
      `mcm="exact"` mode the leftover weight stays in the unfinished branches), or None
      (`lax.while_loop`: forward mode only; exact mode stops once the looping weight is below the dtype's
      epsilon; a loop whose condition still holds after 100,000 iterations raises instead of hanging).

    **Returns:** a `WhileLoop`.
    """
    if not isinstance(condition, (MeasurementValue, MidMeasure)):
        raise TypeError(
            "qfx.while_loop: the condition must be a measurement value (from qfx.measure), got "
            f"{type(condition).__name__}. For loops over a traced count use qfx.for_loop."
        )
    bound = None if max_iterations is None else static_count(max_iterations)
    if max_iterations is not None and bound is None:
        raise ValueError(
            f"qfx.while_loop: max_iterations must be a non-negative int or None, got {max_iterations!r}."
        )
    expr = ("bool", _as_expr(condition, "qfx.while_loop"))
    circuit = _as_circuit(body, "qfx.while_loop")
    if max_iterations is None and not _may_measure(circuit.ops, _expr_tokens(expr)):
        raise ValueError(
            "qfx.while_loop: the body measures none of the outcomes the condition reads, so once true the "
            "condition stays true and the loop never ends. Measure them in the body, or give max_iterations."
        )
    return WhileLoop(circuit, expr, bound)


def _expr_tokens(expr: tuple) -> set:
    if expr[0] == "m":
        return {expr[2].token}
    return set().union(*(_expr_tokens(e) for e in expr[1:] if isinstance(e, tuple)))


def _may_measure(ops, tokens: set) -> bool:
    """Whether `ops` may measure one of `tokens` (True when it cannot tell: a for loop body is a function)."""
    for op in ops:
        if isinstance(op, MidMeasure) and op.token in tokens:
            return True
        if isinstance(op, ForLoop):
            return True
        inner = [op.body] if isinstance(op, (WhileLoop, Repeat)) else getattr(op, "branches", ())
        if any(_may_measure(c.ops, tokens) for c in inner):
            return True
    return False


# --- drawing ------------------------------------------------------------------------------------------


def draw_op(op, drawer, numbering: dict) -> None:
    """Describes a control-flow operation to `qfx.draw`'s drawer: `drawer.box(texts)` for a measurement,
    `drawer.block(wires, parts, closing)` for a block whose parts `add` their operations. Loops are drawn
    once, with their count: never unrolled. `numbering` is the circuit's (token -> id); the measurements a
    for-loop body makes afresh are numbered after it, so that they do not read as the circuit's own."""

    def ops_drawer(ops):
        return lambda: [drawer.add(inner) for inner in ops]

    if isinstance(op, MidMeasure):
        label = (
            f"M{op.id}"
            + ("→0" if op.reset else "")
            + (f"={op.postselect}" if op.postselect is not None else "")
        )
        drawer.box({op.wire: label}, measures=True)
    elif isinstance(op, Cond):
        pred = _format(op.expr) if op.expr is not None else "·"
        if len(op.branches) == 2 and (op.expr is None or op.expr[0] == "bool"):
            parts = [(f"if {pred}: ", ops_drawer(op.branches[1].ops))]
            if op.branches[0].ops:
                parts.append(("else: ", ops_drawer(op.branches[0].ops)))
        else:
            parts = [(f"case {k}: ", ops_drawer(b.ops)) for k, b in enumerate(op.branches)]
            parts[0] = (f"switch {pred} " + parts[0][0], parts[0][1])
        drawer.block(op.wires, parts, "]", reads=op.expr is not None)
    elif isinstance(op, ForLoop):

        def draw_body():
            # Drawn from a traced index, so that parameters depending on it show as "·".
            def trace(loop, i):
                for inner in relabel_ops(loop.ops_at(i), numbering):
                    drawer.add(inner)

            index = jax.ShapeDtypeStruct((), jnp.int32)
            try:  # the loop closed over: its fixed arguments draw as values, and need not be arrays
                jax.eval_shape(lambda i: trace(op, i), index)
            except (TypeError, ValueError) as error:
                # A batch of circuits (from eqx.filter_vmap): the body's leaves share a leading batch axis.
                # Its iterations are drawn from one circuit's shapes (adds happen only once ops_at returns).
                dynamic, static = eqx.partition(op, eqx.is_array)
                sizes = {x.shape[:1] for x in jax.tree.leaves(dynamic)}
                if len(sizes) != 1 or sizes == {()}:
                    raise
                unbatched = lambda d, i: trace(eqx.combine(d, static), i)  # noqa: E731
                try:
                    jax.eval_shape(jax.vmap(unbatched, in_axes=(0, None)), dynamic, index)
                except Exception:  # noqa: BLE001 - not a batch after all: the body's own error
                    raise error from None

        length = op.length if op.length is not None else "·"
        drawer.block(op.wires, [("for i: ", draw_body)], f"]×{length}")
    elif isinstance(op, WhileLoop):
        bound = f"≤{op.max_iterations}" if op.max_iterations is not None else ""
        body = [(f"while {_format(op.expr)}: ", ops_drawer(op.body.ops))]
        drawer.block(op.wires, body, f"]{bound}", reads=True)
    else:  # pragma: no cover
        raise TypeError(f"qfx.draw cannot draw {op!r}.")
