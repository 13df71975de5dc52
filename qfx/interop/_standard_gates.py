"""The gates of OpenQASM's standard libraries (`qelib1.inc`, `stdgates.inc`) as qfx operations.

Each gate is read as its textbook matrix, the one Qiskit gives it (`u3` is `qfx.U3`, `x` is `qfx.X`), not
through the global phases that the `stdgates.inc` text puts in some definitions: Qiskit and qfx agree on
every state. A builder maps `(params, wires)` to a list of qfx gates.
"""

import math

from .. import _gates as g


def _c(base, *controls):
    return g.Controlled(base, controls)


def _cu(p, w):
    theta, phi, lam, gamma = p
    return [g.PhaseShift(gamma, w[0]), _c(g.U3(theta, phi, lam, w[1]), w[0])]


# name: (number of parameters, number of qubits, builder)
_COMMON = {
    "id": (0, 1, lambda p, w: [g.Identity(w[0])]),
    "x": (0, 1, lambda p, w: [g.PauliX(w[0])]),
    "y": (0, 1, lambda p, w: [g.PauliY(w[0])]),
    "z": (0, 1, lambda p, w: [g.PauliZ(w[0])]),
    "h": (0, 1, lambda p, w: [g.Hadamard(w[0])]),
    "s": (0, 1, lambda p, w: [g.S(w[0])]),
    "sdg": (0, 1, lambda p, w: [g.Adjoint(g.S(w[0]))]),
    "t": (0, 1, lambda p, w: [g.T(w[0])]),
    "tdg": (0, 1, lambda p, w: [g.Adjoint(g.T(w[0]))]),
    "sx": (0, 1, lambda p, w: [g.SX(w[0])]),
    "rx": (1, 1, lambda p, w: [g.RX(p[0], w[0])]),
    "ry": (1, 1, lambda p, w: [g.RY(p[0], w[0])]),
    "rz": (1, 1, lambda p, w: [g.RZ(p[0], w[0])]),
    "p": (1, 1, lambda p, w: [g.PhaseShift(p[0], w[0])]),
    "u1": (1, 1, lambda p, w: [g.U1(p[0], w[0])]),
    "u2": (2, 1, lambda p, w: [g.U2(p[0], p[1], w[0])]),
    "u3": (3, 1, lambda p, w: [g.U3(p[0], p[1], p[2], w[0])]),
    "cx": (0, 2, lambda p, w: [g.CNOT(w)]),
    "cy": (0, 2, lambda p, w: [g.CY(w)]),
    "cz": (0, 2, lambda p, w: [g.CZ(w)]),
    "ch": (0, 2, lambda p, w: [_c(g.Hadamard(w[1]), w[0])]),
    "cp": (1, 2, lambda p, w: [g.ControlledPhaseShift(p[0], w)]),
    "crx": (1, 2, lambda p, w: [g.CRX(p[0], w)]),
    "cry": (1, 2, lambda p, w: [g.CRY(p[0], w)]),
    "crz": (1, 2, lambda p, w: [g.CRZ(p[0], w)]),
    "swap": (0, 2, lambda p, w: [g.SWAP(w)]),
    "ccx": (0, 3, lambda p, w: [g.Toffoli(w)]),
    "cswap": (0, 3, lambda p, w: [g.CSWAP(w)]),
    "cu": (4, 2, _cu),
}

STDGATES = {
    **_COMMON,
    "CX": (0, 2, lambda p, w: [g.CNOT(w)]),
    "phase": (1, 1, lambda p, w: [g.PhaseShift(p[0], w[0])]),
    "cphase": (1, 2, lambda p, w: [g.ControlledPhaseShift(p[0], w)]),
}

QELIB1 = {
    **_COMMON,
    "u0": (1, 1, lambda p, w: [g.Identity(w[0])]),  # an idle of gamma time steps
    "u": (3, 1, lambda p, w: [g.U3(p[0], p[1], p[2], w[0])]),
    "sxdg": (0, 1, lambda p, w: [g.Adjoint(g.SX(w[0]))]),
    "cu1": (1, 2, lambda p, w: [g.ControlledPhaseShift(p[0], w)]),
    "cu3": (3, 2, lambda p, w: [_c(g.U3(p[0], p[1], p[2], w[1]), w[0])]),
    "csx": (0, 2, lambda p, w: [_c(g.SX(w[1]), w[0])]),
    "rxx": (1, 2, lambda p, w: [g.IsingXX(p[0], w)]),
    "rzz": (1, 2, lambda p, w: [g.IsingZZ(p[0], w)]),
    "c3x": (0, 4, lambda p, w: [g.MultiControlledX(w)]),
    "c4x": (0, 5, lambda p, w: [g.MultiControlledX(w)]),
    "c3sqrtx": (0, 4, lambda p, w: [_c(g.SX(w[3]), *w[:3])]),
}

# The relative-phase Toffolis of qelib1.inc are defined by their circuits (their matrices are those
# circuits'), read as any gate definition is.
QELIB1_DEFINITIONS = """
gate rccx a, b, c {
  u2(0, pi) c; u1(pi/4) c; cx b, c; u1(-pi/4) c; cx a, c; u1(pi/4) c; cx b, c; u1(-pi/4) c; u2(0, pi) c;
}
gate rc3x a, b, c, d {
  u2(0, pi) d; u1(pi/4) d; cx c, d; u1(-pi/4) d; u2(0, pi) d; cx a, d; u1(pi/4) d; cx b, d;
  u1(-pi/4) d; cx a, d; u1(pi/4) d; cx b, d; u1(-pi/4) d; u2(0, pi) d; u1(pi/4) d; cx c, d;
  u1(-pi/4) d; u2(0, pi) d;
}
"""

CONSTANTS = {"pi": math.pi, "π": math.pi, "tau": math.tau, "τ": math.tau, "euler": math.e, "ℇ": math.e}
