"""PennyLane worker: default.qubit (JAX interface, backprop, jax.jit) or lightning.qubit (adjoint, no jit).

The job's "device" key picks: "default.qubit" (default) or "lightning.qubit".

default.qubit: `@qml.qnode(dev, interface="jax", diff_method="backprop")`,
    `jax.jit(jax.value_and_grad(qnode))`.
    complex64 follows from JAX's default (x64 off): PennyLane's complex128 initial state is truncated.
    Batches use PennyLane's parameter broadcasting (angles with a leading batch axis) under jit; the
    per-sample gradients are the gradient of the sum of the broadcast costs (samples are independent).
lightning.qubit: `qml.device("lightning.qubit", c_dtype=np.complex64)`, `diff_method="adjoint"`, autograd
    interface with `qml.grad` (its `.forward` holds the value). Measured faster than the JAX interface
    without jit (65 ms against 390 ms for n = 8, L = 10 here). Batches: broadcasting for the forward pass
    with a forward-only qnode (PennyLane splits it into one tape per sample and runs them as a batch;
    faster than a loop), a Python loop of `qml.grad` for gradients.
The cost is one observable, a Hamiltonian sum_i Z_i (one adjoint pass; measured faster than qml.sum here).
"""

import json
import sys

import common

common.no_persistent_cache()
common.quiet()

import numpy as np  # noqa: E402
import pennylane as qml  # noqa: E402

DEVICE = json.loads(sys.argv[1]).get("device", "default.qubit") if len(sys.argv) > 1 else "default.qubit"


def layers(t, n, L):
    """HEA gates; `t[..., l, i, k]` so a leading batch axis broadcasts."""
    for l in range(L):
        for i in range(n):
            qml.RY(t[..., l, i, 0], wires=i)
        for i in range(n):
            qml.RZ(t[..., l, i, 1], wires=i)
        for i in range(n - 1):
            qml.CNOT(wires=[i, i + 1])


def build_default(workload, n, L, batch):
    import jax  # noqa: PLC0415 - the lightning worker does not need JAX
    import jax.numpy as jnp  # noqa: PLC0415

    common.disable_jax_cache(jax)
    dev = qml.device("default.qubit", wires=n)
    obs = qml.Hamiltonian([1.0] * n, [qml.Z(i) for i in range(n)])

    @qml.qnode(dev, interface="jax", diff_method="backprop")
    def cost(t):
        layers(t, n, L)
        return qml.expval(obs)

    sync = jax.block_until_ready
    if workload == "vg":
        fn = jax.jit(jax.value_and_grad(cost))
        arg = jnp.asarray(common.theta(n, L))
        return fn, arg, sync, lambda out: (np.asarray(out[0]), np.asarray(out[1]))
    arg = jnp.asarray(common.thetas(batch, n, L))
    if workload == "batch_fwd":
        fn = jax.jit(cost)
        return fn, arg, sync, lambda out: (np.asarray(out), None)
    if workload == "batch_vg":

        def total(t):
            values = cost(t)
            return values.sum(), values

        grad_fn = jax.jit(jax.grad(total, has_aux=True))
        return grad_fn, arg, sync, lambda out: (np.asarray(out[1]), np.asarray(out[0]))
    raise ValueError(workload)


def build_lightning(workload, n, L, batch):
    from pennylane import numpy as pnp  # noqa: PLC0415

    dev = qml.device("lightning.qubit", wires=n, c_dtype=np.complex64)
    obs = qml.Hamiltonian([1.0] * n, [qml.Z(i) for i in range(n)])

    @qml.qnode(dev, interface="autograd", diff_method="adjoint")
    def cost(t):
        layers(t, n, L)
        return qml.expval(obs)

    grad = qml.grad(cost)
    sync = lambda out: out  # noqa: E731 - synchronous already
    if workload == "vg":

        def vg(t):
            g = grad(t)
            return grad.forward, g

        arg = pnp.array(common.theta(n, L), requires_grad=True)
        return vg, arg, sync, lambda out: (np.asarray(out[0]), np.asarray(out[1]))
    stacked = common.thetas(batch, n, L)
    if workload == "batch_fwd":
        # Forward only: a qnode without a gradient method (measured 30% faster than the adjoint qnode here).
        @qml.qnode(dev, interface=None, diff_method=None)
        def forward(t):
            layers(t, n, L)
            return qml.expval(obs)

        return forward, stacked, sync, lambda out: (np.asarray(out), None)
    if workload == "batch_vg":

        def loop(ts):
            values, grads = [], []
            for t in ts:
                grads.append(grad(t))
                values.append(grad.forward)
            return np.asarray(values), np.asarray(grads)

        arg = [pnp.array(t, requires_grad=True) for t in stacked]
        return loop, arg, sync, lambda out: out
    raise ValueError(workload)


if __name__ == "__main__":
    from importlib.metadata import version

    if DEVICE == "lightning.qubit":
        common.run_worker(
            build_lightning,
            library="pennylane-lightning",
            method="lightning.qubit adjoint",
            versions={"pennylane": qml.__version__, "pennylane-lightning": version("pennylane-lightning")},
            notes="complex64 (c_dtype); autograd interface, no jit",
        )
    else:
        import jax

        common.run_worker(
            build_default,
            library="pennylane",
            method="default.qubit jit backprop",
            versions={"pennylane": qml.__version__, "jax": jax.__version__},
            notes="complex64 (jax x64 off)",
        )
