"""Input checks shared by constructors and entry points: numbers, leaves, keys, counts and wires."""

from collections.abc import Sequence
import functools
import numbers

import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from ._custom_types import complex_dtype, real_dtype


def as_leaf(x):
    """A Python float or complex as an array of the default dtype (a parameter leaf), a NumPy array as a
    JAX array (floats in the default dtype: a traced index cannot index a NumPy array); anything else as
    it is. Python ints are counts (a for_loop's length) and stay ints. Half-precision floats (float16,
    bfloat16; the constructors cast them, an edit does not) become the default float dtype: the gates'
    trigonometry in bfloat16 was off by 2e-3."""
    if isinstance(x, (np.ndarray, jax.Array)) and x.dtype in (jnp.float16, jnp.bfloat16):
        return x.astype(real_dtype())
    if isinstance(x, complex):
        return jnp.asarray(x, complex_dtype())
    if isinstance(x, float):
        return jnp.asarray(x, real_dtype())
    if isinstance(x, np.ndarray):
        dtype = {"f": real_dtype(), "c": complex_dtype()}.get(x.dtype.kind)
        if x.dtype.kind in "iu" and x.size and not jax.config.read("jax_enable_x64"):
            if x.min() < -(2**31) or x.max() >= 2**31:  # JAX would wrap them into int32 without a word
                raise ValueError(
                    f"An integer array argument holds values beyond int32 ({x.min()} .. {x.max()}); "
                    "enable x64 (jax.config.update('jax_enable_x64', True)) or pass smaller values."
                )
        with jax.ensure_compile_time_eval():  # a constant inside a jit trace too (see as_numeric)
            return jnp.asarray(x, dtype)
    return x


def is_concrete(x) -> bool:
    """True when `x` holds a value now, i.e. it is not traced by jit, grad or vmap."""
    return not isinstance(x, jax.core.Tracer)


def is_numeric_leaf(x) -> bool:
    """True for a number, or an array (traced or not, or a `ShapeDtypeStruct`) of numbers, bools or
    float0 (the gradient of an integer leaf); False for None, strings, Optax labels and other objects."""
    if isinstance(x, numbers.Number):
        return True
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "shape"):
        return False
    try:
        numeric = jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)
        return numeric or dtype == jax.dtypes.float0
    except TypeError:  # not a dtype NumPy knows
        return False


def host_number(x) -> bool | int | float | complex | None:
    """`x` as a Python number when it is a concrete numeric scalar (a number, a 0-d NumPy or JAX array);
    None for anything else: a tracer, an array with more entries, and the other things a circuit's leaves
    can be in a tree that is not simulated (None in the static half of `eqx.partition`, a
    `ShapeDtypeStruct` from `jax.eval_shape`, an Optax label, a float0 gradient)."""
    if isinstance(x, (bool, int, float, complex)):
        return x
    if not isinstance(x, (np.ndarray, np.generic, jax.Array)) or not is_concrete(x) or np.ndim(x) != 0:
        return None
    if not is_numeric_leaf(x) or x.dtype == jax.dtypes.float0:
        return None
    return complex(x) if jnp.iscomplexobj(x) else float(x)


def as_numeric(value, what: str, *, inexact: bool = False) -> Array:
    """`jnp.asarray(value)` for numbers and arrays of numbers; for anything else (a string, None, an object)
    a TypeError that names `what`, where JAX's own error would name neither the gate nor the argument.

    `inexact`: the value is an angle, a coefficient or a matrix entry, so integers (Python or NumPy) become
    floats on the host first: JAX would wrap those of 2**31 and more into int32 without a word."""
    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{what} must be a number or an array of numbers, got {value!r}.")
    try:
        # Host values stay concrete inside a jit trace too (where jnp.asarray would make a tracer), so the
        # checks on them (unitarity, hermiticity, norms, cancelling phases) run there as they do outside.
        with jax.ensure_compile_time_eval():
            array = jnp.asarray(_host_floats(value) if inexact else value)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"{what} must be a number or an array of numbers, got {value!r}.") from e
    if not (jnp.issubdtype(array.dtype, jnp.number) or array.dtype == jnp.bool_):
        raise TypeError(f"{what} must be a number or an array of numbers, got dtype {array.dtype}.")
    if inexact and not jnp.issubdtype(array.dtype, jnp.inexact):  # a JAX integer array, as host ones above
        array = as_dtype(array, real_dtype())
    return array


def as_dtype(array: Array, dtype) -> Array:
    """`array.astype(dtype)`, concrete when `array` is (inside a jit trace too, see `as_numeric`)."""
    with jax.ensure_compile_time_eval():
        return array.astype(dtype)


def _host_floats(value):
    """Integers (and bools) held on the host, as float64 NumPy; anything else unchanged."""
    if isinstance(value, jax.Array):
        return value
    try:
        host = np.asarray(value)
    except Exception:  # noqa: BLE001 - e.g. a list holding traced values: JAX converts it
        return value
    if host.dtype == object or np.issubdtype(host.dtype, np.integer) or host.dtype == np.bool_:
        return host.astype(np.float64)  # a TypeError or ValueError for objects that are not numbers
    return value


def is_key(x) -> bool:
    """A typed PRNG key (`jax.random.key`) or a raw uint32 one (`jax.random.PRNGKey`), by dtype."""
    dtype = getattr(x, "dtype", None)
    return dtype is not None and (jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) or dtype == np.uint32)


@functools.cache
def _raw_key_shape(impl: str) -> tuple[int, ...]:
    """The shape of a raw uint32 key of JAX's default PRNG implementation `impl` ((2,) for threefry)."""
    return jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape


def check_key(key, what: str) -> None:
    """A TypeError naming `what` unless `key` is a JAX PRNG key: a typed key (`jax.random.key`) or a raw
    uint32 one (`jax.random.PRNGKey`); JAX's own error would name neither the function nor the argument."""
    if not is_key(key):
        raise TypeError(f"{what}: key must be a PRNG key such as jax.random.key(0), got {key!r}.")
    raw = _raw_key_shape(jax.config.jax_default_prng_impl) if key.dtype == np.uint32 else None
    if raw is not None and np.shape(key)[-1:] != raw:
        raise TypeError(
            f"{what}: key must be a PRNG key such as jax.random.key(0); a raw uint32 key "
            f"(jax.random.PRNGKey) has shape {raw}, got a uint32 array of shape {np.shape(key)}."
        )
    if np.ndim(key) != (1 if key.dtype == np.uint32 else 0):
        raise ValueError(
            f"{what}: key must be one PRNG key, got a batch of shape {np.shape(key)}; for many draws map the "
            "call over keys with jax.vmap."
        )


def static_int(value) -> int | None:
    """`value` as a Python int when it holds one statically: an int, a NumPy integer or a concrete 0-d
    integer array (NumPy or JAX). None otherwise, for bools and traced values too."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if (
        isinstance(value, (np.ndarray, jax.Array))
        and value.shape == ()
        and jnp.issubdtype(value.dtype, jnp.integer)
        and is_concrete(value)
    ):
        return int(value)
    return None


def static_bit(value) -> int | None:
    """`value` as 0 or 1 when it holds that value statically (a bool, int or float, NumPy or concrete JAX
    scalar), else None (traced values too)."""
    if isinstance(value, jax.core.Tracer) or isinstance(value, str) or np.ndim(value) != 0:
        return None
    v = np.asarray(value).item()
    return int(v) if isinstance(v, (bool, int, float)) and v in (0, 1) else None


def static_count(value, minimum: int = 0) -> int | None:
    """`static_int(value)` when it is at least `minimum` (a count, a wire, a number of shots), else None."""
    count = static_int(value)
    return count if count is not None and count >= minimum else None


def _wire_list(wires) -> list | None:
    """The entries of `wires` (one wire, a sequence, a concrete 1-d array), or None if it is none of them."""
    if static_int(wires) is not None:
        return [wires]
    if isinstance(wires, Sequence) and not isinstance(wires, str):
        return list(wires)
    if isinstance(wires, (np.ndarray, jax.Array)) and wires.ndim == 1 and is_concrete(wires):
        return list(np.asarray(wires))
    return None


def static_wires(wires) -> tuple[int, ...] | None:
    """`wires` (one wire, a sequence of them, or a concrete 1-d integer array) as a tuple of Python ints,
    or None when some entry is not a static int."""
    entries = _wire_list(wires)
    if entries is None:
        return None
    ints = [static_int(w) for w in entries]
    return None if any(i is None for i in ints) else tuple(ints)


def check_wires(name: str, wires, expected: int | None) -> tuple[int, ...]:
    entries = _wire_list(wires)
    if entries is None:
        traced = " (static ints: a traced value cannot choose a wire)" if not is_concrete(wires) else ""
        raise TypeError(f"{name}: wires must be an int or a sequence of ints, got {wires!r}{traced}.")
    for w in entries:
        if static_int(w) is None:
            raise TypeError(
                f"{name}: wires must be ints, got {w!r} in wires={wires!r} (static ints: a traced value "
                "cannot choose a wire)."
            )
    wires = tuple(static_int(w) for w in entries)
    if any(w < 0 for w in wires):
        raise ValueError(f"{name}(wires={wires}): wires must be non-negative integers.")
    if len(set(wires)) != len(wires):
        raise ValueError(f"{name}(wires={wires}): a gate cannot act twice on the same wire.")
    if expected is not None and len(wires) != expected:
        raise ValueError(f"{name} acts on {expected} wire(s), but got wires={wires}.")
    if not wires:
        raise ValueError(f"{name}: needs at least one wire.")
    return wires
