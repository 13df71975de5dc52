"""Measurements of a density matrix: each `qfx._measurements` kind as a function of `rho` and of
`args = (payload, key)`."""

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._custom_types import EXACT, real_dtype
from .._measurements import AbstractMeasurement, Estimate, ProbsEstimate, VarEstimate
from .._observables import LinearCombination, PauliWord
from .._statevector import (
    binomial,
    measure_mixed,
    mixed_density_matrix,
    mixed_expvals,
    mixed_probs,
    multinomial,
    sample_indices,
    sampled,
)


def _term_estimate(rho: Array, term, key, shots: int) -> Array:
    """The mean of `shots` measurements of one term: a Pauli word's +-1 outcomes are binomial in its
    exact value; a Hermitian term is measured in its eigenbasis."""
    if isinstance(term, PauliWord):
        exact = mixed_expvals(rho, (LinearCombination(jnp.ones(1, real_dtype()), [term]),))[0]
        p = jnp.clip((1 + jax.lax.stop_gradient(exact)) / 2, 0, 1)
        return 2 * binomial(key, shots, p) / shots - 1
    eig, vecs = jnp.linalg.eigh(term.matrix)
    sub = mixed_density_matrix(rho, term.wires)
    p = jnp.real(jnp.einsum("ik,ij,jk->k", vecs.conj(), sub, vecs, precision=EXACT)).astype(real_dtype())
    p = jax.lax.stop_gradient(jnp.clip(p, 0, None))
    return jnp.mean(eig.astype(real_dtype())[sample_indices(key, p, shots)])


def _estimates(rho: Array, lcs, key, shots: int) -> Array:
    out = []
    for lc in lcs:
        if not lc.terms:
            out.append(jnp.zeros((), real_dtype()))
            continue
        keys = jax.random.split(key, len(lc.terms) + 1)
        key = keys[0]
        vals = jnp.stack([_term_estimate(rho, t, k, shots) for t, k in zip(lc.terms, keys[1:], strict=True)])
        out.append(jnp.dot(lc.coeffs, sampled(vals.astype(real_dtype()), rho), precision=EXACT))
    return jnp.stack(out)


def measure_rho(measurement: AbstractMeasurement, rho: Array, args) -> Array:
    """The value of `measurement` (before its `post`) on a density matrix `rho` of shape `(2**n, 2**n)`."""
    payload, key = args
    if isinstance(measurement, Estimate):
        return _estimates(rho, payload, key, measurement.shots)
    if isinstance(measurement, VarEstimate):  # squares, then two independent estimates of each observable
        lcs, squares = payload
        return _estimates(rho, (*squares, *lcs, *lcs), key, measurement.shots).reshape(3, len(lcs))
    if isinstance(measurement, ProbsEstimate):
        p = jax.lax.stop_gradient(mixed_probs(rho, measurement.wires)).astype(real_dtype())
        return sampled(multinomial(key, measurement.shots, p) / measurement.shots, rho)
    return measure_mixed(measurement, rho, args)
