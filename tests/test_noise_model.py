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


def test_noise_reaches_conditionals_and_loop_bodies(x64):
    # The model's program against the same program with the channels written in by hand (as if unrolled),
    # both on the exact density matrix: a for loop (inside a Repeat layer, and on its own), a cond on a
    # measurement and a bounded while loop; and the gradient in the shared strengths by central
    # differences.
    th = jnp.asarray([0.3, 0.7, 1.1])

    def body(i, t):
        return [qfx.RX(t[i], wires=0), qfx.CNOT(wires=(0, 1))]

    def layer(t):
        return [qfx.for_loop(2, lambda i, s: [qfx.RY(s[i], wires=1)], t)]

    # Built by hand: the reference program, channels included.
    def by_hand(p, q):
        D = lambda w: qfx.DepolarizingChannel(p, wires=w)  # noqa: E731
        B = lambda w: qfx.BitFlip(q, wires=w)  # noqa: E731
        ops = [qfx.H(1), D(1)]
        for i in range(3):
            ops += [qfx.RX(th[i], wires=0), D(0), qfx.CNOT(wires=(0, 1)), D(0), D(1)]
        for t in (0.2, 0.5):
            ops += [qfx.RY(t, wires=1), D(1)]
        m, r = qfx.measure(1), qfx.measure(0)
        ops += [B(1), m, qfx.cond(m, [qfx.RY(0.4, wires=0), D(0)], [qfx.X(1), D(1)])]
        attempt = [qfx.RY(1.0, wires=0), D(0), B(0), r]
        ops += attempt + [qfx.while_loop(r, attempt, max_iterations=3)]
        return qfx.Circuit(ops + [B(0), B(1)], num_wires=2)

    def clean():
        m, r = qfx.measure(1), qfx.measure(0)
        rep = qfx.repeat(layer, jnp.asarray([[0.2, 0.5]]), num_wires=2)
        attempt = [qfx.RY(1.0, wires=0), r]
        ops = [qfx.H(1), qfx.for_loop(3, body, th), rep, m, qfx.cond(m, [qfx.RY(0.4, wires=0)], [qfx.X(1)])]
        return qfx.Circuit(ops + attempt + [qfx.while_loop(r, attempt, max_iterations=3)], num_wires=2)

    def model(p, q):
        return qfx.NoiseModel(
            [qfx.AfterGates(qfx.DepolarizingChannel(p, wires=0)), qfx.Readout(qfx.BitFlip(q, wires=0))]
        )

    obs = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(1)
    p, q = 0.05, 0.03
    np.testing.assert_allclose(qfx.probs(model(p, q)(clean())), qfx.probs(by_hand(p, q)), atol=1e-12)
    assert (
        abs(float(qfx.expval(model(p, q)(clean()), obs)) - float(qfx.expval(clean(), obs, mcm="exact")))
        > 1e-3
    )
    g = jax.grad(lambda mdl: qfx.expval(mdl(clean()), obs))(model(p, q))
    want = central_difference(lambda s: qfx.expval(by_hand(s[0], s[1]), obs), jnp.asarray([p, q]), eps=1e-6)
    np.testing.assert_allclose([g.rules[0].channel.p, g.rules[1].channel.p], want, rtol=1e-6, atol=1e-8)
