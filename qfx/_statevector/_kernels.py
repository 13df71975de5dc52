"""A k-qubit gate is applied by viewing the state as `(2**a, 2, 2**b, 2, ..., 2**c)` (a reshape, free) with
one axis of size 2 per target wire in ascending order, so no transposes of the state are needed:
- dense gates on k <= 2 wires become 2**k elementwise combinations of 2**k slices (one fused pass);
- wider dense gates use one tensordot;
- diagonal gates are an elementwise product, permutation gates an index shuffle of slices (a fused run
  of CNOT, SWAP, X gates on a large state: one gather);
- controlled gates apply their target to the slice of the state where the controls hold their values.
No 2**n x 2**n matrix is ever built.
"""

import functools

import jax
from jax.custom_derivatives import SymbolicZero
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._checks import is_concrete
from .._custom_types import EXACT
from .._gates import AbstractGate, Adjoint, PauliRot
from .._observables import Word
from ._fusion import PairedGate, Permutation, computed_once

# Dense gates up to this many wires are applied as elementwise slice combinations.
_ELEMENTWISE_MAX_WIRES = 2

# --- layouts ------------------------------------------------------------------------------------


def _layout(wires: tuple[int, ...], n: int):
    """The argsort of `wires`, the view shape with a size-2 axis per wire, and those axes' positions."""
    order = sorted(range(len(wires)), key=lambda i: wires[i])
    shape, axes, prev = [], [], 0
    for w in (wires[i] for i in order):
        shape.append(2 ** (w - prev))
        axes.append(len(shape))
        shape.append(2)
        prev = w + 1
    shape.append(2 ** (n - prev))
    return order, tuple(shape), tuple(axes)


def _bits(index: int, k: int) -> tuple[int, ...]:
    return tuple((index >> (k - 1 - i)) & 1 for i in range(k))


def _slice(view: Array, axes, bits) -> Array:
    idx = [slice(None)] * view.ndim
    for a, b in zip(axes, bits, strict=True):
        idx[a] = b
    return view[tuple(idx)]


def _assemble(outs: list[Array], axes) -> Array:
    """Inverse of taking the 2**k slices of `_slice`: stacks them back along `axes`."""
    k = len(axes)
    for j in reversed(range(k)):
        # The qubit axes 0..j-1 are still missing, so axis j sits j places earlier for now.
        outs = [jnp.stack(outs[2 * m : 2 * m + 2], axis=axes[j] - j) for m in range(len(outs) // 2)]
    return outs[0]


def _to_sorted_index(order, k: int):
    """Maps an index over the sorted wires to the same basis state indexed in gate order."""

    def to_gate(s: int) -> int:
        g = 0
        for i, bit in enumerate(_bits(s, k)):
            g |= bit << (k - 1 - order[i])
        return g

    return to_gate


# --- gate application ---------------------------------------------------------------------------


def _assemble_rotated(outs: list[Array], k: int) -> Array:
    """Like `_assemble` for a gate on the first k <= 2 axes of a `(2,) * k + (rest,)` view, but with the
    first axis moved to the end: `(rest, 2)` or `(2, rest, 2)`. Stacking along the last axis writes the
    rotated layout in the same pass, where a transpose afterwards would be a second one."""
    if k == 1:
        return jnp.stack(outs, axis=-1)
    return jnp.stack([jnp.stack([outs[b], outs[2 + b]], axis=-1) for b in range(2)])


def _dense_slices(view: Array, matrix: Array, axes, rotated: bool = False) -> Array:
    """The matrix applied to `view` as 2**k elementwise combinations of its 2**k slices: one fused pass.

    With `rotated`, the gate acts on the leading axes and the first axis comes out last (staircases)."""
    k = len(axes)
    subs = [_slice(view, axes, _bits(b, k)) for b in range(2**k)]
    known = np.asarray(matrix) if is_concrete(matrix) else None
    outs = []
    for i in range(2**k):
        terms = [matrix[i, j] * subs[j] for j in range(2**k) if known is None or known[i, j] != 0]
        outs.append(sum(terms[1:], terms[0]) if terms else jnp.zeros_like(subs[0]))
    return _assemble_rotated(outs, k) if rotated else _assemble(outs, axes)


def _expanded(shape, axes) -> tuple[list[int], list[int]]:
    """`shape` (.., j1, .., j2, ..) -> (.., 1, j1, .., 1, j2, ..): an output axis before each input axis
    in `axes`; and the positions of those output axes."""
    expanded, positions = [], []
    for a, size in enumerate(shape):
        if a in axes:
            positions.append(len(expanded))
            expanded += [1, size]
        else:
            expanded.append(size)
    return expanded, positions


def _matrix_factor(matrix: Array, positions: list[int], ndim: int) -> Array:
    """A `(2**k, 2**k)` matrix as a rank-`ndim` tensor with its (i, j) pair of each gate axis at
    `positions[m]`, `positions[m] + 1` and size 1 elsewhere: it broadcasts against an `_expanded` view."""
    k = len(positions)
    ushape = [1] * ndim
    for p in positions:
        ushape[p] = ushape[p + 1] = 2
    u = matrix.reshape((2,) * 2 * k)  # (i1, i2, .., j1, j2, ..)
    return u.transpose([x for m in range(k) for x in (m, k + m)]).reshape(ushape)


def _dense_broadcast(view: Array, matrix: Array, axes, rotated: bool = False) -> Array:
    """The same product as one broadcast multiply and one sum over the input axes.

    Slower forwards than `_dense_slices`, but its transposes are again one multiply and one sum each (with
    respect to the state, and to the matrix), where the slices' transposes are a pad and a full reduction
    per matrix entry. It is the form derivatives are taken in.
    """
    expanded, positions = _expanded(view.shape, axes)
    u = _matrix_factor(matrix, positions, len(expanded))
    out = jnp.sum(view.reshape(expanded) * u, axis=tuple(p + 1 for p in positions))
    return jnp.moveaxis(out, 0, -1) if rotated else out


# Entries of the state per first-stage partial sum of a matrix cotangent (see `_matrix_tangent`). The chunk
# trades the first stage's output (`1 / _STAGE` of the products) against the length of each fused sum; 4
# ran HEA gradients fastest of 1 to 32, with the default method, the adjoint method and under vmap
# (README.md).
_STAGE = 4


def _matrix_tangent(view: Array, dmatrix: Array, axes, rotated: bool = False) -> Array:
    """`_dense_broadcast(view, dmatrix, axes, rotated)`, written so that its transpose, the cotangent of
    the matrix in reverse mode, is a fast reduction.

    That cotangent sums `ct[.., i, ..] * view[.., j, ..]` over all other axes. Left to itself, XLA's CPU
    compiler rewrites so large a sum as a tree of `reduce-window` stages that cannot fuse with the product,
    so the 4**k products are first written out in full: about 3 passes' worth of time on top of the pass
    that reads the two states. Here the matrix is first broadcast to all axes but a chunk of `_STAGE` entries
    of one other axis, behind an optimisation barrier, and then over that chunk. Transposed, that is a sum
    over each chunk fused with the products (one pass over the two states, writing 4**k / 2**k / `_STAGE`
    of a state), the barrier, and a sum of what is left (measurements: README.md).
    In forward mode the barrier materialises the broadcast matrix, the size of that first stage's output.
    """
    rest = [a for a in range(view.ndim) if a not in axes]
    fits = [a for a in rest if view.shape[a] >= _STAGE]  # powers of 2, so whole chunks
    if not fits:  # a small state: nothing to gain
        return _dense_broadcast(view, dmatrix, axes, rotated)
    chunked = rest[-1] if rest[-1] in fits else max(fits, key=lambda a: view.shape[a])
    shape = list(view.shape)
    shape[chunked : chunked + 1] = [shape[chunked] // _STAGE, _STAGE]
    moved = [a + (a > chunked) for a in axes]
    expanded, positions = _expanded(shape, moved)
    chunk = sum(2 if a in moved else 1 for a in range(chunked + 1))  # the chunk's index in `expanded`
    outer = [2 if p in positions else size for p, size in enumerate(expanded)]
    outer[chunk] = 1
    u = _matrix_factor(dmatrix, positions, len(expanded))
    u = jax.lax.optimization_barrier(jnp.broadcast_to(u, outer))
    full = list(outer)
    full[chunk] = _STAGE
    out = jnp.sum(view.reshape(expanded) * jnp.broadcast_to(u, full), axis=tuple(p + 1 for p in positions))
    out = out.reshape(view.shape)
    return jnp.moveaxis(out, 0, -1) if rotated else out


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _dense_small(view: Array, matrix: Array, axes, rotated: bool = False) -> Array:
    return _dense_slices(view, matrix, axes, rotated)


def _dense_small_jvp(axes, rotated, primals, tangents):
    view, matrix = primals
    dview, dmatrix = tangents
    out = _dense_small(view, matrix, axes, rotated)
    # Symbolic zeros are skipped: no pass over the state for an input that is not differentiated.
    parts = []
    if not isinstance(dview, SymbolicZero):
        parts.append(_dense_broadcast(dview, matrix, axes, rotated))
    if not isinstance(dmatrix, SymbolicZero):
        parts.append(_matrix_tangent(view, dmatrix, axes, rotated))
    return out, sum(parts[1:], parts[0]) if parts else jnp.zeros_like(out)


_dense_small.defjvp(_dense_small_jvp, symbolic_zeros=True)


def _ascending(matrix: Array, wires: tuple[int, ...]) -> tuple[Array, tuple[int, ...]]:
    """A gate matrix given in the order of `wires`, re-expressed in ascending wire order."""
    k = len(wires)
    order = sorted(range(k), key=lambda i: wires[i])
    if order == list(range(k)):
        return matrix, wires
    perm = list(order) + [k + o for o in order]
    return matrix.reshape((2,) * 2 * k).transpose(perm).reshape(2**k, 2**k), tuple(sorted(wires))


def apply_matrix(state: Array, matrix: Array, wires: tuple[int, ...], n: int) -> Array:
    """Applies a `(2**k, 2**k)` matrix (in the order of `wires`) to the flat state."""
    k = len(wires)
    matrix, wires = _ascending(matrix, wires)
    _, shape, axes = _layout(wires, n)
    view = state.reshape(shape)
    if k <= _ELEMENTWISE_MAX_WIRES:
        if is_concrete(matrix):  # a fixed gate: skip its zero entries, nothing to differentiate
            out = _dense_slices(view, matrix, axes)
        else:
            out = _dense_small(view, matrix, axes, False)
    else:
        out = jnp.tensordot(
            matrix.reshape((2,) * 2 * k), view, axes=(list(range(k, 2 * k)), list(axes)), precision=EXACT
        )
        out = jnp.moveaxis(out, list(range(k)), list(axes))
    return out.reshape(state.shape)


def apply_rotating(state: Array, matrix: Array, wires: tuple[int, ...], n: int) -> Array:
    """Applies a gate on the first wires (`wires` is a permutation of `range(k)`, k <= 2), then moves
    wire 0 to the end, in one pass: a step of a staircase (see `apply_staircase`)."""
    k = len(wires)
    matrix, _ = _ascending(matrix, wires)
    view = state.reshape((2,) * k + (2 ** (n - k),))
    axes = tuple(range(k))
    if is_concrete(matrix):
        out = _dense_slices(view, matrix, axes, rotated=True)
    else:
        out = _dense_small(view, matrix, axes, True)
    return out.reshape(state.shape)


def apply_diagonal(state: Array, diag: Array, wires: tuple[int, ...], n: int) -> Array:
    k = len(wires)
    order, shape, axes = _layout(wires, n)
    d = computed_once(diag).reshape((2,) * k).transpose(order)
    bshape = [1] * len(shape)
    for a in axes:
        bshape[a] = 2
    return (state.reshape(shape) * d.reshape(bshape)).reshape(state.shape)


def apply_permutation(state, perm, phases, wires: tuple[int, ...], n: int) -> Array:
    """`out[i] = phases[i] * in[perm[i]]` over the basis of `wires` (gate order)."""
    k = len(wires)
    order, shape, axes = _layout(wires, n)
    to_gate = _to_sorted_index(order, k)
    from_gate = {to_gate(s): s for s in range(2**k)}
    view = state.reshape(shape)
    outs = []
    for s in range(2**k):
        g = to_gate(s)
        sub = _slice(view, axes, _bits(from_gate[perm[g]], k))
        outs.append(sub if phases is None else phases[g] * sub)
    return _assemble(outs, axes).reshape(state.shape)


def apply_pauli_word(state: Array, word: Word, n: int) -> Array:
    """P|psi> for a Pauli word, as flips and phases: no matrix."""
    t = state.reshape((2,) * n)
    flips = tuple(w for w, p in word if p in "XY")
    if flips:
        t = jnp.flip(t, axis=flips)
    for w, p in word:
        if p in "YZ":
            ph = jnp.asarray([-1j, 1j] if p == "Y" else [1, -1], state.dtype)
            t = t * ph.reshape((2,) + (1,) * (n - 1 - w))
    return t.reshape(state.shape)


def apply_permutation_run(state: Array, gate: Permutation, n: int) -> Array:
    """A `Permutation` (a fused run of CNOT, SWAP, X gates) as one gather: `out[y] = in[g(y)]`."""
    high, low = gate.tables(n)
    index = (jnp.asarray(high)[:, None] ^ jnp.asarray(low)[None, :]).reshape(-1)
    return _gather(jnp.asarray(state), index, unique=True)


def _gather(state: Array, index: Array, unique: bool = False) -> Array:
    """`state[index]` for a 1-D state and an in-bounds index, in the state's own layout under `vmap`.

    The index gains a zero that depends on the state (one comparison of one amplitude), so that under
    `vmap` it is batched like the state and JAX batches the gather with explicit batching dimensions, which
    XLA runs in place. With an unbatched index the batch becomes a slice dimension, which XLA's canonical
    gather puts last: the state came out transposed and was copied back before the next gate, one more
    pass per gather (see README.md)."""
    index = index + (state[:1] != state[:1]).astype(index.dtype) * 0
    return state.at[index].get(mode="promise_in_bounds", unique_indices=unique)


def apply_gate(state: Array, gate: AbstractGate, n: int, wire_map=None) -> Array:
    """Applies one gate, dispatching statically on its structure. `wire_map` relabels wires."""
    if isinstance(gate, Permutation):
        if wire_map is not None:
            raise NotImplementedError("a fused Permutation is applied to the whole state only")
        return apply_permutation_run(state, gate, n)
    wires = gate.wires if wire_map is None else tuple(wire_map[w] for w in gate.wires)
    kind, value = operator_form(gate)
    if kind == "paired":
        return apply_paired(state, *value, wires, n)
    if kind == "controlled":
        return _apply_controlled(state, value, n, wire_map)
    if kind == "diagonal":
        return apply_diagonal(state, value, wires, n)
    if kind == "permutation":
        return apply_permutation(state, value[0], value[1], wires, n)
    if kind == "pauli_rotation":
        theta, pauli_word = value
        c, s = jnp.cos(theta / 2), jnp.sin(theta / 2)
        word = tuple((wires[i], p) for i, p in enumerate(pauli_word) if p != "I")
        rotated = apply_pauli_word(state, word, n)
        return c.astype(state.dtype) * state - 1j * s.astype(state.dtype) * rotated
    return apply_matrix(state, value, wires, n)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def apply_paired(state: Array, a: Array, b: Array, wires: tuple[int, int], n: int) -> Array:
    """One-qubit gates `a` on `wires[0]` and `b` on `wires[1]`, in one pass (see `_fusion.PairedGate`)."""
    return apply_matrix(state, jnp.kron(a, b), wires, n)


@apply_paired.defjvp
def _apply_paired_jvp(wires, n, primals, tangents):
    def two_passes(state, a, b):
        return apply_matrix(apply_matrix(state, a, wires[:1], n), b, wires[1:], n)

    return jax.jvp(two_passes, primals, tangents)


def operator_form(gate: AbstractGate) -> tuple[str, object]:
    """The form in which `apply_gate` applies `gate` (not a fused `Permutation`), and what that form needs:
    `("controlled", gate.control())`, `("diagonal", diagonal)` (an elementwise product),
    `("permutation", (perm, phases))`, `("pauli_rotation", (theta, word))` (a wide `PauliRot` or its
    adjoint, by flips and phases), `("paired", (A, B))` (a `PairedGate`: one-qubit matrices on its two
    wires) or `("matrix", matrix)` (a dense product on `gate.wires`)."""
    if isinstance(gate, PairedGate):
        return "paired", (gate.A, gate.B)
    control = gate.control()
    if control is not None:
        return "controlled", control
    diag = gate.diagonal()
    if diag is not None:
        return "diagonal", diag
    perm = gate.permutation()
    if perm is not None:
        return "permutation", perm
    rotation = _wide_pauli_rotation(gate)
    if rotation is not None:
        return "pauli_rotation", rotation
    return "matrix", gate.matrix()


def _wide_pauli_rotation(gate: AbstractGate) -> tuple[Array, str] | None:
    """`(theta, pauli_word)` for a `PauliRot` on more than `_ELEMENTWISE_MAX_WIRES` wires, or an `Adjoint`
    of one (`-theta`): applied by flips and phases, never as a 2**k x 2**k matrix. Else None."""
    sign = 1
    while isinstance(gate, Adjoint):
        gate, sign = gate.base, -sign
    if isinstance(gate, PauliRot) and len(gate.wires) > _ELEMENTWISE_MAX_WIRES:
        return sign * gate.theta, gate.pauli_word
    return None


def _apply_controlled(state: Array, control, n: int, wire_map) -> Array:
    controls, values, target = control
    pos = (lambda w: w) if wire_map is None else wire_map.__getitem__
    cpos = sorted(pos(c) for c in controls)
    t = state.reshape((2,) * n)
    value_at = {pos(c): v for c, v in zip(controls, values, strict=True)}
    idx = tuple(value_at[a] if a in value_at else slice(None) for a in range(n))
    # Wires of the target inside the slice, which lacks the control axes.
    inner = {w: pos(w) - sum(c < pos(w) for c in cpos) for w in target.wires}
    sub = t[idx].reshape(-1)
    sub = apply_gate(sub, target, n - len(controls), inner)
    # A select, not `t.at[idx].set(...)`: XLA CPU (jaxlib 0.10.2) miscompiles that in-place update when
    # a dense gate's slices of the result follow in the same jit (wrong amplitudes, no error).
    sub = jnp.expand_dims(sub.reshape((2,) * (n - len(controls))), tuple(cpos))
    mask = np.zeros([2 if a in value_at else 1 for a in range(n)], dtype=bool)
    mask[tuple(value_at.get(a, 0) for a in range(n))] = True
    return jnp.where(mask, sub, t).reshape(state.shape)
