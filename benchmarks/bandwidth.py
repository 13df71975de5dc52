"""Benchmark: one gate applied to a 2**n state against the machine's copy floor (issue 4, target 5).

A gate is at best one pass over the state: read 2**n amplitudes and write 2**n. The floor is the jitted
`state * a` for a complex scalar argument `a` (one read, one write, nothing to fold away). Each gate is
applied under `jax.jit` by the kernel every circuit uses (`qfx._statevector._kernels.apply_gate`, which
dispatches on the gate's structure: dense, diagonal, permutation, controlled), so this is the pass a
circuit pays per gate that fusion leaves alone. Effective bandwidth = 2 * 2**n * 8 bytes (complex64) / time.

Prints one table: median time per call over alternating rounds (all programs compiled first), effective
bandwidth, and the ratio to the copy (issue 4's target: within 2x).

    python benchmarks/bandwidth.py              # n = 20
    python benchmarks/bandwidth.py --n 22 --rounds 15
"""

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp
from machine import cpu_name  # benchmarks/machine.py
import numpy as np

import qfx
from qfx._statevector import _kernels as K


def gates(n: int, rng) -> list[tuple[str, qfx.AbstractGate]]:
    mid = n // 2
    u4 = np.linalg.qr(rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4)))[0]
    return [
        ("RY (dense 1-qubit), wire 0", qfx.RY(0.3, wires=0)),
        (f"RY, wire {mid}", qfx.RY(0.3, wires=mid)),
        (f"RY, wire {n - 1}", qfx.RY(0.3, wires=n - 1)),
        (f"RZ (diagonal), wire {mid}", qfx.RZ(0.3, wires=mid)),
        (f"IsingZZ (diagonal), wires (2, {n - 3})", qfx.IsingZZ(0.3, wires=(2, n - 3))),
        (f"H, wire {mid}", qfx.H(wires=mid)),
        (f"CNOT ({mid}, {mid + 1})", qfx.CNOT((mid, mid + 1))),
        (f"CNOT ({n - 1}, 0)", qfx.CNOT((n - 1, 0))),
        (f"CZ ({mid}, {mid + 1})", qfx.CZ((mid, mid + 1))),
        (f"CRX ({mid}, {mid + 1})", qfx.CRX(0.3, wires=(mid, mid + 1))),
        (f"dense 4x4, wires ({mid}, {mid + 1})", qfx.QubitUnitary(u4, wires=(mid, mid + 1))),
        (f"dense 4x4, wires ({n - 2}, {n - 1})", qfx.QubitUnitary(u4, wires=(n - 2, n - 1))),
        (f"dense 4x4, wires (0, {n - 1})", qfx.QubitUnitary(u4, wires=(0, n - 1))),
    ]


def dense_action(psi: np.ndarray, gate, n: int) -> np.ndarray:
    """The gate's matrix applied to the state's axes of its wires with NumPy (wire 0 is the leading axis)."""
    k = len(gate.wires)
    m = np.asarray(gate.matrix()).reshape((2,) * (2 * k))
    out = np.tensordot(m, psi.reshape((2,) * n), axes=(list(range(k, 2 * k)), list(gate.wires)))
    return np.moveaxis(out, list(range(k)), list(gate.wires)).reshape(-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="qubits")
    parser.add_argument("--rounds", type=int, default=11, help="alternating rounds of --number calls")
    parser.add_argument("--number", type=int, default=5, help="consecutive calls per round")
    args = parser.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    psi = rng.normal(size=2**n) + 1j * rng.normal(size=2**n)
    psi = jnp.asarray((psi / np.linalg.norm(psi)).astype(np.complex64))

    programs = [("copy: state * a (the floor)", jax.jit(lambda s, a: s * a), jnp.complex64(1.0 + 0.0j))]
    apply = jax.jit(functools.partial(K.apply_gate, n=n))
    programs += [(name, apply, gate) for name, gate in gates(n, rng)]
    host = np.asarray(psi)
    for name, fn, arg in programs:  # compile, and check each result against the gate's matrix
        out = np.asarray(fn(psi, arg))
        expected = host if name.startswith("copy") else dense_action(host, arg, n)
        if not np.allclose(out, expected, atol=1e-6):
            raise RuntimeError(f"{name}: the result differs from the gate's matrix applied with NumPy")
    times = {name: [] for name, _, _ in programs}
    for _ in range(args.rounds):
        for name, fn, arg in programs:
            start = time.perf_counter()
            for _ in range(args.number):
                jax.block_until_ready(fn(psi, arg))
            times[name].append((time.perf_counter() - start) / args.number)

    nbytes = 2 * psi.size * psi.dtype.itemsize
    floor = statistics.median(times[programs[0][0]])
    print(
        f"qfx {qfx.__version__}, jax {jax.__version__}, {jax.devices()[0].platform}, {cpu_name()}; n = {n} "
        f"({psi.size * psi.dtype.itemsize / 2**20:.0f} MiB state, complex64); median of {args.rounds} "
        f"alternating rounds of {args.number} calls\n"
    )
    print("| program | time | effective bandwidth | time / copy |")
    print("|---|---:|---:|---:|")
    for name, _, _ in programs:
        t = statistics.median(times[name])
        print(f"| {name} | {t * 1e3:.3f} ms | {nbytes / t / 1e9:.1f} GB/s | {t / floor:.2f}x |")


if __name__ == "__main__":
    main()
