"""The adjoint method: reverse mode that un-applies gates instead of storing intermediate states.

The walk itself is the backend's (`AbstractStateVectorBackend.backward`); this module turns it into JAX
derivative rules."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._backend import AbstractStateVectorBackend
from ._base import AbstractDiffMethod, check_gates_only

_FORWARD_MODE_MESSAGE = (
    "qfx.diff.Adjoint() is a reverse-mode method (a jax.custom_vjp), so forward-mode differentiation "
    "(jax.jvp, jax.jacfwd) of it is not supported. Use jax.grad or jax.jacrev (jax.hessian works: it is "
    "forward-over-reverse), or diff=qfx.diff.ParameterShift() or qfx.diff.Backprop() for forward mode."
)


class _Walk:
    """A measured circuit split for the adjoint walk: `primals` are its differentiable leaves (the gate
    parameters, the initial state, the float leaves of `args`) and the other arrays of `args` (keys,
    indices: passed in, not closed over, as `vmap` may batch them)."""

    def __init__(self, backend, measurement, circuit, initial_state, args):
        self.backend, self.measurement = backend, measurement
        params, self.params_static = eqx.partition(circuit, eqx.is_inexact_array)
        args_diff, args_rest = eqx.partition(args, eqx.is_inexact_array)
        args_arrays, self.args_static = eqx.partition(args_rest, eqx.is_array)
        self.primals = (params, initial_state, args_diff, args_arrays)

    def simulate(self, params, psi0):
        return self.backend.simulate(eqx.combine(params, self.params_static), psi0)

    def measured(self, psi, args_diff, args_arrays):
        args = eqx.combine(args_diff, args_arrays, self.args_static)
        return self.measurement.post(self.backend.measure(self.measurement, psi, args))

    def value(self, params, psi0, args_diff, args_arrays):
        return self.measured(self.simulate(params, psi0), args_diff, args_arrays)

    def pull(self, primals, psi, ct=None) -> tuple:
        """The measured value and the cotangents of `primals[:3]` for the cotangent `ct` of the value
        (ones where None), from the final state `psi`: the bra `<psi| dmeasure/dpsi` walked backwards."""
        params, _, args_diff, args_arrays = primals
        value, measure_vjp = jax.vjp(lambda s, a: self.measured(s, a, args_arrays), psi, args_diff)
        psi_bar, args_bar = measure_vjp(jnp.ones_like(value) if ct is None else ct)
        circuit = eqx.combine(params, self.params_static)
        leaves, bra0 = self.backend.backward(circuit, psi, psi_bar.conj())
        psi0_bar = None if primals[1] is None else bra0.conj()  # None: |0...0>, made by the backend
        return value, (jax.tree.unflatten(jax.tree.structure(params), leaves), psi0_bar, args_bar)


class Adjoint(AbstractDiffMethod):
    """The adjoint method: reverse-mode derivatives in memory that does not grow with depth.

    The forward pass keeps only the final state. The backward pass starts from the bra
    `<psi| dmeasure/dpsi` (one state, whatever the number of observables or terms: it is the cotangent-
    weighted sum) and walks the circuit backwards, un-applying each gate to recover the state before it
    and taking that gate's parameter cotangents there; `Repeat` blocks are walked by a reverse
    `lax.scan`. It holds a few state vectors, against about one per parametric gate for backprop.

    Gradients flow to gate parameters (`QubitUnitary` entries included), `initial_state` and the
    observables' leaves (coefficients, `Hermitian` matrices).

    Higher orders: the backward pass is itself JAX code, so `jax.hessian` (forward-over-reverse) and
    `jax.grad` of `jax.grad` work and equal backprop's. Forward mode alone (`jax.jvp`, `jax.jacfwd`)
    is not available for a `jax.custom_vjp` and raises a `TypeError`; use `jax.jacrev`, or another
    method. Shot-based estimates cannot be differentiated with it (use `qfx.diff.ParameterShift()`).

    Backends: those that keep a state vector and can walk a circuit backwards
    (`AbstractStateVectorBackend`: `qfx.StateVector()`); others (`qfx.TensorNetwork()`) raise.

    ```python
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), qfx.CNOT(wires=(0, 1))])
    jax.grad(lambda c: qfx.expval(c, qfx.Z(1), diff=qfx.diff.Adjoint()))(circ)
    ```
    """

    @staticmethod
    def supports(backend) -> bool:
        """Whether the adjoint walk works with `backend`: one that keeps a state vector."""
        return isinstance(backend, AbstractStateVectorBackend)

    def __call__(self, backend, measurement, circuit, initial_state, args):
        check_gates_only(self, measurement, circuit)
        if not self.supports(backend):
            raise ValueError(
                f"qfx.{measurement.name}: diff=Adjoint() works on the state vector, which "
                f"backend={backend!r} does not keep; use qfx.diff.Backprop() (the default backpropagates "
                "there), qfx.diff.ParameterShift() or qfx.diff.FiniteDiff()."
            )
        walk = _Walk(backend, measurement, circuit, initial_state, args)

        @jax.custom_vjp
        def adjoint(*primals):
            return walk.value(*primals)

        def forward(*primals):
            psi = walk.simulate(*primals[:2])
            return walk.measured(psi, *primals[2:]), (primals, psi)

        def backward(residuals, ct):
            primals, psi = residuals
            return (*walk.pull(primals, psi, ct)[1], None)

        adjoint.defvjp(forward, backward)
        try:
            return adjoint(*walk.primals)
        except TypeError as e:  # raised here when the rule is traced under jax.jvp
            self.explain(e)
            raise

    def explain(self, error: Exception) -> None:
        if (
            isinstance(error, TypeError)
            and "forward-mode" in str(error)
            and str(error) != _FORWARD_MODE_MESSAGE
        ):
            raise TypeError(_FORWARD_MODE_MESSAGE) from error


def adjoint_scalar(backend, measurement, circuit, initial_state, args):
    """`measure(run(circuit))` for a real measurement with one entry, differentiated by the adjoint walk
    in any mode: a `jax.custom_jvp` whose tangent is `<gradient, tangent>`, with the gradient (of every
    differentiable input at once) from one walk.

    Reverse mode transposes that product, so `jax.grad` costs the adjoint method's forward pass and walk
    and keeps no intermediate state; forward mode (`jax.jvp`, `jax.jacfwd`) costs the same, where true
    forward mode would cost about two forward passes; higher orders differentiate the walk itself (JAX
    code). For one output entry only: with k entries the tangent would need k walks, where reverse mode
    needs one. Used by `qfx.diff.Auto` (see its rule)."""
    walk = _Walk(backend, measurement, circuit, initial_state, args)

    @jax.custom_jvp
    def scalar(*primals):
        return walk.value(*primals)

    @_in_one_piece
    def walked(*primals):  # the value and the gradient: the forward pass and the walk
        return walk.pull(primals, walk.simulate(*primals[:2]))

    @scalar.defjvp
    def scalar_jvp(primals, tangents):
        value, grads = walked(*primals)
        # JAX's cotangent `g` of a real function of a complex `z` gives `df = Re(sum(g dz))`.
        terms = [
            jnp.sum((jnp.real(g * t) if jnp.iscomplexobj(g) else g * t).astype(value.dtype))
            for g, t in zip(jax.tree.leaves(grads), jax.tree.leaves(tangents[:3]), strict=True)
        ]
        return value, jnp.reshape(sum(terms, jnp.zeros((), value.dtype)), value.shape).astype(value.dtype)

    return scalar(*walk.primals)


def _in_one_piece(fn):
    """`fn` with its own derivatives (JAX's), bound as one `jax.custom_jvp` call.

    Reverse mode (`jax.grad`, `jax.value_and_grad`) linearises a `jax.custom_jvp` by partially evaluating
    its rule, and partial evaluation has no shortcut for a `lax.scan` whose inputs are all known: it
    partially evaluates the body again and hoists its known part. A custom_jvp call whose inputs are all
    known is bound whole where the rule's primal half runs (`JaxprTrace.process_custom_jvp_call`), so
    the walk's scans are processed once. Its rule is `jax.jvp` of `fn`: higher orders differentiate the
    walk as before."""
    wrapped = jax.custom_jvp(fn)
    wrapped.defjvp(lambda primals, tangents: jax.jvp(fn, primals, tangents))
    return wrapped
