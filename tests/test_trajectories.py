"""qfx.Trajectories: means and gradients over seeded keys within 5 sigma of the exact (density-matrix)
values, which the density-matrix tests check against the NumPy reference."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx._trajectories import _walk

from .helpers import central_difference

_KEYS = jax.random.split(jax.random.key(1234), 3000)
_OBS = qfx.Z(0) + 0.5 * qfx.X(0) @ qfx.Z(1) - 0.3 * qfx.Y(1)


def _circuit():
    # Both kinds of branch: a random unitary (probabilities = weights) and a state-dependent one.
    return qfx.Circuit(
        [
            qfx.RY(0.8, wires=0),
            qfx.AmplitudeDamping(0.3, wires=0),
            qfx.CNOT(wires=(0, 1)),
            qfx.RX(0.6, wires=1),
            qfx.DepolarizingChannel(0.2, wires=1),
            qfx.GeneralizedAmplitudeDamping(0.25, 0.4, wires=1),
            qfx.RZ(0.4, wires=0),
            qfx.PhaseDamping(0.4, wires=0),
            qfx.H(0),
        ]
    )


def _within_5_sigma(samples, exact):
    samples = np.asarray(samples, np.float64)
    mean = samples.mean(axis=0)
    sigma = samples.std(axis=0) / np.sqrt(samples.shape[0])
    assert np.all(np.abs(mean - exact) <= 5 * sigma + 1e-6), (mean, exact, sigma)


def test_means_gradients_and_probabilities_are_unbiased():
    c = _circuit()

    def one(c, k):  # one trajectory's expectation, its gradient and its probabilities
        f = lambda c: qfx.expval(c, _OBS, backend=qfx.Trajectories(), key=k)  # noqa: E731
        return jax.value_and_grad(f)(c), qfx.probs(c, backend=qfx.Trajectories(), key=k)

    (values, grads), probs = jax.jit(jax.vmap(one, in_axes=(None, 0)))(c, _KEYS)
    exact, exact_grad = jax.value_and_grad(lambda c: qfx.expval(c, _OBS))(c)
    _within_5_sigma(values, float(exact))
    _within_5_sigma(probs, np.asarray(qfx.probs(c)))
    for g, e in zip(jax.tree.leaves(grads), jax.tree.leaves(exact_grad), strict=True):
        _within_5_sigma(g, float(e))
    # The score-function term matters: the pathwise derivative alone misses the branch probabilities.
    gamma = lambda c: c.ops[1].gamma  # noqa: E731
    assert abs(float(np.mean(gamma(grads))) - float(gamma(exact_grad))) < 0.1 * abs(float(gamma(exact_grad)))


def test_samples_match_the_exact_distribution():
    c = _circuit()
    exact = np.asarray(qfx.probs(c))
    shots = 4000
    s = qfx.sample(c, key=jax.random.key(7), shots=shots, backend=qfx.Trajectories())
    counts = np.bincount(2 * np.asarray(s[:, 0]) + np.asarray(s[:, 1]), minlength=4) / shots
    assert np.all(np.abs(counts - exact) <= 5 * np.sqrt(exact * (1 - exact) / shots) + 1e-6)


def test_trajectory_errors():
    c = _circuit()
    with pytest.raises(ValueError, match="qfx.Trajectories\\(\\) draws a Kraus branch at each channel"):
        qfx.expval(c, qfx.Z(0), backend=qfx.Trajectories())
    with pytest.raises(ValueError, match="the mean of a var over trajectories is not the noisy circuit's"):
        qfx.var(c, qfx.Z(0), backend=qfx.Trajectories(), key=jax.random.key(0))
    with pytest.raises(ValueError, match="the mean of a state over trajectories"):
        qfx.state(c, backend=qfx.Trajectories(), key=jax.random.key(0))
    m = qfx.measure(0)
    with pytest.raises(ValueError, match="Trajectories\\(\\) does not run control flow"):
        qfx.probs(qfx.Circuit([m]), backend=qfx.Trajectories(), key=jax.random.key(0))
    assert eqx.tree_equal(qfx.Trajectories(), qfx.Trajectories())


def _mixture_circuit(theta, p):
    # Only random unitaries: every branch is drawn before the gates run, and the drawn Paulis fuse with the
    # gates. A Repeat (noise inserted into its body by a model whose strength `p` is shared) and channels
    # outside it, on one and on two wires.
    def layer(t):
        return [qfx.RY(t[0], wires=0), qfx.RX(t[1], wires=1), qfx.CNOT(wires=(0, 1)), qfx.RZ(t[2], wires=2)]

    model = qfx.NoiseModel([qfx.AfterGates(qfx.DepolarizingChannel(p, wires=0), gates=(qfx.CNOT, qfx.RZ))])
    body = model(qfx.Circuit([qfx.repeat(layer, theta, num_wires=3)], num_wires=3))
    return qfx.Circuit(
        [
            qfx.H(2),
            qfx.BitFlip(0.15, wires=2),
            *body.ops,
            qfx.PauliError("XZ", 0.2, wires=(1, 2)),
            qfx.CRY(0.5, wires=(2, 0)),
            qfx.PhaseFlip(0.25, wires=0),
        ],
        num_wires=3,
    )


def test_random_unitary_circuits_drawn_first_are_unbiased():
    theta = jax.random.uniform(jax.random.key(3), (3, 3), minval=-2.0, maxval=2.0)
    p = jnp.float32(0.12)
    obs = qfx.Z(0) @ qfx.Z(1) + 0.7 * qfx.X(2) - 0.4 * qfx.Y(0)

    def cost(theta, p, k, **kw):
        return qfx.expval(_mixture_circuit(theta, p), obs, **kw, key=k)

    one = jax.value_and_grad(lambda t, p, k: cost(t, p, k, backend=qfx.Trajectories()), argnums=(0, 1))
    values, (g_theta, g_p) = jax.jit(jax.vmap(one, in_axes=(None, None, 0)))(theta, p, _KEYS)
    exact, (e_theta, e_p) = jax.value_and_grad(lambda t, p: cost(t, p, None), argnums=(0, 1))(theta, p)
    _within_5_sigma(values, float(exact))
    _within_5_sigma(np.asarray(g_theta).reshape(len(_KEYS), -1), np.asarray(e_theta).reshape(-1))
    _within_5_sigma(g_p, float(e_p))

    # The strength reaches the value only through the branch probabilities (the drawn Paulis are data), so
    # without the score-function term every g_p would be 0: a strong channel inside a Repeat, where that
    # would fail the 5-sigma test.
    def deep(p, k, **kw):
        c = qfx.Circuit([qfx.repeat(lambda t: [qfx.RY(t, wires=0)], jnp.array([0.3, 0.2]), num_wires=1)])
        c = qfx.NoiseModel([qfx.AfterGates(qfx.DepolarizingChannel(p, wires=0))])(c)
        return qfx.expval(c, qfx.Z(0), **kw, key=k)

    g = jax.jit(jax.vmap(jax.grad(lambda p, k: deep(p, k, backend=qfx.Trajectories())), (None, 0)))
    g_deep, e_deep = g(jnp.float32(0.3), _KEYS), jax.grad(deep)(jnp.float32(0.3), None)
    _within_5_sigma(g_deep, float(e_deep))
    assert abs(float(e_deep)) > 5 * float(np.std(g_deep)) / np.sqrt(len(_KEYS))

    # Probabilities and samples of the same circuit, and a circuit started from a given state.
    c = _mixture_circuit(theta, p)
    probs = jax.jit(jax.vmap(lambda k: qfx.probs(c, backend=qfx.Trajectories(), key=k)))(_KEYS[:1000])
    _within_5_sigma(probs, np.asarray(qfx.probs(c)))
    psi0 = jnp.asarray(qfx.state(qfx.Circuit([qfx.H(0), qfx.RY(0.9, wires=1)], num_wires=3)))
    start = jax.vmap(lambda k: qfx.expval(c, obs, backend=qfx.Trajectories(), key=k, initial_state=psi0))
    rho0 = jnp.outer(psi0, psi0.conj())
    _within_5_sigma(start(_KEYS[:1000]), float(qfx.expval(c, obs, initial_state=rho0)))
    shots = 3000
    s = qfx.sample(c, key=jax.random.key(11), shots=shots, backend=qfx.Trajectories())
    counts = np.bincount(np.asarray(s) @ np.array([4, 2, 1]), minlength=8) / shots
    exact_probs = np.asarray(qfx.probs(c))
    assert np.all(np.abs(counts - exact_probs) <= 5 * np.sqrt(exact_probs * (1 - exact_probs) / shots) + 1e-6)


def test_pauli_branches_moved_past_clifford_gates_give_the_same_state():
    # `drawn` moves each drawn Pauli past the Clifford gates after it and applies it before the next other
    # gate: for every key, the same state (up to a global phase) as each branch applied where it stands.
    def layer(t):
        return [
            qfx.CNOT(wires=(0, 1)),
            qfx.PauliError("XY", 0.5, wires=(1, 2)),
            qfx.CZ(wires=(2, 0)),
            qfx.DepolarizingChannel(0.7, wires=2),
            qfx.H(1),
            qfx.S(2),
            qfx.SWAP(wires=(0, 2)),
            qfx.Y(0),
            qfx.BitFlip(0.5, wires=0),
            qfx.RX(t, wires=1),
            qfx.PhaseFlip(0.5, wires=1),
        ]

    head = [qfx.RY(0.3, wires=0), qfx.DepolarizingChannel(0.6, wires=0), qfx.CNOT(wires=(0, 2))]
    blocks = [qfx.repeat(layer, jnp.array(t), num_wires=3) for t in ([0.4, -1.1, 2.0], [])]  # 3 and 0 layers
    circuit = qfx.Circuit([*head, *blocks, qfx.X(1)])
    circuit = qfx.Circuit([*circuit.ops, qfx.PauliError("ZX", 0.5, wires=(0, 1)), qfx.RZ(0.8, wires=0)])

    def states(key):
        out = []
        for push in (True, False):
            ops, logp = _walk.drawn(circuit.ops, key, push)
            out.append((qfx.state(qfx.Circuit(ops, num_wires=3)), logp))
        return out

    moved = 0
    (pushed, lp), (placed, lq) = jax.jit(jax.vmap(states))(_KEYS[:200])
    for a, b, la, lb in zip(pushed, placed, lp, lq, strict=True):
        assert abs(abs(np.vdot(a, b)) - 1) < 1e-5 and abs(la - lb) < 1e-6
        moved += not np.allclose(a, b, atol=1e-5)  # equal only up to a phase
    assert moved > 0


def test_a_drawn_trajectory_differentiates_in_every_mode(x64):
    # For one key the branches are fixed (their probabilities depend on the strengths only), so a
    # trajectory is a smooth function of the angles: the adjoint walk's reverse mode, forward mode and
    # Hessian against central differences of the trajectory itself.
    key = jax.random.key(5)
    obs = qfx.Z(0) @ qfx.Z(1) + 0.7 * qfx.X(2)

    def f(theta):
        return qfx.expval(_mixture_circuit(theta, 0.3), obs, backend=qfx.Trajectories(), key=key)

    theta = jnp.asarray(np.random.default_rng(2).uniform(-2, 2, (3, 3)))
    grad_fn = jax.jit(jax.grad(f))
    grad = grad_fn(theta)
    np.testing.assert_allclose(grad, central_difference(jax.jit(f), theta), atol=1e-7)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(f))(theta), grad, atol=1e-10)
    hessian = np.asarray(jax.jit(jax.hessian(f))(theta)).reshape(9, 9)
    columns = [central_difference(lambda t, i=i: grad_fn(t).reshape(-1)[i], theta) for i in range(9)]
    np.testing.assert_allclose(hessian, np.stack(columns).reshape(9, 9), atol=1e-6)
