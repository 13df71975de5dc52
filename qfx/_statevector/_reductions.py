"""Reductions of a final state: Pauli-word expectations, observables applied, marginals, sampling."""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .. import _memory
from .._custom_types import EXACT, real_dtype
from .._memory import SEQUENTIAL_BYTES
from .._observables import LinearCombination, PauliWord, Word
from ._kernels import _gather, apply_matrix, apply_pauli_word

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
        # Consecutive (the windows of Pauli sums): a reshape, no transpose (slower here: README.md).
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
    make XLA run the whole program over its thread pool, which costs more than the kernels of states this
    small (see README.md). On larger states the stored table compiled faster."""
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
    if words and not _memory.fits_a_third_state(state.size):
        return _chunked_expvals(state, words, n)  # a third state (a product, a marginal) would not fit
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


# The amplitudes `_chunked_expvals` reads at a time (the low wires of a basis index).
_CHUNK_WIRES = 10


def _chunked_expvals(state: Array, words: tuple[Word, ...], n: int) -> Array:
    """`pauli_expvals` reading the state a chunk of `2**_CHUNK_WIRES` amplitudes at a time, for states
    of which a third copy would not fit: where the marginals and flipped products of `pauli_expvals` take
    up to a state of temporaries, this takes a chunk.

    One word per step of an outer `lax.scan`, one chunk per step of an inner one (compiled once, whatever
    the number of words). Chunk `j`, the amplitudes whose high bits are `j`, meets the chunk `j ^ f` of the
    word's flips on the high bits, gathered by the flips on the low ones: `P|b> = i**ny
    (-1)**parity(b & signs) |b ^ flips>` as in `_word_image`. The chunks' sums (exact to float32
    rounding over `2**_CHUNK_WIRES` terms) are then added in stages (`_staged_sum`)."""
    c = min(_CHUNK_WIRES, n)
    high = n - c
    t = state.reshape(2**high, 2**c)
    flips, signs, phases = _word_masks(words, n, state.dtype)
    low = (1 << c) - 1
    local = jax.lax.iota(jnp.int32, 2**c)

    def word(_, mask):
        flip, sign, phase = mask

        def chunk(_, j):
            source = j ^ (flip >> c)
            inner = local ^ (flip & low)
            image = jax.lax.dynamic_index_in_dim(t, source, keepdims=False)[inner]
            count = jax.lax.population_count
            odd = (count(source & (sign >> c)) + count(inner & sign)) & 1
            image = image * jnp.where(odd == 1, -phase, phase)
            row = jax.lax.dynamic_index_in_dim(t, j, keepdims=False)
            return None, jnp.sum(jnp.real(row) * jnp.real(image) + jnp.imag(row) * jnp.imag(image))

        return None, _staged_sum(jax.lax.scan(chunk, None, jnp.arange(2**high, dtype=jnp.int32))[1], 0)

    masks = (jnp.asarray(flips), jnp.asarray(signs), jnp.asarray(phases))
    return jax.lax.scan(word, None, masks)[1].astype(real_dtype())


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
