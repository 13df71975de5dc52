"""Circuits: construction, composition, inverse, and `Repeat` blocks under `lax.scan`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx

from . import reference as ref
from .helpers import central_difference, random_circuit, random_state, tree_allclose


def _zero(n):
    psi = np.zeros(2**n, dtype=complex)
    psi[0] = 1
    return psi


# --- the Circuit container -----------------------------------------------------------------------


def test_num_wires_inferred_or_given():
    assert qfx.Circuit([qfx.H(0), qfx.CNOT((0, 3))]).num_wires == 4
    assert qfx.Circuit([qfx.H(0)], num_wires=3).num_wires == 3
    assert qfx.Circuit([], num_wires=1).num_wires == 1  # without num_wires: an error (test_errors.py)
    np.testing.assert_allclose(qfx.state(qfx.Circuit([], num_wires=2)), _zero(2))


def test_wires_may_be_concrete_integer_arrays():
    # Wires are static: Python ints, NumPy integers, and concrete integer arrays (NumPy or JAX) all name them.
    as_ints = qfx.Circuit([qfx.H(1), qfx.CNOT((1, 0)), qfx.RY(0.3, 2)])
    as_arrays = qfx.Circuit([qfx.H(jnp.asarray(1)), qfx.CNOT(np.array([1, 0])), qfx.RY(0.3, np.int64(2))])
    assert [op.wires for op in as_arrays.ops] == [op.wires for op in as_ints.ops]
    assert all(type(w) is int for op in as_arrays.ops for w in op.wires)
    np.testing.assert_allclose(qfx.probs(as_ints, wires=jnp.asarray(2)), qfx.probs(as_ints, wires=2))
    np.testing.assert_allclose(qfx.probs(as_ints, wires=np.array([2, 0])), qfx.probs(as_ints, wires=(2, 0)))
    # A traced value cannot choose a wire: the error says so.
    with pytest.raises(TypeError, match="a traced value cannot choose a wire"):
        jax.jit(lambda w: qfx.H(w))(1)
    with pytest.raises(ValueError, match="wires must be a sequence of distinct non-negative ints \\(static"):
        jax.jit(lambda w: qfx.probs(as_ints, wires=w))(1)


def test_counts_may_be_concrete_integer_arrays():
    # Every static count takes what wires take: a 0-d integer array (NumPy or JAX) is its int.
    three, two = jnp.asarray(3), np.int64(2)
    assert qfx.Circuit([qfx.H(0)], num_wires=three).num_wires == 3
    assert type(qfx.Circuit([qfx.H(0)], num_wires=three).num_wires) is int
    np.testing.assert_allclose(qfx.zero_state(two), qfx.zero_state(2))
    assert qfx.measure(jnp.asarray(1)).wire == 1
    assert qfx.PauliWord({np.int64(1): "Z"}) == qfx.PauliWord({1: "Z"})
    body = qfx.Circuit([qfx.X(0)])
    assert qfx.Repeat(body, length=two).length == 2
    circ = qfx.Circuit([qfx.H(0)], num_wires=2)
    key = jax.random.key(0)
    shots = qfx.sample(circ, shots=jnp.asarray(5), key=key)
    np.testing.assert_array_equal(shots, qfx.sample(circ, shots=5, key=key))


def test_circuit_of_a_circuit_keeps_its_wires():
    circ = qfx.Circuit([qfx.H(0)], num_wires=3)
    assert qfx.Circuit(circ).num_wires == 3 and qfx.Circuit(circ, num_wires=4).num_wires == 4
    assert qfx.probs(qfx.Circuit(circ)).shape == (8,)


def test_len_iter_getitem():
    ops = [qfx.H(0), qfx.RX(0.2, wires=1), qfx.CNOT((1, 0))]
    circ = qfx.Circuit(ops)
    assert len(circ) == 3
    assert list(circ) == ops
    assert circ[1] == ops[1]
    assert circ[-1] == ops[2]
    assert circ.ops == tuple(ops)


def test_addition_concatenates():
    a = qfx.Circuit([qfx.H(0), qfx.RY(0.3, wires=1)])
    b = qfx.Circuit([qfx.CNOT((1, 2)), qfx.RZ(-0.4, wires=0)])
    ab = a + b
    assert ab.num_wires == 3
    assert list(ab) == list(a) + list(b)
    expected = ref.final_state(
        qfx.Circuit(list(b), num_wires=3), ref.final_state(qfx.Circuit(list(a), num_wires=3))
    )
    np.testing.assert_allclose(np.asarray(qfx.state(ab)), expected, atol=1e-6)


def test_inverse_undoes_circuit():
    rng = np.random.default_rng(0)
    circ = random_circuit(rng, 4, 12)
    inv = circ.inverse()
    assert len(inv) == len(circ) and inv.num_wires == circ.num_wires
    assert [op.wires for op in inv] == [op.wires for op in reversed(circ.ops)]
    np.testing.assert_allclose(ref.circuit_unitary(inv), ref.circuit_unitary(circ).conj().T, atol=1e-5)
    psi = random_state(rng, 4)
    np.testing.assert_allclose(np.asarray(qfx.state(circ + inv, initial_state=psi)), psi, atol=1e-5)
    np.testing.assert_allclose(np.asarray(qfx.state(circ + inv)), _zero(4), atol=1e-5)


def test_inverse_keeps_parameter_leaves():
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), qfx.Rot(0.1, 0.2, 0.3, wires=1), qfx.S(0)])
    inv = circ.inverse()
    assert [float(x) for x in jax.tree.leaves(inv)] == pytest.approx([0.1, 0.2, 0.3, 0.3])


def test_repr():
    circ = qfx.Circuit([qfx.H(0), qfx.RX(0.5, wires=1)])
    assert repr(circ) == "Circuit(num_wires=2, ops=[Hadamard(wires=0), RX(0.5, wires=1)])"


# Drawings: tests/test_drawing.py.


# --- Repeat --------------------------------------------------------------------------------------

N = 3


def _layer(t):
    return qfx.Circuit(
        [
            qfx.RY(t[0], wires=0),
            qfx.RX(t[1], wires=2),
            qfx.CNOT((2, 0)),
            qfx.IsingXY(t[2], wires=(1, 2)),
            qfx.S(1),
            qfx.CRZ(t[3], wires=(0, 1)),
        ],
        num_wires=N,
    )


def _thetas(seed, layers=4):
    return jnp.asarray(np.random.default_rng(seed).uniform(-np.pi, np.pi, size=(layers, 4)), jnp.float32)


def _repeated(thetas):
    return qfx.Circuit([qfx.H(0), qfx.repeat(_layer, thetas), qfx.T(2)], num_wires=N)


def _unrolled(thetas):
    ops = [qfx.H(0)] + [op for t in thetas for op in _layer(t).ops] + [qfx.T(2)]
    return qfx.Circuit(ops, num_wires=N)


def test_repeat_builds_stacked_layers():
    thetas = _thetas(0)
    block = qfx.repeat(_layer, thetas)
    assert isinstance(block, qfx.Repeat)
    assert block.length == 4 and block.wires == (0, 1, 2)
    assert block.body.ops[0].theta.shape == (4,)
    assert float(block.layer(2).ops[1].theta) == pytest.approx(float(thetas[2, 1]))
    # The same block from an explicitly vmapped body; a layer function may also return a list.
    assert tree_allclose(qfx.Repeat(eqx.filter_vmap(_layer)(thetas)), block)
    as_list = qfx.repeat(lambda t: list(_layer(t).ops), thetas, num_wires=N)
    assert tree_allclose(as_list, block)
    # Non-array arguments pass to every layer unchanged (eqx.filter_vmap's rule).
    with_static = qfx.repeat(lambda t, scale: _layer(scale * t), thetas, 1)
    assert tree_allclose(with_static, block)


def test_repeat_equals_unrolled_and_reference():
    thetas = _thetas(1)
    scanned = qfx.state(_repeated(thetas))
    np.testing.assert_allclose(np.asarray(scanned), np.asarray(qfx.state(_unrolled(thetas))), atol=1e-6)
    np.testing.assert_allclose(np.asarray(scanned), ref.final_state(_repeated(thetas)), atol=1e-5)


def test_repeat_without_parameters_needs_length():
    block = qfx.Repeat(qfx.Circuit([qfx.H(0), qfx.CNOT((0, 1))]), length=3)
    assert block.length == 3
    circ = qfx.Circuit([qfx.RY(0.3, wires=1), block])
    np.testing.assert_allclose(np.asarray(qfx.state(circ)), ref.final_state(circ), atol=1e-6)
    # qfx.repeat takes the length from its arguments, whether or not the layer uses them.
    built = qfx.repeat(lambda t: [qfx.H(0), qfx.CNOT((0, 1))], jnp.zeros((3, 2)))
    assert built.length == 3
    np.testing.assert_allclose(qfx.state(qfx.Circuit([qfx.RY(0.3, wires=1), built])), qfx.state(circ))


def test_gradient_through_repeat(x64):
    thetas = _thetas(2, layers=3)
    obs = qfx.Z(0) @ qfx.X(1) - 0.5 * qfx.Y(2)
    grad_fn = jax.jit(jax.grad(qfx.expval))
    circ = _repeated(thetas)
    grad = grad_fn(circ, obs)
    assert isinstance(grad.ops[1], qfx.Repeat)
    assert grad.ops[1].body.ops[0].theta.shape == (3,)
    expected = central_difference(lambda c: ref.expval(c, obs), circ)
    assert tree_allclose(grad, expected, rtol=1e-6, atol=1e-8)


def test_inverse_of_circuit_with_repeat():
    circ = _repeated(_thetas(3))
    inv = circ.inverse()
    assert isinstance(inv.ops[1], qfx.Repeat)
    np.testing.assert_allclose(ref.circuit_unitary(inv), ref.circuit_unitary(circ).conj().T, atol=1e-5)
    np.testing.assert_allclose(np.asarray(qfx.state(circ + inv)), _zero(N), atol=1e-5)


def test_nested_repeat_and_its_inverse():
    def inner(t):
        return qfx.Circuit([qfx.RX(t, wires=0), qfx.CNOT((0, 1)), qfx.RZ(t, wires=1)])

    def outer(ts):  # ts: (3,) -> an inner block of 3 layers, then one more gate
        return qfx.Circuit([qfx.repeat(inner, ts), qfx.RY(ts[0], wires=1)])

    block = qfx.repeat(outer, jnp.linspace(-1.0, 2.0, 6).reshape(2, 3))
    assert block.length == 2 and block.body.ops[0].length == 3
    circ = qfx.Circuit([qfx.H(1), block])
    np.testing.assert_allclose(np.asarray(qfx.state(circ)), ref.final_state(circ), atol=1e-5)
    inv = circ.inverse()
    np.testing.assert_allclose(ref.circuit_unitary(inv), ref.circuit_unitary(circ).conj().T, atol=1e-5)
    np.testing.assert_allclose(np.asarray(qfx.state(circ + inv)), _zero(2), atol=1e-5)


@pytest.mark.parametrize("n", [3, 10])  # 10: where runs of like gates are grouped into staircases
def test_empty_repeat_is_a_no_op(n):
    empty = qfx.Repeat(qfx.Circuit([], num_wires=n), length=2)
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), empty], num_wires=n)
    assert float(qfx.expval(circ, qfx.Z(0))) == pytest.approx(np.cos(0.3), abs=1e-6)
    assert qfx.draw(circ).split("\n")[0].startswith("0: ─RX(0.30)")


def test_repeat_repr_and_draw():
    circ = _repeated(_thetas(4, layers=7))
    assert "Repeat(length=7" in repr(circ)
    text = qfx.draw(circ)
    lines = text.split("\n")
    assert len(lines) == N
    # The block is drawn once, with its count.
    assert text.count("×7") == 1
    assert text.count("IsingXY") == 2  # once per wire of the one drawn layer
    assert "─H─" in lines[0] and "─T─" in lines[2]
