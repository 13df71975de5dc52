"""One of two processes of `tests/test_sharded.py::test_two_processes_agree_with_one`.

`python tests/sharded_process.py HOST:PORT PROCESS_ID` (with 4 host CPU devices each) joins the other
through `jax.distributed.initialize`, shards a 12-qubit state over the 8 devices of both, and prints the
expectation and its gradients (backprop and adjoint) as one JSON line. `cost_and_circuit` is the circuit,
imported by the test to compute the same values in one process.
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import qfx

N, LAYERS = 12, 2


def cost_and_circuit(diff, backend=None):
    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(N)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(N)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(N - 1)]
        )

    H = sum(qfx.Z(i) for i in range(N)) + 0.5 * qfx.X(0) @ qfx.Y(1) - 0.25 * qfx.X(N - 1) @ qfx.X(2)

    def cost(theta, backend=backend):
        circuit = qfx.Circuit([qfx.H(0), qfx.repeat(layer, theta, num_wires=N)], num_wires=N)
        return qfx.expval(circuit, H, backend=backend, diff=diff)

    theta = jnp.asarray(np.random.default_rng(0).uniform(-np.pi, np.pi, (LAYERS, N, 2)), jnp.float32)
    return cost, theta


def main(address: str, process_id: int) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(address, num_processes=2, process_id=process_id, initialization_timeout=120)
    mesh = jax.make_mesh((jax.device_count(),), ("q",), axis_types=(jax.sharding.AxisType.Auto,))
    backend = qfx.StateVector(mesh=mesh)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    out = {"devices": jax.device_count(), "local_devices": jax.local_device_count()}

    def local(x):  # this process's copy of a replicated result
        return np.asarray(x.addressable_shards[0].data)

    for name, diff in (("backprop", qfx.diff.Backprop()), ("adjoint", qfx.diff.Adjoint())):
        cost, theta = cost_and_circuit(diff, backend)
        theta = jax.make_array_from_process_local_data(replicated, np.asarray(theta))
        value, grad = jax.jit(jax.value_and_grad(cost), out_shardings=replicated)(theta)
        out["value"] = float(local(value))
        out[f"grad_{name}"] = local(grad).reshape(-1).tolist()
    print(json.dumps(out), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
