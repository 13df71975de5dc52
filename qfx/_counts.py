"""Counting samples: how many times each outcome of `qfx.sample` occurred."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int
import numpy as np

from ._checks import as_numeric, is_concrete
from ._memory import check_memory

# One count per outcome of k bits: 2**k entries.
Counts = Int[Array, " outcomes"]


def counts(samples: ArrayLike, *, as_dict: bool = False) -> Counts | dict[str, int]:
    """How many times each outcome occurs among samples of `k` bits, such as `qfx.sample`'s.

    Two forms. By default an array of `2**k` counts indexed by the outcome read as a binary number
    (wire order, the first bit the most significant, as in `qfx.probs`): pure JAX, so it works under
    `jit` and `vmap`, and `counts(s) / shots` estimates `qfx.probs`. With `as_dict=True`, a dict
    `{"011": 12, ...}` of the outcomes that occur, in ascending order (PennyLane's `qml.counts` form):
    Python strings, so only for concrete samples (outside `jit`), but for any `k`.

    **Arguments:**

    - `samples`: an integer or bool array of shape `(shots, k)` of 0s and 1s.
    - `as_dict`: return the dict form.

    **Returns:** an int32 array of shape `(2**k,)`, or a dict of bit strings to ints.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1))])
    bits = qfx.sample(circ, key=jax.random.key(0), shots=100)
    qfx.counts(bits)  # [c00, 0, 0, c11] with c00 + c11 = 100
    qfx.counts(bits, as_dict=True)  # {"00": c00, "11": c11}
    ```
    """
    bits = as_numeric(samples, "qfx.counts: samples")
    if not (jnp.issubdtype(bits.dtype, jnp.integer) or bits.dtype == jnp.bool_):
        raise TypeError(f"qfx.counts: samples must hold integers 0 or 1, got dtype {bits.dtype}.")
    if bits.ndim != 2:
        raise ValueError(
            f"qfx.counts: samples must have shape (shots, k) (one row of bits per shot), got {bits.shape}. "
            "For a batch of sample arrays, map with jax.vmap."
        )
    k = bits.shape[1]
    if is_concrete(bits):
        host = np.asarray(bits)
        if np.any((host != 0) & (host != 1)):
            raise ValueError("qfx.counts: samples must be 0 or 1.")
    elif as_dict:
        raise TypeError(
            "qfx.counts(..., as_dict=True) returns Python strings, which a traced array (under jit or vmap) "
            "cannot give; use the array form there, or call it outside the transformation."
        )
    else:
        bits = eqx.error_if(bits, jnp.any((bits != 0) & (bits != 1)), "qfx.counts: samples must be 0 or 1.")
    if as_dict:
        rows, found = np.unique(host.astype(np.int8), axis=0, return_counts=True)
        return {"".join(map(str, row)): int(c) for row, c in zip(rows, found, strict=True)}
    check_memory(
        2**k,
        f"qfx.counts: one count per outcome of {k} bits",
        "Use qfx.counts(samples, as_dict=True), which keeps only the outcomes that occur.",
        dtype=np.int32,
    )
    index = jnp.sum(bits.astype(jnp.int32) << jnp.arange(k - 1, -1, -1, dtype=jnp.int32), axis=1)
    return jnp.bincount(index, length=2**k).astype(jnp.int32)
