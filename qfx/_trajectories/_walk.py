"""One trajectory of a noisy circuit: gates on a pure state, and at each channel one Kraus operator drawn
with its Born probability, with the log-probability of the choices kept for the score-function term."""

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._channels import AbstractChannel
from .._circuit import Repeat
from .._custom_types import EXACT, real_dtype
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


def score(logp: Array) -> Array:
    """1 in value, with derivative `d logp`: multiplied into a trajectory's value `f`, the derivative of the
    product is `df + f d logp`, the score-function estimator (see README.md)."""
    return jnp.exp(logp - jax.lax.stop_gradient(logp))
