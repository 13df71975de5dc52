"""Parameter-shift rules: exact derivatives from evaluations of the circuit at shifted parameters."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._channels import AbstractChannel, has_channels
from .._checks import is_key
from .._circuit import Repeat
from ._base import AbstractDiffMethod, check_batch_size, check_gates_only
from ._shifts import check_rules, chunk_size, is_zero, leaves_with_zeros, shifted_jvp

# Folded into every key before the evaluation number, so shifted evaluations never reuse the keys that
# the unshifted evaluation draws by splitting the same key.
_KEY_TAG = 0x51F7


def _reseed_key(x, b: Array):
    """A fresh key for evaluation `b`; arrays that are not keys pass through."""
    if is_key(x):
        return jax.random.fold_in(jax.random.fold_in(x, _KEY_TAG), b)
    return x


def _param_name(op, j: int) -> str:
    while hasattr(op, "base"):
        op = op.base
    return repr(op.param_names[j]) if j < len(op.param_names) else f"number {j}"


def _gate_rules(params) -> tuple[list, list]:
    """For each leaf of the circuit `params`: its gate's shift rule (None if none), and a description."""
    leaves, treedef = jax.tree.flatten(params)
    # The same circuit with each leaf replaced by its position: `op.parameters` then names positions.
    where = jax.tree.unflatten(treedef, list(range(len(leaves))))
    rules: list = [None] * len(leaves)
    owners: list = [None] * len(leaves)

    def visit(ops):
        for op in ops:
            if isinstance(op, Repeat):
                visit(op.body.ops)
                continue
            gate_rules = op.shift_rules
            for j, position in enumerate(op.parameters):
                if not isinstance(position, int):
                    continue
                rules[position] = None if gate_rules is None else gate_rules[j]
                what = "strength" if isinstance(op, AbstractChannel) else "parameter"
                owners[position] = (
                    f"{op.name}(wires={op.wires}) has no shift rule for its {what} {_param_name(op, j)}"
                    + (" (its Kraus operators are not affine in it)" if what == "strength" else "")
                )

    visit(where.ops)
    for i, owner in enumerate(owners):
        if owner is None:
            owners[i] = f"the circuit leaf number {i} is not a gate parameter with a shift rule"
    return rules, owners


def _not_linear(name: str) -> str:
    return (
        "qfx.diff.ParameterShift() differentiates measurements that are linear in |psi><psi| (qfx.expval, "
        f"qfx.probs, qfx.density_matrix, and qfx.var through its moments); qfx.{name} is not (a state or "
        "an amplitude is not), so a shift rule would give a wrong derivative. Use diff=qfx.diff.Adjoint(), "
        "qfx.diff.Backprop() or qfx.diff.FiniteDiff()."
    )


_INITIAL_STATE = (
    "qfx.diff.ParameterShift() has no shift rule for initial_state. Differentiate with respect to gate "
    "parameters and observables only (e.g. pass jax.lax.stop_gradient(state)), or use "
    "diff=qfx.diff.Adjoint() or qfx.diff.Backprop()."
)


class ParameterShift(AbstractDiffMethod):
    """Parameter-shift rules: each derivative is a combination of evaluations at shifted parameters.

    A gate parameter `t` whose generator has eigenvalues +-1/2 (Pauli rotations, `PhaseShift`, `U3`,
    `IsingXX`, ...) has the two-term rule `df/dt = [f(t + pi/2) - f(t - pi/2)] / 2`; controlled rotations
    (`CRX`, `CRot`, `Controlled(RY)`, `IsingXY`) the four-term rule with shifts `+-pi/2` and `+-3pi/2`.
    Each gate's `shift_rules` says which. A gate with none (`QubitUnitary`) raises a clear error when its
    parameters are differentiated. A noise strength that the channel's Kraus weights are affine in
    (`BitFlip`, `PhaseFlip`, `DepolarizingChannel`, `PauliError`, the `p` of
    `GeneralizedAmplitudeDamping`) has the exact rule `df/dp = f(1) - f(0)`, PennyLane's, two valid
    channels (on `qfx.DensityMatrix()`, and unbiased on `qfx.Trajectories()`); the others (`gamma` of the
    damping channels, `ResetError`, `ThermalRelaxationError`, `QubitChannel`) raise the same error. The
    evaluations run as one `vmap` over stacked shifts (in chunks of
    `batch_size`), and the rule is applied again to derivatives of derivatives, so every order is exact:
    `jax.hessian` equals backprop's. Works under `jit`, `vmap`, `grad`, `jacfwd`, `jacrev`.

    With shots (`qfx.expval(..., shots=, key=)`) each shifted evaluation samples with its own key,
    derived from `key` by `jax.random.fold_in`, so the gradient is an unbiased estimator of the exact
    gradient, as on hardware. Derivatives with respect to observable coefficients differentiate the
    measurement at the final state (first order also with shots; mixed second derivatives with
    coefficients use autodiff through the simulation, so not with shots). With shots and more shifted
    circuits than fit in one chunk, second derivatives are taken by `jax.hessian` or `jax.jacfwd` (the
    chunks then run in a `lax.while_loop`, which reverse-over-reverse, `jax.grad` of `jax.grad`, cannot
    differentiate: JAX raises its error on while loops).

    It applies to measurements linear in `|psi><psi|` (`expval`, `probs`, `density_matrix`) and to `var`
    (shifts of `<O^2>` and `<O>`), not to `qfx.state` or `qfx.amplitude`, and not to `initial_state`:
    those raise an error when differentiated.

    **Arguments:**

    - `batch_size`: how many shifted circuits are simulated together; by default as many as fit in about
      256 MiB of state vectors.

    ```python
    circ = qfx.Circuit([qfx.RX(0.3, wires=0)])
    grad = jax.grad(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.ParameterShift()))(circ)
    grad.ops[0].theta  # -sin(0.3)
    ```
    """

    batch_size: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_batch_size("ParameterShift", self.batch_size)

    def __call__(self, backend, measurement, circuit, initial_state, args):
        check_gates_only(self, measurement, circuit)
        params, params_static = eqx.partition(circuit, eqx.is_inexact_array)
        args_diff, args_rest = eqx.partition(args, eqx.is_inexact_array)
        args_arrays, args_static = eqx.partition(args_rest, eqx.is_array)
        rules, owners = _gate_rules(params)
        noisy = has_channels(circuit.ops)
        chunk = chunk_size(backend.evaluation_bytes(circuit), self.batch_size)

        def evaluate(params, psi0, args_diff, args_arrays):
            c = eqx.combine(params, params_static)
            return backend.evaluate(measurement, c, psi0, eqx.combine(args_diff, args_arrays, args_static))

        shifted = jax.custom_jvp(evaluate)

        def reseed(primals, b):
            params, psi0, args_diff, args_arrays = primals
            return params, psi0, args_diff, jax.tree.map(lambda x: _reseed_key(x, b), args_arrays)

        def jvp(primals, tangents):
            params, psi0, args_diff, args_arrays = primals
            t_params, t_psi0, t_args, _ = tangents
            if not measurement.linear:
                raise ValueError(_not_linear(measurement.name))
            if not all(is_zero(t) for t in leaves_with_zeros(t_psi0)):
                raise ValueError(_INITIAL_STATE)
            check_rules(
                t_params,
                rules,
                owners,
                "Differentiate with respect to other leaves only (e.g. wrap it in jax.lax.stop_gradient, "
                "or split the circuit with eqx.partition), or use "
                + (
                    "diff=qfx.diff.Backprop() or FiniteDiff()."
                    if noisy
                    else "diff=qfx.diff.Adjoint(), Backprop() or FiniteDiff()."
                ),
            )
            # The primal through `shifted` itself, so that its own derivatives use the rule too.
            out = shifted(*primals)
            t_out = jnp.zeros_like(out)
            flat_t = leaves_with_zeros(t_args)
            moving = [i for i, t in enumerate(flat_t) if not is_zero(t)]
            if moving:  # only the leaves with tangents: a sampled estimate has no derivative in the others
                flat_args, tree = jax.tree.flatten(args_diff)

                def of_moving(*values):
                    leaves = list(flat_args)
                    for i, v in zip(moving, values, strict=True):
                        leaves[i] = v
                    return evaluate(params, psi0, jax.tree.unflatten(tree, leaves), args_arrays)

                _, t_coeffs = jax.jvp(
                    of_moving, tuple(flat_args[i] for i in moving), tuple(flat_t[i] for i in moving)
                )
                t_out = t_out + t_coeffs
            no_rules = [None] * len(jax.tree.leaves(args_diff))
            # With shots (a key among the arguments) autodiff sees estimates as constants: see map_in_chunks.
            keyed = any(is_key(x) for x in jax.tree.leaves(args_arrays))
            t_shift = shifted_jvp(
                shifted,
                primals,
                tangents,
                (rules, [None] * len(jax.tree.leaves(psi0)), no_rules, []),
                reseed,
                chunk,
                loop="while" if keyed else "scan",
            )
            if t_shift is not None:
                t_out = t_out + t_shift
            return out, t_out

        shifted.defjvp(jvp, symbolic_zeros=True)
        return measurement.post(shifted(params, initial_state, args_diff, args_arrays))
