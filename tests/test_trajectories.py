"""qfx.Trajectories: means and gradients over seeded keys within 5 sigma of the exact (density-matrix)
values, which the density-matrix tests check against the NumPy reference."""

import equinox as eqx
import jax
import numpy as np
import pytest

import qfx

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
            qfx.GeneralizedAmplitudeDamping(0.25, 0.6, wires=1),
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
