"""The differentiation-method interface, and backpropagation (the default)."""

import abc
from collections.abc import Callable

import equinox as eqx
from jaxtyping import Array, PyTree

from .._circuit import Circuit
from .._kernels import run

# measure(final_state, args) -> array: a pure function of the final state and of `args`
# (observables, keys), which are pytrees the method may also differentiate.
Measure = Callable[[Array, PyTree], Array]


class AbstractDiffMethod(eqx.Module):
    """How `qfx.expval`, `qfx.probs`, ... are differentiated. Passed as `diff=`; never a global switch."""

    @abc.abstractmethod
    def __call__(self, measure: Measure, circuit: Circuit, initial_state: Array, args: PyTree) -> Array:
        """Simulates `circuit` from `initial_state` and returns `measure(final_state, args)`, with
        derivatives (of any order, under any JAX transformation) given by this method."""


class Backprop(AbstractDiffMethod):
    """JAX's own autodiff through the simulation: any order, any transformation. The default.

    Memory grows with depth in reverse mode (JAX keeps the intermediate states), except across
    `Repeat` blocks, where `lax.scan` keeps one state per layer.
    """

    def __call__(self, measure, circuit, initial_state, args):
        return measure(run(circuit.ops, initial_state, circuit.num_wires), args)
