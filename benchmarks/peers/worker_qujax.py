"""qujax worker: `get_params_to_statetensor_func` + `get_statetensor_to_expectation_func`, `jax.jit`.

qujax's rotation angles are in units of pi (Ry(p) = exp(-i p pi Y / 2)), so the cost divides the radian
parameters by pi; JAX's chain rule gives the gradient in radians. The circuit is a Python loop over
gates (unrolled under jit). complex64 (JAX's default with x64 off). Batches: `jax.vmap`.
"""

import common

common.no_persistent_cache()
common.quiet()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import qujax  # noqa: E402

common.disable_jax_cache(jax)


def build(workload, n, L, batch):
    gates, qubits, params = [], [], []

    def index(l, i, k):  # position of theta[l, i, k] in theta.reshape(-1)
        return (l * n + i) * 2 + k

    for l in range(L):
        for i in range(n):
            gates.append("Ry"), qubits.append([i]), params.append([index(l, i, 0)])
        for i in range(n):
            gates.append("Rz"), qubits.append([i]), params.append([index(l, i, 1)])
        for i in range(n - 1):
            gates.append("CX"), qubits.append([i, i + 1]), params.append([])
    to_state = qujax.get_params_to_statetensor_func(gates, qubits, params, n)
    to_expval = qujax.get_statetensor_to_expectation_func([["Z"]] * n, [[i] for i in range(n)], [1.0] * n)

    def cost(t):
        return to_expval(to_state(t.reshape(-1) / jnp.pi))

    sync = jax.block_until_ready
    if workload == "vg":
        fn = jax.jit(jax.value_and_grad(cost))
        return fn, jnp.asarray(common.theta(n, L)), sync, lambda out: (np.asarray(out[0]), np.asarray(out[1]))
    arg = jnp.asarray(common.thetas(batch, n, L))
    if workload == "batch_fwd":
        return jax.jit(jax.vmap(cost)), arg, sync, lambda out: (np.asarray(out), None)
    if workload == "batch_vg":
        fn = jax.jit(jax.vmap(jax.value_and_grad(cost)))
        return fn, arg, sync, lambda out: (np.asarray(out[0]), np.asarray(out[1]))
    raise ValueError(workload)


if __name__ == "__main__":
    common.run_worker(
        build,
        library="qujax",
        method="jit",
        versions={"qujax": qujax.__version__, "jax": jax.__version__},
        notes="complex64",
    )
