"""Benchmark: time to the first result, in fresh processes, as a new user would call qfx.

HEA(n, L) as `hea.py` builds it, but written the two ways users write it: a flat list of gates built in
Python loops, and the layers as one `qfx.repeat` block. Cost: sum_i <Z_i>. complex64. Every cell is one
fresh Python process (JAX imported, nothing compiled, no persistent compilation cache), so it includes
everything a user waits for after `import qfx` except the import itself:

- `eager expval`: `qfx.expval(circuit, H)` called without `jax.jit`, first call / second call with new
  parameter values (the same structure);
- `eager grad`: `jax.grad(cost)(circuit)` without `jax.jit`, first / second call;
- `jit v&g flat` and `jit v&g repeat`: the first call of `jax.jit(jax.value_and_grad(cost))`, and for
  `qfx.repeat` its steady state (the median of 5 further calls);
- `lightning`: PennyLane's lightning.qubit adjoint gradient, first call (from the peers environment,
  `benchmarks/peers/setup.sh`; skipped when it is missing);
- `persistent cache`: with JAX's persistent compilation cache in a temporary folder, the first call of
  the eager gradient in a second process after a first one filled it;
- `eager grad, circuit built from an array` (only with `--columns eager_grad_array`): `jax.grad` of
  `lambda theta: qfx.expval(flat(theta), H)` without `jax.jit`, first / second call. JAX differentiates
  the function's own `theta[l, i, k]` one by one there (see `docs/guides/performance.md`).

A last table gives the peak resident memory (`ru_maxrss`) of one value_and_grad of the flat HEA(20, 20),
with `qfx.diff.Adjoint()` and with the default, each in its own process. `--floors` prints instead what
JAX alone costs on the same inputs, with no simulation: the flat list's indexing of `theta` under
jit(value_and_grad), and an eager `jax.grad` over the flat circuit's leaves into a rule that does nothing.

Usage:
    python benchmarks/first_call.py                 # n = 4, 8, 12, 16, 20; L = 10, 200
    python benchmarks/first_call.py --quick         # n = 4, 12; L = 10, 200
    python benchmarks/first_call.py --widths 8 --depths 10 50 200
    python benchmarks/first_call.py --columns jit_flat     # one column (the others print "-")
    python benchmarks/first_call.py --quick --columns eager_grad eager_grad_array
    python benchmarks/first_call.py --floors        # JAX's own cost of the same inputs, no simulation
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
PEERS_PYTHON = HERE / "peers" / ".venv" / "bin" / "python"

WORKER = r"""
import json, resource, sys, time
t_start = time.perf_counter()
import jax, jax.numpy as jnp, numpy as np
import qfx

mode, n, L = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
H = sum(qfx.Z(i) for i in range(n))


def flat(theta):
    ops = []
    for l in range(L):
        ops += [qfx.RY(theta[l, i, 0], wires=i) for i in range(n)]
        ops += [qfx.RZ(theta[l, i, 1], wires=i) for i in range(n)]
        ops += [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
    return qfx.Circuit(ops, num_wires=n)


def rolled(theta):
    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
        )
    return qfx.Circuit([qfx.repeat(layer, theta, num_wires=n)], num_wires=n)


def thetas():
    return rng.uniform(0, 2 * np.pi, (L, n, 2)).astype(np.float32)


def timed(fn, *args):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


out = {}
# Eager calls: the circuits are built before the clock starts (from NumPy parameters), the call is timed.
if mode == "eager_expval":
    first, second = flat(thetas()), flat(thetas())
    out["first"] = timed(lambda: qfx.expval(first, H))
    out["second"] = timed(lambda: qfx.expval(second, H))
elif mode == "eager_grad":
    cost = lambda c: qfx.expval(c, H)
    first, second = flat(thetas()), flat(thetas())
    out["first"] = timed(lambda: jax.grad(cost)(first))
    out["second"] = timed(lambda: jax.grad(cost)(second))
elif mode == "eager_grad_array":  # the circuit built from a parameter array inside the function
    cost = lambda t: qfx.expval(flat(t), H)
    first, second = jnp.asarray(thetas()), jnp.asarray(thetas())
    out["first"] = timed(lambda: jax.grad(cost)(first))
    out["second"] = timed(lambda: jax.grad(cost)(second))
elif mode in ("jit_flat", "jit_repeat"):
    build = flat if mode == "jit_flat" else rolled
    fn = jax.jit(jax.value_and_grad(lambda t: qfx.expval(build(t), H)))
    out["first"] = timed(fn, jnp.asarray(thetas()))
    if mode == "jit_repeat":  # the steady state, for the record that it did not regress: median of 5
        out["steady"] = float(np.median([timed(fn, jnp.asarray(thetas())) for _ in range(5)]))
elif mode in ("rss_adjoint", "rss_default"):
    diff = qfx.diff.Adjoint() if mode == "rss_adjoint" else qfx.diff.Auto()
    fn = jax.jit(jax.value_and_grad(lambda t: qfx.expval(flat(t), H, diff=diff)))
    out["first"] = timed(fn, jnp.asarray(thetas()))
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
# Floors: what JAX alone costs on the same inputs, with no simulation (`--floors`).
elif mode == "floor_index":  # the flat list's indexing of theta under jit(value_and_grad), nothing else
    def indexed(theta):
        return sum(jnp.sin(theta[l, i, k]) for l in range(L) for i in range(n) for k in range(2))
    out["first"] = timed(jax.jit(jax.value_and_grad(indexed)), jnp.asarray(thetas()))
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
elif mode == "floor_grad":  # eager jax.grad over the flat circuit's leaves into a rule that does nothing
    count = len(jax.tree.leaves(flat(thetas())))

    @jax.custom_vjp
    def nothing(*xs):
        return jnp.float32(0)

    nothing.defvjp(lambda *xs: (jnp.float32(0), None), lambda _, g: (np.float32(0),) * count)
    grad = jax.grad(lambda c: nothing(*jax.tree.leaves(c)))
    first, second = flat(thetas()), flat(thetas())
    out["first"] = timed(lambda: grad(first))
    out["second"] = timed(lambda: grad(second))
print("RESULT " + json.dumps(out))
"""

LIGHTNING = r"""
import json, sys, time
import numpy as np
import pennylane as qml
from pennylane import numpy as pnp

n, L = int(sys.argv[1]), int(sys.argv[2])
dev = qml.device("lightning.qubit", wires=n, c_dtype=np.complex64)
H = qml.Hamiltonian([1.0] * n, [qml.Z(i) for i in range(n)])


@qml.qnode(dev, diff_method="adjoint")
def cost(t):
    for l in range(L):
        for i in range(n):
            qml.RY(t[l, i, 0], wires=i)
        for i in range(n):
            qml.RZ(t[l, i, 1], wires=i)
        for i in range(n - 1):
            qml.CNOT(wires=[i, i + 1])
    return qml.expval(H)


t = pnp.asarray(np.random.default_rng(0).uniform(0, 2 * np.pi, (L, n, 2)), requires_grad=True)
start = time.perf_counter()
qml.grad(cost)(t)
print("RESULT " + json.dumps({"first": time.perf_counter() - start}))
"""


COLUMNS = ["eager_expval", "eager_grad", "jit_flat", "jit_repeat", "cache", "lightning", "eager_grad_array"]
DEFAULT_COLUMNS = COLUMNS[:-1]  # eager_grad_array takes minutes per cell from L = 50 on: asked for by name
TIMEOUT = 120  # seconds a cell may take; longer ones print "> 120 s"


def run(code: str, args: list, python: str = sys.executable, env: dict | None = None) -> dict:
    """Runs `code` in a fresh process and returns what it printed after RESULT (or the error)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    environ.update(JAX_PLATFORMS="cpu", **(env or {}))
    try:
        proc = subprocess.run(
            [python, "-c", code, *map(str, args)],
            capture_output=True,
            text=True,
            env=environ,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"> {TIMEOUT} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}


def fmt(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"


def pair(r: dict) -> str:
    if "error" in r:
        return r["error"] if isinstance(r["error"], str) else f"error: {r['error']}"
    second = r.get("second", r.get("steady"))
    return fmt(r["first"]) if second is None else f"{fmt(r['first'])} / {fmt(second)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 4, 12 and L = 10, 200")
    parser.add_argument("--widths", type=int, nargs="*", default=None)
    parser.add_argument("--depths", type=int, nargs="*", default=None)
    parser.add_argument("--no-rss", action="store_true", help="skip the memory table")
    parser.add_argument("--floors", action="store_true", help="only the table of JAX's own floors")
    parser.add_argument(
        "--columns",
        nargs="*",
        choices=COLUMNS,
        default=DEFAULT_COLUMNS,
        help="the columns to measure (default: all but eager_grad_array)",
    )
    args = parser.parse_args()
    widths = args.widths or ((4, 12) if args.quick else (4, 8, 12, 16, 20))
    depths = args.depths or (10, 200)
    lightning = PEERS_PYTHON.exists()
    array = "eager_grad_array" in args.columns
    start = time.perf_counter()
    print(f"{sys.version.split()[0]}, {os.cpu_count()} CPUs; fresh process per cell; complex64\n")
    if args.floors:
        floors(widths, depths)
        print(f"\ntotal {time.perf_counter() - start:.0f} s")
        return
    print(
        "| n | L | eager expval first / second | eager grad first / second | jit v&g flat | "
        "jit v&g repeat first / steady | persistent cache, new process | lightning adjoint |"
        + (" eager grad, circuit built from an array, first / second |" if array else "")
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if array else ""))
    for n in widths:
        for L in depths:
            modes = ("eager_expval", "eager_grad", "jit_flat", "jit_repeat")
            cells = [run(WORKER, [mode, n, L]) if mode in args.columns else {"first": None} for mode in modes]
            cached = {}
            if "cache" in args.columns:
                with tempfile.TemporaryDirectory() as cache:
                    env = {
                        "JAX_COMPILATION_CACHE_DIR": cache,
                        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
                    }
                    run(WORKER, ["eager_grad", n, L], env=env)
                    cached = run(WORKER, ["eager_grad", n, L], env=env)
            peer = {"first": None}
            if lightning and "lightning" in args.columns:
                peer = run(LIGHTNING, [n, L], python=str(PEERS_PYTHON))
            row = [pair(c) for c in cells] + [fmt(cached.get("first")), pair(peer)]
            if array:
                row.append(pair(run(WORKER, ["eager_grad_array", n, L])))
            print(f"| {n} | {L} | " + " | ".join(row) + " |", flush=True)
    if not args.no_rss:
        print("\nPeak RSS of jit(value_and_grad) of the flat HEA(20, 20), one fresh process each\n")
        print("| method | first call | peak RSS |")
        print("|---|---:|---:|")
        for mode, name in (("rss_adjoint", "qfx.diff.Adjoint()"), ("rss_default", "default (Auto)")):
            r = run(WORKER, [mode, 20, 20])
            rss = f"{r['rss_mb']:.0f} MB" if "rss_mb" in r else str(r.get("error"))
            print(f"| {name} | {fmt(r.get('first'))} | {rss} |", flush=True)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


def floors(widths, depths):
    """What JAX alone costs on the inputs of the flat rows, no simulation: the first call of
    jit(value_and_grad) of sum_lik sin(theta[l, i, k]) (the indexing a flat list does) with its peak RSS,
    and an eager `jax.grad` over the flat circuit's leaves into a custom_vjp that returns zeros."""
    print("| n | L | indexing alone, jit v&g: first call / peak RSS | eager grad, no-op rule: first / 2nd |")
    print("|---:|---:|---:|---:|")
    for n in widths:
        for L in depths:
            index, grad = run(WORKER, ["floor_index", n, L]), run(WORKER, ["floor_grad", n, L])
            rss = f"{index['rss_mb']:.0f} MB" if "rss_mb" in index else "-"
            print(f"| {n} | {L} | {pair(index)} / {rss} | {pair(grad)} |", flush=True)


if __name__ == "__main__":
    main()
