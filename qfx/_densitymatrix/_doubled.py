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
from .._control import Cond, ForLoop, MidMeasure, WhileLoop
from .._custom_types import EXACT, complex_dtype, real_dtype
from .._gates import AbstractGate
from .._statevector import batchable
from ._pauli import BASES, in_block_order, in_pauli_basis


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
    linear. With `doubled(..., pauli=True)`, `S` is the block's Pauli transfer matrix instead (real, the
    same shape) on the Pauli digits of its wires (`w`, or `a < b`), for the coefficients of `_pauli.py`."""

    S: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return self._wires

    def matrix(self) -> Array:
        return self.S


def representable_in_pauli_basis(ops) -> bool:
    """Whether every gate and channel (in `Repeat` layers, branches and loop bodies too) acts on one or two
    wires: then each block is one real Pauli transfer matrix, and the whole circuit runs in the Pauli basis
    (with control flow, each record's density matrix: `MixedSimulator`)."""
    for op in ops:
        if isinstance(op, Repeat):  # one layer: a for_loop in the body builds from one layer's arguments
            inner = (op.layer(0) if op.length else op.body).ops
        elif isinstance(op, Cond):
            inner = [x for b in op.branches for x in b.ops]
        elif isinstance(op, WhileLoop):
            inner = op.body.ops
        elif isinstance(op, ForLoop):
            inner = op.skeleton()
        elif isinstance(op, MidMeasure):
            continue
        elif _groupable(op):
            continue
        else:
            return False
        if not representable_in_pauli_basis(inner):
            return False
    return True


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


def _superoperator(op, pauli: bool) -> Array:
    if isinstance(op, AbstractChannel):
        s = op.superoperator()
    else:
        u = op.matrix()
        s = jnp.kron(u, u.conj())
    return in_pauli_basis(s, len(op.wires)) if pauli else s.astype(complex_dtype())


def _constant(op, pauli: bool) -> np.ndarray:
    """`_superoperator` of an operation without leaves (a CNOT), in NumPy: a constant of the program."""
    with jax.ensure_compile_time_eval():
        if isinstance(op, AbstractChannel):
            s = np.asarray(op.superoperator())
        else:
            u = np.asarray(op.matrix())
            s = np.kron(u, u.conj())
    if not pauli:
        return s.astype(complex_dtype())
    t, t_inv = BASES[len(op.wires)]
    return np.real(t @ s @ t_inv).astype(real_dtype())


def _kind(op, i):
    """Operations of one kind (type and leaf shapes, on any wires) have their matrices computed together."""
    if not batchable(op):
        return i
    return type(op), len(op.wires), tuple((x.shape, x.dtype) for x in jax.tree.leaves(op))


def _position_matrices(groups: list[list[list]], pauli: bool) -> list[list]:
    """For each group of blocks of one structure (`_structure`; a block is its list of operations), the
    matrix of each position's operations: `(B, d, d)` for the group's `B` blocks, or one NumPy constant
    for an operation without leaves (a CNOT). The operations of one kind, in every group and position,
    are computed together in one vmapped call, ordered so that each (group, position) is a contiguous
    slice of it: the number of small operations grows with the number of kinds, not of operations."""
    kinds: dict = {}
    for g, blocks in enumerate(groups):
        for j, op in enumerate(blocks[0]):
            kinds.setdefault(_kind(op, (g, j)), []).append((g, j))
    mats: list[list] = [[None] * len(blocks[0]) for blocks in groups]
    for places in kinds.values():
        g0, j0 = places[0]
        op0 = groups[g0][0][j0]
        leaves0, treedef = jax.tree.flatten(op0)
        if not leaves0:
            for g, j in places:
                mats[g][j] = _constant(op0, pauli)
            continue
        ops = [block[j] for g, j in places for block in groups[g]]
        if len(ops) == 1:
            out = _superoperator(op0, pauli)[None]
        else:
            stacked = [jnp.stack(xs) for xs in zip(*(jax.tree.leaves(op) for op in ops), strict=True)]
            one = lambda *ls, t=treedef: _superoperator(jax.tree.unflatten(t, ls), pauli)  # noqa: E731
            out = jax.vmap(one)(*stacked)
        start = 0
        for g, j in places:
            mats[g][j] = out[start : start + len(groups[g])]
            start += len(groups[g])
    return mats


def _on_pair(a, b):
    """One-wire matrices `a` on a two-wire block's first wire and `b` on its second (either None: the
    identity there; leading axes batch) as the block's `16 x 16` matrix, on (`p`, `q`, `p'`, `q'`) out
    and in. A broadcast product, which XLA fuses, rather than a dot."""
    if a is None:
        a = np.eye(4, dtype=b.dtype)
    if b is None:
        b = np.eye(4, dtype=a.dtype)
    x = a.reshape(a.shape[:-2] + (2, 1, 2, 1, 2, 1, 2, 1)) * b.reshape(
        b.shape[:-2] + (1, 2, 1, 2, 1, 2, 1, 2)
    )
    return x.reshape(x.shape[:-8] + (16, 16))


def _swapped(m):
    """A two-wire matrix (leading axes batch) on its wires in the other order."""
    lead = m.ndim - 2
    perm = tuple(range(lead)) + tuple(lead + k for k in (1, 0, 3, 2, 5, 4, 7, 6))
    return m.reshape(m.shape[:-2] + (2,) * 8).transpose(perm).reshape(m.shape)


def _block_matrix(members: list, wires: tuple[int, ...], mats: list):
    """The product of a block's matrices (later operations on the left; leading axes batch). One-wire
    operations between two two-wire ones commute across the block's two wires, so each wire's run is
    multiplied as `4 x 4` first, and both runs enter the `16 x 16` chain as one factor."""

    def dot(x, y):
        if y is None:
            return x
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            return x @ y
        return jnp.matmul(x, y, precision=EXACT)

    if len(wires) == 1:
        acc = None
        for m in mats:
            acc = dot(m, acc)
        return acc
    acc, runs = None, {}
    for op, m in zip(members, mats, strict=True):
        if len(op.wires) == 1:
            runs[op.wires[0]] = dot(m, runs.get(op.wires[0]))
            continue
        if runs:
            acc = dot(_on_pair(runs.pop(wires[0], None), runs.pop(wires[1], None)), acc)
        acc = dot(m if op.wires == wires else _swapped(m), acc)
    if runs:
        acc = dot(_on_pair(runs.pop(wires[0], None), runs.pop(wires[1], None)), acc)
    return acc


def _structure(wires: tuple[int, ...], members: list) -> tuple:
    """Blocks of one structure (each member's kind and its wires' places in the block) have their
    matrices computed together, batched, whatever their wires."""
    return len(wires), tuple((_kind(op, id(op)), tuple(wires.index(w) for w in op.wires)) for op in members)


def _grouped(ops: list, n: int, pauli: bool) -> list:
    """A run of gates and channels on one or two wires each, as `SuperBlock`s: one pass over the density
    matrix per block, where a gate is two (ket and bra) and a channel one. A block of a single operation,
    or of diagonal gates only, keeps that structure instead (`_single`). With `pauli`, every block is a
    `SuperBlock` of its Pauli transfer matrix, structured or not. Blocks of one structure (`_structure`)
    are computed together."""
    out, like = [], {}
    for wires, members in _blocks(ops):
        diagonal = all(isinstance(m, AbstractGate) and m.diagonal() is not None for m in members)
        if not pauli and (len(members) == 1 or diagonal):
            out += [x for m in members for x in _single(m, n)]
        else:
            like.setdefault(_structure(wires, members), []).append(len(out))
            out.append((wires, members))
    groups = list(like.values())
    mats = _position_matrices([[out[i][1] for i in indices] for indices in groups], pauli)
    for indices, group_mats in zip(groups, mats, strict=True):
        wires, members = out[indices[0]]
        acc = _block_matrix(members, wires, group_mats)
        acc = jnp.broadcast_to(acc, (len(indices),) + acc.shape[-2:])
        for r, i in enumerate(indices):
            wires = out[i][0]
            if pauli:
                out[i] = SuperBlock(*in_block_order(acc[r], wires))
            else:
                out[i] = SuperBlock(acc[r], wires + tuple(w + n for w in wires))
    return out


def doubled(ops, n: int, pauli: bool = False) -> list:
    """`ops` (gates, channels, `Repeat` blocks of them) as operations on the `2n`-wire vectorised density
    matrix: runs of operations on one or two wires grouped into superoperator blocks (`_grouped`), the
    rest one by one (`_single`). With `pauli` (where `representable_in_pauli_basis`), every block is a
    `SuperBlock` of its real Pauli transfer matrix, for `run_pauli`."""
    out, run_ = [], []
    for op in ops:
        if _groupable(op):
            run_.append(op)
            continue
        out += _grouped(run_, n, pauli)
        run_ = []
        if isinstance(op, Repeat):
            layers = eqx.filter_vmap(lambda b: Circuit(doubled(b.ops, n, pauli), 2 * n), axis_size=op.length)
            body = layers(op.body)
            out.append(Repeat(body, op.length))
        elif isinstance(op, (AbstractGate, AbstractChannel)):
            out += _single(op, n)
        else:  # pragma: no cover  (the backend refuses control flow before)
            raise AssertionError(op)
    return out + _grouped(run_, n, pauli)
