"""Layers of one-qubit gates on distinct wires (`KronLayer`): applied gate by gate, differentiated as
matrix products."""

import functools

import jax
from jax.custom_derivatives import SymbolicZero
import jax.numpy as jnp
from jaxtyping import Array

from .._custom_types import EXACT
from ._fusion import KronLayer
from ._kernels import apply_gate
from ._staircase import Staircase, apply_staircase, staircases


def apply_kron_layer(state: Array, layer: KronLayer, n: int) -> Array:
    """Applies a `KronLayer`: gate by gate (staircases included) when evaluated, and differentiated as the
    matrix products of `_kron_products` (see `_kron_layer`)."""
    return _kron_layer(state, tuple(layer.gates), (n, layer.sizes))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _kron_layer(state: Array, gates: tuple, spec) -> Array:
    """One-qubit gates on distinct wires: evaluated gate by gate, one elementwise pass each (the fastest
    forward pass), and differentiated through `_kron_products`, whose derivatives in both modes are matrix
    products. Reverse mode then takes each group's matrix cotangent as one product of two states over
    the rest of the register, where a gate's took a staged reduction, and XLA compiles products as library
    calls rather than as fused loops: far fewer kernels to compile (see `_fusion.KRON_GROUP`)."""
    n = spec[0]
    for op in staircases(list(gates), n):
        state = apply_staircase(state, op, n) if isinstance(op, Staircase) else apply_gate(state, op, n)
    return state


def _kron_layer_jvp(spec, primals, tangents):
    state, gates = primals
    dstate, dgates = tangents
    state_moves = not isinstance(dstate, SymbolicZero)
    gates_move = any(not isinstance(d, SymbolicZero) for d in jax.tree.leaves(dgates))
    wires = [g.wires[0] for g in gates]

    def products(s, gs):
        return _kron_products(s, [g.matrix() for g in gs], wires, spec)

    if not state_moves and not gates_move:
        out = _kron_layer(state, gates, spec)
        return out, jnp.zeros_like(out)
    if not gates_move:  # linear in the state
        return products(state, gates), products(dstate, gates)
    dgates = jax.tree.map(lambda d, x: jnp.zeros_like(x) if isinstance(d, SymbolicZero) else d, dgates, gates)
    if not state_moves:
        return jax.jvp(lambda gs: products(state, gs), (gates,), (dgates,))
    return jax.jvp(products, (state, gates), (dstate, dgates))


_kron_layer.defjvp(_kron_layer_jvp, symbolic_zeros=True)


def _kron_products(state: Array, mats: list, wires: list[int], spec) -> Array:
    """The one-qubit matrices `mats` on `wires` applied as matrix products: for each group of `sizes`
    wires, from the last ones, the group's Kronecker product times the state viewed as `(rest, 2**k)`,
    written as `(2**k, rest)` (`rotate_through`). The group's wires move to the front, so the next group
    is again last, and after all groups the order is restored: no transposes."""
    n, sizes = spec
    for lo, hi, kron in kron_groups(dict(zip(wires, mats, strict=True)), sizes, n, state.dtype):
        state = rotate_through(kron, state, hi - lo)
    return state


def kron_groups(by_wire: dict, sizes: tuple[int, ...], n: int, dtype):
    """The groups of a `KronLayer`'s wires, from the last ones: `(lo, hi, K)` for wires `lo..hi-1`, with `K`
    the Kronecker product of their matrices in `by_wire` (the identity on a wire without one, all in
    `dtype`), or None where none of them has one."""
    eye = jnp.eye(2, dtype=dtype)
    hi = n
    for k in sizes:
        lo = hi - k
        kron = None
        if any(w in by_wire for w in range(lo, hi)):
            kron = functools.reduce(jnp.kron, [by_wire.get(w, eye).astype(dtype) for w in range(lo, hi)])
        yield lo, hi, kron
        hi = lo


def rotate_through(matrix: Array | None, state: Array, k: int) -> Array:
    """`matrix` (`2**k` square; None for the identity) applied to the last `k` wires of a flat state, the
    result laid out with those wires first: `matrix @ view.T` for the state viewed as `(rest, 2**k)`."""
    view = state.reshape(-1, 2**k)
    if matrix is None:  # only the wires move
        return view.T.reshape(-1)
    return jax.lax.dot_general(matrix, view, (((1,), (1,)), ((), ())), precision=EXACT).reshape(-1)
