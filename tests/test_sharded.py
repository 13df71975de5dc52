"""`qfx.StateVector(mesh=...)`: a state vector sharded over devices.

A process's device count is fixed when JAX starts, so the cases on 8 host CPU devices run in a subprocess
(`tests/sharded_cases.py`, with `XLA_FLAGS=--xla_force_host_platform_device_count=8`), and the
two-process case in two processes joined by `jax.distributed.initialize` on 127.0.0.1. What needs no
devices (the swap schedule, the argument checks) runs here.
"""

import json
import os
from pathlib import Path
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx._statevector._layout import DeviceSlice, Loop, Permute, Relabeled, Swap, schedule, swap_count

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _env(devices: int) -> dict:
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    return dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")


def test_on_eight_host_devices():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "tests/sharded_cases.py",
        ],
        cwd=ROOT,
        env=_env(8),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout.splitlines()[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_agree_with_one():
    address = f"127.0.0.1:{_free_port()}"
    script = str(HERE / "sharded_process.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script, address, str(i)],
            cwd=ROOT,
            env=_env(4),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-4000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            p.kill()
    sys.path.insert(0, str(HERE))
    try:
        from sharded_process import cost_and_circuit  # noqa: PLC0415  (the children's own circuit)
    finally:
        sys.path.remove(str(HERE))
    cost, theta = cost_and_circuit(qfx.diff.Backprop())
    value, grad = jax.value_and_grad(cost)(theta, None)
    for out in outs:
        assert out["devices"] == 8 and out["local_devices"] == 4
        np.testing.assert_allclose(out["value"], float(value), atol=1e-5)
        for key in ("grad_backprop", "grad_adjoint"):
            np.testing.assert_allclose(np.asarray(out[key]), np.asarray(grad).reshape(-1), atol=1e-5)


# --- no devices needed ---------------------------------------------------------------------------------


def test_diagonal_gates_and_controls_on_global_wires_move_nothing():
    ops = [
        qfx.RZ(0.3, wires=0),
        qfx.CZ(wires=(0, 1)),
        qfx.CNOT(wires=(1, 4)),
        qfx.IsingZZ(0.2, wires=(0, 3)),
        qfx.Toffoli(wires=(0, 1, 5)),
        qfx.Controlled(qfx.RY(0.4, wires=3), controls=(1, 0), control_values=(0, 1)),
    ]
    items = schedule(ops, 6, 2, "q")
    assert swap_count(items) == 0
    kinds = [type(op) for item in items for op in item.ops]
    assert kinds == [DeviceSlice, DeviceSlice, DeviceSlice, DeviceSlice, DeviceSlice, DeviceSlice]
    assert [type(op) for op in schedule([qfx.RY(0.1, wires=5)], 6, 2, "q")[0].ops] == [Relabeled]


def test_a_dense_gate_on_a_global_wire_swaps_it_with_the_wire_needed_latest():
    ops = [qfx.RY(0.1, wires=3), qfx.RY(0.2, wires=2), qfx.H(0), qfx.RX(0.3, wires=1), qfx.RX(0.4, wires=2)]
    items = schedule(ops + [qfx.RX(0.5, wires=4)], 5, 1, "q")
    # Wire 0 goes local in place of wire 3, which is never needed again (1, 2 and 4 are); at the end the
    # identity layout comes back with one more swap.
    assert swap_count(items) == 2
    first = next(i for i in items if isinstance(i, Swap))
    assert (first.p, first.q) == (0, 3 - 1)


def _moved(item, at: list[int], g: int) -> list[int]:
    """The logical wire at each position after a `Swap` or `Permute`, from `at`."""
    at = list(at)
    if isinstance(item, Swap):
        p, q = item.p, item.q + g
        at[p], at[q] = at[q], at[p]
    else:
        at[g:] = [at[g + j] for j in item.perm]
    return at


def test_a_repeat_block_ends_each_layer_in_its_starting_layout():
    def layer(t):
        return [qfx.RY(t[i], wires=i) for i in range(6)] + [qfx.CNOT(wires=(i, i + 1)) for i in range(5)]

    circuit = qfx.Circuit([qfx.repeat(layer, jnp.zeros((7, 6)))], num_wires=6)
    items = schedule(circuit.ops, 6, 2, "q")
    (loop,) = items
    assert isinstance(loop, Loop) and loop.length == 7
    assert swap_count(items) > 0
    at = list(range(6))
    for item in loop.body:
        if isinstance(item, (Swap, Permute)):
            at = _moved(item, at, 2)
            continue
        for op in item.ops:  # each gate finds the wires it acts on densely at its local axes
            if isinstance(op, Relabeled):
                assert [at[w + 2] for w in op.wires] == list(op.base.wires)
    assert at == list(range(6))  # so that the next layer (the next step of the scan) starts alike


def test_argument_errors():
    mesh = jax.make_mesh((1,), ("q",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:1])
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        qfx.StateVector(mesh="q")
    with pytest.raises(ValueError, match="axis='q' names an axis of a mesh; pass mesh= too"):
        qfx.StateVector(axis="q")
    with pytest.raises(ValueError, match="axis='x' is not an axis of the mesh, whose axes are \\('q',\\)"):
        qfx.StateVector(mesh=mesh, axis="x")
    two = jax.make_mesh(
        (1, 1), ("a", "b"), axis_types=(jax.sharding.AxisType.Auto,) * 2, devices=jax.devices()[:1]
    )
    with pytest.raises(ValueError, match="the mesh has the axes \\('a', 'b'\\); say which one"):
        qfx.StateVector(mesh=two)

    backend = qfx.StateVector(mesh=mesh)
    m = qfx.measure(0)
    with pytest.raises(ValueError, match="qfx.expval: qfx.StateVector\\(mesh=...\\) runs circuits of gates"):
        qfx.expval(qfx.Circuit([qfx.H(0), m, qfx.cond(m, qfx.X(1))]), qfx.Z(1), backend=backend)
    with pytest.raises(
        ValueError, match="qfx.expval: shot estimates \\(shots=\\) are not available on a sharded"
    ):
        qfx.expval(qfx.Circuit([qfx.H(0)]), qfx.Z(0), shots=10, key=jax.random.key(0), backend=backend)


def test_one_device_mesh_is_the_plain_simulation():
    mesh = jax.make_mesh((1,), ("q",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:1])
    circuit = qfx.Circuit([qfx.H(0), qfx.RY(0.3, wires=1), qfx.CNOT(wires=(0, 2))])
    H = qfx.X(0) @ qfx.Z(2) + 0.5 * qfx.Y(1)
    backend = qfx.StateVector(mesh=mesh)
    np.testing.assert_allclose(qfx.expval(circuit, H, backend=backend), qfx.expval(circuit, H), atol=1e-6)
    np.testing.assert_allclose(qfx.state(circuit, backend=backend), qfx.state(circuit), atol=1e-6)
