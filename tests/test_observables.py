"""Observables: arithmetic, simplification, leaves, and values against matrices built here with np.kron."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx

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
