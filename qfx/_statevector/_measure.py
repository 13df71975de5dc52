"""Measurements of a state vector (and, for exact mid-circuit measurement, of a density matrix): each
`qfx._measurements` kind as a function of the final state and of `args = (payload, key)`."""

from collections.abc import Sequence
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._custom_types import EXACT, real_dtype
from .._measurements import (
    AbstractMeasurement,
    Amplitude,
    DensityMatrix,
    Estimate,
    Expval,
    Probs,
    ProbsEstimate,
    Sample,
    State,
    Var,
    VarEstimate,
)
from .._observables import Hermitian, LinearCombination, PauliWord
from ._kernels import apply_matrix
from ._reductions import (
    apply_observable,
    marginal,
    marginal_probs,
    pauli_expvals,
    reduced_density_matrix,
    sample_indices,
)

# --- exact expectation values -------------------------------------------------------------------


def _words(lcs) -> dict:
    """The distinct Pauli words of the observables, each with its index (in order of appearance)."""
    words: dict = {}
    for lc in lcs:
        for t in lc.terms:
            if isinstance(t, PauliWord):
                words.setdefault(t.word, len(words))
    return words


def _expvals(state: Array, lcs: tuple[LinearCombination, ...], n: int) -> Array:
    """<O_j> for each observable; all Pauli words are evaluated together (shared passes)."""
    words = _words(lcs)
    pauli = pauli_expvals(state, tuple(words), n)
    out = []
    for lc in lcs:
        # One gather of the words' values and one dot product per observable, whatever its length.
        at = [k for k, t in enumerate(lc.terms) if isinstance(t, PauliWord)]
        value = jnp.zeros((), real_dtype())
        if at:
            index = np.asarray([words[lc.terms[k].word] for k in at])
            value = jnp.dot(lc.coeffs[np.asarray(at)], pauli[index], precision=EXACT)
        for k, t in enumerate(lc.terms):
            if not isinstance(t, PauliWord):
                h_psi = apply_matrix(state, t.matrix, t.wires, n)
                h = jnp.real(jnp.vdot(state, h_psi, precision=EXACT)).astype(real_dtype())
                value = value + lc.coeffs[k] * h
        out.append(value)
    return jnp.stack(out)


# --- shot estimates -----------------------------------------------------------------------------


@jax.custom_jvp
def sampled(x, state):
    # `state` is an argument only so that a tangent flowing from the circuit reaches the rule below:
    # the sampled values themselves have a zero tangent (indices), which would give silent zeros.
    del state
    return x


@sampled.defjvp
def _sampled_jvp(primals, tangents):
    raise ValueError(
        "A shot-based estimate (shots=...) cannot be differentiated through the simulation (backprop or "
        "adjoint): sampling is not differentiable. Use diff=qfx.diff.ParameterShift() for gradients with "
        "shots, or shots=None. (With ParameterShift already: its shifts cover gate parameters and first "
        "derivatives in observable coefficients; derivatives in Hermitian matrix entries and second "
        "derivatives mixing coefficients with gate parameters need shots=None.)"
    )


def _term_estimate(state, term: Hermitian, key, shots: int, n: int) -> Array:
    """The mean of `shots` measurements of one Hermitian term, in its eigenbasis."""
    eig, vecs = jnp.linalg.eigh(term.matrix)
    state = apply_matrix(state, vecs.conj().T, term.wires, n)
    p = marginal_probs(state, term.wires, n)
    return jnp.mean(eig.astype(real_dtype())[sample_indices(key, p, shots)])


# `jax.random.binomial` in float32 keeps the right spread up to about 2**26 trials and not beyond (its
# standard deviation came out 1.06x the binomial one at 10**8 trials, 1.5x at 10**9); float64 does at any
# count qfx takes (shots < 2**31).
_BINOMIAL_CHUNK = 1 << 24


def binomial(key, shots: int, p: Array) -> Array:
    """Binomial(shots, p) counts in the real dtype; in float32, past `_BINOMIAL_CHUNK` trials, as the exact
    int32 sum of draws of at most that many (a sum of binomials of one `p` is binomial)."""
    dtype = real_dtype()
    if dtype == jnp.float64 or shots <= _BINOMIAL_CHUNK:
        return jax.random.binomial(key, shots, p, dtype=dtype)
    full, rest = divmod(shots, _BINOMIAL_CHUNK)
    sizes = jnp.asarray([_BINOMIAL_CHUNK] * full + ([rest] if rest else []), dtype)
    sizes = sizes.reshape((-1,) + (1,) * p.ndim)
    draws = jax.random.binomial(key, sizes, p, shape=sizes.shape[:1] + p.shape, dtype=dtype)
    return jnp.sum(draws.astype(jnp.int32), axis=0).astype(dtype)


def _estimates(state, lcs, key, shots: int, n: int) -> Array:
    """Shot estimates of each observable: every term measured with its own `shots` samples.

    A Pauli word's outcomes are +-1 with probabilities (1 +- <P>) / 2, so the number of +1 outcomes is
    binomial: drawn from the exact values, with no rotated state per word, and for every word of every
    observable in one draw (one program whatever the number of words or observables; a word in two
    observables is drawn twice, independently). The same distribution as sampling bit strings in the
    word's eigenbasis. Hermitian terms are sampled in their eigenbasis."""
    entries = [(i, k) for i, lc in enumerate(lcs) for k, t in enumerate(lc.terms) if isinstance(t, PauliWord)]
    dense = [
        (i, k) for i, lc in enumerate(lcs) for k, t in enumerate(lc.terms) if not isinstance(t, PauliWord)
    ]
    k_words, *k_terms = jax.random.split(key, len(dense) + 1)
    values: dict = {}
    if entries:
        words = _words(lcs)
        exact = jax.lax.stop_gradient(pauli_expvals(state, tuple(words), n))
        index = np.asarray([words[lcs[i].terms[k].word] for i, k in entries])
        plus = binomial(k_words, shots, jnp.clip((1 + exact[index]) / 2, 0, 1))
        drawn = 2 * plus / shots - 1
        values = {entry: drawn[j] for j, entry in enumerate(entries)}
    for (i, k), k_term in zip(dense, k_terms, strict=True):
        values[i, k] = _term_estimate(state, lcs[i].terms[k], k_term, shots, n)
    out = []
    for i, lc in enumerate(lcs):
        if not lc.terms:  # the zero observable, as without shots
            out.append(jnp.zeros((), real_dtype()))
            continue
        vals = jnp.stack([values[i, k] for k in range(len(lc.terms))])
        # Sampling is marked per term, so the estimate stays differentiable in the coefficients.
        out.append(jnp.dot(lc.coeffs, sampled(vals, state), precision=EXACT))
    return jnp.stack(out)


def multinomial(key, shots: int, p: Array) -> Array:
    """Multinomial(shots, p) counts over the `2**k` outcomes of `p`, in the real dtype: bit by bit, each
    count split between the outcomes' two continuations by a binomial draw (the exact distribution, in
    `k 2**k` work and `2**k` memory whatever `shots`). In float32, more than `_BINOMIAL_CHUNK` shots are
    drawn in chunks of at most that many and added up exactly, as `binomial` does."""
    dtype = real_dtype()
    if dtype != jnp.float64 and shots > _BINOMIAL_CHUNK:
        full, rest = divmod(shots, _BINOMIAL_CHUNK)
        sizes = jnp.asarray([_BINOMIAL_CHUNK] * full + ([rest] if rest else []), dtype)
        keys = jax.random.split(key, sizes.shape[0])
        draws = jax.vmap(lambda kk, size: _tree(kk, size, p))(keys, sizes)
        return jnp.sum(draws.astype(jnp.int32), axis=0).astype(dtype)
    return _tree(key, jnp.asarray(shots, dtype), p)


def _tree(key, shots: Array, p: Array) -> Array:
    """The draws of `multinomial`, one level of bits per step of a `lax.scan`: one binomial in the
    program (each costs seconds of compilation) whatever the number of bits. At level `j` the count of
    the outcomes that start with the `j`-bit prefix `a` is held at index `a << (k - j)`; its share that
    continues with a 0 stays there and the rest moves `2**(k - j - 1)` on."""
    size = p.shape[0]
    k = round(math.log2(size))
    if k == 0:
        return shots[None]
    fractions = []  # level j at offset 2**j - 1: P(prefix a0) / P(prefix a) for each j-bit prefix a
    for j in range(k):
        pairs = p.reshape(2**j, 2, -1).sum(axis=2)
        parent = pairs.sum(axis=1)
        fractions.append(jnp.where(parent > 0, pairs[:, 0] / jnp.where(parent > 0, parent, 1), 0))
    pyramid = jnp.clip(jnp.concatenate(fractions), 0, 1)
    index = jnp.arange(size, dtype=jnp.int32)

    def level(counts, step):
        j, key_j = step
        rest = k - j  # the bits after the prefix
        held = (index & ((1 << rest) - 1)) == 0
        fraction = jnp.where(held, pyramid[(1 << j) - 1 + (index >> rest)], 0)
        zero = jax.random.binomial(key_j, counts, fraction.astype(counts.dtype), dtype=counts.dtype)
        return zero + jnp.roll(counts - zero, 1 << (rest - 1)), None

    start = jnp.zeros(size, shots.dtype).at[0].set(shots)
    counts, _ = jax.lax.scan(level, start, (jnp.arange(k, dtype=jnp.int32), jax.random.split(key, k)))
    return counts


def _frequencies(state, wires: tuple[int, ...], key, shots: int, n: int) -> Array:
    """The frequencies of the outcomes of `wires` among `shots` measurements: unbiased estimates of their
    probabilities."""
    p = jax.lax.stop_gradient(marginal_probs(state, wires, n))
    return sampled(multinomial(key, shots, p.astype(real_dtype())) / shots, state)


def _moments(state: Array, lcs, n: int) -> Array:
    """`<O^2>` and `<O>` of each observable, stacked: both linear in `|psi><psi|`."""
    mean = _expvals(state, lcs, n)
    square = jnp.stack([jnp.sum(jnp.abs(apply_observable(state, o, n)) ** 2) for o in lcs])
    return jnp.stack([square.astype(real_dtype()), mean])


def bits(index: Array, k: int) -> Array:
    """Basis-state indices as int32 bits, the first most significant: shape `index.shape + (k,)`."""
    return ((index[..., None] >> jnp.arange(k - 1, -1, -1)) & 1).astype(jnp.int32)


def measure_pure(measurement: AbstractMeasurement, state: Array, args, n: int) -> Array:
    """The value of `measurement` (before its `post`) on a final state of `n` wires."""
    payload, key = args
    if isinstance(measurement, State):
        return state
    if isinstance(measurement, Amplitude):
        index = jnp.sum(payload * (2 ** jnp.arange(n - 1, -1, -1, dtype=jnp.int32)))
        return state[index]
    if isinstance(measurement, Probs):
        return marginal_probs(state, measurement.wires, n)
    if isinstance(measurement, DensityMatrix):
        return reduced_density_matrix(state, measurement.wires, n)
    if isinstance(measurement, Expval):
        return _expvals(state, payload, n)
    if isinstance(measurement, Estimate):
        return _estimates(state, payload, key, measurement.shots, n)
    if isinstance(measurement, Var):
        return _moments(state, payload, n)
    if isinstance(measurement, ProbsEstimate):
        return _frequencies(state, measurement.wires, key, measurement.shots, n)
    if isinstance(measurement, VarEstimate):  # in one draw: squares, then two independent sets of values
        lcs, squares = payload
        return _estimates(state, (*squares, *lcs, *lcs), key, measurement.shots, n).reshape(3, len(lcs))
    if isinstance(measurement, Sample):
        p = jax.lax.stop_gradient(marginal_probs(state, measurement.wires, n))
        return bits(sample_indices(key, p, measurement.shots), len(measurement.wires))
    raise TypeError(f"qfx.StateVector has no rule for the measurement {measurement!r}.")


# --- on the density matrix of exact mid-circuit measurement ---------------------------------------------


def mixed_probs(rho: Array, wires: tuple[int, ...]) -> Array:
    return marginal(jnp.real(jnp.diagonal(rho)), wires, round(math.log2(rho.shape[0])))


def _apply_rows(rho: Array, lc: LinearCombination) -> Array:
    """O rho, with O applied to the row wires of the flat density matrix."""
    n2 = round(math.log2(rho.size))
    return apply_observable(rho.reshape(-1), lc, n2).reshape(rho.shape)


def mixed_expvals(rho: Array, lcs: Sequence[LinearCombination]) -> Array:
    return jnp.stack([jnp.real(jnp.trace(_apply_rows(rho, lc))).astype(real_dtype()) for lc in lcs])


def mixed_density_matrix(rho: Array, wires: tuple[int, ...]) -> Array:
    n = round(math.log2(rho.shape[0]))
    rest = [w for w in range(n) if w not in wires]
    k = len(wires)
    perm = list(wires) + rest + [n + w for w in wires] + [n + w for w in rest]
    t = rho.reshape((2,) * 2 * n).transpose(perm).reshape(2**k, 2 ** (n - k), 2**k, 2 ** (n - k))
    return jnp.einsum("ajbj->ab", t, precision=EXACT)


def _mixed_moments(rho: Array, lcs) -> Array:
    out = []
    for lc in lcs:
        o_rho = _apply_rows(rho, lc)
        out.append(jnp.stack([jnp.real(jnp.trace(_apply_rows(o_rho, lc))), jnp.real(jnp.trace(o_rho))]))
    return jnp.stack(out, axis=1).astype(real_dtype())


def measure_mixed(measurement: AbstractMeasurement, rho: Array, args) -> Array:
    """The value of `measurement` (before its `post`) on a normalised density matrix `rho`."""
    payload, key = args
    if isinstance(measurement, Probs):
        return mixed_probs(rho, measurement.wires)
    if isinstance(measurement, DensityMatrix):
        return mixed_density_matrix(rho, measurement.wires)
    if isinstance(measurement, Expval):
        return mixed_expvals(rho, payload)
    if isinstance(measurement, Var):
        return _mixed_moments(rho, payload)
    if isinstance(measurement, Sample):
        p = jax.lax.stop_gradient(mixed_probs(rho, measurement.wires))
        return bits(sample_indices(key, p, measurement.shots), len(measurement.wires))
    raise ValueError(
        f"qfx.{measurement.name}: with mcm='exact' the state after mid-circuit measurements is a mixture of "
        "branches, not a state vector. Use qfx.density_matrix, or mcm='sampled' with a key for one "
        "trajectory's state."
    )
