"""An independent dense reference simulator: NumPy, float64/complex128, operators built with np.kron.

It shares no code with qfx: gate matrices are written here again from their textbook formulas, and every
operator is embedded into the full 2**n x 2**n space. Slow, simple and obviously right; for small n only.
"""

import numpy as np

I2 = np.eye(2, dtype=complex)
X = np.array([[0, 1], [1, 0]], dtype=complex)
Y = np.array([[0, -1j], [1j, 0]], dtype=complex)
Z = np.array([[1, 0], [0, -1]], dtype=complex)
Hd = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
PAULI = {"I": I2, "X": X, "Y": Y, "Z": Z}


def expm_herm(h, t):
    """exp(-i t h) for Hermitian h, by eigendecomposition."""
    w, v = np.linalg.eigh(h)
    return (v * np.exp(-1j * t * w)) @ v.conj().T


def controlled(u, num_controls=1):
    d = u.shape[0] * 2**num_controls
    m = np.eye(d, dtype=complex)
    m[d - u.shape[0] :, d - u.shape[0] :] = u
    return m


def rot(phi, theta, omega):
    return expm_herm(Z, omega / 2) @ expm_herm(Y, theta / 2) @ expm_herm(Z, phi / 2)


def kron_all(mats):
    out = np.eye(1, dtype=complex)
    for m in mats:
        out = np.kron(out, m)
    return out


def gate_matrix(name, params, k):
    """The matrix of gate `name` on k wires, in its wire order, from formulas alone."""
    p = params
    table = {
        "Identity": lambda: I2,
        "PauliX": lambda: X,
        "PauliY": lambda: Y,
        "PauliZ": lambda: Z,
        "Hadamard": lambda: Hd,
        "S": lambda: np.diag([1, 1j]),
        "T": lambda: np.diag([1, np.exp(1j * np.pi / 4)]),
        "SX": lambda: expm_herm(X, np.pi / 4) * np.exp(1j * np.pi / 4),
        "RX": lambda: expm_herm(X, p[0] / 2),
        "RY": lambda: expm_herm(Y, p[0] / 2),
        "RZ": lambda: expm_herm(Z, p[0] / 2),
        "PhaseShift": lambda: np.diag([1, np.exp(1j * p[0])]),
        "U1": lambda: np.diag([1, np.exp(1j * p[0])]),
        "U2": lambda: np.exp(1j * (p[0] + p[1]) / 2) * rot(p[1], np.pi / 2, p[0]),
        "U3": lambda: np.exp(1j * (p[1] + p[2]) / 2) * rot(p[2], p[0], p[1]),
        "Rot": lambda: rot(*p),
        "CNOT": lambda: controlled(X),
        "CY": lambda: controlled(Y),
        "CZ": lambda: controlled(Z),
        "SWAP": lambda: np.eye(4)[[0, 2, 1, 3]],
        "ISWAP": lambda: expm_herm(np.kron(X, X) + np.kron(Y, Y), -np.pi / 4),
        "CRX": lambda: controlled(expm_herm(X, p[0] / 2)),
        "CRY": lambda: controlled(expm_herm(Y, p[0] / 2)),
        "CRZ": lambda: controlled(expm_herm(Z, p[0] / 2)),
        "CRot": lambda: controlled(rot(*p)),
        "ControlledPhaseShift": lambda: controlled(np.diag([1, np.exp(1j * p[0])])),
        "IsingXX": lambda: expm_herm(np.kron(X, X), p[0] / 2),
        "IsingYY": lambda: expm_herm(np.kron(Y, Y), p[0] / 2),
        "IsingZZ": lambda: expm_herm(np.kron(Z, Z), p[0] / 2),
        "IsingXY": lambda: expm_herm(np.kron(X, X) + np.kron(Y, Y), -p[0] / 4),
        "Toffoli": lambda: controlled(X, 2),
        "CSWAP": lambda: controlled(np.eye(4)[[0, 2, 1, 3]]),
        "MultiRZ": lambda: expm_herm(kron_all([Z] * k), p[0] / 2),
        "SingleExcitation": lambda: expm_herm((np.kron(Y, X) - np.kron(X, Y)) / 2, p[0] / 2),
        "DoubleExcitation": lambda: expm_herm(_givens_generator(16, 3, 12), p[0] / 2),
    }
    return np.asarray(table[name](), dtype=complex)


def _givens_generator(dim, a, b):
    """The Hermitian `i |b><a| - i |a><b|`: exp(-i t/2 of it) rotates |a> towards |b> by the angle t/2."""
    h = np.zeros((dim, dim), dtype=complex)
    h[b, a], h[a, b] = 1j, -1j
    return h


def state_prep_matrix(psi):
    """The documented matrix of qfx.StatePrep(psi): with psi[0] = r e^{ia} (a = 0 where r = 0),
    u = e^{-ia} psi and w = |0> + u, it is -e^{ia} (I - w w^dagger / (1 + r))."""
    psi = np.asarray(psi, dtype=complex)
    r = abs(psi[0])
    phase = psi[0] / r if r > 0 else 1.0
    w = np.conj(phase) * psi
    w[0] += 1
    return -phase * (np.eye(psi.size) - np.outer(w, w.conj()) / (1 + r))


def embed(u, wires, n):
    """The 2**n x 2**n operator of `u` acting on `wires` (in u's order), as a sum of kron products."""
    k = len(wires)
    full = np.zeros((2**n, 2**n), dtype=complex)
    for a in range(2**k):
        for b in range(2**k):
            if u[a, b] == 0:
                continue
            factors = [I2] * n
            for i, w in enumerate(wires):
                ba, bb = (a >> (k - 1 - i)) & 1, (b >> (k - 1 - i)) & 1
                e = np.zeros((2, 2), dtype=complex)
                e[ba, bb] = 1
                factors[w] = e
            full += u[a, b] * kron_all(factors)
    return full


def op_matrix(op, k=None):
    """The matrix of a qfx gate, rebuilt from its type name, parameters and wires alone."""
    name = type(op).__name__
    if name == "Adjoint":
        return op_matrix(op.base).conj().T
    if name == "Controlled":
        base = op_matrix(op.base)
        return _controlled_on(base, op.control_values)
    if name == "MultiControlledX":
        return _controlled_on(X, op.control_values)
    if name == "QubitUnitary":
        return np.asarray(op.U, dtype=complex)
    if name == "StatePrep":
        return state_prep_matrix(op.state)
    if name == "PauliRot":
        return expm_herm(kron_all([PAULI[c] for c in op.pauli_word]), float(op.theta) / 2)
    params = [float(x) for x in op.parameters]
    return gate_matrix(name, params, len(op.wires))


def _controlled_on(u, values):
    d = u.shape[0]
    total = d * 2 ** len(values)
    start = int("".join(map(str, values)), 2) * d if values else 0
    m = np.eye(total, dtype=complex)
    m[start : start + d, start : start + d] = u
    return m


def flatten_ops(ops):
    """Unrolls `Repeat` blocks into plain gates."""
    out = []
    for op in ops:
        if type(op).__name__ == "Repeat":
            for i in range(op.length):
                out.extend(flatten_ops(op.layer(i).ops))
        else:
            out.append(op)
    return out


def circuit_unitary(circuit):
    n = circuit.num_wires
    u = np.eye(2**n, dtype=complex)
    for op in flatten_ops(circuit.ops):
        u = embed(op_matrix(op), op.wires, n) @ u
    return u


def final_state(circuit, initial_state=None):
    n = circuit.num_wires
    psi = np.zeros(2**n, dtype=complex)
    psi[0] = 1
    if initial_state is not None:
        psi = np.asarray(initial_state, dtype=complex)
    for op in flatten_ops(circuit.ops):
        psi = embed(op_matrix(op), op.wires, n) @ psi
    return psi


def observable_matrix(obs, n):
    """The dense matrix of a qfx observable (any of its classes), built from its words and matrices."""
    name = type(obs).__name__
    if name in ("PauliX", "PauliY", "PauliZ", "Identity"):
        return embed(PAULI[obs.pauli_letter], obs.wires, n)
    if name == "PauliWord":
        return embed(kron_all([PAULI[p] for _, p in obs.word]), obs.wires, n) if obs.word else np.eye(2**n)
    if name == "Hermitian":
        return embed(np.asarray(obs.matrix, dtype=complex), obs.wires, n)
    if name == "LinearCombination":
        return sum(
            float(c) * observable_matrix(t, n) for c, t in zip(obs.coeffs, obs.terms, strict=True)
        ) + np.zeros((2**n, 2**n), dtype=complex)
    raise TypeError(name)


def expval(circuit, obs, initial_state=None):
    psi = final_state(circuit, initial_state)
    return float(np.real(psi.conj() @ observable_matrix(obs, circuit.num_wires) @ psi))


def var(circuit, obs, initial_state=None):
    psi = final_state(circuit, initial_state)
    m = observable_matrix(obs, circuit.num_wires)
    return float(np.real(psi.conj() @ m @ m @ psi) - np.real(psi.conj() @ m @ psi) ** 2)


def probs(circuit, wires=None, initial_state=None):
    n = circuit.num_wires
    wires = list(range(n)) if wires is None else list(wires)
    p = np.abs(final_state(circuit, initial_state)) ** 2
    t = p.reshape((2,) * n)
    t = t.sum(axis=tuple(a for a in range(n) if a not in wires))
    asc = sorted(wires)
    return t.transpose([asc.index(w) for w in wires]).reshape(-1)


def density_matrix(circuit, wires, initial_state=None):
    n = circuit.num_wires
    psi = final_state(circuit, initial_state).reshape((2,) * n)
    rest = [a for a in range(n) if a not in wires]
    a = np.transpose(psi, list(wires) + rest).reshape(2 ** len(wires), -1)
    return a @ a.conj().T
