"""The functional style: quantum programs as JAX functions of state vectors."""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PRNGKeyArray
import numpy as np

from .._checks import as_numeric, check_key, static_count
from .._circuit import Circuit, check_circuit, check_parameter_shapes
from .._control import (
    MidMeasure,
    Program,
    has_control,
    measure,
    traverse,
)
from .._custom_types import complex_dtype, real_dtype
from .._gates import AbstractGate, AbstractOperation
from .._sharding import with_auto_axes
from . import _states
from ._kernels import apply_gate
from ._pipeline import run
from ._simulators import _not_differentiable, _Pure, _Sampled, _trajectory, check_mcm, simulate
from ._states import check_normalised, initial_state_of

# --- the functional style -----------------------------------------------------------------------------


def zero_state(num_wires: int) -> Array:
    """|0...0> on `num_wires` wires: a flat complex vector of `2**num_wires` amplitudes."""
    n = static_count(num_wires, 1)
    if n is None:
        raise ValueError(f"qfx.zero_state: num_wires must be a positive int, got {num_wires!r}.")
    return _states.zero_state(n)


def _state_arg(state, fn: str) -> Array:
    """The `state` argument of the functional style: numbers, as a complex vector (its own complex dtype,
    or the default one for real or integer entries)."""
    state = as_numeric(state, f"qfx.{fn}: state", inexact=True)
    return state if jnp.issubdtype(state.dtype, jnp.complexfloating) else state.astype(complex_dtype())


def _num_wires_of(state, fn: str) -> int:
    size = state.shape[0] if getattr(state, "ndim", 0) == 1 else 0
    n = size.bit_length() - 1
    if size < 2 or 2**n != size:
        raise ValueError(
            f"qfx.{fn}: state must be a flat vector of 2**n amplitudes, got shape "
            f"{getattr(state, 'shape', None)}."
        )
    return n


@with_auto_axes
def apply(op: "AbstractOperation | Circuit", state: Array, *, key: PRNGKeyArray | None = None) -> Array:
    """Applies an operation (or a circuit) to a state vector: quantum programs as JAX functions.

    **Arguments:**

    - `op`: a gate, a `Repeat`, `Cond`, `ForLoop`, `WhileLoop`, `MidMeasure`, or a `Circuit`.
    - `state`: a flat state vector of `2**n` amplitudes (`qfx.zero_state(n)`); wire 0 is the most
      significant bit.
    - `key`: needed when `op` holds measurements: they are sampled (one trajectory). To read an outcome
      in a program, use `qfx.measure_state`.

    **Returns:** the new state vector.

    ```python
    def program(theta):
        state = qfx.zero_state(2)
        state = qfx.apply(qfx.RX(theta, wires=0), state)
        return qfx.apply(qfx.CNOT(wires=(0, 1)), state)
    jax.grad(lambda t: jnp.abs(program(t)[3]) ** 2)(0.3)
    ```
    """
    state = _state_arg(state, "apply")
    n = _num_wires_of(state, "apply")
    ops = op.ops if isinstance(op, Circuit) else (op,)
    if not all(isinstance(o, AbstractOperation) for o in ops):
        raise TypeError(f"qfx.apply: expected a qfx operation or Circuit, got {type(op).__name__}.")
    check_parameter_shapes(ops, "apply")
    bad = [w for o in ops for w in o.wires if w >= n]
    if bad:
        raise ValueError(
            f"qfx.apply: {op!r} acts on wire {bad[0]}, but the state has {n} wires (0..{n - 1})."
        )
    if isinstance(op, AbstractGate):
        return apply_gate(state, op, n)
    if not has_control(ops):
        return run(ops, state, n)
    program = Program(ops)
    if program.num_measurements == 0:
        return traverse(ops, state, _Pure(n), program, program.alias, ())
    if key is None:
        raise ValueError(
            "qfx.apply: the operation holds mid-circuit measurements; pass key=jax.random.key(0)."
        )
    check_key(key, "qfx.apply")
    state = check_normalised(state, "qfx.apply: state", state.dtype)  # outcomes are drawn from it
    return _trajectory(ops, state, n, key, program, "apply")[0]


@with_auto_axes
def measure_state(
    state: Array, wire: int, *, key: PRNGKeyArray, reset: bool = False, postselect: int | None = None
) -> tuple[Array, Array]:
    """Measures `wire` of a state vector: draws the outcome and collapses (and renormalises) the state.

    **Arguments:**

    - `state`: a flat state vector of `2**n` amplitudes.
    - `wire`: the wire to measure.
    - `key`: a PRNG key (keyword-only); `jax.vmap` over keys for many trajectories.
    - `reset`, `postselect`: as for `qfx.measure`.

    **Returns:** `(outcome, state)`: an int32 scalar (0 or 1) and the post-measurement state.

    ```python
    state = qfx.apply(qfx.H(0), qfx.zero_state(2))
    bit, state = qfx.measure_state(state, 0, key=jax.random.key(0))
    state = jax.lax.cond(bit == 1, lambda s: qfx.apply(qfx.X(1), s), lambda s: s, state)
    ```
    """
    state = _state_arg(state, "measure_state")
    n = _num_wires_of(state, "measure_state")
    check_key(key, "qfx.measure_state")
    op = measure(wire, reset, postselect)
    if op.wire >= n:
        raise ValueError(f"qfx.measure_state: wire {op.wire} is out of range for {n} wires (0..{n - 1}).")
    state = check_normalised(state, "qfx.measure_state: state", state.dtype)
    psi, record, _ = _Sampled(n).measure((state, jnp.zeros(1, jnp.int32), key), op, 0)
    # A drawn outcome's derivative misses how its probability moves (see `_not_differentiable`); a
    # post-selected one is not drawn, and the renormalised projection differentiates exactly.
    return record[0], psi if op.postselect is not None else _not_differentiable(psi)


@with_auto_axes
def outcome_probs(
    circuit: Circuit,
    measurements: "MidMeasure | Sequence[MidMeasure]",
    *,
    mcm: str,
    key: PRNGKeyArray | None = None,
    initial_state: ArrayLike | None = None,
) -> Array:
    """The joint distribution of the latest outcomes of mid-circuit measurements at the end of the circuit.

    **Arguments:**

    - `circuit`: a circuit holding the measurements (outside `qfx.for_loop` bodies, whose measurements
      are made afresh at each iteration).
    - `measurements`: one `MidMeasure` or a list of them; the first is the most significant bit.
    - `mcm`: `"exact"` (the probabilities) or `"sampled"` (needs `key`: the one-hot record of one
      trajectory, so the mean over `jax.vmap`-ed keys estimates the probabilities).
    - `initial_state`: as for `qfx.state`.

    **Returns:** a real array of shape `(2**len(measurements),)`; post-selection renormalises it.

    ```python
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.RY(0.5, wires=0), m])
    qfx.outcome_probs(circ, m, mcm="exact")  # [cos(0.25)**2, sin(0.25)**2]
    ```
    """
    circuit = check_circuit(circuit, "outcome_probs")
    ms = (measurements,) if isinstance(measurements, MidMeasure) else tuple(measurements)
    if not ms or not all(isinstance(m, MidMeasure) for m in ms):
        raise TypeError(f"qfx.outcome_probs: expected qfx.measure(...) operations, got {measurements!r}.")
    program = Program(circuit.ops)
    # By token: `ms` may be the measurements as made by qfx.measure (not numbered) or the circuit's own.
    keys = [program.alias.get(m.token) for m in ms]
    missing = [m for m, key in zip(ms, keys, strict=True) if key not in program.slots]
    if missing:
        raise ValueError(f"qfx.outcome_probs: {missing[0]!r} is not in the circuit.")
    check_mcm(mcm, "qfx.outcome_probs")
    psi0 = initial_state_of(circuit, initial_state)
    final, record = simulate(circuit, psi0, mcm=mcm, key=key, fn="outcome_probs")
    slots = [program.slots[key] for key in keys]
    k, s = len(ms), len(program.slots)
    if record is not None:
        index = jnp.sum(record[jnp.asarray(slots)] * 2 ** jnp.arange(k - 1, -1, -1))
        return jax.nn.one_hot(index, 2**k, dtype=real_dtype())
    weights = final.records.reshape((2,) * s)
    weights = jnp.sum(weights, axis=tuple(a for a in range(s) if a not in slots))
    ascending = sorted(set(slots))
    if len(ascending) == k:
        return weights.transpose([ascending.index(a) for a in slots]).reshape(-1)
    # A measurement asked for twice: its two bits agree, and records where they differ get 0.
    bits = (np.arange(2**k)[:, None] >> np.arange(k - 1, -1, -1)) & 1
    place = {a: j for j, a in enumerate(slots)}  # one requested position per slot
    agree = np.all([bits[:, j] == bits[:, place[a]] for j, a in enumerate(slots)], axis=0)
    flat = sum(bits[:, place[a]] << (len(ascending) - 1 - i) for i, a in enumerate(ascending))
    return jnp.where(agree, weights.reshape(-1)[flat], 0).astype(weights.dtype)
