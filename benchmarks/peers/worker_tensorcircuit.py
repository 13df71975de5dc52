"""TensorCircuit-NG worker: JAX backend, complex64, `K.jit(K.value_and_grad(cost))`; batches with `K.vmap`.

Two ways to build the circuit (the job's "scan" key):
- unrolled (default): `tc.Circuit(n)` built gate by gate, every layer traced, as in TensorCircuit's
  tutorials. The state is contracted once (TensorCircuit's default contractor) and reused for the n terms
  `c.expectation_ps(z=[i])` (`reuse=True`, the default).
- scan: the layers run under `K.scan`, each step a `tc.Circuit(n, inputs=state)` returning `c.state()`:
  TensorCircuit's documented way to cut jit time for deep circuits.
"""

import json
import sys

import common

common.no_persistent_cache()
common.quiet()

import numpy as np  # noqa: E402
import tensorcircuit as tc  # noqa: E402

K = tc.set_backend("jax")
tc.set_dtype("complex64")

import jax  # noqa: E402

common.disable_jax_cache(jax)
SCAN = bool(json.loads(sys.argv[1]).get("scan", False)) if len(sys.argv) > 1 else False


def layer(c, tl, n):
    for i in range(n):
        c.ry(i, theta=tl[i, 0])
    for i in range(n):
        c.rz(i, theta=tl[i, 1])
    for i in range(n - 1):
        c.cnot(i, i + 1)


def build(workload, n, L, batch):
    def energy(c):
        return K.real(sum(c.expectation_ps(z=[i]) for i in range(n)))

    def cost_unrolled(t):
        c = tc.Circuit(n)
        for l in range(L):
            layer(c, t[l], n)
        return energy(c)

    def cost_scan(t):
        def step(state, tl):
            c = tc.Circuit(n, inputs=state)
            layer(c, tl, n)
            return c.state()

        state = K.scan(step, t, tc.Circuit(n).state())
        return energy(tc.Circuit(n, inputs=state))

    cost = cost_scan if SCAN else cost_unrolled
    sync = jax.block_until_ready
    if workload == "vg":
        fn = K.jit(K.value_and_grad(cost))
        arg = K.convert_to_tensor(common.theta(n, L))
        return fn, arg, sync, lambda out: (np.asarray(out[0]), np.asarray(out[1]))
    arg = K.convert_to_tensor(common.thetas(batch, n, L))
    if workload == "batch_fwd":
        fn = K.jit(K.vmap(cost, vectorized_argnums=0))
        return fn, arg, sync, lambda out: (np.asarray(out), None)
    if workload == "batch_vg":
        fn = K.jit(K.vmap(K.value_and_grad(cost), vectorized_argnums=0))
        return fn, arg, sync, lambda out: (np.asarray(out[0]), np.asarray(out[1]))
    raise ValueError(workload)


if __name__ == "__main__":
    from importlib.metadata import version  # noqa: PLC0415

    common.run_worker(
        build,
        library="tensorcircuit-ng",
        method="jax jit, layers in K.scan" if SCAN else "jax jit",
        versions={"tensorcircuit-ng": version("tensorcircuit-ng"), "jax": jax.__version__},
        notes="complex64",
    )
