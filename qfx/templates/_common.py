"""What every template shares: argument checks, and the `shape` helper attached to layered templates."""

from collections.abc import Callable

from jaxtyping import Array

from .._checks import as_numeric, check_wires
from .._gates import AbstractGate


def template_wires(name: str, wires) -> tuple[int, ...]:
    """`wires` as distinct non-negative ints (a range, a list, one int)."""
    return check_wires(name, wires, None)


def real_array(name: str, what: str, value, shape: tuple[int, ...] | None = None) -> Array:
    """`value` as a real array of the default float dtype, with `shape` if given (checked, not broadcast)."""
    array = as_numeric(value, f"{name}: {what}", inexact=True)
    if array.dtype.kind == "c":
        raise TypeError(f"{name}: {what} must be real (angles), got dtype {array.dtype}.")
    if shape is not None and array.shape != shape:
        raise ValueError(
            f"{name}: {what} must have shape {shape}, got {array.shape}. For a batch, build the circuits "
            "with eqx.filter_vmap or map qfx functions with jax.vmap."
        )
    return array


def gate_class(name: str, what: str, value, num_wires: int, num_params: int) -> type[AbstractGate]:
    """`value` checked to be a qfx gate class on `num_wires` wires with `num_params` parameters."""
    ok = isinstance(value, type) and issubclass(value, AbstractGate)
    if not ok or getattr(value, "num_wires", None) != num_wires or len(value.param_names) != num_params:
        kind = "one-parameter one-wire gate class such as qfx.RX" if num_params else "two-wire gate class"
        example = "" if num_params else " without parameters, such as qfx.CNOT or qfx.CZ"
        raise TypeError(f"{name}: {what} must be a qfx {kind}{example}, got {value!r}.")
    return value


def with_shape(shape: Callable) -> Callable:
    """Attaches `shape` to a template function, as PennyLane's templates have `Template.shape(...)`."""

    def attach(fn):
        fn.shape = shape
        return fn

    return attach
