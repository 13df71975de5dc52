"""Fuzzing qfx.from_qasm: any text either reads as a circuit or raises qfx's own QasmError (naming a line
and column), never another error, a crash or a hang. Bounded: short texts, few examples, a time limit."""

import time

from hypothesis import given, settings, strategies as st

import qfx
from qfx.interop import QasmError

SEED = """OPENQASM 3.0;
include "stdgates.inc";
input float t;
gate g(a) x, y { ctrl @ rx(a / 2) x, y; inv @ s y; }
qubit[3] q;
bit[2] c;
h q;
g(t * pi) q[0], q[2];
negctrl @ pow(2) @ t q[1], q[0];
for uint i in [0:2] { ry(0.1 * i + t) q[1]; }
c[0] = measure q[0];
if (c[0] == 1) { x q[1]; } else { h q[2]; }
reset q[0];
"""
TOKENS = ["qubit", "bit", "[", "]", "(", ")", "{", "}", ";", ",", "@", "ctrl", "negctrl", "inv", "pow", "for",
          "uint", "in", "if", "else", "measure", "->", "=", "==", "1", "0", "2.5", "pi", "-", "/", "**", "q",
          "c", "t", "x", "h", "cx", "gate", "gphase", "input float u;", "OPENQASM 2.0;", "qreg", "creg",
          "\n", " ", "[0:1000000]", "99999999999"]  # fmt: skip


def check(text: str) -> None:
    start = time.perf_counter()
    try:
        circuit = qfx.from_qasm(text, inputs={"t": 0.3} if "input float t" in text else None)
    except QasmError as e:
        assert e.line >= 1 and e.column >= 1
        assert str(e).startswith("OpenQASM, line ")
    except ValueError as e:  # an argument error: the mutation renamed or removed the input declared
        assert str(e).startswith("qfx.from_qasm: inputs ['t'] are not declared")
    else:
        assert isinstance(circuit, qfx.Circuit)
    assert time.perf_counter() - start < 20


@settings(max_examples=40)
@given(st.text(max_size=120))
def test_arbitrary_text_reads_or_raises_qasm_error(text):
    check(text)


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(SEED)), st.integers(0, 12), st.lists(st.sampled_from(TOKENS), max_size=4)
        ),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_programs_read_or_raise_qasm_error(edits):
    text = SEED
    for position, deleted, inserted in edits:  # delete a few characters, insert a few tokens
        position = min(position, len(text))
        text = text[:position] + " ".join(inserted) + text[position + deleted :]
    check(text)
