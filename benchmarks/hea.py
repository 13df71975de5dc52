"""Benchmark: the hardware-efficient ansatz HEA(n, L) under jit, forward and value_and_grad.

HEA(n, L): L layers, each RY(theta[l, i, 0]) on every wire i, then RZ(theta[l, i, 1]) on every wire, then
CNOT(i, i + 1) for i = 0..n-2. The layers are one `qfx.repeat` block, so they run under `lax.scan`.
Cost: sum_i <Z_i>. complex64; parameters uniform in [0, 2 pi) from a fixed seed.

Prints two markdown tables:
1. for each n at L = 10: the first call of `jax.jit(jax.value_and_grad(cost))` (trace + compile + run), and
   the median steady-state time of the jitted forward pass and of the jitted value_and_grad;
2. for n = 8: the first-call time of the jitted value_and_grad for each L, and its ratio to the smallest L
   (it stays near 1 when the layers are scanned rather than unrolled).

First-call times are medians over fresh compilations (`jax.clear_caches()` before each).

Usage:
    python benchmarks/hea.py                 # n = 4, 8, 12, 16, 20 and L = 10, 50, 200: a few minutes
    python benchmarks/hea.py --quick         # n = 4, 8, 12 and L = 10, 50, one compilation each
    python benchmarks/hea.py --time-cap 120  # skip the remaining sizes once 120 s have passed
"""

import argparse
import os
import statistics
import time

import jax
from machine import cpu_name  # benchmarks/machine.py
import numpy as np

import qfx


def hea(theta: np.ndarray) -> qfx.Circuit:
    """HEA from parameters of shape (L, n, 2)."""
    _, n, _ = theta.shape

    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
        )

    return qfx.Circuit([qfx.repeat(layer, theta, num_wires=n)], num_wires=n)


def make(n: int, num_layers: int, seed: int = 0, diff=None):
    """The circuit and its cost function; `diff` is the gradient method (default: qfx's default)."""
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.0, 2 * np.pi, size=(num_layers, n, 2)).astype(np.float32)
    circuit = hea(theta)
    observable = sum(qfx.Z(i) for i in range(n))
    kwargs = {} if diff is None else {"diff": diff}

    def cost(c):
        return qfx.expval(c, observable, **kwargs)

    return circuit, cost


def first_call(f, *args, repeats: int) -> float:
    """Median seconds for the first call of `jax.jit(f)`: trace, compile and one run.

    Each repeat jits a new wrapper of `f`, after clearing JAX's in-memory caches.
    """
    times = []
    for _ in range(repeats):
        jax.clear_caches()
        fn = jax.jit(lambda *a: f(*a))
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def steady(fn, *args, repeats: int) -> float:
    """Median seconds per call of an already compiled function."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (n = 4, 8, 12; L = 10, 50)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per steady-state median")
    parser.add_argument(
        "--compile-repeats", type=int, default=None, help="first calls per median (default 3; 1 with --quick)"
    )
    parser.add_argument("--time-cap", type=float, default=None, help="skip remaining sizes after this many s")
    args = parser.parse_args()
    compile_repeats = args.compile_repeats or (1 if args.quick else 3)

    widths = (4, 8, 12) if args.quick else (4, 8, 12, 16, 20)
    depths = (10, 50) if args.quick else (10, 50, 200)
    # Pay JAX's one-time start-up costs before timing anything.
    small_circuit, small_cost = make(2, 1)
    jax.block_until_ready(jax.jit(jax.value_and_grad(small_cost))(small_circuit))
    start = time.perf_counter()

    def over_cap() -> bool:
        return args.time_cap is not None and time.perf_counter() - start > args.time_cap

    print(
        f"qfx {qfx.__version__}, jax {jax.__version__}, device {jax.devices()[0]}, "
        f"{os.cpu_count()} CPUs, {cpu_name()}; complex64; "
        f"steady state: medians of {args.repeats} calls; first calls: medians of {compile_repeats}\n"
    )

    print("HEA(n, L = 10), cost sum_i <Z_i>\n")
    print("| n | first call of jit(value_and_grad) | forward (jit) | value_and_grad (jit) |")
    print("|---:|---:|---:|---:|")
    for n in widths:
        if over_cap():
            print(f"| {n} | skipped (time cap) | | |")
            continue
        circuit, cost = make(n, 10)
        compile_time = first_call(jax.value_and_grad(cost), circuit, repeats=compile_repeats)
        forward = steady(jax.jit(cost), circuit, repeats=args.repeats)
        both = steady(jax.jit(jax.value_and_grad(cost)), circuit, repeats=args.repeats)
        print(f"| {n} | {fmt(compile_time)} | {fmt(forward)} | {fmt(both)} |", flush=True)

    n = 8
    print(f"\nFirst call (trace + compile + run) of jit(value_and_grad) for HEA(n = {n}, L)\n")
    print(f"| L | first call | ratio to L = {depths[0]} |")
    print("|---:|---:|---:|")
    base = None
    for num_layers in depths:
        if over_cap():
            print(f"| {num_layers} | skipped (time cap) | |")
            continue
        circuit, cost = make(n, num_layers)
        t = first_call(jax.value_and_grad(cost), circuit, repeats=compile_repeats)
        base = t if base is None else base
        print(f"| {num_layers} | {fmt(t)} | {t / base:.2f} |", flush=True)

    print(f"\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
