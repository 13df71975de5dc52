"""Central finite differences: a baseline to compare the other methods with."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._checks import is_concrete, is_key
from .._custom_types import complex_dtype
from ._base import AbstractDiffMethod, check_batch_size, check_gates_only
from ._shifts import chunk_size, shifted_jvp

_WITH_SHOTS = (
    "qfx.diff.FiniteDiff() cannot differentiate a shot-based estimate: sampling is not continuous in the "
    "parameters, so differences of samples are no estimate of the gradient. Use "
    "diff=qfx.diff.ParameterShift()."
)


class FiniteDiff(AbstractDiffMethod):
    """Central finite differences `[f(x + h) - f(x - h)] / 2h` along every real coordinate. A baseline.

    Approximate: the error is about `h**2 |f'''| / 6` plus the rounding error of `f` divided by `h`,
    so about `1e-4` in complex64 and `1e-10` in complex128 at the default step. Derivatives of
    derivatives difference again (error about `eps / h**2`: use complex128 and a larger step). It costs
    two evaluations per real coordinate, run as one `vmap`, and differentiates everything: gate
    parameters (`QubitUnitary` entries by real and imaginary parts), `initial_state` and observables.
    Works under `jit`, `vmap`, `grad`, `jacfwd`, `jacrev`, `hessian`. Not for shot-based estimates.

    **Arguments:**

    - `step`: the step `h`; by default `eps ** (1/3)` of the real dtype (about `5e-3` in float32,
      `6e-6` in float64), which balances the two errors for functions of order one. The dtype is the
      coarser of the leaf's and the state's: a float32 leaf in a complex128 simulation steps as float32.
      A step below `50 eps` of that dtype (6e-6 in float32, 1.1e-14 in float64) is refused: rounding
      would make up more than a few percent of the difference (below the spacing of the parameter's floats,
      all of it: the gradient comes out 0).
    - `batch_size`: how many shifted circuits are simulated together; by default as many as fit in about
      256 MiB of state vectors.

    ```python
    circ = qfx.Circuit([qfx.RX(0.3, wires=0)])
    grad = jax.grad(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.FiniteDiff(step=1e-3)))(circ)
    grad.ops[0].theta  # about -sin(0.3)
    ```
    """

    step: float | None = eqx.field(static=True, default=None)
    batch_size: int | None = eqx.field(static=True, default=None)

    def __init__(self, step: float | None = None, batch_size: int | None = None):
        if step is not None:
            number = isinstance(step, (int, float, np.generic, jax.Array))
            value = np.asarray(step) if number and is_concrete(step) else None
            real = value is not None and value.ndim == 0 and value.dtype.kind in "iuf"  # not bool, complex
            if not real or not 0 < float(value) < np.inf:
                raise ValueError(
                    f"qfx.diff.FiniteDiff: step must be a positive finite float (static), got {step!r}."
                )
            step = float(step)  # a static field: a NumPy or JAX scalar becomes a Python float
        self.step = step
        self.batch_size = batch_size
        check_batch_size("FiniteDiff", self.batch_size)

    def rule(self, leaf, state_dtype) -> tuple:
        """The central difference of one leaf as shift-rule terms `((weight, shift), ...)`. The default step
        follows the coarser of the leaf's and the simulation's dtype: a float32 leaf in a complex128
        simulation (an `eqx.tree_at` edit) is shifted in float32, so by float32's step."""
        # finfo of a complex dtype: its real parts'
        eps = max(float(jnp.finfo(jnp.result_type(leaf)).eps), float(jnp.finfo(state_dtype).eps))
        h = eps ** (1 / 3) if self.step is None else self.step
        if h < 50 * eps:
            raise ValueError(
                f"qfx.diff.FiniteDiff: step {h:g} is below 50 eps ({50 * eps:.2g}) of the parameters' "
                "(or the state's, if coarser) precision: rounding would swamp the difference. Use a larger "
                f"step (the default, eps**(1/3) = {eps ** (1 / 3):.2g}, balances rounding and truncation), "
                "or float64."
            )
        return ((0.5 / h, h), (-0.5 / h, -h))

    def __call__(self, backend, measurement, circuit, initial_state, args):
        check_gates_only(self, measurement, circuit)
        params, params_static = eqx.partition(circuit, eqx.is_inexact_array)
        args_diff, args_rest = eqx.partition(args, eqx.is_inexact_array)
        args_arrays, args_static = eqx.partition(args_rest, eqx.is_array)
        chunk = chunk_size(backend.evaluation_bytes(circuit), self.batch_size)
        # Read here: the JVP rule must not close over a traced state. Without one, the default dtype.
        state_dtype = complex_dtype() if initial_state is None else initial_state.dtype

        def evaluate(params, psi0, args_diff, args_arrays):
            c = eqx.combine(params, params_static)
            a = eqx.combine(args_diff, args_arrays, args_static)
            return measurement.post(backend.evaluate(measurement, c, psi0, a))

        differenced = jax.custom_jvp(evaluate)

        def jvp(primals, tangents):
            params, psi0, args_diff, args_arrays = primals
            if any(is_key(x) for x in jax.tree.leaves(args_arrays)):  # not other arrays: amplitude's index
                raise ValueError(_WITH_SHOTS)
            leaves = (jax.tree.leaves(p) for p in (params, psi0, args_diff))
            rules = tuple([self.rule(x, state_dtype) for x in group] for group in leaves) + ([],)
            out = differenced(*primals)
            t_out = shifted_jvp(differenced, primals, tangents, rules, lambda p, b: p, chunk)
            return out, jnp.zeros_like(out) if t_out is None else t_out

        differenced.defjvp(jvp, symbolic_zeros=True)
        return differenced(params, initial_state, args_diff, args_arrays)
