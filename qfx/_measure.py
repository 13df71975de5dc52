"""Measurements: the entry points users call. Each is a pure function that works under jit, grad and vmap.

Every function takes `initial_state=` (default |0...0>) and `diff=` (a `qfx.diff` method, default
`qfx.diff.Backprop()`). Randomness is explicit: `sample` and shot-based `expval` take a keyword-only
`key` with no default.

Circuits holding control flow or mid-circuit measurements (`qfx.cond`, `qfx.for_loop`, `qfx.measure`, ...)
run in `qfx/_control.py`; those with measurements need `mcm="exact"` or `mcm="sampled"` (with `key=`).
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PRNGKeyArray
import numpy as np

from . import _kernels as K
from ._circuit import Circuit, check_circuit
from ._control_run import (
    check_mcm,
    control_sample,
    has_control,
    initial_state_of,
    mixed_density_matrix,
    mixed_expvals,
    mixed_probs,
    mixed_vars,
    run_control,
)
from ._custom_types import (
    EXACT,
    check_key,
    real_dtype,
    static_count,
    static_wires,
    with_auto_axes,
)
from ._observables import (
    AbstractObservable,
    Hermitian,
    LinearCombination,
    PauliWord,
    as_linear_combination,
    check_observable,
)
from ._tensornet import TensorNetwork, backend_expval, backend_probs
from .diff import AbstractDiffMethod, Backprop, Expectation

_BACKPROP = Backprop()


def _check_diff(diff, fn: str) -> None:
    if not isinstance(diff, AbstractDiffMethod):
        raise TypeError(
            f"qfx.{fn}: diff must be a qfx.diff method such as qfx.diff.Backprop(), got {diff!r}."
        )


def _check_wires_in(circuit: Circuit, wires, what) -> None:
    """`what`: the thing named in the error, or a function that names it (formatted only when raising)."""
    bad = [w for w in wires if w >= circuit.num_wires]
    if bad:
        what = what() if callable(what) else what
        raise ValueError(
            f"{what} acts on wire {bad[0]}, but the circuit has {circuit.num_wires} wires "
            f"(0..{circuit.num_wires - 1}); pass num_wires={max(wires) + 1} to the Circuit or fix the wire."
        )


def _observables(circuit: Circuit, observables, fn: str) -> tuple[tuple[LinearCombination, ...], bool]:
    """Normalises one observable or a sequence of them; returns them and whether one was given."""
    single = isinstance(observables, AbstractObservable)
    obs = (observables,) if single else observables
    if not isinstance(obs, Sequence) or not obs or not all(isinstance(o, AbstractObservable) for o in obs):
        raise TypeError(
            f"qfx.{fn}: expected an observable (e.g. qfx.Z(0)) or a non-empty list of observables, "
            f"got {observables!r}."
        )
    lcs = tuple(as_linear_combination(o) for o in obs)
    for o in lcs:
        check_observable(o, fn)
        _check_wires_in(circuit, o.wires, lambda o=o: f"The observable {o!r}")
    return lcs, single


def _check_measured_wires(circuit: Circuit, wires, fn: str) -> tuple[int, ...]:
    if wires is None:
        return tuple(range(circuit.num_wires))
    ints = static_wires(wires)
    if ints is None or len(set(ints)) != len(ints) or any(w < 0 for w in ints):
        raise ValueError(
            f"qfx.{fn}: wires must be a sequence of distinct non-negative ints (static; their order is the "
            f"order of the outcome bits), got {wires!r}."
        )
    _check_wires_in(circuit, ints, f"qfx.{fn}(wires={ints})")
    return ints


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
    pauli = K.pauli_expvals(state, tuple(words), n)
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
                h_psi = K.apply_matrix(state, t.matrix, t.wires, n)
                h = jnp.real(jnp.vdot(state, h_psi, precision=EXACT)).astype(real_dtype())
                value = value + lc.coeffs[k] * h
        out.append(value)
    return jnp.stack(out)


# --- shot estimates -----------------------------------------------------------------------------


@jax.custom_jvp
def _sampled(x, state):
    # `state` is an argument only so that a tangent flowing from the circuit reaches the rule below:
    # the sampled values themselves have a zero tangent (indices), which would give silent zeros.
    del state
    return x


@_sampled.defjvp
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
    state = K.apply_matrix(state, vecs.conj().T, term.wires, n)
    p = K.marginal_probs(state, term.wires, n)
    return jnp.mean(eig.astype(real_dtype())[K.sample_indices(key, p, shots)])


def _word_estimates(state, words: tuple, key, shots: int, n: int) -> Array:
    """The means of `shots` measurements of each Pauli word, each measured on its own.

    A word's outcomes are +-1 with probabilities (1 +- <P>) / 2, so the number of +1 outcomes is binomial:
    drawn from the exact values, with no rotated state per word (the program does not grow with the
    number of words). The same distribution as sampling bit strings in the word's eigenbasis."""
    exact = jax.lax.stop_gradient(K.pauli_expvals(state, words, n))
    plus = _binomial(key, shots, jnp.clip((1 + exact) / 2, 0, 1))
    return 2 * plus / shots - 1


# `jax.random.binomial` in float32 keeps the right spread up to about 2**26 trials and not beyond (its
# standard deviation came out 1.06x the binomial one at 10**8 trials, 1.5x at 10**9); float64 does at any
# count qfx takes (shots < 2**31).
_BINOMIAL_CHUNK = 1 << 24


def _binomial(key, shots: int, p: Array) -> Array:
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
    """Shot estimates of each observable: every term measured with its own `shots` samples."""
    out = []
    for lc in lcs:
        if not lc.terms:  # the zero observable, as without shots
            out.append(jnp.zeros((), real_dtype()))
            continue
        key, k_words, *k_terms = jax.random.split(key, len(lc.terms) + 2)
        at = [k for k, t in enumerate(lc.terms) if isinstance(t, PauliWord)]
        rest = [k for k, t in enumerate(lc.terms) if not isinstance(t, PauliWord)]
        parts = [_word_estimates(state, tuple(lc.terms[k].word for k in at), k_words, shots, n)] if at else []
        parts += [_term_estimate(state, lc.terms[k], k_terms[k], shots, n)[None] for k in rest]
        vals = jnp.concatenate(parts)[np.argsort(at + rest)]  # in the order of the terms
        # Sampling is marked per term, so the estimate stays differentiable in the coefficients.
        out.append(jnp.dot(lc.coeffs, _sampled(vals, state), precision=EXACT))
    return jnp.stack(out)


def _check_shots(shots, key, fn: str) -> int:
    count = static_count(shots, 1)
    if count is None:
        raise ValueError(f"qfx.{fn}: shots must be a positive int (static), got {shots!r}.")
    if count > np.iinfo(np.int32).max:  # JAX draws counts as int32
        raise ValueError(
            f"qfx.{fn}: shots={count} is above 2**31 - 1, the most one call draws; split them over several "
            "keys (jax.vmap over jax.random.split(key, k)) and combine the estimates."
        )
    if key is None:
        raise ValueError(f"qfx.{fn}: shots={shots} needs a PRNG key: pass key=jax.random.key(0).")
    check_key(key, f"qfx.{fn}")
    return count


# --- public entry points ------------------------------------------------------------------------


@with_auto_axes
def state(
    circuit: Circuit,
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _BACKPROP,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
) -> Array:
    """The final state vector, of shape `(2**num_wires,)`.

    With mid-circuit measurements, `mcm="sampled"` and `key` give one trajectory's post-measurement
    (normalised) state; `mcm="exact"` has no state vector (use `qfx.density_matrix`).
    """
    circuit = check_circuit(circuit, "state")
    _check_diff(diff, "state")
    check_mcm(mcm, "state")
    if has_control(circuit.ops):
        psi0 = initial_state_of(circuit, initial_state)
        return run_control(
            circuit, psi0, None, pure=lambda psi, _: psi, mixed=None, mcm=mcm, key=key, diff=diff, fn="state"
        )
    return diff(lambda psi, _: psi, circuit, initial_state_of(circuit, initial_state), None)


@with_auto_axes
def probs(
    circuit: Circuit,
    wires: int | Sequence[int] | None = None,
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _BACKPROP,
    backend: TensorNetwork | None = None,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
) -> Array:
    """Probabilities of the computational basis states of `wires` (all wires by default), in that order.

    `mcm` and `key` are for circuits with mid-circuit measurements: see `qfx.measure`.

    **Returns:** an array of shape `(2**len(wires),)`; the first wire is the most significant bit.
    """
    circuit = check_circuit(circuit, "probs")
    _check_diff(diff, "probs")
    check_mcm(mcm, "probs")
    wires = _check_measured_wires(circuit, wires, "probs")
    if backend is not None:  # the light cone of `wires` as a tensor network; no state vector
        return backend_probs(backend, circuit, wires, diff, initial_state=initial_state)
    n = circuit.num_wires
    measure = Expectation(lambda psi, _: K.marginal_probs(psi, wires, n))
    if has_control(circuit.ops):
        psi0 = initial_state_of(circuit, initial_state)
        mixed = lambda rho, _: mixed_probs(rho, wires)  # noqa: E731
        return run_control(
            circuit, psi0, None, pure=measure, mixed=mixed, mcm=mcm, key=key, diff=diff, fn="probs"
        )
    return diff(measure, circuit, initial_state_of(circuit, initial_state), None)


@with_auto_axes
def expval(
    circuit: Circuit,
    observable: AbstractObservable | Sequence[AbstractObservable],
    *,
    initial_state: ArrayLike | None = None,
    shots: int | None = None,
    key: PRNGKeyArray | None = None,
    diff: AbstractDiffMethod = _BACKPROP,
    backend: TensorNetwork | None = None,
    mcm: str | None = None,
) -> Array:
    """The expectation value of an observable, or of each of a list of observables.

    **Arguments:**

    - `circuit`: the circuit, run from |0...0> or `initial_state`.
    - `observable`: e.g. `0.5 * qfx.Z(0) @ qfx.Z(1) - 0.2 * qfx.X(0)`, or a list of them.
    - `shots`: if given, an estimate from `shots` measurements of each term (needs `key`).
    - `key`: a PRNG key, keyword-only; required with `shots`.
    - `diff`: the differentiation method.
    - `backend`: `None` (the state vector) or `qfx.TensorNetwork()`, which contracts each term's light cone
      and so handles shallow circuits far beyond 30 qubits.
    - `mcm`: for circuits with mid-circuit measurements, `"exact"` (all outcomes, weighted) or
      `"sampled"` (one trajectory drawn with `key`); see `qfx.measure`.

    **Returns:** a real scalar, or an array with one value per observable when a list was given.

    ```python
    circ = qfx.Circuit([qfx.RX(0.3, wires=0)])
    qfx.expval(circ, qfx.Z(0))       # cos(0.3)
    jax.grad(qfx.expval)(circ, qfx.Z(0)).ops[0].theta  # -sin(0.3)
    ```
    """
    circuit = check_circuit(circuit, "expval")
    _check_diff(diff, "expval")
    check_mcm(mcm, "expval")
    lcs, single = _observables(circuit, observable, "expval")
    if backend is not None:
        out = backend_expval(backend, circuit, lcs, diff, initial_state=initial_state, shots=shots)
        return out[0] if single else out
    n = circuit.num_wires
    psi0 = initial_state_of(circuit, initial_state)
    if has_control(circuit.ops):
        if shots is not None:
            raise ValueError(
                "qfx.expval: shots= is not supported for circuits with control flow or mid-circuit "
                "measurements; use mcm='exact', or mcm='sampled' and average over jax.vmap-ed keys."
            )
        pure = lambda psi, obs: _expvals(psi, obs, n)  # noqa: E731
        out = run_control(
            circuit, psi0, lcs, pure=pure, mixed=mixed_expvals, mcm=mcm, key=key, diff=diff, fn="expval"
        )
        return out[0] if single else out
    if shots is None:
        out = diff(Expectation(lambda psi, obs: _expvals(psi, obs, n)), circuit, psi0, lcs)
    else:
        shots = _check_shots(shots, key, "expval")
        measure = Expectation(lambda psi, a: _estimates(psi, a[0], a[1], shots, n))
        out = diff(measure, circuit, psi0, (lcs, key))
    return out[0] if single else out


@with_auto_axes
def var(
    circuit: Circuit,
    observable: AbstractObservable | Sequence[AbstractObservable],
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _BACKPROP,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
) -> Array:
    """The variance `<O^2> - <O>^2` of an observable, or of each of a list of them.

    `mcm` and `key` are for circuits with mid-circuit measurements: see `qfx.measure`.
    """
    circuit = check_circuit(circuit, "var")
    _check_diff(diff, "var")
    check_mcm(mcm, "var")
    lcs, single = _observables(circuit, observable, "var")
    lcs = tuple(_without_identity(o) for o in lcs)
    n = circuit.num_wires

    def moments(psi, obs):  # <O^2> and <O>: both linear in |psi><psi|, so parameter-shift applies
        mean = _expvals(psi, obs, n)
        sq = jnp.stack([jnp.sum(jnp.abs(K.apply_observable(psi, o, n)) ** 2) for o in obs])
        sq = sq.astype(real_dtype())
        return jnp.stack([sq, mean])

    measure = Expectation(moments, post=lambda m, _: m[0] - m[1] ** 2)
    if has_control(circuit.ops):
        psi0 = initial_state_of(circuit, initial_state)
        out = run_control(
            circuit, psi0, lcs, pure=measure, mixed=mixed_vars, mcm=mcm, key=key, diff=diff, fn="var"
        )
        return out[0] if single else out
    out = diff(measure, circuit, initial_state_of(circuit, initial_state), lcs)
    return out[0] if single else out


def _without_identity(lc: LinearCombination) -> LinearCombination:
    """`lc` less its multiples of the identity, which do not change a variance: `<O^2> - <O>^2` cancels
    them only to the rounding of `<O^2>` (in float32 an offset of 1000 left a variance of 0.125 where it
    was 0)."""
    keep = [i for i, t in enumerate(lc.terms) if not (isinstance(t, PauliWord) and t.word == ())]
    if len(keep) == len(lc.terms):
        return lc
    return LinearCombination(lc.coeffs[np.asarray(keep, np.int32)], [lc.terms[i] for i in keep])


@with_auto_axes
def density_matrix(
    circuit: Circuit,
    wires: int | Sequence[int] | None = None,
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _BACKPROP,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
) -> Array:
    """The reduced density matrix of `wires` (all by default), tracing out the rest: `(2**k, 2**k)`.

    `mcm` and `key` are for circuits with mid-circuit measurements: see `qfx.measure`.
    """
    circuit = check_circuit(circuit, "density_matrix")
    _check_diff(diff, "density_matrix")
    check_mcm(mcm, "density_matrix")
    wires = _check_measured_wires(circuit, wires, "density_matrix")
    n = circuit.num_wires
    K.check_memory(
        4 ** len(wires),
        f"qfx.density_matrix: the density matrix of {len(wires)} wires",
        "Ask for fewer wires (a reduced density matrix), or use qfx.state for a pure state.",
    )
    measure = Expectation(lambda psi, _: K.reduced_density_matrix(psi, wires, n))
    if has_control(circuit.ops):
        psi0 = initial_state_of(circuit, initial_state)
        mixed = lambda rho, _: mixed_density_matrix(rho, wires)  # noqa: E731
        return run_control(
            circuit, psi0, None, pure=measure, mixed=mixed, mcm=mcm, key=key, diff=diff, fn="density_matrix"
        )
    return diff(measure, circuit, initial_state_of(circuit, initial_state), None)


@with_auto_axes
def sample(
    circuit: Circuit,
    *,
    key: PRNGKeyArray,
    shots: int,
    wires: int | Sequence[int] | None = None,
    initial_state: ArrayLike | None = None,
    mcm: str | None = None,
) -> Array:
    """`shots` measurements of `wires` (all by default) in the computational basis.

    Pure: the same key gives the same samples; `jax.vmap` over keys gives independent batches. With
    mid-circuit measurements, `mcm="sampled"` runs one trajectory per shot, `mcm="exact"` samples the
    exact final distribution.

    **Returns:** an int32 array of bits, shape `(shots, len(wires))`.
    """
    circuit = check_circuit(circuit, "sample")
    shots = _check_shots(shots, key, "sample")
    check_mcm(mcm, "sample")
    wires = _check_measured_wires(circuit, wires, "sample")
    n = circuit.num_wires
    per_shot = 2 * len(wires) + 5  # int32s: a uniform, two gathered masses, the index and the bits twice
    K.check_memory(
        shots * per_shot,
        f"qfx.sample: {shots} shots of {len(wires)} wires (the draws, their indices and the bits)",
        "Draw fewer shots per call (jax.vmap over split keys, or several calls).",
        dtype=np.int32,
    )
    if has_control(circuit.ops):
        psi0 = initial_state_of(circuit, initial_state)
        return control_sample(circuit, psi0, key=key, shots=shots, wires=wires, mcm=mcm)
    psi = K.run(circuit.ops, initial_state_of(circuit, initial_state), n)
    idx = K.sample_indices(key, jax.lax.stop_gradient(K.marginal_probs(psi, wires, n)), shots)
    k = len(wires)
    return ((idx[:, None] >> jnp.arange(k - 1, -1, -1)) & 1).astype(jnp.int32)
