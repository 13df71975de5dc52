"""Shared test helpers: comparisons, the gate battery, random circuits, finite differences."""

import jax
import numpy as np

import qfx


def equations(jaxpr):
    """Every equation of a jaxpr and of the jaxprs nested in it (scan, cond, jit, custom_jvp/vjp bodies)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from equations(sub)


def tree_allclose(x, y, *, rtol=1e-5, atol=1e-6) -> bool:
    """True when two pytrees have the same structure and all leaves are close."""
    xl, xt = jax.tree.flatten(x)
    yl, yt = jax.tree.flatten(y)
    if xt != yt:
        return False
    return all(
        np.shape(a) == np.shape(b) and np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)
        for a, b in zip(xl, yl, strict=True)
    )


def random_unitary(rng: np.random.Generator, dim: int) -> np.ndarray:
    """A Haar-random unitary (QR of a complex Gaussian matrix, phases fixed)."""
    a = rng.normal(size=(dim, dim)) + 1j * rng.normal(size=(dim, dim))
    q, r = np.linalg.qr(a)
    return q * (np.diag(r) / np.abs(np.diag(r)))


def random_state(rng: np.random.Generator, n: int) -> np.ndarray:
    psi = rng.normal(size=2**n) + 1j * rng.normal(size=2**n)
    return psi / np.linalg.norm(psi)


def _angles(rng, k):
    return [float(a) for a in rng.uniform(-np.pi, np.pi, size=k)]


# Every gate family: (number of wires, factory(rng, wires) -> gate).
ALL_GATES = {
    "Identity": (1, lambda r, w: qfx.Identity(w)),
    "PauliX": (1, lambda r, w: qfx.PauliX(w)),
    "PauliY": (1, lambda r, w: qfx.PauliY(w)),
    "PauliZ": (1, lambda r, w: qfx.PauliZ(w)),
    "Hadamard": (1, lambda r, w: qfx.Hadamard(w)),
    "S": (1, lambda r, w: qfx.S(w)),
    "T": (1, lambda r, w: qfx.T(w)),
    "Sdg": (1, lambda r, w: qfx.Adjoint(qfx.S(w))),
    "Tdg": (1, lambda r, w: qfx.Adjoint(qfx.T(w))),
    "SX": (1, lambda r, w: qfx.SX(w)),
    "RX": (1, lambda r, w: qfx.RX(*_angles(r, 1), wires=w)),
    "RY": (1, lambda r, w: qfx.RY(*_angles(r, 1), wires=w)),
    "RZ": (1, lambda r, w: qfx.RZ(*_angles(r, 1), wires=w)),
    "PhaseShift": (1, lambda r, w: qfx.PhaseShift(*_angles(r, 1), wires=w)),
    "U1": (1, lambda r, w: qfx.U1(*_angles(r, 1), wires=w)),
    "U2": (1, lambda r, w: qfx.U2(*_angles(r, 2), wires=w)),
    "U3": (1, lambda r, w: qfx.U3(*_angles(r, 3), wires=w)),
    "Rot": (1, lambda r, w: qfx.Rot(*_angles(r, 3), wires=w)),
    "CNOT": (2, lambda r, w: qfx.CNOT(w)),
    "CY": (2, lambda r, w: qfx.CY(w)),
    "CZ": (2, lambda r, w: qfx.CZ(w)),
    "SWAP": (2, lambda r, w: qfx.SWAP(w)),
    "ISWAP": (2, lambda r, w: qfx.ISWAP(w)),
    "CRX": (2, lambda r, w: qfx.CRX(*_angles(r, 1), wires=w)),
    "CRY": (2, lambda r, w: qfx.CRY(*_angles(r, 1), wires=w)),
    "CRZ": (2, lambda r, w: qfx.CRZ(*_angles(r, 1), wires=w)),
    "CRot": (2, lambda r, w: qfx.CRot(*_angles(r, 3), wires=w)),
    "ControlledPhaseShift": (2, lambda r, w: qfx.ControlledPhaseShift(*_angles(r, 1), wires=w)),
    "IsingXX": (2, lambda r, w: qfx.IsingXX(*_angles(r, 1), wires=w)),
    "IsingYY": (2, lambda r, w: qfx.IsingYY(*_angles(r, 1), wires=w)),
    "IsingZZ": (2, lambda r, w: qfx.IsingZZ(*_angles(r, 1), wires=w)),
    "IsingXY": (2, lambda r, w: qfx.IsingXY(*_angles(r, 1), wires=w)),
    "Toffoli": (3, lambda r, w: qfx.Toffoli(w)),
    "CSWAP": (3, lambda r, w: qfx.CSWAP(w)),
    "MultiControlledX": (3, lambda r, w: qfx.MultiControlledX(w, control_values=(1, 0))),
    "MultiRZ": (3, lambda r, w: qfx.MultiRZ(*_angles(r, 1), wires=w)),
    "PauliRot": (3, lambda r, w: qfx.PauliRot(*_angles(r, 1), "XYZ", wires=w)),
    "PauliRotZ": (2, lambda r, w: qfx.PauliRot(*_angles(r, 1), "ZI", wires=w)),
    "QubitUnitary1": (1, lambda r, w: qfx.QubitUnitary(random_unitary(r, 2), wires=w)),
    "QubitUnitary2": (2, lambda r, w: qfx.QubitUnitary(random_unitary(r, 4), wires=w)),
    "QubitUnitary3": (3, lambda r, w: qfx.QubitUnitary(random_unitary(r, 8), wires=w)),
    "AdjointRot": (1, lambda r, w: qfx.Adjoint(qfx.Rot(*_angles(r, 3), wires=w))),
    "AdjointISWAP": (2, lambda r, w: qfx.Adjoint(qfx.ISWAP(w))),
    "AdjointCY": (2, lambda r, w: qfx.Adjoint(qfx.CY(w))),
    "ControlledRY": (2, lambda r, w: qfx.Controlled(qfx.RY(*_angles(r, 1), wires=w[1]), controls=w[0])),
    "ControlledISWAP": (
        3,
        lambda r, w: qfx.Controlled(qfx.ISWAP(w[1:]), controls=w[:1], control_values=(0,)),
    ),
    "ControlledU2": (3, lambda r, w: qfx.Controlled(qfx.QubitUnitary(random_unitary(r, 4), w[1:]), w[:1])),
    "SingleExcitation": (2, lambda r, w: qfx.SingleExcitation(*_angles(r, 1), wires=w)),
    "DoubleExcitation": (4, lambda r, w: qfx.DoubleExcitation(*_angles(r, 1), wires=w)),
    "StatePrep2": (2, lambda r, w: qfx.StatePrep(random_state(r, 2), wires=w)),
}

# Gates whose parameters are real angles (gradient batteries use these).
ANGLE_GATES = {
    name: spec
    for name, spec in ALL_GATES.items()
    if not name.startswith(("QubitUnitary", "StatePrep")) and name != "ControlledU2"
}


def random_circuit(rng: np.random.Generator, n: int, depth: int, gates=ALL_GATES) -> qfx.Circuit:
    """`depth` gates drawn uniformly from `gates`, each on random distinct wires (unordered)."""
    names = [name for name, (k, _) in gates.items() if k <= n]
    ops = []
    for _ in range(depth):
        name = names[rng.integers(len(names))]
        k, make = gates[name]
        wires = tuple(int(w) for w in rng.choice(n, size=k, replace=False))
        ops.append(make(rng, wires if k > 1 else wires[0]))
    return qfx.Circuit(ops, num_wires=n)


def central_difference(f, tree, eps=1e-6):
    """The gradient of the real scalar function `f` w.r.t. every float leaf of `tree`, by central
    differences in float64 (f is typically the NumPy reference simulator)."""
    leaves, treedef = jax.tree.flatten(tree)
    grads = []
    for i, leaf in enumerate(leaves):
        base = np.asarray(leaf, dtype=np.float64)
        g = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            vals = []
            for sign in (+1, -1):
                x = base.copy()
                x[idx] += sign * eps
                new = leaves[:i] + [x] + leaves[i + 1 :]
                vals.append(f(jax.tree.unflatten(treedef, new)))
            g[idx] = (vals[0] - vals[1]) / (2 * eps)
        grads.append(g)
    return jax.tree.unflatten(treedef, grads)
