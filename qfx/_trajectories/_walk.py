"""One trajectory of a noisy circuit: gates on a pure state, and at each channel one Kraus operator drawn
with its Born probability, with the log-probability of the choices kept for the score-function term."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._channels import AbstractChannel
from .._circuit import Circuit, Repeat
from .._custom_types import EXACT, complex_dtype, real_dtype
from .._gates import AbstractGate
from .._statevector import apply_matrix, reduced_density_matrix, run


def _branch(psi: Array, channel: AbstractChannel, n: int, key) -> tuple[Array, Array]:
    """One Kraus branch of `channel` drawn with probability `p_i = w_i ||M_i psi||**2`: the normalised
    state after it, and `log p_i` (differentiable in the strengths and, through `psi`, the gates)."""
    w, m = channel.weighted_kraus()
    w = w.astype(real_dtype())
    if channel.mixture:  # unitary M_i: the probabilities are the weights, whatever the state
        norms = jnp.ones_like(w)
    else:  # ||M_i psi||**2 = tr(M_i^dagger M_i rho) on the channel's wires
        rho = reduced_density_matrix(psi, channel.wires, n)
        norms = jnp.real(jnp.einsum("aji,ajk,ki->a", m.conj(), m, rho, precision=EXACT)).astype(real_dtype())
    p = w * norms
    logits = jnp.log(jnp.maximum(jax.lax.stop_gradient(p), 0))  # -inf: never drawn
    i = jax.random.categorical(key, logits)
    out = apply_matrix(psi, m[i], channel.wires, n)
    if not channel.mixture:
        out = out / jnp.sqrt(norms[i]).astype(out.dtype)
    return out, jnp.log(p[i])


def trajectory(ops, psi: Array, n: int, key) -> tuple[Array, Array]:
    """Runs `ops` (gates, channels, `Repeat` blocks) on `psi` along one trajectory drawn with `key`.

    **Returns:** the final normalised state and the log-probability of the branches taken."""
    logp = jnp.zeros((), real_dtype())
    run_: list = []
    for op in ops:
        if not isinstance(op, (AbstractChannel, Repeat)):
            run_.append(op)
            continue
        psi, run_ = (run(run_, psi, n) if run_ else psi), []
        if isinstance(op, AbstractChannel):
            key, sub = jax.random.split(key)
            psi, lp = _branch(psi, op, n, sub)
            logp = logp + lp
            continue
        op.check_layers()

        @jax.checkpoint
        def layer(carry, body):
            psi, k, lp = carry
            k, sub = jax.random.split(k)
            psi, more = trajectory(body.ops, psi, n, sub)
            return (psi, k, lp + more), None

        key, sub = jax.random.split(key)
        (psi, _, logp), _ = jax.lax.scan(layer, (psi, sub, logp), op.body, length=op.length)
    if run_:
        psi = run(run_, psi, n)
    return psi, logp


class Branch(AbstractGate):
    """The unitary `M_i` drawn at a random-unitary channel (see `drawn`): a gate whose matrix is data,
    never differentiated (the strengths reach the value through the branch's log-probability only)."""

    U: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    def __init__(self, U: Array, wires: tuple[int, ...]):
        self.U = jax.lax.stop_gradient(U).astype(complex_dtype())
        self._wires = wires

    @property
    def wires(self):
        return self._wires

    def matrix(self):
        return jax.lax.stop_gradient(self.U)


def only_mixtures(ops) -> bool:
    """Whether every channel in `ops` (`Repeat` bodies included) is a random unitary (`mixture`), whose
    branch probabilities do not depend on the state: then `drawn` can draw every branch first."""
    for op in ops:
        if isinstance(op, AbstractChannel) and not op.mixture:
            return False
        if isinstance(op, Repeat) and not only_mixtures(op.body.ops):
            return False
    return True


def _has_channel(ops) -> bool:
    return any(
        isinstance(op, AbstractChannel) or (isinstance(op, Repeat) and _has_channel(op.body.ops))
        for op in ops
    )


def drawn(ops, key) -> tuple[list, Array]:
    """`ops` with each random-unitary channel replaced by the `Branch` drawn for it with `key` (its
    probability `w_i` is its weight, whatever the state), and the log-probability of the draws.

    What remains is a circuit of gates: the state-vector pipeline fuses the drawn unitaries with the gates
    around them, and the adjoint walk can differentiate it. `Repeat` blocks stay blocks: the draws of
    their layers are stacked like their parameters (one key per layer)."""
    logp = jnp.zeros((), real_dtype())
    out = []
    for op in ops:
        if isinstance(op, AbstractChannel):
            key, sub = jax.random.split(key)
            w, m = op.weighted_kraus()
            w = w.astype(real_dtype())
            i = jax.random.categorical(sub, jnp.log(jnp.maximum(jax.lax.stop_gradient(w), 0)))
            out.append(Branch(m[i], op.wires))
            logp = logp + jnp.log(w[i])
        elif isinstance(op, Repeat) and _has_channel(op.body.ops):
            op.check_layers()
            key, sub = jax.random.split(key)

            def one(body, k):
                body_ops, lp = drawn(body.ops, k)
                return Circuit(body_ops, num_wires=body.num_wires), lp

            body, lps = eqx.filter_vmap(one)(op.body, jax.random.split(sub, op.length))
            out.append(Repeat(body, length=op.length))
            logp = logp + jnp.sum(lps)
        else:
            out.append(op)
    return out, logp


def score(logp: Array) -> Array:
    """1 in value, with derivative `d logp`: multiplied into a trajectory's value `f`, the derivative of the
    product is `df + f d logp`, the score-function estimator (see README.md)."""
    return jnp.exp(logp - jax.lax.stop_gradient(logp))
