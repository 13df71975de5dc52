"""Gate fusion (`qfx/_statevector/_fusion.py`): same action as the unfused circuit, fewer operations, same
gradients."""

import equinox as eqx
import jax
import numpy as np
import pytest

import qfx
from qfx._statevector import _fusion, _kernels, _pipeline, _staircase

from . import reference as ref
from .helpers import (
    central_difference,
    equations,
    random_circuit,
    random_state,
    random_unitary,
    tree_allclose,
)

# The differentiation methods with exact gradients, each test run once per method.
EXACT_METHODS = pytest.mark.parametrize(
    "method",
    [qfx.diff.Backprop(), qfx.diff.Adjoint(), qfx.diff.ParameterShift()],
    ids=["backprop", "adjoint", "parameter_shift"],
)


@pytest.fixture(params=["absorb", "keep_structured"])
def policy(request, monkeypatch):
    """Both fusion policies: structured two-qubit gates absorbed (small states) or kept (large states)."""
    absorb_up_to = 64 if request.param == "absorb" else 0
    monkeypatch.setattr(_fusion, "ABSORB_STRUCTURED_MAX_WIRES", absorb_up_to)
    return request.param


def _unitary(ops, n):
    """The dense unitary of a list of gates, from each gate's own matrix (FusedGate included)."""
    u = np.eye(2**n, dtype=complex)
    for op in ops:
        u = ref.embed(np.asarray(op.matrix(), dtype=complex), op.wires, n) @ u
    return u


@pytest.mark.parametrize("seed", range(6))
def test_fused_circuit_has_the_same_unitary(seed, policy):
    rng = np.random.default_rng(seed)
    n = 4
    circ = random_circuit(rng, n, depth=30)
    fused = _fusion.fuse(circ.ops, n)
    assert len(fused) < len(circ.ops)
    np.testing.assert_allclose(_unitary(fused, n), ref.circuit_unitary(circ), atol=2e-5)


@pytest.mark.parametrize("seed", range(4))
def test_simulation_matches_reference(seed, policy):
    rng = np.random.default_rng(100 + seed)
    n = 5
    circ = random_circuit(rng, n, depth=40)
    psi = random_state(rng, n)
    np.testing.assert_allclose(qfx.state(circ, initial_state=psi), ref.final_state(circ, psi), atol=2e-5)


def _hea_layer(theta, n):
    return (
        [qfx.RY(theta[i, 0], wires=i) for i in range(n)]
        + [qfx.RZ(theta[i, 1], wires=i) for i in range(n)]
        + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
    )


def test_hea_layer_fuses_into_expected_blocks():
    n = 6
    ops = _hea_layer(np.linspace(0.1, 1.2, 2 * n).reshape(n, 2), n)
    # Small state: every RY, RZ and CNOT is absorbed into one dense block per CNOT.
    absorbed = _fusion.fuse(ops, n, absorb_below=n)
    assert [op.wires for op in absorbed] == [(i, i + 1) for i in range(n - 1)]
    assert all(isinstance(op, _fusion.FusedGate) for op in absorbed)
    # Large state: RY and RZ fuse per wire; the CNOTs stay permutations (one cheap pass each).
    kept = _fusion.fuse(ops, n, absorb_below=0)
    assert sum(isinstance(op, qfx.CNOT) for op in kept) == n - 1
    assert sorted(op.wires for op in kept if isinstance(op, _fusion.FusedGate)) == [(i,) for i in range(n)]
    for fused in (absorbed, kept):
        np.testing.assert_allclose(_unitary(fused, n), _unitary(ops, n), atol=2e-5)


def test_lone_gates_keep_their_structure():
    ops = [qfx.RZ(0.3, wires=0), qfx.CNOT(wires=(1, 2)), qfx.Toffoli(wires=(0, 1, 2)), qfx.H(0)]
    assert _fusion.fuse(ops, 3, absorb_below=0) == ops


def test_wide_gates_are_barriers():
    # RX(0) and RY(0) are separated by a Toffoli on wire 0: they must not be multiplied together.
    ops = [qfx.RX(0.4, wires=0), qfx.Toffoli(wires=(0, 1, 2)), qfx.RY(0.7, wires=0)]
    assert _fusion.fuse(ops, 3) == ops


def test_same_kind_gates_with_different_structure_are_not_mixed():
    # Adjoint(S) and Adjoint(Adjoint(S)) are both `Adjoint` with no leaves but different matrices.
    ops = [qfx.Adjoint(qfx.S(0)), qfx.Adjoint(qfx.Adjoint(qfx.T(0))), qfx.Adjoint(qfx.H(0))]
    fused = _fusion.fuse(ops, 1)
    np.testing.assert_allclose(_unitary(fused, 1), _unitary(ops, 1), atol=1e-6)


@pytest.mark.parametrize("method", [qfx.diff.Backprop(), qfx.diff.Adjoint()], ids=["backprop", "adjoint"])
def test_gradients_through_fusion_match_finite_differences(method, policy):
    rng = np.random.default_rng(7)
    n = 4
    theta = rng.uniform(-np.pi, np.pi, size=(3, n, 2))
    circ = qfx.Circuit(
        [op for layer in theta for op in _hea_layer(layer, n)] + [qfx.IsingXX(0.3, wires=(1, 3))]
    )
    obs = qfx.Z(0) @ qfx.Z(2) + 0.5 * qfx.X(1)
    grads = jax.grad(lambda c: qfx.expval(c, obs, diff=method))(circ)
    expected = central_difference(lambda c: np.real(ref.expval(c, obs)), circ)
    assert tree_allclose(grads, expected, atol=2e-4)


# --- staircases (`_staircase.py`): like gates on consecutive wires, applied by one lax.scan ------------


@pytest.fixture
def stairs(monkeypatch):
    """Staircases of any length >= 2, at any size, so that small test circuits exercise them."""
    monkeypatch.setattr(_staircase, "STAIRCASE_MIN_LENGTH", 2)
    monkeypatch.setattr(_staircase, "STAIRCASE_MIN_WIRES", 1)
    monkeypatch.setattr(_staircase, "STAIRCASE_MAX_WIRES", 64)


def _staircase_circuit(rng, n):
    """Staircases of each kind, starting and ending away from the register's ends, with stray gates."""
    a = rng.uniform(-np.pi, np.pi, size=(6, n))
    return qfx.Circuit(
        [qfx.H(w) for w in range(n)]
        + [qfx.RY(a[0, w], wires=w) for w in range(1, n - 1)]  # one-qubit stair, starting at wire 1
        + [qfx.CNOT(wires=(w, w + 1)) for w in range(n - 1)]  # fixed two-qubit gates (zeros skipped)
        + [qfx.RX(a[1, 0], wires=2)]
        + [qfx.IsingXX(a[2, w], wires=(w, w + 1)) for w in range(1, n - 2)]  # parameterised, dense
        + [qfx.CRY(a[3, w], wires=(w + 1, w)) for w in range(n - 1)]  # reversed orientation, controlled
        + [qfx.CZ(wires=(w, w + 1)) for w in range(2, n - 1)]
        + [qfx.RZ(a[4, w], wires=w) for w in range(n)]
        + [qfx.SWAP(wires=(w, w + 1)) for w in range(n - 1)]
        + [qfx.U3(a[5, w], 0.3, -0.2, wires=w) for w in range(n)]
    )


def test_staircases_are_found(stairs):
    n = 6
    ops = _staircase.staircases(list(_staircase_circuit(np.random.default_rng(0), n).ops), n)
    kinds = [
        (type(op.gates[0]).__name__, len(op.gates))
        if isinstance(op, _staircase.Staircase)
        else type(op).__name__
        for op in ops
    ]
    assert kinds == [
        ("Hadamard", n), ("RY", n - 2), ("CNOT", n - 1), "RX", ("IsingXX", n - 3), ("CRY", n - 1),
        ("CZ", n - 3), ("RZ", n), ("SWAP", n - 1), ("U3", n),
    ]  # fmt: skip


def test_staircases_are_not_formed_across_gaps_or_kinds(stairs):
    ops = [qfx.RY(0.1, wires=0), qfx.RY(0.2, wires=2), qfx.RX(0.3, wires=3), qfx.CNOT(wires=(0, 2))]
    ops += [qfx.CNOT(wires=(1, 2)), qfx.CNOT(wires=(3, 2))]  # orientations differ
    assert _staircase.staircases(ops, 4) == ops


@pytest.mark.parametrize("seed", range(3))
def test_staircase_simulation_matches_reference(seed, stairs, policy):
    rng = np.random.default_rng(200 + seed)
    n = 6
    circ = _staircase_circuit(rng, n)
    psi = random_state(rng, n)
    np.testing.assert_allclose(qfx.state(circ, initial_state=psi), ref.final_state(circ, psi), atol=3e-5)


def test_staircase_gradients_and_vmap(stairs, x64):
    rng = np.random.default_rng(3)
    n = 5
    circ = _staircase_circuit(rng, n)
    obs = qfx.Z(0) @ qfx.Z(4) + 0.5 * qfx.X(2)
    grads = jax.grad(lambda c: qfx.expval(c, obs))(circ)
    expected = central_difference(lambda c: np.real(ref.expval(c, obs)), circ)
    assert tree_allclose(grads, expected, atol=1e-6)
    # A batch of circuits under vmap: the stacked staircase parameters gain a batch axis.
    thetas = rng.uniform(-np.pi, np.pi, size=(3, n))

    def make(t):
        return qfx.Circuit(
            [qfx.RY(t[w], wires=w) for w in range(n)]
            + [qfx.CRX(t[w], wires=(w, w + 1)) for w in range(n - 1)]
        )

    values = jax.vmap(lambda c: qfx.expval(c, obs))(eqx.filter_vmap(make)(thetas))
    expected = [np.real(ref.expval(make(t), obs)) for t in thetas]
    np.testing.assert_allclose(values, expected, atol=1e-9)


def test_hea_runs_as_scanned_staircases():
    """At a size where staircases are on by default, HEA's fused layer becomes a staircase of the RZ RY
    blocks on every wire and one gather for the CNOT ladder; with gathers off, two staircases."""
    n = _staircase.STAIRCASE_MAX_WIRES
    assert _fusion.PERMUTATION_MIN_WIRES <= n
    layer = _hea_layer(np.linspace(0.1, 1.2, 2 * n).reshape(n, 2), n)
    ops = _fusion.fuse(layer, n)
    grouped = _staircase.staircases(ops, n)
    assert [len(s.gates) for s in grouped if isinstance(s, _staircase.Staircase)] == [n]
    assert len(grouped) == 2 and isinstance(grouped[1], _fusion.Permutation)
    jaxpr = str(jax.make_jaxpr(lambda s: _pipeline.run(ops, s, n))(qfx.zero_state(n)))
    assert jaxpr.count("scan[") == 1 and jaxpr.count("gather[") == 1

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_fusion, "PERMUTATION_MIN_WIRES", n + 1)
        ops = _fusion.fuse(layer, n)
        grouped = _staircase.staircases(ops, n)
        assert [len(s.gates) for s in grouped if isinstance(s, _staircase.Staircase)] == [n, n - 1]
        assert len(grouped) == 2 and isinstance(grouped[1].gates[0], qfx.CNOT)
        jaxpr = str(jax.make_jaxpr(lambda s: _pipeline.run(ops, s, n))(qfx.zero_state(n)))
        assert jaxpr.count("scan[") == 2 and "gather[" not in jaxpr


# --- permutation runs (`_fusion.Permutation`): CNOT, SWAP, X runs applied as one gather ------------------


@pytest.fixture
def gathers(monkeypatch):
    """Permutation runs of any length >= 2 at any size, so that small test circuits exercise them."""
    monkeypatch.setattr(_fusion, "PERMUTATION_MIN_RUN", 2)
    monkeypatch.setattr(_fusion, "PERMUTATION_MIN_WIRES", 1)


def _permutation_circuit(rng, n, runs=3):
    """Parameterised layers separated by random runs of CNOT, SWAP and X gates (and a Toffoli)."""
    ops = []
    for r in range(runs):
        ops += [qfx.RY(rng.uniform(-np.pi, np.pi), wires=w) for w in range(n)]
        for _ in range(rng.integers(3, 9)):
            a, b = (int(w) for w in rng.choice(n, 2, replace=False))
            ops.append([qfx.CNOT((a, b)), qfx.SWAP((a, b)), qfx.X(a)][rng.integers(3)])
        ops.append(qfx.CRZ(rng.uniform(-np.pi, np.pi), wires=(r % n, (r + 2) % n)))
        if r == 1:
            ops.append(qfx.Toffoli((0, 1, 2)))  # not affine: ends a run
    return qfx.Circuit(ops, n)


def test_permutation_runs_are_merged(gathers):
    n = 5
    gates = [qfx.CNOT((0, 1)), qfx.SWAP((1, 3)), qfx.X(4), qfx.Toffoli((0, 1, 2)), qfx.CNOT((2, 0))]
    gates += [qfx.CY((0, 1)), qfx.CNOT((3, 4)), qfx.X(0), qfx.RX(0.3, wires=2)]
    kinds = [type(op).__name__ for op in _fusion.fuse(gates, n)]
    # Toffoli is not affine and CY has phases: both end runs; a lone CNOT stays a CNOT.
    assert kinds == ["Permutation", "Toffoli", "CNOT", "CY", "Permutation", "RX"]
    many = [qfx.CNOT((w, w + 1)) for w in range(n - 1)]
    assert [type(op).__name__ for op in _fusion.fuse(many, 4 * n)] == ["Permutation"]


@pytest.mark.parametrize("seed", range(3))
def test_permutation_runs_match_reference(seed, gathers):
    rng = np.random.default_rng(300 + seed)
    n = 6
    circ = _permutation_circuit(rng, n)
    assert any(isinstance(op, _fusion.Permutation) for op in _fusion.fuse(circ.ops, n))
    psi = random_state(rng, n)
    np.testing.assert_allclose(qfx.state(circ, initial_state=psi), ref.final_state(circ, psi), atol=2e-5)
    # The adjoint of a run undoes it.
    for op in _fusion.fuse(circ.ops, n):
        if isinstance(op, _fusion.Permutation):
            back = _kernels.apply_gate(_kernels.apply_gate(psi, op, n), op.adjoint(), n)
            np.testing.assert_allclose(back, psi, atol=1e-6)


def _gradient_matches_reference(circ, method):
    """Checks the gradient of `<Z0 Z3 + X2 / 2>` with `method` against the reference's finite differences
    and returns the function it differentiated and the observable."""
    obs = qfx.Z(0) @ qfx.Z(3) + 0.5 * qfx.X(2)

    def f(c):
        return qfx.expval(c, obs, diff=method)

    expected = central_difference(lambda c: np.real(ref.expval(c, obs)), circ)
    assert tree_allclose(jax.jit(jax.grad(f))(circ), expected, atol=1e-6)
    return f, obs


@EXACT_METHODS
def test_permutation_run_gradients_hessian_and_vmap(method, gathers, x64):
    rng = np.random.default_rng(11)
    n = 5
    circ = _permutation_circuit(rng, n, runs=2)
    f, obs = _gradient_matches_reference(circ, method)
    # Second order through the gather (its transpose is a scatter): the Hessian in the first two angles.
    params, static = eqx.partition(circ, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(params)

    def g(x):
        return f(eqx.combine(jax.tree.unflatten(treedef, [x[0], x[1], *leaves[2:]]), static))

    x0 = np.array([leaves[0], leaves[1]], dtype=float)
    hess = jax.jit(jax.hessian(g))(x0)
    grad_g = jax.jit(jax.grad(g))
    fd = np.array([central_difference(lambda x, i=i: float(grad_g(x)[i]), x0) for i in range(2)])
    np.testing.assert_allclose(hess, fd, atol=1e-5)
    # Batched states: the gather is vmapped.
    states = np.stack([random_state(rng, n) for _ in range(3)])
    batched = jax.jit(jax.vmap(lambda s: qfx.state(circ, initial_state=s)))(states)
    np.testing.assert_allclose(batched, [ref.final_state(circ, s) for s in states], atol=1e-9)

    # Batched gradients: the gather and its transpose (a scatter) with the index batched like the state.
    def grad_at(s):
        return jax.grad(lambda c: qfx.expval(c, obs, diff=method, initial_state=s))(circ)

    grads = jax.jit(jax.vmap(grad_at))(states)
    for i, s in enumerate(states):
        assert tree_allclose(jax.tree.map(lambda g, i=i: g[i], grads), jax.jit(grad_at)(s), atol=1e-9)


def test_vmapped_permutation_run_gathers_per_batch(gathers):
    """Under vmap the gather's index is batched like the state, so JAX emits a gather with batching
    dimensions, which XLA runs in the state's own layout (with an unbatched index the batch became a slice
    dimension and the state crossed every layer transposed: 1024 vmapped HEA(8, 4) forward 7.4 -> 5.8 ms,
    value_and_grad 41 -> 27 ms)."""
    rng = np.random.default_rng(3)
    circ = _permutation_circuit(rng, 4, runs=1)
    states = np.stack([random_state(rng, 4) for _ in range(2)])
    jaxpr = jax.make_jaxpr(jax.vmap(lambda s: qfx.state(circ, initial_state=s)))(states)
    found = [  # the permutation runs' gathers (not those that pick gate matrices for fusion)
        e
        for e in equations(jaxpr.jaxpr)
        if e.primitive.name == "gather" and e.outvars[0].aval.shape == states.shape
    ]
    assert found and all(e.params["dimension_numbers"].operand_batching_dims for e in found)


# --- runs of diagonal gates (`_fusion.DiagonalGate`) ------------------------------------------------


def _diagonal_circuit(rng, n, layers=2):
    """QAOA-like layers: runs of parameterised and constant diagonal gates between dense ones."""
    ops = [qfx.H(w) for w in range(n)]
    for _ in range(layers):
        for _ in range(rng.integers(4, 9)):
            a, b, c = (int(w) for w in rng.choice(n, 3, replace=False))
            t = rng.uniform(-np.pi, np.pi)
            ops.append(
                [
                    qfx.IsingZZ(t, wires=(a, b)),
                    qfx.RZ(t, wires=a),
                    qfx.CRZ(t, wires=(b, a)),
                    qfx.MultiRZ(t, wires=(c, a, b)),
                    qfx.PhaseShift(t, wires=b),
                    qfx.CZ((a, c)),
                    qfx.S(c),
                ][rng.integers(7)]
            )
        ops += [qfx.RX(rng.uniform(-np.pi, np.pi), wires=w) for w in range(n)]
    return qfx.Circuit(ops, n)


def test_diagonal_runs_are_merged(monkeypatch):
    n = 6
    monkeypatch.setattr(_fusion, "DIAGONAL_MAX_WIRES", 3)
    gates = [qfx.IsingZZ(0.3, wires=(0, 1)), qfx.RZ(0.2, wires=2), qfx.CZ((1, 2)), qfx.PhaseShift(0.1, 3)]
    gates += [qfx.RX(0.4, wires=5), qfx.CZ((4, 5))]
    fused = _fusion.fuse(gates, n)
    # Three gates on wires {0, 1, 2}; PhaseShift(3) would make four wires: it ends the run (and is alone).
    assert [type(op).__name__ for op in fused] == ["DiagonalGate", "PhaseShift", "RX", "CZ"]
    assert fused[0].wires == (0, 1, 2)
    circ = qfx.Circuit(gates, n)
    psi = random_state(np.random.default_rng(0), n)
    np.testing.assert_allclose(qfx.state(circ, initial_state=psi), ref.final_state(circ, psi), atol=2e-6)


@pytest.mark.parametrize("max_wires", [2, 3, 8])
@pytest.mark.parametrize("seed", range(2))
def test_diagonal_runs_match_reference(seed, max_wires, monkeypatch):
    monkeypatch.setattr(_fusion, "DIAGONAL_MAX_WIRES", max_wires)
    rng = np.random.default_rng(500 + seed)
    n = 5
    circ = _diagonal_circuit(rng, n)
    merged = [op for op in _fusion.fuse(circ.ops, n) if isinstance(op, _fusion.DiagonalGate)]
    assert merged and all(len(op.wires) <= max_wires for op in merged)
    psi = random_state(rng, n)
    np.testing.assert_allclose(qfx.state(circ, initial_state=psi), ref.final_state(circ, psi), atol=2e-5)
    for op in merged:  # its adjoint undoes it
        back = _kernels.apply_gate(_kernels.apply_gate(psi, op, n), op.adjoint(), n)
        np.testing.assert_allclose(back, psi, atol=1e-6)


@EXACT_METHODS
def test_diagonal_run_gradients_and_vmap(method, x64):
    rng = np.random.default_rng(17)
    n = 5
    circ = _diagonal_circuit(rng, n)
    assert any(isinstance(op, _fusion.DiagonalGate) for op in _fusion.fuse(circ.ops, n))
    f, obs = _gradient_matches_reference(circ, method)
    # A batch of circuits, every angle shifted per circuit: each merged diagonal is computed per circuit.
    params, static = eqx.partition(circ, eqx.is_inexact_array)
    shifts = (0.0, 0.3, -0.7)

    def shifted(s):
        return jax.tree.map(lambda x: x + s, params)

    batch = jax.tree.map(lambda *xs: np.stack(xs), *[shifted(s) for s in shifts])
    values = jax.jit(jax.vmap(lambda p: f(eqx.combine(p, static))))(batch)
    for s, v in zip(shifts, values, strict=True):
        np.testing.assert_allclose(v, np.real(ref.expval(eqx.combine(shifted(s), static), obs)), atol=1e-9)


# --- paired one-qubit gates (`_fusion.PairedGate`): one pass evaluated, two gates differentiated --------


def _one_qubit_layers(theta, n):
    """Per layer: a dense one-qubit gate on every wire, a diagonal one on wire 1 and a CNOT ladder;
    `theta` holds 2 n angles per layer."""
    ops = []
    for t in theta.reshape(-1, n, 2):
        ops += [qfx.Rot(t[w, 0], t[w, 1], 0.3 * w, wires=w) for w in range(n)]
        ops += [qfx.RZ(t[0, 1], wires=1)] + [qfx.CNOT((w, w + 1)) for w in range(n - 1)]
    return qfx.Circuit(ops, n)


def test_pairs_are_formed():
    n = 5
    ops = _fusion.fuse(_one_qubit_layers(np.linspace(0.1, 2.0, 4 * n), n).ops, n)
    paired = _fusion.pair_one_qubit(ops)
    kinds = [type(op).__name__ for op in paired]
    # 5 dense one-qubit blocks per layer: two pairs and one left over; the RZ joined wire 1's block.
    assert kinds.count("PairedGate") == 4 and len(paired) == len(ops) - 4
    assert all(len(set(op.wires)) == 2 for op in paired if isinstance(op, _fusion.PairedGate))
    np.testing.assert_allclose(_unitary(paired, n), _unitary(ops, n), atol=2e-6)


def test_paired_gates_evaluate_in_one_pass_and_differentiate_as_two(monkeypatch, x64):
    """Evaluated: the state of the reference, one 4x4 pass per pair (counted while tracing). Gradient,
    Hessian (forward over reverse) and vmap: equal to the unpaired circuit's (above `PAIR_MAX_WIRES`: no
    pair is formed), which runs the same two-gate passes, and the gradient to finite differences of the
    reference."""
    n = 5
    theta = np.random.default_rng(12).uniform(-np.pi, np.pi, 2 * n)
    obs = qfx.Z(0) @ qfx.Z(4) + 0.5 * qfx.X(2)

    def f(t):
        return qfx.expval(_one_qubit_layers(t, n), obs)

    calls = []
    apply_paired = _kernels.apply_paired
    monkeypatch.setattr(_kernels, "apply_paired", lambda *a: calls.append(a[3]) or apply_paired(*a))
    state = jax.jit(lambda t: qfx.state(_one_qubit_layers(t, n)))(theta)
    np.testing.assert_allclose(state, ref.final_state(_one_qubit_layers(theta, n)), atol=1e-12)
    assert len(calls) == 2
    results = {}
    for limit in (8, 0):
        monkeypatch.setattr(_fusion, "PAIR_MAX_WIRES", limit)
        calls.clear()
        results[limit] = (
            jax.jit(jax.grad(f))(theta),
            jax.jit(jax.hessian(f))(theta),
            jax.jit(jax.vmap(f))(np.stack([theta, -theta])),
        )
        assert bool(calls) == (n <= limit)
    for got, expected in zip(results[8], results[0], strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-12)
    fd = central_difference(lambda t: ref.expval(_one_qubit_layers(t, n), obs), theta)
    np.testing.assert_allclose(results[8][0], fd, atol=1e-7)


# --- matrix cotangents (`_kernels._matrix_tangent`): a staged reduction behind an optimisation barrier ----

LAYOUTS = [
    ((0,), False),
    ((3,), False),
    ((6,), False),
    ((0,), True),
    ((0, 1), True),
    ((1, 5), False),
    ((5, 6), False),
]


def _complex(rng, *shape):
    return jax.numpy.asarray(rng.normal(size=shape) + 1j * rng.normal(size=shape), jax.numpy.complex64)


@pytest.mark.parametrize("wires, rotated", LAYOUTS)
def test_matrix_tangent_equals_the_broadcast_form(wires, rotated):
    """Value, matrix cotangent and a second derivative of the staged form equal those of the plain
    broadcast-and-sum it replaces, on every layout (gate axes first, inside, last), and the staged path is
    the one taken (its cotangent goes through an optimisation barrier); a 2-qubit state takes the plain path.
    """
    n = 7
    rng = np.random.default_rng(len(wires) * 10 + wires[0])
    _, shape, axes = _kernels._layout(wires, n)
    view, m, dview = (
        _complex(rng, *shape),
        _complex(rng, 2 ** len(wires), 2 ** len(wires)),
        _complex(rng, *shape),
    )
    expected = _kernels._dense_broadcast(view, m, axes, rotated)
    np.testing.assert_allclose(_kernels._matrix_tangent(view, m, axes, rotated), expected, atol=2e-5)
    ct = _complex(rng, *expected.shape)

    def cotangent(form, v, u):
        return jax.vjp(lambda w: form(v, w, axes, rotated), u)[1](ct)[0]

    def along_view(form):  # forward over reverse: the cotangent's derivative along `dview`
        return jax.jvp(lambda v: cotangent(form, v, m), (view,), (dview,))[1]

    for check in (lambda f: cotangent(f, view, m), along_view):
        np.testing.assert_allclose(
            check(_kernels._matrix_tangent), check(_kernels._dense_broadcast), rtol=2e-5, atol=2e-5
        )
    assert "optimization_barrier" in str(
        jax.make_jaxpr(lambda u: cotangent(_kernels._matrix_tangent, view, u))(m)
    )

    small = _complex(rng, 2, 2)
    jaxpr = jax.make_jaxpr(
        lambda u: jax.vjp(lambda w: _kernels._matrix_tangent(small, w, (0,)), u)[1](small)[0]
    )
    assert "optimization_barrier" not in str(jaxpr(m[:2, :2]))


# --- layers of one-qubit gates (`KronLayer`): evaluated gate by gate, differentiated as matrix products ---


@pytest.fixture(params=[2, 3])
def krons(request, monkeypatch):
    """Layers grouped at any size, in groups of 2 or 3 wires, so that small circuits have several groups
    and one of another size."""
    monkeypatch.setattr(_fusion, "KRON_MIN_WIRES", 1)
    monkeypatch.setattr(_fusion, "KRON_GROUP", request.param)
    return request.param


def _layered_circuit(rng, n):
    """One-qubit layers of several gate kinds (one missing a wire, one of two gates: too few to group),
    between entangling gates, and a scanned block of layers."""
    a = rng.uniform(-np.pi, np.pi, size=(4, n))
    body = qfx.repeat(
        lambda t: [qfx.RY(t[w], wires=w) for w in range(n)] + [qfx.CNOT((w, w + 1)) for w in range(n - 1)],
        rng.uniform(-np.pi, np.pi, size=(2, n)),
    )
    return qfx.Circuit(
        [qfx.U3(a[0, w], a[1, w], 0.2, wires=w) for w in range(n)]
        + [qfx.IsingZZ(0.4, wires=(0, n - 1))]
        + [qfx.RX(a[2, w], wires=w) for w in range(1, n)]  # wire 0 left out: the identity there
        + [qfx.CRY(0.7, wires=(1, 2))]
        + [qfx.Rot(a[3, 0], 0.5, -0.4, wires=0), qfx.Adjoint(qfx.RY(a[3, 1], wires=1))]
        + [qfx.Hadamard(w) for w in range(2, n)]
        + [body]
    )


def test_kron_layers_are_found(krons):
    n = 5
    ops = (
        [qfx.RY(0.1 * w, wires=w) for w in range(n)]
        + [qfx.CNOT((0, 1))]
        + [qfx.RX(0.2 * w, wires=w) for w in range(1, n)]  # a wire left out: the identity there
        + [qfx.CZ((0, 1))]
        + [qfx.RY(0.3, wires=0), qfx.RY(0.4, wires=1)]  # fewer than half the wires: left as they are
        + [qfx.CNOT((1, 2))]
        + [qfx.U3(0.1, 0.2, 0.3, wires=w) for w in (4, 3, 2, 1, 0, 1)]  # stops at the repeated wire
    )
    grouped = _fusion.kron_layers(ops, n)
    kinds = [len(op.gates) if isinstance(op, _fusion.KronLayer) else type(op).__name__ for op in grouped]
    assert kinds == [n, "CNOT", n - 1, "CZ", "RY", "RY", "CNOT", n, "U3"]
    layers = [op for op in grouped if isinstance(op, _fusion.KronLayer)]
    assert all(sum(layer.sizes) == n and layer.sizes[0] == krons for layer in layers)
    # Diagonal and permutation gates keep their cheaper passes.
    diagonal = [qfx.RZ(0.1, wires=w) for w in range(n)]
    assert _fusion.kron_layers(diagonal, n) == diagonal


def test_kron_layer_matches_reference(krons, x64):
    rng = np.random.default_rng(krons)
    n = 5
    circ = _layered_circuit(rng, n)
    psi = random_state(rng, n)
    obs = qfx.Z(0) @ qfx.Z(4) + 0.5 * qfx.X(2) - 0.3 * qfx.Y(1)
    np.testing.assert_allclose(qfx.state(circ, initial_state=psi), ref.final_state(circ, psi), atol=1e-12)

    # Reverse and forward mode, against the reference's central differences.
    def cost(c):
        return qfx.expval(c, obs, initial_state=psi)

    expected = central_difference(lambda c: np.real(ref.expval(c, obs, psi)), circ)
    assert tree_allclose(jax.grad(cost)(circ), expected, atol=1e-7)
    assert tree_allclose(jax.jacfwd(cost)(circ), expected, atol=1e-7)
    # With respect to the initial state only (the gates' tangents are symbolic zeros).
    dpsi = jax.grad(lambda p: qfx.expval(circ, obs, initial_state=p / jax.numpy.linalg.norm(p)))(psi.real)
    dpsi_ref = central_difference(lambda p: np.real(ref.expval(circ, obs, p / np.linalg.norm(p))), psi.real)
    np.testing.assert_allclose(dpsi, dpsi_ref, atol=1e-7)


def test_kron_layer_second_order_and_vmap(krons, x64, monkeypatch):
    rng = np.random.default_rng(10 + krons)
    n = 4
    thetas = rng.uniform(-np.pi, np.pi, size=(3, 2, n))
    u = random_unitary(rng, 2)

    def make(t):
        return qfx.Circuit(
            [qfx.RY(t[0, w], wires=w) for w in range(n)]
            + [qfx.CNOT((w, w + 1)) for w in range(n - 1)]
            + [qfx.RX(t[1, w], wires=w) for w in range(1, n)]
            + [qfx.QubitUnitary(u, wires=0)]  # a matrix leaf: its cotangent is complex
        )

    obs = qfx.Z(0) @ qfx.Z(3) + 0.5 * qfx.X(1)
    circuit_grad = jax.grad(lambda c: qfx.expval(c, obs))(make(thetas[0]))

    def cost(t):
        return qfx.expval(make(t), obs)

    hessian = jax.hessian(cost)(thetas[0])
    values = jax.vmap(cost)(thetas)
    grads = jax.vmap(jax.grad(cost))(thetas)
    monkeypatch.setattr(_fusion, "KRON_MIN_WIRES", n + 1)  # the same programs, gate by gate
    np.testing.assert_allclose(hessian, jax.hessian(cost)(thetas[0]), atol=1e-12)
    np.testing.assert_allclose(values, [np.real(ref.expval(make(t), obs)) for t in thetas], atol=1e-12)
    np.testing.assert_allclose(grads, jax.vmap(jax.grad(cost))(thetas), atol=1e-12)
    assert tree_allclose(circuit_grad, jax.grad(lambda c: qfx.expval(c, obs))(make(thetas[0])), atol=1e-12)


def test_kron_layer_adjoint_matches_reference(krons, x64):
    """The adjoint walks layers as matrix products too (`_walk._kron_backward`): gradients of the
    circuit and of the initial state against the reference's central differences, over layers with a
    missing wire (a group with no gate at all when groups are of 2), fixed gates and a scanned block."""
    rng = np.random.default_rng(20 + krons)
    n = 5
    circ = _layered_circuit(rng, n)
    psi = rng.normal(size=2**n)  # real: its gradient is real
    psi /= np.linalg.norm(psi)
    obs = qfx.Z(0) @ qfx.Z(4) + 0.5 * qfx.X(2) - 0.3 * qfx.Y(1)
    adjoint = qfx.diff.Adjoint()

    def cost(c, p):
        return qfx.expval(c, obs, initial_state=p / jax.numpy.linalg.norm(p), diff=adjoint)

    grads = jax.jit(jax.grad(cost, argnums=(0, 1)))(circ, psi)
    expected = central_difference(lambda c: np.real(ref.expval(c, obs, psi)), circ)
    assert tree_allclose(grads[0], expected, atol=1e-7)
    dpsi_ref = central_difference(lambda p: np.real(ref.expval(circ, obs, p / np.linalg.norm(p))), psi)
    np.testing.assert_allclose(grads[1], dpsi_ref, atol=1e-7)


def test_kron_layer_adjoint_hessian_off_the_unitary_group(krons, x64):
    """Second derivatives of the adjoint's layer walk in every direction of a `QubitUnitary`'s entries,
    those that leave the unitary group included (where `U^dagger` and `U^-1` differ), and of rotation
    angles, equal backprop's: the other groups' un-applies must cancel in the correlations for any
    invertible matrix, not only at unitary ones."""
    rng = np.random.default_rng(30 + krons)
    n = 5
    u0, direction = random_unitary(rng, 2), rng.normal(size=(2, 2)) + 1j * rng.normal(size=(2, 2))
    angles = rng.uniform(-np.pi, np.pi, size=n)

    def cost(x, diff):
        t, s = x[:n], x[n]
        layer = [qfx.RY(t[w], wires=w) for w in range(n - 1)] + [
            qfx.QubitUnitary(u0 + jax.lax.complex(s, 0.0) * direction, n - 1)
        ]
        ops = [qfx.Hadamard(w) for w in range(n)] + layer + [qfx.CNOT((w, w + 1)) for w in range(n - 1)]
        return qfx.expval(qfx.Circuit(ops + layer), qfx.X(0) @ qfx.Z(n - 1) + 0.7 * qfx.Y(2), diff=diff)

    x = np.concatenate([angles, [0.0]])
    hessian = jax.jit(jax.hessian(cost), static_argnums=1)  # one program each, not op by op
    expected = hessian(x, qfx.diff.Backprop())
    assert np.abs(expected[n]).max() > 1e-3  # the entries' direction matters
    np.testing.assert_allclose(hessian(x, qfx.diff.Adjoint()), expected, atol=1e-10)


def _count(jaxpr, name):
    """Occurrences of primitive `name` in a jaxpr, its sub-jaxprs included."""
    return sum(eqn.primitive.name == name for eqn in equations(jaxpr))


def test_hea_gradients_run_as_matrix_products():
    """At the default size, HEA's one-qubit layer is evaluated gate by gate (the forward program is the
    same as without `KronLayer`s) and differentiated as matrix products (at least ceil(n / KRON_GROUP)
    more dot_generals, forwards, and as many transposed); the gradient is the one gate by gate. The
    adjoint's backward walk takes them as products too (three per group)."""
    n = _fusion.KRON_MIN_WIRES
    groups = -(-n // _fusion.KRON_GROUP)
    thetas = np.random.default_rng(5).uniform(-np.pi, np.pi, size=(2, n))
    circ = qfx.Circuit(_hea_layer(thetas.T, n))
    obs = qfx.Z(0) + qfx.Z(n - 1)

    def cost(c):
        return qfx.expval(c, obs)

    def adjoint_cost(c):
        return qfx.expval(c, obs, diff=qfx.diff.Adjoint())

    def dots(f):
        return _count(jax.make_jaxpr(f)(circ).jaxpr, "dot_general")

    forward, backward, grads = dots(cost), dots(jax.grad(cost)), jax.grad(cost)(circ)
    adjoint, adjoint_grads = dots(jax.grad(adjoint_cost)), jax.grad(adjoint_cost)(circ)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_fusion, "KRON_MIN_WIRES", n + 1)
        assert dots(cost) == forward
        assert backward >= dots(jax.grad(cost)) + 2 * groups
        assert adjoint >= dots(jax.grad(adjoint_cost)) + 3 * groups
        assert tree_allclose(grads, jax.grad(cost)(circ), atol=1e-5)
        assert tree_allclose(adjoint_grads, grads, atol=1e-5)
