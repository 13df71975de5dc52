"""Benchmark: a state vector sharded over devices (`qfx.StateVector(mesh=...)`) against the unsharded one.

HEA(n, L) as `hea.py` builds it (RY and RZ on every wire, a CNOT ladder; the layers as one `qfx.repeat`),
cost sum_i <Z_i>, complex64. For each n and each device count k (1 = unsharded, no mesh), in a fresh
process whose host platform has k devices (`XLA_FLAGS=--xla_force_host_platform_device_count=k`), of the
jitted expval and of the jitted value_and_grad with `qfx.diff.Adjoint()`:

- first call (trace, compile, run) and the median steady-state call;
- memory per device: XLA's own count for the compiled program (arguments + outputs + temporaries of one
  device's program, `memory_analysis()`), and the process's peak resident memory divided by k;

then, from the schedule alone (no devices needed), the number of global-qubit swaps per layer for HEA
and for the QFT (H, then controlled phases: diagonal, so only the Hadamards on global wires swap).

Forced host devices share this machine's cores: the times say what the collectives and the smaller
shards cost on one CPU, not what k GPUs would give. Never in CI.

Usage:
    python benchmarks/sharded.py                          # n = 20, 22, 24; k = 1, 2, 4, 8
    python benchmarks/sharded.py --sizes 20 22 24 26 28 --devices 1 2 4 8 --layers 2
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
import json, resource, statistics, sys, time
import jax, jax.numpy as jnp, numpy as np
import qfx

n, k, L = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def layer(t):
    return (
        [qfx.RY(t[i, 0], wires=i) for i in range(n)]
        + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
        + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
    )


H = sum(qfx.Z(i) for i in range(n))
backend = None
if k > 1:
    mesh = jax.make_mesh((k,), ("q",), axis_types=(jax.sharding.AxisType.Auto,))
    backend = qfx.StateVector(mesh=mesh)


def cost(theta, diff=None):
    circuit = qfx.Circuit([qfx.repeat(layer, theta, num_wires=n)], num_wires=n)
    return qfx.expval(circuit, H, backend=backend, diff=diff)


theta = jnp.asarray(np.random.default_rng(0).uniform(0, 2 * np.pi, (L, n, 2)), jnp.float32)
out = {}
for name, fn in (
    ("expval", jax.jit(cost)),
    ("v&g", jax.jit(jax.value_and_grad(lambda t: cost(t, qfx.diff.Adjoint())))),
):
    t = time.perf_counter()
    value = jax.block_until_ready(fn(theta))
    first = time.perf_counter() - t
    m = fn.lower(theta).compile().memory_analysis()
    per_device = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
    times = []
    while sum(times) < 3.0 and len(times) < 20:
        t = time.perf_counter()
        jax.block_until_ready(fn(theta))
        times.append(time.perf_counter() - t)
    v = value[0] if isinstance(value, tuple) else value
    out[name] = {"first": first, "steady": statistics.median(times), "xla_bytes": per_device,
                 "value": float(v)}
out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def _run(n: int, k: int, layers: int, timeout: float) -> dict | None:
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={k}"
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
    try:
        done = subprocess.run(
            [sys.executable, "-c", WORKER, str(n), str(k), str(layers)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def _time(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


def _mib(b: float) -> str:
    return f"{b / 2**20:.0f}"


def swaps_per_layer(n: int, g: int) -> tuple[int, int]:
    """Global-qubit swaps per layer of HEA and in the whole QFT on `n` wires with `g` global ones."""
    import jax.numpy as jnp  # noqa: PLC0415

    import qfx  # noqa: PLC0415
    from qfx._statevector._layout import schedule, swap_count  # noqa: PLC0415

    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
        )

    hea = qfx.Circuit([qfx.repeat(layer, jnp.zeros((4, n, 2)), num_wires=n)], num_wires=n)
    hea_swaps = swap_count(schedule(hea.ops, n, g, "q"))  # a loop's body once: one layer, its restore
    qft = []
    for i in range(n):
        qft.append(qfx.H(i))
        qft += [qfx.ControlledPhaseShift(3.14159 / 2 ** (j - i), wires=(j, i)) for j in range(i + 1, n)]
    qft_swaps = swap_count(schedule(qft, n, g, "q"))
    return hea_swaps, qft_swaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 22, 24])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()

    import jax  # noqa: PLC0415

    print(f"Machine: {cpu_name()}, {os.cpu_count()} cores; jax {jax.__version__}; HEA(n, {args.layers}), c64")
    print()
    print(
        "| n | devices | expval first / steady | v&g (adjoint) first / steady | MiB per device (XLA) | "
        "peak RSS / devices (MiB) | state / devices (MiB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        base = None
        for k in args.devices:
            r = _run(n, k, args.layers, args.timeout)
            if r is None:
                print(f"| {n} | {k} | failed or over {args.timeout:.0f} s | | | | |", flush=True)
                continue
            base = base or r
            agree = abs(r["expval"]["value"] - base["expval"]["value"]) < 1e-3
            e, g = r["expval"], r["v&g"]
            print(
                f"| {n} | {k} | {_time(e['first'])} / {_time(e['steady'])} | {_time(g['first'])} / "
                f"{_time(g['steady'])} | {_mib(e['xla_bytes'])} / {_mib(g['xla_bytes'])} | "
                f"{_mib(r['rss'] / k)} | {_mib(2**n * 8 / k)} |" + ("" if agree else " values differ!"),
                flush=True,
            )
    print()
    print("Global-qubit swaps (each exchanges half of every shard between pairs of devices):")
    print()
    print("| n | devices | HEA, per layer (a scan step, its restore included) | QFT, whole circuit |")
    print("|---:|---:|---:|---:|")
    for n in args.sizes:
        for k in args.devices:
            if k == 1:
                continue
            hea, qft = swaps_per_layer(n, k.bit_length() - 1)
            print(f"| {n} | {k} | {hea} | {qft} |")


if __name__ == "__main__":
    main()
