"""`qfx.specs`: counts checked against hand counts and against the unrolled circuit, whose depth is
computed here gate by gate (a wire's depth is one more than the deepest of the gate's wires)."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

import qfx


def _naive_depth(gate_wires, num_wires: int) -> int:
    depth = [0] * num_wires
    for wires in gate_wires:
        d = max(depth[w] for w in wires) + 1
        for w in wires:
            depth[w] = d
    return max(depth)


def _brick(t):
    # RY on wires 0..3, CNOTs (0,1), (2,3), then CZ (1,2): a layer of depth 3.
    return [
        *(qfx.RY(t[i], wires=i) for i in range(4)),
        qfx.CNOT(wires=(0, 1)),
        qfx.CNOT(wires=(2, 3)),
        qfx.CZ(wires=(1, 2)),
    ]


@pytest.mark.parametrize("layers", [1, 7, 1000])
def test_repeat_is_expanded_and_matches_the_unrolled_circuit(layers):
    thetas = jnp.ones((layers, 4))
    circ = qfx.Circuit([qfx.H(0), qfx.repeat(_brick, thetas), qfx.Toffoli(wires=(0, 1, 3))])
    s = qfx.specs(circ)
    assert s.gate_counts == {"Hadamard": 1, "RY": 4 * layers, "CNOT": 2 * layers, "CZ": layers, "Toffoli": 1}
    assert s.num_gates == 7 * layers + 2
    assert s.num_two_qubit_gates == 3 * layers and s.num_multi_qubit_gates == 1
    assert s.num_trainable_parameters == 4 * layers
    one_layer = [g.wires for g in _brick(np.ones(4))]
    unrolled = [(0,)] + one_layer * layers + [(0, 1, 3)]
    assert s.depth == _naive_depth(unrolled, 4)
    if layers == 7:  # by hand: layer 1 ends at 4 on wires 1, 2 (H 1, RY 2, CNOT(0, 1) 3, CZ 4), each later
        # layer adds 3 there (RY, CNOT, CZ), and the Toffoli reads wire 1: 4 + 6 * 3 + 1.
        assert s.depth == 4 + 6 * 3 + 1


def _loop_body(i, thetas):
    return [qfx.RX(thetas[i], wires=0), qfx.CNOT(wires=(0, 1))]


def test_loops_conditionals_and_measurements():
    m = qfx.measure(0)
    circ = qfx.Circuit(
        [
            qfx.H(0),
            m,
            qfx.cond(m, [qfx.X(1)], [qfx.H(1), qfx.H(1)]),
            qfx.for_loop(5, _loop_body, jnp.ones(5)),
            qfx.while_loop(m, [qfx.H(0), m], max_iterations=3),
            qfx.for_loop(jnp.asarray(3), _loop_body, jnp.ones(4)),
            qfx.cond(jnp.asarray(True), qfx.RZ(0.5, wires=1)),
        ]
    )
    s = qfx.specs(circ)
    # Both branches of the first cond are counted (3 H, 1 X); the static loop 5 times; the while loop and
    # the traced loop not at all; the traced cond's RZ.
    assert s.gate_counts == {"Hadamard": 3, "PauliX": 1, "RX": 5, "CNOT": 5, "RZ": 1}
    assert s.num_measurements == 1
    # Wire 0: H, M0, then 5 x (RX, CNOT): 12; wire 1 after the cond (deepest branch: 2) joins at the CNOTs;
    # the RZ ends wire 1 at 13.
    assert s.depth == 13
    # 5 + 4 loop angles and the RZ's; the traced trip count and branch index are not parameters.
    assert s.num_trainable_parameters == 10
    notes = "\n".join(s.notes)
    assert "while_loop on wires (0,) (at most 3): 1 gate, 1 measurement and depth 2 per iteration" in notes
    assert "for_loop on wires (0, 1) with a traced length: 2 gates, 0 measurements and depth 2" in notes
    assert "the gates of all its 2 branches are counted, but one runs" in notes
    assert "not in the totals" in str(s)


def test_memory_by_backend():
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1)), qfx.RY(0.3, wires=2)])
    s = qfx.specs(circ)
    assert s.memory["state vector"] == 2**3 * 8  # complex64
    assert s.memory["StateVector"] == 2 * 2**3 * 8
    assert "TensorNetwork" not in s.memory  # it depends on the observable
    assert 0 < qfx.specs(circ, qfx.Z(2)).memory["TensorNetwork"] <= 2**3 * 8
    # 60 wires: no state vector fits, the light cone of Z(30) @ Z(31) in a brick circuit of depth 3 does.
    n = 60
    wide = qfx.Circuit(
        [qfx.RY(0.1, wires=i) for i in range(n)]
        + [qfx.CNOT(wires=(i, i + 1)) for i in range(0, n - 1, 2)]
        + [qfx.CNOT(wires=(i, i + 1)) for i in range(1, n - 1, 2)]
    )
    s = qfx.specs(wide, qfx.Z(30) @ qfx.Z(31))
    assert s.memory["StateVector"] == 2**61 * 8
    assert s.memory["TensorNetwork"] <= 2**10 * 8
    assert "memory, StateVector: 16.0 EiB" in str(s)
    # Measurements: exact mode keeps a density matrix per record of outcomes; no tensor network.
    m = qfx.measure(0)
    s = qfx.specs(qfx.Circuit([qfx.H(0), m, qfx.cond(m, qfx.X(1))]), [qfx.Z(0), qfx.Z(1)])
    assert s.memory["StateVector(mcm='exact')"] == 2 ** (1 + 2 * 2) * 8
    assert s.memory["TensorNetwork"] is None
    assert "memory, TensorNetwork: cannot run this circuit" in str(s)


def test_specs_is_frozen_and_refuses_what_is_not_a_circuit():
    s = qfx.specs(qfx.Circuit([qfx.H(0)]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.depth = 3
    with pytest.raises(TypeError, match="qfx.specs: expected a qfx.Circuit"):
        qfx.specs([qfx.H(0)])


def test_noise_channels_are_counted_apart_and_need_the_noisy_backends():
    circ = qfx.Circuit(
        [qfx.H(0), qfx.DepolarizingChannel(0.1, wires=0), qfx.CNOT(wires=(0, 1)), qfx.BitFlip(0.2, wires=1)]
    )
    s = qfx.specs(circ, qfx.Z(0))
    assert (s.num_gates, s.num_channels) == (2, 2)
    assert dict(s.channel_counts) == {"DepolarizingChannel": 1, "BitFlip": 1}
    assert s.depth == 4 and s.num_trainable_parameters == 2
    item = np.dtype(np.complex64).itemsize
    assert s.memory["DensityMatrix"] == 2 * 4**2 * item and s.memory["Trajectories"] == 2 * 2**2 * item
    assert s.memory["StateVector"] is None and s.memory["TensorNetwork"] is None
    assert "noise channels: 2 (BitFlip 1, DepolarizingChannel 1)" in str(s)
