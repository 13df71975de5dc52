"""`qfx.to_qasm`: circuits to OpenQASM 3 (or 2) text that `qfx.from_qasm` and Qiskit read back."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _gates as g
from .._circuit import Circuit, Repeat
from .._control import Cond, ForLoop, MidMeasure, WhileLoop

# Gates outside stdgates.inc, written as definitions in the program's header (each from standard gates;
# exact: they are the gates' matrices, global phase included).
_DEFINITIONS = {
    # Parameter names in alphabetical order: Qiskit's OpenQASM 3 importer binds them in that order.
    "rot": "gate rot(p0, p1, p2) a { rz(p0) a; ry(p1) a; rz(p2) a; }",
    "rxx": "gate rxx(theta) a, b { h a; h b; cx a, b; rz(theta) b; cx a, b; h a; h b; }",
    "ryy": (
        "gate ryy(theta) a, b { rx(pi/2) a; rx(pi/2) b; cx a, b; rz(theta) b; cx a, b; rx(-pi/2) a; "
        "rx(-pi/2) b; }"
    ),
    "rzz": "gate rzz(theta) a, b { cx a, b; rz(theta) b; cx a, b; }",
    "xy": "gate xy(theta) a, b { rxx(-theta/2) a, b; ryy(-theta/2) a, b; }",
    "iswap": "gate iswap a, b { s a; s b; h a; cx a, b; cx b, a; h b; }",
    # Givens rotations: the pair of basis states they mix made to differ in one bit by CNOTs, then a
    # rotation of that bit controlled by the others' values in the pair.
    "single_excitation": "gate single_excitation(theta) a, b { cx a, b; cry(theta) b, a; cx a, b; }",
    "double_excitation": (
        "gate double_excitation(theta) a, b, c, d { cx a, b; cx a, c; cx a, d; "
        "negctrl @ ctrl @ ctrl @ ry(theta) b, c, d, a; cx a, d; cx a, c; cx a, b; }"
    ),
}
_DEPENDS = {"xy": ("rxx", "ryy"), "single_excitation": ("cry",)}
# OpenQASM 2: the gates of the original qelib1.inc (all that Qiskit's OpenQASM 2 reader knows by default);
# any other gate written is defined in the header, exactly (global phase included: cs = cu1(pi/2)).
_QELIB1 = {"u3", "u2", "u1", "cx", "id", "x", "y", "z", "h", "s", "sdg", "t", "tdg", "rx", "ry", "rz", "cz"}
_QELIB1 |= {"cy", "ch", "ccx", "crz", "cu1", "cu3"}
_QASM2_DEFINITIONS = {
    "sx": "gate sx a { h a; s a; h a; }",
    "sxdg": "gate sxdg a { h a; sdg a; h a; }",
    "csx": "gate csx a, b { h b; cu1(pi/2) a, b; h b; }",
    "swap": "gate swap a, b { cx a, b; cx b, a; cx a, b; }",
    "cswap": "gate cswap a, b, c { cx c, b; ccx a, b, c; cx c, b; }",
    "p": "gate p(theta) a { u1(theta) a; }",
    "cp": "gate cp(theta) a, b { cu1(theta) a, b; }",
    "crx": "gate crx(theta) a, b { h b; crz(theta) a, b; h b; }",
    "cry": "gate cry(theta) a, b { ry(theta/2) b; cx a, b; ry(-theta/2) b; cx a, b; }",
}


_PLAIN = {"Identity": "id", "PauliX": "x", "PauliY": "y", "PauliZ": "z", "Hadamard": "h", "S": "s", "T": "t"}
_PLAIN.update({"SX": "sx", "CNOT": "cx", "CY": "cy", "CZ": "cz", "SWAP": "swap", "Toffoli": "ccx"})
_PLAIN.update({"CSWAP": "cswap", "ISWAP": "iswap"})
_ANGLES = {"RX": "rx", "RY": "ry", "RZ": "rz", "PhaseShift": "p", "U1": "u1", "U2": "u2", "U3": "u3"}
_ANGLES.update({"CRX": "crx", "CRY": "cry", "CRZ": "crz", "ControlledPhaseShift": "cp", "Rot": "rot"})
_ANGLES.update({"IsingXX": "rxx", "IsingYY": "ryy", "IsingZZ": "rzz", "IsingXY": "xy"})
_ANGLES.update({"SingleExcitation": "single_excitation", "DoubleExcitation": "double_excitation"})
# OpenQASM 2 (qelib1.inc) has no modifiers: these cover the wrapped gates it has names for.
_QASM2_ADJOINT = {"S": "sdg", "T": "tdg", "SX": "sxdg"}
_QASM2_CONTROLLED = {"Hadamard": "ch", "SX": "csx", "U3": "cu3", "PhaseShift": "cp", "U1": "cu1"}
_QASM2_CONTROLLED.update({"RX": "crx", "RY": "cry", "RZ": "crz", "PauliX": "cx", "PauliY": "cy"})
_QASM2_CONTROLLED.update({"PauliZ": "cz", "SWAP": "cswap", "CNOT": "ccx"})
_NEGATED = ("RX", "RY", "RZ", "PhaseShift", "U1", "CRX", "CRY", "CRZ", "ControlledPhaseShift")
_NEGATED += ("IsingXX", "IsingYY", "IsingZZ", "IsingXY", "MultiRZ", "PauliRot")
_NEGATED += ("SingleExcitation", "DoubleExcitation")


class _NoForm(ValueError):
    pass


def to_qasm(circuit: Circuit, version: int = 3) -> str:
    """Writes a circuit as an OpenQASM program.

    Wire k becomes qubit `q[k]` (wire 0, qfx's most significant bit, is the program's first qubit; Qiskit
    makes it its qubit 0, its least significant bit). Angles are written with every digit of their
    floating-point value (`repr`), so reading the text back gives the same circuit to rounding.

    **Arguments:**

    - `circuit`: a `qfx.Circuit` with concrete parameters (not traced).
    - `version`: 3 (the default) writes OpenQASM 3 with `stdgates.inc`: `Adjoint` and `Controlled` become
      the modifiers `inv @`, `ctrl @` and `negctrl @`, gates outside `stdgates.inc` get `gate`
      definitions, `qfx.for_loop` and `qfx.repeat` blocks become `for` loops (each varying parameter an
      `array[float[64], n]` read at the loop index), conditionals on measurements `if` / `else`.
      2 writes OpenQASM 2.0 with `qelib1.inc` where the circuit has a form there: loops unrolled,
      conditionals only on one measurement (`if (m0==1)`), no modifiers.

    **Returns:** the program's text.

    **Raises:** `ValueError` naming the operation that has no OpenQASM form (`QubitUnitary`, a
    `while_loop`, a postselected measurement, a measurement inside a loop or a branch, or a gate or a
    condition OpenQASM 2 cannot express).

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.CRX(0.25, wires=(0, 1))])
    print(qfx.to_qasm(circ))
    ```
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"qfx.to_qasm: expected a qfx.Circuit, got {type(circuit).__name__}.")
    if version not in (2, 3):
        raise ValueError(f"qfx.to_qasm: version must be 2 or 3, got {version!r}.")
    writer = _Writer(version)
    body = writer.ops(circuit.ops, indent="")
    n = max(circuit.num_wires, 1)
    lines = ["OPENQASM 3.0;" if version == 3 else "OPENQASM 2.0;"]
    lines.append('include "stdgates.inc";' if version == 3 else 'include "qelib1.inc";')
    for name in writer.definition_order:
        lines.append(writer.definitions[name])
    lines.append(f"qubit[{n}] q;" if version == 3 else f"qreg q[{n}];")
    if version == 3 and writer.bits:
        lines.append(f"bit[{len(writer.bits)}] m;")
    if version == 2:
        lines += [f"creg m{k}[1];" for k in range(len(writer.bits))]
    return "\n".join(lines + writer.arrays + body) + "\n"


def _number(x) -> str:
    """A real scalar at full precision."""
    if isinstance(x, jax.core.Tracer):
        raise _NoForm("qfx.to_qasm needs concrete parameters; call it outside jax.jit / jax.grad.")
    value = float(np.asarray(x))
    if value != value or value in (float("inf"), float("-inf")):
        raise _NoForm(f"qfx.to_qasm: the angle {value} has no OpenQASM form.")
    return repr(value)


class _Writer:
    def __init__(self, version: int):
        self.version = version
        self.definitions: dict[str, str] = {}
        self.definition_order: list[str] = []
        self.bits: dict = {}  # measurement token -> bit index
        self.arrays: list[str] = []  # array declarations of loop parameters
        self.fmt = _number
        self.depth = 0  # loop nesting, for index names

    def define(self, name: str) -> None:
        for dep in _DEPENDS.get(name, ()):
            self.define(dep)
        if name in self.definitions:
            return
        text = _DEFINITIONS.get(name)
        if self.version == 2:
            if name in _QELIB1:
                return
            text = _QASM2_DEFINITIONS.get(name, text)
            for used in ("sx", "sxdg", "swap", "p"):  # gates the definitions themselves use
                words = None if text is None else text.replace("(", " ").replace(";", " ").split()
                if used != name and words is not None and used in words[2:]:
                    self.define(used)
        if text is None:
            return
        self.definitions[name] = text
        self.definition_order.append(name)

    # --- operations ------------------------------------------------------------------------------------

    def ops(self, ops, indent: str, in_block: bool = False) -> list[str]:
        out = []
        for op in ops:
            try:
                out += self.op(op, indent, in_block)
            except _NoForm as e:
                raise ValueError(str(e)) from None
        return out

    def op(self, op, indent: str, in_block: bool) -> list[str]:
        if isinstance(op, MidMeasure):
            if in_block:
                raise _NoForm(
                    f"qfx.to_qasm: {op!r} is inside a loop or a branch; qfx writes measurements at top level."
                )
            if op.postselect is not None:
                raise _NoForm(f"qfx.to_qasm: {op!r} is postselected, which has no OpenQASM form.")
            k = self.bits.setdefault(op.token, len(self.bits))
            if self.version == 3:
                lines = [f"{indent}m[{k}] = measure q[{op.wire}];"]
            else:
                lines = [f"{indent}measure q[{op.wire}] -> m{k}[0];"]
            if op.reset:
                lines.append(f"{indent}reset q[{op.wire}];")
            return lines
        if isinstance(op, Cond):
            return self.cond(op, indent)
        if isinstance(op, ForLoop):
            if op.length is None:
                raise _NoForm("qfx.to_qasm: a qfx.for_loop with a traced length has no OpenQASM form.")
            if op.length == 0:
                return []
            index = jnp.arange(op.length, dtype=jnp.int32)
            return self.loop(op.length, lambda: eqx.filter_vmap(op.ops_at)(index), op.ops_at, indent)
        if isinstance(op, Repeat):
            if op.length == 0:
                return []
            return self.loop(op.length, lambda: op.body.ops, lambda i: op.layer(i).ops, indent)
        if isinstance(op, WhileLoop):
            raise _NoForm(
                "qfx.to_qasm: a qfx.while_loop is not written (qfx.from_qasm reads no while loops)."
            )
        if isinstance(op, g.AbstractGate):
            return [indent + line for line in self.gate(op)]
        raise _NoForm(f"qfx.to_qasm: {type(op).__name__} has no OpenQASM form.")

    def cond(self, op: Cond, indent: str) -> list[str]:
        if op.expr is None:  # a concrete predicate: the branch it picks
            index = int(np.clip(np.rint(np.asarray(op.index)), 0, len(op.branches) - 1))
            return self.ops(op.branches[index].ops, indent, in_block=True)
        inner = indent + "  "
        if self.version == 2:
            return self.cond2(op, indent)
        expr = op.expr
        if expr[0] == "bool":
            cases = [(self.expr(expr[1]), op.branches[1])]
            last = op.branches[0]
        else:  # a switch, clamped into range as lax.switch is
            e = self.expr(expr)
            k = len(op.branches)
            cases = [(f"{e} <= 0", op.branches[0])] + [
                (f"{e} == {j}", op.branches[j]) for j in range(1, k - 1)
            ]
            last = op.branches[-1]
        lines = []
        for j, (test, branch) in enumerate(cases):
            lines.append(f"{indent}if ({test}) {{" if j == 0 else f"{indent}}} else if ({test}) {{")
            lines += self.ops(branch.ops, inner, in_block=True)
        if last.ops:
            lines.append(f"{indent}}} else {{")
            lines += self.ops(last.ops, inner, in_block=True)
        lines.append(f"{indent}}}")
        return lines

    def cond2(self, op: Cond, indent: str) -> list[str]:
        expr = op.expr
        if expr[0] == "bool":
            expr = expr[1]
            value = 1
            if expr[0] == "eq" and expr[1][0] == "m" and expr[2][0] == "const":
                expr, value = expr[1], expr[2][1]
            if expr[0] == "m" and len(op.branches) == 2 and not op.branches[0].ops and value in (0, 1):
                k = self.bits.get(expr[2].token)
                if k is not None:
                    out = []
                    for line in self.ops(op.branches[1].ops, "", in_block=True):
                        if line.startswith((" ", "if")):
                            raise _NoForm(
                                "qfx.to_qasm(version=2): nested conditionals have no OpenQASM 2 form."
                            )
                        out.append(f"{indent}if (m{k}=={value}) {line}")
                    return out
        raise _NoForm(
            "qfx.to_qasm(version=2): OpenQASM 2 conditions test one measurement (`if (m0==1)`) with no else "
            "branch; write version=3 for this conditional."
        )

    def expr(self, expr) -> str:
        kind = expr[0]
        if kind == "m":
            k = self.bits.get(expr[2].token)
            if k is None:
                raise _NoForm("qfx.to_qasm: a condition reads a measurement that comes after it.")
            return f"m[{k}]"
        if kind == "const":
            return str(expr[1])
        if kind == "bool":
            return f"({self.expr(expr[1])} != 0)"
        symbols = {"and": "&", "or": "|", "xor": "^", "add": "+", "sub": "-", "mul": "*", "eq": "=="}
        symbols.update({"ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="})
        return f"({self.expr(expr[1])} {symbols[kind]} {self.expr(expr[2])})"

    def loop(self, length: int, stacked_ops, ops_at, indent: str) -> list[str]:
        if self.version == 2:  # no loops in OpenQASM 2: unrolled
            out = []
            for i in range(length):
                out += self.ops(ops_at(i), indent, in_block=True)
            return out
        var = "i" if self.depth == 0 else f"i{self.depth}"
        ops = stacked_ops()
        if any(isinstance(x, (ForLoop, Repeat, Cond)) for x in ops):
            raise _NoForm("qfx.to_qasm: nested loops and conditionals inside loops are not written yet.")
        saved = self.fmt

        def fmt(x):
            values = np.asarray(x, dtype=np.float64).reshape(length, -1)
            if values.shape[1] != 1:
                raise _NoForm("qfx.to_qasm: a loop parameter that is not a scalar has no OpenQASM form.")
            values = values[:, 0]
            if np.all(values == values[0]):
                return _number(values[0])
            name = f"_p{len(self.arrays)}"
            self.arrays.append(
                f"array[float[64], {length}] {name} = {{{', '.join(_number(v) for v in values)}}};"
            )
            return f"{name}[{var}]"

        self.fmt, self.depth = fmt, self.depth + 1
        try:
            body = self.ops(ops, indent + "  ", in_block=True)
        finally:
            self.fmt, self.depth = saved, self.depth - 1
        return [f"{indent}for uint {var} in [0:{length - 1}] {{", *body, f"{indent}}}"]

    # --- gates -----------------------------------------------------------------------------------------

    def gate(self, op) -> list[str]:
        if self.version == 2:
            return self.gate2(op)
        mods, name, params, wires = self.call(op)
        args = f"({', '.join(params)})" if params else ""
        prefix = "".join(m + " @ " for m in mods)
        return [f"{prefix}{name}{args} {', '.join(f'q[{w}]' for w in wires)};"]

    def call(self, op):
        """(modifiers, name, parameter texts, wires) of a gate as one OpenQASM 3 gate call."""
        kind = type(op).__name__
        if isinstance(op, g.Adjoint):
            mods, name, params, wires = self.call(op.base)
            return ["inv", *mods], name, params, wires
        if isinstance(op, g.Controlled):
            mods, name, params, wires = self.call(op.base)
            ctrl = ["ctrl" if v else "negctrl" for v in op.control_values]
            return ctrl + mods, name, params, list(op.controls) + list(wires)
        if isinstance(op, g.MultiControlledX):
            ctrl = ["ctrl" if v else "negctrl" for v in op.control_values]
            return ctrl, "x", [], list(op.wires)
        if kind in _PLAIN:
            self.define(_PLAIN[kind])
            return [], _PLAIN[kind], [], list(op.wires)
        if kind in _ANGLES:
            self.define(_ANGLES[kind])
            return [], _ANGLES[kind], [self.fmt(p) for p in op.parameters], list(op.wires)
        if kind == "CRot":
            self.define("rot")
            return ["ctrl"], "rot", [self.fmt(p) for p in op.parameters], list(op.wires)
        if kind == "MultiRZ":
            return [], self.pauli_gate("Z" * len(op.wires)), [self.fmt(op.theta)], list(op.wires)
        if kind == "PauliRot":
            return [], self.pauli_gate(op.pauli_word), [self.fmt(op.theta)], list(op.wires)
        raise _NoForm(
            f"qfx.to_qasm: {kind} has no OpenQASM form (the matrix of a QubitUnitary or a StatePrep is not "
            "decomposed)."
        )

    def pauli_gate(self, word: str) -> str:
        """A definition of exp(-i theta P / 2) for the Pauli word P: a basis change, a CNOT ladder, rz."""
        name = f"pauli_{word.lower()}"
        if name in self.definitions:
            return name
        n = len(word)
        qs = [f"a{k}" for k in range(n)]
        active = [k for k, c in enumerate(word) if c != "I"]
        body = []
        if not active:  # exp(-i theta/2) I, as u1(-theta/2) X u1(-theta/2) X
            body = ["u1(-theta/2) a0;", "x a0;", "u1(-theta/2) a0;", "x a0;"]
        else:
            before = {"X": ["h"], "Y": ["sdg", "h"]}
            after = {"X": ["h"], "Y": ["h", "s"]}
            for k in active:
                body += [f"{gate} {qs[k]};" for gate in before.get(word[k], [])]
            ladder = [f"cx {qs[a]}, {qs[b]};" for a, b in zip(active, active[1:], strict=False)]
            body += ladder + [f"rz(theta) {qs[active[-1]]};"] + ladder[::-1]
            for k in active:
                body += [f"{gate} {qs[k]};" for gate in after.get(word[k], [])]
        self.definitions[name] = f"gate {name}(theta) {', '.join(qs)} {{ {' '.join(body)} }}"
        self.definition_order.append(name)
        return name

    def gate2(self, op) -> list[str]:
        kind = type(op).__name__
        wires = list(op.wires)
        name, params = None, []
        if kind in _PLAIN and kind != "ISWAP":
            name = _PLAIN[kind]
        elif kind in _ANGLES and kind not in ("IsingYY", "IsingXY", "Rot", "DoubleExcitation"):
            name, params = _ANGLES[kind], [self.fmt(p) for p in op.parameters]
        elif kind in ("Rot", "IsingYY", "IsingXY", "ISWAP"):
            name = {"Rot": "rot", "IsingYY": "ryy", "IsingXY": "xy", "ISWAP": "iswap"}[kind]
            self.define(name)
            params = [self.fmt(p) for p in op.parameters]
        elif kind in ("MultiRZ", "PauliRot"):
            word = "Z" * len(wires) if kind == "MultiRZ" else op.pauli_word
            name, params = self.pauli_gate(word), [self.fmt(op.theta)]
        elif isinstance(op, g.Adjoint):
            base = type(op.base).__name__
            if op.base.self_inverse:
                return self.gate2(op.base)
            if base in _QASM2_ADJOINT:
                name = _QASM2_ADJOINT[base]
            elif base in _NEGATED:
                return self.gate2(jax.tree.map(lambda x: -x, op.base))
            elif base == "Rot":
                phi, theta, omega = op.base.parameters
                return self.gate2(g.Rot(-omega, -theta, -phi, op.base.wires))
            elif base == "U3":
                theta, phi, delta = op.base.parameters
                return self.gate2(g.U3(-theta, -delta, -phi, op.base.wires))
        elif isinstance(op, (g.Controlled, g.MultiControlledX)) and all(v == 1 for v in op.control()[1]):
            controls, _, base = op.control()
            base_kind = type(base).__name__
            if len(controls) == 1 and base_kind in _QASM2_CONTROLLED:
                name, params = _QASM2_CONTROLLED[base_kind], [self.fmt(p) for p in base.parameters]
            elif base_kind == "PauliX" and len(controls) == 2:
                name = "ccx"
            elif base_kind == "CNOT" and len(controls) == 1:
                name = "ccx"
        if name is None:
            raise _NoForm(f"qfx.to_qasm(version=2): {op!r} has no OpenQASM 2 form; use version=3.")
        self.define(name)
        args = f"({', '.join(params)})" if params else ""
        return [f"{name}{args} {', '.join(f'q[{w}]' for w in wires)};"]
