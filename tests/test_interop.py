"""qfx.interop: OpenQASM 2 / 3 in and out, Qiskit, PennyLane and OpenFermion conversions.

References: Qiskit's own `Statevector` and OpenQASM importers, PennyLane's `default.qubit`, the stored
probabilities Qiskit computed for the programs in tests/qasm/ (tests/make_qasm_expected.py), and the dense
NumPy reference simulator.
"""

import json
import math
from pathlib import Path
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx.interop import QasmError

from . import reference
from .helpers import ALL_GATES, random_circuit, random_unitary

QASM = Path(__file__).resolve().parent / "qasm"
INPUTS = json.loads((QASM / "inputs.json").read_text())
STD = 'OPENQASM 3.0;\ninclude "stdgates.inc";\n'
QE = 'OPENQASM 2.0;\ninclude "qelib1.inc";\n'
# qfx writes every gate here but the matrix-defined ones (QubitUnitary, StatePrep: no OpenQASM form) and
# the wrappers holding one.
WRITABLE = {
    k: v
    for k, v in ALL_GATES.items()
    if not k.startswith(("QubitUnitary", "StatePrep")) and k != "ControlledU2"
}


def qiskit_order(probs_or_state, n):
    """Qiskit's basis order (qubit 0 least significant) to qfx's (wire 0 most significant)."""
    return np.asarray(probs_or_state).reshape([2] * n).transpose(range(n - 1, -1, -1)).reshape(-1)


def same_phase(a, b):
    """`a` times the global phase that brings it closest to `b`."""
    overlap = np.vdot(a, b)
    return a * overlap / abs(overlap)


def prepared(circuit, n):
    """A circuit that starts from a state with every amplitude distinct, so that wire mix-ups show."""
    prep = [qfx.RY(0.3 + 0.4 * w, wires=w) for w in range(n)] + [
        qfx.RZ(0.2 + 0.5 * w, wires=w) for w in range(n)
    ]
    return qfx.Circuit([*prep, *circuit.ops], num_wires=n)


# --- OpenQASM programs of real algorithms, against Qiskit's stored probabilities ------------------------


@pytest.mark.parametrize("name", ["adder", "qft", "grover", "teleport", "qaoa", "uccsd"])
def test_algorithm_programs_match_qiskit(name):
    record = json.loads((QASM / f"{name}.json").read_text())
    circuit = qfx.from_qasm(QASM / f"{name}.qasm", inputs=INPUTS.get(name))
    expected = qiskit_order(record["probabilities"], circuit.num_wires)
    kinds = {type(op).__name__ for op in circuit.ops}
    if kinds & {"ForLoop", "MidMeasure"}:  # qfx simulates loops and measurements
        got = qfx.probs(circuit, mcm="exact") if "MidMeasure" in kinds else qfx.probs(circuit)
    else:  # gates only: the float64 reference, which compiles nothing (uccsd has 200 gates)
        got = reference.probs(circuit)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)
    if name in ("grover", "qaoa"):  # loops over a range stay loops (one compilation, any length)
        assert "ForLoop" in kinds
    if name == "teleport":
        assert {"MidMeasure", "Cond"} <= kinds


def test_qubit_order_is_stated_and_matches_qiskit_both_ways():
    QuantumCircuit = pytest.importorskip("qiskit").QuantumCircuit
    Statevector = pytest.importorskip("qiskit.quantum_info").Statevector

    # X on qubit 0 of 3: qfx's wire 0 is the most significant bit (index 4), Qiskit's the least (index 1).
    circuit = qfx.from_qasm(STD + "qubit[3] q; x q[0];")
    assert int(np.argmax(np.abs(qfx.state(circuit)))) == 0b100
    assert int(np.argmax(np.abs(Statevector(qfx.interop.to_qiskit(circuit)).data))) == 0b001
    qc = QuantumCircuit(3)
    qc.x(0)
    assert qfx.interop.from_qiskit(qc).ops[0].wires == (0,)
    # Registers are numbered in declaration order.
    circuit = qfx.from_qasm(STD + "qubit[2] a; qubit b; qubit[2] c; x b; x c[1];")
    assert [op.wires for op in circuit.ops] == [(2,), (4,)]


# --- Qiskit, both directions, on random circuits ----------------------------------------------------------


def _random_qiskit_circuit(rng, n, depth):
    lib = pytest.importorskip("qiskit.circuit.library")
    QuantumCircuit = pytest.importorskip("qiskit").QuantumCircuit

    def a():
        return float(rng.uniform(-np.pi, np.pi))

    gates = [
        (1, lambda: lib.HGate()), (1, lambda: lib.XGate()), (1, lambda: lib.YGate()),
        (1, lambda: lib.ZGate()),
        (1, lambda: lib.SGate()), (1, lambda: lib.SdgGate()), (1, lambda: lib.TGate()),
        (1, lambda: lib.TdgGate()), (1, lambda: lib.SXGate()), (1, lambda: lib.SXdgGate()),
        (1, lambda: lib.RXGate(a())), (1, lambda: lib.RYGate(a())), (1, lambda: lib.RZGate(a())),
        (1, lambda: lib.PhaseGate(a())), (1, lambda: lib.UGate(a(), a(), a())),
        (1, lambda: lib.U2Gate(a(), a())),
        (1, lambda: lib.RGate(a(), a())), (2, lambda: lib.CXGate()), (2, lambda: lib.CYGate()),
        (2, lambda: lib.CZGate()), (2, lambda: lib.CHGate()), (2, lambda: lib.SwapGate()),
        (2, lambda: lib.iSwapGate()), (2, lambda: lib.CRXGate(a())), (2, lambda: lib.CRYGate(a())),
        (2, lambda: lib.CRZGate(a())), (2, lambda: lib.CPhaseGate(a())),
        (2, lambda: lib.CUGate(a(), a(), a(), a())),
        (2, lambda: lib.CSXGate()), (2, lambda: lib.RXXGate(a())), (2, lambda: lib.RYYGate(a())),
        (2, lambda: lib.RZZGate(a())), (2, lambda: lib.ECRGate()), (2, lambda: lib.RZXGate(a())),
        (2, lambda: lib.CSGate()), (2, lambda: lib.CXGate(ctrl_state=0)),
        (2, lambda: lib.UnitaryGate(random_unitary(rng, 4))), (3, lambda: lib.CCXGate()),
        (3, lambda: lib.CSwapGate()), (3, lambda: lib.CCXGate(ctrl_state=2)),
        (3, lambda: lib.RYGate(a()).control(2, ctrl_state=1, annotated=True)),
        (3, lambda: lib.RZGate(a()).control(2, ctrl_state=2, annotated=False)), (3, lambda: lib.CCZGate()),
    ]  # fmt: skip
    qc = QuantumCircuit(n)
    qc.global_phase = 0.7
    for _ in range(depth):
        k, make = gates[rng.integers(len(gates))]
        qc.append(make(), [int(q) for q in rng.choice(n, size=k, replace=False)])
    return qc


def test_from_qiskit_random_circuits_match_statevector():
    Statevector = pytest.importorskip("qiskit.quantum_info").Statevector

    rng = np.random.default_rng(0)
    n = 3
    for _ in range(12):
        qc = _random_qiskit_circuit(rng, n, 12)
        circuit = qfx.interop.from_qiskit(qc)
        # qfx has no global phase (Qiskit's, and those of gate definitions such as ECR's, are dropped).
        expected = same_phase(qiskit_order(Statevector(qc).data, n), reference.final_state(circuit))
        np.testing.assert_allclose(reference.final_state(circuit), expected, atol=1e-6)


def test_qiskits_own_qasm_output_reads_back():
    qasm2, qasm3 = pytest.importorskip("qiskit.qasm2"), pytest.importorskip("qiskit.qasm3")
    lib = pytest.importorskip("qiskit.circuit.library")
    Statevector = pytest.importorskip("qiskit.quantum_info").Statevector
    QuantumCircuit = pytest.importorskip("qiskit").QuantumCircuit

    qc = QuantumCircuit(3)
    for gate, qubits in [
        (lib.RYGate(0.4), [0]), (lib.HGate(), [1]), (lib.ECRGate(), [0, 1]), (lib.RZXGate(0.3), [1, 2]),
        (lib.CUGate(0.1, 0.2, 0.3, 0.4), [2, 0]), (lib.CSGate(), [0, 2]), (lib.CCZGate(), [0, 1, 2]),
        (lib.CXGate(ctrl_state=0), [1, 0]), (lib.RYYGate(0.6), [2, 1]), (lib.UnitaryGate(random_unitary(
            np.random.default_rng(6), 4)), [0, 2]), (lib.SXdgGate(), [1]), (lib.RGate(0.3, 0.9), [2]),
    ]:  # fmt: skip
        qc.append(gate, qubits)
    expected = qiskit_order(Statevector(qc).data, 3)
    for text in (qasm3.dumps(qc), qasm2.dumps(qc)):
        state = reference.final_state(qfx.from_qasm(text))
        np.testing.assert_allclose(state, same_phase(expected, state), atol=1e-6)  # gate phases dropped


def test_to_qiskit_random_circuits_match_statevector():
    Statevector = pytest.importorskip("qiskit.quantum_info").Statevector

    rng = np.random.default_rng(1)
    n = 3
    for _ in range(12):
        circuit = prepared(random_circuit(rng, n, 10), n)
        got = qiskit_order(Statevector(qfx.interop.to_qiskit(circuit)).data, n)
        np.testing.assert_allclose(got, reference.final_state(circuit), atol=1e-6)  # global phase too


def test_to_qasm_is_read_by_qiskit_with_the_same_state():
    qasm2, qasm3 = pytest.importorskip("qiskit.qasm2"), pytest.importorskip("qiskit.qasm3")
    Statevector = pytest.importorskip("qiskit.quantum_info").Statevector
    pytest.importorskip("qiskit_qasm3_import")  # Qiskit's OpenQASM 3 reader

    rng = np.random.default_rng(2)
    n = 3
    for version, load in ((3, qasm3.loads), (2, qasm2.loads)):
        gates = WRITABLE if version == 3 else {k: v for k, v in WRITABLE.items() if _qasm2_writable(k)}
        circuit = prepared(random_circuit(rng, n, 40, gates), n)
        qc = load(qfx.to_qasm(circuit, version=version))
        got = qiskit_order(Statevector(qc).data, n)
        np.testing.assert_allclose(got, reference.final_state(circuit), atol=1e-6)


def test_excitation_gates_and_state_prep_cross_both_ways():
    """The gates the templates add (Givens rotations, StatePrep) on 4 wires, where the random circuits'
    3 wires leave DoubleExcitation out: to Qiskit, to OpenQASM 3 (read by Qiskit and by qfx) and from
    PennyLane, against the reference simulator."""
    qml = pytest.importorskip("pennylane")
    qasm3 = pytest.importorskip("qiskit.qasm3")
    Statevector = pytest.importorskip("qiskit.quantum_info").Statevector
    pytest.importorskip("qiskit_qasm3_import")

    rng = np.random.default_rng(8)
    n = 4
    prep = rng.normal(size=4) + 1j * rng.normal(size=4)
    prep /= np.linalg.norm(prep)
    circuit = qfx.Circuit(
        [
            *[qfx.RY(float(rng.uniform(-3, 3)), wires=w) for w in range(n)],
            qfx.DoubleExcitation(0.7, wires=(2, 0, 3, 1)),
            qfx.SingleExcitation(-1.1, wires=(3, 1)),
            qfx.Adjoint(qfx.DoubleExcitation(0.4, wires=(0, 1, 2, 3))),
            qfx.Controlled(qfx.SingleExcitation(0.9, wires=(0, 2)), controls=3),
        ],
        num_wires=n,
    )
    expected = reference.final_state(circuit)
    got = qiskit_order(Statevector(qfx.interop.to_qiskit(circuit)).data, n)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    text = qfx.to_qasm(circuit)
    np.testing.assert_allclose(qiskit_order(Statevector(qasm3.loads(text)).data, n), expected, atol=1e-6)
    np.testing.assert_allclose(reference.final_state(qfx.from_qasm(text)), expected, atol=1e-6)
    with pytest.raises(ValueError, match="DoubleExcitation.*has no OpenQASM 2 form; use version=3"):
        qfx.to_qasm(circuit, version=2)
    two = qfx.Circuit([qfx.H(0), qfx.SingleExcitation(0.3, wires=(0, 1))])
    qasm2 = pytest.importorskip("qiskit.qasm2")
    got = qiskit_order(Statevector(qasm2.loads(qfx.to_qasm(two, version=2))).data, 2)
    np.testing.assert_allclose(got, reference.final_state(two), atol=1e-6)

    with_prep = qfx.Circuit([qfx.StatePrep(prep, wires=(1, 3)), *circuit.ops], num_wires=n)
    got = qiskit_order(Statevector(qfx.interop.to_qiskit(with_prep)).data, n)
    np.testing.assert_allclose(got, reference.final_state(with_prep), atol=1e-6)
    with pytest.raises(ValueError, match="StatePrep has no OpenQASM form"):
        qfx.to_qasm(with_prep)

    tape = qml.tape.QuantumScript(
        [qml.StatePrep(prep, wires=[1, 3]), qml.DoubleExcitation(0.7, wires=[2, 0, 3, 1]),
         qml.SingleExcitation(-1.1, wires=[3, 1])],
        [qml.state()],
    )  # fmt: skip
    converted, _ = qfx.interop.from_pennylane(tape)
    pl_state = qml.devices.DefaultQubit(wires=n).execute(tape)
    np.testing.assert_allclose(reference.final_state(converted), np.asarray(pl_state), atol=1e-6)


def _qasm2_writable(name):
    """Gates with an OpenQASM 2 form (it has no modifiers, so no negative controls, no controlled iSWAP)."""
    return name not in ("CRot", "MultiControlledX", "AdjointISWAP", "ControlledISWAP", "DoubleExcitation")


_PREP = "ry(0.3) q[0]; ry(0.7) q[1]; ry(1.1) q[2]; rz(0.2) q[0]; rz(0.7) q[1]; rz(1.2) q[2];\n"
STDGATES_PROGRAM = (
    STD
    + "qubit[3] q;\n"
    + _PREP
    + (
        "p(0.3) q[0]; x q[1]; y q[2]; z q[0]; h q[1]; s q[2]; sdg q[0]; t q[1]; tdg q[2]; sx q[0];\n"
        "rx(0.4) q[1]; ry(0.5) q[2]; rz(0.6) q[0]; cx q[0], q[1]; cy q[1], q[2]; cz q[2], q[0];\n"
        "cp(0.7) q[0], q[2]; crx(0.8) q[1], q[0]; cry(0.9) q[2], q[1]; crz(1.0) q[0], q[1]; ch q[1], q[2];\n"
        "swap q[0], q[2]; ccx q[0], q[1], q[2]; cswap q[2], q[0], q[1]; cu(0.1, 0.2, 0.3, 0.4) q[1], q[0];\n"
        "CX q[2], q[1]; phase(0.5) q[1]; cphase(0.6) q[2], q[0]; id q[0]; u1(0.7) q[1]; u2(0.8, 0.9) q[2];\n"
        "u3(1.0, 1.1, 1.2) q[0];\n"
    )
)
QELIB1_PROGRAM = (
    QE
    + "qreg q[3];\n"
    + _PREP
    + (
        "u3(0.1, 0.2, 0.3) q[0]; u2(0.4, 0.5) q[1]; u1(0.6) q[2]; cx q[0], q[1]; id q[2]; u0(1) q[0];\n"
        "u(0.7, 0.8, 0.9) q[1]; p(1.0) q[2]; x q[0]; y q[1]; z q[2]; h q[0]; s q[1]; sdg q[2]; t q[0];\n"
        "tdg q[1]; rx(0.2) q[2]; ry(0.3) q[0]; rz(0.4) q[1]; sx q[2]; sxdg q[0]; cz q[1], q[2];\n"
        "cy q[2], q[0]; swap q[0], q[1]; ch q[1], q[2]; ccx q[2], q[0], q[1]; cswap q[0], q[1], q[2];\n"
        "crx(0.5) q[1], q[0]; cry(0.6) q[2], q[1]; crz(0.7) q[0], q[2]; cu1(0.8) q[1], q[2];\n"
        "cp(0.9) q[2], q[0]; cu3(0.1, 0.2, 0.3) q[0], q[1]; csx q[1], q[2];\n"
        "cu(0.4, 0.5, 0.6, 0.7) q[2], q[0]; rxx(0.8) q[0], q[1]; rzz(0.9) q[1], q[2];\n"
        "rccx q[0], q[1], q[2]; U(0.1, 0.2, 0.3) q[1]; CX q[1], q[0];\n"
    )
)
QELIB1_WIDE_PROGRAM = (
    QE
    + "qreg q[4];\nh q;\n"
    + _PREP
    + ("rc3x q[0], q[1], q[2], q[3]; c3x q[3], q[0], q[1], q[2]; c3sqrtx q[1], q[2], q[3], q[0];\n")
)


def test_every_standard_gate_reads_as_qiskit_reads_it():
    qasm2, qasm3 = pytest.importorskip("qiskit.qasm2"), pytest.importorskip("qiskit.qasm3")
    Statevector = pytest.importorskip("qiskit.quantum_info").Statevector
    pytest.importorskip("qiskit_qasm3_import")

    def qelib1(text):  # Qiskit's reader with the longer qelib1.inc that qfx reads
        return qasm2.loads(text, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)

    for text, load in (
        (STDGATES_PROGRAM, qasm3.loads),
        (QELIB1_PROGRAM, qelib1),
        (QELIB1_WIDE_PROGRAM, qelib1),
    ):
        qc = load(text)
        circuit = qfx.from_qasm(text)
        assert float(qc.global_phase) == 0.0
        expected = qiskit_order(Statevector(qc).data, qc.num_qubits)
        np.testing.assert_allclose(reference.final_state(circuit), expected, atol=1e-6)  # the phase too


def test_from_qiskit_parameters_are_arguments_with_gradients():
    QuantumCircuit = pytest.importorskip("qiskit").QuantumCircuit
    Parameter = pytest.importorskip("qiskit.circuit").Parameter

    theta, phi = Parameter("theta"), Parameter("phi")
    qc = QuantumCircuit(2)
    qc.ry(2 * theta + 0.5, 0)
    qc.cx(0, 1)
    qc.rx(theta - phi, 1)

    def energy(t, p):
        circuit = qfx.interop.from_qiskit(qc, parameters={"theta": t, phi: p})
        return qfx.expval(circuit, qfx.Z(1))

    # <Z1> = cos(2t + 0.5) cos(t - p): its derivatives by hand.
    t, p = 0.3, -0.4
    assert math.isclose(float(energy(t, p)), math.cos(2 * t + 0.5) * math.cos(t - p), abs_tol=1e-6)
    dt, dp = jax.jit(jax.grad(energy, argnums=(0, 1)))(jnp.float32(t), jnp.float32(p))
    assert math.isclose(
        float(dt),
        -2 * math.sin(2 * t + 0.5) * math.cos(t - p) - math.cos(2 * t + 0.5) * math.sin(t - p),
        abs_tol=1e-5,
    )
    assert math.isclose(float(dp), math.cos(2 * t + 0.5) * math.sin(t - p), abs_tol=1e-5)
    with pytest.raises(ValueError, match=r"parameters \['phi'\] have no value"):
        qfx.interop.from_qiskit(qc, parameters={"theta": 0.1})
    with pytest.raises(TypeError, match="expected a qiskit QuantumCircuit"):
        qfx.interop.from_qiskit("qc")


def test_qiskit_measurements_and_conditionals_both_ways():
    QuantumCircuit = pytest.importorskip("qiskit").QuantumCircuit

    qc = QuantumCircuit(2, 1)
    qc.h(0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    qc.reset(0)
    circuit = qfx.interop.from_qiskit(qc)
    # Wire 0 measured and reset to |0>, wire 1 copies its outcome: |00> and |01> with 1/2 each.
    np.testing.assert_allclose(np.asarray(qfx.probs(circuit, mcm="exact")), [0.5, 0.5, 0, 0], atol=1e-6)
    written = qfx.interop.to_qiskit(circuit)
    assert [i.operation.name for i in written.data] == ["h", "measure", "if_else", "measure", "reset"]
    assert written.num_clbits == 2  # a bit for each measurement, the one a reset makes too
    assert written.data[2].operation.condition == (written.clbits[0], 1)
    assert qfx.interop.from_qiskit(written) == circuit  # the same structure and parameters
    m = qfx.measure(0)
    with pytest.raises(ValueError, match="only conditionals on one measurement"):
        qfx.interop.to_qiskit(qfx.Circuit([m, qfx.switch(m + m, [qfx.X(1), qfx.Y(1), qfx.Z(1)])]))
    with pytest.raises(ValueError, match="postselected"):
        qfx.interop.to_qiskit(qfx.Circuit([qfx.measure(0, postselect=1)]))
    with pytest.raises(TypeError, match="qfx.interop.to_qiskit: expected a qfx.Circuit"):
        qfx.interop.to_qiskit(qc)
    with pytest.raises(ValueError, match="to_qiskit needs concrete parameters"):
        jax.jit(lambda t: qfx.interop.to_qiskit(qfx.Circuit([qfx.RX(t, wires=0)])))(0.1)
    unread = QuantumCircuit(2, 1)
    with unread.if_test((unread.clbits[0], 1)):
        unread.x(1)
    with pytest.raises(ValueError, match="reads classical bits that no measurement wrote"):
        qfx.interop.from_qiskit(unread)
    loop = QuantumCircuit(1)
    with loop.while_loop(
        (loop.add_bits([pytest.importorskip("qiskit.circuit").Clbit()]) or loop.clbits[0], 1)
    ):
        loop.x(0)
    with pytest.raises(ValueError, match="the instruction 'while_loop' is not supported"):
        qfx.interop.from_qiskit(loop)
    init = QuantumCircuit(1)
    init.initialize([0, 1], 0)
    with pytest.raises(TypeError, match="is not an angle"):
        qfx.interop.from_qiskit(init)


# --- to_qasm / from_qasm round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 2])
def test_qasm_round_trip_of_every_gate(version):
    rng = np.random.default_rng(3)
    names = [k for k in WRITABLE if version == 3 or _qasm2_writable(k)]
    n = max(WRITABLE[k][0] for k in names)
    circuit = prepared(qfx.Circuit([WRITABLE[k][1](rng, tuple(range(WRITABLE[k][0]))) for k in names]), n)
    back = qfx.from_qasm(qfx.to_qasm(circuit, version=version))
    np.testing.assert_allclose(reference.final_state(back), reference.final_state(circuit), atol=1e-6)


def test_qasm_round_trip_states_in_complex64():
    circuit = qfx.Circuit(
        [
            qfx.U3(0.1234567, -2.5, 1.75, wires=0),
            qfx.CRX(-0.3, wires=(0, 1)),
            qfx.IsingXY(1.1, wires=(0, 2)),
            qfx.PauliRot(0.7, "XYZ", wires=(1, 0, 2)),
            qfx.Controlled(qfx.Rot(0.2, 0.4, 0.8, wires=1), controls=(0, 2), control_values=(0, 1)),
            qfx.Adjoint(qfx.ISWAP(wires=(2, 0))),
        ]
    )
    back = qfx.from_qasm(qfx.to_qasm(circuit))
    # qfx's complex64 state of the circuit read back, against the exact state of the original.
    np.testing.assert_allclose(np.asarray(qfx.state(back)), reference.final_state(circuit), atol=1e-6)


def test_to_qasm_writes_angles_at_full_precision(x64):
    theta = 0.12345678901234567
    text = qfx.to_qasm(qfx.Circuit([qfx.RX(theta, wires=0), qfx.U3(theta, -theta, 2 * theta, wires=1)]))
    assert repr(theta) in text
    back = qfx.from_qasm(text)
    assert float(back.ops[0].theta) == theta and float(back.ops[1].delta) == 2 * theta


def _layer(i, thetas):
    return [qfx.RY(thetas[i], wires=0), qfx.CNOT(wires=(0, 1)), qfx.RZ(0.25, wires=1)]


def test_loops_round_trip_as_qasm3_for_loops():
    thetas = jnp.linspace(0.2, 1.0, 5)
    block = qfx.repeat(
        lambda t: qfx.Circuit([qfx.RX(t, wires=1), qfx.CZ(wires=(1, 2))]), jnp.linspace(0.1, 0.5, 3)
    )
    circuit = qfx.Circuit([qfx.H(2), qfx.for_loop(5, _layer, thetas), block])
    text = qfx.to_qasm(circuit)
    assert text.count("for uint i in [0:") == 2 and "array[float[64], 5] _p0 = {" in text
    back = qfx.from_qasm(text)
    assert sum(isinstance(op, qfx.ForLoop) for op in back.ops) == 2  # loops again, not unrolled
    unrolled = (
        [qfx.H(2)] + [op for i in range(5) for op in _layer(i, thetas)] + reference.flatten_ops([block])
    )
    np.testing.assert_allclose(
        np.asarray(qfx.state(back)), reference.final_state(qfx.Circuit(unrolled, num_wires=3)), atol=1e-6
    )


def test_conditionals_round_trip_as_qasm3_if_else():
    m0, m1 = qfx.measure(0), qfx.measure(1)
    circuit = qfx.Circuit(
        [
            qfx.H(0),
            qfx.H(1),
            m0,
            m1,
            qfx.cond(m0 ^ m1, [qfx.X(2)], [qfx.H(2)]),
            qfx.switch(m0 + 2 * m1, [qfx.RX(0.3, wires=2), qfx.RY(0.4, wires=2), [], qfx.Z(2)]),
        ]
    )
    text = qfx.to_qasm(circuit)
    assert "} else {" in text and "} else if (" in text
    # Each pair of outcomes (1/4): wire 2 in |+> (|->) or RY(0.4)|1> or |1>.
    c, s = math.cos(0.2) ** 2, math.sin(0.2) ** 2
    expected = np.asarray([[0.5, 0.5], [0, 1], [s, c], [0.5, 0.5]]).reshape(-1) / 4
    np.testing.assert_allclose(np.asarray(qfx.probs(qfx.from_qasm(text), mcm="exact")), expected, atol=1e-6)


def test_qasm2_unrolls_loops_and_writes_single_measurement_conditions():
    m0 = qfx.measure(0)
    thetas = jnp.linspace(0.2, 1.0, 3)
    circuit = qfx.Circuit(
        [qfx.for_loop(3, _layer, thetas), m0, qfx.cond(m0, qfx.X(2)), qfx.cond(~m0, qfx.SX(1))]
    )
    text = qfx.to_qasm(circuit, version=2)
    assert "for" not in text and "if (m0==1) x q[2];" in text and "if (m0==0) sx q[1];" in text
    back = qfx.from_qasm(text)
    gates = [op for i in range(3) for op in _layer(i, thetas)]
    assert [type(op).__name__ for op in back.ops[: len(gates)]] == [type(op).__name__ for op in gates]
    assert [type(op).__name__ for op in back.ops[len(gates) :]] == ["MidMeasure", "Cond", "Cond"]


def test_to_qasm_errors():
    with pytest.raises(ValueError, match="QubitUnitary has no OpenQASM form"):
        qfx.to_qasm(qfx.Circuit([qfx.QubitUnitary(np.eye(2), wires=0)]))
    with pytest.raises(ValueError, match="has no OpenQASM 2 form; use version=3"):
        qfx.to_qasm(qfx.Circuit([qfx.CRot(0.1, 0.2, 0.3, wires=(0, 1))]), version=2)
    with pytest.raises(ValueError, match="postselected, which has no OpenQASM form"):
        qfx.to_qasm(qfx.Circuit([qfx.measure(0, postselect=0)]))
    m = qfx.measure(0)
    with pytest.raises(ValueError, match="OpenQASM 2 conditions test one measurement"):
        qfx.to_qasm(qfx.Circuit([m, qfx.cond(m, qfx.X(1), qfx.Y(1))]), version=2)
    with pytest.raises(ValueError, match="qfx writes measurements at top level"):
        qfx.to_qasm(qfx.Circuit([qfx.H(1), m, qfx.cond(m, [qfx.measure(1)])]))
    with pytest.raises(ValueError, match="while_loop is not written"):
        qfx.to_qasm(qfx.Circuit([m, qfx.while_loop(m, [qfx.H(0), m], max_iterations=3)]))
    with pytest.raises(ValueError, match="version must be 2 or 3"):
        qfx.to_qasm(qfx.Circuit([qfx.H(0)]), version=4)
    with pytest.raises(TypeError, match="expected a qfx.Circuit"):
        qfx.to_qasm([qfx.H(0)])
    with pytest.raises(ValueError, match="the angle inf has no OpenQASM form"):
        qfx.to_qasm(qfx.Circuit([qfx.RX(jnp.inf, wires=0)]))
    with pytest.raises(ValueError, match="traced length has no OpenQASM form"):
        qfx.to_qasm(qfx.Circuit([qfx.for_loop(jnp.asarray(2), lambda i: qfx.H(0))]))
    with pytest.raises(ValueError, match="nested loops and conditionals inside loops are not written yet"):
        qfx.to_qasm(qfx.Circuit([qfx.for_loop(2, lambda i: qfx.for_loop(2, lambda j: qfx.H(0)))]))
    with pytest.raises(ValueError, match="nested conditionals have no OpenQASM 2 form"):
        qfx.to_qasm(qfx.Circuit([m, qfx.cond(m, [qfx.cond(m, qfx.X(1))])]), version=2)
    late = qfx.measure(1)
    with pytest.raises(ValueError, match="reads a measurement that comes after it"):
        qfx.to_qasm(qfx.Circuit([qfx.cond(late, qfx.X(0)), late]))
    with pytest.raises(ValueError, match="needs concrete parameters"):
        jax.jit(lambda t: qfx.to_qasm(qfx.Circuit([qfx.RX(t, wires=0)])))(0.1)


# --- from_qasm: the language ------------------------------------------------------------------------------


def test_modifiers_gphase_and_qubit_loops_against_the_reference():
    text = STD + (
        "qubit[3] q;\n"
        "h q;\n"
        "negctrl @ inv @ pow(3) @ t q[0], q[1];\n"  # T^-3 on q[1] when q[0] is 0
        "ctrl(2) @ rx(0.4) q[2], q[0], q[1];\n"
        "ctrl @ negctrl @ gphase(0.7) q[1], q[2];\n"  # e^{0.7 i} on |q1 q2> = |10>
        "pow(-2) @ s q[2];\n"
        "for uint i in [0:2:2] { ry(0.1 * (i + 1)) q[i]; }\n"  # the index selects qubits: unrolled
        "for int j in {2, 1} { rz(j) q[1]; }\n"
    )
    got = qfx.from_qasm(text)
    ops = [qfx.H(0), qfx.H(1), qfx.H(2)]
    ops += [qfx.Controlled(qfx.Adjoint(qfx.T(1)), controls=0, control_values=0)] * 3
    ops += [qfx.Controlled(qfx.RX(0.4, wires=1), controls=(2, 0))]
    ops += [
        qfx.Controlled(qfx.PauliX(2), controls=1),
        qfx.Controlled(qfx.PhaseShift(0.7, wires=2), controls=1),
    ]
    ops += [qfx.Controlled(qfx.PauliX(2), controls=1)]
    ops += [qfx.Adjoint(qfx.S(2))] * 2 + [
        qfx.RY(0.1, wires=0),
        qfx.RY(0.3, wires=2),
        qfx.RZ(2.0, 1),
        qfx.RZ(1.0, 1),
    ]
    np.testing.assert_allclose(
        reference.final_state(got), reference.final_state(qfx.Circuit(ops, num_wires=3)), atol=1e-6
    )


def test_conditionals_on_measurements_qasm2_and_qasm3():
    qasm2 = QE + "qreg q[2]; creg c[2];\nh q[0];\nmeasure q[0] -> c[0];\nif (c == 1) x q[1];\n"
    qasm3 = STD + "qubit[2] q; bit b;\nh q[0];\nb = measure q[0];\nif (!b) { x q[1]; } else { h q[1]; }\n"
    m = qfx.measure(0)
    assert qfx.from_qasm(qasm2) == qfx.Circuit([qfx.H(0), m, qfx.cond(m == 1, qfx.X(1))], num_wires=2)
    np.testing.assert_allclose(
        np.asarray(qfx.probs(qfx.from_qasm(qasm3), mcm="exact")), [0, 0.5, 0.25, 0.25], atol=1e-6
    )
    # A bit never measured reads 0, so this branch is decided when the program is read.
    static = qfx.from_qasm(STD + "qubit q; bit[2] c; if (c == 0) { x q; }")
    assert [type(op).__name__ for op in static.ops] == ["PauliX"]


def test_inputs_under_grad_jit_and_vmap(x64):  # float64 angles: finite differences are exact enough
    text = STD + (
        "input float g; input angle b;\nqubit[2] q;\nh q;\n"
        "for uint k in [1:2] { rzz_(k * g) q[0], q[1]; rx(2 * b / k) q[0]; ry(sin(b) + k) q[1]; }\n"
    )
    text = text.replace("qubit[2]", "gate rzz_(t) a, c { cx a, c; rz(t) c; cx a, c; }\nqubit[2]")
    cost = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(0)

    def energy(g, b):
        return qfx.expval(qfx.from_qasm(text, inputs={"g": g, "b": b}), cost)

    def flat(g, b):  # the same program, its loop unrolled by hand, on the float64 reference
        ops = [qfx.H(0), qfx.H(1)]
        for k in (1, 2):
            ops += [
                qfx.IsingZZ(k * g, wires=(0, 1)),
                qfx.RX(2 * b / k, wires=0),
                qfx.RY(math.sin(b) + k, wires=1),
            ]
        return reference.expval(qfx.Circuit(ops), cost)

    grad = jax.jit(jax.grad(energy, argnums=(0, 1)))(0.7, 0.3)
    eps = 1e-5
    fd = (
        (flat(0.7 + eps, 0.3) - flat(0.7 - eps, 0.3)) / (2 * eps),
        (flat(0.7, 0.3 + eps) - flat(0.7, 0.3 - eps)) / (2 * eps),
    )
    np.testing.assert_allclose(np.asarray(grad), fd, atol=1e-7)
    gs = jnp.asarray([0.1, 0.7, 1.0])
    batch = jax.vmap(energy, in_axes=(0, None))(gs, 0.3)
    np.testing.assert_allclose(np.asarray(batch), [flat(float(x), 0.3) for x in gs], atol=1e-9)
    first, again = (qfx.from_qasm(text, inputs={"g": g, "b": 0.3}) for g in (0.7, 0.2))
    assert any(isinstance(op, qfx.ForLoop) for op in first.ops)
    # Read again with other inputs: the same static structure (what jax.jit caches on), so a jitted
    # function of the circuit does not recompile.
    assert jax.tree.structure(first) == jax.tree.structure(again)


def test_programs_without_qubits_are_empty_circuits():
    for text in ("", "OPENQASM 2.0;", STD + "float x = 2.0;\ngphase(x);"):
        circuit = qfx.from_qasm(text)
        assert circuit.ops == () and circuit.num_wires == 1


def test_from_qasm_reads_a_path_and_an_angle_input(tmp_path):
    path = tmp_path / "prog.qasm"
    path.write_text(STD + "input angle[32] a; qubit q; rx(a) q;")
    circuit = qfx.from_qasm(str(path), inputs={"a": 0.5})
    assert math.isclose(float(qfx.expval(circuit, qfx.Z(0))), math.cos(0.5), abs_tol=1e-6)
    with pytest.raises(ValueError, match="cannot read the file"):
        qfx.from_qasm(str(tmp_path / "missing.qasm"))
    with pytest.raises(ValueError, match=r"inputs \['b'\] are not declared"):
        qfx.from_qasm(path, inputs={"a": 0.5, "b": 1.0})
    with pytest.raises(TypeError, match="expected OpenQASM text or a path"):
        qfx.from_qasm(42)
    with pytest.raises(TypeError, match="inputs must be a dict"):
        qfx.from_qasm(path, inputs=[0.5])


# Each error of the reader, with the line and column it names.
READ_ERRORS = [
    ("OPENQASM 3.0;\nqubit q;\nh q[", 3, "syntax error"),
    ("OPENQASM 3.0;\nqubit q;\n\x00", 3, "token recognition error"),
    ("OPENQASM 4.0;", 1, "not a version qfx reads"),
    ("OPENQASM 3.0;\nqubit[2] q;\nh q[0];", 3, r"gate 'h' is not defined \(it is in stdgates.inc"),
    (STD + "qubit[2] q;\ncx q[0], q[0];", 4, "a qubit appears twice"),
    (STD + "qubit[2] q;\nh r[0];", 4, "'r' is not a declared qubit"),
    (STD + "qubit[2] q;\nh q[2];", 4, "index 2 is out of range for 'q' of size 2"),
    (STD + "qubit[2] q;\nrx q[0];", 4, "takes 1 parameter"),
    (STD + "qubit[2] q;\nfoo q[0];", 4, "gate 'foo' is not defined"),
    (STD + "gate h a { x a; }", 3, "gate 'h' is already defined"),
    (STD + "qubit q;\nqubit q;", 4, "'q' is already declared"),
    (STD + "qubit[0] q;", 3, "must have a positive size"),
    (STD + "qubit[200000] q;", 3, "more than 100000 qubits"),
    (STD + 'include "mine.inc";', 3, "qfx knows only"),
    (STD + "qubit q;\nfor int i in [0:300000] { x q; }", 4, "more than 200000 iterations"),
    (STD + "qubit q;\npow(300000) @ x q;", 4, "unrolls into more than"),
    (STD + "qubit q;\npow(0.5) @ x q;", 4, "reads integer powers"),
    (STD + "input float t;\nqubit q;", 3, "needs the input 't'"),
    (STD + "input int n;", 3, "qfx reads `input float` and `input angle`"),
    (STD + "qubit q;\nwhile (true) { x q; }", 4, "while loops are not supported"),
    (
        STD + "qubit[2] q; bit b;\nb = measure q[0];\nif (b) { b = measure q[1]; }",
        5,
        "inside a conditional block",
    ),
    (STD + "qubit q;\nrx(1 / 0) q;", 4, "division by zero"),
    (STD + "qubit q;\nrx(sqrt(-1.0)) q;", 4, "sqrt"),
    (STD + "qubit q;\nrx(1 << 100) q;", 4, "shifts take integers"),
    (STD + "qubit q;\nrx(y) q;", 4, "'y' is not declared"),
    (STD + "qubit q;\nrx(q) q;", 4, "is a qubit, not a classical value"),
    (STD + "qubit q;\ngate g(a) b { rx(a) b; }\ng(1, 2) q;", 5, r"gate 'g' takes 1 parameter\(s\)"),
    (STD + "gate g a { g a; }\nqubit q;\ng q;", 3, "gate 'g' is not defined"),  # not yet, in its own body
    (STD + "qubit q; bit b;\nb = measure q;\nrx(b) q;", 5, "a gate parameter must be a number"),
    (STD + "qubit[2] q;\nctrl(3) @ x q[0], q[1];", 4, "take 3 control qubits"),
    (STD + "qubit[2] q; qubit[3] r;\ncx q, r;", 4, "different sizes"),
    (STD + "qubit q;\ngphase(0.1) q;", 4, "gphase takes no qubits"),
    (STD + "qubit q;\nlet a = q;", 4, "alias statement is not supported"),
    (
        STD + "qubit q; float x = 1.0;\nbit b = measure q;\nif (b) { x = 2.0; }",
        5,
        "assigns a classical variable",
    ),
    (STD + "array[float[64], 2] v = {1.0};", 3, "needs an initialiser"),
    (STD + "qubit q;\nrx(arcsin(2.0)) q;", 4, "arcsin"),
    (STD + "qubit q; bit[2] c;\nc[5] = measure q;", 4, "index 5 is out of range"),
    (STD + "qubit[2] q; bit c;\nc = measure q;", 4, "measuring 2 qubit"),
    ("(" * 5000, 1, "nests too deeply"),
    (STD + "qubit q;\nx q[0];", 4, "'q' is a single qubit: it takes no index"),
    (STD + "bit[0] c;", 3, "must have a size in 1..100000"),
    (STD + "array[float[64], 2, 2] v = {{1.0, 2.0}, {3.0, 4.0}};", 3, "one-dimensional arrays"),
    (STD + "qubit q; bit b;\nb = measure q;\narray[float[64], 1] v = {b};", 5, "cannot fill an array"),
    (STD + "complex[float[64]] z;", 3, "variables of type complex are not supported"),
    (STD + "qubit q;\nfloat f = measure q;", 4, "a measurement result must be assigned to a bit"),
    (STD + "qubit q;\nz = 1;", 4, "'z' is not a declared classical variable"),
    (STD + "bit[2] c;\nc += 1;", 4, "compound assignment to bits"),
    (STD + "array[float[64], 2] v = {1.0, 2.0};\nv[0] = 3.0;", 4, "cannot be assigned entry by entry"),
    (STD + "qubit q; float x;\nx = measure q;", 4, "'x' is not a declared bit or bit register"),
    (STD + "qubit q; bit b;\nb[0] = measure q;", 4, "'b' is a single bit: it takes no index"),
    (STD + "bit[2] c; bit[3] d;\nc = d;", 4, r"assigning 3 bit\(s\) to 2 bit\(s\)"),
    (STD + "qubit[2] q;\nctrl(0) @ x q[0], q[1];", 4, "the number of controls must be positive"),
    (STD + "qubit q;\nU(1, 2) q;", 4, "U takes 3 parameters and 1 qubit"),
    (
        STD + "gate g a { for int i in [0:1] { x a; } }\nqubit q;\ng q;",
        3,
        "for in loop cannot appear in a gate",
    ),
    ("// only a comment", 1, "the parser found no program in this text"),
    (STD + "qubit[2] q;\nctrl @ gphase(0.1) q;", 4, "gphase's controls must be single qubits"),
    (STD + "qubit q;\nctrl(2) @ gphase(0.1) q;", 4, "gphase: the modifiers take 2 control qubits"),
    (STD + "qubit q; bit[2] c;\nif (c) x q;", 4, "a condition must be a single value, not a register"),
    (STD + "qubit q;\nfor int i in [0:] { x q; }", 4, "a for loop's range needs an end"),
    (STD + "qubit q;\nfor int i in [0:0:4] { x q; }", 4, "a range's step must not be 0"),
    (STD + "qubit q; float y = 1.0;\nfor float i in y { x q; }", 4, "a for loop runs over a range"),
    (STD + "qubit q;\nfor uint k in [0:199999] { rx(k) q; rx(k) q; }", 4, "runs more than 200000 operations"),
    (STD + "qubit[2] q;\nh q[0][1];", 4, "'q' takes one index"),
    (STD + "qubit q; bit[2] c;\nrx(-c) q;", 4, "the operator - does not apply to a register"),
    (STD + "qubit q;\nrx(foo(1)) q;", 4, r"the function foo\(1 arguments\) is not supported"),
    (
        STD + "qubit q; bit b;\nb = measure q;\nrx(float(b)) q;",
        5,
        "a measurement result cannot become a float",
    ),
    (STD + "qubit q; array[float[64], 2] v = {1.0, 2.0};\nrx(v[0:1]) q;", 4, "qfx reads a single index here"),
    (STD + "qubit q; bit[2] c;\nif (c[3]) x q;", 4, "index 3 is out of range for a register of size 2"),
    (
        STD + "qubit q; array[float[64], 2] v = {1.0, 2.0};\nrx(v[5]) q;",
        4,
        "out of range for an array of size 2",
    ),
    (STD + "qubit q; float f = 1.0;\nrx(f[0]) q;", 4, "only registers and arrays can be indexed"),
    (STD + "qubit q;\nrx(1ns) q;", 4, "duration literal is not supported in expressions"),
    (STD + "qubit q; bit b;\nb = measure q;\nint i = b;", 5, "TypeError: cannot convert MidMeasure"),
    (STD + "qubit q;\nrx(complex(1.0)) q;", 4, "a complex is not supported"),
    (STD + "qubit[1.5] q;", 3, "must be an integer known before the program runs, got 1.5"),
    (
        STD
        + "gate g0 a { x a; }\n"
        + "".join(f"gate g{k} a {{ g{k - 1} a; }}\n" for k in range(1, 70))
        + "qubit q;\ng69 q;",
        8,  # the body of g5, where the 65th level of calls begins
        "definitions nest more than 64 deep",
    ),
]


def test_from_qasm_refuses_a_qubit_index_known_only_at_run_time():
    text = STD + "input float t;\nqubit[2] q;\nx q[t];"
    assert qfx.from_qasm(text, inputs={"t": 1.0}).ops[0].wires == (1,)  # concrete: read as an index

    def build(t):
        return qfx.state(qfx.from_qasm(text, inputs={"t": t}))

    with pytest.raises(QasmError, match="depends on a value known only when the circuit runs") as info:
        jax.jit(build)(1.0)
    assert (info.value.line, info.value.column) == (5, 1)


@pytest.mark.parametrize("text, line, match", READ_ERRORS)
def test_from_qasm_errors_name_line_and_column(text, line, match):
    with pytest.raises(QasmError, match=match) as info:
        qfx.from_qasm(text)
    assert info.value.line == line and info.value.column >= 1
    assert str(info.value).startswith(f"OpenQASM, line {line}, column {info.value.column}: ")


def test_files_qiskit_rejects_are_rejected_by_qfx():
    qasm2, qasm3 = pytest.importorskip("qiskit.qasm2"), pytest.importorskip("qiskit.qasm3")
    pytest.importorskip("qiskit_qasm3_import")

    invalid = [
        (qasm2.loads, QE + "qreg q[2];\nh r[0];"),  # an undeclared register
        (qasm2.loads, QE + "qreg q[2];\nfoo q[0];"),  # an undefined gate
        (qasm2.loads, QE + "qreg q[1];\nrx(0.1, 0.2) q[0];"),  # a parameter too many
        (qasm2.loads, QE + "qreg q[2];\ncx q[0], q[0];"),  # a repeated qubit
        (qasm3.loads, STD + "qubit[2] q;\nh r[0];"),
        (qasm3.loads, STD + "qubit[2] q;\nh q[0]"),  # no semicolon
        (qasm3.loads, STD + "qubit[2] q;\ncrx q[0], q[1];"),  # a parameter missing
        (qasm3.loads, STD + "qubit[2] q;\nbit c;\nc = measure r;"),
    ]
    for load, text in invalid:
        with pytest.raises(Exception):  # noqa: B017 - Qiskit's importers raise errors of their own kinds
            load(text)
        with pytest.raises(QasmError):
            qfx.from_qasm(text)


def test_parser_limits_keep_time_bounded():
    start = time.perf_counter()
    with pytest.raises(QasmError, match="more than 1000000 characters"):
        qfx.from_qasm("x" * 1_000_001)
    for text in ("(" * 20_000, "{" * 20_000, "qubit q;" + "x q;" * 3_000):
        try:
            qfx.from_qasm(text)
        except QasmError:
            pass
    assert time.perf_counter() - start < 30


# --- PennyLane and Hamiltonians ---------------------------------------------------------------------------


def test_from_pennylane_matches_default_qubit():
    qml = pytest.importorskip("pennylane")
    rng = np.random.default_rng(4)
    ops = [
        qml.Hadamard(0), qml.RX(0.3, 1), qml.Rot(0.1, 0.2, 0.3, 2), qml.CNOT([0, 1]), qml.adjoint(qml.S(2)),
        qml.ctrl(qml.RY(0.4, 0), control=[2], control_values=[0]),
        qml.QubitUnitary(random_unitary(rng, 4), [1, 2]),
        qml.PauliRot(0.5, "XY", [0, 2]), qml.MultiControlledX([0, 1, 2], control_values=[1, 0]),
        qml.IsingXY(0.6, [1, 0]), qml.CRot(0.1, 0.5, -0.2, [2, 0]), qml.SX(1), qml.ECR([0, 1]),
    ]  # fmt: skip
    H = 0.5 * qml.Z(0) @ qml.X(2) - 0.3 * qml.Y(1) + 0.2 * qml.Identity(0)
    tape = qml.tape.QuantumScript(
        ops, [qml.expval(H), qml.probs(), qml.expval(qml.Hermitian(np.diag([1.0, 2.0]), 1))]
    )
    (e_pl, p_pl, h_pl) = qml.execute([tape], qml.device("default.qubit"))[0]
    circuit, (obs, none, herm) = qfx.interop.from_pennylane(tape)
    assert none is None
    # The converted circuit and observables, on the float64 reference (qfx's simulation has its own tests).
    assert math.isclose(reference.expval(circuit, obs), float(e_pl), abs_tol=1e-6)
    assert math.isclose(reference.expval(circuit, herm), float(h_pl), abs_tol=1e-6)
    np.testing.assert_allclose(reference.probs(circuit), p_pl, atol=1e-6)
    with pytest.raises(TypeError, match="expected a QuantumScript"):
        qfx.interop.from_pennylane(ops)
    with pytest.raises(ValueError, match="the operation MidMeasureMP has no qfx form"):
        qfx.interop.from_pennylane(qml.tape.QuantumScript([qml.measurements.MidMeasureMP(0)], []))


def test_noisy_pennylane_tapes_match_default_mixed(x64):
    # Every channel under PennyLane's conventions: the converted tape on qfx.DensityMatrix() (float64)
    # against PennyLane's own mixed-state simulator, T2 above and below T1 for the thermal relaxation.
    qml = pytest.importorskip("pennylane")
    rng = np.random.default_rng(11)
    kraus2 = np.linalg.qr(rng.normal(size=(8, 4)) + 1j * rng.normal(size=(8, 4)))[0].reshape(2, 4, 4)
    ops = [
        qml.Hadamard(0), qml.RY(0.7, 1), qml.CNOT([0, 1]), qml.RX(1.1, 2), qml.BitFlip(0.1, 0),
        qml.PhaseFlip(0.2, 1), qml.DepolarizingChannel(0.3, 2), qml.CRX(0.5, [2, 0]),
        qml.AmplitudeDamping(0.4, 1), qml.GeneralizedAmplitudeDamping(0.3, 0.2, 0), qml.IsingXX(0.9, [0, 2]),
        qml.PhaseDamping(0.25, 2), qml.ResetError(0.1, 0.3, 1), qml.PauliError("XZ", 0.15, [1, 2]),
        qml.Rot(0.3, -0.4, 0.8, 1), qml.ThermalRelaxationError(0.1, 100.0, 60.0, 20.0, 0),
        qml.ThermalRelaxationError(0.3, 80.0, 140.0, 30.0, 2), qml.QubitChannel(list(kraus2), [2, 1]),
        qml.CNOT([1, 0]),
    ]  # fmt: skip
    obs = qml.Z(0) @ qml.X(1) + 0.4 * qml.Y(2)
    tape = qml.tape.QuantumScript(ops, [qml.expval(obs), qml.probs(), qml.density_matrix([2, 0])])
    with warnings.catch_warnings():  # default.mixed casts its real probabilities from complex
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        e_pl, p_pl, rho_pl = qml.execute([tape], qml.device("default.mixed", wires=3))[0]
    circuit, (H, _, _) = qfx.interop.from_pennylane(tape)
    assert math.isclose(float(qfx.expval(circuit, H)), float(e_pl), abs_tol=1e-10)
    np.testing.assert_allclose(np.asarray(qfx.probs(circuit)), p_pl, atol=1e-10)
    np.testing.assert_allclose(np.asarray(qfx.density_matrix(circuit, [2, 0])), rho_pl, atol=1e-10)


def test_hamiltonians_from_qiskit_pennylane_and_openfermion():
    qml = pytest.importorskip("pennylane")
    qi = pytest.importorskip("qiskit.quantum_info")
    SparsePauliOp, Statevector = qi.SparsePauliOp, qi.Statevector

    rng = np.random.default_rng(5)
    n = 3
    circuit = prepared(random_circuit(rng, n, 8, WRITABLE), n)
    state = reference.final_state(circuit)

    op = SparsePauliOp(["ZZI", "IXY", "III", "YIZ"], [0.5, -0.25, 1.5, 0.75])
    H = qfx.interop.hamiltonian_from_qiskit(op)
    expected = Statevector(qiskit_order(state, n)).expectation_value(op)  # qfx's order is its reverse
    assert math.isclose(float(qfx.expval(circuit, H)), float(np.real(expected)), abs_tol=1e-5)  # qfx's own

    pl_op = qml.Hamiltonian([0.5, -0.2, 0.3], [qml.Z(0) @ qml.Z(2), qml.X(1), qml.Y(0) @ qml.X(1)])
    H = qfx.interop.hamiltonian_from_pennylane(pl_op)
    expected = np.vdot(state, qml.matrix(pl_op, wire_order=[0, 1, 2]) @ state).real
    assert math.isclose(reference.expval(circuit, H), expected, abs_tol=1e-6)

    class QubitOperatorTerms:  # OpenFermion's public structure: {((qubit, letter), ...): coefficient}
        terms = {((0, "X"), (2, "Z")): 0.4, (): -1.0, ((1, "Y"),): 0.25}

    H = qfx.interop.hamiltonian_from_openfermion(QubitOperatorTerms())
    P = reference.PAULI
    dense = (
        0.4 * np.kron(np.kron(P["X"], P["I"]), P["Z"])
        - np.eye(8)
        + 0.25 * np.kron(np.kron(P["I"], P["Y"]), P["I"])
    )
    assert math.isclose(reference.expval(circuit, H), np.vdot(state, dense @ state).real, abs_tol=1e-6)

    with pytest.raises(ValueError, match="complex coefficient"):
        qfx.interop.hamiltonian_from_qiskit(SparsePauliOp(["XY"], [1j]))
    with pytest.raises(TypeError, match="expected a SparsePauliOp"):
        qfx.interop.hamiltonian_from_qiskit("ZZ")
    with pytest.raises(TypeError, match="an object with a dict `terms`"):
        qfx.interop.hamiltonian_from_openfermion(3)

    class Vector:
        terms = {((0, "X"),): [1.0, 2.0]}

    with pytest.raises(ValueError, match="a coefficient is not a scalar"):
        qfx.interop.hamiltonian_from_openfermion(Vector())
    with pytest.raises(ValueError, match="is not \\(\\(qubit"):

        class Bad:
            terms = {((0, "Q"),): 1.0}

        qfx.interop.hamiltonian_from_openfermion(Bad())


def test_import_qfx_imports_no_converter_framework():
    code = (
        "import sys, qfx; bad = [m for m in ('qiskit', 'pennylane', 'openqasm3', 'openfermion', 'antlr4') "
        "if m in sys.modules]; print(bad)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
