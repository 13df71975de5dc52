"""Observables: Pauli words, Hermitian matrices, and linear combinations with leaf coefficients.

`qfx.X(0)`, `qfx.Y(1)`, `qfx.Z(2)` and `qfx.I(0)` are gates and observables at once, as in PennyLane.
Arithmetic builds a `LinearCombination`: `0.5 * qfx.Z(0) @ qfx.Z(1) - 0.2 * qfx.X(0)`. Its coefficients are
array leaves, so `jax.grad` reaches them; its Pauli words are static structure.
"""

import abc
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike
import numpy as np

from ._checks import (
    as_dtype,
    as_numeric,
    check_wires,
    is_concrete,
    is_numeric_leaf,
    static_count,
    static_wires,
)
from ._custom_types import complex_dtype, real_dtype

# A Pauli word: ((wire, letter), ...) sorted by wire, letters in "XYZ"; () is the identity.
Word = tuple[tuple[int, str], ...]

_PAULI = {
    "I": np.eye(2),
    "X": np.array([[0, 1], [1, 0]]),
    "Y": np.array([[0, -1j], [1j, 0]]),
    "Z": np.array([[1, 0], [0, -1]]),
}
# Products of single-qubit Paulis: (a, b) -> (phase, letter) with a b = phase * letter.
_PRODUCT = {
    ("X", "Y"): (1j, "Z"),
    ("Y", "Z"): (1j, "X"),
    ("Z", "X"): (1j, "Y"),
    ("Y", "X"): (-1j, "Z"),
    ("Z", "Y"): (-1j, "X"),
    ("X", "Z"): (-1j, "Y"),
}


def pauli_word_matrix(letters: str) -> np.ndarray:
    """The dense matrix of a Pauli string such as "XZ" (first letter on the first wire)."""
    m = np.eye(1)
    for letter in letters:
        m = np.kron(m, _PAULI[letter])
    return m


def _word_product(a: Word, b: Word) -> tuple[complex, Word]:
    letters = dict(a)
    phase = 1 + 0j
    for wire, lb in b:
        la = letters.get(wire)
        if la is None:
            letters[wire] = lb
        elif la == lb:
            del letters[wire]
        else:
            ph, letters[wire] = _PRODUCT[la, lb]
            phase *= ph
    return phase, tuple(sorted(letters.items()))


def _real_scalar(value, what: str) -> Array:
    if isinstance(value, complex) or jnp.iscomplexobj(value):
        raise TypeError(f"{what}: coefficients must be real (observables are Hermitian), got {value!r}.")
    value = as_numeric(value, f"{what}: the coefficient", inexact=True)
    if value.shape != ():
        raise ValueError(f"{what}: expected a scalar coefficient, got shape {value.shape}.")
    return as_dtype(value, real_dtype())


def _array_module(*coeffs):
    """NumPy and the coefficients as host arrays when all are concrete, else jax.numpy and them as they are.

    Arithmetic on concrete coefficients then runs no JAX operation: in a fresh process each eager JAX
    operation compiles once per new shape, which made building `sum(qfx.Z(i) for i in range(20))` cost
    over a second."""
    if all(is_concrete(c) for c in coeffs):
        return np, [np.asarray(c) for c in coeffs]
    return jnp, list(coeffs)


class AbstractObservable(eqx.Module):
    """A Hermitian operator. Supports `+`, `-`, `*` by real scalars and `@` (tensor product)."""

    # NumPy arrays defer to the observable's own operators (`np.float32(2) * Z(0)` is `2 * Z(0)`, and
    # `np.ones(2) * Z(0)` a clear error) instead of building an object array of observables.
    __array_ufunc__ = None
    __getattribute__ = object.__getattribute__  # fast flattening, as `AbstractOperation`'s

    @property
    @abc.abstractmethod
    def wires(self) -> tuple[int, ...]:
        """The wires the observable acts on."""

    def __add__(self, other):
        if isinstance(other, numbers.Number) and other == 0:
            return as_linear_combination(self)
        if not isinstance(other, AbstractObservable):
            return NotImplemented
        a, b = as_linear_combination(self), as_linear_combination(other)
        xp, (ac, bc) = _array_module(a.coeffs, b.coeffs)
        return _simplify(xp.concatenate([ac, bc]), a.terms + b.terms)

    def __radd__(self, other):
        # Lets `sum(observables)` start from 0.
        if isinstance(other, numbers.Number) and other == 0:
            return as_linear_combination(self)
        return NotImplemented

    def __neg__(self):
        return -1.0 * self

    def __sub__(self, other):
        if not isinstance(other, AbstractObservable):
            return NotImplemented
        return self + (-1.0) * other

    def __mul__(self, scalar):
        if isinstance(scalar, AbstractObservable):
            raise TypeError("Use @ for the tensor product of observables, not *.")
        lc = as_linear_combination(self)
        _, (coeffs, c) = _array_module(lc.coeffs, _real_scalar(scalar, "Observable * scalar"))
        return LinearCombination(coeffs * c, lc.terms)

    __rmul__ = __mul__

    def __matmul__(self, other):
        if not isinstance(other, AbstractObservable):
            return NotImplemented
        a, b = as_linear_combination(self), as_linear_combination(other)
        xp, (ac, bc) = _array_module(a.coeffs, b.coeffs)
        coeffs, phases, terms = [], [], []
        for i, ta in enumerate(a.terms):
            for j, tb in enumerate(b.terms):
                phase, term = _term_product(ta, tb)
                coeffs.append(ac[i] * bc[j])
                phases.append(phase)
                terms.append(term)
        if all(p.imag == 0 for p in phases):
            return _simplify(
                xp.stack([c * p.real for c, p in zip(coeffs, phases, strict=True)]), tuple(terms)
            )
        return _cancel_imaginary(a, b, xp, coeffs, phases, tuple(terms))


def _cancel_imaginary(a, b, xp, coeffs, phases, terms) -> "LinearCombination":
    """`a @ b` where some products of Pauli words carry a phase of +-i (anticommuting letters on a shared
    wire): the product is Hermitian only if those imaginary terms cancel, as in `(X + Z) @ (X + Z) = 2 I`.
    Checked on concrete coefficients; with traced ones it cannot be, and the product is refused."""
    imaginary = next(t for t, p in zip(terms, phases, strict=True) if p.imag != 0)
    if xp is not np:
        raise ValueError(
            f"The product ({a!r}) @ ({b!r}) has terms with imaginary phases ({imaginary!r}); it is Hermitian "
            "only if they cancel, which cannot be checked on traced coefficients. Build the product outside "
            "jit/grad, or use products of commuting terms."
        )
    values = np.asarray([c * p for c, p in zip(coeffs, phases, strict=True)])
    merged, kept = _merge(values, terms)
    scale = max(1.0, float(np.max(np.abs(values))))
    worst = int(np.argmax(np.abs(merged.imag)))
    if abs(merged.imag[worst]) > 1e-6 * scale:
        raise ValueError(
            f"The product ({a!r}) @ ({b!r}) is not Hermitian: its term {kept[worst]!r} has coefficient "
            f"{complex(merged[worst]):.4g}. Products on a shared wire must commute, or their imaginary parts "
            "cancel."
        )
    # Terms made only of cancelled imaginary products are dropped, not kept with a zero coefficient.
    real_words = {
        t.word for t, p in zip(terms, phases, strict=True) if p.imag == 0 and isinstance(t, PauliWord)
    }
    keep = [k for k, t in enumerate(kept) if not isinstance(t, PauliWord) or t.word in real_words]
    return LinearCombination(merged.real[keep].astype(real_dtype()), tuple(kept[k] for k in keep))


class PauliWord(AbstractObservable):
    """A tensor product of Pauli operators, e.g. `PauliWord({0: "Z", 2: "X"})`. Has no leaves."""

    word: Word = eqx.field(static=True)

    def __init__(self, paulis: dict[int, str] | Word = ()):
        if isinstance(paulis, str):
            raise TypeError(
                f"PauliWord: expected {{wire: letter}} (or (wire, letter) pairs), got the string {paulis!r}; "
                f"for its letters on wires 0, 1, ... use qfx.PauliWord(dict(enumerate({paulis!r})))."
            )
        items = paulis.items() if isinstance(paulis, dict) else paulis
        word = {}
        for wire, letter in items:
            w = static_count(wire)
            if w is None:
                raise ValueError(f"PauliWord: wires must be non-negative ints, got {wire!r}.")
            if letter not in ("I", "X", "Y", "Z"):
                raise ValueError(f"PauliWord: letters must be I, X, Y or Z, got {letter!r}.")
            if w in word:
                raise ValueError(f"PauliWord: wire {wire} appears twice; multiply with @ instead.")
            if letter != "I":
                word[w] = str(letter)  # a NumPy string would be a NumPy scalar in a static field
        self.word = tuple(sorted(word.items()))

    @classmethod
    def from_string(cls, text: str) -> "PauliWord":
        """A Pauli word from letters followed by their wires, e.g. `"X0 Z3"` (or `"X0 @ Z3"`); `""` or `"I"`
        is the identity.

        ```python
        qfx.PauliWord.from_string("X0 Y2 Z3")  # X(0) @ Y(2) @ Z(3)
        ```
        """
        if not isinstance(text, str):
            raise TypeError(f"PauliWord.from_string: expected a string such as 'X0 Z3', got {text!r}.")
        word = {}
        for token in text.replace("@", " ").split():
            letter, wire = token[0], token[1:]
            if token == "I":
                continue
            if letter not in "IXYZ" or not wire.isdigit() or not wire.isascii():
                raise ValueError(
                    f"PauliWord.from_string: {token!r} in {text!r} is not a letter I, X, Y or Z followed by "
                    "a wire number, as in 'X0 Z3'."
                )
            if int(wire) in word:
                raise ValueError(f"PauliWord.from_string: wire {int(wire)} appears twice in {text!r}.")
            word[int(wire)] = letter
        return cls(word)

    @property
    def wires(self):
        return tuple(w for w, _ in self.word)

    def matrix(self, wire_order=None) -> Array:
        """The dense matrix on `wire_order` (default: the word's wires, ascending); see `qfx.matrix`."""
        return matrix(self, wire_order)

    def __repr__(self):
        return " @ ".join(f"{p}({w})" for w, p in self.word) or "I"


def pauli(letters: str, wires=None) -> PauliWord:
    """The Pauli word of a string of letters, letter `k` on wire `k` (or on `wires[k]`).

    **Arguments:**

    - `letters`: a string over `I`, `X`, `Y`, `Z`, e.g. `"XZIY"`.
    - `wires`: the wires of the letters, one per letter; by default `0, 1, 2, ...`.

    **Returns:** a `qfx.PauliWord` (the `I` letters act on no wire).

    ```python
    qfx.pauli("XZIY")  # X(0) @ Z(1) @ Y(3)
    qfx.pauli("ZZ", wires=(2, 5))  # Z(2) @ Z(5)
    ```
    """
    if not isinstance(letters, str) or set(letters) - set("IXYZ"):
        raise ValueError(f"qfx.pauli: expected a string over I, X, Y and Z such as 'XZIY', got {letters!r}.")
    if wires is None:
        wires = range(len(letters))
    ws = check_wires("qfx.pauli", wires, None) if len(letters) else ()
    if len(ws) != len(letters):
        raise ValueError(
            f"qfx.pauli: {letters!r} has {len(letters)} letters but wires={tuple(ws)} has {len(ws)}; give "
            "one wire per letter."
        )
    return PauliWord(dict(zip(ws, letters, strict=True)))


class Hermitian(AbstractObservable):
    """A Hermitian matrix on `wires`; its entries are leaves. Checked for hermiticity when concrete."""

    matrix: Array
    _wires: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, matrix: ArrayLike, wires):
        self._wires = check_wires("Hermitian", wires, None)
        matrix = as_numeric(matrix, f"Hermitian(wires={self._wires}): the matrix", inexact=True)
        dim = 2 ** len(self._wires)
        if matrix.shape != (dim, dim):
            raise ValueError(
                f"Hermitian(wires={self._wires}): expected a ({dim}, {dim}) matrix, got shape {matrix.shape}."
            )
        matrix = as_dtype(matrix, complex_dtype())
        _check_hermitian(matrix, f"Hermitian(wires={self._wires})")
        self.matrix = matrix

    @property
    def wires(self):
        return self._wires


def _check_hermitian(matrix: Array, what: str) -> None:
    """Raises if `matrix` is concrete and not Hermitian (on the host: no JAX operation per call)."""
    if not is_concrete(matrix):
        return
    m = np.asarray(matrix)
    err = float(np.max(np.abs(m - m.conj().T)))
    scale = max(1.0, float(np.max(np.abs(m))))
    if not err <= 1e-5 * scale:  # NaN fails too
        raise ValueError(f"{what}: the matrix is not Hermitian (max |M - M^dagger| = {err:.3g}).")


class LinearCombination(AbstractObservable):
    """`sum_k coeffs[k] * terms[k]`, with terms Pauli words or Hermitian matrices.

    Most users build it with arithmetic; `LinearCombination(coeffs, terms)` also works directly.
    """

    coeffs: Array
    terms: tuple[PauliWord | Hermitian, ...]

    def __init__(self, coeffs: ArrayLike, terms):
        # Pauli gates (qfx.X(0), ...) are observables too: as one-letter words.
        terms = tuple(
            PauliWord({t.wires[0]: t.pauli_letter}) if getattr(t, "pauli_letter", None) is not None else t
            for t in terms
        )
        for t in terms:
            if not isinstance(t, (PauliWord, Hermitian)):
                raise TypeError(
                    f"LinearCombination: terms must be Pauli words (or qfx.X / Y / Z / I) or Hermitian, got "
                    f"{type(t).__name__}; "
                    "build sums with + and * instead."
                )
        if isinstance(coeffs, (np.ndarray, list, tuple)):
            try:
                host = np.asarray(coeffs)
            except Exception:  # noqa: BLE001 - e.g. a list holding traced values: as_numeric takes it
                host = None
            if host is not None:
                if not np.issubdtype(host.dtype, np.number):
                    raise TypeError(f"LinearCombination: coefficients must be numbers, got {coeffs!r}.")
                if np.issubdtype(host.dtype, np.integer):  # JAX would wrap those of 2**31 and more
                    host = host.astype(np.float64)
                # device_put: a host array becomes a device array without a compiled copy (one per length);
                # concrete inside a jit trace too (see as_numeric).
                with jax.ensure_compile_time_eval():
                    coeffs = jax.device_put(host)
        coeffs = as_numeric(coeffs, "LinearCombination: the coefficients", inexact=True)
        if jnp.iscomplexobj(coeffs):
            raise TypeError("LinearCombination: coefficients must be real (observables are Hermitian).")
        if coeffs.shape != (len(terms),):
            raise ValueError(
                f"LinearCombination: expected {len(terms)} coefficients (one per term), "
                f"got shape {coeffs.shape}."
            )
        self.coeffs = as_dtype(coeffs, real_dtype())
        self.terms = terms

    @classmethod
    def from_terms(cls, terms) -> "LinearCombination":
        """A linear combination from `(coefficient, term)` pairs; a term is a Pauli string (`"X0 Z1"`, as
        `PauliWord.from_string` reads it), a `PauliWord`, a Pauli gate (`qfx.Z(0)`) or a `Hermitian`.
        Repeated Pauli words are merged; coefficients may be traced.

        ```python
        H = qfx.LinearCombination.from_terms([(0.5, "Z0 Z1"), (-0.2, "X0"), (0.1, qfx.Z(1))])
        ```
        """
        coeffs, out = [], []
        for pair in terms:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(
                    f"LinearCombination.from_terms: expected (coefficient, term) pairs, got {pair!r}."
                )
            c, term = pair
            if isinstance(term, str):
                term = PauliWord.from_string(term)
            elif isinstance(term, AbstractObservable) and not isinstance(term, (PauliWord, Hermitian)):
                lc = as_linear_combination(term)  # a Pauli gate: one term of coefficient 1
                if len(lc.terms) != 1:
                    raise TypeError(
                        f"LinearCombination.from_terms: a term must be one Pauli word or Hermitian, got "
                        f"{term!r}; add linear combinations with +."
                    )
                term = lc.terms[0]
            elif not isinstance(term, (PauliWord, Hermitian)):
                raise TypeError(
                    "LinearCombination.from_terms: a term is a Pauli string such as 'X0 Z1', a PauliWord, a "
                    f"Pauli gate or a Hermitian, got {term!r}."
                )
            coeffs.append(_real_scalar(c, "LinearCombination.from_terms"))
            out.append(term)
        if not out:
            return cls(np.zeros((0,), real_dtype()), ())
        xp, coeffs = _array_module(*coeffs)
        return _simplify(xp.stack(coeffs), tuple(out))

    @classmethod
    def from_dict(cls, terms: dict) -> "LinearCombination":
        """A linear combination from `{term: coefficient}`, terms as in `from_terms` (a Pauli string such as
        `"X0 Z1"`, or a `PauliWord`).

        ```python
        H = qfx.LinearCombination.from_dict({"Z0 Z1": 0.5, "X0": -0.2, "X1": -0.2})
        ```
        """
        if not isinstance(terms, dict):
            raise TypeError(
                f"LinearCombination.from_dict: expected a dict {{term: coefficient}}, got {terms!r}."
            )
        return cls.from_terms([(c, t) for t, c in terms.items()])

    @property
    def wires(self):
        return tuple(sorted({w for t in self.terms for w in t.wires}))

    def matrix(self, wire_order=None) -> Array:
        """The dense matrix on `wire_order` (default: the observable's wires, ascending); see `qfx.matrix`."""
        return matrix(self, wire_order)

    def __repr__(self):
        # Read on the host: iterating a concrete JAX array of more than 100 entries inside a jit trace makes
        # tracers. Coefficients that are traced, or not one per term (a vmapped batch, an eqx.tree_at edit),
        # print as "c".
        c = self.coeffs
        host = np.asarray(c) if is_concrete(c) and not isinstance(c, jax.ShapeDtypeStruct) else None
        if host is None or host.shape != (len(self.terms),) or not is_numeric_leaf(host):
            host = None
        parts = []
        for k, t in enumerate(self.terms):
            cs = "c" if host is None else f"{float(host[k]):.4g}"
            ts = repr(t) if isinstance(t, PauliWord) else f"Hermitian(wires={t.wires})"
            parts.append(f"{cs} * {ts}")
        return " + ".join(parts).replace("+ -", "- ") or "0"


def check_observable(obs: LinearCombination, fn: str) -> None:
    """Raises unless `obs` is one well-formed observable: real coefficients, one per term, and Hermitian
    terms of the right shape (and Hermitian where concrete). The constructors check this, but an
    `eqx.tree_at` edit skips them, and a batch of observables (from `eqx.filter_vmap`) passed without
    mapping the call would broadcast or fail deep in the kernels. Shapes and dtypes only under `jit`."""
    c = obs.coeffs
    if jnp.iscomplexobj(c):
        raise TypeError(
            f"qfx.{fn}: the observable's coefficients must be real (observables are Hermitian), got dtype "
            f"{jnp.result_type(c)}."
        )
    if np.shape(c) != (len(obs.terms),):
        raise ValueError(
            f"qfx.{fn}: the observable has {len(obs.terms)} terms but coefficients of shape {np.shape(c)}, "
            "expected one per term. A batch of observables (from eqx.filter_vmap) runs by mapping the call: "
            f"jax.vmap(lambda o: qfx.{fn}(circuit, o))(observables)."
        )
    for t in obs.terms:
        if isinstance(t, Hermitian):
            dim = 2 ** len(t.wires)
            if np.shape(t.matrix) != (dim, dim):
                raise ValueError(
                    f"qfx.{fn}: Hermitian(wires={t.wires}) has a matrix of shape {np.shape(t.matrix)}, "
                    f"expected ({dim}, {dim}). A batch of observables (from eqx.filter_vmap) runs by "
                    f"mapping the call: jax.vmap(lambda o: qfx.{fn}(circuit, o))(observables)."
                )
            _check_hermitian(t.matrix, f"qfx.{fn}: Hermitian(wires={t.wires})")


def as_linear_combination(obs: AbstractObservable) -> LinearCombination:
    """Any observable as a `LinearCombination` (Pauli gates become one-term words)."""
    if isinstance(obs, LinearCombination):
        return obs
    if isinstance(obs, (PauliWord, Hermitian)):
        return LinearCombination(np.ones((1,), real_dtype()), (obs,))
    letter = getattr(obs, "pauli_letter", None)
    if letter is not None:
        return LinearCombination(np.ones((1,), real_dtype()), (PauliWord({obs.wires[0]: letter}),))
    raise TypeError(f"{type(obs).__name__} cannot be used as an observable.")


def _term_product(a, b) -> tuple[complex, PauliWord | Hermitian]:
    """`a @ b` as a phase and one term."""
    if isinstance(a, PauliWord) and isinstance(b, PauliWord):
        phase, word = _word_product(a.word, b.word)
        return phase, PauliWord(word)
    overlap = set(a.wires) & set(b.wires)
    if overlap:
        raise ValueError(
            f"@ with a Hermitian matrix needs disjoint wires, but both act on wires {sorted(overlap)}."
        )
    if not a.wires:
        return 1 + 0j, b
    if not b.wires:
        return 1 + 0j, a
    return 1 + 0j, Hermitian(jnp.kron(_dense(a), _dense(b)), a.wires + b.wires)


def _dense(term: "PauliWord | Hermitian") -> Array:
    if isinstance(term, PauliWord):
        letters = "".join(p for _, p in term.word)
        return jnp.asarray(pauli_word_matrix(letters), complex_dtype())
    return term.matrix


def _simplify(coeffs: ArrayLike, terms) -> LinearCombination:
    """Merges repeated Pauli words by adding their coefficients (in NumPy when concrete, see
    `_array_module`)."""
    return LinearCombination(*_merge(coeffs, terms))


def _merge(coeffs: ArrayLike, terms) -> tuple[ArrayLike, tuple]:
    index: dict = {}
    groups: list[int] = []
    keep_terms = []
    for t in terms:
        key = t.word if isinstance(t, PauliWord) else None
        if key is not None and key in index:
            groups.append(index[key])
        else:
            if key is not None:
                index[key] = len(keep_terms)
            groups.append(len(keep_terms))
            keep_terms.append(t)
    if len(keep_terms) == len(groups):
        return coeffs, tuple(keep_terms)
    xp, (coeffs,) = _array_module(coeffs)
    if xp is np:
        merged = np.zeros(len(keep_terms), coeffs.dtype)
        np.add.at(merged, np.asarray(groups), coeffs)
    else:
        merged = jax.ops.segment_sum(coeffs, np.asarray(groups), num_segments=len(keep_terms))
    return merged, tuple(keep_terms)


# --- dense matrices, for small numbers of wires ---------------------------------------------------

# The most wires `matrix` builds a dense matrix for: 4**12 entries are 128 MiB in complex64 (and its
# eigendecomposition takes about a minute on one CPU core).
MAX_DENSE_WIRES = 12


def _dense_wires(obs: AbstractObservable, wire_order, fn: str) -> tuple[int, ...]:
    if wire_order is None:
        order = tuple(obs.wires)
    else:
        order = static_wires(wire_order)
        if order is None or len(set(order)) != len(order) or any(w < 0 for w in order):
            raise ValueError(f"qfx.{fn}: wire_order must be distinct non-negative ints, got {wire_order!r}.")
        missing = sorted(set(obs.wires) - set(order))
        if missing:
            raise ValueError(
                f"qfx.{fn}: the observable acts on wires {missing}, which wire_order={order} leaves out."
            )
    if len(order) > MAX_DENSE_WIRES:
        raise ValueError(
            f"qfx.{fn}: a dense matrix on {len(order)} wires has 4**{len(order)} entries; qfx builds them "
            f"for at most {MAX_DENSE_WIRES} wires. Use qfx.expval / qfx.var, which never build the matrix."
        )
    return order


def _word_entries(word: Word, order: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The nonzero entries of a Pauli word's matrix on `order`: column `c` holds `values[c]` in row
    `c ^ flip`, one per column."""
    n = len(order)
    flip = zmask = 0
    ys = 0
    for wire, letter in word:
        bit = 1 << (n - 1 - order.index(wire))
        flip |= bit if letter in "XY" else 0
        zmask |= bit if letter in "YZ" else 0
        ys += letter == "Y"
    cols = np.arange(2**n)
    parity = np.zeros(2**n, np.int64)
    for k in range(n):  # the parity of the bits of c under zmask
        if zmask >> k & 1:
            parity ^= (cols >> k) & 1
    return cols ^ flip, (1j**ys) * (1 - 2 * parity)


def _embedded(m: Array, wires: tuple[int, ...], order: tuple[int, ...]) -> Array:
    """The matrix `m` on `wires` (its own order) as a matrix on `order`, identity elsewhere."""
    n, k = len(order), len(wires)
    rest = [w for w in order if w not in wires]
    full = jnp.kron(m, jnp.eye(2 ** (n - k), dtype=m.dtype))  # axes: wires, then rest
    source = list(wires) + rest
    axes = [source.index(w) for w in order]
    return full.reshape((2,) * 2 * n).transpose(axes + [n + a for a in axes]).reshape(2**n, 2**n)


def matrix(observable: AbstractObservable, wire_order=None) -> Array:
    """The dense `(2**n, 2**n)` matrix of an observable on `n` wires, for small `n`.

    Meant for checks and exact diagonalisation of small systems: `qfx.expval` and `qfx.var` never build
    it. Pauli words are written entry by entry (one nonzero per column), so memory is that of the result.
    Differentiable in the coefficients and Hermitian entries.

    **Arguments:**

    - `observable`: any qfx observable (`qfx.Z(0)`, a `PauliWord`, `LinearCombination`, `Hermitian`).
    - `wire_order`: the wires of the matrix, the first the most significant bit; by default the
      observable's own wires in ascending order. Must include them; at most 12 wires.

    **Returns:** a complex array (the default complex dtype).

    ```python
    qfx.matrix(qfx.Z(0) @ qfx.X(1))  # np.kron(Z, X)
    qfx.matrix(qfx.X(1), wire_order=[0, 1])  # np.kron(I, X)
    ```
    """
    if not isinstance(observable, AbstractObservable):
        raise TypeError(f"qfx.matrix: expected a qfx observable such as qfx.Z(0), got {observable!r}.")
    lc = as_linear_combination(observable)
    order = _dense_wires(lc, wire_order, "matrix")
    dim = 2 ** len(order)
    dtype = complex_dtype()
    out = jnp.zeros((dim, dim), dtype)
    at = [k for k, t in enumerate(lc.terms) if isinstance(t, PauliWord)]
    if at:
        rows, values = zip(*(_word_entries(lc.terms[k].word, order) for k in at), strict=True)
        cols = np.tile(np.arange(dim), len(at))
        weights = lc.coeffs[np.asarray(at)].astype(dtype)[:, None] * jnp.asarray(np.stack(values), dtype)
        out = out.at[np.concatenate(rows), cols].add(weights.reshape(-1))
    for k, t in enumerate(lc.terms):
        if isinstance(t, Hermitian):
            out = out + lc.coeffs[k].astype(dtype) * _embedded(t.matrix.astype(dtype), t.wires, order)
    return out


def eigvalsh(observable: AbstractObservable, wire_order=None) -> Array:
    """The exact eigenvalues of an observable on a few wires, ascending (from its dense matrix).

    **Arguments:**

    - `observable`: any qfx observable.
    - `wire_order`: as in `qfx.matrix`; wires beyond the observable's only repeat each eigenvalue.

    **Returns:** a real array of `2**n` eigenvalues; `eigvalsh(H)[0]` is the ground-state energy.

    ```python
    qfx.eigvalsh(qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(0))  # [-1.118, -1.118, 1.118, 1.118]
    ```
    """
    return jnp.linalg.eigvalsh(matrix(observable, wire_order))


def ground_state(observable: AbstractObservable, wire_order=None) -> tuple[Array, Array]:
    """The lowest eigenvalue of an observable on a few wires, and an eigenvector for it.

    **Arguments:**

    - `observable`: any qfx observable, e.g. a molecular Hamiltonian.
    - `wire_order`: as in `qfx.matrix`: the wires of the state vector (the first is the most significant
      bit). Pass `range(circuit.num_wires)` to compare with `qfx.state(circuit)`.

    **Returns:** `(energy, state)`: a real scalar and a normalised vector of `2**n` amplitudes (one of
    them, if the ground state is degenerate), usable as `initial_state=`.

    ```python
    H = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(0)
    energy, psi = qfx.ground_state(H)  # energy = -sqrt(1.25)
    ```
    """
    values, vectors = jnp.linalg.eigh(matrix(observable, wire_order))
    return values[0], vectors[:, 0]


def square(lc: LinearCombination) -> LinearCombination:
    """`O @ O` of `O = sum_k c_k T_k`, as `sum_k c_k**2 T_k**2 + sum_{j<k} c_j c_k {T_j, T_k}`: its structure
    (the terms) is decided from the terms alone, never from the coefficients, which may be traced.
    Anticommuting Pauli words drop out; a Hermitian term's products are dense on the wires involved."""
    coeffs, factors, terms = [], [], []
    for j, a in enumerate(lc.terms):
        for k in range(j, len(lc.terms)):
            b = lc.terms[k]
            if isinstance(a, PauliWord) and isinstance(b, PauliWord):
                phase, word = _word_product(a.word, b.word)
                if phase.imag != 0:  # anticommuting: {a, b} = 0
                    continue
                factor, term = phase.real * (1 if j == k else 2), PauliWord(word)
            else:
                wires = tuple(sorted(set(a.wires) | set(b.wires)))
                da, db = (_embedded(_dense(t).astype(complex_dtype()), t.wires, wires) for t in (a, b))
                product = da @ da if j == k else da @ db + db @ da
                factor, term = 1.0, Hermitian(product, wires)
            coeffs.append((j, k))
            factors.append(factor)
            terms.append(term)
    if not terms:
        return LinearCombination(np.zeros((0,), real_dtype()), ())
    xp, (c,) = _array_module(lc.coeffs)
    j, k = (np.asarray(x) for x in zip(*coeffs, strict=True))
    return _simplify(c[j] * c[k] * xp.asarray(np.asarray(factors), c.dtype), tuple(terms))
