"""The default differentiation method: backprop, or the adjoint walk where backprop's memory or its
thread scheduling would cost more."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._backend import AbstractStateVectorBackend
from .._circuit import Repeat
from .._memory import SEQUENTIAL_BYTES, memory_limit_bytes
from ._adjoint import adjoint_scalar
from ._backprop import Backprop
from ._base import AbstractDiffMethod, gates_only

# States of at most this many bytes (6 qubits in complex64, 5 in complex128) have a real scalar measurement
# differentiated by the adjoint walk (see `Auto`): its program keeps no buffer larger than the state, so
# XLA's CPU runtime runs it on one thread (see `qfx._memory.SEQUENTIAL_BYTES`). 0 switches the walk off.
SMALL_STATE_BYTES = SEQUENTIAL_BYTES

# A real scalar measurement whose `Repeat` blocks would keep per-layer states taking more than this
# fraction of the device's memory is differentiated by the adjoint walk too, at any state size.
CHECKPOINT_MEMORY_FRACTION = 1 / 8

_BACKPROP = Backprop()


class Auto(AbstractDiffMethod):
    """The default: `qfx.diff.Backprop()`, or the adjoint walk where that is cheaper. Its rule:

    A measurement with one real entry (`qfx.expval` or `qfx.var` of one observable, without shots) of a
    circuit of gates (no control flow) with real parameters, on a backend that keeps a state vector
    (`qfx.StateVector()`), is differentiated by the adjoint walk (`qfx.diff.Adjoint`'s), written as a
    `jax.custom_jvp` whose tangent is `<gradient, tangent>`, when either

    - **small states:** the state takes at most 512 bytes (up to 6 qubits in complex64, 5 in complex128)
      and a `Repeat` block would stack more than 512 bytes of per-layer states. Backprop's stacked
      checkpoints would make XLA's CPU runtime schedule the program over its thread pool, where the walk's
      program, which keeps no buffer larger than the state, runs on one thread;
    - **deep circuits:** the per-layer states that backprop would keep for its `Repeat` blocks (one per
      layer, nested blocks' layers added) take more than an eighth of the device's memory. The walk keeps
      a few states whatever the depth. The budget is per circuit: under `jax.vmap` a batch keeps as many
      times more, which is not seen here.

    Everything else backpropagates: other measurements, circuits with control flow, complex parameters
    (`QubitUnitary` entries, whose derivatives then also hold where the matrix has left the unitary
    group), shot estimates, and backends without a state vector. The walk gives the same derivatives as
    backprop, in every mode and at every order (`jax.jvp`, `jax.jacfwd`, `jax.hessian`, `grad` of
    `grad`, under `vmap`). The reasons and measurements behind the thresholds are in
    `qfx/diff/README.md`.

    ```python
    circ = qfx.Circuit([qfx.RX(0.3, wires=0)])
    jax.grad(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.Auto()))(circ).ops[0].theta  # -sin(0.3)
    ```
    """

    def __call__(self, backend, measurement, circuit, initial_state, args):
        if walks(backend, measurement, circuit, initial_state, args):
            return adjoint_scalar(backend, measurement, circuit, initial_state, args)
        return _BACKPROP(backend, measurement, circuit, initial_state, args)


def walks(backend, measurement, circuit, initial_state, args) -> bool:
    """Whether `Auto` differentiates this measurement by the adjoint walk (see its rule)."""
    if not isinstance(backend, AbstractStateVectorBackend) or not gates_only(circuit.ops):
        return False
    state = backend.state_struct(circuit)
    state_bytes = state.size * state.dtype.itemsize
    small = state_bytes <= SMALL_STATE_BYTES and _stacks_over(circuit.ops, SEQUENTIAL_BYTES // state_bytes)
    deep = _kept_layers(circuit.ops) * state_bytes > CHECKPOINT_MEMORY_FRACTION * memory_limit_bytes()
    return (small or deep) and walkable(backend, measurement, circuit, args)


def walkable(backend: AbstractStateVectorBackend, measurement, circuit, args) -> bool:
    """Whether the adjoint walk (`adjoint_scalar`) gives this measurement's derivatives as backprop would:
    one real output, real parameters, no keys or indices among the arrays it reads. `Auto`'s rule, less
    its cost test; `qfx.Trajectories()` asks it of the noisy circuit whose drawn trajectories it walks."""
    if not all(eqx.is_inexact_array(x) and not jnp.iscomplexobj(x) for x in jax.tree.leaves(circuit)):
        return False  # matrix entries (see `Auto`), or leaves that are not numbers to differentiate
    if any(eqx.is_array(x) and not eqx.is_inexact_array(x) for x in jax.tree.leaves(args)):
        return False  # keys (shots) and indices: sampled estimates, not differentiated through the walk
    state = backend.state_struct(circuit)
    out = jax.eval_shape(lambda psi: measurement.post(backend.measure(measurement, psi, args)), state)
    return isinstance(out, jax.ShapeDtypeStruct) and out.size == 1 and jnp.issubdtype(out.dtype, jnp.floating)


def _stacks_over(ops, layers: int) -> bool:
    """Whether some `Repeat` block of `ops` (nested ones included) has more than `layers` layers."""
    return any(
        isinstance(op, Repeat) and (op.length > layers or _stacks_over(op.body.ops, layers)) for op in ops
    )


def _kept_layers(ops) -> int:
    """How many per-layer states backprop keeps at most for `ops`: each `Repeat` block keeps one per layer
    for the reverse pass, and while one of its layers is differentiated, that layer's own blocks keep
    theirs (an upper bound: siblings' inner blocks are counted together)."""
    return sum(op.length + _kept_layers(op.body.ops) for op in ops if isinstance(op, Repeat))
