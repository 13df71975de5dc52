"""The sharded state vector on 8 host CPU devices: run by `tests/test_sharded.py` in a subprocess started
with `XLA_FLAGS=--xla_force_host_platform_device_count=8` (a process's device count is fixed when JAX
starts). Not collected on its own (the name does not start with `test_`).

Sharded results are compared with the unsharded simulation of the same circuit (itself checked against
the NumPy reference everywhere else) and, for values, with the reference directly.
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, PartitionSpec
import numpy as np
import pytest

import qfx
from qfx._statevector._layout import schedule, swap_count

from . import reference
from .helpers import ANGLE_GATES, random_circuit, tree_allclose

if jax.device_count() < 8:  # pragma: no cover  (run through tests/test_sharded.py)
    pytest.skip("needs 8 devices: run through tests/test_sharded.py", allow_module_level=True)


def _mesh(k: int, kind=AxisType.Auto, name="q"):
    return jax.make_mesh((k,), (name,), axis_types=(kind,), devices=jax.devices()[:k])


def _observables(n: int):
    h = np.array([[0.3, 0.5 - 0.2j], [0.5 + 0.2j, -0.7]])
    return [
        sum(qfx.Z(i) for i in range(n)),  # Z on global wires: signs, no swap
        0.5 * qfx.X(0) @ qfx.Y(1) + 0.25 * qfx.Y(n - 1) @ qfx.X(2) - 0.75 * qfx.Z(0) @ qfx.X(n // 2),
        qfx.Hermitian(h, wires=0) + qfx.Hermitian(np.kron(h, h), wires=(n - 1, 1)),
    ]


@pytest.mark.parametrize(("n", "devices"), [(12, 2), (12, 8), (8, 8)])
def test_random_circuits_match_unsharded_and_reference(n, devices):
    rng = np.random.default_rng(devices + n)
    circuit = random_circuit(rng, n, 40)  # every gate family, on random wires (global ones included)
    backend = qfx.StateVector(mesh=_mesh(devices))
    # The dense reference builds 2**n x 2**n matrices: on 8 wires; on 12, the unsharded simulation.
    psi = reference.final_state(circuit) if n <= 8 else np.asarray(qfx.state(circuit), np.complex128)

    state = qfx.state(circuit, backend=backend)
    assert state.sharding.spec == PartitionSpec("q")  # never gathered
    assert {s.data.shape for s in state.addressable_shards} == {(2**n // devices,)}
    np.testing.assert_allclose(np.asarray(state), psi, atol=1e-5)
    np.testing.assert_allclose(qfx.probs(circuit, backend=backend), np.abs(psi) ** 2, atol=1e-5)
    for wires in [(0,), (n - 1, 0, 5), (3, 1, 2, 0)]:
        np.testing.assert_allclose(
            qfx.probs(circuit, wires=wires, backend=backend), qfx.probs(circuit, wires=wires), atol=1e-5
        )
    np.testing.assert_allclose(
        qfx.density_matrix(circuit, wires=(1, 7), backend=backend),
        qfx.density_matrix(circuit, wires=(1, 7)),
        atol=1e-5,
    )
    observables = _observables(n)
    np.testing.assert_allclose(
        qfx.expval(circuit, observables, backend=backend), qfx.expval(circuit, observables), atol=1e-5
    )
    np.testing.assert_allclose(
        qfx.var(circuit, observables, backend=backend), qfx.var(circuit, observables), atol=1e-4
    )
    bits = "".join(str(b) for b in rng.integers(0, 2, n))
    np.testing.assert_allclose(qfx.amplitude(circuit, bits, backend=backend), psi[int(bits, 2)], atol=1e-5)


def test_gates_diagonal_on_several_global_wires():
    """Gates that are diagonal (or controlled) on two or three global wires at once act on each device's
    block of their matrix, moving nothing."""
    n = 7
    layer = [qfx.H(w) for w in range(n)] + [qfx.RY(0.2 * (w + 1), wires=w) for w in range(n)]
    gates = [
        qfx.CZ(wires=(0, 2)),
        qfx.IsingZZ(0.7, wires=(1, 0)),
        qfx.MultiRZ(0.4, wires=(2, 0, 1)),
        qfx.Toffoli(wires=(2, 0, 5)),
        qfx.Controlled(qfx.RY(0.9, wires=4), controls=(1, 2), control_values=(0, 1)),
        qfx.ControlledPhaseShift(0.3, wires=(0, 6)),
        qfx.Controlled(qfx.IsingXX(0.5, wires=(3, 6)), controls=(0, 1, 2), control_values=(1, 0, 1)),
    ]
    circuit = qfx.Circuit(layer + gates + layer, num_wires=n)
    psi = reference.final_state(circuit)
    for devices in (4, 8):
        np.testing.assert_allclose(
            qfx.state(circuit, backend=qfx.StateVector(mesh=_mesh(devices))), psi, atol=1e-5
        )


def test_observables_that_flip_one_global_wire_share_one_swap():
    n = 10
    backend = qfx.StateVector(mesh=_mesh(8))
    circuit = qfx.Circuit([qfx.H(w) for w in range(n)] + [qfx.RY(0.3 * w, wires=w) for w in range(n)])
    obs = [qfx.X(0) @ qfx.Z(5), qfx.X(0) @ qfx.Y(6) + qfx.Z(1), 0.5 * qfx.X(0) @ qfx.X(7)]
    jaxpr = str(jax.make_jaxpr(lambda c: qfx.expval(c, obs, backend=backend))(circuit))
    circuit_swaps = swap_count(schedule(circuit.ops, n, 3, "q"))
    assert jaxpr.count("ppermute") == circuit_swaps + 1  # X(0) swapped in once for the three observables
    np.testing.assert_allclose(qfx.expval(circuit, obs, backend=backend), qfx.expval(circuit, obs), atol=1e-5)


def _hea(n: int, layers: int, rng):
    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
            + [qfx.CRX(t[0, 0], wires=(n - 1, 0)), qfx.IsingXY(t[1, 1], wires=(1, n - 2))]
        )

    theta = jnp.asarray(rng.uniform(-np.pi, np.pi, size=(layers, n, 2)), jnp.float32)
    head = random_circuit(rng, n, 10, ANGLE_GATES).ops
    return lambda t, head=head: qfx.Circuit([*head, qfx.repeat(layer, t, num_wires=n)], num_wires=n), theta


@pytest.mark.parametrize(("n", "devices"), [(14, 2), (13, 8)])
def test_gradients_match_unsharded(n, devices):
    rng = np.random.default_rng(n)
    make, theta = _hea(n, 3, rng)
    H = _observables(n)[1] + 0.5 * _observables(n)[0]
    backend = qfx.StateVector(mesh=_mesh(devices))
    expected = jax.value_and_grad(lambda c: qfx.expval(c, H))(make(theta))
    for diff in (qfx.diff.Backprop(), qfx.diff.Adjoint()):
        got = jax.jit(jax.value_and_grad(lambda c, d=diff: qfx.expval(c, H, backend=backend, diff=d)))(
            make(theta)
        )
        assert tree_allclose(got, expected, rtol=1e-5, atol=1e-5), type(diff).__name__


def test_explicit_axes_jit_vmap_and_a_batch_axis():
    rng = np.random.default_rng(3)
    n = 8
    make, theta = _hea(n, 2, rng)
    H = _observables(n)[1]
    expected = jax.vmap(jax.value_and_grad(lambda t: qfx.expval(make(t), H)))(jnp.stack([theta, -theta]))

    explicit = _mesh(8, AxisType.Explicit)
    backend = qfx.StateVector(mesh=explicit)
    with jax.set_mesh(explicit):
        got = jax.jit(jax.value_and_grad(lambda t: qfx.expval(make(t), H, backend=backend)))(theta)
    assert tree_allclose(got, jax.tree.map(lambda x: x[0], expected), rtol=1e-5, atol=1e-5)

    # A (2, 4) mesh: the state over "q", a batch of two circuits under vmap beside it.
    mesh = jax.make_mesh((2, 4), ("b", "q"), axis_types=(AxisType.Auto, AxisType.Auto))
    backend = qfx.StateVector(mesh=mesh, axis="q")
    fn = jax.vmap(jax.value_and_grad(lambda t: qfx.expval(make(t), H, backend=backend)))
    assert tree_allclose(fn(jnp.stack([theta, -theta])), expected, rtol=1e-5, atol=1e-5)

    # The adjoint's second order (forward over reverse) on the sharded walk.
    small = theta[:1]
    hess = jax.hessian(lambda t: qfx.expval(make(t), H, backend=backend, diff=qfx.diff.Adjoint()))(small)
    assert tree_allclose(hess, jax.hessian(lambda t: qfx.expval(make(t), H))(small), rtol=1e-4, atol=1e-4)


def test_initial_state_and_its_gradient():
    rng = np.random.default_rng(4)
    n = 9
    psi0 = rng.normal(size=2**n) + 1j * rng.normal(size=2**n)
    psi0 = jnp.asarray(psi0 / np.linalg.norm(psi0), jnp.complex64)
    circuit = random_circuit(rng, n, 20, ANGLE_GATES)
    backend = qfx.StateVector(mesh=_mesh(8))
    H = _observables(n)[1]

    def cost(c, s, backend=None, diff=None):
        return qfx.expval(c, H, initial_state=s, backend=backend, diff=diff)

    expected = jax.grad(cost, argnums=(0, 1))(circuit, psi0)
    for diff in (qfx.diff.Backprop(), qfx.diff.Adjoint()):
        got = jax.grad(cost, argnums=(0, 1))(circuit, psi0, backend, diff)
        assert tree_allclose(got, expected, rtol=1e-5, atol=1e-5), type(diff).__name__


def test_samples_are_drawn_from_the_sharded_state():
    rng = np.random.default_rng(5)
    n = 8
    circuit = random_circuit(rng, n, 30)
    backend = qfx.StateVector(mesh=_mesh(8))
    shots = 40_000
    for wires in (None, (6, 0, 2)):
        bits = qfx.sample(circuit, key=jax.random.key(1), shots=shots, wires=wires, backend=backend)
        p = qfx.probs(circuit, wires=wires)
        freq = qfx.counts(bits) / shots
        # Within 5 binomial standard deviations (plus a floor for the outcomes of probability ~0).
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / shots) + 2e-4)
    again = qfx.sample(circuit, key=jax.random.key(1), shots=10, backend=backend)
    np.testing.assert_array_equal(
        again, qfx.sample(circuit, key=jax.random.key(1), shots=10, backend=backend)
    )


def test_errors_on_devices():
    with pytest.raises(ValueError, match="has 3 devices; a state vector is sharded over a power of two"):
        qfx.StateVector(mesh=_mesh(3))
    backend = qfx.StateVector(mesh=_mesh(8))
    with pytest.raises(ValueError, match="a 3-wire state cannot be sharded over 8 devices"):
        qfx.state(qfx.Circuit([qfx.H(0)], num_wires=3), backend=backend)
    # Its controls may stay global; a 3-wire matrix may not.
    toffoli = qfx.Circuit([qfx.H(0), qfx.H(1), qfx.Toffoli(wires=(0, 1, 2))], num_wires=5)
    np.testing.assert_allclose(qfx.state(toffoli, backend=backend), qfx.state(toffoli), atol=1e-6)
    unitary = qfx.Circuit([qfx.QubitUnitary(np.eye(8), wires=(0, 1, 2))], num_wires=5)
    with pytest.raises(
        ValueError, match="needs 3 of its wires on each device, but a state of 5 wires sharded"
    ):
        qfx.state(unitary, backend=backend)
    with pytest.raises(ValueError, match="reduced density matrix of 3 wires is read on each device"):
        qfx.density_matrix(qfx.Circuit([qfx.H(0)], num_wires=5), wires=(0, 1, 2), backend=backend)
