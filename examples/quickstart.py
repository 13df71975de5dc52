"""qfx in one page: build a circuit, measure it, differentiate it, batch it, sample it, train it.

Run with `python examples/quickstart.py`; it takes a few seconds on a CPU. The measurements below are
called the way a first script calls them, without `jax.jit`: qfx compiles each once per circuit structure
and reuses the program. The training step at the end is jitted, as a loop's should be.
(`examples/vqe_optax.py` also saves a matplotlib drawing of its circuit.)
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

import qfx

# A circuit is an immutable Equinox module: gate angles are array leaves, wires are static.
circ = qfx.Circuit(
    [
        qfx.H(0),
        qfx.RX(0.4, wires=1),
        qfx.CNOT(wires=(0, 1)),
        qfx.RY(0.7, wires=0),
    ]
)
# Observables are built with arithmetic; the coefficients are leaves too.
H = 0.5 * qfx.Z(0) @ qfx.Z(1) - 0.2 * qfx.X(0)

print("Circuit:")
print(qfx.draw(circ))
print("Observable:", H)

# Exact expectation value <psi|H|psi>.
print(f"\n<H> = {float(qfx.expval(circ, H)):+.6f}")

# The gradient with respect to the circuit is itself a Circuit: one leaf per gate parameter.
grads = jax.grad(qfx.expval)(circ, H)
print("\njax.grad(qfx.expval)(circ, H) is a", type(grads).__name__, "with the same structure:")
for op, g in zip(circ.ops, grads.ops, strict=True):
    if isinstance(op, (qfx.RX, qfx.RY)):
        print(f"  d<H>/d theta of {op!r}: {float(g.theta):+.6f}")


# A batch of circuits: build them with eqx.filter_vmap (the angles get a leading batch axis), then
# evaluate them all at once with jax.vmap. One compilation serves the whole batch.
def make(theta):
    return qfx.Circuit([qfx.RY(theta, wires=0), qfx.RY(0.4, wires=1), qfx.CNOT(wires=(0, 1))])


thetas = jnp.linspace(0.0, jnp.pi, 5)
batch = eqx.filter_vmap(make)(thetas)
energies = jax.vmap(qfx.expval, in_axes=(0, None))(batch, H)
print("\nA vmapped batch of 5 circuits [RY(theta) on 0, RY(0.4) on 1, CNOT]:")
for t, e in zip(thetas, energies, strict=True):
    print(f"  theta = {float(t):.3f}   <H> = {float(e):+.6f}")

# Sampling is pure: the key is explicit (keyword-only, no default) and shots are static.
bits = qfx.sample(circ, key=jax.random.key(0), shots=1000)
print("\n1000 samples of both wires, shape", bits.shape, "- first five:", bits[:5].tolist())
p1 = float(jnp.mean(bits[:, 0]))
print(f"  P(wire 0 = 1): from the samples {p1:.3f}, exact {float(qfx.probs(circ, 0)[1]):.3f}")

# Training: the circuit is a pytree of parameters, so Optax updates it directly.
optim = optax.adam(0.1)
opt_state = optim.init(circ)


@jax.jit
def step(circ, opt_state):
    energy, grads = jax.value_and_grad(qfx.expval)(circ, H)
    updates, opt_state = optim.update(grads, opt_state)
    return optax.apply_updates(circ, updates), opt_state, energy


print("\nTwo jitted Adam steps minimising <H>:")
for i in range(2):
    circ, opt_state, energy = step(circ, opt_state)
    print(f"  step {i}: <H> before the update = {float(energy):+.6f}")
print(f"  after:  <H> = {float(qfx.expval(circ, H)):+.6f}")

# What the circuit holds and needs.
print("\nqfx.specs(circ):")
print(qfx.specs(circ))
