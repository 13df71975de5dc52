"""Backpropagation, the default differentiation method."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._circuit import Repeat
from .._kernels import SEQUENTIAL_BYTES, _memory_limit_bytes, run
from ._adjoint import adjoint_scalar
from ._base import AbstractDiffMethod, check_gates_only

# States of at most this many bytes (6 qubits in complex64, 5 in complex128) have a real scalar measurement
# differentiated by the adjoint walk (see `Backprop`): its program keeps no buffer larger than the state,
# so XLA's CPU runtime runs it on one thread, where backprop's per-layer checkpoints, `(layers, 2**n)`
# states, pass `SEQUENTIAL_BYTES` from a few layers on. 0 switches the walk off.
SMALL_STATE_BYTES = SEQUENTIAL_BYTES

# A real scalar measurement whose `Repeat` blocks would keep per-layer states taking more than this
# fraction of the device's memory is differentiated by the adjoint walk too, at any state size (see
# `Backprop`): the walk holds a few states whatever the depth, where backprop's checkpoints grow with it.
CHECKPOINT_MEMORY_FRACTION = 1 / 8


class Backprop(AbstractDiffMethod):
    """JAX's own autodiff through the simulation: any order, any transformation. The default.

    Memory grows with depth in reverse mode (JAX keeps the intermediate states). Inside `Repeat` blocks
    each layer is checkpointed: one state is kept per layer and the layer is recomputed backwards.

    **Small states.** On states of at most 512 bytes (up to 6 qubits in complex64, 5 in complex128), a real
    measurement with one entry (`qfx.expval` or `qfx.var` of one observable, without shots) of a circuit
    of gates with real parameters whose `Repeat` blocks would stack more than 512 bytes of per-layer states
    is differentiated by the adjoint walk instead (`qfx.diff.Adjoint`'s), written as a `jax.custom_jvp`
    whose tangent is `<gradient, tangent>`: the same derivatives, in every mode and at every order
    (`jax.jvp`, `jax.jacfwd`, `jax.hessian`, `grad` of `grad`, under `vmap`), from a program that keeps no
    per-layer states. On XLA's CPU runtime that program runs its kernels in order on one thread, where
    backprop's stacked checkpoints make it schedule them over its thread pool (see
    `qfx._kernels.SEQUENTIAL_BYTES`): value_and_grad of a 10-layer, 4-qubit circuit ~1.9x faster
    (`benchmarks/small_states.py`). Circuits without such blocks keep plain backprop, whose per-gate
    residuals are small buffers (the walk's longer trace did not pay there), as do circuits with complex
    parameters (`QubitUnitary` entries), whose derivatives then hold also where the matrix has left the
    unitary group.

    **Deep circuits on large states.** The same measurements are walked on a state of any size when the
    per-layer states its `Repeat` blocks would keep (one per layer, nested blocks' layers added) take
    more than an eighth of the device's memory (`CHECKPOINT_MEMORY_FRACTION`; in complex64 on a 24 GiB
    machine, more than 24 layers of 24 qubits or 384 of 20): the walk keeps a few states whatever
    the depth, where those checkpoints would grow with it until the program runs out of memory. The
    budget is per circuit: under `jax.vmap` a batch keeps as many times more, which is not seen here. Other
    measurements keep backprop; for them, `qfx.diff.Adjoint` is the method whose memory stays flat.
    """

    def __call__(self, measure, circuit, initial_state, args):
        check_gates_only(circuit.ops, "Backprop")
        if _walks(measure, circuit, initial_state, args):
            return adjoint_scalar(measure, circuit, initial_state, args)
        return measure(run(circuit.ops, initial_state, circuit.num_wires), args)


def _walks(measure, circuit, initial_state, args) -> bool:
    """Whether `Backprop` differentiates this measurement by the adjoint walk (see its docstring)."""
    state_bytes = initial_state.size * initial_state.dtype.itemsize
    small = state_bytes <= SMALL_STATE_BYTES and _stacks_over(circuit.ops, SEQUENTIAL_BYTES // state_bytes)
    deep = _kept_layers(circuit.ops) * state_bytes > CHECKPOINT_MEMORY_FRACTION * _memory_limit_bytes()
    if not (small or deep):
        return False
    if not all(eqx.is_inexact_array(x) and not jnp.iscomplexobj(x) for x in jax.tree.leaves(circuit)):
        return False  # matrix entries (see `Backprop`), or leaves that are not numbers to differentiate
    if any(eqx.is_array(x) and not eqx.is_inexact_array(x) for x in jax.tree.leaves(args)):
        return False  # keys (shots) and indices: sampled estimates, not differentiated through the walk
    out = jax.eval_shape(lambda psi: measure(psi, args), initial_state)
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
