"""Pure state-vector kernels. States are flat arrays of 2**n amplitudes; wire 0 is the most significant bit.

A k-qubit gate is applied by viewing the state as `(2**a, 2, 2**b, 2, ..., 2**c)` (a reshape, free) with
one axis of size 2 per target wire in ascending order, so no transposes of the state are needed:
- dense gates on k <= 2 wires become 2**k elementwise combinations of 2**k slices (one fused pass);
- wider dense gates use one tensordot;
- diagonal gates are an elementwise product, permutation gates an index shuffle of slices (a fused run
  of CNOT, SWAP, X gates on a large state: one gather);
- controlled gates apply their target to the slice of the state where the controls hold their values.
No 2**n x 2**n matrix is ever built.
"""

import copy
import functools
import os

import jax
from jax.custom_derivatives import SymbolicZero
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from . import _fusion
from ._circuit import Repeat
from ._custom_types import EXACT, complex_dtype, is_concrete, real_dtype
from ._fusion import (
    KronLayer,
    PairedGate,
    Permutation,
    batchable,
    computed_once,
    fuse,
    kron_layers,
    pair_one_qubit,
)
from ._gates import AbstractGate, Adjoint, PauliRot
from ._observables import LinearCombination, PauliWord, Word

# Dense gates up to this many wires are applied as elementwise slice combinations.
_ELEMENTWISE_MAX_WIRES = 2

# XLA's CPU runtime runs a program (and each loop body or branch on its own) kernel after kernel on the
# calling thread when all its buffers are at most this many bytes; one larger buffer makes it dispatch the
# kernels as a dataflow graph over its thread pool (`ThunkExecutor::Options::
# execute_sequential_buffer_threshold`, fixed, no flag), which costs more than kernels on states this
# small do: a 4-qubit HEA value_and_grad ran 47 us at 4 layers and 117 us at 5, where backprop's stacked
# per-layer states passed 512 bytes. Small states keep their programs under it where that is cheap (see
# `_computed_weights` and `qfx.diff.Backprop`).
SEQUENTIAL_BYTES = 512


@functools.cache
def _memory_limit_bytes() -> int:
    device = jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001  (backends without memory stats)
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _format_bytes(b: float) -> str:
    if b >= 1024**7:  # past EiB (an int of any size: 2.0 ** n overflows at n = 1024)
        return f"2**{int(b).bit_length() - 1} B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if b < 1024:
            return f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} EiB"


def check_memory(entries: int, what: str, advice: str, copies: int = 1, dtype=None) -> None:
    """Raises before allocating when `copies` arrays of `entries` entries of `dtype` (by default the
    default complex one) cannot fit in the device's memory. `what` names the array (the message says what
    it needs), `advice` the way out. In Python integers: exact at any size (`2 ** 1100` entries too)."""
    dtype = complex_dtype() if dtype is None else np.dtype(dtype)
    need = copies * entries * dtype.itemsize
    limit = _memory_limit_bytes()
    if need > limit:
        k = entries.bit_length() - 1
        count = f"2**{k}" if entries == 2**k else f"{entries}"
        count = f"{copies} x {count}" if copies > 1 else count
        raise ValueError(
            f"{what} needs {_format_bytes(need)} ({count} {dtype.name} entries), but this device has "
            f"{_format_bytes(limit)}. {advice}"
        )


def check_fits(num_wires: int) -> None:
    """Raises before allocating when a state vector of `num_wires` qubits cannot be simulated in memory:
    each gate reads one state and writes another, so two must fit."""
    what = f"A {num_wires}-wire simulation (two state vectors: each gate reads one and writes the other)"
    advice = "Use fewer wires, or a backend that does not store the full state."
    if num_wires > 4096:  # not forming 2**num_wires, which takes seconds at 10**9 and forever at 2**63
        dtype = complex_dtype()
        raise ValueError(
            f"{what} needs 2**{num_wires + 1 + dtype.itemsize.bit_length() - 1} B (2 x 2**{num_wires} "
            f"{dtype.name} entries), but this device has {_format_bytes(_memory_limit_bytes())}. {advice}"
        )
    check_memory(2**num_wires, what, advice, copies=2)


def zero_state(num_wires: int) -> Array:
    """|0...0> as a flat vector of the default complex dtype.

    Built from iotas, not `zeros().at[0].set(1)`: XLA folds that scatter of constants into a literal of
    2**n amplitudes, embedded in the executable (8 MiB at n = 20, and ~70 ms more compile time there),
    whereas an iota comparison is computed by whichever kernel reads the state first. Two iota axes keep
    the indices within int32 for any n.
    """
    check_fits(num_wires)
    shape = (2 ** (num_wires // 2), 2 ** (num_wires - num_wires // 2))
    rows, cols = (jax.lax.broadcasted_iota(jnp.int32, shape, axis) for axis in (0, 1))
    return ((rows == 0) & (cols == 0)).astype(complex_dtype()).reshape(-1)


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


# Entries of the state per first-stage partial sum of a matrix cotangent (see `_matrix_tangent`). 4 rather
# than 8: measured (HEA value_and_grad, one process, 8 and 4 interleaved, medians, idle 2-core CPU) with
# the default method at n = 12 / 16 / 20, L = 10: 3.4 -> 2.7 ms, 24.9 -> 23.0 ms, 618 -> 557 ms; adjoint
# n = 16, L = 10: 23.8 -> 18.6 ms, n = 20, L = 6: 292 -> 266 ms; 1024 vmapped HEA(8, 4): 42.7 -> 40.5 ms.
# On a shared machine 2 and 1 were slower than 4 (n = 16 adjoint: 39.9 and 49.0 against 36.8 ms), and 16
# and 32 slower than 8 (46.8 and 53.2 against 43.6 ms).
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
    of a state), the barrier, and a sum of what is left. Measured at n = 20 (one-qubit gate, 2-core CPU):
    1.0-2.1 ms against 2.5-4.0 ms, where one elementwise pass over the two states costs 0.6-1.4 ms.
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
    gather puts last: the state came out transposed and was copied back before the next gate (1024 vmapped
    HEA(8, 4): forward 7.4 -> 5.8 ms, value_and_grad 41 -> 27 ms; 2-core CPU, one process, min of 15)."""
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


def fuse_runs(ops, n: int) -> list:
    """`ops` with each run of consecutive gates fused (see `_fusion.py`); other operations stay in place."""
    out, run_ = [], []
    for op in ops:
        if isinstance(op, AbstractGate):
            run_.append(op)
            continue
        out += fuse(run_, n) + [op]
        run_ = []
    return out + fuse(run_, n)


# --- staircases ----------------------------------------------------------------------------------

# A run of at least this many like gates on consecutive wires is applied by one `lax.scan`, on states of
# STAIRCASE_MIN_WIRES to STAIRCASE_MAX_WIRES wires: there it cuts the first call (compilation) below 2 s at
# the price of a slower steady state. Measured on a 2-core CPU (HEA, L = 10, value_and_grad, unrolled vs
# staircases): first call n = 12: 5.0 -> 2.3 s, steady 5.9 -> 9.8 ms; above 12 wires the rotating write
# costs more than in-place slices (n = 16: backward up to 1.8x slower), which a long training loop pays
# at every step. Below 10 wires, since CNOT ladders became gathers (8+ wires), a layer compiles unrolled
# in under 2 s, and a scanned staircase's backward keeps every step's input, which batched gradients pay
# most. Measured (same script, staircases vs unrolled, first call / steady): n = 8 1.20-1.39 s / 0.48-0.53
# ms vs 1.43-1.67 s / 0.42-0.51 ms; n = 9 1.22-1.56 s / 0.68 ms vs 1.49-1.69 s / 0.57 ms; n = 10 1.10-1.61
# s / 1.25-1.36 ms vs 1.88-2.12 s / 0.75-1.01 ms; 1024 vmapped HEA(8, 4) value_and_grad: 76-96 vs 49-51 ms.
STAIRCASE_MIN_LENGTH = 7
STAIRCASE_MIN_WIRES = 10
STAIRCASE_MAX_WIRES = 12
# Steps per loop iteration. A step writes a new buffer (its rotated output cannot overwrite its input),
# and a one-step body must then copy it back into the loop's carried buffer: a second pass. With two
# steps the second writes into the carried buffer, which the first has read. Measured (same script, 2-core
# CPU, n = 8, L = 4, 1024 parameter sets under vmap): forward 25-27 -> 9-12 ms; single circuits at n = 8
# and 12 are unchanged within noise, the first call of value_and_grad at n = 8 ~0.2 s longer.
STAIRCASE_UNROLL = 2


def _rewired(gate: AbstractGate, wires: tuple[int, ...]) -> AbstractGate:
    """`gate` on other wires. Only for `batchable` gates, whose one static field is `_wires`."""
    out = copy.copy(gate)
    object.__setattr__(out, "_wires", wires)  # modules are frozen; this is a fresh copy
    return out


def _step_key(op):
    """What a staircase step of `op` looks like once moved to the first wires; None if it cannot be one.

    Gates of one staircase share this key: the same type, the same relative wires (one wire, or two
    adjacent ones in either order) and leaves of the same shapes, so their leaves stack."""
    if not isinstance(op, AbstractGate) or not batchable(op) or len(op.wires) > 2:
        return None
    low = min(op.wires)
    rel = tuple(w - low for w in op.wires)
    if max(rel) != len(rel) - 1:
        return None
    canonical = _rewired(op, rel)
    shapes = tuple((x.shape, x.dtype) for x in jax.tree.leaves(canonical))
    return jax.tree.structure(canonical), shapes


class Staircase:
    """Like gates `gates[j]` on wires `w + j` (or `w + j, w + j + 1`): one layer of rotations on every
    wire, or a chain of two-qubit gates down the register. Applied by `apply_staircase`."""

    def __init__(self, gates: list[AbstractGate]):
        self.gates = gates


def staircases(ops: list, n: int) -> list:
    """`ops` with each maximal staircase of at least `STAIRCASE_MIN_LENGTH` gates grouped (see `Staircase`).

    A static, trace-time transformation: the gates stay in order and nothing moves past anything."""
    if not STAIRCASE_MIN_WIRES <= n <= STAIRCASE_MAX_WIRES:
        return list(ops)
    out, i = [], 0
    while i < len(ops):
        key = _step_key(ops[i])
        j = i + 1
        if key is not None:
            low = min(ops[i].wires)
            while (
                j < len(ops)
                and min(getattr(ops[j], "wires", None) or (-1,)) == low + (j - i)
                and _step_key(ops[j]) == key
            ):
                j += 1
        if j - i >= STAIRCASE_MIN_LENGTH:
            out.append(Staircase(list(ops[i:j])))
        else:
            out += ops[i:j]
        i = j
    return out


def _rotate(state: Array, k: int, n: int) -> Array:
    """The state with its first `k` wires moved to the end (wire k becomes wire 0)."""
    k %= n
    if k == 0:
        return state
    return state.reshape(2**k, 2 ** (n - k)).T.reshape(state.shape)


def apply_staircase(state: Array, stair: Staircase, n: int) -> Array:
    """Applies a staircase as one `lax.scan`, so it compiles once however many wires it spans.

    The state is rotated so that the first gate's lowest wire comes first; each step applies its gate
    to the first wires and writes the result rotated by one wire in the same pass (`apply_rotating`),
    bringing the next gate's wires to the front; a last rotation restores the order."""
    gates = stair.gates
    low = min(gates[0].wires)
    rel = tuple(w - low for w in gates[0].wires)
    canonical = [_rewired(g, rel) for g in gates]
    treedef = jax.tree.structure(canonical[0])
    xs = [jnp.stack(column) for column in zip(*(jax.tree.leaves(g) for g in canonical), strict=True)]

    fixed = None
    if not xs:  # gates without parameters (CNOT, SWAP, ...): a constant matrix, whose zeros are skipped
        with jax.ensure_compile_time_eval():
            fixed = np.asarray(canonical[0].matrix())

    def step(s, leaves):
        gate = jax.tree.unflatten(treedef, leaves)
        matrix = gate.matrix() if fixed is None else fixed
        return apply_rotating(s, matrix, gate.wires, n), None

    state = _rotate(state, low, n)
    state, _ = jax.lax.scan(step, state, xs, length=len(gates), unroll=STAIRCASE_UNROLL)
    return _rotate(state, n - (low + len(gates)), n)


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


def run(ops, state: Array, n: int) -> Array:
    """Applies a sequence of operations to a flat state; `Repeat` blocks run under `lax.scan`.

    Runs of gates are fused first, on small states dense one-qubit gates paired, on large ones layers of
    them grouped (`KronLayer`), and staircases of like gates grouped (static, trace-time transformations;
    see `_fusion.py` and `staircases`).
    """
    ops = fuse_runs(ops, n)
    if n <= _fusion.PAIR_MAX_WIRES:
        ops = pair_one_qubit(ops)
    ops = kron_layers(ops, n)
    for op in staircases(ops, n):
        if isinstance(op, Repeat):
            op.check_layers()

            # Checkpointed: reverse mode keeps one state per layer and recomputes inside the layer,
            # instead of saving every gate's intermediates for every layer.
            @jax.checkpoint
            def layer(s, body):
                return run(body.ops, s, n), None

            state, _ = jax.lax.scan(layer, state, op.body, length=op.length)
        elif isinstance(op, Staircase):
            state = apply_staircase(state, op, n)
        elif isinstance(op, KronLayer):
            state = apply_kron_layer(state, op, n)
        else:
            state = apply_gate(state, op, n)
    return state


# --- reductions ---------------------------------------------------------------------------------

# Per-letter weights on the bit b of a basis index in `conj(psi[b]) psi[b ^ flips]` (see below).
_WEIGHTS = {"X": (1, 1), "Y": (-1j, 1j), "Z": (1, -1), "I": (1, 1)}
# Words on nearby wires are read from the marginal of a window of this many consecutive wires.
_WINDOW = 10


def _windows(words: list[Word], n: int) -> dict[tuple[int, ...], list[int]]:
    """Groups words by the wires of one marginal that serves them all.

    Words within an aligned window of `_WINDOW` wires share that window's marginal (one pass over the
    state for the window, not one per word); a word spanning two windows uses the window starting at its
    first wire when it fits in one, else exactly its own wires.
    """
    out: dict[tuple[int, ...], list[int]] = {}
    for i, word in enumerate(words):
        ws = [w for w, _ in word]
        if not ws:
            key = ()
        else:
            lo, hi = min(ws), max(ws)
            start = lo // _WINDOW * _WINDOW
            if hi < start + _WINDOW:
                key = tuple(range(start, min(start + _WINDOW, n)))
            elif hi - lo < _WINDOW:
                key = tuple(range(lo, min(lo + _WINDOW, n)))
            else:
                key = tuple(sorted(ws))
        out.setdefault(key, []).append(i)
    return out


# Entries summed per stage when a marginal sums out many wires (see `sum_out`).
_SUM_CHUNK = 1024


def sum_out(c: Array, wires: tuple[int, ...], n: int) -> Array:
    """The flat `c` (2**n entries) summed over every wire not in `wires` (sorted), flattened.

    In two stages of at most `_SUM_CHUNK` entries: XLA's CPU reduction over many size-2 axes accumulates
    in one running float32 sum, whose error grows with the count (probabilities off by 7e-3 and summing
    to 1.0075 at 22 qubits); chunked, the error stays near float32's rounding (2e-8 against 2e-5 there)."""
    k = len(wires)
    low = wires[0] if wires else 0
    if wires == tuple(range(low, low + k)):
        # Consecutive (the windows of Pauli sums): a reshape, no transpose (which cost 4x here at n = 20).
        return _staged_sum(_staged_sum(c.reshape(2**low, 2**k, -1), 2), 0)
    t = jnp.moveaxis(c.reshape((2,) * n), wires, range(k)).reshape(2**k, -1)
    return _staged_sum(t, 1)


def _staged_sum(t: Array, axis: int) -> Array:
    """`jnp.sum(t, axis)`, in chunks of `_SUM_CHUNK` entries first when the axis is longer."""
    size = t.shape[axis]
    if size > _SUM_CHUNK:
        chunked = t.shape[:axis] + (size // _SUM_CHUNK, _SUM_CHUNK) + t.shape[axis + 1 :]
        t = jnp.sum(t.reshape(chunked), axis=axis + 1)
    return jnp.sum(t, axis=axis)


def _word_weights(word: Word, wires: tuple[int, ...]) -> np.ndarray:
    """The weight of each basis index of `wires` for one word: a product of per-letter 2-vectors."""
    letters = dict(word)
    w = np.ones(1, complex)
    for wire in wires:
        w = np.kron(w, np.asarray(_WEIGHTS[letters.get(wire, "I")], complex))
    return w


def _computed_weights(words: list[Word], wires: tuple[int, ...], dtype) -> Array:
    """`_word_weights` of each word, computed in the program from an iota rather than stored: the product
    of the letters' 2-vectors is `(-i)**(number of Y) * (-1)**parity(b & mask)`, `mask` the word's Y and
    Z wires. Used on small states, where a stored `(words, 2**k)` table over `SEQUENTIAL_BYTES` would
    make XLA run the whole program over its thread pool (5 qubits: value_and_grad of HEA(5, 4) with a
    16-word Hamiltonian 148 -> 96 us). On larger states the stored table compiled faster."""
    k = len(wires)
    masks, ny = np.zeros(len(words), np.int32), np.zeros(len(words), np.int32)
    for j, word in enumerate(words):
        letters = dict(word)
        for a, wire in enumerate(wires):
            masks[j] |= (1 << (k - 1 - a)) if letters.get(wire, "I") in "YZ" else 0
            ny[j] += letters.get(wire, "I") == "Y"
    phases = np.asarray([1, -1j, -1, 1j])[ny % 4]
    odd = jax.lax.population_count(jax.lax.iota(jnp.int32, 2**k)[None, :] & masks[:, None]) & 1
    if not np.any(phases.imag):
        phases = phases.real
    return jnp.asarray(phases, dtype)[:, None] * jnp.where(odd == 1, -1, 1).astype(dtype)


# Above this many passes over the state (one per marginal of `pauli_expvals`), words are evaluated one by
# one in a `lax.scan` instead (`_scanned_expvals`): compiled once, however many words.
SCAN_MIN_PASSES = 32


def pauli_expvals(state: Array, words: tuple[Word, ...], n: int) -> Array:
    """<psi|P|psi> for each Pauli word, as a real array.

    For the words flipping one set of wires (their X and Y letters), `c[b] = conj(psi[b]) psi[b ^ flips]`
    is formed once (the probabilities when nothing flips); each word is then a weighted sum of a marginal
    of `c` over its wires. Marginals are shared by all words in one window of nearby wires, so a sum of
    local terms costs a few passes over the state, not one per term. When that takes more than
    `SCAN_MIN_PASSES` passes (a Hamiltonian of many unrelated words, as in chemistry), each word is one
    step of a scan instead: the program, and its compile time, no longer grow with the number of words.
    """
    t = state.reshape((2,) * n)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, word in enumerate(words):
        groups.setdefault(tuple(w for w, p in word if p in "XY"), []).append(i)
    windows = {flips: _windows([words[i] for i in members], n) for flips, members in groups.items()}
    if sum(len(w) for w in windows.values()) > SCAN_MIN_PASSES and n < 31:
        return _scanned_expvals(state, words, n)
    values: list = [None] * len(words)
    small = state.size * state.dtype.itemsize <= SEQUENTIAL_BYTES
    for flips, members in groups.items():
        c = jnp.real(t * t.conj()) if not flips else t.conj() * jnp.flip(t, axis=flips)
        c = c.reshape(-1)
        for wires, local in windows[flips].items():
            m = sum_out(c, wires, n)
            group = [words[members[j]] for j in local]
            if small and len(group) * m.size * m.dtype.itemsize > SEQUENTIAL_BYTES:
                weights = _computed_weights(group, wires, m.dtype)
            else:
                weights = np.stack([_word_weights(word, wires) for word in group])
                if not np.iscomplexobj(c) and not np.any(weights.imag):
                    weights = weights.real
                weights = jnp.asarray(weights, m.dtype)
            vals = jnp.real(jnp.sum(weights * m[None, :], axis=1))
            for j, v in zip(local, vals, strict=True):
                values[members[j]] = v.astype(real_dtype())
    return jnp.stack(values) if values else jnp.zeros((0,), real_dtype())


def _word_masks(words: tuple[Word, ...], n: int, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per word, as basis-index bit masks (wire 0 the most significant bit): the wires it flips (X, Y),
    the wires whose bit sets its sign (Y, Z); and its phase i**(number of Y letters), of `dtype`."""
    flips, signs, ny = (np.zeros(len(words), np.int32) for _ in range(3))
    for k, word in enumerate(words):
        for w, p in word:
            bit = 1 << (n - 1 - w)
            flips[k] |= bit if p in "XY" else 0
            signs[k] |= bit if p in "YZ" else 0
            ny[k] += p == "Y"
    return flips, signs, np.asarray([1, 1j, -1, -1j])[ny % 4].astype(dtype)


def _word_image(psi: Array, flips, signs, phase, flipping: bool = True) -> Array:
    """P|psi> for the word given by masks: `P|b> = i**ny (-1)**parity(b & signs) |b ^ flips>`, so entry
    `b` of the image is `phase * (-1)**parity((b ^ flips) & signs) * psi[b ^ flips]`: one gather, none for
    words that flip no wire (`flipping=False`, static)."""
    source = jax.lax.iota(jnp.int32, psi.shape[0])
    if flipping:
        source = source ^ flips
        psi = _gather(psi, source, unique=True)
    odd = jax.lax.population_count(source & signs) & 1
    return psi * jnp.where(odd == 1, -phase, phase)


def _real_inner(a: Array, b: Array) -> Array:
    """Re <a|b>, summed in stages (see `sum_out`)."""
    return _staged_sum(jnp.real(a) * jnp.real(b) + jnp.imag(a) * jnp.imag(b), 0)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _word_values(psi: Array, flips: Array, signs: Array, phases: Array, flipping: bool) -> Array:
    """`Re <psi|P psi>` for the words given by masks (see `_word_image`), one per step of a `lax.scan`.

    Differentiated by its own rule, `d<P> = 2 Re <P psi|dpsi>` (P is Hermitian), in a checkpointed scan
    that recomputes `P psi`: JAX's own derivative of the gather would scatter into the state's cotangent,
    and its residuals would keep one image per word. The words are arguments, not closed over: inside an
    outer trace (`jax.grad(jax.jit(f))`) a closed-over array would leak into the rule's own trace."""

    def step(_, term):
        return None, _real_inner(psi, _word_image(psi, *term, flipping))

    return jax.lax.scan(step, None, (flips, signs, phases))[1]


@_word_values.defjvp
def _word_values_jvp(flipping, primals, tangents):
    psi, flips, signs, phases = primals
    dpsi = tangents[0]

    @jax.checkpoint
    def step(_, term):
        image = _word_image(psi, *term, flipping)
        return None, (_real_inner(psi, image), 2 * _real_inner(image, dpsi))

    return jax.lax.scan(step, None, (flips, signs, phases))[1]


def _by_flipping(flips: np.ndarray):
    """`(flipping, indices)` for the words that flip no wire (Z letters only: a sign per entry, no gather)
    and for those that do, leaving out an empty group: each group is one scan."""
    for flipping in (False, True):
        at = np.flatnonzero((flips != 0) == flipping)
        if at.size:
            yield flipping, at


def _scanned_expvals(state: Array, words: tuple[Word, ...], n: int) -> Array:
    """`pauli_expvals` one word per step of a `lax.scan` (`_word_values`), in two scans (`_by_flipping`)."""
    flips, signs, phases = _word_masks(words, n, state.dtype)
    parts, order = [], []
    for flipping, at in _by_flipping(flips):
        parts.append(_word_values(state, flips[at], signs[at], phases[at], flipping))
        order.append(at)
    values = jnp.concatenate(parts)[np.argsort(np.concatenate(order))]
    return values.astype(real_dtype())


def apply_observable(state: Array, lc: LinearCombination, n: int) -> Array:
    """O|psi> for a linear combination of Pauli words and Hermitian matrices. Many Pauli words (more than
    `SCAN_MIN_PASSES`) are summed in a `lax.scan`, one word per step: compiled once, however many."""
    at = [k for k, t in enumerate(lc.terms) if isinstance(t, PauliWord)]
    scanned = len(at) > SCAN_MIN_PASSES and n < 31
    out = jnp.zeros_like(state)
    if scanned:
        flips, signs, phases = _word_masks(tuple(lc.terms[k].word for k in at), n, state.dtype)
        coeffs = lc.coeffs[np.asarray(at)].astype(state.dtype)
        for flipping, sub in _by_flipping(flips):

            @jax.checkpoint  # keeps no index array per word for the backward pass
            def step(acc, term, flipping=flipping):
                f, m, phase, c = term
                return acc + _word_image(state, f, m, c * phase, flipping), None

            terms = (jnp.asarray(flips[sub]), jnp.asarray(signs[sub]), jnp.asarray(phases[sub]), coeffs[sub])
            out = jax.lax.scan(step, out, terms)[0]
    for k, t in enumerate(lc.terms):  # indexed: iterating a concrete array of > 100 entries under jit traces
        if isinstance(t, PauliWord) and scanned:
            continue
        if isinstance(t, PauliWord):
            term = apply_pauli_word(state, t.word, n)
        else:
            term = apply_matrix(state, t.matrix.astype(state.dtype), t.wires, n)
        out = out + lc.coeffs[k].astype(state.dtype) * term
    return out


def marginal(p: Array, wires: tuple[int, ...], n: int) -> Array:
    """The flat probabilities `p` of all `n` wires summed over the wires not in `wires`, in the order of
    `wires` (the first one most significant)."""
    ascending = tuple(sorted(wires))
    m = sum_out(p, ascending, n).reshape((2,) * len(wires))
    return m.transpose([ascending.index(w) for w in wires]).reshape(-1).astype(real_dtype())


def marginal_probs(state: Array, wires: tuple[int, ...], n: int) -> Array:
    """Probabilities of the basis states of `wires` (in that order), summed over the other wires."""
    return marginal(jnp.real(state * state.conj()), wires, n)


def reduced_density_matrix(state: Array, wires: tuple[int, ...], n: int) -> Array:
    """The reduced density matrix of `wires` (in that order), tracing out the others."""
    t = jnp.moveaxis(state.reshape((2,) * n), list(wires), list(range(len(wires))))
    a = t.reshape(2 ** len(wires), -1)
    return jnp.matmul(a, a.conj().T, precision=EXACT)


def sample_indices(key, p: Array, shots: int) -> Array:
    """`shots` basis indices drawn from the probabilities `p` (2**k entries, k >= 0), as int32.

    Bit by bit down a binary tree of partial sums: each bit is drawn from the two halves' masses of the
    prefix drawn so far. `jax.random.choice(p=...)` searches one float32 cumulative sum instead, where
    entries below its rounding (6e-8 near 1) get no width: at 22 qubits an outcome of probability 0.01
    spread over 2**21 basis states was drawn at 1e-5. Here every probability is a product of float32
    ratios of pairwise sums, accurate to a few roundings whatever its size. The probabilities need not
    sum to 1 (only ratios are used); a prefix is never extended into a half of zero mass (all-zero
    probabilities give index 0).
    """
    k = int(np.log2(p.shape[0]))
    if 2**k != p.shape[0]:
        raise ValueError(f"sample: expected 2**k probabilities, got {p.shape[0]}")
    if k == 0:
        return jnp.zeros((shots,), jnp.int32)
    levels = [p]
    for _ in range(k - 1):  # levels[j] has 2**(k - j) entries; its pairs are the halves of a prefix
        levels.append(levels[-1].reshape(-1, 2).sum(axis=1))
    keys = jax.random.split(key, k)  # one draw per level: `shots` uniforms live at a time, not k * shots
    index = jnp.zeros((shots,), jnp.int32)
    for j, level in enumerate(reversed(levels)):
        pairs = level.reshape(-1, 2)
        c0, c1 = pairs[index, 0], pairs[index, 1]
        one = draw_one(jax.random.uniform(keys[j], (shots,), p.dtype), c0, c1)
        index = 2 * index + one.astype(jnp.int32)
    return index


def draw_one(u: Array, c0: Array, c1: Array) -> Array:
    """Whether a uniform `u` in [0, 1) draws the second of two masses `c0`, `c1`: with probability
    `c1 / (c0 + c1)`, so they need not sum to 1 (a state's norm drifts), and never a side of zero mass."""
    return (c1 > 0) & ((c0 <= 0) | (u * (c0 + c1) >= c0))
