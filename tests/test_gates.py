"""The gate battery: every gate in ALL_GATES against the dense reference, plus analytic values."""

import re
import tracemalloc
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx._statevector._kernels import operator_form

from . import reference as ref
from .helpers import ALL_GATES, ANGLE_GATES, central_difference, random_state, random_unitary, tree_allclose

NAMES = sorted(ALL_GATES)


def _has_parameters(name: str) -> bool:
    k, make = ANGLE_GATES[name]
    return bool(make(np.random.default_rng(0), tuple(range(k)) if k > 1 else 0).parameters)


# Gates with real angles (QubitUnitary entries are complex: see test_measure.py).
PARAMETRIC = sorted(filter(_has_parameters, ANGLE_GATES))


def _rng(name: str, salt: int = 0) -> np.random.Generator:
    # A seed per gate name, stable across runs and test orders.
    return np.random.default_rng([zlib.crc32(name.encode()), salt])


def _make(name: str, wires, salt: int = 0):
    k, make = ALL_GATES[name]
    assert len(wires) == k
    return make(_rng(name, salt), wires if k > 1 else wires[0])


def _layouts(name: str):
    """Wire layouts on a 5-wire register: adjacent ascending, gapped reversed, and a random order."""
    k = ALL_GATES[name][0]
    rng = _rng(name, 1)
    return {
        "ascending": tuple(range(k)),
        "reversed_gapped": tuple(range(2 * (k - 1), -1, -2)) if k < 4 else (4, 2, 1, 0),  # e.g. (4, 2, 0)
        "random": tuple(int(w) for w in rng.choice(5, size=k, replace=False)),
    }


def _sim(ops, n, psi=None):
    return np.asarray(qfx.state(qfx.Circuit(ops, num_wires=n), initial_state=psi))


# --- the battery ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_matrix_matches_reference_formula(name):
    k = ALL_GATES[name][0]
    gate = _make(name, tuple(range(k)))
    m = gate.matrix()
    assert m.shape == (2**k, 2**k)
    assert m.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(m), ref.op_matrix(gate), atol=2e-6)


@pytest.mark.parametrize("name", NAMES)
def test_matrix_is_unitary(name):
    k = ALL_GATES[name][0]
    m = np.asarray(_make(name, tuple(range(k))).matrix(), dtype=np.complex128)
    np.testing.assert_allclose(m.conj().T @ m, np.eye(2**k), atol=2e-6)


@pytest.mark.parametrize("name", NAMES)
def test_fast_path_metadata_matches_matrix(name):
    """diagonal(), permutation() and control() describe the same operator as matrix()."""
    k = ALL_GATES[name][0]
    gate = _make(name, tuple(range(k)))
    m = np.asarray(gate.matrix())
    diag = gate.diagonal()
    if diag is not None:
        np.testing.assert_allclose(np.diag(np.asarray(diag)), m, atol=1e-6)
    perm = gate.permutation()
    if perm is not None:
        order, phases = perm
        phases = np.ones(2**k) if phases is None else np.asarray(phases)
        expected = np.zeros((2**k, 2**k), dtype=complex)
        expected[np.arange(2**k), list(order)] = phases
        np.testing.assert_allclose(expected, m, atol=1e-6)
    control = gate.control()
    if control is not None:
        controls, values, target = control
        assert tuple(controls) + tuple(target.wires) == gate.wires
        tdim = 2 ** len(target.wires)
        start = int("".join(map(str, values)), 2) * tdim
        expected = np.eye(2**k, dtype=complex)
        expected[start : start + tdim, start : start + tdim] = ref.op_matrix(target)
        np.testing.assert_allclose(expected, m, atol=1e-6)


@pytest.mark.parametrize("layout", ["ascending", "reversed_gapped", "random"])
@pytest.mark.parametrize("name", NAMES)
def test_gate_in_circuit_matches_reference(name, layout):
    wires = _layouts(name)[layout]
    gate = _make(name, wires)
    psi = random_state(_rng(name, 2), 5)
    expected = ref.embed(ref.op_matrix(gate), wires, 5) @ psi
    np.testing.assert_allclose(_sim([gate], 5, psi), expected, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_adjoint_undoes_gate(name):
    wires = _layouts(name)["random"]
    gate = _make(name, wires)
    psi = random_state(_rng(name, 3), 5)
    np.testing.assert_allclose(_sim([gate, gate.adjoint()], 5, psi), psi, atol=1e-5)
    np.testing.assert_allclose(_sim([qfx.Adjoint(gate), gate], 5, psi), psi, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(qfx.Adjoint(gate).matrix()), ref.op_matrix(gate).conj().T, atol=2e-6
    )


def test_gradient_of_every_parametric_gate_matches_finite_differences(x64):
    """One circuit holding every parametric gate on scattered wires (one compilation for the battery);
    each gate's gradient is compared with central differences of the reference."""
    rng = np.random.default_rng(11)
    n = 5
    gates = [_make(name, _layouts(name)["random"]) for name in PARAMETRIC]
    circ = qfx.Circuit(gates, num_wires=n)
    psi = random_state(rng, n)
    h = random_unitary(rng, 4)
    obs = qfx.Hermitian(h + h.conj().T, wires=(3, 0)) + 0.3 * qfx.X(4) @ qfx.Y(1) - 0.7 * qfx.Z(2)
    grad = jax.jit(jax.grad(qfx.expval))(circ, obs, initial_state=psi)
    assert isinstance(grad, qfx.Circuit)
    expected = central_difference(lambda c: ref.expval(c, obs, initial_state=psi), circ)
    assert jax.tree.structure(grad) == jax.tree.structure(expected)
    for name, g, e in zip(PARAMETRIC, grad.ops, expected.ops, strict=True):
        assert tree_allclose(g, e, rtol=1e-6, atol=1e-8), (name, g.parameters, e.parameters)
    # Every gate's gradient is exercised: no parameter sits at a stationary point by accident.
    assert all(abs(float(x)) > 1e-4 for x in jax.tree.leaves(expected)), "pick another seed"


# --- analytic values ---------------------------------------------------------------------------

THETAS = [-2.1, 0.0, 0.4, np.pi / 2, 3.0]


@pytest.mark.parametrize("t", THETAS)
def test_rotations_analytic(t):
    one = qfx.Circuit([qfx.RX(t, wires=0), qfx.RY(t, wires=1), qfx.H(2), qfx.RZ(t, wires=2)])
    z0, y0, z1, x1, x2, y2 = qfx.expval(one, [qfx.Z(0), qfx.Y(0), qfx.Z(1), qfx.X(1), qfx.X(2), qfx.Y(2)])
    np.testing.assert_allclose(
        np.asarray([z0, y0, z1, x1, x2, y2]),
        [np.cos(t), -np.sin(t), np.cos(t), np.sin(t), np.cos(t), np.sin(t)],
        atol=1e-6,
    )


def test_hadamard_then_x_is_one():
    circ = qfx.Circuit([qfx.Hadamard(0)])
    np.testing.assert_allclose(qfx.expval(circ, qfx.X(0)), 1.0, atol=1e-6)
    np.testing.assert_allclose(qfx.expval(circ, qfx.Z(0)), 0.0, atol=1e-6)


def test_bell_state():
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1))])
    np.testing.assert_allclose(qfx.probs(circ), [0.5, 0, 0, 0.5], atol=1e-6)
    np.testing.assert_allclose(
        qfx.expval(circ, [qfx.Z(0) @ qfx.Z(1), qfx.X(0) @ qfx.X(1), qfx.Y(0) @ qfx.Y(1), qfx.Z(0)]),
        [1, 1, -1, 0],
        atol=1e-6,
    )


def _basis(n, index):
    psi = np.zeros(2**n, dtype=complex)
    psi[index] = 1
    return psi


def _bits(index, n):
    return [(index >> (n - 1 - w)) & 1 for w in range(n)]


def _index(bits):
    return int("".join(map(str, bits)), 2)


def _classical(gate, n, rule):
    """Checks a permutation gate on every basis state against `rule(bits) -> bits` (wire 0 first)."""
    for b in range(2**n):
        out = _sim([gate], n, _basis(n, b))
        np.testing.assert_allclose(out, _basis(n, _index(rule(_bits(b, n)))), atol=1e-6)


def test_cnot_reversed_wires_truth_table():
    _classical(qfx.CNOT(wires=(1, 0)), 2, lambda b: [b[0] ^ b[1], b[1]])


def test_swap_truth_table():
    _classical(qfx.SWAP(wires=(2, 0)), 3, lambda b: [b[2], b[1], b[0]])


def test_toffoli_truth_table():
    _classical(qfx.Toffoli(wires=(2, 0, 1)), 3, lambda b: [b[0], b[1] ^ (b[2] & b[0]), b[2]])


def test_cswap_truth_table():
    _classical(qfx.CSWAP(wires=(1, 2, 0)), 3, lambda b: [b[2], b[1], b[0]] if b[1] else b)


@pytest.mark.parametrize("values", [(1, 1, 1), (1, 0, 1), (0, 0, 0), (0, 1, 1)])
def test_multicontrolledx_control_values(values):
    wires = (3, 1, 0, 2)  # controls 3, 1, 0; target 2

    def rule(b):
        b = list(b)
        if all(b[c] == v for c, v in zip(wires[:-1], values, strict=True)):
            b[2] ^= 1
        return b

    _classical(qfx.MultiControlledX(wires, control_values=values), 4, rule)


def test_multicontrolledx_defaults_to_all_ones():
    assert qfx.MultiControlledX((0, 1, 2)).control_values == (1, 1)
    np.testing.assert_allclose(
        np.asarray(qfx.MultiControlledX((0, 1, 2)).matrix()), np.asarray(qfx.Toffoli((0, 1, 2)).matrix())
    )


def test_iswap_phases():
    out = _sim([qfx.ISWAP(wires=(0, 1))], 2, _basis(2, 0b01))
    np.testing.assert_allclose(out, 1j * _basis(2, 0b10), atol=1e-6)


@pytest.mark.parametrize("value", [0, 1])
def test_controlled_applies_only_where_controls_match(value):
    t = 0.9
    gate = qfx.Controlled(qfx.RY(t, wires=0), controls=(2,), control_values=(value,))
    for control_bit in (0, 1):
        psi = _basis(3, _index([0, 0, control_bit]))
        out = _sim([gate], 3, psi)
        if control_bit == value:
            expected = np.cos(t / 2) * psi + np.sin(t / 2) * _basis(3, _index([1, 0, control_bit]))
        else:
            expected = psi
        np.testing.assert_allclose(out, expected, atol=1e-6)


def test_nested_controlled_matches_reference():
    inner = qfx.Controlled(qfx.Rot(0.3, -1.2, 0.8, wires=1), controls=(3,), control_values=(0,))
    gate = qfx.Controlled(inner, controls=(4, 0), control_values=(1, 0))
    assert gate.wires == (4, 0, 3, 1)
    psi = random_state(np.random.default_rng(7), 5)
    expected = ref.embed(ref.op_matrix(gate), gate.wires, 5) @ psi
    np.testing.assert_allclose(_sim([gate], 5, psi), expected, atol=1e-5)
    np.testing.assert_allclose(_sim([gate, gate.adjoint()], 5, psi), psi, atol=1e-5)


def test_gate_identities():
    def m(*gates):
        out = np.eye(2, dtype=complex)
        for g in gates:
            out = np.asarray(g.matrix()) @ out
        return out

    np.testing.assert_allclose(m(qfx.S(0), qfx.S(0)), ref.Z, atol=1e-6)
    np.testing.assert_allclose(m(qfx.T(0), qfx.T(0)), np.diag([1, 1j]), atol=1e-6)
    np.testing.assert_allclose(m(qfx.SX(0), qfx.SX(0)), ref.X, atol=1e-6)
    np.testing.assert_allclose(m(qfx.Adjoint(qfx.S(0))), np.diag([1, -1j]), atol=1e-6)
    np.testing.assert_allclose(m(qfx.H(0), qfx.Z(0), qfx.H(0)), ref.X, atol=1e-6)
    phi, theta, omega = 0.3, -1.1, 2.0
    np.testing.assert_allclose(
        m(qfx.Rot(phi, theta, omega, wires=0)),
        m(qfx.RZ(phi, wires=0), qfx.RY(theta, wires=0), qfx.RZ(omega, wires=0)),
        atol=1e-6,
    )
    np.testing.assert_allclose(m(qfx.U3(theta, 0.0, 0.0, wires=0)), m(qfx.RY(theta, wires=0)), atol=1e-6)
    np.testing.assert_allclose(m(qfx.U1(phi, wires=0)), m(qfx.PhaseShift(phi, wires=0)), atol=1e-6)
    np.testing.assert_allclose(
        m(qfx.U2(phi, omega, wires=0)), m(qfx.U3(np.pi / 2, phi, omega, wires=0)), atol=1e-6
    )


def test_multirz_phases_follow_parity():
    t = 0.7
    diag = np.diag(np.asarray(qfx.MultiRZ(t, wires=(0, 1, 2)).matrix()))
    parity = np.array([sum(_bits(b, 3)) % 2 for b in range(8)])
    np.testing.assert_allclose(diag, np.exp(-1j * t / 2 * (1 - 2 * parity)), atol=1e-6)


@pytest.mark.parametrize("word", ["XYZZY", "ZIZZZ"])
def test_wide_pauli_rotations_and_their_adjoints_build_no_matrix(word):
    """A PauliRot on many wires, and its adjoint (which the adjoint method and `Circuit.inverse` make), act
    by flips and phases or as a diagonal: never through a 2**k x 2**k matrix (4 GiB at k = 14)."""
    n = len(word)
    gate = qfx.PauliRot(0.37, word, wires=tuple(reversed(range(n))))
    expected = "diagonal" if "X" not in word else "pauli_rotation"
    for g in (gate, qfx.Adjoint(gate), qfx.Adjoint(qfx.Adjoint(gate))):
        assert operator_form(g)[0] == expected
    psi = random_state(np.random.default_rng(4), n)
    m = ref.embed(ref.op_matrix(gate), gate.wires, n)
    for g, dense in ((gate, m), (qfx.Adjoint(gate), m.conj().T)):
        out = qfx.state(qfx.Circuit([g], num_wires=n), initial_state=jnp.asarray(psi))
        np.testing.assert_allclose(np.asarray(out), dense @ psi, atol=2e-6)


def test_self_inverse_and_double_adjoint():
    assert qfx.H(0).adjoint() == qfx.H(0)
    s = qfx.S(1)
    assert isinstance(s.adjoint(), qfx.Adjoint)
    assert s.adjoint().adjoint() is s
    rx = qfx.RX(0.5, wires=0)
    # The adjoint keeps the parameter leaves (gradients keep the circuit's shape).
    assert jax.tree.structure(qfx.Adjoint(rx).parameters) == jax.tree.structure(rx.parameters)
    assert float(qfx.Adjoint(rx).parameters[0]) == pytest.approx(0.5)


def test_gate_repr():
    assert repr(qfx.RX(0.5, wires=2)) == "RX(0.5, wires=2)"
    assert repr(qfx.CNOT(wires=(0, 1))) == "CNOT(wires=(0, 1))"
    assert "PauliRot('XZ'" in repr(qfx.PauliRot(0.1, "XZ", wires=(0, 1)))
    assert repr(qfx.Adjoint(qfx.S(0))) == "Adjoint(S(wires=0))"
    assert "control_values=(0,)" in repr(qfx.Controlled(qfx.X(1), controls=0, control_values=0))


def test_angles_are_leaves_of_the_default_dtype():
    gate = qfx.Rot(1, 2.0, np.float64(3.0), wires=0)
    assert all(p.dtype == jnp.float32 and p.shape == () for p in gate.parameters)
    assert len(jax.tree.leaves(gate)) == 3
    assert jax.tree.leaves(qfx.CNOT(wires=(0, 1))) == []


def test_angles_follow_x64(x64):
    gate = qfx.RX(0.1, wires=0)
    assert gate.theta.dtype == jnp.float64
    assert gate.matrix().dtype == jnp.complex128
    assert qfx.QubitUnitary(np.eye(2), wires=0).U.dtype == jnp.complex128


def test_x64_judges_inputs_by_the_precision_they_were_computed_in(x64):
    # A unitary and a state computed in complex64 are exact to ~1e-7; under x64 qfx stores them as complex128
    # but must not hold them to float64's precision. The same error in a complex128 input is refused.
    H = np.array([[0.3, 0.2 + 0.1j], [0.2 - 0.1j, -0.5]])
    U64 = jax.scipy.linalg.expm(1j * jnp.asarray(H, jnp.complex64))
    err = np.abs(np.asarray(U64, np.complex128).conj().T @ np.asarray(U64, np.complex128) - np.eye(2)).max()
    assert 1e-9 < err < 1e-5  # the case under test: between the two precisions
    assert qfx.QubitUnitary(U64, wires=0).U.dtype == jnp.complex128
    with pytest.raises(ValueError, match="not unitary"):
        qfx.QubitUnitary(np.asarray(U64, np.complex128), wires=0)
    with pytest.raises(ValueError, match="not unitary"):
        qfx.QubitUnitary(U64 * (1 + 1e-3), wires=0)

    psi = jnp.asarray(np.arange(1, 5) + 0.3j, jnp.complex64)
    psi = psi / jnp.linalg.norm(psi).astype(psi.dtype)
    norm_err = abs(np.sum(np.abs(np.asarray(psi, np.complex128)) ** 2) - 1)
    assert 1e-10 < norm_err < 1e-5
    circ = qfx.Circuit([qfx.H(0)], num_wires=2)
    out = qfx.state(circ, initial_state=psi)
    assert out.dtype == jnp.complex128
    with pytest.raises(ValueError, match="not normalised"):
        qfx.state(circ, initial_state=np.asarray(psi, np.complex128))


def test_qubit_unitary_built_under_jit_from_a_constant():
    # A jax array already in the default complex dtype is concrete inside jit, but JAX operations on it are
    # traced: the unitarity check crashed with ConcretizationTypeError (NumPy inputs worked).
    u = jnp.asarray([[0, 1], [1, 0]], jnp.complex64)

    def f(t):
        return qfx.expval(qfx.Circuit([qfx.RX(t, wires=0), qfx.QubitUnitary(u, wires=0)]), qfx.Z(0))

    assert float(jax.jit(f)(0.3)) == pytest.approx(-np.cos(0.3), abs=1e-6)
    doubled = 2 * u  # a constant too: still checked
    with pytest.raises(ValueError, match="not unitary"):
        jax.jit(lambda t: qfx.QubitUnitary(doubled, wires=0).U * t)(0.3)


def test_host_constants_built_inside_jit_are_checked():
    # NumPy matrices and Python lists built inside the trace: jnp.asarray makes tracers of them there, which
    # skipped the check (a non-unitary matrix ran, giving 1.0 for an impossible state).
    bad = np.array([[1, 1], [0, 1]], complex)
    with pytest.raises(ValueError, match=re.escape("QubitUnitary(wires=(0,)): the matrix is not unitary")):
        jax.jit(lambda t: qfx.expval(qfx.Circuit([qfx.RX(t, 0), qfx.QubitUnitary(bad, 0)]), qfx.Z(0)))(0.3)
    with pytest.raises(ValueError, match="not unitary"):
        jax.jit(lambda t: qfx.QubitUnitary([[1.0, 1.0], [0.0, 1.0]], 0).U * t)(0.3)
    # A unitary one runs, and a traced matrix is still accepted (checked only for its shape).
    x = np.array([[0, 1], [1, 0]], complex)
    f = jax.jit(lambda t: qfx.expval(qfx.Circuit([qfx.RX(t, 0), qfx.QubitUnitary(x, 0)]), qfx.Z(0)))
    assert float(f(0.3)) == pytest.approx(-np.cos(0.3), abs=1e-6)
    g = jax.jit(lambda m: qfx.expval(qfx.Circuit([qfx.QubitUnitary(m, 0)]), qfx.Z(0)))
    assert float(g(jnp.asarray(x, jnp.complex64))) == pytest.approx(-1.0, abs=1e-6)


def test_multirz_diagonal_needs_no_table_of_bits():
    # The eigenvalues of Z⊗...⊗Z were read from a (2**k, k) int64 table of bits: 160 bytes per entry at
    # k = 20 (3.2 GB of host memory at 24 wires). Host allocations stay within two float64s per entry.
    k = 20
    tracemalloc.start()
    diag = qfx.MultiRZ(0.7, wires=range(k)).diagonal()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * 2**k
    parity = np.array([bin(i).count("1") % 2 for i in (0, 1, 3, 2**k - 1, 12345)])
    expected = np.exp(-0.35j * (1 - 2 * parity))
    np.testing.assert_allclose(np.asarray(diag)[[0, 1, 3, 2**k - 1, 12345]], expected, atol=1e-6)
