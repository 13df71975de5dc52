"""A straight-through argmax, for classifiers that read out their most likely class."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _st_argmax(x: Array, axis: int) -> Array:
    return jax.nn.one_hot(jnp.argmax(x, axis=axis), x.shape[axis], dtype=x.dtype, axis=axis)


@_st_argmax.defjvp
def _st_argmax_jvp(axis, primals, tangents):
    (x,), (t,) = primals, tangents
    hard = _st_argmax(x, axis)
    # Linear in the tangent, so reverse mode (jax.grad) transposes it: only the chosen entry passes. The
    # choice is a constant of the derivative (that of `x * one_hot`): higher derivatives are zero.
    return hard, t * jax.lax.stop_gradient(hard)


def straight_through_argmax(x: Float[Array, "..."], axis: int = -1) -> Float[Array, "..."]:
    """The one-hot of the largest entry along `axis`, with a straight-through gradient.

    Forward: `one_hot(argmax(x, axis))` in `x`'s dtype (ties go to the first index). Derivative: that of
    `x * one_hot` with the choice held fixed, i.e. the gradient of the chosen entry passes through and every
    other entry gets zero. Works under `jit`, `grad`, `vmap` and to any order. The same function for torch
    tensors is `qfx.torch.straight_through_argmax`.

    ```python
    probs = jnp.array([0.2, 0.5, 0.3])
    qfx.straight_through_argmax(probs)  # [0., 1., 0.]
    jax.grad(lambda p: qfx.straight_through_argmax(p) @ jnp.array([1.0, 2.0, 3.0]))(probs)  # [0., 2., 0.]
    ```
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"straight_through_argmax: x must be a real floating array, got dtype {x.dtype}.")
    if x.ndim == 0:
        raise ValueError("straight_through_argmax: x must have at least one dimension, got a scalar.")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"straight_through_argmax: axis={axis} is out of range for shape {x.shape}.")
    return _st_argmax(x, axis % x.ndim)
