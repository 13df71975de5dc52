"""Circuits in and out of qfx: OpenQASM 2 and 3, Qiskit, PennyLane and OpenFermion. See README.md.

Importing this wing imports none of those frameworks (nor the OpenQASM parser): each function imports
what it converts from when it is called.
"""

from ._errors import QasmError as QasmError
from ._openfermion import hamiltonian_from_openfermion as hamiltonian_from_openfermion
from ._pennylane import (
    from_pennylane as from_pennylane,
    hamiltonian_from_pennylane as hamiltonian_from_pennylane,
)
from ._qasm_read import from_qasm as from_qasm
from ._qasm_write import to_qasm as to_qasm
from ._qiskit import (
    from_qiskit as from_qiskit,
    hamiltonian_from_qiskit as hamiltonian_from_qiskit,
    to_qiskit as to_qiskit,
)
