"""Benchmark: QAOA-style layers (runs of diagonal gates), forward and value_and_grad under jit.

QAOA(n, L): Hadamards on every wire, then L layers of IsingZZ(gamma_l * (1 + 0.01 k)) on every edge k of a
ring and of a ring of skips by 3 (from even wires), then RX(beta_l) on every wire, the layers as one
`qfx.repeat` block; cost: the sum of Z_a Z_b over the same edges. Each IsingZZ has its own angle, so no two
diagonals are the same value. complex64.

Prints one table: for each n, the first call of the jitted value_and_grad (trace + compile + run, after
`jax.clear_caches()`) and the median steady-state forward and value_and_grad.

    python benchmarks/qaoa.py                    # n = 4, 8, 12, 16, 20
    python benchmarks/qaoa.py --widths 16 20 --layers 4
"""

import argparse
import time

from hea import steady  # benchmarks/hea.py
import jax
import jax.numpy as jnp
from machine import cpu_name  # benchmarks/machine.py
import numpy as np

import qfx


def make(n: int, layers: int):
    edges = [(i, (i + 1) % n) for i in range(n)] + [(i, (i + 3) % n) for i in range(0, n, 2)]

    def layer(p):  # p = (gamma_l, beta_l)
        ops = [qfx.IsingZZ(p[0] * (1 + 0.01 * k), wires=e) for k, e in enumerate(edges)]
        return ops + [qfx.RX(p[1], wires=i) for i in range(n)]

    def circuit(params):  # the layers as one `qfx.repeat` block: a `lax.scan`, compiled once
        hadamards = [qfx.H(i) for i in range(n)]
        return qfx.Circuit([*hadamards, qfx.repeat(layer, params.T, num_wires=n)], num_wires=n)

    hamiltonian = sum(qfx.Z(a) @ qfx.Z(b) for a, b in edges)

    def cost(params):
        return qfx.expval(circuit(params), hamiltonian)

    params = jnp.asarray(np.random.default_rng(0).uniform(0, 1, (2, layers)).astype(np.float32))
    return cost, params


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[4, 8, 12, 16, 20])
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    print(
        f"qfx {qfx.__version__}, jax {jax.__version__}, {jax.devices()[0].platform}, {cpu_name()}; "
        f"QAOA(n, L = {args.layers}), medians of the steady state\n"
    )
    print("| n | edges | first value_and_grad | forward | value_and_grad |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.widths:
        cost, params = make(n, args.layers)
        jax.clear_caches()
        vg = jax.jit(jax.value_and_grad(cost))
        start = time.perf_counter()
        jax.block_until_ready(vg(params))
        first = time.perf_counter() - start
        repeats = 7 if n >= 16 else 50
        fwd = steady(jax.jit(cost), params, repeats=repeats)
        vg_time = steady(vg, params, repeats=repeats)
        edges = n + len(range(0, n, 2))
        print(f"| {n} | {edges} | {first:.2f} s | {fwd * 1e3:.3f} ms | {vg_time * 1e3:.3f} ms |", flush=True)


if __name__ == "__main__":
    main()
