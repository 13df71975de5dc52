"""Load an OpenQASM 3 program with `input float` parameters, train it with Optax, write it back as QASM 3.

The program's inputs are the training parameters: `qfx.from_qasm(PROGRAM, inputs=params)` is called
inside the loss, so `jax.grad` reaches them (the program is parsed once; later calls reuse the parse).
Its `for` loop becomes a `qfx.for_loop`. The energy of H = Z0 Z1 + 0.5 X1 + 0.2 Z0 is
minimised with Adam and compared with the exact ground energy of the same Hamiltonian as a dense NumPy
matrix; the trained circuit is then written with `qfx.to_qasm`.

Run with `python examples/from_qasm.py`; it takes a few seconds on a CPU.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import qfx

PROGRAM = """
OPENQASM 3.0;
include "stdgates.inc";
input float theta;
input float phi;
qubit[2] q;
for uint k in [1:2] {
  ry(theta / k) q[0];
  ry(phi * k) q[1];
}
cz q[0], q[1];
"""

H = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(1) + 0.2 * qfx.Z(0)


def exact_ground_energy() -> float:
    """The lowest eigenvalue of H as a dense 4 x 4 matrix (wire 0 is the left factor)."""
    i, x, z = np.eye(2), np.array([[0.0, 1.0], [1.0, 0.0]]), np.diag([1.0, -1.0])
    dense = np.kron(z, z) + 0.5 * np.kron(i, x) + 0.2 * np.kron(z, i)
    return float(np.linalg.eigvalsh(dense)[0])


def energy(params: dict) -> jax.Array:
    return qfx.expval(qfx.from_qasm(PROGRAM, inputs=params), H)


def main() -> int:
    params = {"theta": jnp.asarray(1.2), "phi": jnp.asarray(-0.4)}
    optimizer = optax.adam(0.1)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state):
        value, grads = jax.value_and_grad(energy)(params)
        updates, state = optimizer.update(grads, state)
        return optax.apply_updates(params, updates), state, value

    for i in range(150):
        params, state, value = step(params, state)
        if i % 50 == 0:
            print(f"step {i:3d}: energy {float(value):+.6f}")

    final = float(energy(params))
    exact = exact_ground_energy()
    print(f"exact ground energy (numpy eigvalsh): {exact:.6f}")
    print(f"final energy: {final:.6f}")
    print(f"final error: {final - exact:.2e}")
    print("trained circuit as OpenQASM 3:")
    print(qfx.to_qasm(qfx.from_qasm(PROGRAM, inputs=params)), end="")
    return 0 if final - exact < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
