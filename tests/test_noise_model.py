"""qfx.NoiseModel: the circuits it makes, and gradients with respect to its shared strengths."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx

from . import reference_mixed as mref
from .helpers import central_difference, tree_allclose


def _model():
    return qfx.NoiseModel(
        [
            qfx.AfterGates(qfx.DepolarizingChannel(0.05, wires=0), gates=(qfx.CNOT,)),
            qfx.AfterGates(qfx.AmplitudeDamping(0.1, wires=0), gates=(qfx.RY,), wires=(1,)),
            qfx.AfterGates(qfx.PauliError("ZZ", 0.02, wires=(0, 1)), gates=(qfx.CZ,)),
            qfx.Readout(qfx.BitFlip(0.03, wires=0)),
        ]
    )


def _circuit():
    return qfx.Circuit(
        [qfx.RY(0.3, wires=0), qfx.RY(0.8, wires=1), qfx.CNOT(wires=(0, 1)), qfx.CZ(wires=(1, 2)), qfx.H(2)]
    )


def test_rules_insert_their_channels_where_they_say():
    noisy = _model()(_circuit())
    names = [(op.name, op.wires) for op in noisy.ops]
    assert names == [
        ("RY", (0,)),
        ("RY", (1,)),
        ("AmplitudeDamping", (1,)),
        ("CNOT", (0, 1)),
        ("DepolarizingChannel", (0,)),
        ("DepolarizingChannel", (1,)),
        ("CZ", (1, 2)),
        ("PauliError", (1, 2)),
        ("Hadamard", (2,)),
        ("BitFlip", (0,)),
        ("BitFlip", (1,)),
        ("BitFlip", (2,)),
    ]


def test_gradient_with_respect_to_shared_strengths_matches_central_differences(x64):
    circuit, obs = _circuit(), qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.Z(2) + 0.3 * qfx.X(1)
    model = _model()
    g = jax.grad(lambda m: qfx.expval(m(circuit), obs))(model)
    want = central_difference(lambda m: mref.expval(m(circuit), obs), model)
    assert tree_allclose(g, want, rtol=1e-6, atol=1e-8)
    assert all(np.all(x != 0) for x in jax.tree.leaves(g))


def test_noise_in_repeat_blocks_shares_the_strengths():
    block = qfx.repeat(lambda t: [qfx.RY(t, wires=0), qfx.CNOT(wires=(0, 1))], jnp.asarray([0.3, 0.5, 0.7]))
    circuit = qfx.Circuit([block])
    model = qfx.NoiseModel([qfx.AfterGates(qfx.DepolarizingChannel(0.05, wires=0))])
    flat = qfx.Circuit([op for k in range(3) for op in block.layer(k).ops])

    def f(m, c):
        return qfx.expval(m(c), qfx.Z(1))

    value, grad = jax.value_and_grad(f)(model, circuit)
    flat_value, flat_grad = jax.value_and_grad(f)(model, flat)
    assert abs(float(value) - mref.expval(model(flat), qfx.Z(1))) < 1e-5
    assert abs(float(flat_value) - float(value)) < 1e-5
    assert tree_allclose(grad, flat_grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: qfx.AfterGates(qfx.RX(0.1, wires=0)), TypeError, "qfx.AfterGates: expected a noise channel"),
        (
            lambda: qfx.AfterGates(qfx.BitFlip(0.1, wires=0), gates=("RX",)),
            TypeError,
            "gates must be gate classes",
        ),
        (lambda: qfx.AfterGates(qfx.BitFlip(0.1, wires=0), wires=(-1,)), ValueError, "wires must be None"),
        (lambda: qfx.Readout(qfx.PauliError("XX", 0.1, wires=(0, 1))), ValueError, "must act on one wire"),
        (lambda: qfx.NoiseModel([qfx.BitFlip(0.1, wires=0)]), TypeError, "rules must be qfx.AfterGates"),
        (lambda: qfx.NoiseModel([])(_circuit().ops), TypeError, "qfx.NoiseModel: expected a qfx.Circuit"),
        (
            lambda: qfx.NoiseModel([qfx.AfterGates(qfx.PauliError("XX", 0.1, wires=(0, 1)))])(_circuit()),
            ValueError,
            "acts on 2 wires, so it cannot follow RY",
        ),
    ],
)
def test_noise_model_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_a_model_is_a_pytree_of_its_strengths():
    leaves = jax.tree.leaves(_model())
    assert [float(x) for x in leaves] == pytest.approx([0.05, 0.1, 0.02, 0.03])
    assert eqx.tree_equal(_model(), _model())
