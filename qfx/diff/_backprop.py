"""Backpropagation: JAX's own autodiff through the backend's simulation."""

from ._base import AbstractDiffMethod


class Backprop(AbstractDiffMethod):
    """JAX's own autodiff through the simulation: any order, any transformation, any backend.

    It differentiates whatever the backend computes, control flow and mid-circuit measurements included.
    Memory grows with depth in reverse mode (JAX keeps the intermediate states). Inside `Repeat` blocks
    each layer is checkpointed: one state is kept per layer and the layer is recomputed backwards. For
    memory that stays flat with depth, use `qfx.diff.Adjoint()`; the default, `qfx.diff.Auto()`, picks
    between the two by its rule.

    ```python
    circ = qfx.Circuit([qfx.RX(0.3, wires=0)])
    jax.grad(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.Backprop()))(circ).ops[0].theta  # -sin(0.3)
    ```
    """

    def __call__(self, backend, measurement, circuit, initial_state, args):
        return measurement.post(backend.evaluate(measurement, circuit, initial_state, args))
