"""The differentiation-method interface, and checks the methods share."""

import abc

import equinox as eqx
from jaxtyping import Array, PyTree

from .._backend import AbstractBackend
from .._channels import AbstractChannel
from .._circuit import Circuit, Repeat
from .._gates import AbstractGate
from .._measurements import AbstractMeasurement


def check_batch_size(method: str, batch_size) -> None:
    if batch_size is not None and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
        raise ValueError(f"qfx.diff.{method}: batch_size must be a positive int or None, got {batch_size!r}.")


def gates_only(ops) -> bool:
    """Whether `ops` hold only gates, noise channels and `Repeat` blocks of them: no control flow or
    measurements. (A channel is left to the backend: one that cannot run it says so.)"""
    return all(
        gates_only(op.body.ops) if isinstance(op, Repeat) else isinstance(op, (AbstractGate, AbstractChannel))
        for op in ops
    )


def check_gates_only(method, measurement: AbstractMeasurement, circuit: Circuit) -> None:
    """Raises on control flow and mid-circuit measurements, which the methods' circuit traversals do not
    know; `qfx.diff.Backprop()` (and the default) differentiate through them with JAX's autodiff."""
    if not gates_only(circuit.ops):
        raise ValueError(
            f"qfx.{measurement.name}: diff={method!r} cannot differentiate a circuit with control flow or "
            "mid-circuit measurements (qfx.cond, qfx.for_loop, qfx.while_loop, qfx.measure). Use the "
            "default diff=qfx.diff.Auto() or qfx.diff.Backprop(): JAX differentiates through them (reverse "
            "mode where loop lengths are static)."
        )


class AbstractDiffMethod(eqx.Module):
    """How `qfx.expval`, `qfx.probs`, ... are differentiated. Passed as `diff=`; never a global switch.

    A method receives the backend and wraps its evaluation (`backend.evaluate`), as diffrax's adjoints
    receive the solver, so every method works with every backend that offers what it needs.
    """

    @abc.abstractmethod
    def __call__(
        self,
        backend: AbstractBackend,
        measurement: AbstractMeasurement,
        circuit: Circuit,
        initial_state: Array | None,
        args: PyTree,
    ) -> Array:
        """`measurement.post(backend.evaluate(measurement, circuit, initial_state, args))`, with
        derivatives (of any order, under any JAX transformation) given by this method."""

    def explain(self, error: Exception) -> None:
        """Raises a clearer error in place of `error`, a JAX error about a transformation of this method
        (forward mode of a `jax.custom_vjp`, say), when there is one to give; otherwise returns."""
