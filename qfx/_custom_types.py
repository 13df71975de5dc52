"""Type aliases, the default dtypes (which follow `jax_enable_x64`) and the precision of contractions."""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Complex, Float
import numpy as np

# A flat state vector of 2**n amplitudes.
State = Complex[Array, " dim"]
RealScalarLike = Float[ArrayLike, ""]
Wires = tuple[int, ...]

# Every dot and einsum in qfx asks for the full precision of its dtype. XLA's default precision for float32
# and complex64 dots on NVIDIA GPUs since Ampere is TF32 (a 10-bit mantissa): on an H100 it moved expectation
# values by ~1e-4 and made the unitarity check refuse exactly unitary matrices. The CPU ignores the flag.
EXACT = jax.lax.Precision.HIGHEST


def complex_dtype() -> np.dtype:
    """complex64 by default, complex128 under `jax_enable_x64`."""
    return np.dtype(jax.dtypes.canonicalize_dtype(jnp.complex128))


def real_dtype() -> np.dtype:
    """float32 by default, float64 under `jax_enable_x64`."""
    return np.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))


def is_concrete(x) -> bool:
    """True when `x` holds a value now, i.e. it is not traced by jit, grad or vmap."""
    return not isinstance(x, jax.core.Tracer)


def check_wires(name: str, wires, expected: int | None) -> tuple[int, ...]:
    if isinstance(wires, (int, np.integer)) and not isinstance(wires, bool):
        wires = (int(wires),)
    elif isinstance(wires, Sequence) and not isinstance(wires, str):
        wires = tuple(wires)
    else:
        raise TypeError(f"{name}: wires must be an int or a sequence of ints, got {wires!r}.")
    for w in wires:
        if not isinstance(w, (int, np.integer)) or isinstance(w, bool):
            raise TypeError(f"{name}: wires must be ints, got {w!r} in wires={wires!r}.")
    wires = tuple(int(w) for w in wires)
    if any(w < 0 for w in wires):
        raise ValueError(f"{name}(wires={wires}): wires must be non-negative integers.")
    if len(set(wires)) != len(wires):
        raise ValueError(f"{name}(wires={wires}): a gate cannot act twice on the same wire.")
    if expected is not None and len(wires) != expected:
        raise ValueError(f"{name} acts on {expected} wire(s), but got wires={wires}.")
    if not wires:
        raise ValueError(f"{name}: needs at least one wire.")
    return wires
