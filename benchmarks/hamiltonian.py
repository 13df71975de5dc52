"""Benchmark: expectation values of Hamiltonians with many Pauli words (chemistry-like sums).

HEA(n, L = 4) as in `hea.py`, measured on a random Pauli sum of T distinct words, each on 1 to 4 random
wires with random X / Y / Z letters and a normal coefficient (fixed seed). Prints, for each (n, T), the
first call of `jax.jit(jax.value_and_grad(cost))` (trace + compile + one run) and the median steady-state
time, for the two ways `qfx/_statevector/_reductions.py: pauli_expvals` evaluates words:

- `scan`: one word per step of a `lax.scan` (qfx's choice above `SCAN_MIN_PASSES` passes);
- `windows`: shared marginals per group of words flipping the same wires, unrolled (forced here by
  raising `SCAN_MIN_PASSES`), whose program grows with the number of groups.

Usage:
    python benchmarks/hamiltonian.py                       # n = 12, 16; T = 10, 100, 1000
    python benchmarks/hamiltonian.py --sizes 12 --terms 100
    python benchmarks/hamiltonian.py --time-cap 60         # skip `windows` configs after one slower than this
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from machine import cpu_name  # benchmarks/machine.py
import numpy as np

import qfx
from qfx._statevector import _reductions


def pauli_sum(n: int, terms: int, seed: int = 0) -> qfx.LinearCombination:
    rng = np.random.default_rng(seed)
    words: set = set()
    while len(words) < terms:
        wires = sorted(rng.choice(n, rng.integers(1, 5), replace=False))
        words.add(tuple((int(w), "XYZ"[rng.integers(3)]) for w in wires))
    return sum(float(rng.normal()) * qfx.PauliWord(w) for w in sorted(words))


def hea(n: int, num_layers: int, seed: int = 0) -> qfx.Circuit:
    theta = np.random.default_rng(seed).uniform(0, 2 * np.pi, (num_layers, n, 2)).astype(np.float32)

    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
        )

    return qfx.Circuit([qfx.repeat(layer, jnp.asarray(theta), num_wires=n)], num_wires=n)


def measure(n: int, terms: int, repeats: int) -> tuple[float, float, float]:
    circuit, obs = hea(n, 4), pauli_sum(n, terms)
    jax.clear_caches()
    f = jax.jit(jax.value_and_grad(lambda c: qfx.expval(c, obs)))
    start = time.perf_counter()
    value = jax.block_until_ready(f(circuit))[0]
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(circuit))
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), float(value)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[12, 16])
    parser.add_argument("--terms", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--time-cap", type=float, default=120.0, help="seconds per first call of 'windows'")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {cpu_name()}, SCAN_MIN_PASSES = {_reductions.SCAN_MIN_PASSES}\n")
    print("| n | words | method | first call (s) | value_and_grad (ms) | value |")
    print("|---:|---:|---|---:|---:|---:|")
    default = _reductions.SCAN_MIN_PASSES
    for n in args.sizes:
        too_slow = False
        for terms in args.terms:
            for method in ("scan", "windows"):
                if method == "windows" and too_slow:
                    print(
                        f"| {n} | {terms} | {method} | skipped (a smaller T took > {args.time_cap:g} s) | | |"
                    )
                    continue
                _reductions.SCAN_MIN_PASSES = 0 if method == "scan" else 10**9
                first, steady, value = measure(n, terms, args.repeats)
                too_slow = too_slow or (method == "windows" and first > args.time_cap)
                print(
                    f"| {n} | {terms} | {method} | {first:.2f} | {steady * 1e3:.1f} | {value:.6f} |",
                    flush=True,
                )
    _reductions.SCAN_MIN_PASSES = default


if __name__ == "__main__":
    main()
