"""Benchmark: the tensor-network backend on a 60-qubit hardware-efficient circuit, by contractor.

Circuit: `depth` brick-wall layers on n = 60 wires, each RY(theta[l, i, 0]) and RZ(theta[l, i, 1]) on every
wire i, then CNOT(i, i + 1) for i = l mod 2, l mod 2 + 2, ... (nearest-neighbour pairs, alternating).
complex64; angles uniform in [0, 2 pi) from a fixed seed. Observables: a local Z_30, a local Z_30 Z_31, and
(with --sum) the 59-term sum_i Z_i Z_{i+1}.

For each (depth, observable) it prints: the network (tensors, largest intermediate in entries, flops of the
path, summed over the observable's terms), the time to find the paths (opt_einsum, cold cache), the first
call of `jax.jit(jax.value_and_grad(cost))` (paths, trace, compile, one run), and the median steady-state
time of the jitted forward pass and of the jitted value_and_grad (`block_until_ready`).
Printed, not asserted.

    python benchmarks/tensornet.py                # depth 4, Z_30 and Z_30 Z_31: under a minute
    python benchmarks/tensornet.py --depths 2 4 6 # the light cone grows with depth
    python benchmarks/tensornet.py --sum          # also the 59-term sum (compiles 8 network shapes: minutes)

On an NVIDIA GPU with the `gpu` extra, compare cuTensorNet with JAX's own einsum on the GPU, on networks
large enough to fill it (depth 18 reaches 2^28-entry intermediates and ~2e12 flops per evaluation):

    XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 python benchmarks/tensornet.py --depths 4 14 16 18 \
        --contractors jax cutensornet
"""

import argparse
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import qfx
from qfx._tensornet import _network, _operands


def brickwall(n: int, depth: int, thetas) -> qfx.Circuit:
    ops = []
    for layer in range(depth):
        ops += [qfx.RY(thetas[layer, i, 0], wires=i) for i in range(n)]
        ops += [qfx.RZ(thetas[layer, i, 1], wires=i) for i in range(n)]
        ops += [qfx.CNOT(wires=(i, i + 1)) for i in range(layer % 2, n - 1, 2)]
    return qfx.Circuit(ops, num_wires=n)


def networks(circ: qfx.Circuit, obs, optimize) -> tuple[int, int, float, float]:
    """Tensors, largest intermediate, flops (summed over terms) and the path-finding time, cold."""
    _network.clear_cache()
    skeleton = _operands._skeleton(circ.ops)
    start = time.perf_counter()
    nets = [_network._expval_network(skeleton, ("pauli", t.word), optimize) for t in obs.terms]
    seconds = time.perf_counter() - start
    _network.clear_cache()
    return sum(len(x.inputs) for x in nets), max(x.largest for x in nets), sum(x.flops for x in nets), seconds


def median_time(fn, arg, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(arg))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--depths", type=int, nargs="+", default=[4])
    parser.add_argument("--sum", action="store_true", help="also the 59-term sum of Z_i Z_i+1")
    parser.add_argument("--optimize", default="auto")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--contractors", nargs="+", default=["jax"], choices=["jax", "cutensornet"])
    args = parser.parse_args()

    n = args.n
    observables = {"Z_30": qfx.Z(n // 2), "Z_30 Z_31": qfx.Z(n // 2) @ qfx.Z(n // 2 + 1)}
    if args.sum:
        observables["sum Z_i Z_i+1"] = sum(qfx.Z(i) @ qfx.Z(i + 1) for i in range(n - 1))

    print(
        f"jax {jax.__version__}, qfx {qfx.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, device {jax.devices()[0].device_kind}, optimize={args.optimize!r}"
    )
    print()
    print(
        "| depth | observable | tensors | largest | flops | paths (s) | contractor "
        "| first value_and_grad (s) | forward (ms) | value_and_grad (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for depth in args.depths:
        thetas = jnp.asarray(rng.uniform(0, 2 * np.pi, (depth, n, 2)), jnp.float32)
        circ = brickwall(n, depth, thetas)
        for name, obs in observables.items():
            lc = obs if isinstance(obs, qfx.LinearCombination) else obs + 0  # as a LinearCombination
            tensors, largest, flops, path_seconds = networks(circ, lc, args.optimize)
            for contractor in args.contractors:
                tn = qfx.TensorNetwork(optimize=args.optimize, contractor=contractor)
                _network.clear_cache()
                jax.clear_caches()

                def cost(c, obs=obs, tn=tn):
                    return qfx.expval(c, obs, backend=tn)

                forward = jax.jit(cost)
                both = jax.jit(jax.value_and_grad(cost))
                start = time.perf_counter()
                jax.block_until_ready(both(circ))
                first = time.perf_counter() - start
                jax.block_until_ready(forward(circ))
                t_forward = median_time(forward, circ, args.repeats)
                t_both = median_time(both, circ, args.repeats)
                print(
                    f"| {depth} | {name} | {tensors} | {largest} | {flops:.3g} | {path_seconds:.2f} "
                    f"| {contractor} | {first:.2f} | {t_forward * 1e3:.2f} | {t_both * 1e3:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
