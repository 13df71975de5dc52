"""Mid-circuit measurement and feed-forward: teleportation and a repeat-until-success gate.

Each circuit runs in both modes: `mcm="exact"` (all outcomes at once, weighted by their probabilities)
and `mcm="sampled"` (one trajectory per PRNG key, `jax.vmap`-ed over keys so that all shots are one
call). The statistics are printed next to the values derived by hand.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import qfx

SHOTS = 4000
keys = jax.random.split(jax.random.key(0), SHOTS)

# --- teleportation ------------------------------------------------------------------------------------
# Wire 0 holds U3(a, b, c)|0>; wires 1 and 2 share a Bell pair. A Bell measurement of wires 0 and 1,
# then X^m1 Z^m0 on wire 2, puts the input state on wire 2 whatever the outcomes.
params = (1.1, -0.7, 0.4)
m0, m1 = qfx.measure(0), qfx.measure(1)
teleport = qfx.Circuit(
    [
        qfx.U3(*params, wires=0),
        qfx.H(1),
        qfx.CNOT(wires=(1, 2)),
        qfx.CNOT(wires=(0, 1)),
        qfx.H(0),
        m0,
        m1,
        qfx.cond(m1, qfx.X(2)),
        qfx.cond(m0, qfx.Z(2)),
    ]
)
print("Teleportation:")
print(qfx.draw(teleport))
psi = qfx.state(qfx.Circuit([qfx.U3(*params, wires=0)]))
target = jnp.outer(psi, psi.conj())


def fidelity(rho):
    return jnp.real(jnp.sum(target * rho.T))  # tr(target @ rho), elementwise: no TF32 dot on a GPU


exact = fidelity(eqx.filter_jit(qfx.density_matrix)(teleport, wires=[2], mcm="exact"))
sampled = jax.jit(
    jax.vmap(lambda k: fidelity(qfx.density_matrix(teleport, wires=[2], mcm="sampled", key=k)))
)(keys)
outcomes = jax.jit(jax.vmap(lambda k: qfx.outcome_probs(teleport, [m0, m1], mcm="sampled", key=k)))(keys)
print(f"teleportation fidelity (exact): {float(exact):.6f}   theory: 1")
print(f"teleportation fidelity (sampled, worst of {SHOTS} shots): {float(jnp.min(sampled)):.6f}   theory: 1")
freq = np.asarray(outcomes.mean(0))
print(
    "Bell-measurement outcome frequencies (m0 m1 = 00, 01, 10, 11):", np.round(freq, 3), "  theory: 0.25 each"
)

# --- repeat until success -----------------------------------------------------------------------------
# One attempt on ancilla 0 and target 1: H, CRZ(-2 theta), H, measure (and reset) the ancilla. Outcome 0
# (probability p = cos^2(theta / 2), whatever the target) applies RZ(-theta) to the target; outcome 1
# applies exp(i theta Z / 2) Z, undone by the feed-forward correction RZ(theta) Z, and the attempt repeats.
theta, max_retries = 2.0, 3
m = qfx.measure(0, reset=True)
attempt = [
    qfx.H(0),
    qfx.CRZ(-2 * theta, wires=(0, 1)),
    qfx.H(0),
    m,
    qfx.cond(m, [qfx.RZ(theta, 1), qfx.Z(1)]),
]
rus = qfx.Circuit([qfx.RY(0.8, wires=1), *attempt, qfx.while_loop(m, attempt, max_iterations=max_retries)])
print("\nRepeat until success:")
print(qfx.draw(rus))

p = math.cos(theta / 2) ** 2
theory = 1 - (1 - p) ** (1 + max_retries)
exact = float(eqx.filter_jit(qfx.outcome_probs)(rus, m, mcm="exact")[0])
runs = jax.jit(jax.vmap(lambda k: qfx.outcome_probs(rus, m, mcm="sampled", key=k)[0]))(keys)
mean = float(runs.mean())
sigma = math.sqrt(theory * (1 - theory) / SHOTS)
print(f"success probability per attempt p = cos^2(theta/2) = {p:.6f}")
print(f"RUS success probability (exact): {exact:.6f}   theory: {theory:.6f}")
print(f"RUS success probability (sampled, {SHOTS} shots): {mean:.4f} +- {sigma:.4f}   theory: {theory:.6f}")

# On success the target holds RZ(-theta) RY(0.8)|0>, so <X> = sin(0.8) cos(theta); otherwise sin(0.8).
x_theory = theory * math.sin(0.8) * math.cos(theta) + (1 - theory) * math.sin(0.8)
x_exact = float(eqx.filter_jit(qfx.expval)(rus, qfx.X(1), mcm="exact"))
print(f"<X> on the target (exact): {x_exact:.6f}   theory: {x_theory:.6f}")

# Gradients flow through the loop and the branches in exact mode (reverse mode: the loop is bounded).
grad = eqx.filter_jit(jax.grad(lambda c: qfx.expval(c, qfx.X(1), mcm="exact")))(rus)
grad_theory = math.cos(0.8) * (theory * math.cos(theta) + 1 - theory)
print(f"d<X>/d(prep angle) by jax.grad: {float(grad.ops[0].theta):.6f}   theory: {grad_theory:.6f}")
