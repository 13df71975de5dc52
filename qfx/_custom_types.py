"""Type aliases, the default dtypes (which follow `jax_enable_x64`) and the precision of contractions."""

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


def tolerance(dtype) -> float:
    """How far from exact a unitary or a normalised state given in `dtype` may be: the precision of the
    dtype the user computed it in, not of the dtype qfx casts it to (a complex64 matrix under
    `jax_enable_x64` is unitary to ~1e-7, not to float64's precision)."""
    bits = jnp.finfo(dtype).bits
    return 1e-2 if bits <= 16 else 1e-4 if bits <= 32 else 1e-9
