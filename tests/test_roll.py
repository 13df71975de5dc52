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
from qfx._scan import packed_scan

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


@pytest.mark.parametrize("count", [2, 3, 4, 5, 17, 64, 70])
def test_the_grouped_stack_is_jnp_stack(count):
    """Leaves traced under `jax.jit` are stacked in groups (`_roll._device_stack`): the same array as
    `jnp.stack`, with the same derivatives in both modes, for counts that fill the groups or not."""
    rng = np.random.default_rng(count)
    scalars = tuple(jnp.float32(x) for x in rng.normal(size=count))
    matrices = tuple(
        jnp.asarray(rng.normal(size=(2, 2)) + 1j * rng.normal(size=(2, 2)), jnp.complex64)
        for _ in range(count)
    )
    for xs in (scalars, matrices):
        got = jax.jit(_roll._device_stack)(xs)
        assert got.shape == (count,) + xs[0].shape and got.dtype == xs[0].dtype
        np.testing.assert_array_equal(np.asarray(got), np.stack([np.asarray(x) for x in xs]))
        weights = jnp.asarray(rng.normal(size=got.shape), got.dtype)

        def loss(ys, stack, weights=weights):
            return jnp.real(jnp.sum(weights * jnp.sin(stack(ys))))

        grads = jax.jit(jax.grad(lambda ys: loss(ys, _roll._device_stack)))(xs)
        want = jax.grad(lambda ys: loss(ys, jnp.stack))(xs)
        assert tree_allclose(grads, want, rtol=1e-6, atol=1e-6)
        tangents = tuple(jnp.ones_like(x) * (i + 1) for i, x in enumerate(xs))
        _, forward = jax.jit(lambda ys, ts: jax.jvp(_roll._device_stack, (ys,), (ts,)))(xs, tangents)
        np.testing.assert_array_equal(np.asarray(forward), np.stack([np.asarray(t) for t in tangents]))
    integers = tuple(jnp.int32(i) for i in range(count))  # not differentiated: a plain stack
    np.testing.assert_array_equal(np.asarray(jax.jit(_roll._device_stack)(integers)), np.arange(count))


def test_inside_jit_a_flat_circuit_has_the_rolled_circuits_forward_mode_hessian_and_batches():
    theta = _theta(13, 8, 3)
    obs = qfx.X(0) @ qfx.Z(1) + 0.5 * qfx.Y(2)

    def flat(t):
        return qfx.expval(_flat(t), obs)

    def rolled(t):
        return qfx.expval(_rolled(t), obs)

    small = theta[:6, :, :]  # 6 layers of 3 wires: 48 gates, the smallest run that rolls
    for t in (theta, small):  # both roll, so the grouped stack is what is differentiated
        assert any(isinstance(op, qfx.Repeat) for op in _roll.roll(_flat(t)).ops)
    tangent = jnp.asarray(np.random.default_rng(14).normal(size=theta.shape), jnp.float32)
    got = jax.jit(lambda t: jax.jvp(flat, (t,), (tangent,)))(theta)
    want = jax.jit(lambda t: jax.jvp(rolled, (t,), (tangent,)))(theta)
    assert tree_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert abs(float(got[1])) > 1e-3
    h_flat = jax.jit(jax.hessian(flat))(small)
    h_rolled = jax.jit(jax.hessian(rolled))(small)
    assert tree_allclose(h_flat, h_rolled, rtol=1e-5, atol=1e-5)
    batch = jnp.stack([theta, theta * 0.5, -theta])
    batched = jax.jit(jax.vmap(flat))(batch), jax.jit(jax.vmap(rolled))(batch)
    assert tree_allclose(*batched, rtol=1e-5, atol=1e-5)


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


def test_eager_reverse_mode_matches_the_jitted_derivatives():
    """Eager `jax.grad`, `jax.jacrev` (its pullback vmapped over cotangents) and `jax.value_and_grad` go
    through the rolled forward and pullback programs (`_reverse`): the same numbers as under `jax.jit`,
    whether the circuit, a parameter array it is built from, or the observable's coefficients are
    differentiated."""
    theta = _theta(11, 6, 3)
    obs = [qfx.Z(0) @ qfx.Z(1), qfx.X(2), qfx.Y(1)]

    def values(t):
        return qfx.expval(_flat(t), obs)

    jac = jax.jacrev(values)(theta)
    assert jac.shape == (3, *theta.shape)
    assert tree_allclose(jac, jax.jit(jax.jacrev(values))(theta), rtol=1e-5, atol=1e-6)
    by_reference = [
        central_difference(lambda t, o=o: ref.expval(_reference(t), o), np.asarray(theta)) for o in obs
    ]
    np.testing.assert_allclose(jac, np.stack(by_reference), atol=1e-4)

    circ = _flat(theta)
    value, grad = jax.value_and_grad(lambda c: qfx.expval(c, obs[1]))(circ)
    assert float(value) == pytest.approx(ref.expval(_reference(theta), obs[1]), abs=1e-5)
    assert tree_allclose(grad, jax.jit(jax.grad(lambda c: qfx.expval(c, obs[1])))(circ), rtol=1e-5, atol=1e-6)

    def weighted(w):
        return qfx.expval(circ, w[0] * obs[0] + w[1] * obs[1])

    w = jnp.asarray([0.7, -1.3], jnp.float32)
    expected = jnp.asarray([ref.expval(_reference(theta), o) for o in obs[:2]], jnp.float32)
    np.testing.assert_allclose(jax.grad(weighted)(w), expected, atol=1e-5)


def test_packed_scan_is_the_scan_it_replaces():
    """Leaves of several dtypes and shapes in, stacked outputs of several dtypes out, forwards and in
    reverse, and differentiated: the same as `lax.scan`."""
    rng = np.random.default_rng(3)
    xs = {
        "a": jnp.asarray(rng.normal(size=(5,)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(5, 2, 3)), jnp.float32),
        "c": jnp.asarray(rng.normal(size=(5, 2)) + 1j * rng.normal(size=(5, 2)), jnp.complex64),
        "k": jnp.arange(5, dtype=jnp.int32),
    }

    def step(carry, x):
        carry = (
            carry * jnp.cos(x["a"]) + jnp.sum(x["b"]) + jnp.sum(jnp.abs(x["c"])) * x["k"].astype(jnp.float32)
        )
        return carry, {
            "s": jnp.sin(carry) * x["b"],
            "c": x["c"] * carry.astype(jnp.complex64),
            "k": x["k"] + 1,
        }

    for reverse in (False, True):
        for checkpoint in (False, True):
            got = packed_scan(step, jnp.float32(0.5), xs, 5, reverse=reverse, checkpoint=checkpoint)
            want = jax.lax.scan(step, jnp.float32(0.5), xs, 5, reverse=reverse)
            assert jax.tree.structure(got) == jax.tree.structure(want)
            assert tree_allclose(got, want, rtol=1e-6, atol=1e-6)

            def loss(xs, scan):
                carry, ys = scan(xs)
                return carry + jnp.sum(ys["s"]) + jnp.sum(jnp.real(ys["c"]))

            def packed(v, reverse=reverse, checkpoint=checkpoint):
                return packed_scan(step, jnp.float32(0.5), v, 5, reverse, checkpoint)

            def plain(v, reverse=reverse):
                return jax.lax.scan(step, jnp.float32(0.5), v, length=5, reverse=reverse)

            params = {k: xs[k] for k in "abc"}
            grads = [
                jax.grad(lambda d, scan=scan: loss({**xs, **d}, scan))(params) for scan in (packed, plain)
            ]
            assert tree_allclose(*grads, rtol=1e-5, atol=1e-5)
    # No layers: the carry comes back unchanged, the stacked outputs empty.
    empty = jax.tree.map(lambda x: x[:0], xs)
    got = packed_scan(step, jnp.float32(0.5), empty, 0, checkpoint=True)
    want = jax.lax.scan(step, jnp.float32(0.5), empty, 0)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    assert tree_allclose(got, want, rtol=0, atol=0)


def test_eager_forward_mode_and_linearize_still_work():
    """`jax.linearize` linearises as `jax.vjp` does, but its linear function runs forwards, which a
    reverse-only rule cannot: it keeps JAX's own route, as do `jax.jvp` and `jax.hessian`."""
    circ = _flat(_theta(12, 5, 3))
    tangent = jax.tree.map(lambda x: jnp.full_like(x, 0.5), circ)

    def f(c):
        return qfx.expval(c, qfx.X(0) @ qfx.Z(2))

    value, linear = jax.linearize(f, circ)
    primal, forward = jax.jvp(f, (circ,), (tangent,))
    assert float(value) == pytest.approx(float(primal), abs=1e-6)
    assert float(linear(tangent)) == pytest.approx(float(forward), abs=1e-5)
    grads = jax.tree.leaves(jax.grad(f)(circ))
    along = sum(jnp.sum(g * t) for g, t in zip(grads, jax.tree.leaves(tangent), strict=True))
    assert float(forward) == pytest.approx(float(along), abs=1e-5)
    assert abs(float(forward)) > 1e-3
