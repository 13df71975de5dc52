"""Learning a noise model from measurement counts, with jax.grad and Optax.

A device is simulated by a "true" noise model: after every gate, a depolarising channel of strength
p = 0.04 and amplitude damping of strength gamma = 0.10 on each of the gate's wires. Six calibration
circuits (two qubits: RY(theta) on each, a CNOT, RY(theta / 2) on each) are run for 20000 shots each on the
exact density-matrix backend, and the counts are all we keep. Then a model of the same form with unknown
strengths is fitted by maximum likelihood: the loss is the negative log-likelihood of the counts under the
model's exact probabilities, a differentiable function of the strengths (they are leaves of the model,
shared by every insertion), minimised with Adam over unconstrained logits. The fitted strengths are printed
against the truth; the script exits with status 1 if either is off by more than 15 %.

Run with `python examples/noise_fit.py`; it takes a few seconds on a CPU.
"""

import sys
import time

import jax
import jax.numpy as jnp
import optax

import qfx

TRUE_P, TRUE_GAMMA = 0.04, 0.10
THETAS = jnp.linspace(0.3, 2.8, 6)
SHOTS = 20_000


def calibration_circuit(theta):
    return qfx.Circuit(
        [
            qfx.RY(theta, wires=0),
            qfx.RY(theta, wires=1),
            qfx.CNOT(wires=(0, 1)),
            qfx.RY(theta / 2, wires=0),
            qfx.RY(theta / 2, wires=1),
        ]
    )


def noise_model(p, gamma):
    return qfx.NoiseModel(
        [
            qfx.AfterGates(qfx.DepolarizingChannel(p, wires=0)),
            qfx.AfterGates(qfx.AmplitudeDamping(gamma, wires=0)),
        ]
    )


def probabilities(model):
    """The exact outcome probabilities of every calibration circuit under `model`, one program."""
    return jax.vmap(lambda t: qfx.probs(model(calibration_circuit(t))))(THETAS)


def main() -> int:
    start = time.perf_counter()
    # The "device": counts drawn from the true model's exact distribution.
    true_probs = jax.jit(probabilities)(noise_model(TRUE_P, TRUE_GAMMA))
    keys = jax.random.split(jax.random.key(0), len(THETAS))
    outcomes = jax.vmap(lambda k, p: jax.random.categorical(k, jnp.log(p), shape=(SHOTS,)))(keys, true_probs)
    counts = jax.vmap(lambda o: jnp.bincount(o, length=4))(outcomes).astype(jnp.float32)

    def loss(logits):
        p, gamma = jax.nn.sigmoid(logits)
        probs = probabilities(noise_model(p, gamma))
        return -jnp.sum(counts * jnp.log(jnp.clip(probs, 1e-12, 1.0))) / counts.sum()

    optimizer = optax.adam(0.1)
    logits = jnp.asarray([-2.0, -2.0])  # a start of p = gamma = 0.12
    state = optimizer.init(logits)

    @jax.jit
    def step(logits, state):
        value, grad = jax.value_and_grad(loss)(logits)
        updates, state = optimizer.update(grad, state)
        return optax.apply_updates(logits, updates), state, value

    for _ in range(300):
        logits, state, value = step(logits, state)
    p, gamma = (float(x) for x in jax.nn.sigmoid(logits))
    print(f"negative log-likelihood per shot: {float(value):.6f}")
    print(f"depolarizing p: fitted {p:.4f}, true {TRUE_P:.4f}")
    print(f"amplitude damping gamma: fitted {gamma:.4f}, true {TRUE_GAMMA:.4f}")
    print(f"time: {time.perf_counter() - start:.1f} s")
    ok = abs(p - TRUE_P) < 0.15 * TRUE_P and abs(gamma - TRUE_GAMMA) < 0.15 * TRUE_GAMMA
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
