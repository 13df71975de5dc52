"""Invariants that hold for every circuit: unitarity, inverses, batching, sampling statistics, and
agreement with the dense reference simulator (states, probabilities, expectation values, gradients by
every qfx.diff method, the tensor-network backend, scanned layers)."""

from hypothesis import given, settings, strategies as st
import jax
import jax.numpy as jnp
import numpy as np

import qfx
from qfx import _roll
from tests import reference as ref
from tests.helpers import central_difference

from .strategies import angle_circuits, angles, circuits, circuits_and_states, gates, pauli_sums


@given(gates(num_wires=3))
def test_every_gate_is_unitary(gate):
    m = np.asarray(gate.matrix(), dtype=np.complex128)
    np.testing.assert_allclose(m @ m.conj().T, np.eye(m.shape[0]), atol=1e-5)


@given(circuits_and_states())
def test_norm_is_preserved(circ_psi):
    circ, psi = circ_psi
    out = np.asarray(qfx.state(circ, initial_state=psi))
    assert abs(np.linalg.norm(out) - 1) < 1e-5
    assert abs(float(jnp.sum(qfx.probs(circ, initial_state=psi))) - 1) < 1e-5


@given(circuits_and_states())
def test_circuit_then_inverse_is_identity(circ_psi):
    circ, psi = circ_psi
    out = np.asarray(qfx.state(circ + circ.inverse(), initial_state=psi))
    np.testing.assert_allclose(out, psi, atol=1e-5)


def _perturbed_batch(circ, offsets):
    """Stacks copies of `circ` whose angles are shifted by `offsets`; unitaries get a global phase."""

    def stack(x):
        shape = offsets.shape + (1,) * x.ndim
        o = offsets.reshape(shape)
        if jnp.iscomplexobj(x):
            return x * jnp.exp(1j * o.astype(x.dtype))
        return x + o.astype(x.dtype)

    return jax.tree.map(stack, circ)


def _with_parameters(circ):
    # vmap needs at least one leaf to batch.
    return len(jax.tree.leaves(circ)) > 0


# Batched runs compile more: half the profile's examples.
_FEWER = settings(max_examples=max(5, settings.default.max_examples // 2))


@_FEWER
@given(circuits(min_wires=2, max_depth=5).filter(_with_parameters), st.lists(angles, min_size=3, max_size=3))
def test_vmap_equals_loop(circ, offsets):
    batch = _perturbed_batch(circ, jnp.asarray(offsets, jnp.float32))
    obs = qfx.Z(0) @ qfx.X(1) + 0.5 * qfx.Y(0)
    states = jax.vmap(qfx.state)(batch)
    values = jax.vmap(qfx.expval, (0, None))(batch, obs)
    matrix = ref.observable_matrix(obs, circ.num_wires)
    for i in range(3):
        one = qfx.state(jax.tree.map(lambda x, i=i: x[i], batch))
        np.testing.assert_allclose(states[i], one, atol=1e-5)
        expected = np.real(np.conj(one) @ matrix @ np.asarray(one, dtype=np.complex128))
        np.testing.assert_allclose(values[i], expected, atol=1e-5)


@_FEWER
@given(circuits(max_depth=4).filter(_with_parameters), st.lists(angles, min_size=4, max_size=4))
def test_nested_vmap_equals_loop(circ, offsets):
    batch = _perturbed_batch(circ, jnp.asarray(offsets, jnp.float32).reshape(2, 2))
    states = jax.vmap(jax.vmap(qfx.state))(batch)
    assert states.shape == (2, 2, 2**circ.num_wires)
    for i in range(2):
        for j in range(2):
            one = jax.tree.map(lambda x, i=i, j=j: x[i, j], batch)
            np.testing.assert_allclose(states[i, j], qfx.state(one), atol=1e-5)


@given(circuits(max_wires=3, max_depth=5), st.integers(0, 2**31 - 1))
def test_sample_frequencies_converge_to_probs(circ, seed):
    shots = 4000
    bits = np.asarray(qfx.sample(circ, key=jax.random.key(seed), shots=shots))
    n = circ.num_wires
    freq = np.bincount(bits @ (2 ** np.arange(n - 1, -1, -1)), minlength=2**n) / shots
    p = ref.probs(circ)
    # Five binomial standard errors, with a floor for outcomes of probability ~0.
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / shots) + 2e-3)


# Circuits of up to 6 wires: the fusion pass absorbs one-qubit gates into dense two-qubit blocks, and up to 8
# wires it pairs one-qubit gates on different wires; every structure it meets must leave the numbers unchanged
# (tests/test_fusion.py also runs its cases with structured gates absorbed).
@given(circuits(max_wires=6, max_depth=10), st.data())
def test_simulation_matches_the_dense_reference(circ, data):
    n = circ.num_wires
    obs = data.draw(pauli_sums(n))
    wires = data.draw(st.permutations(range(n)))[: data.draw(st.integers(1, n))]
    np.testing.assert_allclose(qfx.state(circ), ref.final_state(circ), atol=2e-5)
    np.testing.assert_allclose(qfx.probs(circ, wires), ref.probs(circ, wires), atol=2e-5)
    np.testing.assert_allclose(qfx.expval(circ, obs), ref.expval(circ, obs), atol=5e-5)
    np.testing.assert_allclose(qfx.var(circ, obs), ref.var(circ, obs), atol=1e-4)


_METHODS = {
    "backprop": qfx.diff.Backprop(),
    "adjoint": qfx.diff.Adjoint(),
    "parameter_shift": qfx.diff.ParameterShift(),
}


@_FEWER
@given(angle_circuits(min_wires=2, max_depth=6).filter(_with_parameters), st.data())
def test_gradient_methods_agree_with_the_reference(circ, data):
    """Backprop, adjoint and parameter-shift gradients (complex64) against central differences of the
    float64 reference."""
    obs = data.draw(pauli_sums(circ.num_wires))
    expected = central_difference(lambda c: ref.expval(c, obs), circ)
    for name, diff in _METHODS.items():
        grad = jax.jit(jax.grad(lambda c, diff=diff: qfx.expval(c, obs, diff=diff)))(circ)
        for g, e in zip(jax.tree.leaves(grad), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(np.asarray(g), e, atol=2e-4, err_msg=name)


@_FEWER
@given(circuits(min_wires=2, max_wires=5, max_depth=8), st.data())
def test_tensor_network_matches_the_reference(circ, data):
    """Light cones and contraction paths change only the order of the sums."""
    n = circ.num_wires
    obs = data.draw(pauli_sums(n))
    wires = data.draw(st.permutations(range(n)))[: data.draw(st.integers(1, min(n, 3)))]
    tn = qfx.TensorNetwork()
    np.testing.assert_allclose(qfx.expval(circ, obs, backend=tn), ref.expval(circ, obs), atol=5e-5)
    np.testing.assert_allclose(qfx.probs(circ, wires, backend=tn), ref.probs(circ, wires), atol=2e-5)


@_FEWER
@given(circuits(min_wires=2, max_depth=4).filter(_with_parameters), st.lists(angles, min_size=2, max_size=2))
def test_scanned_layers_equal_the_unrolled_circuit(circ, offsets):
    """A Repeat of a layer with three parameter sets equals the three layers one after another."""
    batch = _perturbed_batch(circ, jnp.asarray([0.0, *offsets], jnp.float32))
    layers = [jax.tree.map(lambda x, i=i: x[i], batch) for i in range(3)]
    unrolled = qfx.Circuit([op for layer in layers for op in layer.ops], circ.num_wires)
    scanned = qfx.Circuit([qfx.H(0), qfx.Repeat(batch)], circ.num_wires)
    expected = ref.final_state(unrolled, ref.final_state(qfx.Circuit([qfx.H(0)], circ.num_wires)))
    np.testing.assert_allclose(qfx.state(scanned), expected, atol=2e-5)


@given(
    st.data(),
    st.integers(1, 3),
    st.integers(0, 40),
    st.integers(0, 3),
)
def test_rolling_is_lossless(data, n, layers, extra):
    """A flat list of gates, rolled into `Repeat` blocks (`qfx/_roll.py`) and unrolled again, is the same
    list: same gates, same wires, same leaves, in the same order; a list without a repeated layer is not
    changed at all. The lists are random blocks repeated `layers` times between random prefixes and
    suffixes, or random gates."""
    block = data.draw(st.lists(gates(n), min_size=1, max_size=4))
    repeated = [
        jax.tree.map(
            lambda x, k=k: x + 0.01 * k if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, op
        )
        for k in range(layers)
        for op in block
    ]
    prefix = data.draw(st.lists(gates(n), max_size=extra))
    suffix = data.draw(st.lists(gates(n), max_size=extra))
    circ = qfx.Circuit(prefix + repeated + suffix, num_wires=n)
    rolled = _roll.roll(circ)
    again = qfx.Circuit(ref.flatten_ops(rolled.ops), num_wires=n)
    assert jax.tree.structure(again) == jax.tree.structure(circ)
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(circ), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if _roll._best_run(_roll._codes(circ.ops)) is None:
        assert rolled is circ
