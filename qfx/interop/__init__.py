"""Circuits in and out of qfx: OpenQASM 2 and 3, Qiskit, PennyLane and OpenFermion. See README.md.

Importing this wing imports none of those frameworks (nor the OpenQASM parser): each function imports
what it converts from when it is called.
"""

from ._errors import QasmError as QasmError
from ._qasm_read import from_qasm as from_qasm
from ._qasm_write import to_qasm as to_qasm
