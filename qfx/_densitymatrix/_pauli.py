"""The density matrix in the Pauli basis: `c_P = tr(P rho)` for every Pauli word `P`, real. A block of
gates and channels acts on it by its Pauli transfer matrix, also real: a quarter of the arithmetic of the
complex superoperator on half the memory. An exact Pauli expectation is one entry of `c`.

`c` is indexed by the word's Paulis as base-4 digits, wire 0 the most significant (I, X, Y, Z = 0, 1, 2,
3): wire `w`'s digit `p = 2x + y` sits where, in `rho`'s layout, its ket bit `x` and its bra bit `y`
would be side by side. A block on neighbouring wires then acts on contiguous digits, which needs no
transposition of `c`.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._circuit import Repeat
from .._custom_types import EXACT, complex_dtype, real_dtype
from .._observables import PauliWord
from .._scan import packed_scan
from .._statevector import apply_matrix


def _pauli_basis() -> tuple[np.ndarray, np.ndarray]:
    """`T` with `T[p, 2k + b] = P_p[b, k]` (`P_0..P_3` = I, X, Y, Z), so that `c_p = tr(P_p rho)` of a wire's
    `rho[k, b]` at (ket bit, bra bit) `(k, b)`; its inverse is `T^dagger / 2`. Pauli `p = 2x + y` comes
    out with its bit `x` where the ket bit was and `y` where the bra bit was."""
    paulis = np.array([[[1, 0], [0, 1]], [[0, 1], [1, 0]], [[0, -1j], [1j, 0]], [[1, 0], [0, -1]]])
    t = paulis.transpose(0, 2, 1).reshape(4, 4)
    return t, t.conj().T / 2


_T, _T_INV = _pauli_basis()


def _pair(t: np.ndarray) -> np.ndarray:
    """`t (x) t` on two wires in a block's axis order (`a`, `b`, `a + n`, `b + n`)."""
    t = t.reshape(2, 2, 2, 2)  # (x, y, k, b)
    return np.einsum("xykb,XYKB->xXyYkKbB", t, t).reshape(16, 16)


BASES = {1: (_T, _T_INV), 2: (_pair(_T), _pair(_T_INV))}


def in_pauli_basis(s: Array, k: int) -> Array:
    """A superoperator on `k` wires (in a block's axis order) as its Pauli transfer matrix: real, because
    every operation here maps Hermitian matrices to Hermitian matrices."""
    s = s.astype(complex_dtype())
    t, t_inv = (jnp.asarray(x, s.dtype) for x in BASES[k])
    r = jnp.matmul(t, jnp.matmul(s, t_inv, precision=EXACT), precision=EXACT)
    return jnp.real(r).astype(real_dtype())


def _interleaved(n: int) -> tuple[int, ...]:
    """`rho`'s `2n` axes (ket bits, then bra bits) in the order of `c`'s: ket and bra bit of each wire."""
    return tuple(a for w in range(n) for a in (w, w + n))


def to_pauli(x: Array, n: int) -> Array:
    """A flat density matrix `rho` (`4**n` entries, ket wires then bra wires) as its real Pauli
    coefficients `tr(P rho)` (see the module's docstring for their order)."""
    t = jnp.asarray(_T, x.dtype)
    for w in range(n):
        x = apply_matrix(x, t, (w, w + n), 2 * n)
    x = x.reshape((2,) * 2 * n).transpose(_interleaved(n)).reshape(-1)
    return jnp.real(x).astype(real_dtype())


def from_pauli(c: Array, n: int) -> Array:
    """The flat density matrix of Pauli coefficients `c` (`to_pauli`'s inverse)."""
    x = c.astype(complex_dtype()).reshape((2,) * 2 * n).transpose(np.argsort(_interleaved(n))).reshape(-1)
    t_inv = jnp.asarray(_T_INV, x.dtype)
    for w in range(n):
        x = apply_matrix(x, t_inv, (w, w + n), 2 * n)
    return x


def pauli_zero_state(n: int) -> Array:
    """`|0...0><0...0|` in the Pauli basis: `tr(P rho) = 1` for the words of `I` and `Z` only, those whose
    ket and bra bits agree on every wire: the flattened identity, its axes in `c`'s order."""
    rows, cols = (jax.lax.broadcasted_iota(jnp.int32, (2**n, 2**n), axis) for axis in (0, 1))
    eye = (rows == cols).astype(real_dtype())
    return eye.reshape((2,) * 2 * n).transpose(_interleaved(n)).reshape(-1)


def in_block_order(r: Array, wires: tuple[int, ...]) -> tuple[Array, tuple[int, ...]]:
    """A block's transfer matrix from `in_pauli_basis` (leading axes batch; two wires: (`x_a`, `x_b`,
    `y_a`, `y_b`) out and in) on the Pauli digits of its wires, in ascending order, for `apply_transfer`."""
    if len(wires) == 1:
        return r, wires
    lead = r.ndim - 2
    digits = (0, 2, 1, 3, 4, 6, 5, 7)  # (x_a, y_a, x_b, y_b): the digits p_a, p_b
    if wires[0] > wires[1]:
        digits, wires = (1, 3, 0, 2, 5, 7, 4, 6), wires[::-1]  # (x_b, y_b, x_a, y_a)
    perm = tuple(range(lead)) + tuple(lead + d for d in digits)
    return r.reshape(r.shape[:-2] + (2,) * 8).transpose(perm).reshape(r.shape), wires


def apply_transfer(c: Array, r: Array, wires: tuple[int, ...], n: int) -> Array:
    """A transfer matrix on the Pauli digits of one wire or two ascending ones (`in_block_order`): on
    neighbouring digits a product with a `(4**a, 4**k, rest)` view of `c`, no transposition of it."""
    a = wires[0]
    if len(wires) == 1 or wires[1] == a + 1:
        view = c.reshape(4**a, r.shape[0], -1)
        return jnp.einsum("ij,ajb->aib", r, view, precision=EXACT).reshape(c.shape)
    view = c.reshape((4,) * n)
    out = jnp.tensordot(r.reshape(4, 4, 4, 4), view, axes=((2, 3), wires), precision=EXACT)
    return jnp.moveaxis(out, (0, 1), wires).reshape(c.shape)


def run_pauli(ops, state: Array, n: int) -> Array:
    """Applies the blocks of `doubled(..., pauli=True)` (`SuperBlock`s of transfer matrices on Pauli
    digits, and `Repeat` blocks of them, as checkpointed scans) to Pauli coefficients."""
    for op in ops:
        if isinstance(op, Repeat):
            op.check_layers()

            def layer(s, body):
                return run_pauli(body.ops, s, n), None

            state, _ = packed_scan(layer, state, op.body, length=op.length, checkpoint=True)
        else:
            state = apply_transfer(state, op.S, op.wires, n)
    return state


_LABELS = {"X": 1, "Y": 2, "Z": 3}


def _index(word: PauliWord, n: int) -> int:
    """The flat index of `c_P` for the Pauli word `P` (identity on the wires it does not name)."""
    return sum(_LABELS[letter] * 4 ** (n - 1 - w) for w, letter in word.word)


def pauli_expvals(c: Array, lcs, n: int) -> Array | None:
    """The exact expectations of observables (`LinearCombination`s) made of Pauli words only, read from the
    Pauli coefficients `c` (one entry per word); None when a term is not a Pauli word."""
    if not all(isinstance(t, PauliWord) for lc in lcs for t in lc.terms):
        return None
    out = []
    for lc in lcs:
        if not lc.terms:
            out.append(jnp.zeros((), real_dtype()))
            continue
        values = c[np.asarray([_index(t, n) for t in lc.terms])]
        out.append(jnp.dot(lc.coeffs.astype(real_dtype()), values, precision=EXACT))
    return jnp.stack(out)
