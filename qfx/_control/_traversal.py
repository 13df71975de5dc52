"""The traversal that runs control flow: loops and branches become JAX control flow, and each step is
handed to a simulator that says how it acts on the carried state."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._channels import AbstractChannel
from .._circuit import Repeat
from .._gates import AbstractGate
from ._operations import Cond, ForLoop, MidMeasure, WhileLoop
from ._program import Program, loop_body

# A `while_loop` without `max_iterations` that has run this many times is taken never to end: an error, not
# a hang (a body that keeps the condition true with probability 1, e.g. `while_loop(m, [m])` after X).
_WHILE_CAP = 100_000


def capped_while(test, body, carry, mode: str):
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


def as_int(leaf: Array) -> Array:
    """A branch index or trip count held as a float leaf (see `_operations._traced_index`), rounded: an
    optimizer step over the circuit's leaves may nudge it (1.0 -> 0.99999988), which truncation would
    turn into another branch."""
    return jnp.round(leaf).astype(jnp.int32)


def traverse(ops, carry, sim, program: Program, alias: dict, path: tuple):
    """Applies `ops` to the carried state with simulator `sim`; loops and branches become JAX control flow."""

    def slot(token):
        return program.slot(token, alias)

    # A mixed-state simulator takes each run of gates and channels at once, as `operations` (to group them
    # in blocks); state-vector simulators take gates one by one (`gate`), and never see a channel.
    together = getattr(sim, "operations", None)
    pending: list = []
    for j, op in enumerate(ops):
        p = path + (j,)
        if together is not None and isinstance(op, (AbstractGate, AbstractChannel)):
            pending.append(op)
            continue
        if pending:
            carry, pending = together(carry, pending), []
        if isinstance(op, AbstractGate):
            carry = sim.gate(carry, op)
        elif isinstance(op, Repeat):

            @jax.checkpoint
            def layer(c, body, p=p):
                return traverse(body.ops, c, sim, program, alias, p), None

            carry, _ = jax.lax.scan(layer, carry, op.body, length=op.length)
        elif isinstance(op, MidMeasure):
            carry = sim.measure(carry, op, slot(op.token))
        elif isinstance(op, Cond):
            branches = [
                (lambda c, b=b, k=k, p=p: traverse(b.ops, c, sim, program, alias, p + (k,)))
                for k, b in enumerate(op.branches)
            ]
            if op.expr is None:
                carry = jax.lax.switch(as_int(op.index), branches, carry)
            else:
                carry = sim.switch_on(carry, op.expr, branches, slot)
        elif isinstance(op, ForLoop):

            @jax.checkpoint
            def iteration(c, i, op=op, p=p):
                body, inner = loop_body(op, i, alias, p)
                return traverse(body, c, sim, program, inner, p), None

            if op.length is not None:
                carry, _ = jax.lax.scan(iteration, carry, jnp.arange(op.length, dtype=jnp.int32))
            else:
                stop = as_int(op.num_iterations)
                carry = jax.lax.fori_loop(jnp.int32(0), stop, lambda i, c: iteration(c, i)[0], carry)
        elif isinstance(op, WhileLoop):

            def body(c, op=op, p=p):
                return traverse(op.body.ops, c, sim, program, alias, p)

            carry = sim.while_on(carry, op.expr, body, op.max_iterations, slot)
        else:
            raise TypeError(f"{op!r} is not a qfx operation that circuits can run.")
    if pending:
        carry = together(carry, pending)
    return carry


class Mixed(eqx.Module):
    """The outcome of `mcm="exact"`: the normalised density matrix and the record probabilities."""

    rho: Array
    records: Array
