"""First call, steady state and peak memory of HEA(n, L = 10) value_and_grad with XLA's CPU fusion emitters
on (JAX's default) and off, each configuration in fresh processes, alternating.

Prints a table; asserts nothing. The option is a per-function compiler option a user passes to `jax.jit`:

    jax.jit(f, compiler_options={"xla_cpu_use_fusion_emitters": False})

(qfx never sets it: it is the caller's compilation.) The table says what it trades: the first call and the
compiler's memory against steady-state time.

    python benchmarks/compile_options.py [--widths 4,8,12,16,20] [--layers 10] [--rounds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from machine import cpu_name  # benchmarks/machine.py

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {here!r})
import jax
from hea import make
n, layers, legacy = {n}, {layers}, {legacy}
circuit, cost = make(n, layers)
options = {{"xla_cpu_use_fusion_emitters": False}} if legacy else None
start = time.perf_counter()
f = jax.jit(jax.value_and_grad(cost), compiler_options=options)
jax.block_until_ready(f(circuit))
first = time.perf_counter() - start
times = []
while len(times) < 5 or (sum(times) < 1.0 and len(times) < 200):
    t0 = time.perf_counter()
    jax.block_until_ready(f(circuit))
    times.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"first": first, "steady": sorted(times)[len(times) // 2], "peak": peak}}))
"""


def run(n: int, layers: int, legacy: bool) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    code = CHILD.format(here=here, n=n, layers=layers, legacy=legacy)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt_time(s: float) -> str:
    return f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="4,8,12,16,20")
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per configuration")
    args = parser.parse_args()
    print(
        f"HEA(n, L = {args.layers}) jit(value_and_grad) on {cpu_name()}; medians of {args.rounds} fresh "
        "processes per cell"
    )
    print("| n | first call: default / emitters off | steady: default / off | peak RSS: default / off |")
    print("|---:|---:|---:|---:|")
    for n in (int(w) for w in args.widths.split(",")):
        results = {False: [], True: []}
        for _ in range(args.rounds):
            for legacy in (False, True):  # alternating, so background load reaches both alike
                results[legacy].append(run(n, args.layers, legacy))
        med = {
            k: {f: statistics.median(r[f] for r in v) for f in ("first", "steady", "peak")}
            for k, v in results.items()
        }
        d, o = med[False], med[True]
        print(
            f"| {n} | {fmt_time(d['first'])} / {fmt_time(o['first'])} | {fmt_time(d['steady'])} / "
            f"{fmt_time(o['steady'])} | {d['peak']:.0f} / {o['peak']:.0f} MiB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
