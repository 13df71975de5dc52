"""Array leaves as flat real vectors and back: the coordinates that derivatives are taken along."""

import jax
import jax.numpy as jnp
from jaxtyping import Array


def real_coordinates(x: Array) -> Array:
    """A leaf as a flat real vector: its entries, or for a complex leaf their real then imaginary parts."""
    x = jnp.ravel(x)  # jnp: a leaf may be a Python number (an eqx.tree_at edit)
    return jnp.concatenate([jnp.real(x), jnp.imag(x)]) if jnp.iscomplexobj(x) else x


def from_real_coordinates(v: Array, like: Array) -> Array:
    """The inverse of `real_coordinates`, in the shape and dtype of `like`."""
    like = jnp.asarray(like)
    if jnp.iscomplexobj(like):
        half = v.shape[0] // 2
        real = v[:half].astype(like.real.dtype)
        imag = v[half:].astype(like.real.dtype)
        return jax.lax.complex(real, imag).reshape(like.shape)
    return v.astype(like.dtype).reshape(like.shape)
