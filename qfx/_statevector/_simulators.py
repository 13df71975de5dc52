"""How control-flow steps act on state vectors: pure states, sampled trajectories, exact mixtures."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._checks import check_key
from .._circuit import Circuit
from .._control import MidMeasure, Mixed, Program, capped_while, evaluate, traverse
from .._custom_types import EXACT, real_dtype
from .._measurements import Estimate, ProbsEstimate, Sample, VarEstimate
from .._memory import check_memory
from ._kernels import apply_gate
from ._measure import bits, measure_mixed, measure_pure
from ._reductions import draw_one, marginal_probs, sample_indices

# --- simulators: how each kind of step acts on the carried state --------------------------------------


class _Pure:
    """No measurements: the carry is the state vector."""

    def __init__(self, n):
        self.n = n

    def gate(self, psi, gate):
        return apply_gate(psi, gate, self.n)

    def measure(self, carry, op, slot):  # pragma: no cover  (circuits with measurements never get here)
        raise AssertionError

    def switch_on(self, carry, expr, branches, slot):  # pragma: no cover
        raise AssertionError

    def while_on(self, carry, expr, body, max_iterations, slot):  # pragma: no cover
        raise AssertionError


def _project(psi: Array, wire: int, n: int, b, to) -> Array:
    """The part of `psi` where `wire` is `b`, moved to the value `to` (b itself, or 0 for a reset)."""
    t = psi.reshape(2**wire, 2, 2 ** (n - wire - 1))
    kept = jnp.take(t, b, axis=1)
    zero = jnp.zeros_like(kept)
    return jnp.stack([jnp.where(to == 0, kept, zero), jnp.where(to == 1, kept, zero)], axis=1).reshape(-1)


class _Sampled:
    """One trajectory: the carry is `(state, record, key)`; outcomes are drawn and the state collapses."""

    def __init__(self, n):
        self.n = n

    def gate(self, carry, gate):
        psi, record, key = carry
        return apply_gate(psi, gate, self.n), record, key

    def measure(self, carry, op: MidMeasure, slot: int):
        psi, record, key = carry
        p = marginal_probs(psi, (op.wire,), self.n)
        key, sub = jax.random.split(key)
        if op.postselect is None:
            # Drawn as `sample_indices` draws, from p1 / (p0 + p1): the state's norm may be below 1
            # (float32 drift over thousands of gates, or an initial state within its tolerance), and
            # `u < p1` would then draw an outcome of probability 0, whose collapse divides by 0.
            p0, p1 = jax.lax.stop_gradient(p[0]), jax.lax.stop_gradient(p[1])
            b = draw_one(jax.random.uniform(sub, (), real_dtype()), p0, p1).astype(jnp.int32)
        else:
            b = jnp.asarray(op.postselect, jnp.int32)
        pb = p[b]  # not 1 - p1: that loses a small probability to the rounding of p1 near 1
        if op.postselect is not None:
            pb = eqx.error_if(
                pb, _is_zero(pb), f"{op!r}: the post-selected outcome has probability 0 (to rounding)."
            )
        to = jnp.zeros((), jnp.int32) if op.reset else b
        psi = _project(psi, op.wire, self.n, b, to) / jnp.sqrt(pb).astype(psi.dtype)
        return psi, record.at[slot].set(b), key

    def switch_on(self, carry, expr, branches, slot):
        index = evaluate(expr, lambda token: carry[1][slot(token)])
        return jax.lax.switch(index, branches, carry)

    def while_on(self, carry, expr, body, max_iterations, slot):
        def test(c):
            return evaluate(expr, lambda token: c[1][slot(token)]) != 0

        if max_iterations is None:
            return capped_while(test, body, carry, "sampled")

        def step(c, _):
            return jax.lax.cond(test(c), body, lambda c: c, c), None

        return jax.lax.scan(step, carry, length=max_iterations)[0]


class _Exact:
    """All branches: the carry is a classical-quantum state, a flat array over `S` record bits (slot 0
    most significant), then the `n` row wires, then the `n` column wires of a density matrix."""

    def __init__(self, n, num_slots):
        check_memory(
            2 ** (num_slots + 2 * n),
            f"mcm='exact' keeps a density matrix per record of outcomes: {num_slots} measurements on "
            f"{n} wires",
            "Use mcm='sampled' with a key per shot.",
        )
        self.n, self.S = n, num_slots
        self.rows = {w: num_slots + w for w in range(n)}
        self.cols = {w: num_slots + n + w for w in range(n)}
        self.total = num_slots + 2 * n
        records = np.arange(2**num_slots)
        self.bits = [jnp.asarray((records >> (num_slots - 1 - s)) & 1, jnp.int32) for s in range(num_slots)]

    def initial(self, psi0: Array) -> Array:
        rho = jnp.outer(psi0, psi0.conj()).reshape(-1)
        return jnp.zeros((2**self.S, rho.shape[0]), psi0.dtype).at[0].set(rho).reshape(-1)

    def gate(self, x, gate):
        x = apply_gate(x, gate, self.total, self.rows)
        return apply_gate(x.conj(), gate, self.total, self.cols).conj()

    def measure(self, x, op: MidMeasure, slot: int):
        a, b = 2**slot, 2 ** (self.S - slot - 1)
        c, d = 2**op.wire, 2 ** (self.n - op.wire - 1)
        t = x.reshape(a, 2, b, c, 2, d, c, 2, d).sum(axis=1)  # forget the register's previous outcome
        blocks = []
        for outcome in (0, 1):
            block = t[:, :, :, outcome, :, :, outcome, :]
            if op.postselect is not None and outcome != op.postselect:
                block = jnp.zeros_like(block)
            to = 0 if op.reset else outcome
            e = jnp.zeros((2, 2), x.dtype).at[to, to].set(1)
            blocks.append(jnp.einsum("abcdef,xy->abcxdeyf", block, e, precision=EXACT))
        return jnp.stack(blocks, axis=1).reshape(-1)

    def _mask(self, x, mask: Array) -> Array:
        return (x.reshape(2**self.S, -1) * mask.astype(x.dtype)[:, None]).reshape(-1)

    def _index(self, expr, slot) -> Array:
        return evaluate(expr, lambda token: self.bits[slot(token)])

    def switch_on(self, x, expr, branches, slot):
        index = jnp.clip(self._index(expr, slot), 0, len(branches) - 1)
        out = jnp.zeros_like(x)
        for k, branch in enumerate(branches):
            out = out + branch(self._mask(x, index == k))
        return out

    def weight(self, x) -> Array:
        """The trace of each record's density matrix: the probability of each classical record."""
        dim = 2**self.n
        diag = jnp.diagonal(x.reshape(2**self.S, dim, dim), axis1=1, axis2=2)
        return jnp.real(jnp.sum(diag, axis=1)).astype(real_dtype())

    def while_on(self, x, expr, body, max_iterations, slot):
        active = self._index(expr, slot) != 0

        def step(x):
            looping = self._mask(x, active)
            return x - looping + body(looping)

        if max_iterations is not None:
            return jax.lax.scan(lambda x, _: (step(x), None), x, length=max_iterations)[0]
        eps = float(jnp.finfo(real_dtype()).eps)

        def looping(x):  # relative to the weight of all records, which post-selection may have made tiny
            return jnp.sum(self.weight(self._mask(x, active))) > eps * jnp.sum(self.weight(x))

        return capped_while(looping, step, x, "exact")


def check_mcm(mcm, fn: str) -> None:
    if mcm not in (None, "exact", "sampled"):
        raise ValueError(f"{fn}: mcm must be 'exact', 'sampled' or None, got {mcm!r}.")


def check_mode(program: Program, mcm, key, fn: str) -> str:
    """The simulation mode of a circuit with control flow: "pure" without measurements, else `mcm`."""
    if program.num_measurements == 0:
        return "pure"
    if mcm is None:
        raise ValueError(
            f"qfx.{fn}: the circuit has mid-circuit measurements (qfx.measure), so pass mcm='exact' (all "
            "outcomes, weighted by their probabilities) or mcm='sampled' with key=jax.random.key(0) (one "
            "trajectory; jax.vmap over keys for many)."
        )
    if mcm == "sampled" and key is None:
        raise ValueError(
            f"qfx.{fn}: mcm='sampled' draws the measurement outcomes, so it needs key=jax.random.key(0)."
        )
    if mcm == "exact" and key is not None:
        raise ValueError(f"qfx.{fn}: mcm='exact' uses no randomness; drop key= (or use mcm='sampled').")
    if key is not None:
        check_key(key, f"qfx.{fn}")
    return mcm


def simulate(circuit: Circuit, psi0: Array, *, mcm, key, fn: str) -> "tuple[Array | Mixed, Array | None]":
    """Runs a circuit holding control-flow operations.

    **Returns:** `(final, record)`: the pure final state (and, in sampled mode, the int32 record of
    outcomes, one per register) or, in exact mode, a `Mixed` (and None).
    """
    program = Program(circuit.ops)
    mode = check_mode(program, mcm, key, fn)
    n = circuit.num_wires
    if mode == "pure":
        return traverse(circuit.ops, psi0, _Pure(n), program, program.alias, ()), None
    if mode == "sampled":
        return _trajectory(circuit.ops, psi0, n, key, program, fn)
    sim = _Exact(n, len(program.slots))
    x = traverse(circuit.ops, sim.initial(psi0), sim, program, program.alias, ())
    weights = sim.weight(x)
    dim = 2**n
    rho = jnp.sum(x.reshape(2**sim.S, dim, dim), axis=0)
    total = jnp.sum(weights)
    if program.postselected:  # else the total is 1: no check, so no host callback (jax.export, the cache)
        total = eqx.error_if(
            total,
            _is_zero(total),
            "mcm='exact': the post-selected outcomes have probability 0 (to rounding).",
        )
    return Mixed(rho / total.astype(rho.dtype), weights / total), None


def _is_zero(probability: Array) -> Array:
    """Whether a probability is 0 up to rounding: below `(2 eps)**2` (5.7e-14 in float32, 4.9e-32 in
    float64), the square of an amplitude that is exactly 0 computed with a few rounding errors (RX(pi)|0>
    leaves 1.9e-15 on |0> in float32, RY(pi) RY(pi) 7.6e-15). Renormalised, that noise would pass for a
    state; an accurately computed 1e-12 (float32) does not."""
    return probability <= (2 * jnp.finfo(probability.dtype).eps) ** 2


def _trajectory(ops, psi0: Array, n: int, key, program: Program, fn: str) -> tuple[Array, Array]:
    """One trajectory of `ops` (sampled mode): the final state and the record of outcomes."""
    if program.postselected_after_drawn is not None:
        raise ValueError(
            f"qfx.{fn}: mcm='sampled' follows one trajectory, and {program.postselected_after_drawn}: "
            "forcing the post-selected outcome cannot condition the earlier one on it, so the statistics "
            "would not be conditioned on the post-selection. Use "
            "mcm='exact', or measure without postselect= and keep the trajectories with that outcome."
        )
    record = jnp.zeros(len(program.slots), jnp.int32)
    psi, record, _ = traverse(ops, (psi0, record, key), _Sampled(n), program, program.alias, ())
    # Only post-selection: nothing is drawn, the trajectory is the exact conditional state (differentiable,
    # as with qfx.measure_state(..., postselect=)).
    return (psi if program.drawn == 0 else _not_differentiable(psi)), record


@jax.custom_jvp
def _not_differentiable(psi: Array) -> Array:
    return psi


@_not_differentiable.defjvp
def _not_differentiable_jvp(primals, tangents):
    # Differentiating one trajectory follows it with its outcomes held fixed, which misses how their
    # probabilities change: a biased gradient (mean over keys ~0 where the exact one is -0.78), so none.
    raise ValueError(
        "Sampled measurement outcomes (mcm='sampled', qfx.apply with key=, qfx.measure_state) cannot be "
        "differentiated: one trajectory's derivative misses how the outcomes' probabilities depend on the "
        "parameters (a biased gradient). Differentiate with mcm='exact'."
    )


def evaluate_control(measurement, circuit: Circuit, psi0: Array, args, mcm) -> Array:
    """The value of `measurement` for a circuit holding control flow (see `StateVector.evaluate`)."""
    payload, key = args
    n = circuit.num_wires
    if isinstance(measurement, (Estimate, ProbsEstimate, VarEstimate)):
        raise ValueError(
            f"qfx.{measurement.name}: shots= is not supported for circuits with control flow or mid-circuit "
            "measurements; use mcm='exact', or mcm='sampled' and average over jax.vmap-ed keys."
        )
    if isinstance(measurement, Sample) and mcm == "sampled" and Program(circuit.ops).num_measurements:
        # One trajectory per shot, each read out once.
        wires = measurement.wires

        def one(k):
            k_run, k_read = jax.random.split(k)
            psi, _ = simulate(circuit, psi0, mcm=mcm, key=k_run, fn="sample")
            p = jax.lax.stop_gradient(marginal_probs(psi, wires, n))
            return sample_indices(k_read, p, 1)[0]

        return bits(jax.vmap(one)(jax.random.split(key, measurement.shots)), len(wires))
    # A sample's key is for the final readout: only sampled mode draws outcomes with it.
    run_key = None if isinstance(measurement, Sample) else key
    final, _ = simulate(circuit, psi0, mcm=mcm, key=run_key, fn=measurement.name)
    if isinstance(final, Mixed):
        return measure_mixed(measurement, final.rho, args)
    return measure_pure(measurement, final, args, n)
