"""Qiskit `QuantumCircuit` to and from qfx circuits (Qiskit is imported when a function is called)."""

import dataclasses

import numpy as np

from .. import _gates as g
from .._circuit import Circuit, Repeat
from .._control import Cond, ForLoop, MidMeasure, cond, measure
from .._observables import LinearCombination
from ._standard_gates import QELIB1, STDGATES

# Qiskit's instruction names that qfx's standard-gate table does not hold, or holds under another name.
_EXTRA = {
    "i": (0, 1, lambda p, w: [g.Identity(w[0])]),
    "iswap": (0, 2, lambda p, w: [g.ISWAP(w)]),
    "ryy": (1, 2, lambda p, w: [g.IsingYY(p[0], w)]),
    "mcx": (None, None, lambda p, w: [g.MultiControlledX(w)]),
    "c3sx": (0, 4, lambda p, w: [g.Controlled(g.SX(w[3]), w[:3])]),
}


def _table():
    return {**STDGATES, **QELIB1, **_EXTRA}


def from_qiskit(circuit, parameters: dict | None = None) -> Circuit:
    """A Qiskit `QuantumCircuit` as a qfx circuit.

    Qiskit's qubit k becomes wire k (Qiskit's qubit 0 is the least significant bit of its basis-state
    index, qfx's wire 0 the most significant: `qfx.state` is Qiskit's `Statevector` with its qubit order
    reversed). The circuit's `global_phase` is dropped, as `qfx.from_qasm` drops `gphase`: no probability
    depends on it. Gates are matched by name (`rx`, `cx`, `rzz`, ...; a controlled gate with a
    `ctrl_state` becomes `qfx.Controlled` with those control values); any other gate is read through its
    Qiskit definition, and one with none as a `QubitUnitary` of its matrix. `measure`, `reset` and
    `if_test` blocks on one classical bit or register become `qfx.measure` and `qfx.cond`; `barrier` and
    `delay` are skipped.

    **Arguments:**

    - `circuit`: a `qiskit.QuantumCircuit`.
    - `parameters`: values of its unbound `Parameter`s, keyed by the parameter or its name. They are
      arguments, not leaves of their own: pass JAX arrays (traced ones too) and build the circuit inside
      the function you differentiate; a parameter used in several gates then gets one gradient. An angle
      that is a linear expression of parameters (`2 * theta + 1`) follows traced values; any other
      expression needs concrete values.

    **Returns:** a `qfx.Circuit` on `circuit.num_qubits` wires (one for a circuit without qubits).

    ```python
    from qiskit import QuantumCircuit
    qc = QuantumCircuit(2)
    qc.h(0)
    qc.cx(0, 1)
    qfx.interop.from_qiskit(qc)  # Circuit([H(0), CNOT(0, 1)])
    ```
    """
    from qiskit.circuit import QuantumCircuit  # noqa: PLC0415  (optional dependency)

    if not isinstance(circuit, QuantumCircuit):
        raise TypeError(
            f"qfx.interop.from_qiskit: expected a qiskit QuantumCircuit, got {type(circuit).__name__}."
        )
    values = {}
    for key, value in (parameters or {}).items():
        values[key if isinstance(key, str) else key.name] = value
    missing = sorted(p.name for p in circuit.parameters if p.name not in values)
    if missing:
        raise ValueError(
            f"qfx.interop.from_qiskit: the circuit's parameters {missing} have no value; pass "
            "parameters={name: value} (JAX arrays to differentiate)."
        )
    state = {"bits": {}}
    qubits = {q: k for k, q in enumerate(circuit.qubits)}
    ops = _convert(circuit, qubits, values, state, _table())
    return Circuit(ops, num_wires=max(circuit.num_qubits, 1))  # a circuit has at least one wire


def _angle(x, values):
    """A gate parameter: a number, or a Qiskit parameter expression evaluated at `values`."""
    if isinstance(x, (int, float, np.number)):
        return float(x)
    params = getattr(x, "parameters", None)
    if params is None:
        raise TypeError(f"a gate parameter of type {type(x).__name__} is not an angle")
    if not params:
        return float(x)
    # c0 + sum_p c_p p when the expression is linear (its gradients are numbers): traced values pass.
    try:
        slopes = {p: float(x.gradient(p)) for p in params}
    except TypeError:
        slopes = None
    if slopes is not None:
        total = float(x.bind({p: 0.0 for p in params}))
        for p, c in slopes.items():
            total = total + c * values[p.name]
        return total
    return float(x.bind({p: float(values[p.name]) for p in params}))


def _convert(circuit, qubits: dict, values: dict, state: dict, table: dict) -> list:
    ops = []
    for instruction in circuit.data:
        op = instruction.operation
        wires = [qubits[q] for q in instruction.qubits]
        name = op.name
        if name in ("barrier", "delay"):
            continue
        if name == "measure":
            m = measure(wires[0])
            ops.append(m)
            state["bits"][instruction.clbits[0]] = m
            continue
        if name == "reset":
            last = ops[-1] if ops else None
            if isinstance(last, MidMeasure) and last.wire == wires[0] and not last.reset:
                # measure then reset (as to_qiskit writes a measurement with reset=True): one operation
                ops[-1] = dataclasses.replace(last, reset=True)
                for bit, value in state["bits"].items():
                    if value is last:
                        state["bits"][bit] = ops[-1]
            else:
                ops.append(measure(wires[0], reset=True))
            continue
        if name == "if_else":
            ops.append(_if_else(op, circuit, instruction, qubits, values, state, table))
            continue
        if getattr(op, "num_clbits", 0) or getattr(op, "blocks", None):
            raise ValueError(f"qfx.interop.from_qiskit: the instruction {name!r} is not supported.")
        if name == "unitary":  # its parameter is its matrix
            ops.append(_matrix_gate(op, wires))
            continue
        if hasattr(op, "base_op") and hasattr(op, "modifiers"):  # an AnnotatedOperation
            ops += _annotated(op, wires, values, state, table)
            continue
        params = [_angle(p, values) for p in op.params]
        ops += _gate(op, name, params, wires, values, table)
    return ops


def _gate(op, name, params, wires, values, table, exact_phase=False) -> list:
    """`exact_phase`: the gate is the base of a controlled gate, where its global phase is a phase."""
    ctrl_state = getattr(op, "ctrl_state", None)
    num_ctrl = getattr(op, "num_ctrl_qubits", 0)
    spec = table.get(name)
    known = spec is not None and (spec[0] is None or (spec[0] == len(params) and spec[1] == len(wires)))
    if ctrl_state is not None and num_ctrl and (ctrl_state != 2**num_ctrl - 1 or not known):
        controls = wires[:num_ctrl]
        bits = tuple((ctrl_state >> k) & 1 for k in range(num_ctrl))  # bit k: control k
        base_gate = op.base_gate
        base_params = [_angle(x, values) for x in base_gate.params]
        base = _gate(base_gate, base_gate.name, base_params, wires[num_ctrl:], values, table, True)
        return [g.Controlled(b, controls, bits) for b in base]
    if known:
        return spec[2](params, wires)
    definition = getattr(op, "definition", None)
    phase = 0.0 if definition is None else definition.global_phase
    if exact_phase and not (isinstance(phase, (int, float)) and phase == 0):
        definition = None  # its global phase would matter: the matrix keeps it
    if definition is not None and definition.data:
        inner = {q: wires[k] for k, q in enumerate(definition.qubits)}
        return _convert(definition, inner, values, {"bits": {}}, table)
    return [_matrix_gate(op, wires)]


def _matrix_gate(op, wires):
    from qiskit.quantum_info import Operator  # noqa: PLC0415

    matrix = Operator(op).data  # Qiskit's order: its first qubit is the least significant
    return g.QubitUnitary(matrix, wires[::-1])


def _annotated(op, wires, values, state, table) -> list:
    """Qiskit's AnnotatedOperation: a base operation under inverse, control and power modifiers (the
    first modifier is applied first; control qubits come before the base's)."""
    num_controls = sum(getattr(m, "num_ctrl_qubits", 0) for m in op.modifiers)
    base = op.base_op
    inner = _gate(
        base, base.name, [_angle(p, values) for p in base.params], wires[num_controls:], values, table
    )
    position = num_controls
    for m in op.modifiers:
        kind = type(m).__name__
        if kind == "InverseModifier":
            inner = [x.adjoint() for x in reversed(inner)]
        elif kind == "PowerModifier" and float(m.power).is_integer():
            power = int(m.power)
            inner = (inner if power >= 0 else [x.adjoint() for x in reversed(inner)]) * abs(power)
        elif kind == "ControlModifier":
            n = m.num_ctrl_qubits
            controls = wires[position - n : position]
            position -= n
            bits = tuple((m.ctrl_state >> k) & 1 for k in range(n))
            inner = [g.Controlled(x, controls, bits) for x in inner]
        else:
            return [_matrix_gate(op, wires)]
    return inner


def _if_else(op, circuit, instruction, qubits, values, state, table):
    target, value = op.condition
    bits = state["bits"]
    if hasattr(target, "size") and hasattr(target, "__iter__") and not isinstance(target, tuple):
        register = list(target)  # a ClassicalRegister: bit k has weight 2**k
    else:
        register = [target]
    if any(bit not in bits for bit in register):
        raise ValueError(
            "qfx.interop.from_qiskit: an if_test reads classical bits that no measurement wrote."
        )
    total = bits[register[0]]
    for k, bit in enumerate(register[1:], start=1):
        total = total + bits[bit] * (1 << k)
    inner = {q: qubits[outer] for q, outer in zip(op.blocks[0].qubits, instruction.qubits, strict=True)}
    true_ops = _convert(op.blocks[0], inner, values, state, table)
    false_ops = []
    if len(op.blocks) > 1 and op.blocks[1] is not None:
        inner = {q: qubits[outer] for q, outer in zip(op.blocks[1].qubits, instruction.qubits, strict=True)}
        false_ops = _convert(op.blocks[1], inner, values, state, table)
    predicate = total if len(register) == 1 and int(value) == 1 else total == int(value)
    return cond(predicate, true_ops, false_ops)


# --- qfx to Qiskit -----------------------------------------------------------------------------------


def to_qiskit(circuit: Circuit):
    """A qfx circuit as a Qiskit `QuantumCircuit`, wire k on Qiskit's qubit k (see `from_qiskit` for the
    bit order).

    **Arguments:**

    - `circuit`: a `qfx.Circuit` with concrete parameters. Loops (`qfx.for_loop`, `qfx.repeat`) are
      unrolled; each mid-circuit measurement gets a classical bit of its own, and a conditional on one
      measurement becomes an `if_test` on its bit.

    **Returns:** a `qiskit.QuantumCircuit` with `circuit.num_wires` qubits and one classical bit per
    measurement.

    ```python
    qc = qfx.interop.to_qiskit(qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1))]))
    ```
    """
    from qiskit.circuit import ClassicalRegister, QuantumCircuit, QuantumRegister  # noqa: PLC0415

    if not isinstance(circuit, Circuit):
        raise TypeError(f"qfx.interop.to_qiskit: expected a qfx.Circuit, got {type(circuit).__name__}.")
    measurements = _count_measurements(circuit.ops)
    qreg = QuantumRegister(max(circuit.num_wires, 1), "q")
    regs = [qreg] + ([ClassicalRegister(measurements, "m")] if measurements else [])
    qc = QuantumCircuit(*regs)
    _emit(qc, circuit.ops, {})
    return qc


def _count_measurements(ops) -> int:
    tokens = set()
    for op in ops:
        if isinstance(op, MidMeasure):
            tokens.add(op.token)
    return len(tokens)


def _emit(qc, ops, bits: dict) -> None:
    for op in ops:
        if isinstance(op, MidMeasure):
            if op.postselect is not None:
                raise ValueError(f"qfx.interop.to_qiskit: {op!r} is postselected, which Qiskit cannot run.")
            k = bits.setdefault(op.token, len(bits))
            qc.measure(op.wire, qc.clbits[k])
            if op.reset:
                qc.reset(op.wire)
        elif isinstance(op, ForLoop):
            if op.length is None:
                raise ValueError(
                    "qfx.interop.to_qiskit: a qfx.for_loop with a traced length cannot be written."
                )
            for i in range(op.length):
                _emit(qc, op.ops_at(i), bits)
        elif isinstance(op, Repeat):
            for i in range(op.length):
                _emit(qc, op.layer(i).ops, bits)
        elif isinstance(op, Cond):
            _emit_cond(qc, op, bits)
        elif isinstance(op, g.AbstractGate):
            gate, qargs = _qiskit_gate(op)
            qc.append(gate, [qc.qubits[w] for w in qargs])
        else:
            raise ValueError(f"qfx.interop.to_qiskit: {type(op).__name__} has no Qiskit form here.")


def _emit_cond(qc, op: Cond, bits: dict) -> None:
    if op.expr is None:
        index = int(np.clip(np.rint(np.asarray(op.index)), 0, len(op.branches) - 1))
        _emit(qc, op.branches[index].ops, bits)
        return
    expr, value = op.expr, 1
    if expr[0] == "bool":
        expr = expr[1]
    if expr[0] == "eq" and expr[1][0] == "m" and expr[2][0] == "const":
        expr, value = expr[1], expr[2][1]
    if expr[0] != "m" or len(op.branches) != 2 or value not in (0, 1) or op.expr[0] != "bool":
        raise ValueError(
            "qfx.interop.to_qiskit: only conditionals on one measurement (m, m == k, ~m) are written."
        )
    k = bits.get(expr[2].token)
    if k is None:
        raise ValueError("qfx.interop.to_qiskit: a conditional reads a measurement that comes after it.")
    with qc.if_test((qc.clbits[k], value)) as otherwise:
        _emit(qc, op.branches[1].ops, bits)
    if op.branches[0].ops:
        with otherwise:
            _emit(qc, op.branches[0].ops, bits)


def _number(x) -> float:
    from .._checks import host_number  # noqa: PLC0415

    value = host_number(x)
    if value is None:
        raise ValueError(
            "qfx.interop.to_qiskit needs concrete parameters; call it outside jax.jit / jax.grad."
        )
    return float(value)


def _qiskit_gate(op):
    """(a Qiskit gate, the qubits it acts on) for a qfx gate."""
    import qiskit.circuit.library as lib  # noqa: PLC0415

    kind = type(op).__name__
    wires = list(op.wires)
    wrapped = isinstance(op, (g.Adjoint, g.Controlled)) or kind in ("QubitUnitary", "StatePrep")
    p = [] if wrapped else [_number(x) for x in op.parameters]
    simple = {
        "Identity": lib.IGate, "PauliX": lib.XGate, "PauliY": lib.YGate, "PauliZ": lib.ZGate,
        "Hadamard": lib.HGate, "S": lib.SGate, "T": lib.TGate, "SX": lib.SXGate, "CNOT": lib.CXGate,
        "CY": lib.CYGate, "CZ": lib.CZGate, "SWAP": lib.SwapGate, "ISWAP": lib.iSwapGate,
        "Toffoli": lib.CCXGate, "CSWAP": lib.CSwapGate, "RX": lib.RXGate, "RY": lib.RYGate,
        "RZ": lib.RZGate, "PhaseShift": lib.PhaseGate, "U1": lib.U1Gate, "U2": lib.U2Gate,
        "U3": lib.U3Gate, "CRX": lib.CRXGate, "CRY": lib.CRYGate, "CRZ": lib.CRZGate,
        "ControlledPhaseShift": lib.CPhaseGate, "IsingXX": lib.RXXGate, "IsingYY": lib.RYYGate,
        "IsingZZ": lib.RZZGate,
    }  # fmt: skip
    if kind in simple:
        return simple[kind](*p), wires
    if kind == "Rot":  # RZ(omega) RY(theta) RZ(phi)
        phi, theta, omega = p
        sub = _sub_circuit(1, [(lib.RZGate(phi), [0]), (lib.RYGate(theta), [0]), (lib.RZGate(omega), [0])])
        return sub.to_gate(label="Rot"), wires
    if kind == "CRot":
        base, _ = _qiskit_gate(g.Rot(*op.parameters, wires=wires[1]))
        return base.control(1, annotated=False), wires
    if kind == "IsingXY":  # exp(i theta/4 (XX + YY)) = RXX(-theta/2) RYY(-theta/2)
        (theta,) = p
        sub = _sub_circuit(2, [(lib.RXXGate(-theta / 2), [0, 1]), (lib.RYYGate(-theta / 2), [0, 1])])
        return sub.to_gate(label="IsingXY"), wires
    if kind in ("MultiRZ", "PauliRot"):  # exp(-i theta/2 P): a basis change, a CNOT ladder, RZ
        word = "Z" * len(wires) if kind == "MultiRZ" else op.pauli_word
        active = [k for k, c in enumerate(word) if c != "I"]
        before = {"X": [lib.HGate()], "Y": [lib.SdgGate(), lib.HGate()], "Z": []}
        after = {"X": [lib.HGate()], "Y": [lib.HGate(), lib.SGate()], "Z": []}
        ladder = [(lib.CXGate(), [a, b]) for a, b in zip(active, active[1:], strict=False)]
        gates = [(gate, [k]) for k in active for gate in before[word[k]]] + ladder
        gates += [(lib.RZGate(p[0]), [active[-1]])] if active else []
        gates += ladder[::-1] + [(gate, [k]) for k in active for gate in after[word[k]]]
        sub = _sub_circuit(len(wires), gates)
        if not active:
            sub.global_phase = -p[0] / 2
        return sub.to_gate(label=kind), wires
    if kind == "SingleExcitation":  # see qfx/interop/_qasm_write.py's definition
        sub = _sub_circuit(2, [(lib.CXGate(), [0, 1]), (lib.CRYGate(p[0]), [1, 0]), (lib.CXGate(), [0, 1])])
        return sub.to_gate(label=kind), wires
    if kind == "DoubleExcitation":  # the rotation controlled on (b, c, d) = (0, 1, 1): ctrl_state 0b110
        ladder = [(lib.CXGate(), [0, k]) for k in (1, 2, 3)]
        turn = (lib.RYGate(p[0]).control(3, ctrl_state=6, annotated=False), [1, 2, 3, 0])
        return _sub_circuit(4, ladder + [turn] + ladder[::-1]).to_gate(label=kind), wires
    if kind == "StatePrep":
        return lib.UnitaryGate(np.asarray(op.matrix(), np.complex128), check_input=False), wires[::-1]
    if kind == "MultiControlledX":
        n = len(wires) - 1
        state = sum(v << k for k, v in enumerate(op.control_values))
        return lib.MCXGate(n, ctrl_state=state), wires
    if kind == "QubitUnitary":
        return lib.UnitaryGate(np.asarray(op.U), check_input=False), wires[::-1]
    if isinstance(op, g.Adjoint):
        base, qargs = _qiskit_gate(op.base)
        return base.inverse(), qargs
    if isinstance(op, g.Controlled):
        if any(isinstance(x, g.QubitUnitary) for x in _bases(op)):
            # Qiskit would decompose the controlled matrix (a complex64 one fails its Weyl decomposition):
            # the whole matrix instead, in Qiskit's qubit order.
            matrix = np.asarray(op.matrix(), dtype=np.complex128)
            return lib.UnitaryGate(matrix, check_input=False), wires[::-1]
        base, qargs = _qiskit_gate(op.base)
        state = sum(v << k for k, v in enumerate(op.control_values))
        controlled = base.control(len(op.controls), ctrl_state=state, annotated=False)
        return controlled, list(op.controls) + list(op.base.wires)
    raise ValueError(f"qfx.interop.to_qiskit: {kind} has no Qiskit form.")


def _bases(op):
    """The gates a wrapper holds, outermost first."""
    while isinstance(op, (g.Adjoint, g.Controlled)):
        op = op.base
        yield op


def _sub_circuit(n: int, gates):
    from qiskit.circuit import QuantumCircuit  # noqa: PLC0415

    qc = QuantumCircuit(n)
    for gate, qargs in gates:
        qc.append(gate, qargs)
    return qc


def hamiltonian_from_qiskit(operator) -> "LinearCombination":
    """A Qiskit `SparsePauliOp` as a qfx `LinearCombination`.

    Qiskit's labels put qubit 0 last (`"XZ"` is Z on qubit 0, X on qubit 1); qubit k becomes wire k, as in
    `from_qiskit`.

    **Arguments:**

    - `operator`: a `qiskit.quantum_info.SparsePauliOp` with real coefficients (a Hermitian operator).

    **Returns:** a `qfx.LinearCombination`.

    ```python
    from qiskit.quantum_info import SparsePauliOp
    H = qfx.interop.hamiltonian_from_qiskit(SparsePauliOp(["ZZ", "IX"], [0.5, -0.2]))
    ```
    """
    from qiskit.quantum_info import SparsePauliOp  # noqa: PLC0415

    from ._pennylane import _from_terms  # noqa: PLC0415  (no PennyLane import: a shared helper)

    if not isinstance(operator, SparsePauliOp):
        raise TypeError(
            f"qfx.interop.hamiltonian_from_qiskit: expected a SparsePauliOp, got {type(operator).__name__}."
        )
    terms = []
    for label, coeff in operator.to_list():
        word = tuple((k, letter) for k, letter in enumerate(reversed(label)) if letter != "I")
        terms.append((word, coeff))
    return _from_terms(terms, "qfx.interop.hamiltonian_from_qiskit")
