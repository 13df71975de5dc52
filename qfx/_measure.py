"""The entry points users call: `state`, `probs`, `expval`, `var`, `density_matrix`, `sample`, `amplitude`.

Each checks its arguments, describes what it asks for as a measurement (`qfx/_measurements.py`), and
hands it to the differentiation method with the backend: `diff(backend, measurement, circuit, ...)`.
Nothing else: how a state is simulated is the backend's (`backend=`, default `qfx.StateVector()`), how
a derivative is obtained is the method's (`diff=`, default `qfx.diff.Auto()`). All are pure functions
that work under `jit`, `grad` and `vmap`. Randomness is explicit: `sample` and the shot estimates of
`expval`, `probs` and `var` take a keyword-only `key` with no default.
"""

from collections.abc import Sequence
import functools
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PRNGKeyArray
import numpy as np

from ._backend import AbstractBackend
from ._channels import has_channels
from ._checks import as_dtype, as_numeric, check_key, is_concrete, static_count, static_wires
from ._circuit import Circuit, check_circuit_flat, wire_range
from ._densitymatrix import DensityMatrix as DensityMatrixBackend
from ._measurements import (
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
from ._memory import check_memory
from ._observables import (
    AbstractObservable,
    LinearCombination,
    PauliWord,
    as_linear_combination,
    check_observable,
    square,
)
from ._roll import roll, roll_on_host
from ._sharding import with_auto_axes
from ._statevector import StateVector, check_mcm
from .diff import AbstractDiffMethod, Auto

_AUTO = Auto()
_STATE_VECTOR = StateVector()
_DENSITY_MATRIX = DensityMatrixBackend()


def _backend_of(backend, mcm, fn: str, circuit: Circuit) -> AbstractBackend:
    """The backend of a call: `backend=`; else the density matrix for a circuit holding noise channels,
    or the state vector with the `mcm=` shorthand's mode."""
    check_mcm(mcm, f"qfx.{fn}")  # a typo must not pass silently, whichever the circuit
    if backend is None:
        if mcm is None and has_channels(circuit.ops):
            return _DENSITY_MATRIX
        return _STATE_VECTOR if mcm is None else StateVector(mcm=mcm)
    if not isinstance(backend, AbstractBackend):
        raise TypeError(
            f"qfx.{fn}: backend must be a qfx backend such as qfx.StateVector() (the default) or "
            f"qfx.TensorNetwork(), got {backend!r}."
        )
    if mcm is not None:
        raise ValueError(
            f"qfx.{fn}: mcm={mcm!r} is a shorthand for backend=qfx.StateVector(mcm={mcm!r}); with "
            f"backend={backend!r}, give the mode to the backend."
        )
    return backend


def _measure(
    measurement: AbstractMeasurement,
    circuit: Circuit,
    flat: tuple,
    payload,
    *,
    initial_state,
    diff,
    backend,
    mcm,
    key,
    single: bool = False,
) -> Array:
    """The prologue and the call that every entry point shares (`flat`: `jax.tree.flatten(circuit)`, which
    `check_circuit_flat` made); `single` picks the one entry of a list."""
    if diff is not None and not isinstance(diff, AbstractDiffMethod):
        raise TypeError(
            f"qfx.{measurement.name}: diff must be a qfx.diff method such as qfx.diff.Auto(), got {diff!r}."
        )
    backend = _backend_of(backend, mcm, measurement.name, circuit)
    psi0 = backend.prepare(measurement, circuit, initial_state)
    try:
        return _evaluate(diff, backend, measurement, circuit, flat, psi0, (payload, key), single)
    except TypeError as e:  # JAX's own errors about transformations: the method may say more
        if diff is not None:
            diff.explain(e)
        raise


def _evaluate(diff, backend, measurement, circuit, flat, initial_state, args, single):
    """The measurement of `circuit` (rolled, see `qfx/_roll.py`) by `diff` on `backend`; `diff=None`
    evaluates without a derivative rule (`qfx.sample`). `flat`: `jax.tree.flatten(circuit)`.

    Compiled once per structure where no `jax.jit` (or other staging transformation) already compiles it:
    called eagerly, or under `jax.grad` or `jax.vmap` called eagerly, a second call on new values of one
    structure reuses the program (`_compiled`); a flat circuit of concrete values is rolled before it, on
    the host, so that the program takes a few stacked arrays (under `jax.grad`, inside it). Inside the
    user's `jax.jit` it is traced in place, as anything else there is."""
    rest = jax.tree.flatten((initial_state, args))
    traced = any(isinstance(x, jax.core.Tracer) for x in flat[0])
    if traced or any(isinstance(x, jax.core.Tracer) for x in rest[0]):
        leaves = flat[0] + rest[0]
        if _staged(leaves):
            return _run(diff, backend, measurement, circuit, initial_state, args, single)
        if diff is not None and _eager_reverse(leaves):
            return _reverse(diff, backend, measurement, flat, rest, single)
    if not traced:
        circuit = roll_on_host(circuit, flat)[0]  # the program then takes a few stacked arrays
    return _compiled(diff, backend, measurement, circuit, initial_state, args, single)


def _run(diff, backend, measurement, circuit, initial_state, args, single):
    circuit = roll(circuit)
    if diff is None:  # drawn, not differentiated
        out = backend.evaluate(measurement, circuit, initial_state, args)
    else:
        out = diff(backend, measurement, circuit, initial_state, args)
    return out[0] if single else out


# XLA's CPU backend emits each kernel through MLIR ("fusion emitters") unless told to use its classic
# emitters, which compile the same kernels 1.3-5x faster (at run time within noise of the default in HEA
# value_and_grad at n = 8-20, 4-15% slower in `benchmarks/compile_options.py`). The option is an XLA
# compile option of these programs alone: the user's own `jax.jit`s keep their settings. Dropped where
# this XLA does not know it, and under a transformation (JAX takes options only on a top-level jit).
_FAST_COMPILE = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def _options() -> dict:
    """`_FAST_COMPILE` where this XLA compiles for the CPU and knows the option; read on the first eager
    call, not at import (that would initialise the backend before `jax.distributed.initialize`)."""
    if jax.default_backend() != "cpu":
        return {}
    try:
        jax.jit(lambda x: x, compiler_options=_FAST_COMPILE).lower(np.float32(0)).compile()
    except Exception:  # an XLA without the option (an experimental flag): compile with the defaults
        return {}
    return _FAST_COMPILE


try:  # JAX's own test for "no transformation is tracing now"; private, hence guarded
    from jax._src.core import trace_ctx as _trace_ctx
except ImportError:  # pragma: no cover
    _trace_ctx = None


def _top_level() -> bool:
    """Whether no transformation is tracing now. A call under `jax.jit` may have no traced arguments (a
    circuit of constants built inside the traced function), and JAX refuses compiler options on a nested
    jit. JAX has no public test for this; where its private one is missing, qfx compiles with the defaults."""
    is_top_level = getattr(_trace_ctx, "is_top_level", None)
    return bool(is_top_level()) if is_top_level is not None else False


class _Program:
    """`fn` compiled once per structure, as `eqx.filter_jit` does: arrays are traced, everything else (the
    circuit's wires and gate kinds, the strategies' settings, shot counts) is static and keys the cache,
    which is JAX's own (`jax.clear_caches()` empties it). Compiled with `_options()` where it is called
    outside any transformation; under one (an eager `jax.vmap`, `jax.hessian`), JAX compiles the program
    it stages with the defaults."""

    def __init__(self, fn):
        self.fn, self.plain, self.fast = fn, eqx.filter_jit(fn), None

    def __call__(self, *args):
        if not (_options() and _top_level()):  # traced arguments mean a transformation is tracing
            return self.plain(*args)
        if self.fast is None:
            self.fast = eqx.filter_jit(self.fn, compiler_options=_options())
        return self.fast(*args)


_compiled = _Program(_run)


def _eager_reverse(leaves) -> bool:
    """Whether the traced leaves are those of one reverse-mode derivative called eagerly (`jax.grad`,
    `jax.value_and_grad`, `jax.vjp`, `jax.jacrev` without `jax.jit`): tracers of one linearization, over
    concrete, inexact values, and not one of `jax.linearize`, whose linear function runs forwards (JAX
    linearises both the same way, so the call stack tells them apart)."""
    traced = [x for x in leaves if isinstance(x, jax.core.Tracer)]
    return (
        bool(traced)
        and all(
            type(x).__name__ == "LinearizeTracer"
            and x._trace is traced[0]._trace
            and not isinstance(x.primal, jax.core.Tracer)
            and jnp.issubdtype(x.dtype, jnp.inexact)
            for x in traced
        )
        and not _under_linearize()
    )


_LINEARIZE = getattr(jax.linearize, "__wrapped__", jax.linearize).__code__


def _under_linearize() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _LINEARIZE:
            return True
        frame = frame.f_back
    return False


def _reverse(diff, backend, measurement, flat, rest, single):
    """An eager reverse-mode derivative of the measurement, as two programs compiled once per structure:
    the forward pass with its residuals (`jax.vjp` of `_run`, on the circuit rolled on the host from the
    concrete primal values) and the pullback. JAX's own route (linearising the cached forward program)
    would take the flat circuit's every scalar as an argument of its own and stack them in the program;
    here the pullback's cotangents of the stacked leaves are split back onto the circuit's leaves on the
    host. `flat`, `rest`: `jax.tree.flatten` of the circuit and of `(initial_state, args)`."""
    (circuit_leaves, circuit_def), (rest_leaves, rest_def) = flat, rest
    leaves = circuit_leaves + rest_leaves
    in_circuit = len(circuit_leaves)
    traced = tuple(i for i, x in enumerate(leaves) if isinstance(x, jax.core.Tracer))
    where = {}  # traced leaf -> (position among the differentiated rolled leaves, index in its stack)

    def trees(values) -> tuple:
        """The circuit's leaves with `values` put in, and `(initial_state, args)`."""
        full = list(leaves)
        for i, v in zip(traced, values, strict=True):
            full[i] = v
        return full[:in_circuit], jax.tree.unflatten(rest_def, full[in_circuit:])

    @jax.custom_vjp
    def measure(*values):
        c, (s, a) = trees(values)
        return _compiled(diff, backend, measurement, jax.tree.unflatten(circuit_def, c), s, a, single)

    def fwd(*values):
        c, (s, a) = trees(values)
        rolled, index = roll_on_host(jax.tree.unflatten(circuit_def, c), (c, circuit_def))
        source = (index or tuple(range(in_circuit))) + tuple(range(in_circuit, len(leaves)))
        wanted, differentiated = [], set(traced)
        for k, src in enumerate(source):
            stacked = isinstance(src, tuple)
            hits = [(j, i) for j, i in enumerate(src if stacked else (src,)) if i in differentiated]
            for j, i in hits:
                where[i] = (len(wanted), j if stacked else None)
            if hits:
                wanted.append(k)
        return _compiled_vjp(diff, backend, measurement, (rolled, s, a), tuple(wanted), single)

    def bwd(pullback, ct):
        cts = _compiled_pullback(pullback, ct)
        host = [x if isinstance(x, jax.core.Tracer) else np.asarray(x) for x in cts]  # traced: jax.jacrev
        return tuple(host[k] if j is None else host[k][j] for k, j in (where[i] for i in traced))

    measure.defvjp(fwd, bwd)
    return measure(*[leaves[i] for i in traced])


def _run_vjp(diff, backend, measurement, trees, wanted: tuple[int, ...], single):
    """The measurement and its pullback with respect to the leaves of `trees` at the positions `wanted`."""
    leaves, treedef = jax.tree.flatten(trees)

    def run(xs):
        full = list(leaves)
        for k, x in zip(wanted, xs, strict=True):
            full[k] = x
        return _run(diff, backend, measurement, *jax.tree.unflatten(treedef, full), single)

    return jax.vjp(run, [leaves[k] for k in wanted])


_compiled_vjp = _Program(_run_vjp)
_compiled_pullback = _Program(lambda pullback, ct: pullback(ct)[0])


def _staged(leaves) -> bool:
    """Whether a leaf is traced by a staging transformation (`jax.jit`, `jax.make_jaxpr`, a loop body):
    under `jax.grad` and `jax.vmap` the tracers carry values (primals, batches), under staging they do
    not."""
    for x in leaves:
        while isinstance(x, jax.core.Tracer):
            if "Jaxpr" in type(x).__name__:  # DynamicJaxprTracer, JaxprTracer
                return True
            x = getattr(x, "primal", None) if hasattr(x, "primal") else getattr(x, "val", None)
    return False


def _check_wires_in(circuit: Circuit, wires, what) -> None:
    """`what`: the thing named in the error, or a function that names it (formatted only when raising)."""
    bad = [w for w in wires if w >= circuit.num_wires]
    if bad:
        what = what() if callable(what) else what
        raise ValueError(
            f"{what} acts on wire {bad[0]}, but the circuit has {wire_range(circuit.num_wires)}; pass "
            f"num_wires={max(wires) + 1} to the Circuit or fix the wire."
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


def _without_identity(lc: LinearCombination) -> LinearCombination:
    """`lc` less its multiples of the identity, which do not change a variance: `<O^2> - <O>^2` cancels
    them only to the rounding of `<O^2>` (in float32 an offset of 1000 left a variance of 0.125 where it
    was 0)."""
    keep = [i for i, t in enumerate(lc.terms) if not (isinstance(t, PauliWord) and t.word == ())]
    if len(keep) == len(lc.terms):
        return lc
    return LinearCombination(lc.coeffs[np.asarray(keep, np.int32)], [lc.terms[i] for i in keep])


def _bitstring(circuit: Circuit, bitstring) -> Array:
    n = circuit.num_wires
    if isinstance(bitstring, str):
        if set(bitstring) - {"0", "1"}:
            raise ValueError(f"qfx.amplitude: a bitstring has only '0' and '1', got {bitstring!r}.")
        bitstring = [int(c) for c in bitstring]
    bits = as_numeric(bitstring, "qfx.amplitude: the bitstring")
    if not jnp.issubdtype(bits.dtype, jnp.integer) and bits.dtype != jnp.bool_:
        raise TypeError(f"qfx.amplitude: the bitstring must hold integers 0 or 1, got dtype {bits.dtype}.")
    if bits.shape != (n,):
        raise ValueError(
            f"qfx.amplitude: expected {n} bits (one per wire, wire 0 first), got shape {bits.shape}. "
            "For several bitstrings, map with jax.vmap."
        )
    bits = as_dtype(bits, jnp.int32)
    if is_concrete(bits):  # on the host: inside a jit trace, JAX operations on a constant are traced
        host = np.asarray(bits)
        if np.any((host != 0) & (host != 1)):
            raise ValueError(f"qfx.amplitude: bits must be 0 or 1, got {host.tolist()}.")
        return bits
    return eqx.error_if(bits, jnp.any((bits != 0) & (bits != 1)), "qfx.amplitude: bits must be 0 or 1.")


# --- public entry points ------------------------------------------------------------------------


@with_auto_axes
def state(
    circuit: Circuit,
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _AUTO,
    backend: AbstractBackend | None = None,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
) -> Array:
    """The final state vector, of shape `(2**num_wires,)`.

    With mid-circuit measurements, `mcm="sampled"` and `key` give one trajectory's post-measurement
    (normalised) state; `mcm="exact"` has no state vector (use `qfx.density_matrix`).
    """
    circuit, flat = check_circuit_flat(circuit, "state")
    return _measure(
        State(),
        circuit,
        flat,
        None,
        initial_state=initial_state,
        diff=diff,
        backend=backend,
        mcm=mcm,
        key=key,
    )


@with_auto_axes
def probs(
    circuit: Circuit,
    wires: int | Sequence[int] | None = None,
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _AUTO,
    backend: AbstractBackend | None = None,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
    shots: int | None = None,
) -> Array:
    """Probabilities of the computational basis states of `wires` (all wires by default), in that order.

    **Arguments:**

    - `circuit`: the circuit, run from |0...0> or `initial_state`.
    - `wires`: the measured wires, in the order of the outcome bits.
    - `shots`: if given, estimates: the frequencies of each outcome among `shots` measurements (a
      multinomial draw, unbiased; needs `key`). Differentiable as `qfx.expval(..., shots=)` is: with
      `diff=qfx.diff.ParameterShift()`, an unbiased estimator of the gradient.
    - `key`: a PRNG key, keyword-only; for `shots`, and for circuits with mid-circuit measurements
      (`mcm="sampled"`, see `qfx.measure`).
    - `diff`, `backend`, `mcm`: as in `qfx.expval`.

    **Returns:** an array of shape `(2**len(wires),)`; the first wire is the most significant bit.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1))])
    qfx.probs(circ)  # [0.5, 0, 0, 0.5]
    qfx.probs(circ, shots=1000, key=jax.random.key(0))  # [f, 0, 0, 1 - f], f close to 0.5
    ```
    """
    circuit, flat = check_circuit_flat(circuit, "probs")
    wires = _check_measured_wires(circuit, wires, "probs")
    measurement = Probs(wires) if shots is None else ProbsEstimate(_check_shots(shots, key, "probs"), wires)
    return _measure(
        measurement,
        circuit,
        flat,
        None,
        initial_state=initial_state,
        diff=diff,
        backend=backend,
        mcm=mcm,
        key=key,
    )


@with_auto_axes
def expval(
    circuit: Circuit,
    observable: AbstractObservable | Sequence[AbstractObservable],
    *,
    initial_state: ArrayLike | None = None,
    shots: int | None = None,
    key: PRNGKeyArray | None = None,
    diff: AbstractDiffMethod = _AUTO,
    backend: AbstractBackend | None = None,
    mcm: str | None = None,
) -> Array:
    """The expectation value of an observable, or of each of a list of observables.

    **Arguments:**

    - `circuit`: the circuit, run from |0...0> or `initial_state`.
    - `observable`: e.g. `0.5 * qfx.Z(0) @ qfx.Z(1) - 0.2 * qfx.X(0)`, or a list of them.
    - `shots`: if given, an estimate from `shots` measurements of each term (needs `key`).
    - `key`: a PRNG key, keyword-only; required with `shots`.
    - `diff`: the differentiation method.
    - `backend`: `qfx.StateVector()` (the default) or `qfx.TensorNetwork()`, which contracts each term's
      light cone and so handles shallow circuits far beyond 30 qubits.
    - `mcm`: for circuits with mid-circuit measurements, `"exact"` (all outcomes, weighted) or
      `"sampled"` (one trajectory drawn with `key`); see `qfx.measure`.

    **Returns:** a real scalar, or an array with one value per observable when a list was given.

    ```python
    circ = qfx.Circuit([qfx.RX(0.3, wires=0)])
    qfx.expval(circ, qfx.Z(0))       # cos(0.3)
    jax.grad(qfx.expval)(circ, qfx.Z(0)).ops[0].theta  # -sin(0.3)
    ```
    """
    circuit, flat = check_circuit_flat(circuit, "expval")
    lcs, single = _observables(circuit, observable, "expval")
    measurement = Expval() if shots is None else Estimate(_check_shots(shots, key, "expval"))
    return _measure(
        measurement,
        circuit,
        flat,
        lcs,
        initial_state=initial_state,
        diff=diff,
        backend=backend,
        mcm=mcm,
        key=key,
        single=single,
    )


@with_auto_axes
def var(
    circuit: Circuit,
    observable: AbstractObservable | Sequence[AbstractObservable],
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _AUTO,
    backend: AbstractBackend | None = None,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
    shots: int | None = None,
) -> Array:
    """The variance `<O^2> - <O>^2` of an observable, or of each of a list of them.

    **Arguments:**

    - `circuit`, `observable`, `initial_state`, `diff`, `backend`, `mcm`: as in `qfx.expval`.
    - `shots`: if given, an unbiased estimate (needs `key`): `<O^2>` is estimated from `shots`
      measurements of each term of `O @ O` (expanded as `sum c_j c_k {T_j, T_k} / 2`, anticommuting Pauli
      words dropping out), and `<O>^2` as the product of two independent estimates of `<O>`, each from
      `shots` measurements of each term of `O` (the square of one estimate would be biased by its
      variance). Differentiable as `qfx.expval(..., shots=)` is: with `diff=qfx.diff.ParameterShift()`,
      an unbiased estimator of the gradient.
    - `key`: a PRNG key, keyword-only; for `shots`, and for circuits with mid-circuit measurements.

    **Returns:** a real scalar, or one value per observable when a list was given.

    ```python
    circ = qfx.Circuit([qfx.RY(0.5, wires=0)])
    qfx.var(circ, qfx.Z(0))  # sin(0.5)**2
    qfx.var(circ, qfx.Z(0), shots=1000, key=jax.random.key(0))  # close to it
    ```
    """
    circuit, flat = check_circuit_flat(circuit, "var")
    lcs, single = _observables(circuit, observable, "var")
    lcs = tuple(_without_identity(o) for o in lcs)
    if shots is None:
        measurement, payload = Var(), lcs
    else:
        measurement = VarEstimate(_check_shots(shots, key, "var"))
        payload = (lcs, tuple(square(o) for o in lcs))
    return _measure(
        measurement,
        circuit,
        flat,
        payload,
        initial_state=initial_state,
        diff=diff,
        backend=backend,
        mcm=mcm,
        key=key,
        single=single,
    )


@with_auto_axes
def density_matrix(
    circuit: Circuit,
    wires: int | Sequence[int] | None = None,
    *,
    initial_state: ArrayLike | None = None,
    diff: AbstractDiffMethod = _AUTO,
    backend: AbstractBackend | None = None,
    mcm: str | None = None,
    key: PRNGKeyArray | None = None,
) -> Array:
    """The reduced density matrix of `wires` (all by default), tracing out the rest: `(2**k, 2**k)`.

    `mcm` and `key` are for circuits with mid-circuit measurements: see `qfx.measure`.
    """
    circuit, flat = check_circuit_flat(circuit, "density_matrix")
    wires = _check_measured_wires(circuit, wires, "density_matrix")
    return _measure(
        DensityMatrix(wires),
        circuit,
        flat,
        None,
        initial_state=initial_state,
        diff=diff,
        backend=backend,
        mcm=mcm,
        key=key,
    )


@with_auto_axes
def sample(
    circuit: Circuit,
    *,
    key: PRNGKeyArray,
    shots: int,
    wires: int | Sequence[int] | None = None,
    initial_state: ArrayLike | None = None,
    backend: AbstractBackend | None = None,
    mcm: str | None = None,
) -> Array:
    """`shots` measurements of `wires` (all by default) in the computational basis.

    Pure: the same key gives the same samples; `jax.vmap` over keys gives independent batches. With
    mid-circuit measurements, `mcm="sampled"` runs one trajectory per shot, `mcm="exact"` samples the
    exact final distribution.

    **Returns:** an int32 array of bits, shape `(shots, len(wires))`.
    """
    circuit, flat = check_circuit_flat(circuit, "sample")
    shots = _check_shots(shots, key, "sample")
    wires = _check_measured_wires(circuit, wires, "sample")
    per_shot = 2 * len(wires) + 5  # int32s: a uniform, two gathered masses, the index and the bits twice
    check_memory(
        shots * per_shot,
        f"qfx.sample: {shots} shots of {len(wires)} wires (the draws, their indices and the bits)",
        "Draw fewer shots per call (jax.vmap over split keys, or several calls).",
        dtype=np.int32,
    )
    return _measure(
        Sample(shots, wires),
        circuit,
        flat,
        None,
        initial_state=initial_state,
        diff=None,
        backend=backend,
        mcm=mcm,
        key=key,
    )


@with_auto_axes
def amplitude(
    circuit: Circuit,
    bitstring: str | ArrayLike,
    *,
    diff: AbstractDiffMethod = _AUTO,
    backend: AbstractBackend | None = None,
) -> Array:
    """The amplitude `<b|C|0...0>` of one computational basis state.

    **Arguments:**

    - `circuit`: the circuit, run from |0...0>.
    - `bitstring`: `n` bits, wire 0 first (the most significant bit): `"0110"`, `[0, 1, 1, 0]` or an
      integer array of shape `(n,)` (it may be traced: map over bitstrings with `jax.vmap`).
    - `diff`: the differentiation method.
    - `backend`: `qfx.StateVector()` (the default) or `qfx.TensorNetwork()`, which never builds the
      state and so works far beyond 30 qubits for shallow circuits.

    **Returns:** a complex scalar.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1))])
    qfx.amplitude(circ, "11")  # 1/sqrt(2)
    qfx.amplitude(circ, "11", backend=qfx.TensorNetwork())
    ```
    """
    circuit, flat = check_circuit_flat(circuit, "amplitude")
    if not isinstance(diff, AbstractDiffMethod):  # before the bits: the documented order of checks
        raise TypeError(
            f"qfx.amplitude: diff must be a qfx.diff method such as qfx.diff.Auto(), got {diff!r}."
        )
    bits = _bitstring(circuit, bitstring)
    return _measure(
        Amplitude(), circuit, flat, bits, initial_state=None, diff=diff, backend=backend, mcm=None, key=None
    )
