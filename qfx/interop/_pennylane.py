"""PennyLane tapes and operators to qfx circuits and observables (PennyLane is imported when called)."""

import numpy as np

from .. import _channels as ch, _gates as g
from .._circuit import Circuit
from .._observables import Hermitian, LinearCombination, PauliWord

# PennyLane's operation names that qfx has under the same name and signature (parameters, then wires).
_SAME = (
    "Identity", "PauliX", "PauliY", "PauliZ", "Hadamard", "S", "T", "SX", "RX", "RY", "RZ", "PhaseShift",
    "Rot", "U1", "U2", "U3", "CNOT", "CY", "CZ", "SWAP", "ISWAP", "CRX", "CRY", "CRZ", "CRot",
    "ControlledPhaseShift", "IsingXX", "IsingYY", "IsingZZ", "IsingXY", "Toffoli", "CSWAP", "MultiRZ",
    "SingleExcitation", "DoubleExcitation",
)  # fmt: skip
# Its channels, with the same names, parameters and Kraus conventions (PauliError and QubitChannel apart).
_SAME_CHANNELS = (
    "BitFlip", "PhaseFlip", "DepolarizingChannel", "AmplitudeDamping", "GeneralizedAmplitudeDamping",
    "PhaseDamping", "ResetError", "ThermalRelaxationError",
)  # fmt: skip


def _wire_map(wires) -> dict:
    """PennyLane wire labels to qfx wires: integer labels keep their value; others take their position
    in the tape's wire order."""
    labels = list(wires)
    if all(isinstance(w, (int, np.integer)) and w >= 0 for w in labels):
        return {w: int(w) for w in labels}
    return {w: k for k, w in enumerate(labels)}


def from_pennylane(tape):
    """A PennyLane `QuantumScript` (a tape) as a qfx circuit and the observables it measures.

    Operations keep their PennyLane names in qfx (`qml.RX` is `qfx.RX`, and both put wire 0 first, as the
    most significant bit); `Adjoint`, `Controlled` (with its control values), `QubitUnitary`, `PauliRot`
    and `MultiControlledX` map to their qfx forms, and any other operation with a matrix to a
    `QubitUnitary`. Integer wire labels keep their value; other labels are numbered in the tape's wire order.

    **Arguments:**

    - `tape`: a `qml.tape.QuantumScript` (or `QuantumTape`), e.g. from `qml.tape.make_qscript(fn)(*args)`.

    **Returns:** `(circuit, observables)`: a `qfx.Circuit` and, per measurement of the tape, its
    observable as a qfx observable (`qml.expval(H)` gives `H`), or None for a measurement without one
    (`qml.probs()`, `qml.state()`).

    ```python
    import pennylane as qml
    tape = qml.tape.QuantumScript([qml.RX(0.3, 0), qml.CNOT([0, 1])], [qml.expval(qml.Z(1))])
    circuit, (obs,) = qfx.interop.from_pennylane(tape)
    qfx.expval(circuit, obs)  # cos(0.3)
    ```
    """
    import pennylane as qml  # noqa: PLC0415  (optional dependency)

    if not isinstance(tape, qml.tape.QuantumScript):
        raise TypeError(f"qfx.interop.from_pennylane: expected a QuantumScript, got {type(tape).__name__}.")
    wires = _wire_map(tape.wires)
    ops = [_operation(op, wires, qml) for op in tape.operations if op.name not in ("Barrier", "Snapshot")]
    observables = []
    for m in tape.measurements:
        obs = getattr(m, "obs", None)
        observables.append(None if obs is None else _observable(obs, wires, qml))
    return Circuit(ops, num_wires=max(wires.values(), default=0) + 1), observables  # at least one wire


def _operation(op, wires: dict, qml):
    name = op.name
    ws = [wires[w] for w in op.wires]
    params = list(op.parameters)
    if name in _SAME:
        return getattr(g, name)(*params, wires=ws if len(ws) > 1 else ws[0])
    if name in _SAME_CHANNELS:
        return getattr(ch, name)(*params, wires=ws[0])
    if name == "PauliError":
        return ch.PauliError(op.hyperparameters["operators"], params[0], ws)
    if name == "QubitChannel":
        return ch.QubitChannel(list(params), ws)
    if isinstance(op, qml.ops.op_math.Adjoint):
        return g.Adjoint(_operation(op.base, wires, qml))
    if name == "PauliRot":
        return g.PauliRot(params[0], op.hyperparameters["pauli_word"], ws)
    if name == "MultiControlledX":
        return g.MultiControlledX(ws, control_values=[int(v) for v in op.control_values])
    if isinstance(op, qml.ops.op_math.Controlled):
        base = _operation(op.base, wires, qml)
        controls = [wires[w] for w in op.control_wires]
        return g.Controlled(base, controls, [int(v) for v in op.control_values])
    if name == "QubitUnitary":
        return g.QubitUnitary(params[0], ws)
    if name == "StatePrep":  # its parameter is the state already padded and normalised
        return g.StatePrep(params[0], ws)
    if op.has_matrix:
        return g.QubitUnitary(np.asarray(op.matrix()), ws)
    raise ValueError(f"qfx.interop.from_pennylane: the operation {name} has no qfx form (and no matrix).")


def _observable(obs, wires: dict, qml):
    try:
        sentence = qml.pauli.pauli_sentence(obs)
    except Exception:  # not a Pauli sum (a qml.Hermitian, say): its matrix
        sentence = None
    if sentence is None:
        return Hermitian(np.asarray(obs.matrix()), [wires[w] for w in obs.wires])
    return _from_terms(
        (
            (tuple((wires[w], letter) for w, letter in word.items()), coeff)
            for word, coeff in sentence.items()
        ),
        "qfx.interop.from_pennylane",
    )


def _from_terms(terms, what: str) -> LinearCombination:
    """A linear combination from ((wire, letter) pairs, coefficient) items; coefficients must be real."""
    coeffs, words = [], []
    for word, coeff in terms:
        if np.ndim(coeff) != 0:
            raise ValueError(f"{what}: a coefficient is not a scalar: {coeff!r}.")
        c = complex(np.asarray(coeff).item())
        if abs(c.imag) > 1e-12 * max(1.0, abs(c.real)):
            raise ValueError(
                f"{what}: the term {word} has the complex coefficient {c}; a Hermitian observable has "
                "real ones."
            )
        coeffs.append(c.real)
        words.append(PauliWord(tuple(word)))
    if not words:
        return LinearCombination([0.0], [PauliWord(())])
    return LinearCombination(np.asarray(coeffs), words)


def hamiltonian_from_pennylane(op) -> LinearCombination:
    """A PennyLane operator that is a sum of Pauli words (`qml.Hamiltonian`, `qml.sum`, `0.5 * qml.Z(0) @
    qml.X(1)`, ...) as a qfx `LinearCombination`.

    **Arguments:**

    - `op`: a PennyLane operator. Integer wire labels keep their value; others are numbered in the
      operator's wire order.

    **Returns:** a `qfx.LinearCombination` with real coefficients.

    ```python
    import pennylane as qml
    H = qfx.interop.hamiltonian_from_pennylane(0.5 * qml.Z(0) @ qml.Z(1) - 0.2 * qml.X(0))
    ```
    """
    import pennylane as qml  # noqa: PLC0415

    sentence = qml.pauli.pauli_sentence(op)
    wires = _wire_map(op.wires)
    return _from_terms(
        (
            (tuple((wires[w], letter) for w, letter in word.items()), coeff)
            for word, coeff in sentence.items()
        ),
        "qfx.interop.hamiltonian_from_pennylane",
    )
