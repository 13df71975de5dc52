"""Benchmark: the largest states one machine simulates, unsharded: time and peak memory against the state.

The circuit: RY on every wire, a CNOT ladder, RZ on every wire (random angles); the observable
`Z0 + Z(n-1) + 0.5 X3 Z4`. For each n and mode, in a fresh process: `qfx.expval` called eagerly
(`expval`), or its gradient with `qfx.diff.Adjoint()` (`adjoint`); the time of that first call (compile
included) and the process's peak resident memory, in GiB and as a multiple of the `2**n` complex64 state.
Past the size where a third copy of the state would not fit, qfx reads Pauli words a chunk at a time and
applies permutation gates one by one, so that an expectation needs only the gates' two states. Never in CI.

Usage:
    python benchmarks/large_state.py                      # n = 26, 28, 30 expval; 26, 28 adjoint
    python benchmarks/large_state.py --expval 24 26 --adjoint 24
"""

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import cpu_name  # noqa: E402

WORKER = r"""
import json, resource, sys, time
import jax, numpy as np, qfx

n, mode = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
ops = [qfx.RY(float(a), wires=i) for i, a in enumerate(rng.uniform(0, 3, n))]
ops += [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
ops += [qfx.RZ(float(a), wires=i) for i, a in enumerate(rng.uniform(0, 3, n))]
circuit = qfx.Circuit(ops, num_wires=n)
H = qfx.Z(0) + qfx.Z(n - 1) + 0.5 * qfx.X(3) @ qfx.Z(4)
t = time.perf_counter()
if mode == "expval":
    value = float(qfx.expval(circuit, H))
else:
    value = float(jax.grad(lambda c: qfx.expval(c, H, diff=qfx.diff.Adjoint()))(circuit).ops[0].theta)
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "value": value}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expval", type=int, nargs="*", default=[26, 28, 30])
    parser.add_argument("--adjoint", type=int, nargs="*", default=[26, 28])
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args()
    print(f"Machine: {cpu_name()}, {os.cpu_count()} cores; complex64; first call, fresh process each")
    print()
    print("| n | mode | time | peak RSS | x the state |")
    print("|---:|---|---:|---:|---:|")
    for mode, sizes in (("expval", args.expval), ("adjoint", args.adjoint)):
        for n in sizes:
            try:
                done = subprocess.run(
                    [sys.executable, "-c", WORKER, str(n), mode],
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                    env=dict(os.environ, JAX_PLATFORMS="cpu"),
                )
            except subprocess.TimeoutExpired:
                print(f"| {n} | {mode} | over {args.timeout:.0f} s | | |", flush=True)
                continue
            if done.returncode:
                reason = (done.stderr.strip().splitlines() or ["?"])[-1][:80]
                print(f"| {n} | {mode} | failed: {reason} | | |", flush=True)
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            state = 2**n * 8
            rss, seconds = r["rss"], r["seconds"]
            row = f"| {n} | {mode} | {seconds:.1f} s | {rss / 2**30:.2f} GiB | {rss / state:.2f} |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
