"""The tensor-network backend: values and derivatives against the dense reference and the state vector,
light cones, path caching, jit / vmap, 60 qubits, and the cuTensorNet bridge (with a CPU stand-in)."""

import functools
import importlib.util
import subprocess
import sys
import time
import types
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import opt_einsum
import pytest

import qfx
from qfx import _memory
from qfx._tensornet import _cutensornet, _network, _operands

from . import reference as ref
from .helpers import ALL_GATES, ANGLE_GATES, random_circuit, random_unitary, tree_allclose

TN = qfx.TensorNetwork()


def _gpu_ready() -> bool:
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        return False
    return bool(gpus) and all(importlib.util.find_spec(m) for m in ("cuquantum", "cupy"))


gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _gpu_ready(), reason="needs an NVIDIA GPU, cuquantum-python and cupy"),
]


def _observable(rng, n):
    """A sum of Pauli words (one of them the identity) and a Hermitian term, on random wires."""
    w = [int(x) for x in rng.choice(n, size=min(n, 4), replace=False)]
    herm = random_unitary(rng, 4)
    herm = herm + herm.conj().T
    return (
        0.7 * qfx.Z(w[0]) @ qfx.Z(w[1])
        - 0.4 * qfx.X(w[2])
        + 0.3 * qfx.Y(w[0]) @ qfx.X(w[3 % len(w)])
        + 0.25 * qfx.I(0)
        + 0.5 * qfx.Hermitian(herm, wires=(w[1], w[2]))
    )


def _brickwall(n: int, depth: int, thetas) -> qfx.Circuit:
    """A hardware-efficient circuit: RY and RZ on every wire, then CNOTs on alternating pairs."""
    ops = []
    for layer in range(depth):
        ops += [qfx.RY(thetas[layer, i, 0], wires=i) for i in range(n)]
        ops += [qfx.RZ(thetas[layer, i, 1], wires=i) for i in range(n)]
        ops += [qfx.CNOT(wires=(i, i + 1)) for i in range(layer % 2, n - 1, 2)]
    return qfx.Circuit(ops, num_wires=n)


# --- values against the dense reference ------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_values_match_reference(x64, seed):
    rng = np.random.default_rng(seed)
    n = 4
    circ = random_circuit(rng, n, 16)  # every gate family, QubitUnitary and Controlled included
    obs = _observable(rng, n)
    np.testing.assert_allclose(qfx.expval(circ, obs, backend=TN), ref.expval(circ, obs), atol=1e-10)
    both = qfx.expval(circ, [obs, qfx.Z(2)], backend=TN)
    np.testing.assert_allclose(both, [ref.expval(circ, obs), ref.expval(circ, qfx.Z(2))], atol=1e-10)
    for wires in [(2,), (3, 0), (1, 2, 0), None]:
        np.testing.assert_allclose(qfx.probs(circ, wires, backend=TN), ref.probs(circ, wires), atol=1e-10)
    psi = ref.final_state(circ)
    for index in [0, 5, 11]:
        bits = [(index >> (n - 1 - i)) & 1 for i in range(n)]
        np.testing.assert_allclose(qfx.amplitude(circ, bits, backend=TN), psi[index], atol=1e-10)
        np.testing.assert_allclose(qfx.amplitude(circ, bits), psi[index], atol=1e-10)
    assert np.allclose(qfx.amplitude(circ, "0101", backend=TN), psi[5], atol=1e-10)


def test_amplitudes_under_vmap_over_bitstrings():
    rng = np.random.default_rng(2)
    circ = random_circuit(rng, 3, 10, ANGLE_GATES)
    bits = jnp.asarray([[(i >> (2 - j)) & 1 for j in range(3)] for i in range(8)])
    amps = jax.vmap(lambda b: qfx.amplitude(circ, b, backend=TN))(bits)
    np.testing.assert_allclose(amps, ref.final_state(circ), atol=1e-5)


# --- values and gradients against the state vector -------------------------------------------------


def test_agrees_with_state_vector_14_qubits(x64):
    rng = np.random.default_rng(7)
    n = 14
    circ = random_circuit(rng, n, 30, ANGLE_GATES)
    obs = 0.6 * qfx.Z(0) @ qfx.Z(7) - 0.3 * qfx.X(3) + 0.2 * qfx.Y(5) @ qfx.Z(9) @ qfx.X(13)

    def energy(c, o, backend):
        return qfx.expval(c, o, backend=backend)

    value, grads = jax.jit(jax.value_and_grad(energy, argnums=(0, 1)), static_argnums=2)(circ, obs, TN)
    want, want_grads = jax.jit(jax.value_and_grad(energy, argnums=(0, 1)), static_argnums=2)(circ, obs, None)
    np.testing.assert_allclose(value, want, atol=1e-10)
    assert tree_allclose(grads, want_grads, rtol=1e-8, atol=1e-10)
    p = qfx.probs(circ, (13, 4), backend=TN)
    np.testing.assert_allclose(p, qfx.probs(circ, (13, 4)), atol=1e-10)


@pytest.mark.parametrize("method", ["backprop", "parameter_shift", "finite_diff"])
def test_gradients_of_every_method(x64, method):
    diff = {
        "backprop": qfx.diff.Backprop(),
        "parameter_shift": qfx.diff.ParameterShift(),
        "finite_diff": qfx.diff.FiniteDiff(),
    }[method]
    rng = np.random.default_rng(3)
    circ = random_circuit(rng, 4, 10, ANGLE_GATES)
    obs = 0.5 * qfx.Z(0) @ qfx.Z(1) - 0.3 * qfx.X(2) + 0.2 * qfx.Y(3) @ qfx.X(1)
    tol = dict(rtol=1e-7, atol=1e-8) if method == "finite_diff" else dict(rtol=1e-9, atol=1e-10)

    @jax.jit
    def grads(c, o):
        tn = jax.grad(lambda c, o: qfx.expval(c, o, backend=TN, diff=diff), argnums=(0, 1))(c, o)
        sv = jax.grad(lambda c, o: qfx.expval(c, o), argnums=(0, 1))(c, o)
        tn_p = jax.jacrev(lambda c: qfx.probs(c, (3, 0), backend=TN, diff=diff))(c)
        sv_p = jax.jacrev(lambda c: qfx.probs(c, (3, 0)))(c)
        return (tn, tn_p), (sv, sv_p)

    got, want = grads(circ, obs)
    assert tree_allclose(got, want, **tol)
    if method == "finite_diff":  # an amplitude is not linear in |psi><psi|: no shift rule
        amp = jax.jit(
            jax.grad(lambda c, b: jnp.imag(qfx.amplitude(c, "1011", backend=b, diff=diff))), static_argnums=1
        )
        want = jax.jit(jax.grad(lambda c: jnp.imag(qfx.amplitude(c, "1011"))))(circ)
        # On the state vector too (its integer basis index was once taken for a sign of shots).
        assert tree_allclose(amp(circ, TN), want, **tol) and tree_allclose(amp(circ, None), want, **tol)


def test_second_derivatives(x64):
    circ = qfx.Circuit(
        [qfx.RX(0.3, wires=0), qfx.CRY(0.7, wires=(0, 1)), qfx.RZ(-0.4, wires=1), qfx.RY(1.1, wires=1)]
    )
    obs = qfx.Z(0) @ qfx.X(1) + 0.5 * qfx.Y(1)

    @jax.jit
    def hessians(c):
        want = jax.hessian(lambda c: qfx.expval(c, obs))(c)
        bp = jax.hessian(lambda c: qfx.expval(c, obs, backend=TN))(c)
        ps = jax.hessian(lambda c: qfx.expval(c, obs, backend=TN, diff=qfx.diff.ParameterShift()))(c)
        return want, bp, ps

    want, bp, ps = hessians(circ)
    assert tree_allclose(bp, want, atol=1e-9)
    assert tree_allclose(ps, want, atol=1e-9)


def test_unitary_entries_differentiate_along_unitary_directions(x64):
    # The network drops gates outside a term's light cone because U^dagger U = I, so derivatives with
    # respect to QubitUnitary entries agree with the state vector's along directions that keep U unitary.
    rng = np.random.default_rng(5)
    circ = random_circuit(
        rng, 4, 14, {k: ALL_GATES[k] for k in ("QubitUnitary2", "QubitUnitary1", "CNOT", "RY")}
    )
    obs = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(3) + qfx.I(2)

    def direction(x):
        if x.ndim == 2:  # U -> U A with A anti-Hermitian
            a = rng.normal(size=x.shape) + 1j * rng.normal(size=x.shape)
            return jnp.asarray(np.asarray(x) @ (a - a.conj().T))
        return jnp.asarray(rng.normal(size=x.shape))

    tangent = jax.tree.map(direction, circ)
    _, got = jax.jvp(lambda c: qfx.expval(c, obs, backend=TN), (circ,), (tangent,))
    _, want = jax.jvp(lambda c: qfx.expval(c, obs), (circ,), (tangent,))
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_repeat_blocks(x64):
    n = 4

    def layer(theta):
        return [qfx.RY(theta[i], wires=i) for i in range(n)] + [qfx.CZ((i, i + 1)) for i in range(n - 1)]

    thetas = jnp.asarray(np.random.default_rng(6).uniform(-np.pi, np.pi, (3, n)))
    circ = qfx.Circuit([qfx.H(0), qfx.repeat(layer, thetas, num_wires=n), qfx.RX(0.3, wires=2)])
    obs = qfx.X(0) @ qfx.Z(3) - qfx.Z(1)
    f = jax.jit(jax.value_and_grad(lambda c, backend: qfx.expval(c, obs, backend=backend)), static_argnums=1)
    assert tree_allclose(f(circ, TN), f(circ, None), rtol=1e-9, atol=1e-10)


def test_congruent_terms_are_stacked():
    # The interior terms of a translation-invariant sum have networks of one shape: contracted together.
    n, depth = 8, 2
    thetas = jnp.asarray(np.random.default_rng(8).uniform(-np.pi, np.pi, (depth, n, 2)), jnp.float32)
    circ = _brickwall(n, depth, thetas)
    obs = sum(qfx.Z(i) @ qfx.Z(i + 1) for i in range(n - 1))
    skeleton = _operands._skeleton(circ.ops)
    shapes = {_network._expval_network(skeleton, ("pauli", t.word), TN.optimize).shape_key for t in obs.terms}
    assert len(shapes) < len(obs.terms)
    f = jax.jit(jax.value_and_grad(lambda c, backend: qfx.expval(c, obs, backend=backend)), static_argnums=1)
    assert tree_allclose(f(circ, TN), f(circ, None), rtol=1e-4, atol=1e-5)


# --- light cones, caching, compilation -----------------------------------------------------------


def test_gates_outside_the_light_cone_are_dropped():
    # A NaN-parameter gate outside the cone would poison the state vector, not the network.
    good = [qfx.H(0), qfx.CNOT((0, 1)), qfx.RY(0.4, wires=1)]
    circ = qfx.Circuit(good + [qfx.RX(jnp.nan, wires=3), qfx.CNOT((2, 3)), qfx.RY(0.2, wires=2)])
    want = ref.expval(qfx.Circuit(good, num_wires=2), qfx.Z(0) @ qfx.X(1))
    np.testing.assert_allclose(qfx.expval(circ, qfx.Z(0) @ qfx.X(1), backend=TN), want, atol=1e-6)
    np.testing.assert_allclose(
        qfx.probs(circ, (1,), backend=TN), ref.probs(qfx.Circuit(good), (1,)), atol=1e-6
    )
    assert np.isnan(qfx.expval(circ, qfx.Z(0)))  # the state vector sees the NaN
    grads = jax.grad(lambda c: qfx.expval(c, qfx.Z(0) @ qfx.X(1), backend=TN))(circ)
    assert float(grads.ops[3].theta) == 0.0 and np.isfinite(float(grads.ops[2].theta))
    keep, cone = _network._light_cone(_operands._skeleton(circ.ops), (1,))
    assert keep == (0, 1, 2) and cone == {0, 1}


def test_paths_are_cached_and_new_parameters_do_not_recompile():
    _network.clear_cache()
    rng = np.random.default_rng(9)
    circ = random_circuit(rng, 5, 12, ANGLE_GATES)
    obs = qfx.Z(0) @ qfx.Z(4) + qfx.X(2)
    traces = []

    @jax.jit
    def f(c):
        traces.append(None)
        return qfx.expval(c, obs, backend=TN)

    f(circ)
    misses = _network._expval_network.cache_info().misses
    assert misses == 2  # one network per Pauli word
    f(jax.tree.map(lambda x: x + 0.1, circ))
    assert len(traces) == 1
    # Outside jit too, new parameters reuse the cached networks and paths (or the compiled program).
    qfx.expval(jax.tree.map(lambda x: x * 0.5, circ), obs, backend=TN)
    assert _network._expval_network.cache_info().misses == misses


def test_vmap_over_a_batch_of_circuits():
    def make(theta):
        return qfx.Circuit([qfx.RY(theta, wires=0), qfx.CNOT((0, 1)), qfx.RX(2 * theta, wires=1)])

    thetas = jnp.linspace(0.0, 1.0, 5)
    batch = eqx.filter_vmap(make)(thetas)
    obs = qfx.Z(0) @ qfx.Z(1) + qfx.X(1)
    f = jax.jit(
        jax.vmap(jax.value_and_grad(lambda c, b: qfx.expval(c, obs, backend=b)), (0, None)), static_argnums=1
    )
    assert tree_allclose(f(batch, TN), f(batch, None), atol=1e-5)


# --- 60 qubits on the CPU ------------------------------------------------------------------------


def test_60_qubits_local_expectation_and_gradient():
    n, depth, wire = 60, 4, 30
    thetas = jnp.asarray(np.random.default_rng(10).uniform(0, 2 * np.pi, (depth, n, 2)), jnp.float32)
    circ = _brickwall(n, depth, thetas)
    with pytest.raises(ValueError, match="60-wire simulation"):
        qfx.expval(circ, qfx.Z(wire))

    start = time.perf_counter()
    value, grads = jax.jit(jax.value_and_grad(lambda c: qfx.expval(c, qfx.Z(wire), backend=TN)))(circ)
    value, grads = jax.block_until_ready((value, grads))
    elapsed = time.perf_counter() - start
    print(f"60 qubits, depth {depth}: <Z_{wire}> and its gradient in {elapsed:.1f} s (compile included)")

    # Independent check: the light cone of wire 30 lies within wires 24..36, so the same circuit
    # restricted to that window, on a 13-qubit state vector, has the same value and gradients.
    lo, hi = 24, 36
    inside = [i for i, op in enumerate(circ.ops) if lo <= min(op.wires) and max(op.wires) <= hi]
    moved = [circ.ops[i] for i in inside]
    small = qfx.Circuit(
        [type(op)(*op.parameters, tuple(w - lo for w in op.wires)) for op in moved], num_wires=hi - lo + 1
    )
    want, want_grads = jax.jit(jax.value_and_grad(lambda c: qfx.expval(c, qfx.Z(wire - lo))))(small)
    np.testing.assert_allclose(value, want, atol=1e-5)
    for i, op in enumerate(grads.ops):
        if not jax.tree.leaves(op):
            continue
        theta = float(op.theta)
        expected = float(want_grads.ops[inside.index(i)].theta) if i in inside else 0.0
        assert abs(theta - expected) < 1e-5
    assert any(abs(float(op.theta)) > 1e-3 for op in grads.ops if jax.tree.leaves(op))


def test_probs_and_amplitude_at_60_qubits():
    n = 60
    circ = qfx.Circuit([qfx.H(0)] + [qfx.CNOT((i, i + 1)) for i in range(n - 1)])  # GHZ
    np.testing.assert_allclose(qfx.probs(circ, (0, 59), backend=TN), [0.5, 0, 0, 0.5], atol=1e-6)
    np.testing.assert_allclose(qfx.amplitude(circ, [1] * n, backend=TN), 2**-0.5, atol=1e-6)
    np.testing.assert_allclose(qfx.amplitude(circ, [1] + [0] * (n - 1), backend=TN), 0, atol=1e-6)
    with pytest.raises(
        ValueError, match=r"the marginal of 60 wires needs 8\.0 EiB \(2\*\*60 complex64 entries\)"
    ):
        qfx.probs(circ, backend=TN)


# --- the cuTensorNet bridge, with the CPU stand-in -------------------------------------------------


@pytest.fixture
def on_cpu():
    """The stand-in reads its buffers with NumPy: on a GPU machine its tests run on JAX's CPU device."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _standin_setup(seed=11):
    rng = np.random.default_rng(seed)
    circ = random_circuit(rng, 4, 10, ANGLE_GATES)
    obs = 0.5 * qfx.Z(0) @ qfx.Z(1) - 0.3 * qfx.X(2) + 0.2 * qfx.Y(3) @ qfx.X(1)
    return circ, obs


@pytest.mark.usefixtures("on_cpu")
def test_bridge_values_and_gradients_through_callbacks():
    engine = _cutensornet.EinsumEngine()
    tn = qfx.TensorNetwork(contractor=engine)
    circ, obs = _standin_setup()

    def f(c, backend):
        return qfx.expval(c, obs, backend=backend)

    value = jax.jit(f, static_argnums=1)
    np.testing.assert_allclose(value(circ, tn), value(circ, TN), atol=1e-6)
    assert engine.forward_calls == 3  # one callback per network: three Pauli words
    grad = jax.jit(jax.grad(f), static_argnums=1)
    assert tree_allclose(grad(circ, tn), grad(circ, TN), rtol=1e-4, atol=1e-5)
    assert engine.gradient_calls == 3  # the custom_vjp's backward ran in the engine

    @functools.partial(jax.jit, static_argnums=1)
    def others(c, b):
        p = jax.jacrev(lambda c: qfx.probs(c, (3, 1), backend=b))(c)
        a = jax.grad(lambda c: jnp.real(qfx.amplitude(c, "1011", backend=b)))(c)
        return p, a

    assert tree_allclose(others(circ, tn), others(circ, TN), rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("on_cpu")
def test_bridge_batches_without_a_host_loop():
    engine = _cutensornet.EinsumEngine()
    tn = qfx.TensorNetwork(contractor=engine)
    circ, obs = _standin_setup()
    batch = jax.tree.map(lambda x: jnp.stack([x, 0.5 * x, x + 0.1, -x]), circ)

    def f(c, backend):
        return qfx.expval(c, obs, backend=backend)

    values = jax.jit(jax.vmap(f, in_axes=(0, None)), static_argnums=1)
    np.testing.assert_allclose(values(batch, tn), values(batch, TN), atol=1e-5)
    assert engine.forward_calls == 3  # a batch of 4 is one bigger network per term, not 4 calls
    vg = jax.jit(jax.vmap(jax.grad(f), in_axes=(0, None)), static_argnums=1)
    assert tree_allclose(vg(batch, tn), vg(batch, TN), rtol=1e-4, atol=1e-5)
    assert engine.gradient_calls == 3
    gv = jax.jit(jax.grad(lambda b, backend: jnp.sum(values(b, backend))), static_argnums=1)
    assert tree_allclose(gv(batch, tn), gv(batch, TN), rtol=1e-4, atol=1e-5)
    one = jax.tree.map(lambda x: x[:1], batch)  # a batch of one is squeezed (no extent-1 modes)
    assert tree_allclose(vg(one, tn), vg(one, TN), rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("on_cpu")
def test_bridge_stacked_terms_and_nested_vmap():
    # jit(vmap(vmap(value_and_grad))) over circuits whose congruent terms are stacked (a batch mode inside
    # the expectation value): three batch modes on one network per shape, in one callback each.
    engine = _cutensornet.EinsumEngine()
    tn = qfx.TensorNetwork(contractor=engine)
    n, depth = 6, 2
    obs = sum(qfx.Z(i) @ qfx.Z(i + 1) for i in range(n - 1)) - 0.5 * (qfx.X(1) + qfx.X(2) + qfx.X(4))
    skeleton = _operands._skeleton(_brickwall(n, depth, jnp.zeros((depth, n, 2))).ops)
    shapes = {_network._expval_network(skeleton, ("pauli", t.word), TN.optimize).shape_key for t in obs.terms}
    assert len(shapes) < len(obs.terms)  # some terms are stacked
    thetas = jnp.asarray(np.random.default_rng(3).uniform(-np.pi, np.pi, (2, 3, depth, n, 2)), jnp.float32)

    def f(t, backend):
        return qfx.expval(_brickwall(n, depth, t), obs, backend=backend)

    vg = jax.jit(
        jax.vmap(jax.vmap(jax.value_and_grad(f), in_axes=(0, None)), in_axes=(0, None)), static_argnums=1
    )
    got = vg(thetas, tn)
    assert tree_allclose(got, vg(thetas, TN), rtol=1e-4, atol=1e-5)
    assert tree_allclose(got, vg(thetas, None), rtol=1e-4, atol=1e-5)  # the state vector
    # One forward and one gradient callback per shape of network, each with both vmapped axes as modes.
    assert engine.forward_calls == engine.gradient_calls == len(shapes)
    assert all(shape[:2] == (2, 3) for shape in engine.contracted)
    # The two levels of vmap in the other order, and a batch of one at the inner level.
    g = jax.jit(jax.vmap(jax.vmap(jax.grad(f), in_axes=(0, None)), in_axes=(1, None)), static_argnums=1)
    assert tree_allclose(g(thetas, tn), g(thetas, None), rtol=1e-4, atol=1e-5)
    assert tree_allclose(g(thetas[:1], tn), g(thetas[:1], None), rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("on_cpu")
def test_bridge_falls_back_when_the_engine_would_slice():
    tn = qfx.TensorNetwork(contractor=_cutensornet.EinsumEngine(max_intermediate=4))
    circ, obs = _standin_setup()
    with pytest.warns(RuntimeWarning, match="would slice this .*-tensor network.*jnp.einsum instead"):
        value = qfx.expval(circ, obs, backend=tn)
    np.testing.assert_allclose(value, qfx.expval(circ, obs, backend=TN), atol=1e-6)
    grad = jax.jit(jax.grad(lambda c, b: qfx.expval(c, obs, backend=b)), static_argnums=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        grads = grad(circ, tn)
    assert tree_allclose(grads, grad(circ, TN), rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("on_cpu")
def test_bridge_is_reverse_mode_only():
    tn = qfx.TensorNetwork(contractor=_cutensornet.EinsumEngine())
    circ, obs = _standin_setup()
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jacfwd(lambda c: qfx.expval(c, obs, backend=tn))(circ)


# --- errors and optional dependencies ------------------------------------------------------------


def test_errors():
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT((0, 1))])
    with pytest.raises(ValueError, match="contractor must be 'jax' or 'cutensornet', got 'numpy'"):
        qfx.TensorNetwork(contractor="numpy")
    with pytest.raises(TypeError, match="contractor must be 'jax' or 'cutensornet', got int"):
        qfx.TensorNetwork(contractor=3)
    with pytest.raises(ValueError, match="optimize='fastest' is not an opt_einsum path optimizer"):
        qfx.TensorNetwork(optimize="fastest")
    with pytest.raises(TypeError, match="optimize must be an opt_einsum optimizer name"):
        qfx.TensorNetwork(optimize=3)
    with pytest.raises(TypeError, match="qfx.expval: backend must be a qfx backend"):
        qfx.expval(circ, qfx.Z(0), backend="tn")
    with pytest.raises(TypeError, match="qfx.probs: backend must be a qfx backend"):
        qfx.probs(circ, backend="tn")
    with pytest.raises(ValueError, match="shots=10 is not available with backend"):
        qfx.expval(circ, qfx.Z(0), backend=TN, shots=10, key=jax.random.key(0))
    with pytest.raises(ValueError, match="qfx.expval: backend=qfx.TensorNetwork\\(\\) starts from"):
        qfx.expval(circ, qfx.Z(0), backend=TN, initial_state=jnp.asarray([1, 0, 0, 0.0]))
    with pytest.raises(ValueError, match="qfx.probs: backend=qfx.TensorNetwork\\(\\) starts from"):
        qfx.probs(circ, backend=TN, initial_state=jnp.asarray([1, 0, 0, 0.0]))
    with pytest.raises(ValueError, match="diff=Adjoint\\(\\) works on the state vector"):
        qfx.expval(circ, qfx.Z(0), backend=TN, diff=qfx.diff.Adjoint())
    rotated = qfx.Circuit([qfx.RY(0.3, wires=0), *circ.ops])
    with pytest.raises(ValueError, match="qfx.amplitude is not .*an amplitude is not"):
        jax.grad(lambda c: jnp.real(qfx.amplitude(c, "00", backend=TN, diff=qfx.diff.ParameterShift())))(
            rotated
        )
    with pytest.raises(ValueError, match="expected 2 bits"):
        qfx.amplitude(circ, [0, 1, 1])
    with pytest.raises(ValueError, match="bits must be 0 or 1, got \\[0, 2\\]"):
        qfx.amplitude(circ, [0, 2], backend=TN)
    with pytest.raises(ValueError, match="only '0' and '1'"):
        qfx.amplitude(circ, "0a")
    with pytest.raises(TypeError, match="must hold integers"):
        qfx.amplitude(circ, [0.0, 1.0])
    with pytest.raises(TypeError, match="qfx.amplitude: expected a qfx.Circuit"):
        qfx.amplitude([qfx.H(0)], "0")
    # Exhaustive path searches on networks they would never finish (23 tensors here): an error, not a hang.
    # On a one-gate network they run.
    deep = qfx.Circuit(
        [qfx.RY(0.1, 0), qfx.CNOT((0, 1)), qfx.RX(0.2, 1), qfx.CZ((0, 1)), qfx.CNOT((1, 2))] * 2
    )
    for name in ("optimal", "branch-all", "branch-2"):
        with pytest.raises(ValueError, match=f"optimize='{name}' searches contraction orders exhaustively"):
            qfx.expval(deep, qfx.Z(0), backend=qfx.TensorNetwork(optimize=name))
        one = qfx.Circuit([qfx.RY(0.1, 0)])
        np.testing.assert_allclose(
            qfx.expval(one, qfx.Z(0), backend=qfx.TensorNetwork(optimize=name)), np.cos(0.1)
        )
    # An eqx.tree_at edit onto a wire the circuit lacks (a KeyError and a JAX shape error before).
    moved = eqx.tree_at(lambda c: c.ops[0], circ, qfx.RX(0.3, wires=3))
    for backend in (None, TN):
        with pytest.raises(
            ValueError, match="qfx.amplitude: an operation acts on wire 3, but the circuit has 2"
        ):
            qfx.amplitude(moved, "00", backend=backend)
    with pytest.raises(TypeError, match="qfx.amplitude: diff must be"):
        qfx.amplitude(circ, "00", diff="backprop")
    with pytest.raises(TypeError, match="qfx.amplitude: backend must be a qfx backend"):
        qfx.amplitude(circ, "00", backend="tn")


def _rx_on_0(i):
    return [qfx.RX(0.4, wires=0)]


def test_terms_with_identical_networks():
    """Terms after fixed gates only (a translation-invariant sum) give identical networks: stacked, no
    operand would carry the batch axis; they are contracted once."""
    circ = qfx.Circuit([qfx.H(0), qfx.H(1), qfx.H(2)])
    obs = qfx.X(0) + qfx.X(1) + 0.5 * qfx.Z(2)
    np.testing.assert_allclose(qfx.expval(circ, obs, backend=TN), qfx.expval(circ, obs), atol=1e-6)
    many = qfx.expval(circ, [qfx.X(0), qfx.X(1), qfx.Z(2)], backend=TN)
    np.testing.assert_allclose(many, [1.0, 1.0, 0.0], atol=1e-6)
    idle = qfx.Circuit([qfx.H(2)], num_wires=3)
    assert float(qfx.expval(idle, qfx.Z(0) + qfx.Z(1), backend=TN)) == pytest.approx(2.0, abs=1e-6)


def test_edge_cases():
    """An optimizer object serves every network (a copy each); no terms, no wires; bits checked under
    jit; a Repeat whose leaves were sliced to fewer layers than its length raises on both backends."""
    circ = qfx.Circuit([qfx.H(0), qfx.RX(0.3, wires=1), qfx.CNOT((0, 2)), qfx.RY(0.7, wires=2)])
    obs = qfx.Z(0) @ qfx.Z(2) + 0.5 * qfx.X(1) + qfx.Y(2)
    greedy = qfx.TensorNetwork(optimize=opt_einsum.RandomGreedy(max_repeats=4))
    assert float(qfx.expval(circ, obs, backend=greedy)) == pytest.approx(
        float(qfx.expval(circ, obs)), abs=1e-5
    )
    np.testing.assert_allclose(qfx.amplitude(circ, "110", backend=greedy), qfx.state(circ)[6], atol=1e-6)
    empty = qfx.LinearCombination(jnp.zeros((0,)), ())
    assert float(qfx.expval(circ, empty, backend=TN)) == 0.0
    np.testing.assert_allclose(qfx.probs(circ, wires=(), backend=TN), [1.0], atol=1e-6)
    amp = jax.jit(lambda bits: qfx.amplitude(circ, bits, backend=TN))
    np.testing.assert_allclose(amp(jnp.asarray([1, 1, 0])), qfx.state(circ)[6], atol=1e-6)
    with pytest.raises(Exception, match="bits must be 0 or 1"):  # raised through jax.jit
        jax.block_until_ready(amp(jnp.asarray([2, 0, 0])))
    looped = qfx.Circuit([qfx.H(1), qfx.for_loop(3, _rx_on_0)])  # control flow: the state-vector path
    np.testing.assert_allclose(qfx.amplitude(looped, "11"), qfx.state(looped)[3], atol=1e-6)
    layers = qfx.repeat(lambda t: [qfx.RX(t, wires=0)], jnp.asarray([0.1, 0.2, 0.3]), num_wires=1)
    sliced = jax.tree.map(lambda x: x[:2], qfx.Circuit([layers]))
    for backend in (None, TN):
        with pytest.raises(
            ValueError, match=r"Repeat: length=3, but a parameter of its body has shape \(2,\)"
        ):
            qfx.expval(sliced, qfx.Z(0), backend=backend)


def test_networks_too_large_for_the_device_raise(monkeypatch):
    monkeypatch.setattr(_memory, "memory_limit_bytes", lambda: 256)  # 32 complex64 entries
    n = 6
    circ = qfx.Circuit(
        [qfx.H(i) for i in range(n)] + [qfx.CZ((i, j)) for i in range(n) for j in range(i + 1, n)]
    )
    qfx.expval(circ, qfx.X(0), backend=TN)  # its largest intermediate has 8 entries
    with pytest.raises(
        ValueError,
        match=r"largest intermediate tensor needs 512\.0 B \(2\*\*6 complex64 entries\).* light cone",
    ):
        qfx.expval(circ, qfx.PauliWord({i: "X" for i in range(n)}), backend=TN)


def test_stacked_networks_are_split_to_fit_the_device(monkeypatch):
    """Congruent terms are contracted stacked, which multiplies the intermediates by their number: the
    stack is split so that each contraction fits (the check looked at one term's network only)."""
    n = 12
    ry = [qfx.RY(0.1 * i + 0.2, wires=i) for i in range(n)]
    circ = qfx.Circuit(ry + [qfx.CNOT((i, i + 1)) for i in range(0, n - 1, 2)] + ry[::-1])
    obs = sum((qfx.X(i) @ qfx.X(i + 1) for i in range(1, n - 2)), start=0.3 * qfx.Z(0))
    expected = qfx.expval(circ, obs)
    terms = [t.word for t in obs.terms]
    largest = max(
        _network._expval_network(_operands._skeleton(circ.ops), ("pauli", w), "auto").largest for w in terms
    )
    sizes = []
    contract = qfx.TensorNetwork._contract

    def spy(self, inputs, output, path, operands):
        sym = opt_einsum.get_symbol
        eq = ",".join("".join(sym(m) for m in t) for t in inputs) + "->" + "".join(map(sym, output))
        _, info = opt_einsum.contract_path(eq, *[x.shape for x in operands], shapes=True, optimize=list(path))
        sizes.append(int(info.largest_intermediate))
        return contract(self, inputs, output, path, operands)

    monkeypatch.setattr(qfx.TensorNetwork, "_contract", spy)
    monkeypatch.setattr(_memory, "memory_limit_bytes", lambda: 2 * largest * 8)  # two terms' worth
    np.testing.assert_allclose(qfx.expval(circ, obs, backend=TN), expected, atol=1e-5)
    assert max(sizes) <= 2 * largest and len(sizes) > 2, sizes


def test_cutensornet_without_a_gpu_names_the_extra():
    if _gpu_ready():
        pytest.skip("a GPU is present")
    with pytest.raises((RuntimeError, ImportError), match=r"pip install -e '\.\[gpu\]' in a qfx checkout"):
        qfx.TensorNetwork(contractor="cutensornet")


def test_cutensornet_without_cuquantum_names_the_package(monkeypatch):
    gpu_device = types.SimpleNamespace(platform="gpu", local_hardware_id=0)
    real_devices = jax.devices
    monkeypatch.setattr(jax, "devices", lambda *a: [gpu_device] if a == ("gpu",) else real_devices(*a))
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setitem(sys.modules, "cuquantum", None)
    with pytest.raises(
        ImportError, match=r"cuQuantum's Python package.*pip install -e '\.\[gpu\]' in a qfx checkout"
    ):
        _cutensornet.CuTensorNetEngine()


def test_import_qfx_imports_no_gpu_packages():
    code = "import sys, qfx; print(sorted(m for m in ('cuquantum', 'cupy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- on a GPU with cuquantum-python ------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0])
@gpu[0]
@gpu[1]
def test_cutensornet_matches_jax(seed):
    tn = qfx.TensorNetwork(contractor="cutensornet")
    circ, obs = _standin_setup(seed)

    def f(c, backend):
        return qfx.expval(c, obs, backend=backend)

    np.testing.assert_allclose(jax.jit(f, static_argnums=1)(circ, tn), f(circ, TN), atol=1e-5)
    g = jax.jit(jax.grad(f), static_argnums=1)
    assert tree_allclose(g(circ, tn), g(circ, TN), rtol=1e-4, atol=1e-5)
    p = jax.jit(lambda c, b: qfx.probs(c, (3, 1), backend=b), static_argnums=1)
    np.testing.assert_allclose(p(circ, tn), p(circ, TN), atol=1e-5)


@gpu[0]
@gpu[1]
def test_cutensornet_vmap_and_60_qubits():
    tn = qfx.TensorNetwork(contractor="cutensornet")
    circ, obs = _standin_setup()
    batch = jax.tree.map(lambda x: jnp.stack([x, 0.5 * x, x + 0.1]), circ)
    vg = jax.jit(
        jax.vmap(jax.grad(lambda c, b: qfx.expval(c, obs, backend=b)), in_axes=(0, None)), static_argnums=1
    )
    assert tree_allclose(vg(batch, tn), vg(batch, TN), rtol=1e-4, atol=1e-5)
    n, depth = 60, 4
    thetas = jnp.asarray(np.random.default_rng(10).uniform(0, 2 * np.pi, (depth, n, 2)), jnp.float32)
    big = _brickwall(n, depth, thetas)
    h = sum(qfx.Z(i) @ qfx.Z(i + 1) for i in range(n - 1))
    f = jax.jit(jax.value_and_grad(lambda c, b: qfx.expval(c, h, backend=b)), static_argnums=1)
    assert tree_allclose(f(big, tn), f(big, TN), rtol=1e-4, atol=1e-5)
