# ruff: noqa: PLC0415  (each library is imported in its own worker process, in its own environment)
"""Benchmark: noisy HEA(n, 10), value_and_grad with respect to gate parameters and the noise strength.

HEA(n, L): L layers, each RY(theta[l, i, 0]) on every wire, RZ(theta[l, i, 1]) on every wire, then
CNOT(i, i + 1) for i = 0..n-2 (as `benchmarks/hea.py`), with DepolarizingChannel(p) after every gate on
each of its wires, p = 0.01 one shared strength (a leaf of one `qfx.NoiseModel`). Cost: sum_i <Z_i>, exact
(density matrices), complex64. Libraries: qfx `DensityMatrix()`, PennyLane `default.mixed` (interface jax,
under `jax.jit`), qujax density tensors (Kraus lists, `jax.jit`), TensorCircuit-NG `DMCircuit` (jax
backend, `jax.jit`). Each (library, n) runs in a fresh process: first call (trace + compile + run) and the
median of the steady-state calls; the values are checked to agree across libraries.

`--control`: qfx alone on the same noisy HEA with a mid-circuit measurement read by a condition after
layers 3, 6 and 9 (`qfx.measure(l % n)`, then `qfx.cond` of an X on the next wire), against the same
program by deferred measurement (the X controlled on the measured wire, then PhaseFlip(0.5) there): the
exact value is the same, and the second runs without control flow.

Then `--trajectories N`: N trajectories of qfx `Trajectories()` at n = `--traj-wires` in one vmapped
value_and_grad call (first call and steady state).

The peers run in `benchmarks/peers/.venv` (see `benchmarks/peers/setup.sh`); never in CI.

Usage:
    python benchmarks/noise.py                              # n = 4, 6, 8, 10, 12; every library
    python benchmarks/noise.py --sizes 4,6 --only qfx,pennylane --trajectories 1024 --traj-wires 16
    python benchmarks/noise.py --sizes 4,8,10 --only none --control
"""

import argparse
import json
import os
from pathlib import Path
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PEERS_PYTHON = ROOT / "benchmarks" / "peers" / ".venv" / "bin" / "python"
L, P = 10, 0.01


def _theta(n):
    return np.random.default_rng(0).uniform(0.0, 2 * np.pi, size=(L, n, 2)).astype(np.float32)


def _time(fn, args, steady_seconds=1.0, max_calls=200):
    import jax

    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t
    times = []
    while sum(times) < steady_seconds and len(times) < max_calls:
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return first, statistics.median(times), out


def _qfx(n):
    import jax

    import qfx

    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
        )

    obs = sum(qfx.Z(i) for i in range(n))

    def cost(theta, p):
        circuit = qfx.Circuit([qfx.repeat(layer, theta, num_wires=n)], num_wires=n)
        model = qfx.NoiseModel([qfx.AfterGates(qfx.DepolarizingChannel(p, wires=0))])
        return qfx.expval(model(circuit), obs)

    fn = jax.jit(jax.value_and_grad(cost, argnums=(0, 1)))
    return fn, (jax.numpy.asarray(_theta(n)), jax.numpy.float32(P))


def _pennylane(n):
    import jax
    import pennylane as qml

    dev = qml.device("default.mixed", wires=n)

    @qml.qnode(dev, interface="jax")
    def circuit(theta, p):
        for l in range(L):
            for i in range(n):
                qml.RY(theta[l, i, 0], wires=i)
                qml.DepolarizingChannel(p, wires=i)
            for i in range(n):
                qml.RZ(theta[l, i, 1], wires=i)
                qml.DepolarizingChannel(p, wires=i)
            for i in range(n - 1):
                qml.CNOT(wires=[i, i + 1])
                qml.DepolarizingChannel(p, wires=i)
                qml.DepolarizingChannel(p, wires=i + 1)
        return qml.expval(qml.sum(*[qml.PauliZ(i) for i in range(n)]))

    fn = jax.jit(jax.value_and_grad(circuit, argnums=(0, 1)))
    return fn, (jax.numpy.asarray(_theta(n)), jax.numpy.float32(P))


def _tensorcircuit(n):
    import jax
    import tensorcircuit as tc

    tc.set_backend("jax")
    tc.set_dtype("complex64")

    def cost(theta, p):
        c = tc.DMCircuit(n)
        q = p / 3
        for l in range(L):
            for i in range(n):
                c.ry(i, theta=theta[l, i, 0])
                c.depolarizing(i, px=q, py=q, pz=q)
            for i in range(n):
                c.rz(i, theta=theta[l, i, 1])
                c.depolarizing(i, px=q, py=q, pz=q)
            for i in range(n - 1):
                c.cnot(i, i + 1)
                c.depolarizing(i, px=q, py=q, pz=q)
                c.depolarizing(i + 1, px=q, py=q, pz=q)
        return sum(jax.numpy.real(c.expectation_ps(z=[i])) for i in range(n))

    fn = jax.jit(jax.value_and_grad(cost, argnums=(0, 1)))
    return fn, (jax.numpy.asarray(_theta(n)), jax.numpy.float32(P))


def _qujax(n):
    import jax
    import jax.numpy as jnp
    import qujax

    eye, x = jnp.eye(2, dtype=jnp.complex64), jnp.asarray([[0, 1], [1, 0]], jnp.complex64)
    y, z = jnp.asarray([[0, -1j], [1j, 0]], jnp.complex64), jnp.asarray([[1, 0], [0, -1]], jnp.complex64)
    depolarizing = [
        lambda p: jnp.sqrt(1 - p) * eye,
        lambda p: jnp.sqrt(p / 3) * x,
        lambda p: jnp.sqrt(p / 3) * y,
        lambda p: jnp.sqrt(p / 3) * z,
    ]
    gates, qubits, params = [], [], []
    strength = L * n * 2  # the shared strength's index, after the angles

    def noise(i):
        gates.append(depolarizing), qubits.append([i]), params.append([[strength]] * 4)

    for l in range(L):
        for i in range(n):
            gates.append("Ry"), qubits.append([i]), params.append([(l * n + i) * 2])
            noise(i)
        for i in range(n):
            gates.append("Rz"), qubits.append([i]), params.append([(l * n + i) * 2 + 1])
            noise(i)
        for i in range(n - 1):
            gates.append("CX"), qubits.append([i, i + 1]), params.append([])
            noise(i)
            noise(i + 1)
    to_rho = qujax.get_params_to_densitytensor_func(gates, qubits, params, n)
    to_expval = qujax.get_densitytensor_to_expectation_func([["Z"]] * n, [[i] for i in range(n)], [1.0] * n)

    def cost(theta, p):  # qujax's angles are in units of pi
        return to_expval(to_rho(jnp.concatenate([theta.reshape(-1) / jnp.pi, p[None]])))

    fn = jax.jit(jax.value_and_grad(cost, argnums=(0, 1)))
    return fn, (jnp.asarray(_theta(n)), jnp.float32(P))


def _qfx_control(n, deferred):
    import jax
    import jax.numpy as jnp

    import qfx

    obs = sum(qfx.Z(i) for i in range(n))

    def cost(theta, p):
        ops = []
        for l in range(L):
            ops += [qfx.RY(theta[l, i, 0], wires=i) for i in range(n)]
            ops += [qfx.RZ(theta[l, i, 1], wires=i) for i in range(n)]
            ops += [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
            if l % 3 == 2:
                w, t = l % n, (l + 1) % n
                if deferred:
                    ops += [qfx.Controlled(qfx.X(t), (w,)), qfx.PhaseFlip(0.5, wires=w)]
                else:
                    m = qfx.measure(w)
                    ops += [m, qfx.cond(m, qfx.X(t))]
        # The layers' gates only: the conditional X and its deferred form stay noiseless, alike.
        rule = qfx.AfterGates(qfx.DepolarizingChannel(p, wires=0), gates=(qfx.RY, qfx.RZ, qfx.CNOT))
        return qfx.expval(qfx.NoiseModel([rule])(qfx.Circuit(ops, num_wires=n)), obs)

    fn = jax.jit(jax.value_and_grad(cost, argnums=(0, 1)))
    return fn, (jnp.asarray(_theta(n)), jnp.float32(P))


def _trajectories(n, count):
    import jax

    import qfx

    def layer(t):
        return (
            [qfx.RY(t[i, 0], wires=i) for i in range(n)]
            + [qfx.RZ(t[i, 1], wires=i) for i in range(n)]
            + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
        )

    obs = sum(qfx.Z(i) for i in range(n))

    def cost(theta, p, key):
        circuit = qfx.Circuit([qfx.repeat(layer, theta, num_wires=n)], num_wires=n)
        model = qfx.NoiseModel([qfx.AfterGates(qfx.DepolarizingChannel(p, wires=0))])
        return qfx.expval(model(circuit), obs, backend=qfx.Trajectories(), key=key)

    grad = jax.value_and_grad(cost, argnums=(0, 1))
    fn = jax.jit(jax.vmap(grad, in_axes=(None, None, 0)))
    keys = jax.random.split(jax.random.key(0), count)
    return fn, (jax.numpy.asarray(_theta(n)), jax.numpy.float32(P), keys)


BUILD = {
    "qfx": _qfx,
    "pennylane": _pennylane,
    "qujax": _qujax,
    "tensorcircuit": _tensorcircuit,
    "qfx_control": lambda n: _qfx_control(n, deferred=False),
    "qfx_deferred": lambda n: _qfx_control(n, deferred=True),
}


def worker(lib, n, count):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    fn, args = _trajectories(n, count) if lib == "trajectories" else BUILD[lib](n)
    first, steady, (value, _) = _time(fn, args)
    value = float(np.mean(np.asarray(value)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    result = {"lib": lib, "n": n, "first": first, "steady": steady, "value": value, "rss": rss}
    print("RESULT " + json.dumps(result))


def run(lib, n, count, cap, peers_python):
    python = sys.executable if lib.startswith("qfx") or lib == "trajectories" else peers_python
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_ENABLE_COMPILATION_CACHE="false")
    cmd = [python, __file__, "--worker", lib, "--n", str(n), "--count", str(count)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=cap)
    except subprocess.TimeoutExpired:
        return {"lib": lib, "n": n, "error": f"over {cap} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"lib": lib, "n": n, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:100]}


def _ms(x):
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def _control_table(sizes, cap, peers_python):
    print(f"noisy HEA(n, {L}) with a measurement read by a cond after layers 3, 6, 9, qfx DensityMatrix()")
    print("first call / steady state (median); the deferred-measurement program has the same value\n")
    print("| n | measure + cond | deferred measurement (no control flow) |")
    print("|---|---|---|")
    for n in sizes:
        cells, values = [], []
        for lib in ("qfx_control", "qfx_deferred"):
            r = run(lib, n, 0, cap, peers_python)
            if "error" in r:
                cells.append(f"failed: {r['error']}")
                continue
            cells.append(f"{_ms(r['first'])} / {_ms(r['steady'])} (value {r['value']:.5f})")
            values.append(r["value"])
        agree = "" if len(values) < 2 or abs(values[0] - values[1]) < 1e-3 else " (values disagree!)"
        print(f"| {n} | " + " | ".join(cells) + f"{agree} |", flush=True)
    print()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4,6,8,10,12")
    parser.add_argument("--only", default="qfx,pennylane,qujax,tensorcircuit")
    parser.add_argument("--cap", type=float, default=600)
    parser.add_argument("--control", action="store_true", help="the mid-circuit measurement table")
    parser.add_argument("--trajectories", type=int, default=0)
    parser.add_argument("--traj-wires", type=int, default=16)
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON))
    parser.add_argument("--worker")
    parser.add_argument("--n", type=int)
    parser.add_argument("--count", type=int, default=0)
    a = parser.parse_args()
    if a.worker:
        worker(a.worker, a.n, a.count)
        return
    libs = [x for x in a.only.split(",") if x != "none"]
    if a.control:
        _control_table([int(x) for x in a.sizes.split(",")], a.cap, a.peers_python)
    if not libs:
        return
    print(f"noisy HEA(n, {L}), DepolarizingChannel({P}) after every gate, jit(value_and_grad) in (theta, p)")
    print("first call / steady state (median); value = sum_i <Z_i>\n")
    print("| n | " + " | ".join(libs) + " | qfx vs best peer (steady) |")
    print("|---" * (len(libs) + 2) + "|")
    for n in (int(x) for x in a.sizes.split(",")):
        results = {lib: run(lib, n, 0, a.cap, a.peers_python) for lib in libs}
        cells, values = [], []
        for lib in libs:
            r = results[lib]
            if "error" in r:
                cells.append(f"failed: {r['error']}")
                continue
            cells.append(f"{_ms(r['first'])} / {_ms(r['steady'])} (value {r['value']:.5f})")
            values.append(r["value"])
        peers = [results[x]["steady"] for x in libs if x != "qfx" and "error" not in results[x]]
        ratio = "-"
        if "error" not in results.get("qfx", {"error": 1}) and peers:
            ratio = f"{min(peers) / results['qfx']['steady']:.1f}x"
        agree = "" if not values or max(values) - min(values) < 1e-3 else " (values disagree!)"
        print(f"| {n} | " + " | ".join(cells) + f" | {ratio}{agree} |", flush=True)
    if a.trajectories:
        r = run("trajectories", a.traj_wires, a.trajectories, a.cap, a.peers_python)
        if "error" in r:
            print(f"\n{a.trajectories} trajectories at n = {a.traj_wires}: failed: {r['error']}")
        else:
            print(
                f"\n{a.trajectories} trajectories at n = {a.traj_wires}, one vmapped value_and_grad: "
                f"first call {_ms(r['first'])}, steady state {_ms(r['steady'])}, "
                f"peak RSS {r['rss']:.0f} MiB; mean value {r['value']:.4f}"
            )


if __name__ == "__main__":
    main()
