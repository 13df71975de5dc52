"""Initial states: |0...0>, and states a user gives, checked."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._checks import as_dtype, as_numeric, is_concrete
from .._circuit import Circuit
from .._custom_types import complex_dtype, tolerance
from .._memory import check_fits


def zero_state(num_wires: int) -> Array:
    """|0...0> as a flat vector of the default complex dtype.

    Built from iotas, not `zeros().at[0].set(1)`: XLA folds that scatter of constants into a literal of
    2**n amplitudes, embedded in the executable (8 MiB at n = 20, which lengthens compilation too),
    whereas an iota comparison is computed by whichever kernel reads the state first. Two iota axes keep
    the indices within int32 for any n.
    """
    check_fits(num_wires)
    shape = (2 ** (num_wires // 2), 2 ** (num_wires - num_wires // 2))
    rows, cols = (jax.lax.broadcasted_iota(jnp.int32, shape, axis) for axis in (0, 1))
    return ((rows == 0) & (cols == 0)).astype(complex_dtype()).reshape(-1)


def initial_state_of(circuit: Circuit, initial_state) -> Array:
    """The checked initial state of every entry point: |0...0> for None, else a normalised vector of
    2**num_wires amplitudes (checked at once when concrete, at run time under `jit`)."""
    n = circuit.num_wires
    if initial_state is None:
        return zero_state(n)
    check_fits(n)
    psi = as_numeric(initial_state, "initial_state", inexact=True)
    if psi.shape != (2**n,):
        raise ValueError(f"initial_state: expected shape ({2**n},) for {n} wires, got {psi.shape}.")
    return check_normalised(psi, "initial_state", complex_dtype())


def check_normalised(psi: Array, what: str, dtype) -> Array:
    """`psi` as `dtype`, checked to have norm 1 (at once when concrete, at run time under `jit`), within
    the tolerance of the dtype it was computed in."""
    tol = tolerance(psi.dtype)
    psi = as_dtype(psi, dtype)
    if is_concrete(psi):  # now, also inside a jit trace (where JAX operations on a constant are traced)
        with jax.ensure_compile_time_eval():
            norm = float(jnp.sum(jnp.real(psi * psi.conj())))
        if not abs(norm - 1) <= tol:  # NaN fails too
            raise ValueError(
                f"{what} is not normalised: its squared norm is {norm:.12g}, expected 1 (within {tol:g})."
            )
        return psi
    norm = jnp.sum(jnp.real(psi * psi.conj()))
    bad = ~(jnp.abs(norm - 1) <= tol)  # NaN fails too
    # The check rides on a scalar: `error_if` passes its operand through a conditional, and XLA copies a
    # state there (one more read and write of it per call). The state takes the checked scalar as a factor
    # of exactly 1 (the norm is finite when the check passes), which XLA fuses into its first use.
    checked = eqx.error_if(norm, bad, f"{what} is not normalised (squared norm != 1).")
    return psi * jax.lax.stop_gradient(checked * 0 + 1).astype(psi.dtype)
