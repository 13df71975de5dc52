"""Benchmark: value_and_grad of small circuits, with and without the default's adjoint walk on small states.

On states of at most 512 bytes (`qfx._memory.SEQUENTIAL_BYTES`), `qfx.diff.Auto` (the default) differentiates
a scalar expectation by the adjoint walk, whose program XLA's CPU runtime runs kernel after kernel on one
thread; plain backprop stacks one state per layer, and past 512 bytes of them the runtime schedules every
kernel over its thread pool. This script times both in one process (the walk switched off by setting
`qfx.diff._auto.SMALL_STATE_BYTES = 0` while tracing), on HEA(n, L) (`hea.py`) with the cost sum_i <Z_i>,
alternating the programs round by round.

Prints one markdown table: per n, the first call (trace + compile + one run) and the median over rounds of
each round's fastest call, for plain backprop and the walk, and their ratio.

Usage:
    python benchmarks/small_states.py                      # n = 2..6, L = 10
    python benchmarks/small_states.py --widths 4 --layers 4,5,10
"""

import argparse
import statistics
import time

from hea import make  # benchmarks/hea.py
import jax

from qfx.diff import _auto


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--widths", default="2,3,4,5,6", help="n, comma-separated")
    parser.add_argument("--layers", default="10", help="L, comma-separated")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=30, help="calls per round (the fastest one counts)")
    args = parser.parse_args()
    walk_bytes = _auto.SMALL_STATE_BYTES
    configs = [(int(n), int(L)) for n in args.widths.split(",") for L in args.layers.split(",")]
    fns, first = {}, {}
    for n, L in configs:
        for name, limit in (("plain", 0), ("walk", walk_bytes)):
            _auto.SMALL_STATE_BYTES = limit  # read while tracing, below
            circuit, cost = make(n, L)
            fn = jax.jit(jax.value_and_grad(cost))
            start = time.perf_counter()
            jax.block_until_ready(fn(circuit))
            first[n, L, name] = time.perf_counter() - start
            fns[n, L, name] = (fn, circuit)
    _auto.SMALL_STATE_BYTES = walk_bytes
    best = {key: [] for key in fns}
    for _ in range(args.rounds):
        for key, (fn, circuit) in fns.items():
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                jax.block_until_ready(fn(circuit))
                times.append(time.perf_counter() - start)
            best[key].append(min(times))
    print(f"HEA(n, L) value_and_grad, complex64, {args.rounds} rounds of {args.calls} calls\n")
    print("| n | L | plain backprop: first / steady | walk: first / steady | steady plain / walk |")
    print("|---:|---:|---:|---:|---:|")
    for n, L in configs:
        steady = {name: statistics.median(best[n, L, name]) for name in ("plain", "walk")}
        cells = [f"{first[n, L, name]:.2f} s / {steady[name] * 1e6:.0f} us" for name in ("plain", "walk")]
        print(f"| {n} | {L} | {cells[0]} | {cells[1]} | {steady['plain'] / steady['walk']:.2f}x |")


if __name__ == "__main__":
    main()
