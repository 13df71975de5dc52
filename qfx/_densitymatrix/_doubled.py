"""A circuit on `n` wires as a circuit on the `2n` wires of a vectorised density matrix.

`rho` is held as a flat array of `4**n` entries, `rho[i, j]` at index `i * 2**n + j`: the ket (row) wires
are wires `0..n-1` of a `2n`-wire state, the bra (column) wires are `n..2n-1`. Then `U rho U^dagger` is
`U` on the ket wires and `conj(U)` on the bra wires (a one-qubit gate: `U (x) conj(U)` on its two wires
at once), and a channel `sum_i K_i rho K_i^dagger` is the superoperator `sum_i K_i (x) conj(K_i)` on the
channel's ket and bra wires: both are ordinary operations on a `2n`-wire state, so the state-vector
pipeline (fusion, kernels, `Repeat` as `lax.scan`) runs them as it runs gates, and derivatives flow to the
original leaves.
"""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._channels import AbstractChannel
from .._circuit import Circuit, Repeat
from .._custom_types import EXACT, complex_dtype
from .._gates import AbstractGate


class OnBra(AbstractGate):
    """`conj(U)` of a gate `base`, on its wires shifted by `shift` (the bra wires). Made here only."""

    base: AbstractGate
    shift: int = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return tuple(w + self.shift for w in self.base.wires)

    def matrix(self) -> Array:
        return self.base.matrix().conj()

    def diagonal(self):
        d = self.base.diagonal()
        return None if d is None else d.conj()

    def permutation(self):
        p = self.base.permutation()
        if p is None:
            return None
        perm, phases = p
        return perm, None if phases is None else phases.conj()

    def control(self):
        c = self.base.control()
        if c is None:
            return None
        controls, values, target = c
        return tuple(w + self.shift for w in controls), values, OnBra(target, self.shift)


class Conjugation(AbstractGate):
    """`rho -> U rho U^dagger` of a one-qubit gate `base` as one operation on its ket wire and its bra
    wire: the `4 x 4` matrix `U (x) conj(U)` (diagonal when `U` is). Made here only. One pass instead of
    two, and fusion multiplies it with the channels and the other one-qubit gates on that wire."""

    base: AbstractGate
    shift: int = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        (w,) = self.base.wires
        return (w, w + self.shift)

    def matrix(self) -> Array:
        u = self.base.matrix()
        return jnp.kron(u, u.conj())

    def diagonal(self):
        d = self.base.diagonal()
        return None if d is None else jnp.kron(d, d.conj())


class Superoperator(AbstractGate):
    """A channel's superoperator on its ket wires and its bra wires (`shift` further). Made here only;
    not unitary, but linear, which is all the pipeline needs."""

    channel: AbstractChannel
    shift: int = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return self.channel.wires + tuple(w + self.shift for w in self.channel.wires)

    def matrix(self) -> Array:
        return self.channel.superoperator()


class SuperBlock(AbstractGate):
    """Consecutive gates and channels on one or two wires as one superoperator `S`: a `4 x 4` matrix on
    (`w`, `w + n`) or a `16 x 16` on (`a`, `b`, `a + n`, `b + n`). Made by `doubled` only; not unitary, but
    linear."""

    S: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return self._wires

    def matrix(self) -> Array:
        return self.S


def _single(op, n: int) -> list:
    """One gate or channel as operations on the doubled state, keeping a gate's structure (diagonal,
    permutation, controlled) for the state-vector kernels."""
    if isinstance(op, AbstractChannel):
        return [Superoperator(op, n)]
    if len(op.wires) == 1 and op.control() is None:
        return [Conjugation(op, n)]
    return [op, OnBra(op, n)]


def _groupable(op) -> bool:
    return isinstance(op, (AbstractGate, AbstractChannel)) and 1 <= len(op.wires) <= 2


def _blocks(ops) -> list[tuple[tuple[int, ...], list]]:
    """Greedy blocks of `ops` (each on one or two wires), in circuit order, as `_fusion.fuse` forms them on a
    state vector: an operation joins the latest block on its wires when that block covers them, a
    two-wire one otherwise starts a block that absorbs the one-wire blocks open on its wires. Then
    one-wire blocks are paired where nothing between them touches the second's wire. Every operation is
    dense here (a gate is `U (x) conj(U)`, two passes as a structured gate, one as a block)."""
    blocks: list = []
    latest: dict[int, int] = {}
    for op in ops:
        wires = op.wires
        open_ = {latest.get(w) for w in wires}
        if len(open_) == 1 and None not in open_:
            (i,) = open_
            if set(wires) <= set(blocks[i][0]):
                blocks[i][1].append(op)
                continue
        absorbed = []
        for i in sorted({i for i in open_ if i is not None and len(blocks[i][0]) == 1}):
            absorbed += blocks[i][1]
            blocks[i] = None
        blocks.append((tuple(wires), absorbed + [op]))
        for w in wires:
            latest[w] = len(blocks) - 1
    blocks = [b for b in blocks if b is not None]
    out, pending, touched = [], None, set()
    for wires, members in blocks:
        if len(wires) == 1 and pending is not None and wires[0] not in touched | set(out[pending][0]):
            first = out[pending]
            out[pending] = ((first[0][0], wires[0]), first[1] + members)
            pending = None
            continue
        out.append((wires, members))
        if len(wires) == 1:
            pending, touched = len(out) - 1, set()
        else:
            touched.update(wires)
    return out


def _superoperator(op) -> Array:
    if isinstance(op, AbstractChannel):
        return op.superoperator()
    u = op.matrix()
    return jnp.kron(u, u.conj())


def _superoperators(ops: list) -> list[Array]:
    """The superoperators of `ops`, those of one kind computed together (one vmapped call), so that the
    number of small operations grows with the number of kinds rather than of operations."""
    groups: dict = {}
    for i, op in enumerate(ops):
        leaves, treedef = jax.tree.flatten(op)
        arrays = all(eqx.is_array(x) for x in leaves)
        key = (treedef, tuple((x.shape, x.dtype) for x in leaves)) if arrays and leaves else i
        groups.setdefault(key, []).append((i, leaves, treedef))
    out = [None] * len(ops)
    for members in groups.values():
        if len(members) == 1:
            ((i, _, _),) = members
            out[i] = _superoperator(ops[i])
            continue
        treedef = members[0][2]
        stacked = [jnp.stack(xs) for xs in zip(*(m[1] for m in members), strict=True)]
        mats = jax.vmap(lambda *ls, t=treedef: _superoperator(jax.tree.unflatten(t, ls)))(*stacked)
        for r, (i, _, _) in enumerate(members):
            out[i] = mats[r]
    return out


# A one-wire superoperator's (out, out', in, in') axes among a two-wire block's (p, q, p', q' out; p, q,
# p', q' in) axes, times the identity on the block's other wire.
_EYE_Q = np.einsum("ac,bd->abcd", np.eye(2), np.eye(2)).reshape(1, 2, 1, 2, 1, 2, 1, 2)
_EYE_P = _EYE_Q.reshape(2, 1, 2, 1, 2, 1, 2, 1)


def _embedded(kind: str, s: Array) -> Array:
    """An operation's superoperator (`4 x 4` on one wire, `16 x 16` on two) as the matrix of its block: on
    the block's first wire, its second, on both in the block's order, or on both swapped. Broadcast
    products and transposes, which XLA fuses, rather than dots."""
    if kind == "first":
        return (s.reshape(2, 1, 2, 1, 2, 1, 2, 1) * _EYE_Q.astype(s.dtype)).reshape(16, 16)
    if kind == "second":
        return (s.reshape(1, 2, 1, 2, 1, 2, 1, 2) * _EYE_P.astype(s.dtype)).reshape(16, 16)
    if kind == "same":
        return s
    return s.reshape((2,) * 8).transpose(1, 0, 3, 2, 5, 4, 7, 6).reshape(16, 16)


def _kind(op_wires: tuple[int, ...], wires: tuple[int, ...]) -> str:
    if len(wires) == 1 or op_wires == wires:
        return "same"
    if len(op_wires) == 2:
        return "swapped"
    return "first" if op_wires[0] == wires[0] else "second"


def _grouped(ops: list, n: int) -> list:
    """A run of gates and channels on one or two wires each, as `SuperBlock`s: one pass over the density
    matrix per block, where a gate is two (ket and bra) and a channel one. A block of a single operation,
    or of diagonal gates only, keeps that structure instead (`_single`)."""
    out, dense = [], []
    for wires, members in _blocks(ops):
        diagonal = all(isinstance(m, AbstractGate) and m.diagonal() is not None for m in members)
        if len(members) == 1 or diagonal:
            out += [x for m in members for x in _single(m, n)]
        else:
            out.append((wires, members))
            dense.append(len(out) - 1)
    if not dense:
        return out
    flat = iter(_superoperators([m for i in dense for m in out[i][1]]))
    supers = {i: [next(flat) for _ in out[i][1]] for i in dense}
    for i in dense:
        wires, members = out[i]
        acc = None
        for op, x in zip(members, supers[i], strict=True):
            m = _embedded(_kind(op.wires, wires), x.astype(complex_dtype()))
            acc = m if acc is None else jnp.matmul(m, acc, precision=EXACT)  # later operations on the left
        out[i] = SuperBlock(acc, wires + tuple(w + n for w in wires))
    return out


def doubled(ops, n: int) -> list:
    """`ops` (gates, channels, `Repeat` blocks of them) as operations on the `2n`-wire vectorised density
    matrix: runs of operations on one or two wires grouped into superoperator blocks (`_grouped`), the
    rest one by one (`_single`)."""
    out, run_ = [], []
    for op in ops:
        if _groupable(op):
            run_.append(op)
            continue
        out += _grouped(run_, n)
        run_ = []
        if isinstance(op, Repeat):
            layers = eqx.filter_vmap(lambda b: Circuit(doubled(b.ops, n), 2 * n), axis_size=op.length)
            body = layers(op.body)
            out.append(Repeat(body, op.length))
        elif isinstance(op, (AbstractGate, AbstractChannel)):
            out += _single(op, n)
        else:  # pragma: no cover  (the backend refuses control flow before)
            raise AssertionError(op)
    return out + _grouped(run_, n)
