"""Writes tests/qasm/<name>.json: the probabilities Qiskit computes for each program in tests/qasm/.

Run it after changing a program (it needs qiskit and qiskit_qasm3_import: `pip install -e ".[interop]"`):

    python tests/make_qasm_expected.py

Qiskit reads each file with its own OpenQASM importers (qiskit.qasm2 / qiskit.qasm3), binds the inputs of
qasm/inputs.json, unrolls its loops (UnrollForLoops) and computes `Statevector(...).probabilities()`.
A program with mid-circuit measurements (teleport.qasm) is simulated in its deferred-measurement form
(<name>_deferred.qasm), which has the same probabilities in the computational basis. The stored list is in
Qiskit's order (qubit 0 is the least significant bit); tests/test_interop.py maps it to qfx's.
"""

import json
from pathlib import Path

import qiskit
from qiskit import qasm2, qasm3
from qiskit.quantum_info import Statevector
from qiskit.transpiler import PassManager
from qiskit.transpiler.passes import UnrollForLoops

HERE = Path(__file__).resolve().parent / "qasm"


def load(path: Path):
    text = path.read_text()
    return qasm2.loads(text) if "OPENQASM 2.0" in text else qasm3.loads(text)


def main():
    inputs = json.loads((HERE / "inputs.json").read_text())
    for path in sorted(HERE.glob("*.qasm")):
        name = path.stem
        if name.endswith("_deferred"):
            continue
        deferred = HERE / f"{name}_deferred.qasm"
        qc = load(deferred if deferred.exists() else path)
        values = inputs.get(name, {})
        qc = qc.assign_parameters({p: values[p.name] for p in qc.parameters})
        qc = PassManager([UnrollForLoops()]).run(qc)
        probs = Statevector(qc).probabilities()
        record = {
            "program": path.name,
            "simulated": (deferred if deferred.exists() else path).name,
            "inputs": values,
            "qiskit": qiskit.__version__,
            "order": "qiskit (qubit 0 is the least significant bit)",
            "probabilities": [float(p) for p in probs],
        }
        (HERE / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"{name}: {qc.num_qubits} qubits, max probability {probs.max():.4f}")


if __name__ == "__main__":
    main()
