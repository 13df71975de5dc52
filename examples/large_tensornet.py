"""60 qubits on a laptop CPU: a local expectation value and its gradient with the tensor-network backend.

A 60-qubit state vector would need 2**60 amplitudes (8 EiB); qfx's state-vector backend refuses it. A
shallow circuit measured by a local observable is a small tensor network, though: the network of
<0|C^dagger Z_30 C|0> keeps only the gates in the backward light cone of wire 30 (a dozen wires for four
brick-wall layers), and `qfx.TensorNetwork()` contracts it with `jnp.einsum` along a path that
opt_einsum finds once per circuit structure. Gradients come from JAX's autodiff, so `jax.grad` and Optax
work as usual.

    python examples/large_tensornet.py
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import qfx

N, DEPTH, WIRE = 60, 4, 30


def hardware_efficient(thetas) -> qfx.Circuit:
    """RY and RZ on every wire, then CNOTs on alternating neighbouring pairs (a brick wall), per layer."""
    ops = []
    for layer in range(DEPTH):
        ops += [qfx.RY(thetas[layer, i, 0], wires=i) for i in range(N)]
        ops += [qfx.RZ(thetas[layer, i, 1], wires=i) for i in range(N)]
        ops += [qfx.CNOT(wires=(i, i + 1)) for i in range(layer % 2, N - 1, 2)]
    return qfx.Circuit(ops, num_wires=N)


def main():
    thetas = jnp.asarray(np.random.default_rng(0).uniform(0, 2 * np.pi, (DEPTH, N, 2)), jnp.float32)
    tn = qfx.TensorNetwork()
    obs = qfx.Z(WIRE) @ qfx.Z(WIRE + 1)

    try:
        qfx.expval(hardware_efficient(thetas), obs)
    except ValueError as e:
        print("state vector backend:", e)

    @jax.jit
    def energy_and_grad(thetas):
        return jax.value_and_grad(lambda t: qfx.expval(hardware_efficient(t), obs, backend=tn))(thetas)

    start = time.perf_counter()
    energy, grad = jax.block_until_ready(energy_and_grad(thetas))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(energy_and_grad(thetas + 0.01))  # new values: no recompilation
    again = time.perf_counter() - start
    nonzero = int(jnp.sum(jnp.abs(grad) > 0))
    print(f"{N} qubits, depth {DEPTH}: <Z_{WIRE} Z_{WIRE + 1}> = {float(energy):.6f}")
    print(f"gradient: {nonzero} of {grad.size} angles are in the light cone (the rest have zero gradient)")
    print(
        f"value and gradient: {first:.2f} s on the first call (paths + compile), {again * 1e3:.1f} ms after"
    )

    # A few steps of Adam on the 60-qubit circuit.
    opt = optax.adam(0.1)
    state = opt.init(thetas)
    for _ in range(20):
        energy, grad = energy_and_grad(thetas)
        updates, state = opt.update(grad, state)
        thetas = optax.apply_updates(thetas, updates)
    print(f"after 20 Adam steps: <Z_{WIRE} Z_{WIRE + 1}> = {float(energy_and_grad(thetas)[0]):.6f}")

    circ = hardware_efficient(thetas)
    print("marginal of wires (0, 59):", np.round(np.asarray(qfx.probs(circ, (0, 59), backend=tn)), 4))
    amp = complex(qfx.amplitude(circ, [0] * N, backend=tn))
    print(f"<0...0|C|0...0> = {amp:.3e} (a typical amplitude of 60 qubits is 2**-30 = {2**-30:.1e})")


if __name__ == "__main__":
    main()
