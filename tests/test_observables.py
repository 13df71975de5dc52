"""Observables: arithmetic, simplification, leaves, and values against matrices built here with np.kron."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx._observables import square

from . import reference as ref
from .helpers import random_state, random_unitary


def test_large_integers_are_not_wrapped_to_int32():
    # JAX turns Python and NumPy integers into int32 and wraps those of 2**31 and more without a word; qfx
    # makes angles, coefficients and matrix entries floats on the host first.
    circ = qfx.Circuit([qfx.I(0)])  # <0|Z|0> = 1
    big = 3_000_000_000
    np.testing.assert_allclose(qfx.expval(circ, qfx.Z(0) * np.int64(big)), big, rtol=1e-6)
    lc = qfx.LinearCombination([big, 2**40], (qfx.Z(0) + qfx.X(1)).terms)
    np.testing.assert_allclose(lc.coeffs, [big, 2**40], rtol=1e-6)
    herm = qfx.Hermitian(np.array([[2**32 + 5, 0], [0, 1]]), 0)
    np.testing.assert_allclose(qfx.expval(circ, herm), 2**32 + 5, rtol=1e-6)
    np.testing.assert_allclose(qfx.RX(np.int64(2**32 + 1), 0).theta, 2.0**32, rtol=1e-6)


I2, X, Y, Z = ref.I2, ref.X, ref.Y, ref.Z
N = 3


def kron(*mats):
    out = np.eye(1)
    for m in mats:
        out = np.kron(out, m)
    return out


def _herm(rng, dim):
    a = random_unitary(rng, dim)
    return a + a.conj().T


@pytest.fixture(scope="module")
def psi():
    return random_state(np.random.default_rng(0), N)


def _value(obs, psi):
    """<psi|O|psi> by qfx, from `psi` as the initial state of an empty circuit."""
    return float(qfx.expval(qfx.Circuit([], num_wires=N), obs, initial_state=psi))


def _dense_value(matrix, psi):
    return float(np.real(psi.conj() @ matrix @ psi))


def _on_wires_2_0(h):
    """The 8x8 operator of a two-wire matrix whose first factor acts on wire 2 and second on wire 0."""
    full = np.zeros((8, 8), dtype=complex)
    for row in range(8):
        for col in range(8):
            r0, r1, r2 = (row >> 2) & 1, (row >> 1) & 1, row & 1
            c0, c1, c2 = (col >> 2) & 1, (col >> 1) & 1, col & 1
            if r1 == c1:
                full[row, col] = h[2 * r2 + r0, 2 * c2 + c0]
    return full


def test_values_match_kron_matrices(psi):
    rng = np.random.default_rng(1)
    h1, h2 = _herm(rng, 2), _herm(rng, 4)
    cases = [
        (qfx.Z(1), kron(I2, Z, I2)),
        (qfx.X(0) @ qfx.Y(2), kron(X, I2, Y)),
        (qfx.Y(2) @ qfx.X(0), kron(X, I2, Y)),  # @ of commuting factors: order is irrelevant
        (0.5 * qfx.Z(0) @ qfx.Z(1) - 0.2 * qfx.X(0), 0.5 * kron(Z, Z, I2) - 0.2 * kron(X, I2, I2)),
        (-qfx.Y(1) + 3.0 * qfx.I(0), -kron(I2, Y, I2) + 3.0 * np.eye(8)),
        (qfx.PauliWord({2: "X", 0: "Z", 1: "I"}), kron(Z, I2, X)),
        (qfx.Hermitian(h1, wires=1), kron(I2, h1, I2)),
        (qfx.Hermitian(h2, wires=(2, 0)), _on_wires_2_0(h2)),
        (qfx.Hermitian(h1, wires=2) @ qfx.X(0), kron(X, I2, h1)),
        (2.0 * (qfx.Z(0) + qfx.X(1)) @ qfx.Z(2), 2.0 * (kron(Z, I2, Z) + kron(I2, X, Z))),
        (sum([qfx.Z(0), qfx.Z(1), qfx.Z(2)]), kron(Z, I2, I2) + kron(I2, Z, I2) + kron(I2, I2, Z)),
        (qfx.X(1) * 0.25, 0.25 * kron(I2, X, I2)),
        (jnp.asarray(0.7) * qfx.Y(0), 0.7 * kron(Y, I2, I2)),
    ]
    for obs, matrix in cases:
        assert _value(obs, psi) == pytest.approx(_dense_value(matrix, psi), abs=2e-5), obs


def test_small_states_compute_word_weights(monkeypatch):
    """On a 5-qubit state, words whose weight table would pass 512 bytes get their weights computed in the
    program (`_computed_weights`, one call per window here) rather than stored; the values match dense
    matrices, and the computed weights match the stored ones, for these words and for words with X and Y."""
    n = 5
    rng = np.random.default_rng(7)
    words = [{w: "XYZ"[(w + k) % 3] for w in range(n)} for k in range(3)] + [{w: "Z"} for w in range(n)]
    obs = sum(float(c) * qfx.PauliWord(w) for c, w in zip(rng.normal(size=len(words)), words, strict=True))
    psi = jnp.asarray(random_state(rng, n), jnp.complex64)
    calls = []
    computed = qfx._statevector._reductions._computed_weights
    monkeypatch.setattr(
        qfx._statevector._reductions, "_computed_weights", lambda *a: calls.append(a[:2]) or computed(*a)
    )
    value = qfx.expval(qfx.Circuit([], n), obs, initial_state=psi)
    assert calls
    expected = np.real(np.vdot(psi, ref.observable_matrix(obs, n) @ np.asarray(psi)))
    assert float(value) == pytest.approx(expected, abs=1e-5)
    all_wires = tuple(range(n))
    for group, wires in calls + [(tuple(qfx.PauliWord(w).word for w in words), all_wires)]:
        stored = np.stack([qfx._statevector._reductions._word_weights(word, wires) for word in group])
        np.testing.assert_array_equal(computed(group, wires, jnp.complex64), stored.astype(np.complex64))


def test_a_list_of_observables(psi):
    values = qfx.expval(qfx.Circuit([], num_wires=N), [qfx.Z(0), qfx.X(1) @ qfx.X(2)], initial_state=psi)
    assert values.shape == (2,)
    np.testing.assert_allclose(
        values, [_dense_value(kron(Z, I2, I2), psi), _dense_value(kron(I2, X, X), psi)], atol=2e-5
    )


def test_products_on_a_shared_wire_simplify():
    same = qfx.Z(0) @ qfx.Z(0)
    assert isinstance(same, qfx.LinearCombination)
    assert same.terms == (qfx.PauliWord(),) and float(same.coeffs[0]) == 1.0
    # (X0 Z1)(X0 Z1) = I, and (X0 Y1)(Y0 X1): the X0 Y0 and Y1 X1 phases (i and -i) cancel.
    prod = (qfx.X(0) @ qfx.Y(1)) @ (qfx.Y(0) @ qfx.X(1))
    assert prod.terms == (qfx.PauliWord({0: "Z", 1: "Z"}),)
    assert float(prod.coeffs[0]) == pytest.approx(1.0)
    np.testing.assert_allclose(kron(X, Y) @ kron(Y, X), kron(Z, Z))


def test_products_of_sums_whose_imaginary_parts_cancel(psi):
    # (a X + b Z)^2 = (a^2 + b^2) I: the X Z and Z X products (-i Y and i Y) cancel. With a second wire:
    # B = 0.3 X0 + 2 Z0 + Y1, B^2 = 5.09 I + 0.6 X0 Y1 + 4 Z0 Y1 (Y1 commutes with both).
    square = (qfx.X(0) + qfx.Z(0)) @ (qfx.X(0) + qfx.Z(0))
    assert square.terms == (qfx.PauliWord(),)  # no Y(0) term left with a zero coefficient
    np.testing.assert_allclose(square.coeffs, [2.0])
    b = 0.3 * qfx.X(0) + 2.0 * qfx.Z(0) + qfx.Y(1)
    dense = 0.3 * kron(X, I2, I2) + 2.0 * kron(Z, I2, I2) + kron(I2, Y, I2)
    assert _value(b @ b, psi) == pytest.approx(_dense_value(dense @ dense, psi), abs=2e-5)
    # Commuting two-qubit words: (X0 X1 + Z0 Z1)^2 = 2 I + 2 X0 X1 Z0 Z1 = 2 I - 2 Y0 Y1.
    xx_zz = qfx.X(0) @ qfx.X(1) + qfx.Z(0) @ qfx.Z(1)
    dense = kron(X, X, I2) + kron(Z, Z, I2)
    assert _value(xx_zz @ xx_zz, psi) == pytest.approx(_dense_value(dense @ dense, psi), abs=2e-5)


def test_products_whose_imaginary_parts_do_not_cancel_are_refused():
    with pytest.raises(ValueError, match=re.escape("its term Y(0) has coefficient 0-1j")):
        (qfx.X(0) + qfx.Z(0)) @ (qfx.X(0) + 2.0 * qfx.Z(0))
    # (I + Z)(X + Y) = X + Y + iY - iX: nothing cancels.
    with pytest.raises(ValueError, match="is not Hermitian"):
        (qfx.I(0) + qfx.Z(0)) @ (qfx.Y(0) + qfx.X(0))
    # Traced coefficients cannot be checked: refused with the reason.
    with pytest.raises(ValueError, match="cannot be checked on traced coefficients"):
        jax.jit(lambda c: ((c * qfx.X(0) + qfx.Z(0)) @ (c * qfx.X(0) + qfx.Z(0))).coeffs)(2.0)


def test_observables_built_from_constants_inside_jit_are_checked_as_outside():
    # Constant coefficients and matrices built inside the trace are concrete: (X + Z) @ (X + Z) = 2 I was
    # refused there as "traced", and a non-Hermitian NumPy matrix was accepted (1.5 came out).
    psi = qfx.Circuit([qfx.RY(0.4, wires=0)])
    f = jax.jit(lambda: qfx.expval(psi, (qfx.X(0) + qfx.Z(0)) @ (qfx.X(0) + qfx.Z(0))))
    assert float(f()) == pytest.approx(2.0, abs=1e-6)
    with pytest.raises(ValueError, match="its term Y\\(0\\) has coefficient 0-1j"):
        jax.jit(lambda: ((qfx.X(0) + qfx.Z(0)) @ (qfx.X(0) + 2.0 * qfx.Z(0))).coeffs)()
    bad = np.array([[1, 1], [0, 1]], complex)
    with pytest.raises(ValueError, match=re.escape("Hermitian(wires=(0,)): the matrix is not Hermitian")):
        jax.jit(lambda: qfx.expval(psi, qfx.Hermitian(bad, wires=0)))()


def test_a_large_observable_closed_over_by_jit():
    # More than 100 concrete coefficients: iterating such a JAX array inside a jit trace makes tracers,
    # which crashed var and expval's error formatting (TracerIntegerConversionError).
    n = 5
    words = [qfx.PauliWord({w: "XYZ"[(k // 3**w) % 3] for w in range(n)}) for k in range(101)]
    h = sum((0.01 * k) * word for k, word in enumerate(words))
    assert len(h.terms) == 101
    circ = qfx.Circuit([qfx.RY(0.3 + 0.2 * i, wires=i) for i in range(n)])
    psi = ref.final_state(circ)
    dense = sum(0.01 * k * ref.observable_matrix(word, n) for k, word in enumerate(words))
    mean = float(np.real(psi.conj() @ dense @ psi))
    square = float(np.real(psi.conj() @ dense @ dense @ psi))
    assert float(jax.jit(lambda c: qfx.expval(c, h))(circ)) == pytest.approx(mean, abs=1e-4)
    assert float(jax.jit(lambda c: qfx.var(c, h))(circ)) == pytest.approx(square - mean**2, abs=1e-3)
    assert "0.01 * Y(0) @ X(1) @ X(2) @ X(3) @ X(4)" in repr(h)


def test_repeated_words_merge():
    h = 0.5 * qfx.Z(0) @ qfx.Z(1) + 0.25 * qfx.Z(1) @ qfx.Z(0) - qfx.X(2)
    assert len(h.terms) == 2
    np.testing.assert_allclose(h.coeffs, [0.75, -1.0])
    assert h.wires == (0, 1, 2)


def test_repeated_words_merge_with_traced_coefficients():
    def h(c):
        return c[0] * qfx.Z(0) + c[1] * qfx.X(1) + c[2] * qfx.Z(0)

    c = jnp.asarray([0.5, -1.0, 0.25])
    merged = jax.jit(h)(c)
    assert merged.terms == (qfx.PauliWord({0: "Z"}), qfx.PauliWord({1: "X"}))
    np.testing.assert_allclose(merged.coeffs, [0.75, -1.0])
    # The gradient flows through the merge to each coefficient: d<h>/dc = (<Z0>, <X1>, <Z0>).
    psi = random_state(np.random.default_rng(5), 2)
    empty = qfx.Circuit([], num_wires=2)
    grad = jax.grad(lambda c: qfx.expval(empty, h(c), initial_state=psi))(c)
    z0, x1 = _dense_value(kron(Z, I2), psi), _dense_value(kron(I2, X), psi)
    np.testing.assert_allclose(grad, [z0, x1, z0], atol=2e-5)


def test_numpy_coefficients_on_the_left():
    # NumPy used to broadcast its operators over the observable: an object array of observables.
    for scale in (np.float32(2.0), np.int64(2), np.array(2.0)):
        lc = scale * qfx.Z(0)
        assert isinstance(lc, qfx.LinearCombination)
        np.testing.assert_allclose(lc.coeffs, [2.0])
    with pytest.raises(ValueError, match="expected a scalar coefficient, got shape .2,."):
        np.ones(2) * qfx.Z(0)
    with pytest.raises(TypeError):
        np.ones(2) + qfx.Z(0)


def test_coefficients_are_leaves_and_words_are_static():
    h = 0.5 * qfx.Z(0) + 0.2 * qfx.X(1) @ qfx.Y(2) + qfx.Hermitian(np.eye(2), wires=0)
    leaves = jax.tree.leaves(h)
    assert len(leaves) == 2  # the coefficients, and the Hermitian matrix
    assert leaves[0].shape == (3,) and leaves[0].dtype == jnp.float32
    assert leaves[1].dtype == jnp.complex64
    assert jax.tree.leaves(qfx.PauliWord({0: "X"})) == []
    assert jax.tree.leaves(qfx.Z(0)) == []
    # Same words, other coefficients: the same structure (one compilation).
    other = 1.5 * qfx.Z(0) - 0.3 * qfx.X(1) @ qfx.Y(2) + qfx.Hermitian(np.diag([1.0, 2.0]), wires=0)
    assert jax.tree.structure(h) == jax.tree.structure(other)


def test_linear_combination_constructor():
    lc = qfx.LinearCombination([0.5, -1.0], [qfx.PauliWord({0: "X"}), qfx.PauliWord({1: "Z"})])
    assert lc.wires == (0, 1)
    psi = random_state(np.random.default_rng(2), 2)
    value = float(qfx.expval(qfx.Circuit([], num_wires=2), lc, initial_state=psi))
    assert value == pytest.approx(_dense_value(0.5 * kron(X, I2) - kron(I2, Z), psi), abs=2e-5)


def test_empty_linear_combination_is_zero():
    """The sum of no terms: expectation and variance 0, and a zero gradient."""
    lc = qfx.LinearCombination(jnp.zeros((0,)), ())
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), qfx.H(1)])
    assert float(qfx.expval(circ, lc)) == 0.0 and float(qfx.var(circ, lc)) == 0.0
    values = qfx.expval(circ, [lc, qfx.Z(0)])
    np.testing.assert_allclose(values, [0.0, np.cos(0.3)], atol=1e-6)
    assert float(jax.grad(qfx.expval)(circ, lc).ops[0].theta) == 0.0


def test_repr():
    assert repr(qfx.PauliWord({2: "X", 0: "Z"})) == "Z(0) @ X(2)"
    assert repr(qfx.PauliWord()) == "I"
    assert repr(0.5 * qfx.Z(0) @ qfx.Z(1)) == "0.5 * Z(0) @ Z(1)"
    assert "Hermitian(wires=(1,))" in repr(2.0 * qfx.Hermitian(np.eye(2), wires=1))
    # A batch of observables (coefficients stacked by a vmap) prints its terms, coefficients as "c".
    stacked = jax.vmap(lambda c: c * qfx.Z(0) + qfx.X(1))(jnp.arange(3.0))
    assert stacked.coeffs.shape == (3, 2) and repr(stacked) == "c * Z(0) + c * X(1)"


def test_dtypes_follow_x64(x64):
    h = 0.5 * qfx.Z(0) + qfx.Hermitian(np.eye(2), wires=1)
    assert h.coeffs.dtype == jnp.float64
    assert h.terms[1].matrix.dtype == jnp.complex128


def test_linear_combination_takes_pauli_gates_as_terms():
    # qfx.X / Y / Z / I are observables too; LinearCombination(...) refused them as terms ("terms must be
    # PauliWord or Hermitian, got PauliZ") while arithmetic accepted them.
    direct = qfx.LinearCombination(jnp.asarray([0.5, 2.0, -1.0]), [qfx.Z(0), qfx.X(1), qfx.I(0)])
    assert direct.terms == (qfx.PauliWord({0: "Z"}), qfx.PauliWord({1: "X"}), qfx.PauliWord({}))
    circ = qfx.Circuit([qfx.RY(0.4, wires=0), qfx.H(1)])
    built = 0.5 * qfx.Z(0) + 2.0 * qfx.X(1) - 1.0 * qfx.I(0)
    assert float(qfx.expval(circ, direct)) == pytest.approx(ref.expval(circ, built), abs=1e-6)


# --- Pauli strings, building from terms, dense matrices ------------------------------------------------


def test_pauli_strings():
    assert qfx.pauli("XZIY") == qfx.PauliWord({0: "X", 1: "Z", 3: "Y"})
    assert qfx.pauli("ZZ", wires=(2, 5)) == qfx.PauliWord({2: "Z", 5: "Z"})
    assert qfx.pauli("") == qfx.PauliWord() == qfx.PauliWord.from_string("I")
    assert qfx.PauliWord.from_string("X0 Z3") == qfx.PauliWord({0: "X", 3: "Z"})
    assert qfx.PauliWord.from_string(" Y2 @ X0 I1 ") == qfx.PauliWord({0: "X", 2: "Y"})
    np.testing.assert_allclose(qfx.pauli("XZIY").matrix(wire_order=range(4)), kron(X, Z, I2, Y))
    np.testing.assert_allclose(qfx.pauli("XZIY").matrix(), kron(X, Z, Y))  # its own wires 0, 1, 3


def test_from_terms_and_from_dict():
    h = qfx.Hermitian(_herm(np.random.default_rng(3), 2), 1)
    lc = qfx.LinearCombination.from_terms(
        [(0.5, "Z0 Z1"), (-0.2, "X0"), (0.1, qfx.Z(1)), (0.3, "Z1 Z0"), (0.7, h)]
    )
    assert len(lc.terms) == 4  # Z0 Z1 merged
    expected = 0.8 * kron(Z, Z) - 0.2 * kron(X, I2) + 0.1 * kron(I2, Z) + 0.7 * kron(I2, np.asarray(h.matrix))
    np.testing.assert_allclose(qfx.matrix(lc), expected, atol=1e-6)
    d = qfx.LinearCombination.from_dict({"Z0 Z1": 0.5, qfx.pauli("XX"): -0.2})
    np.testing.assert_allclose(qfx.matrix(d), 0.5 * kron(Z, Z) - 0.2 * kron(X, X), atol=1e-6)
    # Traced coefficients: d <psi|H|psi> / d c is the term's value.
    circ = qfx.Circuit([qfx.RY(0.4, 0), qfx.CNOT((0, 1))])
    grad = jax.jit(
        jax.grad(lambda c: qfx.expval(circ, qfx.LinearCombination.from_dict({"Z0 Z1": c, "X0": 1.0})))
    )
    np.testing.assert_allclose(grad(jnp.float32(0.3)), 1.0, atol=1e-6)  # <ZZ> = 1 on this state


def test_matrix_wire_order():
    rng = np.random.default_rng(4)
    h = qfx.Hermitian(_herm(rng, 4), wires=(2, 0))
    obs = 0.3 * qfx.X(0) @ qfx.Y(2) - 0.6 * qfx.Z(1) + 0.5 * h + 0.2 * qfx.I(0)
    dense = ref.observable_matrix(obs, 3)  # on wires 0, 1, 2
    np.testing.assert_allclose(qfx.matrix(obs), dense, atol=1e-6)
    order = (2, 0, 3, 1)
    # The same operator with wire w at position order.index(w), and wire 3 idle.
    expected = ref.embed(dense, tuple(order.index(w) for w in range(3)), 4)
    np.testing.assert_allclose(obs.matrix(wire_order=order), expected, atol=1e-6)
    np.testing.assert_allclose(qfx.matrix(qfx.X(1), wire_order=[1, 0]), kron(X, I2))
    assert qfx.matrix(qfx.PauliWord()).shape == (1, 1)


def test_eigvalsh_and_ground_state():
    rng = np.random.default_rng(5)
    obs = 0.7 * qfx.Z(0) @ qfx.Z(1) - 0.4 * qfx.X(1) + 0.3 * qfx.Hermitian(_herm(rng, 2), 2) + 0.2 * qfx.Y(0)
    dense = ref.observable_matrix(obs, 3)
    np.testing.assert_allclose(qfx.eigvalsh(obs), np.linalg.eigvalsh(dense), atol=1e-5)
    energy, psi = qfx.ground_state(obs, wire_order=range(3))
    np.testing.assert_allclose(energy, np.linalg.eigvalsh(dense)[0], atol=1e-5)
    np.testing.assert_allclose(dense @ np.asarray(psi), float(energy) * np.asarray(psi), atol=1e-5)
    # Hellmann-Feynman: d E0 / d c_k = <psi0|T_k|psi0> (a non-degenerate ground state).
    lc = qfx.LinearCombination(
        jnp.asarray([0.7, -0.4, 0.2]), [qfx.pauli("ZZ"), qfx.pauli("IX"), qfx.pauli("YI")]
    )
    grad = jax.grad(lambda c: qfx.ground_state(qfx.LinearCombination(c, lc.terms))[0])(lc.coeffs)
    _, psi = qfx.ground_state(lc)
    values = [float(np.real(np.vdot(psi, ref.observable_matrix(t, 2) @ np.asarray(psi)))) for t in lc.terms]
    np.testing.assert_allclose(grad, values, atol=1e-5)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: qfx.pauli("XQ"), ValueError, "string over I, X, Y and Z"),
        (lambda: qfx.pauli("XY", wires=[0]), ValueError, "2 letters but wires=.0,. has 1"),
        (lambda: qfx.PauliWord.from_string("X0 Z"), ValueError, r"'Z' in 'X0 Z' is not a letter"),
        (lambda: qfx.PauliWord.from_string("X1 Z1"), ValueError, "wire 1 appears twice"),
        (lambda: qfx.PauliWord.from_string(3), TypeError, "expected a string such as 'X0 Z3'"),
        (lambda: qfx.LinearCombination.from_terms([0.5]), TypeError, r"expected \(coefficient, term\) pairs"),
        (lambda: qfx.LinearCombination.from_terms({"X0": 0.5}), TypeError, r"pairs, got 'X0'.*"),
        (lambda: qfx.LinearCombination.from_terms([(0.5, 3)]), TypeError, "a term is a Pauli string"),
        (
            lambda: qfx.LinearCombination.from_terms([(1.0, qfx.X(0) + qfx.Z(0))]),
            TypeError,
            "add linear combi",
        ),
        (lambda: qfx.LinearCombination.from_terms([(1j, "X0")]), TypeError, "coefficients must be real"),
        (lambda: qfx.LinearCombination.from_dict([("X0", 1.0)]), TypeError, r"expected a dict \{term: coef"),
        (lambda: qfx.matrix("X0"), TypeError, "expected a qfx observable"),
        (lambda: qfx.matrix(qfx.X(3), wire_order=[0, 1]), ValueError, r"wires \[3\], which wire_order"),
        (lambda: qfx.matrix(qfx.X(0), wire_order=[0, 0]), ValueError, "wire_order must be distinct"),
        (
            lambda: qfx.eigvalsh(qfx.Z(0), wire_order=range(14)),
            ValueError,
            r"4\*\*14 entries; qfx builds them for at most 12",
        ),
    ],
)
def test_dense_and_pauli_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


# --- counts ---------------------------------------------------------------------------------------------


def test_counts():
    circ = qfx.Circuit([qfx.H(0), qfx.RY(1.1, 1), qfx.CNOT((1, 2))])
    bits = qfx.sample(circ, key=jax.random.key(0), shots=200)
    host = np.asarray(bits)
    index = host @ np.array([4, 2, 1])
    np.testing.assert_array_equal(qfx.counts(bits), np.bincount(index, minlength=8))
    as_dict = qfx.counts(bits, as_dict=True)
    assert as_dict == {format(i, "03b"): int(c) for i, c in enumerate(np.bincount(index, minlength=8)) if c}
    assert list(as_dict) == sorted(as_dict)
    keys = jax.random.split(jax.random.key(1), 3)
    batched = jax.jit(jax.vmap(lambda k: qfx.counts(qfx.sample(circ, key=k, shots=50))))(keys)
    assert batched.shape == (3, 8) and batched.dtype == jnp.int32
    np.testing.assert_array_equal(batched.sum(axis=1), 50)
    wide = np.zeros((2, 40), np.int32)
    wide[1, 0] = 1
    assert qfx.counts(wide, as_dict=True) == {"0" * 40: 1, "1" + "0" * 39: 1}


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: qfx.counts(np.ones((2, 2)) * 0.5), TypeError, "must hold integers 0 or 1, got dtype float"),
        (lambda: qfx.counts(np.ones(3, np.int32)), ValueError, r"shape \(shots, k\)"),
        (lambda: qfx.counts(np.full((2, 2), 2)), ValueError, "samples must be 0 or 1"),
        (
            lambda: jax.jit(lambda s: qfx.counts(s, as_dict=True))(jnp.ones((2, 2), jnp.int32)),
            TypeError,
            "traced",
        ),
        (lambda: qfx.counts(np.zeros((1, 60), np.int32)), ValueError, "as_dict=True"),
    ],
)
def test_counts_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


# --- shots for probs and var ------------------------------------------------------------------------------

_PS = qfx.diff.ParameterShift()
_OBS = 0.3 * qfx.X(0) + 0.7 * qfx.Z(0) @ qfx.Z(1) - 0.4 * qfx.Y(1)


def _shots_circuit(th):
    return qfx.Circuit([qfx.RY(th[0], 0), qfx.RX(th[1], 1), qfx.CNOT((0, 1))])


def _values_and_jacobians(estimate, theta, keys):
    """The estimates and their forward-mode Jacobians (parameter shift) for each key, in one program."""
    run = jax.jit(jax.vmap(lambda th, k: (estimate(th, k), jax.jacfwd(estimate)(th, k)), in_axes=(None, 0)))
    values, jacobians = run(jnp.asarray(theta, jnp.float32), keys)
    return np.asarray(values, np.float64), np.asarray(jacobians, np.float64)


def _central(f, theta, eps=1e-6):
    return np.stack([(f(theta + e) - f(theta - e)) / (2 * eps) for e in eps * np.eye(theta.size)], axis=-1)


def test_probs_with_shots_are_frequencies_and_unbiased():
    theta = np.array([0.5, 0.8])
    exact = ref.probs(_shots_circuit(theta), [1, 0])
    one = np.asarray(qfx.probs(_shots_circuit(theta), [1, 0], shots=7, key=jax.random.key(0)))
    np.testing.assert_allclose(one * 7, np.round(one * 7), atol=1e-5)  # counts / shots
    np.testing.assert_allclose(one.sum(), 1, atol=1e-6)
    repeats, shots = 2000, 20
    keys = jax.random.split(jax.random.key(1), repeats)

    def estimate(th, key):
        return qfx.probs(_shots_circuit(th), [1, 0], shots=shots, key=key, diff=_PS)

    values, jac = _values_and_jacobians(estimate, theta, keys)
    bound = np.sqrt(exact * (1 - exact) / (shots * repeats))  # the standard deviation of the mean
    assert np.all(np.abs(values.mean(0) - exact) < 5 * bound + 1e-6)
    # Parameter shift with a fresh key per shifted evaluation: an unbiased gradient estimator.
    expected = _central(lambda th: ref.probs(_shots_circuit(th), [1, 0]), theta)
    spread = jac.std(0) / np.sqrt(repeats)
    assert np.all(np.abs(jac.mean(0) - expected) < 5 * spread + 1e-6), (jac.mean(0), expected)


def test_probs_with_more_shots_than_float32_counts_exactly():
    circ = qfx.Circuit([qfx.RY(1.0, 0)])
    shots = 2**25 + 3  # drawn in chunks of 2**24 in float32
    p = np.asarray(qfx.probs(circ, shots=shots, key=jax.random.key(2)), np.float64)
    exact = np.array([np.cos(0.5) ** 2, np.sin(0.5) ** 2])
    assert abs(p.sum() - 1) < 1e-6
    assert np.all(np.abs(p - exact) < 5 * np.sqrt(exact * (1 - exact) / shots) + 1e-7)


def test_var_with_shots_is_unbiased_at_few_shots():
    """With 2 shots the square of one estimate of <O> would be biased by Var(O) / 2, more than 5 standard
    deviations of the mean here; the product of two independent estimates is not biased. A sum of Pauli
    words, and a Hermitian term beside a Pauli word on its wire."""
    herm = qfx.Hermitian(_herm(np.random.default_rng(7), 2), 1)
    observables = [_OBS, 0.5 * herm + 0.3 * qfx.X(1)]
    theta = np.array([0.5, 0.8])
    repeats, shots = 4000, 2
    keys = jax.random.split(jax.random.key(3), repeats)

    def estimate(th, key):
        return qfx.var(_shots_circuit(th), observables, shots=shots, key=key, diff=_PS)

    values, grads = _values_and_jacobians(estimate, theta, keys)
    exact = np.array([ref.var(_shots_circuit(theta), o) for o in observables])
    spread = values.std(0) / np.sqrt(repeats)
    assert np.all(exact / shots > 5 * spread)  # the bias this test would see
    assert np.all(np.abs(values.mean(0) - exact) < 5 * spread), (values.mean(0), exact, spread)
    expected = _central(lambda th: np.array([ref.var(_shots_circuit(th), o) for o in observables]), theta)
    spread = grads.std(0) / np.sqrt(repeats)
    assert np.all(np.abs(grads.mean(0) - expected) < 5 * spread), (grads.mean(0), expected)


def test_square_is_the_operator_square():
    rng = np.random.default_rng(8)
    obs = 0.3 * qfx.X(0) + 0.7 * qfx.Z(0) - 0.4 * qfx.Z(1) @ qfx.X(0) + 0.2 * qfx.Hermitian(_herm(rng, 2), 1)
    obs = obs + 0.5 * qfx.Hermitian(_herm(rng, 4), (1, 2))
    m = ref.observable_matrix(obs, 3)
    np.testing.assert_allclose(ref.observable_matrix(square(obs), 3), m @ m, atol=1e-5)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda c: jax.grad(
                lambda t: qfx.probs(qfx.Circuit([qfx.RY(t, 0)]), shots=5, key=jax.random.key(0))[0]
            )(0.3),
            "shot-based estimate .* cannot be differentiated through the simulation",
        ),
        (lambda c: qfx.probs(c, shots=5), r"qfx.probs: shots=5 needs a PRNG key"),
        (
            lambda c: qfx.var(c, qfx.Z(0), shots=0, key=jax.random.key(0)),
            "qfx.var: shots must be a positive int",
        ),
        (
            lambda c: qfx.probs(c, shots=5, key=jax.random.key(0), backend=qfx.TensorNetwork()),
            r"qfx.probs: shots=5 is not available with backend=qfx.TensorNetwork\(\)",
        ),
        (
            lambda c: qfx.var(
                qfx.Circuit([qfx.measure(0)]), qfx.Z(0), shots=5, key=jax.random.key(0), mcm="exact"
            ),
            "qfx.var: shots= is not supported for circuits with control flow",
        ),
    ],
)
def test_shots_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make(qfx.Circuit([qfx.H(0)]))
