"""The adjoint method's backward walk on a state vector: un-applies gates and takes their parameter
cotangents."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._circuit import Repeat
from .._coordinates import from_real_coordinates, real_coordinates
from .._custom_types import EXACT
from .._scan import packed_scan
from ._fusion import KronLayer, fuse, kron_layers, pair_one_qubit
from ._kernels import apply_diagonal, apply_gate, apply_matrix, operator_form
from ._kronlayer import kron_groups, rotate_through

# States of at least this many wires are walked one gate per loop step (see `_blocks_backward`).
_LOOP_MIN_WIRES = 16


# The state and the bra (the conjugate of the state's cotangent) at one point of the backward walk.
Pair = tuple[Array, Array]


def _gate_step(gate, pair: Pair, n: int, looped: bool) -> tuple[Pair, list[Array]]:
    """One gate backwards: `pair` before it, and the gate's parameter cotangents.

    `pair` is the state after the gate and the bra there. Both move back past the gate by the same
    un-apply (`U^dagger`, through the same kernel): the state to the state before the gate (differentiated
    as `U^-1`, see `_unapply`), and the bra because the cotangent of `U psi` is
    `U^T lam = conj(U^dagger conj(lam))` in JAX's convention.

    The parameter cotangents are `jax.vjp` of the gate's application with respect to the gate, at the
    state before it: `U_bar[i, j] = sum conj(bra[i]) psi_before[j]` over the other wires for a matrix `U`.
    In a `looped` walk (large states, see `_blocks_backward`), gates applied as a dense matrix or a
    diagonal take it from the states after the gate instead: since `psi_before = U^dagger psi`,
    `U_bar = C conj(U)` with `C[i, k] = sum conj(bra[i]) psi[k]` (for a diagonal, `d_bar = conj(d) C`), and
    `jax.vjp` of `matrix()` (or `diagonal()`) carries `U_bar` to the gate's leaves. The reduction then
    reads the loop's carried states rather than a freshly un-applied one, so fewer temporary states are
    alive per step. Only the looped walk does this: unrolled, on small states, it was slower (see
    README.md).

    A `PairedGate` (two one-qubit gates on different wires, which commute) is un-applied in one pass, and
    each of its two matrices takes its cotangent as if it were the last gate applied: `C conj(U)` from
    the states after the pair, on its own wire.
    """
    inverse = gate.adjoint()
    psi, bra = pair
    bra_before = apply_gate(bra, inverse, n)
    if not jax.tree.leaves(gate):
        return (apply_gate(psi, inverse, n), bra_before), []
    kind, value = operator_form(gate)
    if kind == "paired":  # two commuting gates: each is the last one applied, on its own wire
        return (_unapply(gate, psi, n), bra_before), _paired_bars(psi, bra, value, gate.wires, n)
    if looped and kind in ("matrix", "diagonal"):
        u_bar = _bar_from_after(psi, bra, value, gate.wires, n, diagonal=kind == "diagonal")
        _, form_vjp = jax.vjp(lambda g: operator_form(g)[1], gate)
        (gate_bar,) = form_vjp(u_bar)
        return (_unapply(gate, psi, n), bra_before), jax.tree.leaves(gate_bar)
    # Read twice (returned, and by the parameter cotangent): without the barrier XLA fuses the un-apply
    # into both readers and computes it twice, one more pass over the state per gate (see README.md).
    psi_before = jax.lax.optimization_barrier(_unapply(gate, psi, n))
    _, gate_vjp = jax.vjp(lambda g: apply_gate(psi_before, g, n), gate)
    (gate_bar,) = gate_vjp(bra.conj())
    return (psi_before, bra_before), jax.tree.leaves(gate_bar)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _unapply(gate, psi: Array, n: int) -> Array:
    """The state before `gate` from the state after it: `U^dagger psi`, differentiated as `U^-1 psi`.

    The two agree where `U` is unitary, but not their derivatives in directions that leave the unitary
    group, which a gate whose matrix entries are its parameters (`QubitUnitary`) has: forward-over-reverse
    (`jax.hessian`) through `U^dagger` would differentiate `U^dagger U psi_before`, which is `psi_before`
    only on that group. As `U^-1 psi`, the derivative is `U^-1 (dpsi - dU psi_before)`: that of the state
    the forward pass had, in any direction and at any order.
    """
    return apply_gate(psi, gate.adjoint(), n)


@_unapply.defjvp
def _unapply_jvp(n, primals, tangents):
    gate, psi = primals
    dgate, dpsi = tangents
    before = _unapply(gate, psi, n)
    _, du_before = jax.jvp(lambda g: apply_gate(before, g, n), (gate,), (dgate,))
    return before, _unapply(gate, dpsi - du_before, n)


def _bar_from_after(psi: Array, bra: Array, u: Array, wires, n: int, diagonal: bool = False) -> Array:
    """The cotangent of a gate's matrix `u` (or diagonal) from the state after it and the bra there:
    `C conj(u)` (or `conj(u) C`) with `C` the correlation of the two on `wires` (see `_gate_step`)."""
    apply = apply_diagonal if diagonal else apply_matrix
    _, correlate = jax.vjp(lambda v: apply(psi, v, wires, n), u)
    (c,) = correlate(bra.conj())
    if diagonal:
        return c * _inverse_transposed(u, diagonal)
    return _times_inverse_transposed(c, u)


def _paired_bars(psi: Array, bra: Array, us, wires, n: int) -> list[Array]:
    """The cotangents of a `PairedGate`'s matrices `(A, B)` from the states after it: each `C conj(u)` as
    if it were the last gate applied (they commute), with `C` the correlation on its own wire.

    Both correlations come from one pass: the correlation on the two wires together, `C2[(i, j), (k, l)]`,
    whose partial traces over one wire are the correlations on the other; two one-wire correlations read
    both states twice and compile to more kernels (see README.md).
    """
    a, b = us
    _, correlate = jax.vjp(lambda v: apply_matrix(psi, v, wires, n), jnp.kron(a, b))
    (c,) = correlate(bra.conj())
    c = c.reshape(2, 2, 2, 2)  # (out on wires[0], out on wires[1], in on wires[0], in on wires[1])
    return [
        _times_inverse_transposed(jnp.trace(c, axis1=1, axis2=3), a),
        _times_inverse_transposed(jnp.trace(c, axis1=0, axis2=2), b),
    ]


def _times_inverse_transposed(c: Array, u: Array) -> Array:
    """`C conj(u)`, differentiated as `C (U^-1)^T` (see `_inverse_transposed`). A broadcast sum: XLA fuses
    it, not a dot."""
    return jnp.sum(c[:, :, None] * _inverse_transposed(u, False)[None, :, :], axis=1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _inverse_transposed(u: Array, diagonal: bool) -> Array:
    """`conj(u)`, differentiated as `(U^-1)^T` (for a diagonal, `1 / d`): the two agree at a unitary point,
    and `C conj(U)` in `_bar_from_after` stands for `C (U^-1)^T` (see `_unapply`)."""
    return u.conj()


@_inverse_transposed.defjvp
def _inverse_transposed_jvp(diagonal, primals, tangents):
    (u,), (du,) = primals, tangents
    inverse_t = _inverse_transposed(u, diagonal)
    if diagonal:
        return inverse_t, -inverse_t * inverse_t * du
    inverse = inverse_t.T
    return inverse_t, -jnp.matmul(jnp.matmul(inverse, du, precision=EXACT), inverse, precision=EXACT).T


def _real_view(leaves: list[Array], dtype) -> Array:
    """Cotangent leaves packed as one real vector (a `lax.switch` branch output has one fixed type)."""
    parts = [real_coordinates(x).astype(dtype) for x in leaves]
    return jnp.concatenate(parts) if parts else jnp.zeros((0,), dtype)


def _from_real_view(v: Array, like: list[Array]) -> list[Array]:
    sizes = [x.size * (2 if jnp.iscomplexobj(x) else 1) for x in like]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [from_real_coordinates(v[a : a + s], x) for a, s, x in zip(starts, sizes, like, strict=True)]


def _gates_backward(gates, pair: Pair, n: int) -> tuple[list[list[Array]], Pair]:
    """A run of gates backwards, fused as in the forward pass (`qfx/_statevector/_fusion.py`).

    The walk un-applies the fused blocks and takes the cotangents of their matrices; one `jax.vjp` of the
    fusion itself then carries those back to the parameters of the original gates. Layers of one-qubit
    blocks on states of 10 or more qubits are walked as matrix products (`_kron_backward`), the rest by
    `_blocks_backward`.
    """
    fused, unfuse = jax.vjp(lambda gs: fuse(gs, n), list(gates))
    segments: list = []
    for op in kron_layers(fused, n):
        if isinstance(op, KronLayer) or not segments or isinstance(segments[-1], KronLayer):
            segments.append(op if isinstance(op, KronLayer) else [op])
        else:
            segments[-1].append(op)
    leaves: list[list[Array]] = []
    for segment in reversed(segments):
        if isinstance(segment, KronLayer):
            done, pair = _kron_backward(segment.gates, segment.sizes, pair, n)
        else:
            done, pair = _paired_backward(segment, pair, n)
        leaves[:0] = done
    (gate_bars,) = unfuse(_as_cotangents(fused, leaves))
    return [jax.tree.leaves(b) for b in gate_bars], pair


def _paired_backward(gates, pair: Pair, n: int) -> tuple[list[list[Array]], Pair]:
    """Fused blocks backwards, one at a time (`_blocks_backward`). On large states (the looped walk)
    consecutive one-qubit blocks on different wires are paired first (`PairedGate`): the state and the bra
    move back past both in one pass each, and both cotangents come from the states after the pair (see
    `_gate_step`): one pass over each state per pair instead of one per gate. The first call compiles
    longer (a 4x4 pass compiles longer than two 2x2 ones; see README.md)."""
    if n < _LOOP_MIN_WIRES:
        return _blocks_backward(gates, pair, n)
    paired, unpair = jax.vjp(pair_one_qubit, gates)
    leaves, pair = _blocks_backward(paired, pair, n)
    (bars,) = unpair(_as_cotangents(paired, leaves))
    return [jax.tree.leaves(b) for b in bars], pair


def _as_cotangents(ops: list, leaves: list[list[Array]]) -> list:
    """Each op's cotangent leaves put back in its structure (for the `jax.vjp` that made `ops`)."""
    return [jax.tree.unflatten(jax.tree.structure(op), ls) for op, ls in zip(ops, leaves, strict=True)]


def _kron_backward(gates: list, sizes, pair: Pair, n: int) -> tuple[list[list[Array]], Pair]:
    """A layer of one-qubit blocks on distinct wires (a `KronLayer`) backwards, as matrix products. For
    each group of `sizes` wires, from the last ones, with `K` the Kronecker product of the group's
    matrices: the state moves back by `K^-1` (computed as an inverse, not as `K^dagger`: see below) and
    the cotangent `lam = conj(bra)` by `K^T`, one product each, written as `(2**k, rest)`: the group's
    wires come first and the next group is last, as `_kronlayer._kron_products` does forwards
    (`rotate_through`). One more product of the two gives their correlation over the rest of the
    register, `C'[i, k] = sum lam[i] psi[k]`; a gate's matrix cotangent is `u^-T C'_w` (`conj(u) C'_w`
    for a unitary `u`), with `C'_w` the partial trace of `C'` on its wire: its cotangent from the states
    after it, `C_w conj(u)` as in `_gate_step`'s looped walk, with `C_w = u^-T C'_w u^T`, since the
    group's other factors cancel under the trace.

    The groups behind a group (un-applied before it) move `psi` by `V^-1` and `lam` by `V^T` on other
    wires, which leaves the partial trace unchanged for any invertible `V`: derivatives that leave the
    unitary group (`QubitUnitary` entries, under `jax.hessian`) stay exact, as `K^-1` and `K^-T` are
    differentiated as inverses (`_inverse_transposed`). Carrying `lam` rather than the bra keeps a `conj`
    pass out of each product, and the correlation reads the states laid out `(2**k, rest)`, the faster
    way round for the library's product.
    """
    psi, lam = pair[0], pair[1].conj()
    mats, mats_vjp = jax.vjp(lambda gs: [g.matrix() for g in gs], list(gates))
    index = {g.wires[0]: i for i, g in enumerate(gates)}
    by_wire = {w: mats[i] for w, i in index.items()}
    u_bars: list = [None] * len(gates)
    for lo, hi, kron in kron_groups(by_wire, sizes, n, psi.dtype):
        k = hi - lo
        if kron is None:  # no gate on these wires: they only move
            psi, lam = rotate_through(None, psi, k), rotate_through(None, lam, k)
            continue
        psi = rotate_through(_inverse_transposed(kron, False).T, psi, k)  # K^-1
        lam = rotate_through(kron.T, lam, k)
        c = jax.lax.dot_general(  # C'
            lam.reshape(2**k, -1), psi.reshape(2**k, -1), (((1,), (1,)), ((), ())), precision=EXACT
        ).reshape((2,) * (2 * k))
        for a, w in enumerate(range(lo, hi)):
            if w in index:
                i = index[w]
                inverse_t = _inverse_transposed(mats[i].astype(psi.dtype), False)  # u^-T
                u_bar = jnp.sum(inverse_t[:, :, None] * _partial_trace(c, a, k)[None], axis=1)
                u_bars[i] = u_bar.astype(mats[i].dtype)
    (gate_bars,) = mats_vjp(u_bars)
    return [jax.tree.leaves(b) for b in gate_bars], (psi, lam.conj())


def _varying(x) -> frozenset:
    """The manual mesh axes over which `x` varies (inside `shard_map`; none elsewhere)."""
    return getattr(getattr(jax.typeof(x), "manual_axis_type", None), "varying", frozenset())


def _varying_like(x: Array, ref: Array) -> Array:
    """`x` typed as varying over the manual mesh axes that `ref` varies over, so that all branches of a
    `switch` agree where the state is sharded (`qfx/_statevector/_distributed.py`) and a gate without
    parameters gives constant zeros."""
    axes = tuple(sorted(_varying(ref) - _varying(x)))
    return jax.lax.pcast(x, axes, to="varying") if axes else x


def _partial_trace(c: Array, keep: int, k: int) -> Array:
    """The 2x2 block of a `(2,) * 2k` correlation on wire `keep` of its `k`, traced over the others."""
    letters = "abcdefghijklmnop"[:k]
    out_in = letters + "".join(ch.upper() if j == keep else ch for j, ch in enumerate(letters))
    return jnp.einsum(f"{out_in}->{letters[keep]}{letters[keep].upper()}", c)


def _blocks_backward(gates, pair: Pair, n: int) -> tuple[list[list[Array]], Pair]:
    """A run of gates backwards, one gate per step of a `lax.scan` that `lax.switch`es on the gate.

    Unrolled in one program, XLA CPU fuses runs of elementwise gates (diagonal ones) into every consumer,
    recomputing them, and schedules all parameter reductions after all un-applies, so that about one state
    per gate is alive at once. One gate per loop step keeps a few states alive and computes each once.
    Small states are the other way round: memory is no concern, and a loop step costs more than the gate,
    so below `_LOOP_MIN_WIRES` the gates are unrolled.

    The loop runs two gates per iteration. A `lax.switch` writes its states to new buffers (a gate cannot
    be un-applied in place), and with one gate per iteration XLA then copied both into the loop's carried
    buffers, two more passes per gate; the second of two steps writes into the carried buffers, which the
    first has read. Four per iteration: no faster, longer to compile.
    Of an odd number of gates, the first (walked last) is walked after the loop, outside the `switch`:
    with an odd count `scan` would compile the last step once more, outside the unrolled pair, a third copy
    of every branch. The other way to make the count even, a step that does nothing, compiled two more
    branches and copied both states, as every branch does. (Measurements: README.md.)
    """
    if len(gates) == 1 or n < _LOOP_MIN_WIRES:
        out = []
        for gate in reversed(gates):
            pair, leaves = _gate_step(gate, pair, n, looped=False)
            out.append(leaves)
        return out[::-1], pair
    head = []
    if len(gates) % 2:  # an even count in the loop (see the docstring)
        head, gates = gates[:1], gates[1:]
    like = [jax.tree.leaves(g) for g in gates]
    reals = [x.real.dtype if jnp.iscomplexobj(x) else x.dtype for ls in like for x in ls]
    dtype = max(reals, key=lambda d: d.itemsize) if reals else pair[0].real.dtype
    width = max(_real_view(ls, dtype).shape[0] for ls in like)

    def branch(gate):
        def step(pair):
            pair, leaves = _gate_step(gate, pair, n, looped=True)
            packed = _varying_like(_real_view(leaves, dtype), pair[0])
            return pair, jnp.pad(packed, (0, width - packed.shape[0]))

        return step

    branches = [branch(g) for g in reversed(gates)]

    def body(pair, k):
        return jax.lax.switch(k, branches, pair)

    pair, packed = jax.lax.scan(body, pair, jnp.arange(len(gates)), unroll=2)
    count = len(gates)
    leaves = [_from_real_view(packed[count - 1 - i], like[i]) for i in range(count)]
    for gate in head:
        pair, first = _gate_step(gate, pair, n, looped=True)
        leaves.insert(0, first)
    return leaves, pair


def backward(ops, pair: Pair, n: int) -> tuple[list[Array], Pair]:
    """Walks `ops` backwards from `pair`: the state after them and the bra there (the conjugate of the
    state's cotangent).

    Runs of gates go through `_gates_backward`; `Repeat` blocks are walked by a reverse `lax.scan` over
    their layers. Only a few state vectors are live at a time, whatever the depth.

    **Returns:** the cotangent leaves of `ops` (in the order of `jax.tree.leaves(ops)`), and the pair
    before `ops`.
    """
    cotangents: list = [None] * len(ops)
    stop = len(ops)
    while stop > 0:
        op = ops[stop - 1]
        if isinstance(op, Repeat):

            def layer(pair, body):
                leaves, pair = backward(body.ops, pair, n)
                return pair, leaves

            pair, cotangents[stop - 1] = packed_scan(layer, pair, op.body, length=op.length, reverse=True)
            stop -= 1
            continue
        start = stop
        while start > 0 and not isinstance(ops[start - 1], Repeat):
            start -= 1
        cotangents[start:stop], pair = _gates_backward(ops[start:stop], pair, n)
        stop = start
    return [leaf for leaves in cotangents for leaf in leaves], pair
