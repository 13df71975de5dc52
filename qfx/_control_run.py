"""Running circuits that hold control flow and mid-circuit measurements (`qfx/_control.py`).

One traversal (`_run`) turns loops and branches into `lax.scan` / `lax.fori_loop` / `lax.switch` /
`lax.while_loop`, and hands each step to a simulator that says how it acts on the carried state:
- `_Pure` (no measurements): the state vector;
- `_Sampled` (`mcm="sampled"`): `(state, record, key)`, one trajectory; outcomes are drawn, the state
  collapses and is renormalised, and the int32 `record` keeps the latest outcome of each measurement;
- `_Exact` (`mcm="exact"`): a classical-quantum state, one unnormalised density matrix per value of the
  record, so that loops keep a fixed shape and branches merge (memory `2**registers * 4**num_wires`).
Gates go through the same kernel as everywhere (`qfx/_kernels.py: apply_gate`); the density matrix is
a flat vector over record bits, row wires and column wires, and `U rho U^dagger` is two kernel calls.

Also here: the entry points `qfx.state`, `qfx.probs`, ... call (`run_control`, `mixed_*`), and the
functional style (`qfx.apply`, `qfx.measure_state`, `qfx.zero_state`).
"""

from collections.abc import Sequence
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PRNGKeyArray
import numpy as np

from . import _kernels as K
from ._circuit import Circuit, Repeat, check_circuit, check_parameter_shapes, relabel_ops
from ._control import (
    AbstractControlOperation,
    Cond,
    ForLoop,
    MidMeasure,
    WhileLoop,
    _evaluate,
    _expr_refs,
    _format,
    measure,
)
from ._custom_types import (
    EXACT,
    as_dtype,
    as_numeric,
    check_key,
    complex_dtype,
    is_concrete,
    real_dtype,
    static_count,
    tolerance,
    with_auto_axes,
)
from ._gates import AbstractGate, AbstractOperation
from ._observables import LinearCombination
from .diff import Backprop

# --- static analysis ----------------------------------------------------------------------------------


def has_control(ops) -> bool:
    """Whether `ops` (a circuit's) hold any control-flow operation or measurement, Repeat bodies included."""
    for op in ops:
        if isinstance(op, AbstractControlOperation):
            return True
        if isinstance(op, Repeat) and has_control(op.body.ops):
            return True
    return False


def _loop_tokens(ops, alias: dict) -> list:
    """Tokens of the measurements a loop body holds that the enclosing scope does not know (those it made
    when called), in order; not inside nested loop bodies (they have their own)."""
    out: list = []

    def visit(ops):
        for op in ops:
            if isinstance(op, MidMeasure) and op.token not in alias and op.token not in out:
                out.append(op.token)
            elif isinstance(op, Repeat):
                visit(op.body.ops)
            elif isinstance(op, Cond):
                for b in op.branches:
                    visit(b.ops)
            elif isinstance(op, WhileLoop):
                visit(op.body.ops)

    visit(ops)
    return out


class _Program:
    """The classical registers of a circuit, keyed by measurement token through `alias` (token -> register
    key). A measurement of the circuit (its branches, Repeat bodies and loop arguments included) has the
    register `("m", id)`, `id` its number in the circuit; those a `for_loop` body makes afresh at each call
    (new tokens each time) are keyed by the loop's position and their order in the body."""

    def __init__(self, ops):
        self.slots: dict = {}
        self.referenced: list = []  # (register key, reference) of every read
        self.read_early: list = []  # (register key, reference) read before their measurement runs
        self.num_measurements = 0
        # Post-selection that an outcome drawn at random may precede (see `simulate`): the first such one.
        self.drawn, self.postselected = 0, 0
        self.postselected_after_drawn: str | None = None
        numbering: dict = {}
        relabel_ops(tuple(ops), numbering)  # the circuit's own numbering (ops need not be a Circuit's)
        self.alias = {token: ("m", k) for token, k in numbering.items()}
        self._visit(ops, self.alias, ())
        missing = [ref for key, ref in self.referenced if key not in self.slots]
        if missing:
            raise ValueError(
                f"A condition reads the outcome {_format(missing[0])}, but that measurement is not in the "
                "circuit; "
                "put the qfx.measure(...) operation in the circuit before the condition that reads it."
            )
        if self.read_early:
            raise ValueError(
                f"A condition reads the outcome {_format(self.read_early[0][1])} before that measurement "
                "runs (it would read 0); put the qfx.measure(...) operation before the condition that reads "
                "it."
            )

    def _read(self, expr, alias) -> None:
        for r in _expr_refs(expr):
            key = alias.get(r[2].token)
            self.referenced.append((key, r))
            if key not in self.slots:
                self.read_early.append((key, r))

    def _visit(self, ops, alias, path):
        for j, op in enumerate(ops):
            p = path + (j,)
            if isinstance(op, MidMeasure):
                self.num_measurements += 1
                self.slots.setdefault(alias[op.token], len(self.slots))
                if op.postselect is None:
                    self.drawn += 1
                else:
                    self.postselected += 1
                    if self.drawn and self.postselected_after_drawn is None:
                        self.postselected_after_drawn = (
                            f"{op!r} post-selects after an outcome drawn at random"
                        )
            elif isinstance(op, Repeat):
                # One layer: a for_loop in the body builds its operations from one layer's arguments.
                body = op.layer(0) if op.length else op.body
                self._visit_loop(body.ops, alias, p)
            elif isinstance(op, Cond):
                if op.expr is not None:
                    self._read(op.expr, alias)
                for k, b in enumerate(op.branches):
                    self._visit(b.ops, alias, p + (k,))
            elif isinstance(op, WhileLoop):
                self._read(op.expr, alias)
                self._visit_loop(op.body.ops, alias, p)
            elif isinstance(op, ForLoop):
                body, inner = loop_body(op, jax.ShapeDtypeStruct((), jnp.int32), alias, p)
                self._visit_loop(body, inner, p)

    def _visit_loop(self, ops, alias, path):
        """A body run repeatedly: a measurement drawn in one iteration precedes those of the next."""
        drawn, postselected, early = self.drawn, self.postselected, len(self.read_early)
        self._visit(ops, alias, path)
        # A read of a measurement made later in the same body reads the previous iteration's outcome
        # (feedback; 0 in the first iteration), not one that runs after the loop.
        self.read_early[early:] = [(k, r) for k, r in self.read_early[early:] if k not in self.slots]
        if self.drawn > drawn and self.postselected > postselected and self.postselected_after_drawn is None:
            self.postselected_after_drawn = (
                "a loop body both post-selects and draws outcomes at random (an outcome of one iteration "
                "precedes the post-selection of the next)"
            )

    def slot(self, token, alias: dict) -> int:
        return self.slots[alias[token]]


def loop_body(op: ForLoop, i, alias: dict, path: tuple):
    """The operations of iteration `i`, and `alias` extended with the measurements this call made afresh.

    Every call of the body makes new tokens (the shape-only call that `_Program` makes and the traced one
    that `_run` makes differ), so those are keyed by their order in the body, the same in every call."""
    if isinstance(i, jax.ShapeDtypeStruct):
        ops = op.skeleton()
    else:
        ops = op.ops_at(i)
    fresh = _loop_tokens(ops, alias)
    inner = dict(alias)
    inner.update({token: ("loop", path, k) for k, token in enumerate(fresh)})
    return ops, inner


# --- simulators: how each kind of step acts on the carried state --------------------------------------


class _Pure:
    """No measurements: the carry is the state vector."""

    def __init__(self, n):
        self.n = n

    def gate(self, psi, gate):
        return K.apply_gate(psi, gate, self.n)

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
        return K.apply_gate(psi, gate, self.n), record, key

    def measure(self, carry, op: MidMeasure, slot: int):
        psi, record, key = carry
        p = K.marginal_probs(psi, (op.wire,), self.n)
        key, sub = jax.random.split(key)
        if op.postselect is None:
            # Drawn as `K.sample_indices` draws, from p1 / (p0 + p1): the state's norm may be below 1
            # (float32 drift over thousands of gates, or an initial state within its tolerance), and
            # `u < p1` would then draw an outcome of probability 0, whose collapse divides by 0.
            p0, p1 = jax.lax.stop_gradient(p[0]), jax.lax.stop_gradient(p[1])
            b = K.draw_one(jax.random.uniform(sub, (), real_dtype()), p0, p1).astype(jnp.int32)
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
        index = _evaluate(expr, lambda token: carry[1][slot(token)])
        return jax.lax.switch(index, branches, carry)

    def while_on(self, carry, expr, body, max_iterations, slot):
        def test(c):
            return _evaluate(expr, lambda token: c[1][slot(token)]) != 0

        if max_iterations is None:
            return _capped_while(test, body, carry, "sampled")

        def step(c, _):
            return jax.lax.cond(test(c), body, lambda c: c, c), None

        return jax.lax.scan(step, carry, length=max_iterations)[0]


class _Exact:
    """All branches: the carry is a classical-quantum state, a flat array over `S` record bits (slot 0
    most significant), then the `n` row wires, then the `n` column wires of a density matrix."""

    def __init__(self, n, num_slots):
        K.check_memory(
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
        x = K.apply_gate(x, gate, self.total, self.rows)
        return K.apply_gate(x.conj(), gate, self.total, self.cols).conj()

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
        return _evaluate(expr, lambda token: self.bits[slot(token)])

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

        return _capped_while(looping, step, x, "exact")


# A `while_loop` without `max_iterations` that has run this many times is taken never to end: an error, not
# a hang (a body that keeps the condition true with probability 1, e.g. `while_loop(m, [m])` after X).
_WHILE_CAP = 100_000


def _capped_while(test, body, carry, mode: str):
    def looping(c):
        return test(c[0]) & (c[1] < _WHILE_CAP)

    carry, count = jax.lax.while_loop(looping, lambda c: (body(c[0]), c[1] + 1), (carry, jnp.int32(0)))
    # The check rides on the state (the first leaf: error_if cannot take the PRNG key of a trajectory).
    leaves, treedef = jax.tree.flatten(carry)
    why = (
        "; in exact mode it runs until the weight still looping is below the dtype's resolution, which a "
        "small exit probability per iteration (1e-4 in float32) takes longer than that to reach: bound it "
        "with max_iterations, or use mcm='sampled'"
        if mode == "exact"
        else "; bound it with max_iterations"
    )
    leaves[0] = eqx.error_if(
        leaves[0],
        test(carry) & (count >= _WHILE_CAP),
        f"qfx.while_loop (mcm={mode!r}): its condition still held after {_WHILE_CAP} iterations, so it may "
        f"never end (a body that keeps the condition true with probability 1){why}.",
    )
    return jax.tree.unflatten(treedef, leaves)


# --- the traversal ------------------------------------------------------------------------------------


def _as_int(leaf: Array) -> Array:
    """A branch index or trip count held as a float leaf (see `_control._traced_index`), rounded: an
    optimizer step over the circuit's leaves may nudge it (1.0 -> 0.99999988), which truncation would
    turn into another branch."""
    return jnp.round(leaf).astype(jnp.int32)


def _run(ops, carry, sim, program: _Program, alias: dict, path: tuple):
    """Applies `ops` to the carried state with simulator `sim`; loops and branches become JAX control flow."""

    def slot(token):
        return program.slot(token, alias)

    for j, op in enumerate(ops):
        p = path + (j,)
        if isinstance(op, AbstractGate):
            carry = sim.gate(carry, op)
        elif isinstance(op, Repeat):

            @jax.checkpoint
            def layer(c, body, p=p):
                return _run(body.ops, c, sim, program, alias, p), None

            carry, _ = jax.lax.scan(layer, carry, op.body, length=op.length)
        elif isinstance(op, MidMeasure):
            carry = sim.measure(carry, op, slot(op.token))
        elif isinstance(op, Cond):
            branches = [
                (lambda c, b=b, k=k, p=p: _run(b.ops, c, sim, program, alias, p + (k,)))
                for k, b in enumerate(op.branches)
            ]
            if op.expr is None:
                carry = jax.lax.switch(_as_int(op.index), branches, carry)
            else:
                carry = sim.switch_on(carry, op.expr, branches, slot)
        elif isinstance(op, ForLoop):

            @jax.checkpoint
            def iteration(c, i, op=op, p=p):
                body, inner = loop_body(op, i, alias, p)
                return _run(body, c, sim, program, inner, p), None

            if op.length is not None:
                carry, _ = jax.lax.scan(iteration, carry, jnp.arange(op.length, dtype=jnp.int32))
            else:
                stop = _as_int(op.num_iterations)
                carry = jax.lax.fori_loop(jnp.int32(0), stop, lambda i, c: iteration(c, i)[0], carry)
        elif isinstance(op, WhileLoop):

            def body(c, op=op, p=p):
                return _run(op.body.ops, c, sim, program, alias, p)

            carry = sim.while_on(carry, op.expr, body, op.max_iterations, slot)
        else:
            raise TypeError(f"{op!r} is not a qfx operation that circuits can run.")
    return carry


# --- entry points used by qfx.state, qfx.probs, ... ---------------------------------------------------


class Mixed(eqx.Module):
    """The outcome of `mcm="exact"`: the normalised density matrix and the record probabilities."""

    rho: Array
    records: Array


def check_mcm(mcm, fn: str) -> None:
    """Checked for every circuit, not only those with measurements: a typo must not pass silently."""
    if mcm not in (None, "exact", "sampled"):
        raise ValueError(f"qfx.{fn}: mcm must be 'exact', 'sampled' or None, got {mcm!r}.")


def _check_mode(circuit: Circuit, program: _Program, mcm, key, diff, fn: str) -> str:
    if not isinstance(diff, Backprop):
        raise ValueError(
            f"qfx.{fn}: diff={diff!r} cannot differentiate a circuit with control flow or mid-circuit "
            "measurements (qfx.cond, qfx.for_loop, qfx.while_loop, qfx.measure). Use "
            "diff=qfx.diff.Backprop() "
            "(the default): JAX differentiates through them (reverse mode where loop lengths are static)."
        )
    check_mcm(mcm, fn)
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


def simulate(
    circuit: Circuit, psi0: Array, *, mcm, key, diff, fn: str
) -> "tuple[Array | Mixed, Array | None]":
    """Runs a circuit holding control-flow operations.

    **Returns:** `(final, record)`: the pure final state (and, in sampled mode, the int32 record of
    outcomes, one per register) or, in exact mode, a `Mixed` (and None).
    """
    program = _Program(circuit.ops)
    mode = _check_mode(circuit, program, mcm, key, diff, fn)
    n = circuit.num_wires
    if mode == "pure":
        return _run(circuit.ops, psi0, _Pure(n), program, program.alias, ()), None
    if mode == "sampled":
        return _trajectory(circuit.ops, psi0, n, key, program, fn)
    sim = _Exact(n, len(program.slots))
    x = _run(circuit.ops, sim.initial(psi0), sim, program, program.alias, ())
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


def _trajectory(ops, psi0: Array, n: int, key, program: _Program, fn: str) -> tuple[Array, Array]:
    """One trajectory of `ops` (sampled mode): the final state and the record of outcomes."""
    if program.postselected_after_drawn is not None:
        raise ValueError(
            f"qfx.{fn}: mcm='sampled' follows one trajectory, and {program.postselected_after_drawn}: "
            "forcing the post-selected outcome cannot condition the earlier one on it, so the statistics "
            "would not be conditioned on the post-selection. Use "
            "mcm='exact', or measure without postselect= and keep the trajectories with that outcome."
        )
    record = jnp.zeros(len(program.slots), jnp.int32)
    psi, record, _ = _run(ops, (psi0, record, key), _Sampled(n), program, program.alias, ())
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


def run_control(circuit, psi0, args, *, pure, mixed, mcm, key, diff, fn: str):
    """`pure(final_state, args)`, or `mixed(rho, args)` in exact mode; for `qfx.state`, `qfx.probs`, ..."""
    final, _ = simulate(circuit, psi0, mcm=mcm, key=key, diff=diff, fn=fn)
    if not isinstance(final, Mixed):
        return pure(final, args)
    if mixed is None:
        raise ValueError(
            f"qfx.{fn}: with mcm='exact' the state after mid-circuit measurements is a mixture of branches, "
            "not a state vector. Use qfx.density_matrix, or mcm='sampled' with a key for one trajectory's "
            "state."
        )
    return mixed(final.rho, args)


def mixed_probs(rho: Array, wires: tuple[int, ...]) -> Array:
    return K.marginal(jnp.real(jnp.diagonal(rho)), wires, round(math.log2(rho.shape[0])))


def _apply_rows(rho: Array, lc: LinearCombination) -> Array:
    """O rho, with O applied to the row wires of the flat density matrix."""
    n2 = round(math.log2(rho.size))
    return K.apply_observable(rho.reshape(-1), lc, n2).reshape(rho.shape)


def mixed_expvals(rho: Array, lcs: Sequence[LinearCombination]) -> Array:
    return jnp.stack([jnp.real(jnp.trace(_apply_rows(rho, lc))).astype(real_dtype()) for lc in lcs])


def mixed_vars(rho: Array, lcs: Sequence[LinearCombination]) -> Array:
    out = []
    for lc in lcs:
        o_rho = _apply_rows(rho, lc)
        mean = jnp.real(jnp.trace(o_rho))
        square = jnp.real(jnp.trace(_apply_rows(o_rho, lc)))
        out.append((square - mean**2).astype(real_dtype()))
    return jnp.stack(out)


def mixed_density_matrix(rho: Array, wires: tuple[int, ...]) -> Array:
    n = round(math.log2(rho.shape[0]))
    rest = [w for w in range(n) if w not in wires]
    k = len(wires)
    perm = list(wires) + rest + [n + w for w in wires] + [n + w for w in rest]
    t = rho.reshape((2,) * 2 * n).transpose(perm).reshape(2**k, 2 ** (n - k), 2**k, 2 ** (n - k))
    return jnp.einsum("ajbj->ab", t, precision=EXACT)


def _bits(index: Array, k: int) -> Array:
    return ((index[..., None] >> jnp.arange(k - 1, -1, -1)) & 1).astype(jnp.int32)


def control_sample(circuit: Circuit, psi0: Array, *, key, shots: int, wires, mcm) -> Array:
    """`qfx.sample` of a circuit with control flow: in sampled mode each shot is its own trajectory."""
    n = circuit.num_wires
    program = _Program(circuit.ops)
    # `key` is always there for the final readout: only sampled mode draws outcomes with it.
    mode = _check_mode(circuit, program, mcm, key if mcm == "sampled" else None, Backprop(), "sample")
    if mode == "sampled":

        def one(k):
            k_run, k_read = jax.random.split(k)
            psi, _ = simulate(circuit, psi0, mcm=mcm, key=k_run, diff=Backprop(), fn="sample")
            p = jax.lax.stop_gradient(K.marginal_probs(psi, wires, n))
            return K.sample_indices(k_read, p, 1)[0]

        return _bits(jax.vmap(one)(jax.random.split(key, shots)), len(wires))
    final, _ = simulate(
        circuit, psi0, mcm=mcm if mode == "exact" else None, key=None, diff=Backprop(), fn="sample"
    )
    p = mixed_probs(final.rho, wires) if isinstance(final, Mixed) else K.marginal_probs(final, wires, n)
    idx = K.sample_indices(key, jax.lax.stop_gradient(p), shots)
    return _bits(idx, len(wires))


@with_auto_axes
def outcome_probs(
    circuit: Circuit,
    measurements: "MidMeasure | Sequence[MidMeasure]",
    *,
    mcm: str,
    key: PRNGKeyArray | None = None,
    initial_state: ArrayLike | None = None,
) -> Array:
    """The joint distribution of the latest outcomes of mid-circuit measurements at the end of the circuit.

    **Arguments:**

    - `circuit`: a circuit holding the measurements (outside `qfx.for_loop` bodies, whose measurements
      are made afresh at each iteration).
    - `measurements`: one `MidMeasure` or a list of them; the first is the most significant bit.
    - `mcm`: `"exact"` (the probabilities) or `"sampled"` (needs `key`: the one-hot record of one
      trajectory, so the mean over `jax.vmap`-ed keys estimates the probabilities).
    - `initial_state`: as for `qfx.state`.

    **Returns:** a real array of shape `(2**len(measurements),)`; post-selection renormalises it.

    ```python
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.RY(0.5, wires=0), m])
    qfx.outcome_probs(circ, m, mcm="exact")  # [cos(0.25)**2, sin(0.25)**2]
    ```
    """
    circuit = check_circuit(circuit, "outcome_probs")
    ms = (measurements,) if isinstance(measurements, MidMeasure) else tuple(measurements)
    if not ms or not all(isinstance(m, MidMeasure) for m in ms):
        raise TypeError(f"qfx.outcome_probs: expected qfx.measure(...) operations, got {measurements!r}.")
    program = _Program(circuit.ops)
    # By token: `ms` may be the measurements as made by qfx.measure (not numbered) or the circuit's own.
    keys = [program.alias.get(m.token) for m in ms]
    missing = [m for m, key in zip(ms, keys, strict=True) if key not in program.slots]
    if missing:
        raise ValueError(f"qfx.outcome_probs: {missing[0]!r} is not in the circuit.")
    psi0 = initial_state_of(circuit, initial_state)
    final, record = simulate(circuit, psi0, mcm=mcm, key=key, diff=Backprop(), fn="outcome_probs")
    slots = [program.slots[key] for key in keys]
    k, s = len(ms), len(program.slots)
    if record is not None:
        index = jnp.sum(record[jnp.asarray(slots)] * 2 ** jnp.arange(k - 1, -1, -1))
        return jax.nn.one_hot(index, 2**k, dtype=real_dtype())
    weights = final.records.reshape((2,) * s)
    weights = jnp.sum(weights, axis=tuple(a for a in range(s) if a not in slots))
    ascending = sorted(set(slots))
    if len(ascending) == k:
        return weights.transpose([ascending.index(a) for a in slots]).reshape(-1)
    # A measurement asked for twice: its two bits agree, and records where they differ get 0.
    bits = (np.arange(2**k)[:, None] >> np.arange(k - 1, -1, -1)) & 1
    place = {a: j for j, a in enumerate(slots)}  # one requested position per slot
    agree = np.all([bits[:, j] == bits[:, place[a]] for j, a in enumerate(slots)], axis=0)
    flat = sum(bits[:, place[a]] << (len(ascending) - 1 - i) for i, a in enumerate(ascending))
    return jnp.where(agree, weights.reshape(-1)[flat], 0).astype(weights.dtype)


def initial_state_of(circuit: Circuit, initial_state) -> Array:
    """The checked initial state of every entry point: |0...0> for None, else a normalised vector of
    2**num_wires amplitudes (checked at once when concrete, at run time under `jit`)."""
    n = circuit.num_wires
    if initial_state is None:
        return K.zero_state(n)
    K.check_fits(n)
    psi = as_numeric(initial_state, "initial_state", inexact=True)
    if psi.shape != (2**n,):
        raise ValueError(f"initial_state: expected shape ({2**n},) for {n} wires, got {psi.shape}.")
    return check_normalised(psi, "initial_state", complex_dtype())


def check_normalised(psi: Array, what: str, dtype) -> Array:
    """`psi` as `dtype`, checked to have norm 1 (at once when concrete, at run time under `jit`), within
    the tolerance of the dtype it was computed in."""
    tol = tolerance(psi.dtype)
    psi = as_dtype(psi, dtype)
    if is_concrete(psi):  # now, also inside a jit trace (where JAX operations on a constant are traced)
        with jax.ensure_compile_time_eval():
            norm = float(jnp.sum(jnp.real(psi * psi.conj())))
        if not abs(norm - 1) <= tol:  # NaN fails too
            raise ValueError(
                f"{what} is not normalised: its squared norm is {norm:.12g}, expected 1 (within {tol:g})."
            )
        return psi
    norm = jnp.sum(jnp.real(psi * psi.conj()))
    bad = ~(jnp.abs(norm - 1) <= tol)  # NaN fails too
    # The check rides on a scalar: `error_if` passes its operand through a conditional, and XLA copies a
    # state there (one more read and write of it per call). The state takes the checked scalar as a factor
    # of exactly 1 (the norm is finite when the check passes), which XLA fuses into its first use.
    checked = eqx.error_if(norm, bad, f"{what} is not normalised (squared norm != 1).")
    return psi * jax.lax.stop_gradient(checked * 0 + 1).astype(psi.dtype)


# --- the functional style -----------------------------------------------------------------------------


def zero_state(num_wires: int) -> Array:
    """|0...0> on `num_wires` wires: a flat complex vector of `2**num_wires` amplitudes."""
    n = static_count(num_wires, 1)
    if n is None:
        raise ValueError(f"qfx.zero_state: num_wires must be a positive int, got {num_wires!r}.")
    return K.zero_state(n)


def _state_arg(state, fn: str) -> Array:
    """The `state` argument of the functional style: numbers, as a complex vector (its own complex dtype,
    or the default one for real or integer entries)."""
    state = as_numeric(state, f"qfx.{fn}: state", inexact=True)
    return state if jnp.issubdtype(state.dtype, jnp.complexfloating) else state.astype(complex_dtype())


def _num_wires_of(state, fn: str) -> int:
    size = state.shape[0] if getattr(state, "ndim", 0) == 1 else 0
    n = size.bit_length() - 1
    if size < 2 or 2**n != size:
        raise ValueError(
            f"qfx.{fn}: state must be a flat vector of 2**n amplitudes, got shape "
            f"{getattr(state, 'shape', None)}."
        )
    return n


@with_auto_axes
def apply(op: "AbstractOperation | Circuit", state: Array, *, key: PRNGKeyArray | None = None) -> Array:
    """Applies an operation (or a circuit) to a state vector: quantum programs as JAX functions.

    **Arguments:**

    - `op`: a gate, a `Repeat`, `Cond`, `ForLoop`, `WhileLoop`, `MidMeasure`, or a `Circuit`.
    - `state`: a flat state vector of `2**n` amplitudes (`qfx.zero_state(n)`); wire 0 is the most
      significant bit.
    - `key`: needed when `op` holds measurements: they are sampled (one trajectory). To read an outcome
      in a program, use `qfx.measure_state`.

    **Returns:** the new state vector.

    ```python
    def program(theta):
        state = qfx.zero_state(2)
        state = qfx.apply(qfx.RX(theta, wires=0), state)
        return qfx.apply(qfx.CNOT(wires=(0, 1)), state)
    jax.grad(lambda t: jnp.abs(program(t)[3]) ** 2)(0.3)
    ```
    """
    state = _state_arg(state, "apply")
    n = _num_wires_of(state, "apply")
    ops = op.ops if isinstance(op, Circuit) else (op,)
    if not all(isinstance(o, AbstractOperation) for o in ops):
        raise TypeError(f"qfx.apply: expected a qfx operation or Circuit, got {type(op).__name__}.")
    check_parameter_shapes(ops, "apply")
    bad = [w for o in ops for w in o.wires if w >= n]
    if bad:
        raise ValueError(
            f"qfx.apply: {op!r} acts on wire {bad[0]}, but the state has {n} wires (0..{n - 1})."
        )
    if isinstance(op, AbstractGate):
        return K.apply_gate(state, op, n)
    if not has_control(ops):
        return K.run(ops, state, n)
    program = _Program(ops)
    if program.num_measurements == 0:
        return _run(ops, state, _Pure(n), program, program.alias, ())
    if key is None:
        raise ValueError(
            "qfx.apply: the operation holds mid-circuit measurements; pass key=jax.random.key(0)."
        )
    check_key(key, "qfx.apply")
    state = check_normalised(state, "qfx.apply: state", state.dtype)  # outcomes are drawn from it
    return _trajectory(ops, state, n, key, program, "apply")[0]


@with_auto_axes
def measure_state(
    state: Array, wire: int, *, key: PRNGKeyArray, reset: bool = False, postselect: int | None = None
) -> tuple[Array, Array]:
    """Measures `wire` of a state vector: draws the outcome and collapses (and renormalises) the state.

    **Arguments:**

    - `state`: a flat state vector of `2**n` amplitudes.
    - `wire`: the wire to measure.
    - `key`: a PRNG key (keyword-only); `jax.vmap` over keys for many trajectories.
    - `reset`, `postselect`: as for `qfx.measure`.

    **Returns:** `(outcome, state)`: an int32 scalar (0 or 1) and the post-measurement state.

    ```python
    state = qfx.apply(qfx.H(0), qfx.zero_state(2))
    bit, state = qfx.measure_state(state, 0, key=jax.random.key(0))
    state = jax.lax.cond(bit == 1, lambda s: qfx.apply(qfx.X(1), s), lambda s: s, state)
    ```
    """
    state = _state_arg(state, "measure_state")
    n = _num_wires_of(state, "measure_state")
    check_key(key, "qfx.measure_state")
    op = measure(wire, reset, postselect)
    if op.wire >= n:
        raise ValueError(f"qfx.measure_state: wire {op.wire} is out of range for {n} wires (0..{n - 1}).")
    state = check_normalised(state, "qfx.measure_state: state", state.dtype)
    psi, record, _ = _Sampled(n).measure((state, jnp.zeros(1, jnp.int32), key), op, 0)
    # A drawn outcome's derivative misses how its probability moves (see `_not_differentiable`); a
    # post-selected one is not drawn, and the renormalised projection differentiates exactly.
    return record[0], psi if op.postselect is not None else _not_differentiable(psi)
