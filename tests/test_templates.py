"""Templates: each against its expansion written here again from the documented definition (gate matrices
from the dense reference, embedded with np.kron), analytic values, and central differences."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx

from . import reference as ref
from .helpers import random_state

T = qfx.templates


def _apply(spec, n, psi=None):
    """The reference state after `spec`, a list of (gate name, parameters, wires), from |0...0> or `psi`."""
    state = np.zeros(2**n, complex) if psi is None else np.asarray(psi, complex)
    if psi is None:
        state[0] = 1
    for name, params, wires in spec:
        u = ref.gate_matrix(name, [float(p) for p in params], len(wires))
        state = ref.embed(u, wires, n) @ state
    return state


def _state(ops, n):
    return np.asarray(qfx.state(qfx.Circuit(ops, num_wires=n)), complex)


# --- the expansions, from the definitions (PennyLane's documentation) ------------------------------------


def _strong_spec(w, wires, ranges, gate="CNOT"):
    n = len(wires)
    spec = []
    for layer in range(w.shape[0]):
        spec += [("Rot", w[layer, i], (wires[i],)) for i in range(n)]
        if n > 1:
            spec += [(gate, (), (wires[i], wires[(i + ranges[layer]) % n])) for i in range(n)]
    return spec


def _basic_spec(w, wires, rotation="RX"):
    n = len(wires)
    ring = [] if n < 2 else [(0, 1)] if n == 2 else [(i, (i + 1) % n) for i in range(n)]
    spec = []
    for layer in range(w.shape[0]):
        spec += [(rotation, (w[layer, i],), (wires[i],)) for i in range(n)]
        spec += [("CNOT", (), (wires[a], wires[b])) for a, b in ring]
    return spec


def _two_design_spec(init, w, wires):
    n = len(wires)
    spec = [("RY", (init[i],), (wires[i],)) for i in range(n)]
    for layer in range(w.shape[0]):
        k = 0
        for start in (0, 1):  # even pairs, then odd pairs
            for a in range(start, n - 1, 2):
                spec += [("CZ", (), (wires[a], wires[a + 1]))]
                spec += [("RY", (w[layer, k, 0],), (wires[a],)), ("RY", (w[layer, k, 1],), (wires[a + 1],))]
                k += 1
    return spec


def _iqp_spec(x, wires, repeats, pairs):
    spec = []
    for _ in range(repeats):
        for i, w in enumerate(wires):
            spec += [("Hadamard", (), (w,)), ("RZ", (x[i],), (w,))]
        spec += [("MultiRZ", (x[wires.index(a)] * x[wires.index(b)],), (a, b)) for a, b in pairs]
    return spec


# --- embeddings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("rotation", ["X", "Y", "Z"])
def test_angle_embedding(rotation):
    x = np.array([0.3, -1.1, 0.7])
    psi = random_state(np.random.default_rng(1), 4)
    ops = T.AngleEmbedding(x, wires=[3, 0, 2], rotation=rotation)
    got = np.asarray(qfx.state(qfx.Circuit(ops, num_wires=4), initial_state=psi))
    expected = _apply([("R" + rotation, (x[i],), (w,)) for i, w in enumerate([3, 0, 2])], 4, psi)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_angle_embedding_analytic_and_fewer_features_than_wires():
    x = jnp.array([0.3, -1.1])
    circ = qfx.Circuit(T.AngleEmbedding(x, wires=range(3), rotation="Y"))
    assert len(circ.ops) == 2 and circ.num_wires == 2
    np.testing.assert_allclose(qfx.expval(circ, [qfx.Z(0), qfx.Z(1)]), np.cos(x), atol=1e-6)


def test_amplitude_embedding_pads_normalises_and_prepares_the_state():
    f = np.array([1.0 + 2j, -0.5, 3.0])
    ops = T.AmplitudeEmbedding(f, wires=(2, 0), pad_with=0.5j, normalize=True)
    assert [type(op) for op in ops] == [qfx.StatePrep]
    expected = np.append(f, 0.5j) / np.linalg.norm(np.append(f, 0.5j))
    got = _state(ops, 3).reshape(2, 2, 2)  # wire 2 holds the first bit of the features
    np.testing.assert_allclose(got[:, 0, :].T.reshape(-1), expected, atol=1e-6)
    np.testing.assert_allclose(got[:, 1, :], 0, atol=1e-6)


@pytest.mark.parametrize("first", [0.0, 0.4])  # 0: the reflection's phase is not defined there
def test_amplitude_embedding_gradient_matches_finite_differences(first):
    x = np.array([first, 0.3, -0.4, 0.5])
    obs = qfx.Z(0) + 0.5 * qfx.X(0) @ qfx.Y(1) - 0.3 * qfx.X(1)
    m = ref.observable_matrix(obs, 2)

    def exact(x):
        psi = x / np.linalg.norm(x)
        return float(np.real(psi @ m @ psi))

    expected = np.array([(exact(x + e) - exact(x - e)) / 2e-6 for e in 1e-6 * np.eye(4)])
    for grad in _AMPLITUDE_GRADS:
        np.testing.assert_allclose(grad(jnp.asarray(x, jnp.float32), obs), expected, atol=2e-4)


def _amplitude_expval(x, obs, diff):
    return qfx.expval(qfx.Circuit(T.AmplitudeEmbedding(x, range(2), normalize=True)), obs, diff=diff)


# Shared by the parametrised cases: one compilation per method.
_AMPLITUDE_GRADS = [
    jax.jit(jax.grad(lambda x, obs, d=d: _amplitude_expval(x, obs, d)))
    for d in (qfx.diff.Auto(), qfx.diff.Adjoint())
]


def test_state_prep_takes_every_basis_state_and_refuses_unnormalised_input():
    for index in range(4):  # state[0] = 0 (a phase set to 1) and |0...0> itself
        psi = np.eye(4)[index]
        u = np.asarray(qfx.StatePrep(psi, wires=(0, 1)).matrix(), complex)
        np.testing.assert_allclose(u.conj().T @ u, np.eye(4), atol=1e-6)
        np.testing.assert_allclose(u[:, 0], psi, atol=1e-6)
    run = eqx.filter_jit(lambda f: qfx.state(qfx.Circuit(T.AmplitudeEmbedding(f, range(2)))))
    np.testing.assert_allclose(run(jnp.array([0.6, 0, 0, 0.8])), [0.6, 0, 0, 0.8], atol=1e-6)
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"StatePrep\(wires=\(0, 1\)\): the state is not norm"):
        run(jnp.ones(4))


@pytest.mark.parametrize("features", [5, [1, 0, 1], np.array([True, False, True])])
def test_basis_embedding(features):
    ops = T.BasisEmbedding(features, wires=(3, 1, 0))
    assert all(isinstance(op, qfx.PauliX) for op in ops)
    p = np.asarray(qfx.probs(qfx.Circuit(ops, num_wires=4)))
    assert p[0b1001] == 1  # wires 3 and 0 set


def test_basis_embedding_of_traced_bits():
    run = jax.jit(jax.vmap(lambda b: qfx.probs(qfx.Circuit(T.BasisEmbedding(b, wires=range(3))))))
    bits = jnp.array([[1, 0, 1], [0, 1, 1], [0, 0, 0]])
    np.testing.assert_array_equal(np.argmax(run(bits), axis=1), [5, 3, 0])
    np.testing.assert_allclose(np.max(run(bits), axis=1), 1)
    checked = eqx.filter_jit(lambda b: qfx.state(qfx.Circuit(T.BasisEmbedding(b, wires=range(2)))))
    with pytest.raises(eqx.EquinoxRuntimeError, match="BasisEmbedding: bits must be 0 or 1"):
        checked(jnp.array([0, 2]))


@pytest.mark.parametrize(("repeats", "pattern"), [(1, None), (2, [(2, 0), (1, 2)])])
def test_iqp_embedding(repeats, pattern):
    x = np.array([0.4, -0.9, 1.3])
    wires = [0, 1, 2]
    pairs = list(itertools.combinations(wires, 2)) if pattern is None else pattern
    ops = T.IQPEmbedding(x, wires, n_repeats=repeats, pattern=pattern)
    np.testing.assert_allclose(_state(ops, 3), _apply(_iqp_spec(x, wires, repeats, pairs), 3), atol=1e-6)


# --- layered templates ---------------------------------------------------------------------------------


def test_shapes_are_pennylanes():
    assert T.StronglyEntanglingLayers.shape(n_layers=3, n_wires=4) == (3, 4, 3)
    assert T.BasicEntanglerLayers.shape(n_layers=3, n_wires=4) == (3, 4)
    assert T.SimplifiedTwoDesign.shape(n_layers=3, n_wires=4) == [(4,), (3, 3, 2)]
    assert T.AllSinglesDoubles.shape([[0, 2], [1, 3]], [[0, 1, 2, 3]]) == (3,)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_basic_entangler_layers(n):
    w = np.random.default_rng(n).uniform(-3, 3, T.BasicEntanglerLayers.shape(2, n))
    wires = [2, 0, 1][:n]
    ops = T.BasicEntanglerLayers(w, wires, rotation=qfx.RY)
    assert [type(op) for op in ops] == [qfx.Repeat] and ops[0].length == 2
    np.testing.assert_allclose(_state(ops, 3), _apply(_basic_spec(w, wires, "RY"), 3), atol=1e-6)


@pytest.mark.parametrize(
    ("n", "layers", "ranges", "gate", "blocks"),
    [
        (3, 5, None, "CNOT", (2, 1)),
        (4, 3, (1, 1, 1), "CZ", (3,)),
        (4, 4, (3, 2, 3, 2), "CNOT", (2,)),
        (1, 2, None, "CNOT", (2,)),
    ],
)
def test_strongly_entangling_layers(n, layers, ranges, gate, blocks):
    w = np.random.default_rng(layers).uniform(-3, 3, T.StronglyEntanglingLayers.shape(layers, n))
    wires = [3, 0, 2, 1][:n]
    ops = T.StronglyEntanglingLayers(w, wires, ranges=ranges, imprimitive=getattr(qfx, gate))
    # Grouped by the period of the ranges: one block of whole periods, one of the layers left over.
    assert all(isinstance(op, qfx.Repeat) for op in ops) and tuple(op.length for op in ops) == blocks
    default = [(layer % (n - 1)) + 1 for layer in range(layers)] if n > 1 else [0] * layers
    spec = _strong_spec(w, wires, default if ranges is None else ranges, gate)
    psi = random_state(np.random.default_rng(0), 4)
    got = np.asarray(qfx.state(qfx.Circuit(ops, num_wires=4), initial_state=psi))
    np.testing.assert_allclose(got, _apply(spec, 4, psi), atol=2e-6)


@pytest.mark.parametrize("n", [1, 3, 4])
def test_simplified_two_design(n):
    init_shape, shape = T.SimplifiedTwoDesign.shape(2, n)
    rng = np.random.default_rng(n)
    init, w = rng.uniform(-3, 3, init_shape), rng.uniform(-3, 3, shape)
    ops = T.SimplifiedTwoDesign(init, w, range(n))
    np.testing.assert_allclose(
        _state(ops, n), _apply(_two_design_spec(init, w, list(range(n))), n), atol=2e-6
    )


def test_composition_gradients_and_one_compilation():
    """Embedding + ansatz in one circuit: gradients in the inputs and the weights under jit against
    central differences of the reference; new values reuse the compiled program (vmap over traced inputs:
    test_basis_embedding_of_traced_bits)."""
    n, traces = 3, []
    obs = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(2)

    def f(x, w):
        traces.append(1)
        circ = qfx.Circuit(
            [*T.AngleEmbedding(x, wires=range(n)), *T.StronglyEntanglingLayers(w, wires=range(n))]
        )
        return qfx.expval(circ, obs)

    def exact(x, w):
        psi = _apply([("RX", (x[i],), (i,)) for i in range(n)] + _strong_spec(w, list(range(n)), [1, 2]), n)
        return float(np.real(psi.conj() @ ref.observable_matrix(obs, n) @ psi))

    rng = np.random.default_rng(4)
    x, w = rng.uniform(-2, 2, n), rng.uniform(-3, 3, T.StronglyEntanglingLayers.shape(2, n))
    grad = jax.jit(jax.grad(f, argnums=(0, 1)))
    gx, gw = grad(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32))
    eps = 1e-6
    ex = [(exact(x + e, w) - exact(x - e, w)) / (2 * eps) for e in eps * np.eye(n)]
    ew = np.zeros(w.size)
    for k in range(w.size):
        e = np.zeros(w.size)
        e[k] = eps
        ew[k] = (exact(x, w + e.reshape(w.shape)) - exact(x, w - e.reshape(w.shape))) / (2 * eps)
    np.testing.assert_allclose(gx, ex, atol=2e-5)
    np.testing.assert_allclose(gw.reshape(-1), ew, atol=2e-5)
    count = len(traces)
    grad(jnp.asarray(x + 0.1, jnp.float32), jnp.asarray(w - 0.2, jnp.float32))
    assert len(traces) == count  # no new trace: no recompilation


# --- QAOA -----------------------------------------------------------------------------------------------


def _best_cut(edges, n):
    """The largest cut weight, by enumerating every partition."""
    return max(sum(w for i, j, w in edges if (s >> i & 1) != (s >> j & 1)) for s in range(2**n))


def test_maxcut_ground_energy_is_minus_the_best_cut():
    edges = [(0, 1, 1.0), (1, 2, 2.0), (0, 2, 0.5), (2, 3, 1.5)]
    cost, mixer = T.maxcut(edges)
    np.testing.assert_allclose(qfx.eigvalsh(cost)[0], -_best_cut(edges, 4), atol=1e-5)
    np.testing.assert_allclose(qfx.matrix(mixer), ref.observable_matrix(sum(qfx.X(i) for i in range(4)), 4))
    repeated, _ = T.maxcut([(0, 1), (1, 0), (1, 2)])  # the edge (0, 1) twice: weight 2
    np.testing.assert_allclose(
        qfx.matrix(repeated), qfx.matrix(T.maxcut([(0, 1, 2.0), (1, 2)])[0]), atol=1e-6
    )


def test_cost_and_mixer_layers_are_the_time_evolutions():
    cost, mixer = T.maxcut([(0, 1, 1.0), (1, 2, 2.0), (0, 2, 0.5)])
    cost = cost + 0.3 * qfx.Z(1) - 0.2 * qfx.Z(0) @ qfx.Z(1) @ qfx.Z(2)  # one- and three-wire terms too
    gamma, alpha = 0.7, -0.4
    psi = random_state(np.random.default_rng(5), 3)
    ops = T.cost_layer(gamma, cost) + T.mixer_layer(alpha, mixer + 0.5 * qfx.X(0) @ qfx.X(2))
    got = np.asarray(qfx.state(qfx.Circuit(ops), initial_state=psi))
    u_cost = ref.expm_herm(ref.observable_matrix(cost, 3), gamma)
    u_mix = ref.expm_herm(ref.observable_matrix(mixer + 0.5 * qfx.X(0) @ qfx.X(2), 3), alpha)  # commuting
    expected = u_mix @ u_cost @ psi
    phase = np.vdot(got, expected) / abs(np.vdot(got, expected))  # the identity term: a global phase
    np.testing.assert_allclose(got * phase, expected, atol=2e-6)


def test_qaoa_layers_as_a_repeat_block_differentiate():
    cost, mixer = T.maxcut([(0, 1), (1, 2), (0, 2)])

    def energy(gammas, alphas):
        layers = qfx.repeat(lambda g, a: T.cost_layer(g, cost) + T.mixer_layer(a, mixer), gammas, alphas)
        return qfx.expval(qfx.Circuit([qfx.H(0), qfx.H(1), qfx.H(2), layers]), cost)

    def exact(gammas, alphas):
        psi = np.full(8, 8**-0.5, complex)
        for g, a in zip(gammas, alphas, strict=True):
            psi = (
                ref.expm_herm(ref.observable_matrix(mixer, 3), a)
                @ ref.expm_herm(ref.observable_matrix(cost, 3), g)
                @ psi
            )
        return float(np.real(psi.conj() @ ref.observable_matrix(cost, 3) @ psi))

    g, a = np.array([0.4, 0.9]), np.array([0.3, -0.2])
    np.testing.assert_allclose(energy(jnp.asarray(g), jnp.asarray(a)), exact(g, a), atol=1e-5)
    grad = jax.grad(energy)(jnp.asarray(g), jnp.asarray(a))
    eps = 1e-6
    expected = [(exact(g + e, a) - exact(g - e, a)) / (2 * eps) for e in eps * np.eye(2)]
    np.testing.assert_allclose(grad, expected, atol=5e-5)


# --- chemistry ----------------------------------------------------------------------------------------


def test_excitations_by_counting():
    assert T.excitations(2, 4) == ([[0, 2], [1, 3]], [[0, 1, 2, 3]])  # PennyLane's documented example
    singles, doubles = T.excitations(4, 12)
    up_occ, up_empty = 2, 4  # spin orbitals alternate up (even) and down (odd)
    assert len(singles) == 2 * up_occ * up_empty
    same = 2 * (1 * 6)  # both up (or both down): C(2,2) * C(4,2)
    mixed = (up_occ * up_occ) * (up_empty * up_empty)  # one up and one down
    assert len(doubles) == same + mixed
    for r, p in singles:
        assert r < 4 <= p and (r - p) % 2 == 0
    flips, _ = T.excitations(2, 4, delta_sz=-1)  # an up electron into a down orbital
    assert flips == [[0, 3]]


def test_all_singles_doubles():
    singles, doubles = T.excitations(2, 6)
    w = np.random.default_rng(6).uniform(-2, 2, T.AllSinglesDoubles.shape(singles, doubles))
    ops = T.AllSinglesDoubles(w, range(6), [1, 1, 0, 0, 0, 0], singles, doubles)
    spec = [("PauliX", (), (0,)), ("PauliX", (), (1,))]
    spec += [("DoubleExcitation", (w[len(singles) + i],), tuple(d)) for i, d in enumerate(doubles)]
    spec += [("SingleExcitation", (w[j],), tuple(s)) for j, s in enumerate(singles)]
    np.testing.assert_allclose(_state(ops, 6), _apply(spec, 6), atol=2e-6)
    # Analytic: one double from |1100>: cos(t/2)|1100> - sin(t/2)|0011>.
    state = _state(T.AllSinglesDoubles([0.8], range(4), [1, 1, 0, 0], doubles=[[0, 1, 2, 3]]), 4)
    np.testing.assert_allclose(state[[12, 3]], [np.cos(0.4), -np.sin(0.4)], atol=1e-6)


def test_excitation_gates_analytic():
    circ = qfx.Circuit([qfx.X(0), qfx.SingleExcitation(0.3, wires=(0, 1))])
    np.testing.assert_allclose(qfx.probs(circ), [0, np.sin(0.15) ** 2, np.cos(0.15) ** 2, 0], atol=1e-6)
    circ = qfx.Circuit([qfx.X(2), qfx.X(3), qfx.DoubleExcitation(0.3, wires=(0, 1, 2, 3))])
    np.testing.assert_allclose(qfx.amplitude(circ, "1100"), np.sin(0.15), atol=1e-6)


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: T.AngleEmbedding([0.1], [0], rotation="W"), ValueError, 'rotation must be "X", "Y" or "Z"'),
        (lambda: T.AngleEmbedding(np.ones(3), [0, 1]), ValueError, "at most 2 entries"),
        (lambda: T.AngleEmbedding(np.ones(2) * 1j, [0, 1]), TypeError, "features must be real"),
        (lambda: T.AmplitudeEmbedding(np.ones(3), [0, 1]), ValueError, "expected 4 amplitudes.*pad_with=0.0"),
        (
            lambda: T.AmplitudeEmbedding(np.ones(5), [0, 1]),
            ValueError,
            r"expected 4 amplitudes for 2 wire\(s\), got 5\.",
        ),
        (lambda: T.AmplitudeEmbedding(np.ones(4), [0, 1]), ValueError, "not normalised.*normalize=True"),
        (lambda: T.AmplitudeEmbedding(np.zeros(4), [0, 1], normalize=True), ValueError, "nonzero norm"),
        (
            lambda: T.AmplitudeEmbedding(np.ones((2, 4)), [0, 1]),
            ValueError,
            "expected a vector of 4 amplitudes",
        ),
        (lambda: qfx.StatePrep(np.ones(2**20) / 2**10, wires=range(20)), ValueError, "its dense matrix"),
        (lambda: T.BasisEmbedding(8, [0, 1, 2]), ValueError, "8 does not fit in 3 bits"),
        (lambda: T.BasisEmbedding([1, 0], [0, 1, 2]), ValueError, r"expected 3 bits .* got shape \(2,\)"),
        (lambda: T.BasisEmbedding([1, 2], [0, 1]), ValueError, r"bits must be 0 or 1, got \[1, 2\]"),
        (lambda: T.IQPEmbedding(np.ones(2), [0, 1], n_repeats=0), ValueError, "n_repeats must be a positive"),
        (
            lambda: T.IQPEmbedding(np.ones(2), [0, 1], pattern=[(0, 5)]),
            ValueError,
            "two distinct wires among",
        ),
        (lambda: T.IQPEmbedding(np.ones(3), [0, 1]), ValueError, r"features must have shape \(2,\)"),
        (lambda: T.BasicEntanglerLayers(np.ones((2, 3)), [0, 1]), ValueError, r"shape \(n_layers, 2\)"),
        (
            lambda: T.BasicEntanglerLayers(np.ones((2, 2)), [0, 1], qfx.CNOT),
            TypeError,
            "one-parameter one-wire",
        ),
        (
            lambda: T.StronglyEntanglingLayers(np.ones((2, 2)), [0, 1]),
            ValueError,
            r"shape \(n_layers, 2, 3\)",
        ),
        (lambda: T.StronglyEntanglingLayers(np.ones((2, 3, 3)), range(3), ranges=(1,)), ValueError, "2 ints"),
        (
            lambda: T.StronglyEntanglingLayers(np.ones((1, 3, 3)), range(3), ranges=(3,)),
            ValueError,
            "divisible",
        ),
        (
            lambda: T.StronglyEntanglingLayers(np.ones((1, 2, 3)), [0, 1], imprimitive=qfx.CRX),
            TypeError,
            "two-wire",
        ),
        (
            lambda: T.SimplifiedTwoDesign(np.ones(3), np.ones((1, 3, 2)), range(3)),
            ValueError,
            r"\(n_layers, 2, 2\)",
        ),
        (
            lambda: T.SimplifiedTwoDesign(np.ones(2), np.ones((1, 2, 2)), range(3)),
            ValueError,
            r"initial_layer_w",
        ),
        (lambda: T.excitations(5, 4), ValueError, "5 electrons do not fit in 4"),
        (lambda: T.excitations(-1, 4), ValueError, "electrons must be a non-negative int"),
        (lambda: T.AllSinglesDoubles([0.1], range(4), [1, 1, 0, 0]), ValueError, "cannot both be empty"),
        (
            lambda: T.AllSinglesDoubles([0.1], range(4), [1, 1, 0, 0], [[0, 7]]),
            ValueError,
            "singles must be 2",
        ),
        (
            lambda: T.AllSinglesDoubles([0.1, 0.2], range(4), [1, 1, 0, 0], [[0, 2]]),
            ValueError,
            r"shape \(1,\)",
        ),
        (lambda: T.maxcut([]), ValueError, "no edges"),
        (lambda: T.maxcut([(0, 0)]), ValueError, "is a loop"),
        (lambda: T.maxcut([(0, 1, 2, 3)]), ValueError, r"an edge is \(i, j\)"),
        (lambda: T.maxcut([(0, -1)]), ValueError, "two non-negative int wires"),
        (lambda: T.cost_layer(0.1, qfx.X(0)), ValueError, r"must be diagonal .* X\(0\)"),
        (lambda: T.cost_layer(0.1, "Z0"), TypeError, "expected a Hamiltonian"),
        (lambda: T.mixer_layer(0.1, qfx.Hermitian(np.eye(2), 0)), ValueError, "must be Pauli words"),
        (lambda: T.mixer_layer(np.ones(2), qfx.X(0)), ValueError, r"alpha must have shape \(\)"),
    ],
)
def test_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()
