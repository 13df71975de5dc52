"""Noise channels and the density-matrix backend, against the independent NumPy density-matrix reference
(`tests/reference_mixed.py`), analytic values and central differences."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx import _control
from qfx._densitymatrix import _backend as _dm_backend, _control as _mixed
from qfx._densitymatrix._doubled import SuperBlock, doubled, representable_in_pauli_basis

from . import reference_mixed as mref
from .helpers import ANGLE_GATES, central_difference, random_unitary, tree_allclose


def _kraus_stack(rng, m, dim):
    """m random Kraus operators on `dim` dimensions: the blocks of an isometry."""
    v = random_unitary(rng, m * dim)[:, :dim]
    return v.reshape(m, dim, dim)


# Every channel: (number of wires, factory(rng, wires) -> channel at random strengths inside the range).
ALL_CHANNELS = {
    "BitFlip": (1, lambda r, w: qfx.BitFlip(r.uniform(), wires=w)),
    "PhaseFlip": (1, lambda r, w: qfx.PhaseFlip(r.uniform(), wires=w)),
    "DepolarizingChannel": (1, lambda r, w: qfx.DepolarizingChannel(r.uniform(), wires=w)),
    "AmplitudeDamping": (1, lambda r, w: qfx.AmplitudeDamping(r.uniform(), wires=w)),
    "PhaseDamping": (1, lambda r, w: qfx.PhaseDamping(r.uniform(), wires=w)),
    "GeneralizedAmplitudeDamping": (
        1,
        lambda r, w: qfx.GeneralizedAmplitudeDamping(r.uniform(), r.uniform(), wires=w),
    ),
    "ResetError": (1, lambda r, w: qfx.ResetError(*(r.dirichlet([1, 1, 1])[:2]), wires=w)),
    "PauliError": (2, lambda r, w: qfx.PauliError("XZ", r.uniform(), wires=w)),
    "ThermalT2BelowT1": (
        1,
        lambda r, w: qfx.ThermalRelaxationError(r.uniform(), 1.0, 0.7, r.uniform(), wires=w),
    ),
    "ThermalT2AboveT1": (
        1,
        lambda r, w: qfx.ThermalRelaxationError(r.uniform(), 1.0, 1.6, r.uniform(), wires=w),
    ),
    "QubitChannel1": (1, lambda r, w: qfx.QubitChannel(_kraus_stack(r, 3, 2), wires=w)),
    "QubitChannel2": (2, lambda r, w: qfx.QubitChannel(_kraus_stack(r, 2, 4), wires=w)),
}


def random_noisy_circuit(rng, n, depth, channels=ALL_CHANNELS, gates=ANGLE_GATES):
    """`depth` operations, each a gate or (one time in three) a channel, on random distinct wires."""
    gnames = [k for k, (m, _) in gates.items() if m <= n]
    cnames = [k for k, (m, _) in channels.items() if m <= n]
    ops = []
    for i in range(depth):
        table, names = (channels, cnames) if i % 3 == 2 else (gates, gnames)
        k, make = table[names[rng.integers(len(names))]]
        wires = tuple(int(w) for w in rng.choice(n, size=k, replace=False))
        ops.append(make(rng, wires if k > 1 else wires[0]))
    return qfx.Circuit(ops, num_wires=n)


def _hermitian(u):
    return u + u.conj().T


def _superop(ks):
    return sum(np.kron(k, k.conj()) for k in ks)


def test_channels_match_the_reference_formulas_and_are_cptp():
    # Kraus sets are not unique, so the channels are compared as superoperators. One program for all.
    rng = np.random.default_rng(0)
    channels = []
    for k, make in ALL_CHANNELS.values():
        channels.append(make(rng, tuple(range(k)) if k > 1 else 0))
    kraus, superops = jax.jit(
        lambda chs: ([c.kraus_matrices() for c in chs], [c.superoperator() for c in chs])
    )(channels)
    for ch, ks, s in zip(channels, kraus, superops, strict=True):
        ks = np.asarray(ks, np.complex128)
        k = len(ch.wires)
        assert np.allclose(np.einsum("aji,ajk->ik", ks.conj(), ks), np.eye(2**k), atol=1e-6), ch
        ref = [np.asarray(m, complex) for m in mref.kraus(ch)]
        assert np.allclose(_superop(ks), _superop(ref), atol=1e-6), ch
        assert np.allclose(np.asarray(s), _superop(ref), atol=1e-6), ch


# (circuit, observable, analytic value): each channel's action on a simple state.
_P, _G, _Q = 0.3, 0.36, 0.7
_ANALYTIC = [
    ([qfx.BitFlip(_P, wires=0)], qfx.Z(0), 1 - 2 * _P),
    ([qfx.H(0), qfx.PhaseFlip(_P, wires=0)], qfx.X(0), 1 - 2 * _P),
    ([qfx.H(0), qfx.DepolarizingChannel(_P, wires=0)], qfx.X(0), 1 - 4 * _P / 3),
    ([qfx.X(0), qfx.AmplitudeDamping(_G, wires=0)], qfx.Z(0), 2 * _G - 1),
    ([qfx.H(0), qfx.AmplitudeDamping(_G, wires=0)], qfx.X(0), np.sqrt(1 - _G)),
    ([qfx.H(0), qfx.PhaseDamping(_G, wires=0)], qfx.X(0), np.sqrt(1 - _G)),
    ([qfx.X(0), qfx.GeneralizedAmplitudeDamping(1.0, _Q, wires=0)], qfx.Z(0), 1 - 2 * _Q),
    ([qfx.GeneralizedAmplitudeDamping(1.0, _Q, wires=0)], qfx.Z(0), 1 - 2 * _Q),
    ([qfx.ResetError(0.1, 0.2, wires=0)], qfx.Z(0), 0.8 - 0.2),
    ([qfx.PauliError("XY", _P, wires=(0, 1))], qfx.Z(0) @ qfx.Z(1), 1.0),
    ([qfx.PauliError("XI", _P, wires=(0, 1))], qfx.Z(0), 1 - 2 * _P),
    ([qfx.X(0), qfx.ThermalRelaxationError(0.0, 100.0, 80.0, 10.0, wires=0)], qfx.Z(0), 1 - 2 * np.exp(-0.1)),
    ([qfx.H(0), qfx.ThermalRelaxationError(0.2, 100.0, 150.0, 30.0, wires=0)], qfx.X(0), np.exp(-0.2)),
    ([qfx.H(0), qfx.ThermalRelaxationError(0.2, 100.0, 50.0, 30.0, wires=0)], qfx.X(0), np.exp(-0.6)),
]


def test_each_channel_has_its_analytic_action():
    circuits = [qfx.Circuit(ops, num_wires=2) for ops, _, _ in _ANALYTIC]
    # One program for all the cases (compiling each on its own took 20 s).
    got = jax.jit(lambda cs: [qfx.expval(c, obs) for c, (_, obs, _) in zip(cs, _ANALYTIC, strict=True)])(
        circuits
    )
    for (ops, _, want), value in zip(_ANALYTIC, got, strict=True):
        assert abs(float(value) - want) < 1e-5, (ops, float(value), want)


def _measured(c, obs):
    """Every measurement of one circuit, in one program."""
    return jax.jit(
        lambda c: (
            qfx.probs(c),
            qfx.probs(c, wires=(2, 0)),
            qfx.density_matrix(c, wires=(1, 2)),
            qfx.density_matrix(c),
            qfx.expval(c, obs),
            qfx.var(c, obs),
        )
    )(c)


def _check_against_reference(c, obs, atol):
    probs, probs20, rho12, rho, ev, var = _measured(c, obs)
    ref = mref.final_rho(c)
    assert np.allclose(probs, np.real(np.diag(ref)), atol=atol)
    assert np.allclose(probs20, mref.probs(c, (2, 0)), atol=atol)
    assert np.allclose(rho12, mref.reduced(ref, (1, 2), 3), atol=atol)
    assert np.allclose(rho, ref, atol=atol)
    assert abs(float(ev) - mref.expval(c, obs)) < atol
    assert abs(float(var) - mref.var(c, obs)) < atol


def test_random_noisy_circuits_match_the_reference_complex64():
    rng = np.random.default_rng(1)
    obs = 0.5 * qfx.Z(0) @ qfx.X(2) - 0.3 * qfx.Y(1) + qfx.Hermitian(_hermitian(random_unitary(rng, 2)), 1)
    _check_against_reference(random_noisy_circuit(rng, 3, 18), obs, 1e-5)


def test_random_noisy_circuits_match_the_reference_complex128(x64):
    rng = np.random.default_rng(2)
    obs = qfx.Z(0) @ qfx.Z(1) + 0.7 * qfx.X(2)
    _check_against_reference(random_noisy_circuit(rng, 3, 18), obs, 1e-10)


def test_superoperator_blocks_on_four_wires_flat_and_repeated(x64):
    """Runs of gates and channels on one or two wires become one superoperator per block (a CNOT with the
    channels after it, one-wire blocks paired): a noisy HEA layer on n wires is n - 1 passes. Random noisy
    circuits on four wires (wires in either order, three-wire gates between the blocks), flat and as the
    layers of a `Repeat`, match the reference, values and gradients."""
    n = 4
    layer = [qfx.RY(0.3 * i, wires=i) for i in range(n)] + [qfx.RZ(0.2, wires=i) for i in range(n)]
    layer += [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)]
    model = qfx.NoiseModel([qfx.AfterGates(qfx.DepolarizingChannel(0.01, wires=0))])
    ops = doubled(model(qfx.Circuit(layer, num_wires=n)).ops, n)
    assert [(type(op), op.wires) for op in ops] == [
        (SuperBlock, (i, i + 1, i + n, i + 1 + n)) for i in range(n - 1)
    ]
    one_wire = doubled(model(qfx.Circuit(layer[: 2 * n], num_wires=n)).ops, n)
    assert [op.wires for op in one_wire] == [(0, 1, 4, 5), (2, 3, 6, 7)]

    rng = np.random.default_rng(7)
    obs = qfx.Z(0) @ qfx.X(3) + 0.5 * qfx.Y(1) - 0.25 * qfx.Z(2)
    channels = {k: v for k, v in ALL_CHANNELS.items() if not k.startswith("QubitChannel")}
    # One block on (0, 1) holding operations on (1, 0), on 1 and on 0 too.
    head = [qfx.CRX(0.4, wires=(0, 1)), qfx.DepolarizingChannel(0.1, wires=1), qfx.CNOT(wires=(1, 0))]
    head += [qfx.PauliError("XY", 0.1, wires=(1, 0)), qfx.RX(0.3, wires=0)]
    assert [type(op) for op in doubled(head, n)] == [SuperBlock]
    flat = random_noisy_circuit(rng, n, 24, channels)
    flat = qfx.Circuit(head + list(flat.ops), num_wires=n)
    assert abs(float(qfx.expval(flat, obs)) - mref.expval(flat, obs)) < 1e-10
    layers = [random_noisy_circuit(np.random.default_rng(8), n, 9, channels) for _ in range(3)]
    for i, c in enumerate(layers):  # one structure, different values in each layer
        layers[i] = jax.tree.map(lambda x, i=i: x * (1 + 0.1 * i) if eqx.is_inexact_array(x) else x, c)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
    params, rest = _params_of(qfx.Circuit([*flat.ops[:5], qfx.Repeat(stacked), *flat.ops[5:9]], num_wires=n))
    value, g = jax.jit(jax.value_and_grad(lambda p: qfx.expval(eqx.combine(p, rest), obs)))(params)
    assert abs(float(value) - mref.expval(eqx.combine(params, rest), obs)) < 1e-10
    want = central_difference(lambda p: mref.expval(eqx.combine(p, rest), obs), params, eps=1e-6)
    assert tree_allclose(g, want, rtol=1e-6, atol=1e-7)
    # Bodies without leaves (their blocks are constants, broadcast over the layers), and no layers at all.
    fixed = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1)), qfx.T(1), qfx.SWAP(wires=(1, 2))], num_wires=n)
    noise = [qfx.DepolarizingChannel(0.1, wires=0), qfx.AmplitudeDamping(0.2, wires=2)]
    c = qfx.Circuit([qfx.Repeat(fixed, length=3), *noise], num_wires=n)
    assert abs(float(qfx.expval(c, obs)) - mref.expval(c, obs)) < 1e-10
    empty = qfx.Circuit([qfx.H(0), qfx.Repeat(jax.tree.map(lambda x: x[:0], stacked)), *noise], num_wires=n)
    assert abs(float(qfx.expval(empty, obs)) - mref.expval(empty, obs)) < 1e-10


TWO_WIRE_GATES = {k: v for k, v in ANGLE_GATES.items() if v[0] <= 2}


@pytest.mark.parametrize("pauli", [True, False], ids=["pauli-basis", "superoperators"])
def test_both_representations_match_the_reference(x64, monkeypatch, pauli):
    """A circuit of gates and channels on one or two wires runs in the Pauli basis (real transfer matrices,
    Pauli expectations read off); any other runs as complex superoperators. Forced onto either, random noisy
    circuits, flat and with a `Repeat`, from |0><0| and from a given density matrix, match the reference:
    every measurement, and gradients in gate angles and strengths."""
    calls = []
    if pauli:
        run_pauli = _dm_backend.run_pauli
        monkeypatch.setattr(_dm_backend, "run_pauli", lambda *a: calls.append(None) or run_pauli(*a))
    else:
        monkeypatch.setattr(_dm_backend, "representable_in_pauli_basis", lambda ops: False)
    rng = np.random.default_rng(11)
    c = random_noisy_circuit(rng, 3, 21, gates=TWO_WIRE_GATES)
    assert representable_in_pauli_basis(c.ops)
    hermitian = qfx.Hermitian(_hermitian(random_unitary(rng, 4)), (2, 0))
    _check_against_reference(c, 0.6 * qfx.X(0) @ qfx.Y(2) - qfx.Z(1) + 0.2 * hermitian, 1e-10)
    paulis = [qfx.Z(0) @ qfx.X(1) @ qfx.Y(2) + 0.5 * qfx.Y(1), qfx.X(2) - 0.3 * qfx.Z(0), 0.0 * qfx.Z(0)]
    got = qfx.expval(c, paulis)
    assert np.allclose(got, [mref.expval(c, o) for o in paulis], atol=1e-10)

    layers = [random_noisy_circuit(np.random.default_rng(12), 3, 7, gates=TWO_WIRE_GATES) for _ in range(3)]
    for i, layer in enumerate(layers):  # one structure, different values in each layer
        layers[i] = jax.tree.map(lambda x, i=i: x * (1 - 0.1 * i) if eqx.is_inexact_array(x) else x, layer)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
    deep = qfx.Circuit([*c.ops[:4], qfx.Repeat(stacked), *c.ops[4:8]], num_wires=3)
    assert representable_in_pauli_basis(deep.ops)
    a = rng.normal(size=(8, 8)) + 1j * rng.normal(size=(8, 8))
    rho0 = a @ a.conj().T / np.trace(a @ a.conj().T)
    assert np.allclose(qfx.density_matrix(deep, initial_state=rho0), mref.final_rho(deep, rho0), atol=1e-10)
    params, rest = _params_of(deep)
    obs = paulis[0]
    value, g = jax.jit(jax.value_and_grad(lambda p: qfx.expval(eqx.combine(p, rest), obs)))(params)
    assert abs(float(value) - mref.expval(deep, obs)) < 1e-10
    want = central_difference(lambda p: mref.expval(eqx.combine(p, rest), obs), params, eps=1e-6)
    assert tree_allclose(g, want, rtol=1e-6, atol=1e-7)
    assert bool(calls) == pauli


@pytest.mark.parametrize("pauli", [True, False], ids=["pauli-basis", "superoperators"])
def test_blocks_of_one_structure_keep_their_own_values(x64, monkeypatch, pauli):
    """Blocks of one structure (the same kinds in the same places, on other wires) are multiplied together,
    batched: a ladder of such blocks, with a different angle and strength in each, flat and as the layers
    of a `Repeat`, every other CNOT reversed: the density matrix, a Pauli expectation and its gradient in
    every angle and strength match the reference."""
    if not pauli:
        monkeypatch.setattr(_dm_backend, "representable_in_pauli_basis", lambda ops: False)
    rng = np.random.default_rng(17)
    n = 6

    def ladder(t, p):
        ops = []
        for i in range(n):
            ops += [qfx.RY(t[i, 0], wires=i), qfx.BitFlip(p[i], wires=i), qfx.RX(t[i, 1], wires=i)]
        for i in range(n - 1):
            a, b = (i, i + 1) if i % 2 == 0 else (i + 1, i)
            ops += [qfx.CNOT(wires=(a, b)), qfx.DepolarizingChannel(p[i + n], wires=a)]
        return ops

    theta = jnp.asarray(rng.uniform(0, 2 * np.pi, (2, n, 2)))
    strengths = jnp.asarray(rng.uniform(0.01, 0.3, (2, 2 * n)))
    flat = qfx.Circuit(ladder(theta[0], strengths[0]), num_wires=n)
    deep = qfx.Circuit([qfx.repeat(ladder, theta, strengths, num_wires=n)], num_wires=n)
    obs = qfx.Z(0) @ qfx.X(3) + 0.7 * qfx.Y(4) - 0.2 * qfx.Z(2)
    for c in (flat, deep):
        assert np.allclose(qfx.density_matrix(c), mref.final_rho(c), atol=1e-10)
        assert abs(float(qfx.expval(c, obs)) - mref.expval(c, obs)) < 1e-10
    params, rest = _params_of(deep)
    g = jax.grad(lambda q: qfx.expval(eqx.combine(q, rest), obs))(params)
    want = central_difference(lambda q: mref.expval(eqx.combine(q, rest), obs), params, eps=1e-6)
    assert tree_allclose(g, want, rtol=1e-6, atol=1e-7)


def test_the_pauli_basis_in_complex64_and_its_fallback():
    """complex64 in the Pauli basis (real float32 coefficients) at 1e-5; a three-wire gate sends the whole
    circuit to the superoperator path, with the same values."""
    rng = np.random.default_rng(13)
    c = random_noisy_circuit(rng, 4, 30, gates=TWO_WIRE_GATES)
    obs = qfx.Z(0) @ qfx.Z(3) + 0.5 * qfx.X(1) - qfx.Y(2) @ qfx.X(0)
    assert abs(float(qfx.expval(c, obs)) - mref.expval(c, obs)) < 1e-5
    assert np.allclose(qfx.probs(c, wires=(3, 1)), mref.probs(c, (3, 1)), atol=1e-5)
    wide = qfx.Circuit([*c.ops, qfx.Toffoli(wires=(2, 0, 1)), qfx.BitFlip(0.2, wires=1)], num_wires=4)
    assert not representable_in_pauli_basis(wide.ops)
    assert abs(float(qfx.expval(wide, obs)) - mref.expval(wide, obs)) < 1e-5


def _params_of(circuit):
    """The float leaves (gate angles and channel strengths; not QubitChannel's complex stacks)."""
    return eqx.partition(circuit, lambda x: eqx.is_inexact_array(x) and not jnp.iscomplexobj(x))


def test_gradients_of_gates_and_strengths_match_central_differences(x64):
    rng = np.random.default_rng(3)
    channels = {k: v for k, v in ALL_CHANNELS.items() if not k.startswith("QubitChannel")}
    c = random_noisy_circuit(rng, 3, 15, channels)
    obs = qfx.Z(0) @ qfx.Y(1) + 0.4 * qfx.X(2)
    params, rest = _params_of(c)
    g = jax.grad(lambda p: qfx.expval(eqx.combine(p, rest), obs))(params)
    want = central_difference(lambda p: mref.expval(eqx.combine(p, rest), obs), params, eps=1e-6)
    assert tree_allclose(g, want, rtol=1e-6, atol=1e-7)


def test_parameter_shift_and_finite_diff_agree_with_backprop_on_the_density_matrix():
    rng = np.random.default_rng(4)
    channels = {k: v for k, v in ALL_CHANNELS.items() if not k.startswith("QubitChannel")}
    c = random_noisy_circuit(rng, 3, 6, channels)
    gates = [i for i, op in enumerate(c.ops) if isinstance(op, qfx.AbstractGate)]
    spec = eqx.tree_at(
        lambda t: [t.ops[i] for i in gates],
        jax.tree.map(lambda _: False, c),
        [jax.tree.map(lambda _: True, c.ops[i]) for i in gates],
    )
    params, rest = eqx.partition(c, spec)
    obs = qfx.Z(0) @ qfx.X(1) - 0.5 * qfx.Y(2)

    def grad(diff):
        return jax.grad(lambda p: qfx.expval(eqx.combine(p, rest), obs, diff=diff))(params)

    backprop = grad(qfx.diff.Backprop())
    assert tree_allclose(grad(qfx.diff.ParameterShift()), backprop, rtol=1e-4, atol=1e-5)
    assert tree_allclose(grad(qfx.diff.FiniteDiff()), backprop, rtol=1e-2, atol=1e-2)


# The strengths that have an exact shift rule (the Kraus weights affine in them, the matrices fixed).
_AFFINE_STRENGTHS = {
    "BitFlip": ("p",), "PhaseFlip": ("p",), "DepolarizingChannel": ("p",), "PauliError": ("p",),
    "GeneralizedAmplitudeDamping": ("p",),
}  # fmt: skip


def _strengths_and_angles(c):
    """A filter spec selecting the gate parameters and the affine strengths of a flat circuit."""
    spec = jax.tree.map(lambda _: False, c)
    for i, op in enumerate(c.ops):
        names = op.param_names if isinstance(op, qfx.AbstractGate) else _AFFINE_STRENGTHS.get(op.name, ())
        for name in names:
            spec = eqx.tree_at(lambda t, i=i, name=name: getattr(t.ops[i], name), spec, True)
    return spec


@pytest.mark.parametrize("seed", [5, 6])
def test_parameter_shift_differentiates_affine_strengths(x64, seed):
    rng = np.random.default_rng(seed)
    c = random_noisy_circuit(rng, 3, 12)
    assert any(op.name in _AFFINE_STRENGTHS for op in c.ops)
    params, rest = eqx.partition(c, _strengths_and_angles(c))
    obs = qfx.Z(0) @ qfx.X(1) - 0.5 * qfx.Y(2)
    f = lambda diff: lambda p: qfx.expval(eqx.combine(p, rest), obs, diff=diff)  # noqa: E731
    want = central_difference(lambda p: mref.expval(eqx.combine(p, rest), obs), params, eps=1e-6)
    assert tree_allclose(jax.grad(f(qfx.diff.ParameterShift()))(params), want, rtol=1e-6, atol=1e-7)
    # Every order: the Hessian's strength-strength block of an affine strength is zero, and the rest
    # matches backprop's.
    h_ps = jax.hessian(f(qfx.diff.ParameterShift()))(params)
    h_bp = jax.hessian(f(qfx.diff.Backprop()))(params)
    assert tree_allclose(h_ps, h_bp, rtol=1e-6, atol=1e-8)


def test_parameter_shift_strengths_of_a_noise_model_on_repeated_layers(x64):
    # One strength leaf shared by every insertion, in the layers of a Repeat: the rule shifts each
    # insertion's copy and the derivatives add up.
    def layer(t):
        return [qfx.RY(t[0], wires=0), qfx.RX(t[1], wires=1), qfx.CNOT(wires=(0, 1))]

    circ = qfx.Circuit([qfx.repeat(layer, jnp.asarray(np.random.default_rng(2).uniform(0, 3, (4, 2))))])
    model = qfx.NoiseModel(
        [qfx.AfterGates(qfx.DepolarizingChannel(0.05, wires=0)), qfx.Readout(qfx.BitFlip(0.02, wires=0))]
    )
    obs = qfx.Z(0) + 0.3 * qfx.X(0) @ qfx.Z(1)
    f = lambda diff: lambda m: qfx.expval(m(circ), obs, diff=diff)  # noqa: E731
    want = jax.grad(f(qfx.diff.Backprop()))(model)
    assert tree_allclose(jax.grad(f(qfx.diff.ParameterShift()))(model), want, rtol=1e-8, atol=1e-10)


def test_parameter_shift_strengths_are_unbiased_on_trajectories():
    c = qfx.Circuit(
        [qfx.RY(0.9, wires=0), qfx.CNOT(wires=(0, 1)), qfx.BitFlip(0.3, wires=1), qfx.RX(0.4, wires=1)]
    )
    spec = eqx.tree_at(lambda t: t.ops[2].p, jax.tree.map(lambda _: False, c), True)
    params, rest = eqx.partition(c, spec)
    obs = qfx.Z(1)

    def one(k):
        f = lambda p: qfx.expval(  # noqa: E731
            eqx.combine(p, rest), obs, backend=qfx.Trajectories(), key=k, diff=qfx.diff.ParameterShift()
        )
        return jax.grad(f)(params).ops[2].p

    samples = jax.vmap(one)(jax.random.split(jax.random.key(3), 2000))
    exact = jax.grad(lambda p: qfx.expval(eqx.combine(p, rest), obs))(params).ops[2].p
    mean, sigma = float(np.mean(samples)), float(np.std(samples)) / np.sqrt(samples.shape[0])
    assert abs(mean - float(exact)) <= 5 * sigma + 1e-6, (mean, float(exact), sigma)


# Each channel with strengths across its range, ends included (ThermalRelaxationError with t2 below,
# at and above t1, and at 2 t1).
_RANGES = [
    (lambda s: qfx.BitFlip(s[0], wires=0), [[0.0], [1e-3], [0.5], [1.0]]),
    (lambda s: qfx.PhaseFlip(s[0], wires=0), [[0.0], [0.5], [1.0]]),
    (lambda s: qfx.DepolarizingChannel(s[0], wires=0), [[0.0], [0.5], [1.0]]),
    (lambda s: qfx.AmplitudeDamping(s[0], wires=0), [[0.0], [0.5], [0.999]]),
    (lambda s: qfx.PhaseDamping(s[0], wires=0), [[0.0], [0.5], [0.999]]),
    (lambda s: qfx.GeneralizedAmplitudeDamping(s[0], s[1], wires=0), [[0.0, 0.0], [0.5, 0.3], [0.999, 1.0]]),
    (lambda s: qfx.ResetError(s[0], s[1], wires=0), [[0.0, 0.0], [0.3, 0.2], [0.5, 0.5]]),
    (lambda s: qfx.PauliError("YZ", s[0], wires=(0, 1)), [[0.0], [0.7], [1.0]]),
    (
        lambda s: qfx.ThermalRelaxationError(s[0], s[1], s[2], s[3], wires=0),
        [[0.0, 1.0, 0.5, 0.0], [0.3, 1.0, 1.0, 0.4], [0.3, 1.0, 1.5, 0.4], [1.0, 1.0, 2.0, 2.0]],
    ),
]


def test_gradients_in_strengths_are_finite_across_the_range(x64):
    def f(make, s):
        c = qfx.Circuit([qfx.RY(0.7, wires=0), qfx.RX(0.4, wires=1), make(s)], num_wires=2)
        return qfx.expval(c, qfx.X(0) + qfx.Z(0) @ qfx.Y(1))

    # One program: each channel's gradient mapped over its strengths.
    grads = jax.jit(
        lambda points: [
            jax.vmap(jax.grad(lambda s, m=m: f(m, s)))(x) for (m, _), x in zip(_RANGES, points, strict=True)
        ]
    )([jnp.asarray(x, jnp.float64) for _, x in _RANGES])
    for (_, x), g in zip(_RANGES, grads, strict=True):
        assert np.all(np.isfinite(g)), (x, g)
        assert np.any(g != 0), (x, g)  # the strengths do act


# --- transformations, the default backend, errors ------------------------------------------------------


def test_jit_vmap_grad_and_the_default_backend():
    traces = []

    @jax.jit
    def f(p, theta):
        traces.append(None)
        c = qfx.Circuit([qfx.RX(theta, wires=0), qfx.CNOT(wires=(0, 1)), qfx.AmplitudeDamping(p, wires=1)])
        return qfx.expval(c, qfx.Z(1))

    def exact(p, theta):  # |1> on wire 1 with probability sin^2(theta / 2), damped to |0> with p
        p1 = np.sin(theta / 2) ** 2 * (1 - p)
        return 1 - 2 * p1

    assert abs(float(f(0.2, 0.9)) - exact(0.2, 0.9)) < 1e-5
    assert abs(float(f(0.5, 1.3)) - exact(0.5, 1.3)) < 1e-5
    assert len(traces) == 1  # new values, no new compilation
    ps = jnp.asarray([0.0, 0.3, 0.9])
    assert np.allclose(jax.vmap(f, in_axes=(0, None))(ps, 0.7), [exact(float(p), 0.7) for p in ps], atol=1e-5)
    dp, dt = jax.grad(f, argnums=(0, 1))(0.3, 0.7)
    assert abs(float(dp) - 2 * np.sin(0.35) ** 2) < 1e-5
    assert abs(float(dt) + np.sin(0.7) * 0.7) < 1e-5
    # A circuit holding channels runs on the density matrix by default.
    c = qfx.Circuit([qfx.H(0), qfx.DepolarizingChannel(0.3, wires=0)])
    assert float(qfx.expval(c, qfx.X(0))) == float(qfx.expval(c, qfx.X(0), backend=qfx.DensityMatrix()))


def test_sample_and_shot_estimates_on_the_density_matrix():
    c = qfx.Circuit([qfx.RY(1.1, wires=0), qfx.BitFlip(0.2, wires=0), qfx.CNOT(wires=(0, 1))])
    p1 = np.sin(0.55) ** 2 * 0.8 + np.cos(0.55) ** 2 * 0.2
    shots = 20000
    s = qfx.sample(c, key=jax.random.key(0), shots=shots)
    assert s.shape == (shots, 2) and np.all(s[:, 0] == s[:, 1])
    sigma = np.sqrt(p1 * (1 - p1) / shots)
    assert abs(float(np.mean(s[:, 0])) - p1) < 5 * sigma
    est = qfx.expval(
        c, qfx.Z(0) + 0.5 * qfx.Hermitian(np.diag([1.0, -1.0]), 1), shots=shots, key=jax.random.key(1)
    )
    assert abs(float(est) - 1.5 * (1 - 2 * p1)) < 5 * 1.5 * 2 * sigma


def test_initial_states_on_the_density_matrix(x64):
    rng = np.random.default_rng(5)
    c = qfx.Circuit([qfx.RX(0.4, wires=1), qfx.PhaseDamping(0.3, wires=0), qfx.CZ(wires=(0, 1))])
    a = rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))
    rho0 = a @ a.conj().T
    rho0 /= np.trace(rho0)
    got = qfx.density_matrix(c, initial_state=rho0)
    assert np.allclose(got, mref.final_rho(c, rho0), atol=1e-10)
    psi = rng.normal(size=4) + 1j * rng.normal(size=4)
    psi /= np.linalg.norm(psi)
    assert np.allclose(qfx.density_matrix(c, initial_state=psi), mref.final_rho(c, np.outer(psi, psi.conj())))


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: qfx.BitFlip(1.5, wires=0), ValueError, r"BitFlip: p must be in \[0.0, 1.0\], got 1.5"),
        (lambda: qfx.DepolarizingChannel(-0.1, wires=0), ValueError, "DepolarizingChannel: p must be in"),
        (lambda: qfx.AmplitudeDamping(0.3j, wires=0), TypeError, "AmplitudeDamping: gamma must be real"),
        (lambda: qfx.PhaseDamping(jnp.ones(2), wires=0), ValueError, "PhaseDamping: gamma must be a scalar"),
        (lambda: qfx.GeneralizedAmplitudeDamping(0.1, 2.0, wires=0), ValueError, "p must be in"),
        (lambda: qfx.ResetError(0.6, 0.5, wires=0), ValueError, "ResetError: p0 \\+ p1 must be at most 1"),
        (
            lambda: qfx.PauliError("XA", 0.1, wires=(0, 1)),
            ValueError,
            "PauliError: operators must be a string",
        ),
        (lambda: qfx.PauliError("XY", 0.1, wires=0), ValueError, "has 2 letter"),
        (lambda: qfx.ThermalRelaxationError(0.1, 1.0, 2.5, 0.1, wires=0), ValueError, "t2 must be at most 2"),
        (lambda: qfx.ThermalRelaxationError(0.1, 0.0, 0.5, 0.1, wires=0), ValueError, "t1 must be > 0"),
        (lambda: qfx.ThermalRelaxationError(0.1, 1.0, 0.5, -1.0, wires=0), ValueError, "tq must be in"),
        (lambda: qfx.QubitChannel([np.eye(2), np.eye(2)], wires=0), ValueError, "not trace preserving"),
        (lambda: qfx.QubitChannel(np.eye(2), wires=0), ValueError, r"shape \(m, 2, 2\)"),
        (lambda: qfx.BitFlip(0.1, wires=(0, 1)), ValueError, "BitFlip acts on 1 wire"),
        (lambda: qfx.Circuit([qfx.BitFlip(0.1, wires=0)]).inverse(), ValueError, "has no inverse"),
    ],
)
def test_channel_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_traced_strengths_are_accepted():
    # Out of range under jit: not checked (a traced value), accepted as the other traced leaves are.
    f = jax.jit(lambda p: qfx.BitFlip(p, wires=0).p)
    assert float(f(0.3)) == pytest.approx(0.3)


def test_backend_errors():
    noisy = qfx.Circuit([qfx.H(0), qfx.BitFlip(0.1, wires=0)])
    both = "qfx.DensityMatrix\\(\\).*qfx.Trajectories\\(\\)"
    with pytest.raises(ValueError, match="qfx.StateVector\\(\\) cannot simulate.*" + both):
        qfx.expval(noisy, qfx.Z(0), backend=qfx.StateVector())
    with pytest.raises(ValueError, match="qfx.TensorNetwork\\(\\) cannot simulate.*" + both):
        qfx.expval(noisy, qfx.Z(0), backend=qfx.TensorNetwork())
    with pytest.raises(ValueError, match="diff=Adjoint\\(\\) works on the state vector"):
        jax.grad(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.Adjoint()))(noisy)
    with pytest.raises(
        ValueError, match="qfx.state: backend=qfx.DensityMatrix\\(\\) simulates a mixed state"
    ):
        qfx.state(noisy)
    with pytest.raises(ValueError, match="the density matrix of 20 wires .* needs"):
        qfx.expval(qfx.Circuit([qfx.BitFlip(0.1, wires=19)]), qfx.Z(0))
    with pytest.raises(ValueError, match="initial_state: expected a state vector of shape \\(2,\\)"):
        qfx.probs(noisy, initial_state=np.ones(3))
    with pytest.raises(ValueError, match="initial_state: a density matrix must be Hermitian with trace 1"):
        qfx.probs(noisy, initial_state=np.array([[1.0, 1.0], [0.0, 0.0]]))
    damped = qfx.Circuit([qfx.H(0), qfx.AmplitudeDamping(0.1, wires=0)])
    with pytest.raises(
        ValueError,
        match="AmplitudeDamping\\(wires=\\(0,\\)\\) has no shift rule for its strength 'gamma' \\(its Kraus "
        "operators are not affine in it\\).* or use diff=qfx.diff.Backprop\\(\\) or FiniteDiff\\(\\)",
    ):
        jax.grad(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.ParameterShift()))(damped)


def _measured_and_conditioned(rng, depth, gate, ancilla=False, reset=False):
    """Three runs of random noisy operations (on one or two wires each), each followed by a measurement of
    a wire w read by a cond of `gate` on another wire; and the same by the deferred-measurement principle:
    the gate controlled on w, then w dephased (PhaseFlip(0.5)), or with `reset` reset (ResetError(1, 0)).
    With `ancilla`, the first outcome is also copied to wire 3 (a CNOT), and its gate controlled on that
    copy, which later reads can control on too."""
    ops, deferred, first = [], [], None
    for k in range(3):
        segment = random_noisy_circuit(rng, 3, depth, gates=TWO_WIRE_GATES).ops
        w, t = (int(x) for x in rng.choice(3, size=2, replace=False))
        g = gate(float(rng.uniform(-3, 3)), wires=t)
        m = qfx.measure(w, reset=reset)
        ops += [*segment, m, qfx.cond(m, g)]
        if ancilla and k == 0:
            first = m
            deferred += [*segment, qfx.CNOT(wires=(w, 3)), qfx.Controlled(g, (3,))]
        else:
            deferred += [*segment, qfx.Controlled(g, (w,))]
        deferred.append(qfx.ResetError(1.0, 0.0, wires=w) if reset else qfx.PhaseFlip(0.5, wires=w))
    return ops, deferred, first


def _force_representation(monkeypatch, pauli: bool, program) -> None:
    """Programs with control flow on the density matrix: Pauli coefficients per record, or (forced) the
    complex flattened density matrix."""
    assert representable_in_pauli_basis(program.ops)
    if not pauli:
        monkeypatch.setattr(_dm_backend, "representable_in_pauli_basis", lambda ops: False)


@pytest.mark.parametrize("pauli", [True, False], ids=["pauli-basis", "superoperators"])
@pytest.mark.parametrize("seed, reset", [(0, False), (1, True)])
def test_noisy_programs_with_conditionals_match_deferred_measurement(x64, monkeypatch, pauli, seed, reset):
    # The program against its deferred form on the NumPy reference: runs of gates and channels between the
    # control steps (each run grouped in blocks).
    rng = np.random.default_rng(seed)
    ops, deferred, _ = _measured_and_conditioned(rng, 9, qfx.RY, reset=reset)
    tail = random_noisy_circuit(rng, 3, 6, gates=TWO_WIRE_GATES).ops
    program, reference = qfx.Circuit(ops + list(tail), 3), qfx.Circuit(deferred + list(tail), 3)
    _force_representation(monkeypatch, pauli, program)
    obs = qfx.Z(0) @ qfx.X(1) + 0.5 * qfx.Y(2)
    np.testing.assert_allclose(qfx.probs(program), mref.probs(reference), atol=1e-10)
    assert abs(float(qfx.expval(program, obs)) - mref.expval(reference, obs)) < 1e-10
    # Each outcome is read right after its measurement: the three share one record bit.
    assert _mixed.MixedSimulator(_control.Program(program.ops), 3).R == 1


@pytest.mark.parametrize("pauli", [True, False], ids=["pauli-basis", "superoperators"])
def test_an_outcome_read_again_later_keeps_its_record(x64, monkeypatch, pauli):
    # m0 is read again after m1 and m2 were measured and read: m0 keeps a bit of its own, m1 and m2 share
    # one. In the reference m0 is copied to an ancilla (wire 3), which the late read controls on.
    ops, deferred, first = _measured_and_conditioned(np.random.default_rng(7), 6, qfx.RX, ancilla=True)
    late = qfx.RY(0.9, wires=1)
    program = qfx.Circuit(ops + [qfx.H(0), qfx.cond(first, late)], 3)
    reference = qfx.Circuit(deferred + [qfx.H(0), qfx.Controlled(late, (3,))], 4)
    _force_representation(monkeypatch, pauli, program)
    assert _mixed.MixedSimulator(_control.Program(program.ops), 3).R == 2
    np.testing.assert_allclose(qfx.probs(program), mref.probs(reference, (0, 1, 2)), atol=1e-10)


@pytest.mark.parametrize("pauli", [True, False], ids=["pauli-basis", "superoperators"])
def test_postselection_and_while_loops_match_the_state_vector(x64, monkeypatch, pauli):
    # Without channels the mixed-state program equals the state vector's exact mode (its own code: a
    # state per record): post-selection, resets, a cond on two outcomes, a for loop with a measurement, and
    # repeat-until-success loops with and without a bound; values and forward-mode gradients.
    def layer(i, t):
        m = qfx.measure(2)
        return [qfx.RY(t[i], wires=2), m, qfx.cond(m, qfx.RX(0.3 * t[i], wires=1))]

    def program(a):
        m0, m1, r = qfx.measure(0, postselect=1), qfx.measure(1, reset=True), qfx.measure(0)
        attempt = [qfx.RY(a[2], wires=0), r]
        ops = [qfx.RY(a[0], wires=0), qfx.CNOT(wires=(0, 1)), m0, qfx.RX(a[1], wires=1), m1]
        ops += [qfx.cond(m0 ^ m1, qfx.RY(a[3], wires=2)), qfx.for_loop(2, layer, a[4:6])]
        ops += attempt + [qfx.while_loop(r, attempt, max_iterations=4), qfx.CNOT(wires=(2, 0))]
        ops += attempt + [qfx.while_loop(r, attempt)]
        return qfx.Circuit(ops, 3)

    a = jnp.asarray([0.7, 1.1, 0.9, -0.4, 0.5, 1.3])
    _force_representation(monkeypatch, pauli, program(a))
    obs = qfx.Z(0) @ qfx.X(2) + 0.5 * qfx.Y(1) - 0.2 * qfx.Z(2)

    def f(a, **kw):
        return qfx.expval(program(a), obs, **kw)

    dm, sv = f(a, backend=qfx.DensityMatrix()), f(a, mcm="exact")
    assert abs(float(dm) - float(sv)) < 1e-10
    # Forward mode: the unbounded loop is a lax.while_loop.
    dm_grad, sv_grad = jax.jacfwd(f)(a, backend=qfx.DensityMatrix()), jax.jacfwd(f)(a, mcm="exact")
    np.testing.assert_allclose(dm_grad, sv_grad, atol=1e-9)
    np.testing.assert_allclose(
        qfx.probs(program(a), backend=qfx.DensityMatrix()), qfx.probs(program(a), mcm="exact"), atol=1e-10
    )


def test_mid_circuit_measurements_and_control_flow_on_the_density_matrix():
    m = qfx.measure(0)
    noisy = qfx.Circuit([qfx.H(0), m, qfx.cond(m, qfx.X(1)), qfx.BitFlip(0.1, wires=1)])
    assert np.allclose(qfx.probs(noisy), [0.45, 0.05, 0.05, 0.45], atol=1e-6)
    # Without channels: the same as the state vector's exact mode, values and gradients.
    m1 = qfx.measure(1, reset=True)
    c = qfx.Circuit([qfx.RY(0.7, wires=1), qfx.RX(0.3, wires=0), m1, qfx.cond(m1, qfx.RY(0.5, wires=0))])

    def f(c, **kw):
        return qfx.expval(c, qfx.Z(0) + qfx.X(1), **kw)

    dm, dm_grad = jax.value_and_grad(f)(c, backend=qfx.DensityMatrix())
    sv, sv_grad = jax.value_and_grad(f)(c, mcm="exact")
    assert abs(float(dm) - float(sv)) < 1e-6
    assert tree_allclose(dm_grad, sv_grad, atol=1e-6)
    # Outcomes that nothing reads are traced out: 6 measured wires keep one density matrix, not 64.
    ops = [op for i in range(6) for op in (qfx.H(i), qfx.measure(i))] + [qfx.CNOT(wires=(0, 1))]
    sim = _mixed.MixedSimulator(_control.Program(ops), 6)
    assert sim.R == 0
    assert np.allclose(
        qfx.probs(qfx.Circuit(ops), wires=(0, 1), backend=qfx.DensityMatrix()), 0.25, atol=1e-6
    )
