"""The density matrix in the Pauli basis: `c_P = tr(P rho)` for every Pauli word `P`, real, held in the
`2n`-wire layout of `_doubled.py`. A block of gates and channels acts on it by its Pauli transfer matrix,
also real: a quarter of the arithmetic of the complex superoperator on half the memory. An exact Pauli
expectation is one entry of `c`.

Wire `w`'s Pauli `p = 2x + y` (I, X, Y, Z = 0, 1, 2, 3) keeps its bit `x` where the ket bit of `w` was
(wire `w`) and `y` where the bra bit was (wire `w + n`).
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
    `rho[k, b]` at (ket bit, bra bit) `(k, b)`; its inverse is `T^dagger / 2`. Pauli `p = 2x + y` sits
    with its bit `x` where the ket bit was and `y` where the bra bit was."""
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


def to_pauli(x: Array, n: int) -> Array:
    """A flat density matrix `rho` (`4**n` entries, ket wires then bra wires) as its real Pauli
    coefficients `tr(P rho)`, in the same `2n`-wire layout (see `_pauli_basis`)."""
    t = jnp.asarray(_T, x.dtype)
    for w in range(n):
        x = apply_matrix(x, t, (w, w + n), 2 * n)
    return jnp.real(x).astype(real_dtype())


def from_pauli(c: Array, n: int) -> Array:
    """The flat density matrix of Pauli coefficients `c` (`to_pauli`'s inverse)."""
    x = c.astype(complex_dtype())
    t_inv = jnp.asarray(_T_INV, x.dtype)
    for w in range(n):
        x = apply_matrix(x, t_inv, (w, w + n), 2 * n)
    return x


def pauli_zero_state(n: int) -> Array:
    """`|0...0><0...0|` in the Pauli basis: `tr(P rho) = 1` for the words of `I` and `Z` only, which in
    this layout (ket bit `x`, bra bit `y`, `x = y` for both) is the flattened identity."""
    rows, cols = (jax.lax.broadcasted_iota(jnp.int32, (2**n, 2**n), axis) for axis in (0, 1))
    return (rows == cols).astype(real_dtype()).reshape(-1)


def run_pauli(ops, state: Array, n: int) -> Array:
    """Applies the blocks of `doubled(..., pauli=True)` (`SuperBlock`s of transfer matrices, and `Repeat`
    blocks of them, as checkpointed scans) to Pauli coefficients on `2n` wires."""
    for op in ops:
        if isinstance(op, Repeat):
            op.check_layers()

            def layer(s, body):
                return run_pauli(body.ops, s, n), None

            state, _ = packed_scan(layer, state, op.body, length=op.length, checkpoint=True)
        else:
            state = apply_matrix(state, op.S, op.wires, 2 * n)
    return state


_LABELS = {"X": 1, "Y": 2, "Z": 3}


def _index(word: PauliWord, n: int) -> int:
    """The flat index of `c_P` for the Pauli word `P` (identity on the wires it does not name)."""
    index = 0
    for w, letter in word.word:
        p = _LABELS[letter]
        index |= (p >> 1) << (2 * n - 1 - w) | (p & 1) << (n - 1 - w)
    return index


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
