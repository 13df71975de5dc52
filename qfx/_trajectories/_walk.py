"""One trajectory of a noisy circuit: gates on a pure state, and at each channel one Kraus operator drawn
with its Born probability, with the log-probability of the choices kept for the score-function term."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._channels import AbstractChannel
from .._circuit import Circuit, Repeat
from .._custom_types import EXACT, complex_dtype, real_dtype
from .._gates import CNOT, CZ, SWAP, Hadamard, PauliX, PauliY, PauliZ, QubitUnitary, S
from .._observables import pauli_word_matrix
from .._statevector import apply_matrix, reduced_density_matrix, run


def _branch(psi: Array, channel: AbstractChannel, n: int, key) -> tuple[Array, Array]:
    """One Kraus branch of `channel` drawn with probability `p_i = w_i ||M_i psi||**2`: the normalised
    state after it, and `log p_i` (differentiable in the strengths and, through `psi`, the gates)."""
    w, m = channel.weighted_kraus()
    w = w.astype(real_dtype())
    if channel.mixture:  # unitary M_i: the probabilities are the weights, whatever the state
        norms = jnp.ones_like(w)
    else:  # ||M_i psi||**2 = tr(M_i^dagger M_i rho) on the channel's wires
        rho = reduced_density_matrix(psi, channel.wires, n)
        norms = jnp.real(jnp.einsum("aji,ajk,ki->a", m.conj(), m, rho, precision=EXACT)).astype(real_dtype())
    p = w * norms
    logits = jnp.log(jnp.maximum(jax.lax.stop_gradient(p), 0))  # -inf: never drawn
    i = jax.random.categorical(key, logits)
    out = apply_matrix(psi, m[i], channel.wires, n)
    if not channel.mixture:
        out = out / jnp.sqrt(norms[i]).astype(out.dtype)
    return out, jnp.log(p[i])


def trajectory(ops, psi: Array, n: int, key) -> tuple[Array, Array]:
    """Runs `ops` (gates, channels, `Repeat` blocks) on `psi` along one trajectory drawn with `key`.

    **Returns:** the final normalised state and the log-probability of the branches taken."""
    logp = jnp.zeros((), real_dtype())
    run_: list = []
    for op in ops:
        if not isinstance(op, (AbstractChannel, Repeat)):
            run_.append(op)
            continue
        psi, run_ = (run(run_, psi, n) if run_ else psi), []
        if isinstance(op, AbstractChannel):
            key, sub = jax.random.split(key)
            psi, lp = _branch(psi, op, n, sub)
            logp = logp + lp
            continue
        op.check_layers()

        @jax.checkpoint
        def layer(carry, body):
            psi, k, lp = carry
            k, sub = jax.random.split(k)
            psi, more = trajectory(body.ops, psi, n, sub)
            return (psi, k, lp + more), None

        key, sub = jax.random.split(key)
        (psi, _, logp), _ = jax.lax.scan(layer, (psi, sub, logp), op.body, length=op.length)
    if run_:
        psi = run(run_, psi, n)
    return psi, logp


def only_pauli_channels(ops) -> bool:
    """Whether every channel in `ops` (`Repeat` bodies included) applies Pauli words with probabilities
    that do not depend on the state (`pauli_branches()`): then `drawn` can draw every branch first."""
    for op in ops:
        if isinstance(op, AbstractChannel) and op.pauli_branches() is None:
            return False
        if isinstance(op, Repeat) and not only_pauli_channels(op.body.ops):
            return False
    return True


def _has_channel(ops) -> bool:
    return any(
        isinstance(op, AbstractChannel) or (isinstance(op, Repeat) and _has_channel(op.body.ops))
        for op in ops
    )


# How each Clifford gate G moves a Pauli frame P = X^x Z^z (bits per wire) past it: G P = (G P G^dagger) G,
# with G P G^dagger again a Pauli word (up to a phase, which is global on a pure state). Each rule takes the
# gate's wires' (x, z) bits and returns them after G.
def _cnot(c, t):
    (xc, zc), (xt, zt) = c, t
    return [(xc, zc ^ zt), (xt ^ xc, zt)]


def _cz(a, b):
    (xa, za), (xb, zb) = a, b
    return [(xa, za ^ xb), (xb, zb ^ xa)]


_CLIFFORD = {
    PauliX: lambda a: [a],
    PauliY: lambda a: [a],
    PauliZ: lambda a: [a],
    Hadamard: lambda a: [(a[1], a[0])],
    S: lambda a: [(a[0], a[1] ^ a[0])],
    CNOT: _cnot,
    CZ: _cz,
    SWAP: lambda a, b: [b, a],
}

# The letter whose bits are (x, z), at index 2x + z: X^x Z^z up to a phase (global on a pure state).
_LETTERS = "IZXY"
_PAULIS = np.stack([pauli_word_matrix(letter) for letter in _LETTERS])
_BITS = {letter: divmod(i, 2) for i, letter in enumerate(_LETTERS)}


class _Frame:
    """The Pauli word drawn so far and not yet applied, tracked statically: each wire's bits `(x, z)` are
    sums mod 2 of the drawn bits (the channels' words), kept as 0/1 vectors over them, for the wires that
    may hold a non-identity letter. `drawn` moves it forward past Clifford gates (xors of those vectors,
    at trace time) and applies it before any other gate: `flush` leaves a slot in the operation list that
    `fill` makes a `QubitUnitary` gate, all of them from one product of the vectors with the drawn bits."""

    def __init__(self, drawn_bits: int):
        self.size = drawn_bits
        self.bits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.slots: list[tuple[int, np.ndarray, np.ndarray]] = []

    def _zero(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(self.size, bool), np.zeros(self.size, bool)

    def absorb(self, wires, first: int) -> None:
        """Adds a drawn word: the bits of its letter on `wires[k]` are drawn bits `first + 2k` (x) and
        `first + 2k + 1` (z)."""
        for k, w in enumerate(wires):
            x, z = self.bits.get(w, self._zero())
            x, z = x.copy(), z.copy()
            x[first + 2 * k] ^= True
            z[first + 2 * k + 1] ^= True
            self.bits[w] = (x, z)

    def past(self, gate) -> bool:
        """Moves the frame past `gate` if it is a Clifford gate with a rule; False if not."""
        rule = _CLIFFORD.get(type(gate))
        if rule is None:
            return False
        if any(w in self.bits for w in gate.wires):
            after = rule(*(self.bits.get(w, self._zero()) for w in gate.wires))
            self.bits.update(zip(gate.wires, after, strict=True))
        return True

    def flush(self, wires=None) -> list:
        """Slots for the frame's letters on `wires` (all where None), which leave it."""
        wires = sorted(self.bits) if wires is None else [w for w in wires if w in self.bits]
        out = []
        for w in wires:
            out.append(len(self.slots))
            self.slots.append((w, *self.bits.pop(w)))
        return out

    def fill(self, ops: list, drawn_bits: Array | None) -> list:
        """`ops` with each slot replaced by the `QubitUnitary` of its letter, given the drawn bits."""
        if not self.slots:
            return ops
        paulis = _paulis(*self._values([(x, z) for _, x, z in self.slots], drawn_bits))
        gates = _on_wires(paulis, [w for w, _, _ in self.slots])
        return [gates[op] if isinstance(op, int) else op for op in ops]

    def tail(self, drawn_bits: Array | None) -> tuple[list[int], Array, Array]:
        """The wires the frame still holds letters on, and those letters' bits `(x, z)` (int32 arrays)."""
        wires = sorted(self.bits)
        if not wires:
            return [], jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.int32)
        return wires, *self._values([self.bits[w] for w in wires], drawn_bits)

    @staticmethod
    def _values(vectors, drawn_bits: Array) -> tuple[Array, Array]:
        x = jnp.asarray(np.stack([x for x, _ in vectors]).astype(np.int32))
        z = jnp.asarray(np.stack([z for _, z in vectors]).astype(np.int32))
        v = drawn_bits.astype(jnp.int32)
        return (x @ v) % 2, (z @ v) % 2


def _paulis(x: Array, z: Array) -> Array:
    """The matrices of the letters with bits `(x, z)`, one gather for all of them (constants: nothing to
    differentiate)."""
    return jnp.asarray(_PAULIS, complex_dtype())[2 * x + z]


def _on_wires(paulis: Array, wires) -> list:
    """`QubitUnitary(paulis[k], wires[k])` for each k: one-qubit gates."""
    return [QubitUnitary(paulis[k], (w,)) for k, w in enumerate(wires)]


def _draw_all(channels, noise: Array) -> tuple[list[int], Array, Array]:
    """One branch per channel, each with probability its weight. Channels alike but for their wires
    (`qfx.NoiseModel`'s insertions) are stacked and their weights computed in one vmapped call.

    **Returns:** `row`, each channel's row in the next two: the drawn branches' weights `w_i`
    (differentiable in the strengths), and the bits `(x, z)` of their Pauli words, shape
    `(channels, widest channel's wires, 2)` (unused wires 0)."""
    groups: dict = {}
    for j, c in enumerate(channels):
        alike = c.on(tuple(range(len(c.wires))))
        groups.setdefault(jax.tree.structure(alike), []).append((j, alike))
    members = [j for group in groups.values() for j, _ in group]
    row = [0] * len(channels)
    for r, j in enumerate(members):
        row[j] = r
    kraus = [
        jax.vmap(lambda c: c.weighted_kraus()[0])(jax.tree.map(lambda *x: jnp.stack(x), *(c for _, c in g)))
        for g in groups.values()
    ]
    widest = max(w.shape[1] for w in kraus)
    weights = jnp.concatenate([jnp.pad(w, ((0, 0), (0, widest - w.shape[1]))) for w in kraus])
    weights = weights.astype(real_dtype())  # padding: weight 0, never drawn
    gumbel = noise.reshape(weights.shape)
    index = jnp.argmax(jnp.log(jnp.maximum(jax.lax.stop_gradient(weights), 0)) + gumbel, axis=1)
    table = np.zeros((len(channels), widest, max(len(c.wires) for c in channels), 2), bool)
    for j, c in enumerate(channels):
        for b, word in enumerate(c.pauli_branches()):
            table[row[j], b, : len(word)] = [_BITS[letter] for letter in word]
    bits = jnp.take_along_axis(jnp.asarray(table), index[:, None, None, None], axis=1)[:, 0]
    weight = jnp.take_along_axis(weights, index[:, None], axis=1)[:, 0]
    return row, weight, bits


def _noise_size(ops) -> int:
    """How many Gumbel variates `drawn` takes for `ops`: a row as wide as the widest channel per channel,
    and each `Repeat` block's body's count per layer."""
    widths = [len(op.pauli_branches()) for op in ops if isinstance(op, AbstractChannel)]
    here = len(widths) * max(widths, default=0)
    return here + sum(op.length * _layer_noise(op) for op in ops if _noisy_block(op))


def _layer_noise(block: Repeat) -> int:
    """`_noise_size` of one layer of `block` (of any length, 0 included: read from the shapes)."""
    layer = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), block.body)
    return _noise_size(layer.ops)


def _noisy_block(op) -> bool:
    return isinstance(op, Repeat) and _has_channel(op.body.ops)


def drawn(ops, key, push: bool = True) -> tuple[list, Array]:
    """`ops` (whose channels are all Pauli channels: `only_pauli_channels`) with each channel's branch
    drawn with `key` (its probability `w_i` is its weight, whatever the state), and the log-probability of
    the draws.

    What remains is a circuit of gates, `QubitUnitary` gates where drawn Paulis act: the state-vector
    pipeline fuses them with the gates around them, and the adjoint walk can differentiate the circuit.
    Each drawn word joins a Pauli frame that moves past Clifford gates (`_CLIFFORD`: CNOT, CZ, SWAP, H,
    S, Paulis) unchanged and is applied just before the next other gate on its wires, so a CNOT ladder
    with noise after every CNOT stays a ladder. `Repeat` blocks stay blocks: the draws of their layers are
    stacked like their parameters (a row of noise per layer); the frame is applied before a block, and
    what a layer's frame holds at its end at the start of the next layer (fused into its first gates) or,
    for the last, after the block. `push=False` applies each branch where its channel stands instead."""
    # Every branch is drawn by the Gumbel-max trick (argmax(log w + g) is distributed as categorical(w))
    # from one array of noise: XLA takes a second or more to compile each `jax.random` call on the CPU.
    return _drawn(ops, jax.random.gumbel(key, (_noise_size(ops),), real_dtype()), push)


def _drawn(ops, noise: Array, push: bool, keep_tail: bool = False):
    """`drawn` from Gumbel noise. With `keep_tail`, the frame left at the end is not applied but
    returned, as `(wires, x, z)` (a `Repeat` body's: see `drawn`), after the ops and log-probability."""
    out, logp = [], jnp.zeros((), real_dtype())
    channels = [op for op in ops if isinstance(op, AbstractChannel)]
    used = len(channels) * max((len(c.pauli_branches()) for c in channels), default=0)
    bits = None
    if channels:
        row, weight, bits = _draw_all(channels, noise[:used])
        logp = logp + jnp.sum(jnp.log(weight))
        width = bits.shape[1]  # wires per row of `bits`
        bits = bits.reshape(-1)
    frame = _Frame(0 if bits is None else bits.size)
    drawn_here = 0
    for op in ops:
        if isinstance(op, AbstractChannel):
            j, drawn_here = row[drawn_here], drawn_here + 1
            frame.absorb(op.wires, 2 * width * j)
            if not push:  # each branch where its channel stands (the tests' reference)
                out += frame.flush(op.wires)
        elif _noisy_block(op):
            op.check_layers()
            size = _layer_noise(op)
            layers = noise[used : used + op.length * size].reshape(op.length, size)
            used += op.length * size

            tail_wires: list[int] = []

            def one(body, g, tail_wires=tail_wires):
                body_ops, lp, (wires, x, z) = _drawn(body.ops, g, push, keep_tail=True)
                tail_wires[:] = wires  # static: the same for every layer
                return Circuit(body_ops, num_wires=body.num_wires), lp, (x, z)

            body, lps, (x, z) = eqx.filter_vmap(one)(op.body, layers)
            logp = logp + jnp.sum(lps)
            out += frame.flush(op.wires)
            if tail_wires and op.length:
                # What a layer's frame still holds at its end is applied at the start of the next one, where
                # fusion merges it into that layer's first gates; the last layer's, after the block.
                start = _paulis(*(jnp.concatenate([jnp.zeros_like(b[:1]), b[:-1]]) for b in (x, z)))
                first = eqx.filter_vmap(_on_wires)(start, tail_wires)  # matrices stacked per layer
                body = Circuit(first + list(body.ops), num_wires=body.num_wires)
                out += [Repeat(body, length=op.length), *_on_wires(_paulis(x[-1], z[-1]), tail_wires)]
            else:
                out.append(Repeat(body, length=op.length))
        elif isinstance(op, Repeat):
            out += frame.flush(op.wires) + [op]
        elif frame.past(op):
            out.append(op)
        else:
            out += frame.flush(op.wires) + [op]
    if keep_tail:
        return frame.fill(out, bits), logp, frame.tail(bits)
    return frame.fill(out + frame.flush(), bits), logp


def score(logp: Array) -> Array:
    """1 in value, with derivative `d logp`: multiplied into a trajectory's value `f`, the derivative of the
    product is `df + f d logp`, the score-function estimator (see README.md)."""
    return jnp.exp(logp - jax.lax.stop_gradient(logp))
