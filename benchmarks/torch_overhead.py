"""Overhead of the Torch bridge (`qfx.torch`) against the same pure-JAX call.

Prints a table; asserts nothing. Targets (issue 5): at most 50 us of overhead per call for a small
circuit, and at most 10% at a batch of 1024 inputs.

    python benchmarks/torch_overhead.py [--number 200] [--rounds 20]
    python benchmarks/torch_overhead.py --device cuda   # torch CUDA tensors and JAX on the same GPU

Each row times the same JAX function two ways: jitted and called directly on JAX arrays (blocking on the
result), and called through `qfx.torch` on torch tensors (whose outputs are ready when they return).
"TorchLayer fwd" runs under `torch.no_grad()`; "grad on" is the same call with its weights requiring grad,
whose forward also keeps what the backward needs (not needed for inference: it is part of a training step,
timed by the v+g rows).
"value+grad" compares one jitted `jax.value_and_grad` of the loss `sum(outputs**2)` with a torch forward +
`.backward()` of the same loss written in JAX (its scalar output makes the forward one fused
value-and-grad; the backward scales the kept gradients); "TorchLayer v+g" computes that loss in torch on a
`TorchLayer`'s outputs (the forward keeps JAX's VJP residuals, the backward applies them in one more
compiled call). "JAX split+sync" times those two compiled calls in JAX alone, the host waiting for the
forward's outputs before the VJP as torch's loss makes it wait: the floor of a TorchLayer training step, whose
overhead over it is the "v+g vs split" row. The best of several alternating rounds is reported.
A last table times the bridge's input preparation (a few us of Python) warm and right after a pause or a
large XLA call, where the same code runs many times slower (see `after_pause_us`): that, more than the
bridge's own work, is what the overhead at batch 1024 is made of.
"""

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

import qfx
import qfx.torch
import qfx.torch._bridge as bridge

N_WIRES = 4


def circuit(inputs, theta):
    """One sample: inputs (N_WIRES,), theta (2, N_WIRES) -> <Z_i> for each wire."""
    ops = [qfx.RY(inputs[i], wires=i) for i in range(N_WIRES)]
    for layer in theta:
        ops += [qfx.RX(layer[i], wires=i) for i in range(N_WIRES)]
        ops += [qfx.CNOT((i, (i + 1) % N_WIRES)) for i in range(N_WIRES)]
    return qfx.expval(qfx.Circuit(ops), [qfx.Z(i) for i in range(N_WIRES)])


def batched(inputs, theta):
    return jax.vmap(circuit, in_axes=(0, None))(inputs, theta)


def loss(inputs, theta):
    return jnp.sum(batched(inputs, theta) ** 2)


def best_us(fns, number: int, rounds: int) -> list[tuple[float, float]]:
    """(wall, cpu): the time of one call of each function in us: by the wall clock, the best over `rounds`
    of the mean of `number` consecutive calls; by this process's CPU time (all its threads), the mean over
    all rounds.

    Rounds of the functions alternate, so that background load (other processes on the same cores)
    reaches them alike; the best round is the one it disturbed least. CPU time leaves out the time the
    process waited for a core, so it shows the work a call costs on a machine shared with other jobs. It
    is not a best round: on this VM a short round can read far less than it used (the best of 20 rounds of
    5 batch-1024 forwards read 35 us a call, where 100 calls in a row read ~300 us).
    """
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    cpu = [0] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            w0, c0 = time.perf_counter_ns(), time.process_time_ns()
            for _ in range(number):
                fn()
            w1, c1 = time.perf_counter_ns(), time.process_time_ns()
            best[i] = min(best[i], (w1 - w0) / number / 1e3)
            cpu[i] += c1 - c0
    return [(b, c / (rounds * number) / 1e3) for b, c in zip(best, cpu, strict=True)]


def rows_for_batch(
    batch: int, theta_np: np.ndarray, number: int, rounds: int, rng, device: str = "cpu"
) -> list[tuple]:
    x_np = rng.uniform(0, np.pi, (batch, N_WIRES)).astype(np.float32)
    x_j, th_j = jnp.asarray(x_np), jnp.asarray(theta_np)
    x_t, th_t = torch.tensor(x_np, device=device), torch.tensor(theta_np, device=device)  # own buffers
    th_req = th_t.clone().requires_grad_()
    # A torch call on CUDA returns once its work is queued: wait for it, as block_until_ready does for JAX.
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None

    # Forward only: to_torch, and TorchLayer (the module call: parameter dict, reshape, checks).
    f_jax = jax.jit(batched)
    f_torch = qfx.torch.to_torch(batched)
    layer = qfx.torch.TorchLayer(circuit, {"theta": (2, N_WIRES)}, init={"theta": th_t}, device=device)

    def layer_no_grad():
        with torch.no_grad():  # inference: nothing kept for a backward
            layer(x_t)
        sync()

    def layer_grad_on():
        layer(x_t)  # grad on: the forward also keeps JAX's VJP residuals
        sync()

    def torch_forward():
        f_torch(x_t, th_t)
        sync()

    jax_us, torch_us, layer_us, layer_grad_us = best_us(
        [lambda: f_jax(x_j, th_j).block_until_ready(), torch_forward, layer_no_grad, layer_grad_on],
        number,
        rounds,
    )
    rows = [
        ("forward", batch, jax_us, torch_us),
        ("TorchLayer fwd", batch, jax_us, layer_us),
        ("  grad on", batch, jax_us, layer_grad_us),
    ]

    # Forward and gradient: pure JAX's jitted value_and_grad against torch's forward + backward.
    vg_jax = jax.jit(jax.value_and_grad(loss, argnums=1))
    loss_torch = qfx.torch.to_torch(loss)

    def step_torch():
        th_req.grad = None
        loss_torch(x_t, th_req).backward()
        sync()

    # The same loss computed on the torch side of a TorchLayer: the bridge's output is the (batch, 4)
    # expectation values, whose backward applies the VJP residuals the forward kept.
    layer_req = qfx.torch.TorchLayer(circuit, {"theta": (2, N_WIRES)}, init={"theta": th_t}, device=device)

    def step_layer():
        layer_req.theta.grad = None
        layer_req(x_t).pow(2).sum().backward()
        sync()

    # The floor of that step in JAX alone: the layer's own two compiled calls (the forward that keeps the
    # VJP residuals, then the VJP of the loss's cotangent 2 * outputs), with the host waiting for the
    # outputs before it dispatches the VJP, as it must when torch computes the loss.
    step_layer()
    bridge = next(iter(layer_req._fn._entries.values())).bridge
    keep, pull = bridge.keeping((False, True)), bridge._pull_kept

    def split_synced():
        outs, kept = keep(x_j, th_j)
        jax.block_until_ready(pull(kept, 2 * jax.block_until_ready(outs[0])))

    jax_us, torch_us, layer_us, split_us = best_us(
        [lambda: jax.block_until_ready(vg_jax(x_j, th_j)), step_torch, step_layer, split_synced],
        max(number // 4, 1),
        rounds,
    )
    rows.append(("value+grad", batch, jax_us, torch_us))
    rows.append(("TorchLayer v+g", batch, jax_us, layer_us))
    rows.append(("  JAX split+sync", batch, jax_us, split_us))
    rows.append(("  v+g vs split", batch, split_us, layer_us))
    return rows


def after_pause_us(batch: int, theta_np: np.ndarray, calls: int, rng) -> list[tuple[str, float]]:
    """The bridge's input preparation for one call (detach, checks, NumPy views of two tensors: a few us of
    Python and torch) timed right after different things, median over `calls`: nothing (warm caches), a 5
    ms sleep, and one pure-JAX value_and_grad at `batch`. On a shared 2-core VM the same Python work runs
    ~10-20x slower after the process has waited or run a large XLA call (caches and predictors cold), so
    every microsecond of Python a training step adds after its XLA call counts ten times."""
    x_np = rng.uniform(0, np.pi, (batch, N_WIRES)).astype(np.float32)
    x_t, th_t = torch.tensor(x_np), torch.tensor(theta_np).requires_grad_()
    to_jax, _ = bridge._fast_paths()
    vg_jax = jax.jit(jax.value_and_grad(loss, argnums=1))
    x_j, th_j = jnp.asarray(x_np), jnp.asarray(theta_np)

    def prepare_ns():
        t0 = time.perf_counter_ns()
        for t in (x_t, th_t):
            bridge._cpu_argument(bridge._prepare(t), to_jax)
        return time.perf_counter_ns() - t0

    befores = [
        ("nothing (warm)", lambda: None),
        ("a 5 ms sleep", lambda: time.sleep(0.005)),
        (f"pure-JAX v+g, batch {batch}", lambda: jax.block_until_ready(vg_jax(x_j, th_j))),
    ]
    out = []
    for name, before in befores:
        before()
        prepare_ns()
        times = []
        for _ in range(calls):
            before()
            times.append(prepare_ns())
        out.append((name, statistics.median(times) / 1e3))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200, help="consecutive calls per round, batch 1")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="the torch tensors' device")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    theta_np = rng.uniform(0, 2 * np.pi, (2, N_WIRES)).astype(np.float32)
    big = max(args.number // 40, 2)
    rows = rows_for_batch(1, theta_np, args.number, args.rounds, rng, args.device)
    rows += rows_for_batch(1024, theta_np, big, args.rounds, rng, args.device)

    print(
        f"qfx {qfx.__version__}, jax {jax.__version__}, torch {torch.__version__}, JAX device "
        f"{jax.devices()[0]}, torch tensors on {args.device}"
    )
    print(
        f"{N_WIRES}-qubit circuit, 2 layers; best of {args.rounds} rounds of {args.number} calls (batch 1) "
        f"or {big} calls (batch 1024); value+grad rounds are 4x shorter; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n"
    )
    for clock, k in (("wall clock", 0), ("CPU time of this process", 1)):
        print(f"{clock}:")
        head = f"{'call':<16}{'batch':>6}{'pure JAX (us)':>15}{'via torch (us)':>16}{'overhead (us)':>15}"
        print(head + f"{'overhead':>10}")
        for name, batch, jax_us, torch_us in rows:
            over = torch_us[k] - jax_us[k]
            print(
                f"{name:<16}{batch:>6}{jax_us[k]:>15.1f}{torch_us[k]:>16.1f}{over:>15.1f}"
                f"{over / jax_us[k]:>10.1%}"
            )
        print()
    if args.device != "cpu":
        return
    print("input preparation of one bridge call (us, median), right after:")
    for name, us in after_pause_us(1024, theta_np, 200, rng):
        print(f"  {name:<28}{us:>8.1f}")


if __name__ == "__main__":
    main()
