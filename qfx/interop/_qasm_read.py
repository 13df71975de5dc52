"""`qfx.from_qasm`: OpenQASM 2 and 3 programs to circuits, through the reference `openqasm3` parser."""

import contextlib
import dataclasses
import functools
import io
import math
import operator
import os
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _gates as g
from .._checks import as_dtype
from .._circuit import Circuit
from .._control import MeasurementValue, MidMeasure, cond, for_loop, measure
from .._custom_types import real_dtype
from ._errors import QasmError
from ._standard_gates import CONSTANTS, QELIB1, QELIB1_DEFINITIONS, STDGATES

# Bounds that keep any text from hanging the reader or filling memory (each is far above what a circuit
# simulated by qfx needs): the source's length, the operations a program may unroll into, the qubits and
# classical values it may declare, the iterations of the loops it unrolls.
MAX_SOURCE_CHARS = 1_000_000
MAX_OPERATIONS = 200_000
MAX_DECLARED = 100_000
MAX_ITERATIONS = 200_000


class _Unroll(Exception):
    """Raised inside a loop body built for `qfx.for_loop` when the body needs its index as a Python int
    (a qubit index) or changes the program's state (a measurement): the loop is unrolled instead."""


@dataclasses.dataclass
class _GateDef:
    params: list[str]
    qubits: list[str]
    body: list
    scope: dict  # the gates defined before it: the only ones its body may call (no recursion)


@dataclasses.dataclass(eq=False)
class _Frozen:
    """A loop's statements and the reader's state when it began: static structure of a `qfx.for_loop`.

    Equal when the statement is the same AST node (parses are cached per source text, so reading one
    program twice gives equal circuits, which share one compilation) and the classical values it starts
    from are equal; `value` holds the reader's state, which the same source text determines."""

    value: Any
    key: tuple

    def __eq__(self, other):
        return isinstance(other, _Frozen) and self.key[0] is other.key[0] and self.key[1:] == other.key[1:]

    def __hash__(self):
        return hash((id(self.key[0]), *self.key[1:]))

    def __repr__(self):
        return f"<OpenQASM loop, line {_place(self.key[0])[0]}>"


def _place(node) -> tuple[int, int]:
    span = getattr(node, "span", None)
    if span is None:
        return 1, 1
    return span.start_line, span.start_column + 1


def _fail(node, reason: str):
    raise QasmError(reason, *_place(node))


@functools.lru_cache(maxsize=64)
def _parse(source: str):
    """The openqasm3 AST of `source` (cached: rebuilding a circuit under `jax.grad` parses once)."""
    from openqasm3 import parser  # noqa: PLC0415  (optional dependency)

    try:
        # ANTLR's default listener prints every syntax error to stderr; the error raised says it all.
        with contextlib.redirect_stderr(io.StringIO()):
            return parser.parse(source)
    except RecursionError:
        raise QasmError("the program nests too deeply.") from None
    except Exception as e:  # QASM3ParsingError, or an error of the parser's own AST building
        line, column = 1, 1
        if type(e).__name__ == "QASM3ParsingError":
            reason = str(e) or "syntax error"
        else:  # the reference parser fails on some texts (one holding only a comment, say)
            reason = f"the parser found no program in this text ({type(e).__name__}: {e})"
        cause = e
        while cause is not None:  # the recognition error ANTLR raised carries the offending token
            token = getattr(cause, "offendingToken", None)
            if token is not None and getattr(token, "line", None) is not None:
                line, column = token.line, token.column + 1
                text = token.text if token.type != -1 else "end of input"
                reason = f"syntax error at {text!r}"
                break
            cause = cause.__cause__ or (
                cause.args[0] if cause.args and isinstance(cause.args[0], BaseException) else None
            )
        if reason.startswith("L") and ":C" in reason:  # "L3:C4: message"
            head, _, rest = reason.partition(": ")
            try:
                line, column = int(head[1 : head.index(":C")]), int(head[head.index(":C") + 2 :]) + 1
                reason = rest
            except ValueError:
                pass
        raise QasmError(reason, line, column) from None


def _read_source(source) -> str:
    if isinstance(source, os.PathLike) or (
        isinstance(source, str)
        and "\n" not in source
        and ";" not in source
        and source.endswith((".qasm", ".qasm3", ".qasm2"))
    ):
        try:
            with open(source, encoding="utf-8") as f:
                return f.read(MAX_SOURCE_CHARS + 1)
        except OSError as e:
            raise ValueError(f"qfx.from_qasm: cannot read the file {os.fspath(source)!r}: {e}.") from None
    if not isinstance(source, str):
        raise TypeError(f"qfx.from_qasm: expected OpenQASM text or a path, got {type(source).__name__}.")
    return source


def from_qasm(source, inputs: dict | None = None) -> Circuit:
    """Reads an OpenQASM 2.0 or 3 program into a circuit.

    The program's qubits, counted through its registers in declaration order, become wires 0, 1, ... (wire
    0 is the most significant bit of a basis-state index; in Qiskit qubit 0 is the least significant).

    What is read: OpenQASM 2.0 (`qelib1.inc`, `gate` definitions, several registers, parameter expressions
    with `pi`; `barrier` is ignored; `measure`, `reset` and `if (creg == k)` become mid-circuit operations)
    and OpenQASM 3 (`stdgates.inc`, `gate` definitions, the modifiers `ctrl @`, `negctrl @`, `inv @` and
    `pow(k) @` with integer `k`, `input float` / `input angle` parameters, classical variables and arrays,
    `for` loops, `if` / `else` on measurement results, `measure`, `reset`, `gphase`). A `for` loop whose
    index appears only in angles becomes a `qfx.for_loop` (compiled once, whatever its length); one whose
    index selects qubits is unrolled. A global phase (`gphase` outside a control) is dropped: no state's
    probabilities depend on it; under `ctrl @` it becomes the phase shift it then is.

    **Arguments:**

    - `source`: the program's text, or a path to a `.qasm` file (a `str` ending in `.qasm`, `.qasm2` or
      `.qasm3`, or a `pathlib.Path`).
    - `inputs`: a dict giving a value to each `input float` / `input angle` of the program (Python floats
      or JAX arrays, traced ones too: build the circuit inside the function you differentiate).

    **Returns:** a `qfx.Circuit` on as many wires as the program declares qubits (one if it declares
    none).

    **Raises:** `qfx.interop.QasmError` (a `ValueError`) naming the line and column, for any text that is
    not a program qfx can read; `ValueError` for inputs that the program does not declare.

    ```python
    circ = qfx.from_qasm('OPENQASM 3.0; include "stdgates.inc"; qubit[2] q; h q[0]; cx q[0], q[1];')
    qfx.probs(circ)  # [0.5, 0, 0, 0.5]
    ```
    """
    text = _read_source(source)
    if len(text) > MAX_SOURCE_CHARS:
        raise QasmError(f"the program has more than {MAX_SOURCE_CHARS} characters, qfx's limit.")
    if inputs is not None and not isinstance(inputs, dict):
        raise TypeError(f"qfx.from_qasm: inputs must be a dict of name: value, got {type(inputs).__name__}.")
    if not text.strip():  # the parser has no program to build: an empty circuit (of one wire, the least)
        return Circuit([], num_wires=1)
    program = _parse(text)
    reader = _Reader(dict(inputs or {}))
    reader.run_program(program)
    unused = set(reader.inputs) - reader.used_inputs
    if unused:
        raise ValueError(
            f"qfx.from_qasm: inputs {sorted(unused)} are not declared by the program (it declares "
            f"{sorted(reader.used_inputs) or 'none'}); pass only the program's inputs."
        )
    # No qubits: an empty circuit of one wire (a circuit has at least one).
    return Circuit(reader.ops, num_wires=max(reader.num_qubits, 1))


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) and not isinstance(x, (MidMeasure, MeasurementValue))


def _is_bit(x) -> bool:
    return isinstance(x, (MidMeasure, MeasurementValue))


def _as_float(x):
    if _is_array(x) and not jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating):
        return jnp.asarray(x).astype(real_dtype())
    return x


def _static_int(x, node, what: str) -> int:
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if _is_array(x) and not isinstance(x, jax.core.Tracer) and np.ndim(x) == 0:
        v = np.asarray(x).item()
        if float(v).is_integer():
            return int(v)
    if isinstance(x, jax.core.Tracer):
        raise _Unroll
    _fail(node, f"{what} must be an integer known before the program runs, got {x!r}.")


class _Reader:
    """Walks a program's statements, keeping its registers, variables and gate definitions, and writes
    qfx operations into `self.ops`."""

    def __init__(self, inputs: dict):
        self.inputs = inputs
        self.used_inputs: set[str] = set()
        self.qubits: dict[str, list[int] | int] = {}
        self.vars: dict[str, Any] = {}
        self.bits: set[str] = set()  # the names in `vars` that are bits or bit registers
        self.gates: dict[str, _GateDef | tuple] = {}
        self.ops: list = []
        self.num_qubits = 0
        self.count = 0  # operations made so far, for MAX_OPERATIONS
        self.iterations = 0
        self.in_loop_body = False
        self.in_branch = False
        self.version = 3

    # --- program structure ---------------------------------------------------------------------------

    def run_program(self, program) -> None:
        version = getattr(program, "version", None)
        if version is not None:
            major = str(version).split(".")[0]
            if major not in ("2", "3"):
                raise QasmError(f"OPENQASM {version} is not a version qfx reads (2.0 or 3).")
            self.version = int(major)
        if self.version == 3:
            self.gates["U"] = ("U",)
        else:
            self.gates["U"] = ("U",)
            self.gates["CX"] = (0, 2, STDGATES["CX"][2])
        self.block(program.statements)

    def block(self, statements) -> None:
        for s in statements:
            try:
                self.statement(s)
            except QasmError:
                raise
            except _Unroll:
                if self.in_loop_body:
                    raise
                _fail(s, "an index or a count depends on a value known only when the circuit runs.")
            except RecursionError:
                _fail(s, "the program nests too deeply.")
            except Exception as e:  # a qfx constructor's check (duplicate wires, ...) or a malformed AST
                _fail(s, f"{type(e).__name__}: {e}")

    def emit(self, ops, node) -> None:
        self.count += len(ops)
        if self.count > MAX_OPERATIONS:
            _fail(node, f"the program unrolls into more than {MAX_OPERATIONS} operations, qfx's limit.")
        self.ops.extend(ops)

    def statement(self, s) -> None:
        kind = type(s).__name__
        handler = getattr(self, "s_" + kind, None)
        if handler is None:
            _fail(s, f"{_describe(kind)} is not supported by qfx.from_qasm.")
        handler(s)

    def s_Include(self, s) -> None:
        name = s.filename
        if name == "stdgates.inc":
            table = STDGATES
        elif name == "qelib1.inc":
            table = QELIB1
        else:
            _fail(s, f"include {name!r}: qfx knows only 'qelib1.inc' and 'stdgates.inc'.")
        for key, spec in table.items():
            self.gates.setdefault(key, spec)
        if name == "qelib1.inc":
            for d in _parse(QELIB1_DEFINITIONS).statements:
                self.s_QuantumGateDefinition(d)

    def s_QubitDeclaration(self, s) -> None:
        name = s.qubit.name
        self._check_new(s, name)
        if s.size is None:
            self.qubits[name] = self.num_qubits
            size = 1
        else:
            size = _static_int(self.expr(s.size), s, f"the size of qubit register {name!r}")
            if size <= 0:
                _fail(s, f"qubit register {name!r} must have a positive size, got {size}.")
            if self.num_qubits + size > MAX_DECLARED:
                _fail(s, f"the program declares more than {MAX_DECLARED} qubits, qfx's limit.")
            self.qubits[name] = list(range(self.num_qubits, self.num_qubits + size))
        self.num_qubits += size

    def _check_new(self, s, name) -> None:
        if name in self.qubits or name in self.vars or name in CONSTANTS:
            _fail(s, f"{name!r} is already declared.")

    def s_ClassicalDeclaration(self, s) -> None:
        name = s.identifier.name
        self._check_new(s, name)
        t = type(s.type).__name__
        if t == "BitType":
            size = None if s.type.size is None else _static_int(self.expr(s.type.size), s, "a bit size")
            if size is not None and not 0 < size <= MAX_DECLARED:
                _fail(s, f"bit register {name!r} must have a size in 1..{MAX_DECLARED}, got {size}.")
            if self.in_loop_body:
                raise _Unroll
            self.vars[name] = [0] * size if size is not None else 0
            self.bits.add(name)
            if s.init_expression is not None:
                self.assign_bits(s, name, None, s.init_expression)
            return
        if t == "ArrayType":
            dims = [_static_int(self.expr(d), s, "an array size") for d in s.type.dimensions]
            if len(dims) != 1 or not 0 < dims[0] <= MAX_DECLARED:
                _fail(s, f"array {name!r}: qfx reads one-dimensional arrays of 1..{MAX_DECLARED} entries.")
            init = s.init_expression
            if type(init).__name__ != "ArrayLiteral" or len(init.values) != dims[0]:
                _fail(s, f"array {name!r} needs an initialiser {{...}} of {dims[0]} values.")
            values = [self.expr(v) for v in init.values]
            if any(_is_bit(v) for v in values):
                _fail(s, f"array {name!r}: measurement results cannot fill an array.")
            self.vars[name] = jnp.stack([jnp.asarray(_as_float(v), real_dtype()) for v in values])
            return
        if t not in ("FloatType", "AngleType", "IntType", "UintType", "BoolType"):
            _fail(s, f"variables of type {_describe(t)} are not supported by qfx.from_qasm.")
        if s.init_expression is None:
            value = False if t == "BoolType" else (0.0 if t in ("FloatType", "AngleType") else 0)
        else:
            value = _convert(self.expr(s.init_expression), t)
        if self.in_loop_body:
            raise _Unroll
        self.vars[name] = value

    def s_ConstantDeclaration(self, s) -> None:
        self.s_ClassicalDeclaration(s)

    def s_IODeclaration(self, s) -> None:
        name = s.identifier.name
        direction = s.io_identifier.name
        if direction == "output":
            return  # outputs are classical results: the circuit's measurements give them
        t = type(s.type).__name__
        if t not in ("FloatType", "AngleType"):
            _fail(s, f"input {name!r}: qfx reads `input float` and `input angle`, not {_describe(t)}.")
        self._check_new(s, name)
        if name not in self.inputs:
            _fail(
                s,
                f"the program needs the input {name!r}: pass "
                f"qfx.from_qasm(source, inputs={{{name!r}: ...}}).",
            )
        value = self.inputs[name]
        if not _is_array(value):
            value = jnp.asarray(value, real_dtype())
        self.used_inputs.add(name)
        self.vars[name] = as_dtype(value, real_dtype())

    def s_QuantumGateDefinition(self, s) -> None:
        name = s.name.name
        known = self.gates.get(name)
        if (
            self.version == 2
            and isinstance(known, tuple)
            and QELIB1.get(name) is known
            and known[:2] == (len(s.arguments), len(s.qubits))
        ):
            # A program written for the original qelib1.inc defines the gates that the longer one (which
            # qfx includes) has, such as swap or sx: qfx keeps its own, as Qiskit's reader does.
            return
        if name in self.gates:
            _fail(s, f"gate {name!r} is already defined.")
        self.gates[name] = _GateDef(
            [a.name for a in s.arguments], [q.name for q in s.qubits], s.body, dict(self.gates)
        )

    def s_QuantumBarrier(self, s) -> None:
        for q in s.qubits:  # checked, then ignored
            self.qubit_operand(q)

    def s_Pragma(self, s) -> None:
        pass

    def s_QuantumReset(self, s) -> None:
        if self.in_loop_body:
            raise _Unroll
        for w in self.qubit_operand(s.qubits):
            self.emit([measure(w, reset=True)], s)

    def s_QuantumMeasurementStatement(self, s) -> None:
        if s.target is None:
            if self.in_loop_body:
                raise _Unroll
            for w in self.qubit_operand(s.measure.qubit):
                self.emit([measure(w)], s)
            return
        name, indices = _target(s.target)
        self.assign_bits(s, name, indices, s.measure)

    def s_ClassicalAssignment(self, s) -> None:
        if self.in_loop_body:
            raise _Unroll
        name, indices = _target(s.lvalue)
        if name not in self.vars:
            _fail(s, f"{name!r} is not a declared classical variable.")
        op = s.op.name
        if name in self.bits or type(s.rvalue).__name__ == "QuantumMeasurement":
            if op != "=":
                _fail(s, "compound assignment to bits is not supported.")
            self.assign_bits(s, name, indices, s.rvalue)
            return
        if indices:
            _fail(s, f"{name!r} cannot be assigned entry by entry.")
        value = self.expr(s.rvalue)
        if op != "=":
            value = _BINARY[op[:-1]](self.vars[name], value)
        self.vars[name] = value

    def assign_bits(self, s, name, indices, rvalue) -> None:
        """`name[indices] = rvalue` for a bit register: measurements or constant bits."""
        if self.in_loop_body:
            raise _Unroll
        if self.in_branch:
            _fail(s, "assigning bits (measuring into them) inside a conditional block is not supported.")
        if name not in self.bits:
            _fail(s, f"{name!r} is not a declared bit or bit register.")
        current = self.vars[name]
        slots = list(range(len(current))) if isinstance(current, list) else [None]
        if indices:
            if not isinstance(current, list):
                _fail(s, f"{name!r} is a single bit: it takes no index.")
            slots = self.select(s, indices, len(current), name)
        if type(rvalue).__name__ == "QuantumMeasurement":
            wires = self.qubit_operand(rvalue.qubit)
            if len(wires) != len(slots):
                _fail(s, f"measuring {len(wires)} qubit(s) into {len(slots)} bit(s) of {name!r}.")
            values = []
            for w in wires:
                m = measure(w)
                self.emit([m], s)
                values.append(m)
        else:
            value = self.expr(rvalue)
            values = value if isinstance(value, list) else [value] * len(slots)
            if len(values) != len(slots):
                _fail(s, f"assigning {len(values)} bit(s) to {len(slots)} bit(s) of {name!r}.")
        for slot, v in zip(slots, values, strict=True):
            if slot is None:
                self.vars[name] = v
            else:
                current[slot] = v

    def s_ExpressionStatement(self, s) -> None:
        self.expr(s.expression)

    def s_QuantumPhase(self, s) -> None:
        operands = [self.qubit_operand(q) for q in s.qubits]
        controls, values, rest, factor = self.modifiers(s, s.modifiers, operands)
        if rest:
            _fail(s, "gphase takes no qubits besides its controls.")
        theta = _BINARY["*"](factor, self.expr(s.argument))
        self.emit(_phase_ops(theta, controls, values), s)

    def s_QuantumGate(self, s) -> None:
        name = s.name.name
        args = [self.expr(a) for a in s.arguments]
        operands = [self.qubit_operand(q) for q in s.qubits]
        sizes = {len(o) for o in operands if o is not None and len(o) != 1}
        if len(sizes) > 1:
            _fail(s, f"{name}: the registers it is applied to have different sizes {sorted(sizes)}.")
        # Broadcast over whole registers (QASM 2's `h q;`, `cx q, r;`).
        reps = sizes.pop() if sizes else 1
        for k in range(reps):
            qubits = [o[k] if len(o) > 1 else o[0] for o in operands]
            self.emit(self.gate_ops(s, name, args, qubits, s.modifiers, depth=0), s)

    def gate_ops(self, s, name, args, qubits, modifiers, depth, scope=None) -> list:
        """The operations of one gate call (modifiers included) on concrete wires; `scope` holds the
        gates it may call (those defined before the definition it is in; all at top level)."""
        if depth > 64:
            _fail(s, f"gate {name!r}: definitions nest more than 64 deep.")
        for a in args:
            if _is_bit(a) or isinstance(a, list):
                _fail(
                    s, f"{name}: a gate parameter must be a number, not a measurement result or a register."
                )
        num_controls = 0
        for m in modifiers:
            if m.modifier.name in ("ctrl", "negctrl"):
                num_controls += 1 if m.argument is None else _static_int(self.expr(m.argument), s, "ctrl(n)")
        if len(set(qubits)) != len(qubits):
            _fail(s, f"{name}: a qubit appears twice among its operands {qubits}.")
        controls_and_values = []
        position = 0
        for m in modifiers:
            kind = m.modifier.name
            if kind in ("ctrl", "negctrl"):
                n = 1 if m.argument is None else _static_int(self.expr(m.argument), s, "ctrl(n)")
                if n < 1:
                    _fail(s, f"{kind}({n}): the number of controls must be positive.")
                controls_and_values += [(w, int(kind == "ctrl")) for w in qubits[position : position + n]]
                position += n
        target = qubits[position:]
        spec = (self.gates if scope is None else scope).get(name)
        if spec is None:
            library = "qelib1.inc" if self.version == 2 else "stdgates.inc"
            hint = (
                f' (it is in {library}: add `include "{library}";`)'
                if name in QELIB1 or name in STDGATES
                else ""
            )
            _fail(s, f"gate {name!r} is not defined{hint}.")
        if position > len(qubits):
            _fail(s, f"{name}: the modifiers take {position} control qubits, but {len(qubits)} are given.")
        ops = self.base_ops(s, name, spec, args, target, depth)
        for m in reversed(modifiers):
            kind = m.modifier.name
            if kind == "inv":
                ops = [
                    op.adjoint() if not isinstance(op, _Phase) else _Phase(-op.theta) for op in reversed(ops)
                ]
            elif kind == "pow":
                k = _static_int(self.expr(m.argument), s, "the power of pow(k) @ (qfx reads integer powers)")
                if k < 0:
                    ops = [
                        op.adjoint() if not isinstance(op, _Phase) else _Phase(-op.theta)
                        for op in reversed(ops)
                    ]
                if abs(k) * len(ops) + self.count > MAX_OPERATIONS:
                    _fail(s, f"pow({k}) @ unrolls into more than {MAX_OPERATIONS} operations, qfx's limit.")
                ops = ops * abs(k)
        if controls_and_values:
            controls = tuple(w for w, _ in controls_and_values)
            values = tuple(v for _, v in controls_and_values)
            controlled = []
            for op in ops:
                if isinstance(op, _Phase):
                    controlled += _phase_ops(op.theta, controls, values)
                else:
                    controlled.append(g.Controlled(op, controls, values))
            ops = controlled
        if depth == 0:
            ops = [op for op in ops if not isinstance(op, _Phase)]  # a global phase: dropped (see docs)
        return ops

    def base_ops(self, s, name, spec, args, wires, depth) -> list:
        if spec == ("U",):
            if len(args) != 3 or len(wires) != 1:
                _fail(s, f"U takes 3 parameters and 1 qubit, got {len(args)} and {len(wires)}.")
            return [g.U3(*(_as_float(a) for a in args), wires[0])]
        if isinstance(spec, tuple):
            num_params, num_qubits, build = spec
            if len(args) != num_params or len(wires) != num_qubits:
                _fail(
                    s,
                    f"gate {name!r} takes {num_params} parameter(s) and {num_qubits} qubit(s), got "
                    f"{len(args)} and {len(wires)}.",
                )
            return build([_as_float(a) for a in args], wires)
        if len(args) != len(spec.params) or len(wires) != len(spec.qubits):
            _fail(
                s,
                f"gate {name!r} takes {len(spec.params)} parameter(s) and {len(spec.qubits)} qubit(s), got "
                f"{len(args)} and {len(wires)}.",
            )
        # A gate body sees its parameters, its qubits and the program's constants only.
        saved = self.vars, self.qubits
        self.vars = dict(zip(spec.params, args, strict=True))
        self.qubits = dict(zip(spec.qubits, wires, strict=True))
        try:
            ops = []
            for st in spec.body:
                kind = type(st).__name__
                if kind == "QuantumGate":
                    sub_args = [self.expr(a) for a in st.arguments]
                    sub_q = []
                    for q in st.qubits:
                        sub_q.append(self.qubit_operand(q)[0])  # a gate's qubits are single qubits
                    ops += self.gate_ops(
                        st, st.name.name, sub_args, sub_q, st.modifiers, depth + 1, spec.scope
                    )
                elif kind == "QuantumPhase":
                    operands = [self.qubit_operand(q) for q in st.qubits]
                    controls, values, rest, factor = self.modifiers(st, st.modifiers, operands)
                    if rest:
                        _fail(st, "gphase takes no qubits besides its controls.")
                    theta = _BINARY["*"](factor, self.expr(st.argument))
                    ops += _phase_ops(theta, controls, values, keep_phase=True)
                elif kind == "QuantumBarrier":
                    pass
                else:
                    _fail(st, f"{_describe(kind)} cannot appear in a gate definition.")
                if len(ops) + self.count > MAX_OPERATIONS:
                    _fail(st, f"the program unrolls into more than {MAX_OPERATIONS} operations, qfx's limit.")
            return ops
        finally:
            self.vars, self.qubits = saved

    def modifiers(self, s, modifiers, operands):
        """(controls, values, remaining operands, the factor that inv and pow put on the angle) for
        gphase's modifiers."""
        wires = []
        for o in operands:
            if len(o) != 1:
                _fail(s, "gphase's controls must be single qubits.")
            wires.append(o[0])
        controls, values, position, factor = [], [], 0, 1
        for m in modifiers:
            kind = m.modifier.name
            if kind in ("ctrl", "negctrl"):
                n = 1 if m.argument is None else _static_int(self.expr(m.argument), s, "ctrl(n)")
                controls += wires[position : position + n]
                values += [int(kind == "ctrl")] * n
                position += n
            elif kind == "inv":
                factor = -factor
            else:  # pow(k) @ gphase(a) is gphase(k a), for any real k
                factor = _BINARY["*"](factor, self.expr(m.argument))
        if position > len(wires):
            _fail(s, f"gphase: the modifiers take {position} control qubits, but {len(wires)} are given.")
        return tuple(controls), tuple(values), wires[position:], factor

    # --- control flow --------------------------------------------------------------------------------

    def s_BranchingStatement(self, s) -> None:
        predicate = self.expr(s.condition)
        if isinstance(predicate, list):
            _fail(s, "a condition must be a single value, not a register (compare it: `c == 3`).")
        if not (_is_bit(predicate) or _is_array(predicate)):  # known now: take the branch
            self.block(s.if_block if predicate else s.else_block)
            return
        if self.in_loop_body and _is_bit(predicate):
            raise _Unroll
        true_ops = self.sub_block(s, s.if_block)
        false_ops = self.sub_block(s, s.else_block)
        if (
            _is_array(predicate)
            and predicate.dtype != jnp.bool_
            and not jnp.issubdtype(predicate.dtype, jnp.integer)
        ):
            predicate = predicate != 0
        self.emit([cond(predicate, true_ops, false_ops)], s)

    def sub_block(self, s, statements) -> list:
        saved_ops, saved_branch, saved_vars = self.ops, self.in_branch, self.vars
        self.ops, self.in_branch = [], True
        self.vars = dict(self.vars)
        try:
            self.block(statements)
            ops, new_vars = self.ops, self.vars
        finally:
            self.ops, self.in_branch, self.vars = saved_ops, saved_branch, saved_vars
        # A branch that assigns an outer variable would need a classical merge of the two branches.
        if any(new_vars[k] is not v for k, v in saved_vars.items()):
            _fail(s, "a conditional block that assigns a classical variable is not supported.")
        return ops

    def s_ForInLoop(self, s) -> None:
        var = s.identifier.name
        decl = s.set_declaration
        kind = type(decl).__name__
        if kind == "RangeDefinition":
            start = 0 if decl.start is None else _static_int(self.expr(decl.start), s, "a range's start")
            step = 1 if decl.step is None else _static_int(self.expr(decl.step), s, "a range's step")
            if decl.end is None:
                _fail(s, "a for loop's range needs an end.")
            end = _static_int(self.expr(decl.end), s, "a range's end")
            if step == 0:
                _fail(s, "a range's step must not be 0.")
            length = max(0, (end - start) // step + 1)  # OpenQASM ranges include their end
            values = None
        elif kind == "DiscreteSet":
            values = [self.expr(v) for v in decl.values]
            start, step, length = 0, 1, len(values)
        else:
            value = self.expr(decl)
            if not isinstance(value, list) and not (_is_array(value) and np.ndim(value) == 1):
                _fail(s, "a for loop runs over a range [a:b], a set {a, b} or an array.")
            values = list(value)
            start, step, length = 0, 1, len(values)
        self.iterations += length
        if self.iterations > MAX_ITERATIONS:
            _fail(s, f"the program's loops run more than {MAX_ITERATIONS} iterations, qfx's limit.")
        integer = type(s.type).__name__ in ("IntType", "UintType")
        if values is None and length > 1 and not self.in_loop_body:
            # A loop over a range: try one qfx.for_loop (index traced); unroll if the body needs it static.
            arrays = {k: v for k, v in self.vars.items() if _is_array(v)}
            others = {
                k: v for k, v in self.vars.items() if not _is_array(v) and k not in self.bits
            }  # numbers and bools (bits are refused in loop bodies: read, they unroll the loop)
            key = (s, var, start, step, integer, tuple(sorted(others.items())))
            body = _LoopBody(_Frozen((self, others, s, var, start, step, integer), key))
            try:
                loop = for_loop(length, body, arrays)
            except _Unroll:
                pass
            else:
                self.emit([loop], s)
                self.count += length * sum(1 for _ in loop.skeleton())
                if self.count > MAX_OPERATIONS:
                    _fail(s, f"the program runs more than {MAX_OPERATIONS} operations, qfx's limit.")
                return
        had = var in self.vars
        saved = self.vars.get(var)
        for k in range(length):
            self.vars[var] = start + step * k if values is None else values[k]
            self.block(s.block)
        if had:
            self.vars[var] = saved
        else:
            self.vars.pop(var, None)

    def s_WhileLoop(self, s) -> None:
        _fail(s, "while loops are not supported by qfx.from_qasm (their length is not known statically).")

    # --- operands and expressions --------------------------------------------------------------------

    def qubit_operand(self, q) -> list[int]:
        kind = type(q).__name__
        if kind == "Identifier":
            name, indices = q.name, None
        elif kind == "IndexedIdentifier":
            name, indices = q.name.name, q.indices
        else:
            _fail(q, f"{_describe(kind)} is not a qubit operand qfx reads.")
        if name not in self.qubits:
            _fail(q, f"{name!r} is not a declared qubit or qubit register.")
        reg = self.qubits[name]
        if isinstance(reg, int):
            if indices:
                _fail(q, f"{name!r} is a single qubit: it takes no index.")
            return [reg]
        if not indices:
            return list(reg)
        return [reg[k] for k in self.select(q, indices, len(reg), name)]

    def select(self, node, indices, size: int, name: str) -> list[int]:
        if len(indices) != 1 or len(indices[0]) != 1:
            _fail(node, f"{name!r} takes one index.")
        (index,) = indices[0]
        kind = type(index).__name__
        if kind == "RangeDefinition":
            start = 0 if index.start is None else _static_int(self.expr(index.start), node, "an index")
            step = 1 if index.step is None else _static_int(self.expr(index.step), node, "an index")
            end = size - 1 if index.end is None else _static_int(self.expr(index.end), node, "an index")
            if step == 0:
                _fail(node, "a range's step must not be 0.")
            picked = list(range(start, end + (1 if step > 0 else -1), step))
        elif kind == "DiscreteSet":
            picked = [_static_int(self.expr(v), node, "an index") for v in index.values]
        else:
            picked = [_static_int(self.expr(index), node, f"an index of {name!r}")]
        out = []
        for k in picked:
            if not -size <= k < size:
                _fail(node, f"index {k} is out of range for {name!r} of size {size}.")
            out.append(k % size)
        return out

    def expr(self, e):
        kind = type(e).__name__
        if kind in ("IntegerLiteral", "FloatLiteral", "BooleanLiteral"):
            return e.value
        if kind == "Identifier":
            name = e.name
            if name in self.vars:
                value = self.vars[name]
                return list(value) if isinstance(value, list) else value
            if name in CONSTANTS:
                return CONSTANTS[name]
            if name in self.qubits:
                _fail(e, f"{name!r} is a qubit, not a classical value.")
            _fail(e, f"{name!r} is not declared.")
        if kind == "UnaryExpression":
            x = self.expr(e.expression)
            op = e.op.name
            if isinstance(x, list):
                _fail(e, f"the operator {op} does not apply to a register.")
            if op == "-":
                return -x
            if op == "!":
                return ~x if _is_bit(x) else (jnp.logical_not(x) if _is_array(x) else (not x))
            if op == "~":
                if _is_bit(x):
                    return ~x
                return 1 - x if x in (0, 1) else ~_static_int(x, e, "the operand of ~")
            _fail(e, f"the operator {op} is not supported.")
        if kind == "BinaryExpression":
            a, b = self.expr(e.lhs), self.expr(e.rhs)
            op = e.op.name
            a, b = (_register_value(x) if isinstance(x, list) else x for x in (a, b))
            if op not in _BINARY:
                _fail(e, f"the operator {op} is not supported.")
            try:
                return _BINARY[op](a, b)
            except (ZeroDivisionError, OverflowError, ValueError) as err:
                _fail(e, f"cannot evaluate {op}: {err}.")
        if kind == "FunctionCall":
            name = e.name.name
            args = [self.expr(a) for a in e.arguments]
            if (
                name not in _FUNCTIONS
                or len(args) != 1
                or any(_is_bit(a) or isinstance(a, list) for a in args)
            ):
                _fail(e, f"the function {name}({len(args)} arguments) is not supported.")
            x = args[0]
            try:
                return _FUNCTIONS[name][1](x) if _is_array(x) else _FUNCTIONS[name][0](x)
            except (ValueError, OverflowError) as err:
                _fail(e, f"{name}: {err}.")
        if kind == "Cast":
            x = self.expr(e.argument)
            if isinstance(x, list):
                x = _register_value(x)
            t = type(e.type).__name__
            if _is_bit(x):
                if t in ("IntType", "UintType", "BitType", "BoolType"):
                    return x if t != "BoolType" else x != 0
                _fail(e, "a measurement result cannot become a float.")
            return _convert(x, t)
        if kind == "IndexExpression":
            coll = self.expr(e.collection)
            if len(e.index) != 1 or type(e.index[0]).__name__ in ("RangeDefinition", "DiscreteSet"):
                _fail(e, "qfx reads a single index here.")
            i = self.expr(e.index[0])
            if isinstance(coll, list):
                k = _static_int(i, e, "a bit index")
                if not -len(coll) <= k < len(coll):
                    _fail(e, f"index {k} is out of range for a register of size {len(coll)}.")
                return coll[k]
            if _is_array(coll) and np.ndim(coll) == 1:
                if _is_array(i) and isinstance(i, jax.core.Tracer):
                    return coll[i]
                k = _static_int(i, e, "an array index")
                if not -coll.shape[0] <= k < coll.shape[0]:
                    _fail(e, f"index {k} is out of range for an array of size {coll.shape[0]}.")
                return coll[k]
            _fail(e, "only registers and arrays can be indexed.")
        if kind == "QuantumMeasurement":
            _fail(e, "a measurement result must be assigned to a bit.")
        _fail(e, f"{_describe(kind)} is not supported in expressions by qfx.from_qasm.")


class _LoopBody(eqx.Module):
    """Iteration `i` of a QASM `for` loop over a range, read with the index traced (see `s_ForInLoop`)."""

    frozen: _Frozen = eqx.field(static=True)

    def __call__(self, i, arrays):
        reader, others, s, var, start, step, integer = self.frozen.value
        child = _Reader(reader.inputs)
        child.gates, child.qubits, child.num_qubits = reader.gates, reader.qubits, reader.num_qubits
        child.version = reader.version
        child.vars = {**others, **arrays}
        index = start + step * i
        child.vars[var] = index if integer else index.astype(real_dtype())
        child.in_loop_body = True
        child.block(s.block)
        return child.ops


def _target(t) -> tuple[str, list | None]:
    """(name, indices) of an assignment's target, `c` or `c[0]`."""
    if hasattr(t, "indices"):
        return t.name.name, t.indices
    return t.name, None


@dataclasses.dataclass(frozen=True)
class _Phase:
    """A global phase exp(i theta) inside a gate's expansion (kept until a control turns it into a
    phase shift, or the expansion ends and it is dropped)."""

    theta: Any


def _phase_ops(theta, controls, values, keep_phase=False) -> list:
    """The operations of exp(i theta) controlled by `controls` (on `values`): a phase shift on the last
    control, controlled by the others; a 0-control adds a global phase and flips the shift."""
    if not controls:
        return [_Phase(theta)] if keep_phase else []
    *rest, last = controls
    *rest_values, last_value = values
    theta = _as_float(theta)
    if last_value == 1:
        ops = [g.PhaseShift(theta, last)]
    else:
        ops = [_Phase(theta), g.PhaseShift(-theta, last)]
    if not rest:
        return ops if keep_phase else [op for op in ops if not isinstance(op, _Phase)]
    out = []
    for op in ops:
        if isinstance(op, _Phase):
            out += _phase_ops(op.theta, tuple(rest), tuple(rest_values), keep_phase)
        else:
            out.append(g.Controlled(op, tuple(rest), tuple(rest_values)))
    return out


def _register_value(bits: list):
    """The integer a bit register holds (bit k has weight 2**k, as in OpenQASM)."""
    total = None
    for k, b in enumerate(bits):
        if _is_bit(b) or b:
            term = b if k == 0 else b * (1 << k)  # the bit itself where it can be: `c == 1` stays `m == 1`
            total = term if total is None else total + term
    return 0 if total is None else total


def _pow(a, b):
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and 0 <= b <= 64:
        return a**b
    if _is_array(a) or _is_array(b):
        return jnp.power(_as_float(a), _as_float(b))
    return math.pow(a, b)


def _shift(op):
    def f(a, b):
        if not (isinstance(a, int) and isinstance(b, int)) or not 0 <= b <= 64:
            raise ValueError("shifts take integers known before the program runs, by 0..64 places")
        return op(a, b)

    return f


def _logical(op):
    def f(a, b):
        if _is_bit(a) or _is_bit(b):
            a = (a != 0) if _is_bit(a) else int(bool(a))
            b = (b != 0) if _is_bit(b) else int(bool(b))
            return a & b if op == "and" else a | b
        if _is_array(a) or _is_array(b):
            return (jnp.logical_and if op == "and" else jnp.logical_or)(a, b)
        return (bool(a) and bool(b)) if op == "and" else (bool(a) or bool(b))

    return f


def _arith(op):
    def f(a, b):
        if _is_array(a) or _is_array(b):
            if (
                isinstance(a, float)
                or isinstance(b, float)
                or any(_is_array(x) and jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating) for x in (a, b))
            ):
                a, b = _as_float(a), _as_float(b)
        return op(a, b)

    return f


def _div(a, b):
    if isinstance(a, int) and isinstance(b, int) and not _is_bit(a):
        if b == 0:
            raise ZeroDivisionError("division by zero")
        return a // b if a % b == 0 else a / b
    return _arith(operator.truediv)(a, b)


_BINARY = {
    "+": _arith(operator.add),
    "-": _arith(operator.sub),
    "*": _arith(operator.mul),
    "/": _div,
    "%": _arith(operator.mod),
    "**": _pow,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": _shift(operator.lshift),
    ">>": _shift(operator.rshift),
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "&&": _logical("and"),
    "||": _logical("or"),
}
# The enum member names of openqasm3's BinaryOperator are the symbols themselves.

_FUNCTIONS = {
    "sin": (math.sin, jnp.sin),
    "cos": (math.cos, jnp.cos),
    "tan": (math.tan, jnp.tan),
    "arcsin": (math.asin, jnp.arcsin),
    "arccos": (math.acos, jnp.arccos),
    "arctan": (math.atan, jnp.arctan),
    "exp": (math.exp, jnp.exp),
    "ln": (math.log, jnp.log),
    "log": (math.log, jnp.log),
    "sqrt": (math.sqrt, jnp.sqrt),
    "floor": (math.floor, jnp.floor),
    "ceiling": (math.ceil, jnp.ceil),
}


def _convert(value, t: str):
    if isinstance(value, list) or _is_bit(value):
        raise TypeError(f"cannot convert {value!r} to a {_describe(t)}")
    if t in ("FloatType", "AngleType"):
        return _as_float(value) if _is_array(value) else float(value)
    if t in ("IntType", "UintType"):
        return value.astype(jnp.int32) if _is_array(value) else int(value)
    if t == "BoolType":
        return value != 0 if _is_array(value) else bool(value)
    if t == "BitType":
        return int(bool(value))
    raise TypeError(f"a {_describe(t)} is not supported by qfx.from_qasm")


def _describe(kind: str) -> str:
    """'QuantumGateDefinition' -> 'quantum gate definition'."""
    words, word = [], ""
    for ch in kind.removesuffix("Type"):
        if ch.isupper() and word:
            words.append(word)
            word = ""
        word += ch.lower()
    return " ".join([*words, word])
