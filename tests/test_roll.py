"""Flat gate lists rolled into `Repeat` blocks (`qfx/_roll.py`), and eager calls compiled once per
structure (`qfx/_measure.py: _evaluate`): same values and gradients as the dense reference and as the same
circuit written with `qfx.repeat`; no retrace and no recompile on new parameter values."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx import _roll

from . import reference as ref
from .helpers import central_difference, tree_allclose


def _layer(t, n):
    return (
        [qfx.RY(t[i, 0], wires=i) for i in range(n)]
        + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
        + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
    )


def _flat(theta, prefix=(), suffix=()):
    n = theta.shape[1]
    ops = list(prefix)
    for t in theta:
        ops += _layer(t, n)
    return qfx.Circuit(ops + list(suffix), num_wires=n)


def _rolled(theta):
    n = theta.shape[1]
    return qfx.Circuit([qfx.repeat(lambda t: _layer(t, n), theta, num_wires=n)], num_wires=n)


def _reference(theta, prefix=()):
    """`_flat(theta, prefix)` with float64 NumPy leaves, for the reference simulator (the constructors would
    round them to float32). The prefix holds no parameters."""
    theta = np.asarray(theta, np.float64)
    treedef = jax.tree.structure(_flat(jnp.zeros(theta.shape, jnp.float32), prefix=prefix))
    values = np.concatenate([np.concatenate([t[:, 0], t[:, 1]]) for t in theta])
    return jax.tree.unflatten(treedef, [np.asarray(v) for v in values])


def _theta(seed, layers, n):
    return jnp.asarray(np.random.default_rng(seed).uniform(-np.pi, np.pi, (layers, n, 2)), jnp.float32)


def test_a_layered_list_rolls_into_one_block_with_its_prefix_and_suffix():
    theta = _theta(0, 6, 4)
    circ = _flat(theta, prefix=[qfx.H(0), qfx.H(1)], suffix=[qfx.RX(0.3, wires=2)])
    rolled = _roll.roll(circ)
    kinds = [type(op).__name__ for op in rolled.ops]
    assert "Repeat" in kinds and len(rolled.ops) < len(circ.ops)
    blocks = [op for op in rolled.ops if isinstance(op, qfx.Repeat)]
    assert sum(op.length * len(op.body.ops) for op in blocks) >= 5 * len(_layer(theta[0], 4))
    # Lossless: unrolled again, the same gates with the same leaves, in the same order.
    again = ref.flatten_ops(rolled.ops)
    assert [type(op) for op in again] == [type(op) for op in circ.ops]
    assert [op.wires for op in again] == [op.wires for op in circ.ops]
    assert tree_allclose(qfx.Circuit(again, circ.num_wires), circ, rtol=0, atol=0)


def test_lists_without_a_period_are_left_alone():
    rng = np.random.default_rng(1)
    gates = [qfx.RX, qfx.RY, qfx.RZ]
    ops = [gates[i % 3](float(a), wires=i % 5) for i, a in enumerate(rng.uniform(-3, 3, 60))]
    # Wires cycle with period 5 and kinds with period 3: together a period of 15, so break it.
    ops = [op for k, op in enumerate(ops) if k % 7 != 3]
    circ = qfx.Circuit(ops, num_wires=5)
    found = _roll._best_run(_roll._codes(circ.ops))
    assert found is None or found[1] * found[2] < _roll.ROLL_MIN_GATES
    assert _roll.roll(circ) is circ
    short = _flat(_theta(2, 2, 2))  # a period, but too few gates to be worth a scan
    assert _roll.roll(short) is short


@pytest.mark.parametrize("method", ["auto", "backprop", "adjoint", "parameter_shift"])
def test_flat_and_rolled_circuits_agree_with_the_reference(method):
    diff = {
        "auto": qfx.diff.Auto(),
        "backprop": qfx.diff.Backprop(),
        "adjoint": qfx.diff.Adjoint(),
        "parameter_shift": qfx.diff.ParameterShift(),
    }[method]
    n, layers = 4, 5
    theta = _theta(3, layers, n)
    obs = 0.7 * qfx.Z(0) @ qfx.Z(3) - 0.4 * qfx.X(1)
    prefix = [qfx.H(2)]

    def flat(t):
        return qfx.expval(_flat(t, prefix=prefix), obs, diff=diff)

    def rolled(t):
        return qfx.expval(qfx.Circuit(prefix + [_rolled(t).ops[0]], num_wires=n), obs, diff=diff)

    value = float(flat(theta))
    expected = ref.expval(_reference(theta, prefix), obs)
    assert value == pytest.approx(expected, abs=1e-5)
    assert value == pytest.approx(float(rolled(theta)), abs=1e-5)
    grad = jax.grad(flat)(theta)
    assert tree_allclose(grad, jax.grad(rolled)(theta), rtol=1e-5, atol=1e-5)
    by_reference = central_difference(lambda t: ref.expval(_reference(t, prefix), obs), np.asarray(theta))
    np.testing.assert_allclose(grad, by_reference, atol=1e-4)
    assert float(jnp.max(jnp.abs(grad))) > 0.05  # not a trivial case


def test_the_gradient_keeps_the_flat_circuits_shape():
    circ = _flat(_theta(4, 6, 3))
    grad = jax.grad(lambda c: qfx.expval(c, qfx.Z(0)))(circ)
    assert jax.tree.structure(grad) == jax.tree.structure(circ)
    assert len(grad.ops) == len(circ.ops)


def test_rolling_works_inside_jit_of_a_circuit_built_from_an_array():
    theta = _theta(5, 8, 3)
    obs = qfx.Z(0) + qfx.Z(2)
    f = jax.jit(jax.value_and_grad(lambda t: qfx.expval(_flat(t), obs)))
    value, grad = f(theta)
    g = jax.jit(jax.value_and_grad(lambda t: qfx.expval(_rolled(t), obs)))
    assert tree_allclose((value, grad), g(theta), rtol=1e-5, atol=1e-5)
    jaxpr = str(jax.make_jaxpr(lambda t: qfx.expval(_flat(t), obs))(theta))
    assert "scan" in jaxpr


def _count(monkeypatch) -> list:
    """Counts the traces of the default method's rule (it runs only when a program is traced)."""
    calls = []
    call = qfx.diff.Auto.__call__
    monkeypatch.setattr(qfx.diff.Auto, "__call__", lambda self, *a: calls.append(None) or call(self, *a))
    return calls


def test_a_second_eager_call_neither_retraces_nor_recompiles(monkeypatch, caplog):
    obs = qfx.Z(0) @ qfx.Z(1)
    traces = _count(monkeypatch)
    first = qfx.expval(_flat(_theta(6, 6, 3)), obs)
    assert len(traces) == 1
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        caplog.clear()
        second = qfx.expval(_flat(_theta(7, 6, 3)), obs)
        assert not [r for r in caplog.records if "Compiling" in r.getMessage()]
    assert len(traces) == 1
    assert float(first) != float(second)
    expected = ref.expval(_reference(_theta(7, 6, 3)), obs)
    assert float(second) == pytest.approx(expected, abs=1e-5)


def test_eager_gradients_reuse_their_compiled_programs(monkeypatch, caplog):
    obs = qfx.Z(0) @ qfx.Z(1)

    def cost(c):
        return qfx.expval(c, obs)

    traces = _count(monkeypatch)
    jax.grad(cost)(_flat(_theta(8, 6, 3)))
    count = len(traces)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        caplog.clear()
        grad = jax.grad(cost)(_flat(_theta(9, 6, 3)))
        compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
        assert not [m for m in compiled if "_evaluate" in m], compiled
    assert len(traces) == count
    expected = jax.jit(jax.grad(cost))(_flat(_theta(9, 6, 3)))
    assert tree_allclose(grad, expected, rtol=1e-5, atol=1e-6)


def test_a_new_structure_compiles_anew():
    obs = qfx.Z(0)
    a = qfx.expval(_flat(_theta(10, 4, 3)), obs)
    b = qfx.expval(_flat(_theta(10, 4, 3), suffix=[qfx.X(0)]), obs)
    assert float(a) == pytest.approx(-float(b), abs=1e-5)
