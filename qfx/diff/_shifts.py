"""The engine shared by parameter-shift and finite differences: a JVP from shifted evaluations.

Both write a derivative along one real coordinate `x_m` of the inputs as `sum_k c_k f(x + s_k e_m)`. The
JVP is then `sum_m t_m sum_k c_k f(x + s_k e_m)`: the evaluations depend only on the primal inputs, and
the tangents enter only through the final contraction, so the JVP is linear in the tangents and
`jax.grad` can transpose it. The evaluations are one `vmap` over a stacked vector of (coordinate, shift)
pairs, in chunks by `lax.map` when they would not fit in memory together, not a Python loop, so compile
time does not grow with the number of parameters. `f` is the custom-JVP function itself, so derivatives
of derivatives use the same rule, to any order.
"""

from collections.abc import Callable, Sequence

import jax
from jax.custom_derivatives import SymbolicZero
import jax.numpy as jnp
from jaxtyping import Array, PyTree
import numpy as np

from .._coordinates import from_real_coordinates, real_coordinates
from .._custom_types import EXACT

# A rule for one real coordinate: terms (coefficient, shift) with df/dx = sum_k c_k f(x + s_k), or
# (coefficient, shift, multiplier) with df/dx = sum_k c_k f(a_k x + s_k).
Rule = tuple[tuple[float, ...], ...]
# States of this many bytes, over all evaluations in one chunk, are kept in memory at once.
_CHUNK_BYTES = 2**28


def is_zero(tangent) -> bool:
    return isinstance(tangent, SymbolicZero)


def leaves_with_zeros(tree) -> list:
    return jax.tree.leaves(tree, is_leaf=is_zero)


def check_rules(t_params: PyTree, rules, owners, advice: str) -> None:
    """Raises when a parameter whose gate has no shift rule (`rule is None`) would be differentiated."""
    for t, rule, owner in zip(leaves_with_zeros(t_params), rules, owners, strict=True):
        if rule is None and not is_zero(t):
            raise ValueError(f"qfx.diff.ParameterShift(): {owner}. {advice}")


def instantiate(tangent: PyTree, primal: PyTree) -> PyTree:
    """Replaces symbolic zeros by zero arrays."""
    return jax.tree.map(lambda t, p: jnp.zeros_like(p) if is_zero(t) else t, tangent, primal, is_leaf=is_zero)


def map_in_chunks(fn: Callable, xs: tuple[Array, ...], chunk: int, *, loop: str = "scan") -> Array:
    """`jax.vmap(fn)(*xs)`, evaluated `chunk` at a time when there are more: by `lax.map` (a scan), or with
    `loop="while"` by a `lax.while_loop`.

    The while loop is for `fn` whose derivatives exist only through a custom rule that `fn` itself calls
    (shot-based estimates, which autodiff sees as constant): when a custom_jvp rule maps its own function
    under `lax.scan`, JAX's reverse mode drops the inner rule from the scan's primal part, so a second
    derivative taken over reverse mode (`jax.hessian`) came out zero. Under a while loop `jax.hessian`,
    `jax.jacfwd` and first derivatives are right; reverse over reverse raises JAX's error on while loops."""
    count = xs[0].shape[0]
    if chunk >= count:
        return jax.vmap(fn)(*xs)
    if loop == "scan":
        return jax.lax.map(lambda x: fn(*x), xs, batch_size=chunk)
    num = -(-count // chunk)
    padded = [jnp.concatenate([x, jnp.repeat(x[-1:], num * chunk - count, axis=0)]) for x in xs]
    blocks = [x.reshape(num, chunk, *x.shape[1:]) for x in padded]
    block = jax.vmap(fn)
    first = jax.eval_shape(block, *[b[0] for b in blocks])

    def body(state):
        i, out = state
        return i + 1, out.at[i].set(block(*[b[i] for b in blocks]))

    out = jnp.zeros((num, *first.shape), first.dtype)
    _, out = jax.lax.while_loop(lambda state: state[0] < num, body, (jnp.int32(0), out))
    return out.reshape(num * chunk, *first.shape[1:])[:count]


def chunk_size(state_bytes: int, batch_size: int | None) -> int:
    if batch_size is not None:
        return batch_size
    return max(1, _CHUNK_BYTES // (4 * state_bytes))


def shifted_jvp(
    f: Callable[..., Array],
    primals: Sequence[PyTree],
    tangents: Sequence[PyTree],
    rules: Sequence[Sequence[Rule | None]],
    reseed: Callable[[Sequence[PyTree], Array], Sequence[PyTree]],
    chunk: int,
    *,
    loop: str = "scan",
) -> Array | None:
    """`sum_m t_m sum_k c_k f(x + s_k e_m)` over the real coordinates `m` of the selected leaves (with a
    term's multiplier `a_k`, coordinate `m` is set to `a_k x_m + s_k` instead).

    **Arguments:**

    - `f`: the function, `f(*primals) -> array`.
    - `primals`, `tangents`: its arguments and their tangents (symbolic zeros allowed).
    - `rules`: for each argument, one entry per leaf: the rule for each real coordinate of that leaf
      (complex leaves have two per element: real and imaginary parts), or None to leave it out.
    - `reseed(primals, b)`: the arguments for evaluation number `b` (for fresh PRNG keys per evaluation).
    - `chunk`: how many shifted evaluations run together.
    - `loop`: how chunks are looped over (`map_in_chunks`): "while" when `f` has no derivative but its rule.

    **Returns:** the JVP contribution, or None when no selected leaf has a nonzero tangent.
    """
    structure = [jax.tree.structure(p) for p in primals]
    leaves = [jax.tree.leaves(p) for p in primals]
    selected = []  # (argument, leaf, rule)
    for a, (tangent, leaf_rules) in enumerate(zip(tangents, rules, strict=True)):
        t_leaves = leaves_with_zeros(tangent)
        for j, rule in enumerate(leaf_rules):
            if rule is not None and not is_zero(t_leaves[j]):
                selected.append((a, j, rule))
    if not selected:
        return None

    coords = [real_coordinates(leaves[a][j]) for a, j, _ in selected]
    dtype = max((c.dtype for c in coords), key=lambda d: d.itemsize)
    x = jnp.concatenate([c.astype(dtype) for c in coords])
    t = jnp.concatenate(
        [real_coordinates(leaves_with_zeros(tangents[a])[j]).astype(dtype) for a, j, _ in selected]
    )
    offsets = np.cumsum([0] + [c.shape[0] for c in coords])
    index, shift, mult, coeff = [], [], [], []
    for (_, _, rule), start, stop in zip(selected, offsets[:-1], offsets[1:], strict=True):
        for m in range(start, stop):
            for c, s, *a in rule:
                index.append(m)
                shift.append(s)
                mult.append(a[0] if a else 1.0)
                coeff.append(c)
    index = np.asarray(index, np.int32)
    positions = jnp.arange(x.shape[0], dtype=jnp.int32)

    def evaluate(m, s, scale, b):
        shifted = jnp.where(positions == m, scale * x + s, x)
        new = [list(ls) for ls in leaves]
        for (a, j, _), start, stop in zip(selected, offsets[:-1], offsets[1:], strict=True):
            new[a][j] = from_real_coordinates(shifted[start:stop], leaves[a][j])
        args = [jax.tree.unflatten(st, ls) for st, ls in zip(structure, new, strict=True)]
        return f(*reseed(args, b))

    count = index.shape[0]
    values = map_in_chunks(
        evaluate,
        (
            jnp.asarray(index),
            jnp.asarray(shift, dtype),
            jnp.asarray(mult, dtype),
            jnp.arange(count, dtype=jnp.uint32),
        ),
        chunk,
        loop=loop,
    )
    weights = jnp.asarray(coeff, dtype) * t[index]
    return jnp.tensordot(weights.astype(values.dtype), values, axes=1, precision=EXACT)
