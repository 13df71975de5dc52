"""Peak memory and time of value_and_grad: backprop vs adjoint vs parameter-shift, on the hardware-efficient
ansatz (HEA). Printed, not asserted.

HEA(n, L): per layer, RY(theta[l, i, 0]) on every wire i, then RZ(theta[l, i, 1]) on every wire, then
CNOT(i, i + 1) for i = 0..n-2; the layers are a `qfx.repeat` block (one `lax.scan`). The cost is
sum_i <Z_i>, in complex64.

Each method runs in fresh processes (`--worker`), so each peak resident memory (`ru_maxrss`) is its own,
twice: "cold" compiles (XLA's compiler needs a few hundred MiB for a gradient program, more than the
computation at n = 20) and fills a persistent compilation cache; "warm", a second fresh process, loads the
compiled program from that cache, so its peak is the JAX runtime plus the computation itself. Also shown:
XLA's temporary buffers (`memory_analysis().temp_size_in_bytes`). The time is the median of `--repeats`
calls after a warm-up call, in the warm process; a last process compiles forward, backprop and adjoint
together and times them in `--rounds` alternating rounds, for time ratios that one slow process cannot
skew. Parameter-shift costs 2 circuit evaluations per parameter (1600 at n = 20, L = 20); it
differentiates with respect to the first `--ps-params` angles of the first layer only (the rest are
constants), and its time is extrapolated linearly to all parameters (marked ~).

Targets (from the issue): adjoint peak memory below 1/5 of backprop's, and within 64 MiB plus 6 state
vectors of a forward pass; adjoint time at most 3x a forward pass.

    python benchmarks/diff_memory.py                  # n = 20, L = 20: several minutes, ~7 GiB for backprop
    python benchmarks/diff_memory.py --n 14 --layers 8
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import qfx

METHODS = ("forward", "backprop", "adjoint", "parameter_shift")


def build(method: str, n: int, layers: int, ps_params: int):
    """(fn, theta, scale): the jitted function `method` times, its argument, and the factor that
    extrapolates its time to all parameters (parameter-shift only)."""

    def layer(t):  # t: (n, 2)
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
        )

    def circuit(theta):
        return qfx.Circuit([qfx.repeat(layer, theta, num_wires=n)], n)

    cost_obs = sum(qfx.Z(i) for i in range(n))
    diff = {
        "forward": qfx.diff.Backprop(),
        "backprop": qfx.diff.Backprop(),
        "adjoint": qfx.diff.Adjoint(),
        "parameter_shift": qfx.diff.ParameterShift(),
    }[method]

    def cost(theta):
        return qfx.expval(circuit(theta), cost_obs, diff=diff)

    theta = jnp.asarray(np.random.default_rng(0).uniform(-np.pi, np.pi, (layers, n, 2)), jnp.float32)
    num_params = theta.size
    scale = 1.0
    if method == "forward":
        fn = jax.jit(cost)
    elif method == "parameter_shift":
        # Shift rules act per leaf: the first layer is written out gate by gate, its first k angles are
        # the differentiated ones, and everything else is a constant (a zero tangent, so not shifted).
        k = min(ps_params, 2 * n)
        angles0 = np.asarray(theta[0]).T.reshape(-1)  # RY angles of layer 0, then its RZ angles
        rest = qfx.repeat(layer, theta[1:])

        def partial_cost(p):
            a = [p[j] if j < k else jnp.float32(angles0[j]) for j in range(2 * n)]
            first = (
                [qfx.RY(a[i], wires=i) for i in range(n)]
                + [qfx.RZ(a[n + i], wires=i) for i in range(n)]
                + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
            )
            return qfx.expval(qfx.Circuit(first + [rest], n), cost_obs, diff=diff)

        fn = jax.jit(jax.value_and_grad(partial_cost))
        theta = jnp.asarray(angles0[:k])
        scale = (2 * num_params + 1) / (2 * k + 1)  # evaluations: 2 per parameter, plus the value
    else:
        fn = jax.jit(jax.value_and_grad(cost))
    return fn, theta, scale


def worker(method: str, n: int, layers: int, repeats: int, ps_params: int, cache: str) -> dict:
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    fn, theta, scale = build(method, n, layers, ps_params)
    start = time.perf_counter()
    compiled = fn.lower(theta).compile()
    compile_s = time.perf_counter() - start
    compile_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    jax.block_until_ready(compiled(theta))
    times = []
    for i in range(repeats):
        t = theta + 1e-3 * (i + 1)
        start = time.perf_counter()
        jax.block_until_ready(compiled(t))
        times.append(time.perf_counter() - start)
    return {
        "method": method,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "time_s": float(np.median(times)) * scale if times else None,
        "extrapolated": scale != 1.0,
        "compile_s": compile_s,
        "compile_maxrss_mib": compile_rss,
        "temp_mib": compiled.memory_analysis().temp_size_in_bytes / 2**20,
        "state_mib": 2**n * 8 / 2**20,
    }


def interleaved(n: int, layers: int, rounds: int) -> dict:
    """Forward, backprop and adjoint compiled in one process and timed in alternating rounds (one call of
    each per round): their time ratios, per round, do not depend on how fast this shared machine happened
    to be in each method's own process (the forward pass's time alone varied 0.20-0.34 s between them)."""
    methods = ("forward", "backprop", "adjoint")
    fns = {}
    for method in methods:
        fn, theta, _ = build(method, n, layers, 0)
        fns[method] = fn.lower(theta).compile()
        jax.block_until_ready(fns[method](theta))
    times = {method: [] for method in methods}
    for i in range(rounds):
        t = theta + 1e-3 * (i + 1)
        for method in methods:
            start = time.perf_counter()
            jax.block_until_ready(fns[method](t))
            times[method].append(time.perf_counter() - start)
    return times


def _run_worker(args, method: str, cache: str, repeats: int) -> dict | None:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        method,
        "--n",
        str(args.n),
        "--layers",
        str(args.layers),
        "--repeats",
        str(repeats),
        "--ps-params",
        str(args.ps_params),
        "--cache",
        cache,
        "--rounds",
        str(args.rounds),
    ]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        print(f"  {method}: timed out after {args.timeout:.0f} s")
    except subprocess.CalledProcessError as e:
        print(f"  {method}: failed (exit {e.returncode}): {e.stderr.strip().splitlines()[-1:]}")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ps-params", type=int, default=8)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    parser.add_argument(
        "--rounds", type=int, default=7, help="alternating rounds of the one-process time ratios (0: none)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "interleaved":
        print(json.dumps(interleaved(args.n, args.layers, args.rounds)))
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args.n, args.layers, args.repeats, args.ps_params, args.cache)))
        return

    print(
        f"HEA n={args.n}, L={args.layers} ({2 * args.n * args.layers} parameters), complex64; "
        f"one state vector = {2**args.n * 8 / 2**20:.1f} MiB",
        flush=True,
    )
    cold, warm = {}, {}
    with tempfile.TemporaryDirectory() as cache:
        for method in args.methods.split(","):
            r = _run_worker(args, method, os.path.join(cache, method), repeats=0)
            if r is not None:
                cold[method] = r
                r = _run_worker(args, method, os.path.join(cache, method), repeats=args.repeats)
            if r is not None:
                warm[method] = r

    print(
        f"\n{'method':<16} {'peak RSS, cold':>15} {'peak RSS, warm':>15} {'XLA temp':>9} {'time (s)':>10} "
        f"{'compile (s)':>12}"
    )
    for method, r in warm.items():
        t = ("~" if r["extrapolated"] else "") + f"{r['time_s']:.3f}"
        print(
            f"{method:<16} {cold[method]['maxrss_mib']:>11.0f} MiB {r['maxrss_mib']:>11.0f} MiB "
            f"{r['temp_mib']:>5.0f} MiB {t:>10} {cold[method]['compile_s']:>12.1f}"
        )
    if "parameter_shift" in warm:
        print(f"(~: parameter-shift timed on {args.ps_params} parameters, extrapolated to all)")

    if {"forward", "backprop", "adjoint"} <= warm.keys():
        state = warm["forward"]["state_mib"]
        allowed = 64 + 6 * state
        print("\ntargets (warm: execution only; cold: with compilation)")
        for label, res in (("warm", warm), ("cold", cold)):
            fwd, bp, adj = res["forward"], res["backprop"], res["adjoint"]
            extra = adj["maxrss_mib"] - fwd["maxrss_mib"]
            print(
                f"  {label}: adjoint / backprop peak memory: {adj['maxrss_mib'] / bp['maxrss_mib']:.3f}  "
                "(target < 0.2)"
            )
            print(
                f"  {label}: adjoint - forward peak memory:  {extra:.0f} MiB = {extra / state:.1f} state "
                f"vectors  (target <= 64 MiB + 6 states = {allowed:.0f} MiB)"
            )
            above = extra / (bp["maxrss_mib"] - fwd["maxrss_mib"])
            print(f"  {label}: adjoint / backprop peak memory above the forward pass's: {above:.3f}")
        fwd, bp, adj = warm["forward"], warm["backprop"], warm["adjoint"]
        print(f"  adjoint / forward time:  {adj['time_s'] / fwd['time_s']:.2f}  (target <= 3)")
        print(f"  backprop / forward time: {bp['time_s'] / fwd['time_s']:.2f}")

    if args.rounds:
        with tempfile.TemporaryDirectory() as cache:
            r = _run_worker(args, "interleaved", cache, repeats=0)
        if r is not None:
            print(f"\none process, {args.rounds} alternating rounds: median time, per-round ratio (range)")
            for method, times in r.items():
                ratios = np.divide(times, r["forward"])
                print(
                    f"  {method:<9} {np.median(times):.3f} s  / forward: {np.median(ratios):.2f} "
                    f"({ratios.min():.2f}-{ratios.max():.2f})"
                )


if __name__ == "__main__":
    main()
