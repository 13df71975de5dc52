"""Gate fusion: a pure circuit -> circuit transformation applied before simulation.

Runs of gates on at most two wires are multiplied into one dense matrix, so the state is read and written
once per fused block instead of once per gate. The pass works on static structure only (wires and gate
kinds), so it runs at trace time and every compilation of one circuit structure fuses the same way; the
fused matrices are JAX functions of the gates' leaves, so gradients flow back to the original parameters.

Policy, greedy in circuit order (as in qsim's fuser):
- a one-qubit gate joins the latest block on its wire when that block is dense (fusible);
- a dense two-qubit gate joins the latest block when that block acts on the same two wires, and otherwise
  starts a block that absorbs the open one-qubit blocks on its wires;
- gates with cheap structure (diagonal, permutation, controlled) on two wires stay on their own, where they
  cost one cheap pass and a dense 4x4 costs more; with `absorb_below` (off by default, see
  `ABSORB_STRUCTURED_MAX_WIRES`) they are absorbed too on states of at most that many qubits;
- wider gates are never fused; they end the blocks on their wires.
A block holding a single gate is returned as that gate, so its fast path is kept. Then consecutive
diagonal gates are multiplied into one diagonal over their wires (`merge_diagonals`) and runs of CNOT, SWAP
and X into one permutation (`merge_permutations`).
"""

import dataclasses
import functools
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .. import _memory
from .._custom_types import complex_dtype
from .._gates import AbstractGate, AbstractOperation

# Structured two-qubit gates (CNOT, CZ, SWAP, controlled rotations) are absorbed into dense blocks on
# states of at most this many qubits: none. Absorbing them once won at n = 4 and lost from n = 5 on;
# since one-qubit gates on different wires are paired (`pair_one_qubit`) it loses at n <= 4 too, where
# the transpose of the block products' gather is a scatter into a zero-filled buffer, and not absorbing
# compiles faster. One circuit of controlled rotations lost on 4 wires and gained on 2. (Measurements:
# README.md.)
ABSORB_STRUCTURED_MAX_WIRES = 0


class _DerivedGate(AbstractGate):
    """A gate that fusion derives from others, not built by users: its wires are a static `_wires` field
    of the subclass, and it has no shift rule of its own."""

    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return self._wires


class FusedGate(_DerivedGate):
    """A dense matrix standing for a product of gates; produced by fusion, not built by users."""

    U: Array
    _wires: tuple[int, ...] = eqx.field(static=True)

    def matrix(self):
        return self.U

    def adjoint(self):
        return FusedGate(self.U.conj().T, self._wires)


# On states of at most this many qubits, consecutive dense one-qubit gates on two different wires are
# applied in one pass when nothing differentiates them (`PairedGate`; see `pair_one_qubit`). Larger states
# were not measured: there a pass is bound by memory rather than by the kernel's overhead.
PAIR_MAX_WIRES = 8


class PairedGate(_DerivedGate):
    """Two dense one-qubit gates on different wires, `A` on `wires[0]` and `B` on `wires[1]`; produced by
    `pair_one_qubit`, not built by users.

    Evaluated, it is one pass with the 4x4 `kron(A, B)` instead of two passes (`_kernels.apply_paired`).
    Differentiated, its JVP applies `A` and then `B` as two gates, so derivatives (and the reverse pass
    that XLA derives from them) cost exactly what two gates cost: the cotangent of a 4x4 is a 16-entry
    reduction over the state, twice the two 4-entry ones.
    """

    A: Array
    B: Array
    _wires: tuple[int, int] = eqx.field(static=True)

    def matrix(self):
        return jnp.kron(self.A, self.B)

    def adjoint(self):
        return PairedGate(self.A.conj().T, self.B.conj().T, self._wires)


class KronLayer:
    """A run of dense one-qubit gates on distinct wires (they commute), covering at least half the wires;
    made by `kron_layers` inside `_pipeline.run`, applied by `_kronlayer.apply_kron_layer`: gate by gate when
    evaluated, and differentiated as a few matrix products, one per group of `sizes` consecutive wires
    (the Kronecker product of the group's matrices; identity on wires without a gate). A plain object that
    lives only inside a trace, like `_staircase.Staircase`."""

    def __init__(self, gates: list, sizes: tuple[int, ...]):
        self.gates, self.sizes = gates, sizes


# Wires per matrix product of a `KronLayer` (a 2**KRON_GROUP square matrix) and the smallest state that
# gets them. Differentiated as products, a layer compiles to far fewer kernels (library calls rather than
# fused loops, see `_kronlayer._kron_layer`), so the first call is shorter, and from 10 qubits on the
# steady state is faster too; at 9 it was slower. Groups of 3 compile and run about alike, of 5 run
# slower, of 2 give much slower forwards. Evaluation alone keeps the elementwise passes, which are faster
# forwards than the products. (Measurements: README.md.)
KRON_GROUP = 4
KRON_MIN_WIRES = 10


def kron_layers(ops: list, n: int) -> list:
    """`ops` with each maximal run of dense one-qubit gates on distinct wires that covers at least half
    of the `n` wires grouped as one `KronLayer`, on states of at least `KRON_MIN_WIRES` qubits. A static,
    trace-time transformation; the gates of a run commute, so nothing changes order."""
    if n < KRON_MIN_WIRES:
        return list(ops)
    sizes = (KRON_GROUP,) * (n // KRON_GROUP) + ((n % KRON_GROUP,) if n % KRON_GROUP else ())
    out, i = [], 0
    while i < len(ops):
        run: dict[int, AbstractGate] = {}
        j = i
        while j < len(ops) and _dense_one_qubit(ops[j]) and ops[j].wires[0] not in run:
            run[ops[j].wires[0]] = ops[j]
            j += 1
        if 2 * len(run) >= n:
            out.append(KronLayer(list(run.values()), sizes))
        else:
            out += ops[i : max(j, i + 1)]
        i = max(j, i + 1)
    return out


def _dense_one_qubit(op) -> bool:
    return (
        isinstance(op, AbstractGate)
        and not isinstance(op, (Permutation, PairedGate))
        and len(op.wires) == 1
        and not _structured(op)
    )


def pair_one_qubit(ops: list) -> list:
    """`ops` with each two consecutive dense one-qubit gates on different wires as one `PairedGate` (they
    commute, so the pair is exact). Where it pays is the caller's choice: `_pipeline.run` on states of at
    most `PAIR_MAX_WIRES` qubits, the adjoint's walk on large states (`_walk.py`).

    For `run`, a pair is one pass over the state instead of two, which speeds up forward passes;
    value_and_grad is unchanged, as the JVP runs two gates (see `PairedGate`). Pairing the matrices
    themselves, gradients included, made gradients slower. (Measurements: README.md.)
    """
    out, i = [], 0
    while i < len(ops):
        a = ops[i]
        b = ops[i + 1] if i + 1 < len(ops) else None
        if _dense_one_qubit(a) and _dense_one_qubit(b) and a.wires != b.wires:
            out.append(PairedGate(a.matrix(), b.matrix(), a.wires + b.wires))
            i += 2
        else:
            out.append(a)
            i += 1
    return out


# A run of at least this many consecutive permutation gates (CNOT, SWAP, X) on a state of at least this
# many qubits is applied as one gather (`Permutation`): one pass over the state instead of one per gate.
# From 8 qubits the one gather also beats the staircase's loop steps; at 12 qubits it is about a wash, and
# at 6, where the ladder is unrolled, mixed. (Measurements: README.md.) Gather indices are int32, hence at
# most 30 qubits.
PERMUTATION_MIN_RUN = 4
PERMUTATION_MIN_WIRES = 8
_PERMUTATION_MAX_WIRES = 30


def _affine(perm: tuple[int, ...]) -> bool:
    """True when the basis permutation is affine over GF(2): perm[s ^ t] == perm[s] ^ perm[t] ^ perm[0]."""
    size = len(perm)
    return all(perm[s ^ t] == perm[s] ^ perm[t] ^ perm[0] for s in range(size) for t in range(size))


def _gather_step(index: np.ndarray, wires: tuple[int, ...], perm: tuple[int, ...], n: int) -> np.ndarray:
    """`index` with each entry's bits on `wires` (gate order) replaced as the gate's `perm` reads them."""
    k = len(wires)
    shifts = [n - 1 - w for w in wires]
    sub = sum(((index >> p) & 1) << (k - 1 - j) for j, p in enumerate(shifts))
    new = np.asarray(perm, dtype=index.dtype)[sub]
    cleared = index & ~sum(1 << p for p in shifts)
    return cleared | sum(((new >> (k - 1 - j)) & 1) << p for j, p in enumerate(shifts))


class Permutation(AbstractGate):
    """A run of affine permutation gates (CNOT, SWAP, X) as one basis permutation; produced by fusion.

    The run maps basis state |x> to |A x ^ b> over GF(2), so the state after it is `out[y] = in[g(y)]` with
    g affine too. It is applied as one gather (`_kernels.apply_permutation_run`), whose index is
    `g(y) = high[y >> m] ^ low[y & (2**m - 1)]`: two tables of about 2**(n/2) entries each, computed at
    trace time, instead of an index per amplitude. One gather replaces a pass per gate, forwards and in
    reverse mode (measurements: README.md).
    """

    steps: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return tuple(sorted({w for wires, _ in self.steps for w in wires}))

    def matrix(self):
        raise NotImplementedError("Permutation is applied by a gather; it has no dense matrix.")

    def adjoint(self):
        inverse = [(wires, tuple(int(i) for i in np.argsort(perm))) for wires, perm in reversed(self.steps)]
        return Permutation(tuple(inverse))

    def tables(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The `(high, low)` tables of the gather index on `n` wires (see the class docstring)."""
        return _tables(self.steps, n)


@functools.lru_cache(maxsize=256)
def _tables(steps, n: int) -> tuple[np.ndarray, np.ndarray]:
    def g(index):  # out[y] = in[g(y)]: the last gate's substitution first
        for wires, perm in reversed(steps):
            index = _gather_step(index, wires, perm, n)
        return index

    m = n // 2
    high = g(np.arange(2 ** (n - m), dtype=np.int64) << m)
    low = g(np.arange(2**m, dtype=np.int64)) ^ g(np.zeros(1, dtype=np.int64))
    return high.astype(np.int32), low.astype(np.int32)


def _permutes(op) -> bool:
    """True for fixed gates that permute the basis affinely without phases (CNOT, SWAP, X)."""
    if not isinstance(op, AbstractGate) or jax.tree.leaves(op) or len(op.wires) > 3:
        return False
    perm = op.permutation()
    return perm is not None and perm[1] is None and _affine(tuple(perm[0]))


def merge_permutations(ops: list, n: int) -> list:
    """`ops` with each run of at least `PERMUTATION_MIN_RUN` consecutive affine permutation gates replaced
    by one `Permutation`, on states of at least `PERMUTATION_MIN_WIRES` qubits and of which a third copy
    fits (the gather's index table and output come on top of the state: without them, the gates alone take
    two states)."""
    if not PERMUTATION_MIN_WIRES <= n <= _PERMUTATION_MAX_WIRES or not _memory.fits_a_third_state(2**n):
        return list(ops)
    out, run = [], []

    def flush():
        if len(run) >= PERMUTATION_MIN_RUN:
            out.append(Permutation(tuple((g.wires, tuple(g.permutation()[0])) for g in run)))
        else:
            out.extend(run)
        run.clear()

    for op in ops:
        if _permutes(op):
            run.append(op)
            continue
        flush()
        out.append(op)
    flush()
    return out


def computed_once(x: Array) -> Array:
    """`x`, computed in its own kernel rather than inside the loop of each elementwise use of it.

    XLA's CPU fusion pulls the scalar work that makes a parameterised diagonal (`exp(-i theta / 2)`: a
    sine and a cosine per entry) into the loop that multiplies a state (or a fused diagonal) by its
    broadcast, and so redoes it for every amplitude: a diagonal gate then took many times a copy of the state
    (`benchmarks/bandwidth.py`). A sum over a stacked zero is a reduction, which that fusion does not merge
    into an elementwise consumer: about one copy's time (measurements: README.md). Constants (CZ, S, T)
    fold as before.
    """
    return jnp.sum(jnp.stack([x, jnp.zeros_like(x)]), axis=0)


# Consecutive diagonal gates are multiplied into one diagonal over the union of their wires while that
# union has at most this many wires (a `2**k` vector, computed from the gates' leaves). Applied one by one,
# XLA fused a run of them into one loop whose broadcasts over different wires cost far more than a pass;
# merged, the run is one pass (measurements on QAOA layers: README.md).
DIAGONAL_MAX_WIRES = 8


class DiagonalGate(_DerivedGate):
    """A run of diagonal gates as one diagonal `D` over `_wires` (ascending); produced by fusion."""

    D: Array
    _wires: tuple[int, ...] = eqx.field(static=True)

    def matrix(self):
        return jnp.diag(self.D)

    def diagonal(self):
        return self.D

    def adjoint(self):
        return DiagonalGate(self.D.conj(), self._wires)


def _diagonal_product(run: list, wires: tuple[int, ...], dtype) -> Array:
    """The product of the diagonals of `run`, each broadcast onto `wires` (ascending), as a flat vector."""
    k = len(wires)
    out = jnp.ones((2,) * k, dtype)
    for g in run:
        d = computed_once(jnp.asarray(g.diagonal(), dtype)).reshape((2,) * len(g.wires))
        order = sorted(range(len(g.wires)), key=lambda i: g.wires[i])
        d = d.transpose(order)  # axes in ascending wire order
        shape = [2 if w in g.wires else 1 for w in wires]
        out = out * d.reshape(shape)
    return out.reshape(-1)


def merge_diagonals(ops: list) -> list:
    """`ops` with each run of consecutive diagonal gates whose wires together number at most
    `DIAGONAL_MAX_WIRES` replaced by one `DiagonalGate`: one pass over the state instead of one per gate."""
    out, run, union = [], [], set()

    def flush():
        if len(run) >= 2:
            wires = tuple(sorted(union))
            out.append(DiagonalGate(_diagonal_product(run, wires, complex_dtype()), wires))
        else:
            out.extend(run)
        run.clear()
        union.clear()

    for op in ops:
        if isinstance(op, AbstractGate) and op.diagonal() is not None:
            if len(union | set(op.wires)) > DIAGONAL_MAX_WIRES:
                flush()
            run.append(op)
            union.update(op.wires)
            continue
        flush()
        out.append(op)
    flush()
    return out


def _bmm(a: Array, b: Array) -> Array:
    """Batched small matrix products `a[i] @ b[i]`.

    Elementwise products and a sum, which XLA fuses with the neighbouring small ops, rather than a dot
    kernel per product: each separate kernel adds to compile time.
    """
    return jnp.sum(a[:, :, :, None] * b[:, None, :, :], axis=2)


def batchable(gate: AbstractGate) -> bool:
    """True for gates whose matrix depends only on their type and array leaves (not on static fields)."""
    for f in dataclasses.fields(gate):
        static = bool(f.metadata.get("static", False))
        if (f.name == "_wires") != static or (not static and not eqx.is_array(getattr(gate, f.name))):
            return False
    return True


def _matrices(gates: list[AbstractGate]) -> tuple[dict[int, Array], list[int]]:
    """The matrices of `gates`, stacked by width: `stacks[k][rows[i]]` is gate i's `(2**k, 2**k)` matrix.

    Gates of one kind are computed together (one vmapped `matrix()`), so the number of small operations,
    and so the compile time, grows with the number of gate kinds rather than the number of gates.
    """
    groups: dict = {}
    for i, g in enumerate(gates):
        leaves, treedef = jax.tree.flatten(g)
        key = (type(g), len(g.wires), tuple((x.shape, x.dtype) for x in leaves)) if batchable(g) else i
        groups.setdefault(key, []).append((i, leaves, treedef))
    parts: dict[int, list[Array]] = {1: [], 2: []}
    rows = [0] * len(gates)
    for members in groups.values():
        i0, leaves0, treedef0 = members[0]
        k = len(gates[i0].wires)
        if not leaves0:
            m = jnp.broadcast_to(gates[i0].matrix(), (len(members), 2**k, 2**k))
        else:
            stacked = [jnp.stack([m[1][j] for m in members]) for j in range(len(leaves0))]
            m = jax.vmap(lambda *ls, t=treedef0: jax.tree.unflatten(t, ls).matrix())(*stacked)
        offset = sum(x.shape[0] for x in parts[k])
        for r, (i, _, _) in enumerate(members):
            rows[i] = offset + r
        parts[k].append(m)
    return {k: jnp.concatenate(v) for k, v in parts.items() if v}, rows


def _products(blocks: list, dtype) -> list[Array]:
    """The product matrix of each block (`(wires, gates)` pairs of equal width), all blocks at once."""
    gates = [g for _, gs in blocks for g in gs]
    stacks, rows = _matrices(gates)
    width = len(blocks[0][0])
    eye = jnp.eye(2**width, dtype=dtype)[None]
    if width == 1:
        factors, offsets = jnp.concatenate([eye, stacks[1]]), {1: 1}
    else:
        pieces, offsets, at = [eye], {}, 1
        if 1 in stacks:
            m, i2 = stacks[1], jnp.eye(2, dtype=dtype)
            first = (m[:, :, None, :, None] * i2[None, None, :, None, :]).reshape(-1, 4, 4)
            second = (i2[None, :, None, :, None] * m[:, None, :, None, :]).reshape(-1, 4, 4)
            pieces += [first, second]
            offsets["first"], offsets["second"] = at, at + m.shape[0]
            at += 2 * m.shape[0]
        if 2 in stacks:
            m = stacks[2]
            pieces += [m, m.reshape(-1, 2, 2, 2, 2).transpose(0, 2, 1, 4, 3).reshape(-1, 4, 4)]
            offsets["same"], offsets["swapped"] = at, at + m.shape[0]
        factors = jnp.concatenate(pieces)
    depth = max(len(gs) for _, gs in blocks)
    index = np.zeros((depth, len(blocks)), np.int32)  # padded with the identity (row 0)
    i = 0
    for b, (wires, gs) in enumerate(blocks):
        for p, g in enumerate(gs):
            if width == 1:
                index[p, b] = offsets[1] + rows[i]
            elif len(g.wires) == 1:
                index[p, b] = offsets["first" if g.wires[0] == wires[0] else "second"] + rows[i]
            else:
                index[p, b] = offsets["same" if g.wires == wires else "swapped"] + rows[i]
            i += 1
    chosen = factors[jnp.asarray(index)]  # (depth, blocks, d, d)
    out = chosen[0]
    for p in range(1, depth):
        out = _bmm(chosen[p], out)
    return [out[b] for b in range(len(blocks))]


def _structured(gate: AbstractGate) -> bool:
    return gate.diagonal() is not None or gate.permutation() is not None or gate.control() is not None


class _Block:
    __slots__ = ("wires", "gates", "fusible")

    def __init__(self, wires, gates, fusible):
        self.wires, self.gates, self.fusible = wires, gates, fusible


def fuse(ops: tuple[AbstractOperation, ...], n: int, absorb_below: int | None = None) -> list:
    """Fuses runs of gates in `ops` (a flat sequence; other operations are left in place as barriers).

    **Arguments:**

    - `ops`: the operations, in circuit order.
    - `n`: the number of wires of the state they act on (chooses the policy for structured gates).
    - `absorb_below`: structured two-qubit gates are absorbed into dense blocks when `n` is at most this
      (default `ABSORB_STRUCTURED_MAX_WIRES`).

    **Returns:** a list of operations with the same action on any state.
    """
    absorb = n <= (ABSORB_STRUCTURED_MAX_WIRES if absorb_below is None else absorb_below)
    blocks: list[_Block | None] = []
    latest: dict[int, int] = {}  # wire -> index in `blocks` of the latest block touching it

    def open_on(w: int) -> int | None:
        i = latest.get(w)
        return i if i is not None and blocks[i] is not None and blocks[i].fusible else None

    def push(block: _Block) -> None:
        blocks.append(block)
        for w in block.wires:
            latest[w] = len(blocks) - 1

    for op in ops:
        if not isinstance(op, AbstractGate) or len(op.wires) > 2:
            push(_Block(op.wires, [op], False))
            continue
        wires = op.wires
        if len(wires) == 1:
            i = open_on(wires[0])
            if i is not None:
                blocks[i].gates.append(op)
            else:
                push(_Block(wires, [op], True))
            continue
        dense = absorb or not _structured(op)
        i, j = open_on(wires[0]), open_on(wires[1])
        if dense and i is not None and i == j and set(blocks[i].wires) == set(wires):
            blocks[i].gates.append(op)
            continue
        absorbed = []
        if dense:
            for k in sorted({x for x in (i, j) if x is not None and len(blocks[x].wires) == 1}):
                absorbed += blocks[k].gates
                blocks[k] = None
        push(_Block(wires, absorbed + [op], dense))

    blocks = [b for b in blocks if b is not None]
    fused = {}
    for width in (1, 2):
        chosen = [b for b in blocks if len(b.gates) > 1 and len(b.wires) == width]
        if chosen:
            dtype = complex_dtype()
            mats = _products([(b.wires, b.gates) for b in chosen], dtype)
            fused.update({id(b): FusedGate(m, b.wires) for b, m in zip(chosen, mats, strict=True)})
    return merge_permutations(merge_diagonals([fused.get(id(b), b.gates[0]) for b in blocks]), n)
