"""The backend interface: how a circuit's state is represented and evolved.

Backends are one of qfx's two strategy families (the other is `qfx.diff`). A backend is passed as
`backend=` to the entry points; it checks what it is asked (`prepare`) and evaluates a measurement with
plain JAX operations (`evaluate`), which every differentiation method wraps in its own way. Nothing outside
a backend tests which backend it holds: a new backend is a new module implementing this interface.
"""

import abc

import equinox as eqx
import jax
from jaxtyping import Array, PyTree

from ._circuit import Circuit
from ._measurements import AbstractMeasurement


class AbstractBackend(eqx.Module):
    """How `qfx.expval`, `qfx.probs`, ... simulate a circuit. Passed as `backend=`; never a global switch.

    Implementations: `qfx.StateVector` (the default) and `qfx.TensorNetwork`.
    """

    @abc.abstractmethod
    def prepare(self, measurement: AbstractMeasurement, circuit: Circuit, initial_state) -> Array | None:
        """Checks that this backend can compute `measurement` of `circuit` from `initial_state` (the
        user's argument, None for |0...0>), raising an error that names the entry point
        (`measurement.name`) if not, and returns the initial state as `evaluate` takes it."""

    @abc.abstractmethod
    def evaluate(
        self, measurement: AbstractMeasurement, circuit: Circuit, initial_state: Array | None, args: PyTree
    ) -> Array:
        """The value of `measurement` (before `measurement.post`) for `circuit` run from `initial_state`
        (as `prepare` returned it), reading the arrays `args = (payload, key)`. Plain JAX: every JAX
        transformation applies, and differentiation methods wrap it."""

    @abc.abstractmethod
    def evaluation_bytes(self, circuit: Circuit) -> int:
        """About how many bytes one evaluation keeps, to size batches of shifted evaluations."""


class AbstractStateVectorBackend(AbstractBackend):
    """A backend that evolves a state vector gate by gate, and can walk a circuit backwards: what
    `qfx.diff.Adjoint` needs. `evaluate` of a circuit of gates is `measure(simulate(...))`."""

    @abc.abstractmethod
    def state_struct(self, circuit: Circuit) -> jax.ShapeDtypeStruct:
        """The shape and dtype of the circuit's state vector."""

    @abc.abstractmethod
    def simulate(self, circuit: Circuit, initial_state: Array | None) -> Array:
        """The final state of a circuit of gates and `Repeat` blocks, from `initial_state` as `prepare`
        returned it (None: |0...0>)."""

    @abc.abstractmethod
    def measure(self, measurement: AbstractMeasurement, state: Array, args: PyTree) -> Array:
        """The value of `measurement` (before `post`) on a final state."""

    @abc.abstractmethod
    def backward(self, circuit: Circuit, state: Array, bra: Array) -> tuple[list[Array], Array]:
        """Walks `circuit` backwards from its final `state` and the bra there (the conjugate of the
        state's cotangent): the cotangents of the circuit's leaves (in `jax.tree.leaves` order), and the
        bra before the circuit."""
