"""An independent dense density-matrix reference: NumPy, complex128, Kraus sums built with np.kron.

Shares no code with qfx: each channel's Kraus operators are written here again from PennyLane's published
formulas (ThermalRelaxationError in PennyLane's two forms: Pauli and reset errors for t2 <= t1, the
eigenvectors of the Choi matrix for t2 > t1), and every operator is embedded into the full 2**n space with
`reference.embed`. Gates are the reference simulator's. Slow and plain; small n only.
"""

import numpy as np

from .reference import I2, PAULI, X, Y, Z, embed, flatten_ops, kron_all, observable_matrix, op_matrix


def _thermal(pe, t1, t2, tq):
    e1, e2 = np.exp(-tq / t1), np.exp(-tq / t2)
    reset = 1 - e1
    if t2 <= t1:
        pz = (1 - reset) * (1 - e2 / e1) / 2
        r0, r1 = (1 - pe) * reset, pe * reset
        pid = 1 - pz - r0 - r1
        return [
            np.sqrt(pid) * I2,
            np.sqrt(pz) * Z,
            np.sqrt(r0) * np.array([[1, 0], [0, 0]]),
            np.sqrt(r0) * np.array([[0, 1], [0, 0]]),
            np.sqrt(r1) * np.array([[0, 0], [1, 0]]),
            np.sqrt(r1) * np.array([[0, 0], [0, 1]]),
        ]
    # The Choi matrix, on (input, output) pairs of basis states, and its eigenvectors.
    choi = np.array(
        [
            [1 - pe * reset, 0, 0, e2],
            [0, pe * reset, 0, 0],
            [0, 0, (1 - pe) * reset, 0],
            [e2, 0, 0, 1 - (1 - pe) * reset],
        ]
    )
    w, v = np.linalg.eigh(choi)
    return [np.sqrt(max(x, 0)) * v[:, k].reshape(2, 2).T for k, x in enumerate(w)]


def kraus(op):
    """The Kraus operators of a qfx channel, from its type name, strengths and static fields alone."""
    name = type(op).__name__
    p = [np.asarray(x, dtype=np.float64) if name != "QubitChannel" else None for x in op.parameters]
    if name == "BitFlip":
        return [np.sqrt(1 - p[0]) * I2, np.sqrt(p[0]) * X]
    if name == "PhaseFlip":
        return [np.sqrt(1 - p[0]) * I2, np.sqrt(p[0]) * Z]
    if name == "DepolarizingChannel":
        return [np.sqrt(1 - p[0]) * I2] + [np.sqrt(p[0] / 3) * m for m in (X, Y, Z)]
    if name == "AmplitudeDamping":
        g = p[0]
        return [np.array([[1, 0], [0, np.sqrt(1 - g)]]), np.array([[0, np.sqrt(g)], [0, 0]])]
    if name == "PhaseDamping":
        g = p[0]
        return [np.array([[1, 0], [0, np.sqrt(1 - g)]]), np.array([[0, 0], [0, np.sqrt(g)]])]
    if name == "GeneralizedAmplitudeDamping":
        g, q = p
        return [
            np.sqrt(1 - q) * np.array([[1, 0], [0, np.sqrt(1 - g)]]),
            np.sqrt(1 - q) * np.array([[0, np.sqrt(g)], [0, 0]]),
            np.sqrt(q) * np.array([[np.sqrt(1 - g), 0], [0, 1]]),
            np.sqrt(q) * np.array([[0, 0], [np.sqrt(g), 0]]),
        ]
    if name == "ResetError":
        p0, p1 = p
        return [
            np.sqrt(1 - p0 - p1) * I2,
            np.sqrt(p0) * np.array([[1, 0], [0, 0]]),
            np.sqrt(p0) * np.array([[0, 1], [0, 0]]),
            np.sqrt(p1) * np.array([[0, 0], [1, 0]]),
            np.sqrt(p1) * np.array([[0, 0], [0, 1]]),
        ]
    if name == "PauliError":
        word = kron_all([PAULI[c] for c in op.operators])
        return [np.sqrt(1 - p[0]) * np.eye(word.shape[0]), np.sqrt(p[0]) * word]
    if name == "ThermalRelaxationError":
        return _thermal(*p)
    if name == "QubitChannel":
        return list(np.asarray(op.K, dtype=complex))
    raise TypeError(name)


def is_channel(op) -> bool:
    return hasattr(op, "weighted_kraus")


def final_rho(circuit, initial_rho=None):
    n = circuit.num_wires
    rho = np.zeros((2**n, 2**n), dtype=complex)
    rho[0, 0] = 1
    if initial_rho is not None:
        rho = np.asarray(initial_rho, dtype=complex)
    for op in flatten_ops(circuit.ops):
        if is_channel(op):
            ks = [embed(np.asarray(k, dtype=complex), op.wires, n) for k in kraus(op)]
            rho = sum(k @ rho @ k.conj().T for k in ks)
        else:
            u = embed(op_matrix(op), op.wires, n)
            rho = u @ rho @ u.conj().T
    return rho


def expval(circuit, obs):
    return float(np.real(np.trace(observable_matrix(obs, circuit.num_wires) @ final_rho(circuit))))


def var(circuit, obs):
    rho = final_rho(circuit)
    m = observable_matrix(obs, circuit.num_wires)
    return float(np.real(np.trace(m @ m @ rho)) - np.real(np.trace(m @ rho)) ** 2)


def reduced(rho, wires, n):
    """The reduced density matrix of `wires` (in that order) of an n-wire `rho`."""
    rest = [w for w in range(n) if w not in wires]
    k = len(wires)
    t = rho.reshape((2,) * 2 * n).transpose(
        list(wires) + rest + [n + w for w in wires] + [n + w for w in rest]
    )
    t = t.reshape(2**k, 2 ** (n - k), 2**k, 2 ** (n - k))
    return np.einsum("ajbj->ab", t)


def probs(circuit, wires=None):
    n = circuit.num_wires
    wires = list(range(n)) if wires is None else list(wires)
    return np.real(np.diag(reduced(final_rho(circuit), wires, n)))
