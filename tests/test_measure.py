"""Measurements against the dense reference: values, gradients by backprop, and sampling."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx._statevector import _reductions

from . import reference as ref
from .helpers import (
    ANGLE_GATES,
    central_difference,
    equations,
    random_circuit,
    random_state,
    random_unitary,
    tree_allclose,
)

N = 4
# (atol for values, dtype) per precision; x64 must be on before the circuit is built.
PRECISION = {"complex64": 1e-5, "complex128": 1e-10}


@pytest.fixture(params=sorted(PRECISION))
def precision(request):
    """Runs a test in complex64, then in complex128 (x64); yields the tolerance."""
    if request.param == "complex64":
        yield PRECISION["complex64"]
    else:
        request.getfixturevalue("x64")
        yield PRECISION["complex128"]


def _herm(rng, dim):
    a = random_unitary(rng, dim) * rng.uniform(0.5, 1.5)
    return a + a.conj().T


def _observables(rng):
    """Pauli sums with X/Y/Z words, Hermitian terms, and products, on N wires."""
    h2, h1 = _herm(rng, 4), _herm(rng, 2)
    return [
        0.5 * qfx.X(0) @ qfx.Y(2) - 0.3 * qfx.Z(1) + 0.2 * qfx.Y(3) @ qfx.Z(0) @ qfx.X(1),
        0.7 * qfx.Hermitian(h2, wires=(3, 1)) - 0.4 * qfx.X(2),
        qfx.Hermitian(h1, wires=2) @ qfx.Z(0) @ qfx.Y(3),
        qfx.Y(1),
        qfx.PauliWord({0: "X", 1: "X", 2: "Y", 3: "Z"}),
        1.5 * qfx.I(0) - qfx.Z(3),
    ]


PROBS_WIRES = [None, (2, 0), (1, 3, 0)]


@pytest.mark.parametrize("seed", [0, 1])
def test_random_circuit_matches_reference(seed, precision):
    rng = np.random.default_rng(seed)
    circ = random_circuit(rng, N, 14)
    observables = _observables(rng)
    tol = precision

    @jax.jit  # one compilation for all the measurements of this circuit
    def measure(c):
        probs = [qfx.probs(c, w) for w in PROBS_WIRES]
        dms = [qfx.density_matrix(c, w) for w in PROBS_WIRES]
        return qfx.state(c), probs, dms, qfx.expval(c, observables), qfx.var(c, observables)

    psi, probs, dms, values, variances = measure(circ)
    assert psi.dtype == (jnp.complex64 if tol > 1e-8 else jnp.complex128)
    np.testing.assert_allclose(np.asarray(psi), ref.final_state(circ), atol=tol)
    for wires, p, dm in zip(PROBS_WIRES, probs, dms, strict=True):
        np.testing.assert_allclose(np.asarray(p), ref.probs(circ, wires), atol=tol)
        dm_wires = tuple(range(N)) if wires is None else wires
        np.testing.assert_allclose(np.asarray(dm), ref.density_matrix(circ, dm_wires), atol=tol)
    assert values.shape == variances.shape == (len(observables),)
    for obs, value, variance in zip(observables, values, variances, strict=True):
        # The observables' norms reach ~5: scale the tolerance.
        np.testing.assert_allclose(float(value), ref.expval(circ, obs), atol=5 * tol)
        np.testing.assert_allclose(float(variance), ref.var(circ, obs), atol=20 * tol)


def test_eager_single_observable_matches_reference():
    rng = np.random.default_rng(1)
    circ = random_circuit(rng, N, 10)
    obs = _observables(rng)[0]
    value = qfx.expval(circ, obs)
    assert value.shape == () and value.dtype == jnp.float32
    np.testing.assert_allclose(float(value), ref.expval(circ, obs), atol=1e-5)
    np.testing.assert_allclose(np.asarray(qfx.state(circ)), ref.final_state(circ), atol=1e-5)


def test_zero_state_is_not_a_compiled_constant():
    """|0...0> is computed in the compiled program, not embedded in it as a literal of 2**n amplitudes
    (which XLA makes of `zeros().at[0].set(1)`: more compile time and a larger executable)."""
    n = 12
    layers = qfx.repeat(lambda t: [qfx.RY(t, 0), qfx.CNOT((1, n - 1))], jnp.asarray([0.1, 0.2]), num_wires=n)
    circ = qfx.Circuit([layers], n)  # the state enters the layers' loop first
    expval = jax.jit(lambda c: qfx.expval(c, qfx.Z(0)))
    assert f"[{2**n}]{{0}} constant(" not in expval.lower(circ).compile().as_text()
    np.testing.assert_allclose(float(expval(circ)), np.cos(0.3), atol=1e-6)
    np.testing.assert_array_equal(np.asarray(qfx.zero_state(3)), np.eye(8)[0])


def test_initial_state_matches_reference(precision):
    rng = np.random.default_rng(2)
    circ = random_circuit(rng, 3, 8)
    psi0 = random_state(rng, 3)
    obs = qfx.X(0) @ qfx.Z(2) + 0.5 * qfx.Y(1)
    np.testing.assert_allclose(
        np.asarray(qfx.state(circ, initial_state=psi0)), ref.final_state(circ, psi0), atol=precision
    )
    np.testing.assert_allclose(
        np.asarray(qfx.probs(circ, (2, 1), initial_state=psi0)), ref.probs(circ, (2, 1), psi0), atol=precision
    )
    np.testing.assert_allclose(
        float(qfx.expval(circ, obs, initial_state=psi0)), ref.expval(circ, obs, psi0), atol=2 * precision
    )
    np.testing.assert_allclose(
        float(qfx.var(circ, obs, initial_state=psi0)), ref.var(circ, obs, psi0), atol=5 * precision
    )


@pytest.mark.parametrize("t", [-1.3, 0.0, 0.8])
def test_analytic_values(t):
    circ = qfx.Circuit([qfx.RX(t, wires=0), qfx.H(1), qfx.CNOT(wires=(1, 2))])
    np.testing.assert_allclose(qfx.var(circ, qfx.Z(0)), np.sin(t) ** 2, atol=1e-6)
    np.testing.assert_allclose(qfx.probs(circ, 0), [np.cos(t / 2) ** 2, np.sin(t / 2) ** 2], atol=1e-6)
    # Wires 1 and 2 hold a Bell pair: each one alone is maximally mixed.
    np.testing.assert_allclose(qfx.density_matrix(circ, 2), np.eye(2) / 2, atol=1e-6)
    np.testing.assert_allclose(qfx.probs(circ, (2, 1)), [0.5, 0, 0, 0.5], atol=1e-6)


# --- gradients by backprop -----------------------------------------------------------------------


def _grad_setup(seed, n=3, depth=6):
    rng = np.random.default_rng(seed)
    circ = random_circuit(rng, n, depth, ANGLE_GATES)
    terms = [
        qfx.X(0) @ qfx.Y(n - 1),
        qfx.Z(1),
        qfx.Hermitian(_herm(rng, 2), wires=n - 1),
        qfx.Y(0) @ qfx.Y(1),
    ]
    obs = 0.5 * terms[0] - 0.8 * terms[1] + 0.3 * terms[2] + 1.2 * terms[3]
    return rng, circ, terms, obs


def test_grad_matches_finite_differences(x64):
    _, circ, terms, obs = _grad_setup(3)
    grad, grad_obs = jax.jit(jax.grad(qfx.expval, argnums=(0, 1)))(circ, obs)
    assert isinstance(grad, qfx.Circuit)
    expected = central_difference(lambda c: ref.expval(c, obs), circ)
    assert tree_allclose(grad, expected, rtol=1e-6, atol=1e-8)
    # The gradient w.r.t. the observable: expval is linear in each coefficient, whose derivative is
    # the value of its term.
    assert isinstance(grad_obs, qfx.LinearCombination)
    np.testing.assert_allclose(np.asarray(grad_obs.coeffs), [ref.expval(circ, t) for t in terms], atol=1e-10)


def test_the_zero_observable_with_shots_is_zero():
    circ = qfx.Circuit([qfx.H(0)])
    zero = qfx.LinearCombination(jnp.zeros((0,)), ())
    key = jax.random.key(0)
    assert float(qfx.expval(circ, zero, shots=10, key=key)) == 0.0
    np.testing.assert_allclose(qfx.expval(circ, [zero, qfx.X(0)], shots=10, key=key), [0.0, 1.0], atol=1e-6)


def test_var_ignores_identity_offsets():
    """var(O + c I) = var(O); in complex64, <O^2> - <O>^2 with c = 1000 once cancelled to 0.125 for a state
    whose variance is 0 (an eigenstate of O)."""
    circ = qfx.Circuit([qfx.RY(0.7, wires=0), qfx.RX(0.2, wires=1)])
    eigen = np.cos(0.7) * qfx.Z(0) + np.sin(0.7) * qfx.X(0)
    offset = eigen + 1000.0 * qfx.I(0)
    assert abs(float(qfx.var(circ, offset))) < 1e-5
    mixed = qfx.Z(1) + 0.5 * qfx.X(0) - 300.0 * qfx.I(1)
    np.testing.assert_allclose(qfx.var(circ, mixed), qfx.var(circ, qfx.Z(1) + 0.5 * qfx.X(0)), atol=1e-5)
    np.testing.assert_allclose(qfx.var(circ, [3.0 * qfx.I(0), qfx.Z(1)]), [0.0, np.sin(0.2) ** 2], atol=1e-6)


def test_grad_of_var_matches_finite_differences(x64):
    _, circ, _, obs = _grad_setup(3)
    grad = jax.jit(jax.grad(qfx.var))(circ, obs)
    expected = central_difference(lambda c: ref.var(c, obs), circ)
    assert tree_allclose(grad, expected, rtol=1e-6, atol=1e-8)


def test_grad_float32_close_to_finite_differences():
    _, circ, _, obs = _grad_setup(4, depth=4)
    grad = jax.jit(jax.grad(qfx.expval))(circ, obs)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(grad))
    expected = central_difference(lambda c: ref.expval(c, obs), circ)
    assert tree_allclose(grad, expected, rtol=1e-4, atol=1e-5)


def test_jacobian_of_list_of_observables(x64):
    _, circ, terms, obs = _grad_setup(5, depth=5)
    observables = [obs, terms[0], qfx.X(0) @ qfx.X(1)]
    jac = jax.jit(jax.jacobian(qfx.expval))(circ, observables)
    assert isinstance(jac, qfx.Circuit)
    for i, o in enumerate(observables):
        row = jax.tree.map(lambda x, i=i: x[i], jac)
        expected = central_difference(lambda c, o=o: ref.expval(c, o), circ)
        assert tree_allclose(row, expected, rtol=1e-6, atol=1e-8)


def test_hessian_matches_finite_differences_of_gradient(x64):
    circ = qfx.Circuit([qfx.RX(0.4, wires=0), qfx.CRY(-0.7, wires=(0, 1)), qfx.RZ(1.1, wires=1), qfx.H(1)])
    obs = qfx.Z(0) @ qfx.X(1) + 0.4 * qfx.Y(1)
    hess = jax.jit(jax.hessian(qfx.expval))(circ, obs)
    leaves, treedef = jax.tree.flatten(circ)
    grad_fn = jax.jit(jax.grad(qfx.expval))

    def grad_vector(values):
        c = jax.tree.unflatten(treedef, [jnp.asarray(v) for v in values])
        return np.array([float(g) for g in jax.tree.leaves(grad_fn(c, obs))])

    x = np.array([float(v) for v in leaves])
    eps = 1e-5
    fd = np.stack([(grad_vector(x + eps * e) - grad_vector(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])
    # hessian(f)(c) is a circuit of circuits: outer leaf i, inner leaf j holds d2f / dx_i dx_j.
    h = np.array([float(v) for v in jax.tree.leaves(hess)]).reshape(len(x), len(x))
    assert np.abs(h).max() > 0.1
    np.testing.assert_allclose(h, fd, atol=1e-7)
    np.testing.assert_allclose(h, h.T, atol=1e-12)


def _complex_finite_difference(f, z, eps=1e-6):
    """(df/dRe z, df/dIm z) entrywise, by central differences."""
    d_re, d_im = np.zeros(z.shape), np.zeros(z.shape)
    for idx in np.ndindex(z.shape):
        e = np.zeros(z.shape)
        e[idx] = eps
        d_re[idx] = (f(z + e) - f(z - e)) / (2 * eps)
        d_im[idx] = (f(z + 1j * e) - f(z - 1j * e)) / (2 * eps)
    return d_re, d_im


def test_grad_wrt_qubit_unitary_entries(x64):
    """JAX's convention for a real f of a complex z: grad f = df/dRe z - i df/dIm z (the conjugate of
    the usual Wirtinger-style gradient), so a gradient step z - lr * grad f descends."""
    rng = np.random.default_rng(7)
    u = random_unitary(rng, 4)
    obs = qfx.X(0) @ qfx.Z(2) - 0.6 * qfx.Y(1)

    def build(matrix):
        gate = qfx.QubitUnitary(np.eye(4), wires=(2, 0))
        circ = qfx.Circuit([qfx.H(0), qfx.RY(0.4, wires=1), gate, qfx.CNOT((0, 1))], num_wires=3)
        return eqx.tree_at(lambda c: c.ops[2].U, circ, jnp.asarray(matrix))

    grad = jax.jit(jax.grad(qfx.expval))(build(u), obs).ops[2].U
    # The reference takes any matrix, so perturbations off the unitary group are fine there.
    d_re, d_im = _complex_finite_difference(lambda m: ref.expval(build(m), obs), u)
    np.testing.assert_allclose(np.asarray(grad), d_re - 1j * d_im, atol=1e-8)


def test_grad_wrt_initial_state(x64):
    rng, circ, _, obs = _grad_setup(3)
    psi = random_state(rng, 3)
    grad = jax.jit(jax.grad(lambda p: qfx.expval(circ, obs, initial_state=p)))(jnp.asarray(psi))
    d_re, d_im = _complex_finite_difference(lambda p: ref.expval(circ, obs, initial_state=p), psi)
    np.testing.assert_allclose(np.asarray(grad), d_re - 1j * d_im, atol=1e-8)


def test_grad_of_probs_and_density_matrix(x64):
    _, circ, _, _ = _grad_setup(9)

    def f(c):
        return qfx.probs(c, (2, 0))[1] + jnp.real(qfx.density_matrix(c, (1, 2))[1, 2])

    def f_ref(c):
        return ref.probs(c, (2, 0))[1] + np.real(ref.density_matrix(c, (1, 2))[1, 2])

    grad = jax.jit(jax.grad(f))(circ)
    assert tree_allclose(grad, central_difference(f_ref, circ), rtol=1e-6, atol=1e-8)


# --- sampling ------------------------------------------------------------------------------------

# One compilation per (shots, wires), shared by the tests below.
_sample = jax.jit(qfx.sample, static_argnames=("shots", "wires"))


def _sample_circuit():
    return qfx.Circuit(
        [qfx.RY(1.1, wires=0), qfx.RX(-0.7, wires=1), qfx.CNOT((0, 2)), qfx.RY(0.5, wires=2), qfx.H(3)]
    )


def test_sample_shape_dtype_and_determinism():
    circ = _sample_circuit()
    s = qfx.sample(circ, key=jax.random.key(0), shots=50)
    assert s.shape == (50, 4) and s.dtype == jnp.int32
    assert set(np.unique(np.asarray(s))) <= {0, 1}
    np.testing.assert_array_equal(s, _sample(circ, key=jax.random.key(0), shots=50))
    assert not np.array_equal(s, _sample(circ, key=jax.random.key(1), shots=50))
    sub = _sample(circ, key=jax.random.key(0), shots=50, wires=(2, 0))
    assert sub.shape == (50, 2) and sub.dtype == jnp.int32
    assert _sample(circ, key=jax.random.key(0), shots=50, wires=1).shape == (50, 1)


def test_sample_vmap_over_keys_equals_loop():
    circ = _sample_circuit()
    keys = jax.random.split(jax.random.key(3), 4)
    batched = jax.jit(jax.vmap(lambda k: qfx.sample(circ, key=k, shots=50)))(keys)
    assert batched.shape == (4, 50, 4)
    for b, k in zip(batched, keys, strict=True):
        np.testing.assert_array_equal(b, _sample(circ, key=k, shots=50))
    # Independent batches, not copies of one.
    assert not np.array_equal(batched[0], batched[1])


@pytest.mark.parametrize("wires", [None, (2, 0)])
def test_sample_frequencies_converge_to_probs(wires):
    circ = _sample_circuit()
    shots = 20_000
    bits = np.asarray(_sample(circ, key=jax.random.key(4), shots=shots, wires=wires))
    k = bits.shape[1]
    index = bits @ (2 ** np.arange(k - 1, -1, -1))  # the first wire is the most significant bit
    freq = np.bincount(index, minlength=2**k) / shots
    p = ref.probs(circ, wires)
    # Five standard errors of a binomial frequency (plus a floor for p close to 0).
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / shots) + 1e-3)


def test_sample_draws_rare_outcomes_of_large_states():
    # 20 qubits, the last one 1 with probability 0.01, spread over 2**19 basis states of 1.9e-8 each:
    # below the rounding of one float32 cumulative sum over all 2**20 probabilities, so a draw from
    # such a sum almost never returned them.
    n, shots, p1 = 20, 100_000, 0.01
    ops = [qfx.H(w) for w in range(n - 1)] + [qfx.RY(jnp.float32(2 * np.arcsin(np.sqrt(p1))), n - 1)]
    bits = np.asarray(_sample(qfx.Circuit(ops, num_wires=n), key=jax.random.key(7), shots=shots))
    sigma = np.sqrt(p1 * (1 - p1) / shots)
    assert abs(bits[:, -1].mean() - p1) < 5 * sigma
    assert abs(bits[:, 0].mean() - 0.5) < 5 * np.sqrt(0.25 / shots)


def test_sample_never_draws_outcomes_of_zero_probability():
    # Half of the basis states have probability 0 (wire 2 stays 0); the others are skewed.
    circ = qfx.Circuit([qfx.RY(0.3, wires=0), qfx.RX(2.9, wires=1), qfx.CNOT((0, 3)), qfx.RY(0.05, wires=4)])
    bits = np.asarray(_sample(circ, key=jax.random.key(8), shots=20_000))
    assert not bits[:, 2].any()
    index = bits @ (2 ** np.arange(4, -1, -1))
    p = ref.probs(circ, None)
    assert set(np.unique(index)) <= set(np.flatnonzero(p > 0))


def test_shot_expval_within_five_sigma():
    circ = _sample_circuit()
    rng = np.random.default_rng(10)
    terms = [qfx.Z(0) @ qfx.Z(2), qfx.X(3) @ qfx.Y(1), qfx.Hermitian(_herm(rng, 2), wires=1)]
    coeffs = [0.7, -0.4, 0.5]
    obs = sum(c * t for c, t in zip(coeffs, terms, strict=True))
    shots = 4000
    estimate_fn = jax.jit(qfx.expval, static_argnames="shots")
    estimate = float(estimate_fn(circ, obs, shots=shots, key=jax.random.key(5)))
    exact = ref.expval(circ, obs)
    # Every term is measured with its own shots: the variances add.
    sigma = np.sqrt(sum(c**2 * ref.var(circ, t) for c, t in zip(coeffs, terms, strict=True)) / shots)
    assert sigma > 0.005
    assert abs(estimate - exact) < 5 * sigma
    # Shot noise is real: another key gives another estimate.
    assert float(estimate_fn(circ, obs, shots=shots, key=jax.random.key(6))) != estimate


@pytest.mark.parametrize("shots", [10**9, 2**31 - 1])
def test_shot_estimates_keep_their_spread_at_a_billion_shots(shots):
    """Over 2000 keys, the estimates of <Z> and <X> of RY(1)|0> at 10**9 and 2**31 - 1 shots spread as the
    binomial standard error sqrt((1 - <P>**2) / shots) says (float32: JAX's binomial drew 1.5x too wide
    there) and center on the exact values."""
    circ = qfx.Circuit([qfx.RY(1.0, 0)])
    keys = jax.random.split(jax.random.key(0), 2000)
    est = jax.jit(jax.vmap(lambda k: qfx.expval(circ, [qfx.Z(0), qfx.X(0)], shots=shots, key=k)))(keys)
    est = np.asarray(est, np.float64)
    for column, exact in zip(est.T, (np.cos(1.0), np.sin(1.0)), strict=True):
        sd = np.sqrt((1 - exact**2) / shots)
        assert 0.93 < column.std() / sd < 1.07  # the ratio's own standard error is ~0.016
        assert abs(column.mean() - exact) < 5 * sd / np.sqrt(len(column))


def test_backprop_through_shots_raises():
    circ = qfx.Circuit([qfx.RY(0.3, wires=0)])
    with pytest.raises(ValueError, match="cannot be differentiated"):
        jax.grad(lambda c: qfx.expval(c, qfx.Z(0), shots=10, key=jax.random.key(0)))(circ)
    # Coefficients are not sampled: the estimate stays differentiable in them.
    obs = 0.5 * qfx.Z(0)
    grad = jax.jit(jax.grad(lambda o: qfx.expval(circ, o, shots=200, key=jax.random.key(0))))(obs)
    np.testing.assert_allclose(
        float(grad.coeffs[0]), float(qfx.expval(circ, qfx.Z(0), shots=200, key=jax.random.key(0)))
    )


# --- precision of contractions ---------------------------------------------------------------------


def _dot_precisions(jaxpr) -> list:
    """The `precision` of every dot_general in `jaxpr` and the jaxprs nested in it."""
    return [eqn.params["precision"] for eqn in equations(jaxpr) if eqn.primitive.name == "dot_general"]


def test_every_contraction_asks_for_full_precision():
    # XLA's default float32 dot on NVIDIA GPUs is TF32 (10-bit mantissa): qfx asks for HIGHEST everywhere.
    # The CPU ignores the flag, so this reads the traced programs rather than comparing numbers.
    rng = np.random.default_rng(0)
    wide = qfx.QubitUnitary(random_unitary(rng, 8), wires=(0, 2, 3))  # a tensordot, not elementwise
    angles = random_circuit(rng, N, 8, ANGLE_GATES)
    circ = qfx.Circuit([*angles.ops, wide])
    obs = 0.5 * qfx.Hermitian(_herm(rng, 2), wires=1) + qfx.Z(0) @ qfx.X(3) - 0.2 * qfx.Y(2)
    m = qfx.measure(0)
    mid = qfx.Circuit([qfx.RY(0.3, 0), qfx.H(1), m, qfx.cond(m, qfx.X(1)), wide])
    tn = qfx.TensorNetwork()
    programs = {
        "state": lambda c: qfx.state(c),
        "density_matrix": lambda c: qfx.density_matrix(c, (1, 2)),
        "exact mid-circuit": lambda c: qfx.density_matrix(mid, (1, 2), mcm="exact"),
        "tensor network": lambda c: qfx.expval(c, obs, backend=tn),
    }
    for method in (qfx.diff.Backprop(), qfx.diff.Adjoint(), qfx.diff.ParameterShift(), qfx.diff.FiniteDiff()):
        programs[f"grad {type(method).__name__}"] = jax.grad(
            lambda c, d=method: qfx.expval(qfx.Circuit([*c.ops, wide]), obs, diff=d)
        )
    for name, fn in programs.items():
        precisions = _dot_precisions(jax.make_jaxpr(fn)(angles if name.startswith("grad") else circ).jaxpr)
        assert precisions, f"{name}: no contraction traced (the check would be vacuous)"
        highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
        assert all(p == highest for p in precisions), f"{name}: {precisions}"


def test_marginals_of_large_states_keep_float32_accuracy():
    # Summing out 19 wires in one float32 reduction lost digits: probs [0.00998, 0.99064] (sum 1.0006) for
    # [0.01, 0.99] at 20 qubits, <Z1 Z18> off by 1.1e-4. Compared with float64 sums of qfx's own state.
    n = 20
    theta = 2 * np.arccos(np.sqrt(0.01))
    circ = qfx.Circuit(
        [qfx.RY(0.1 + 0.05 * w, wires=w) for w in range(n - 1)] + [qfx.RY(theta, wires=n - 1)], num_wires=n
    )
    psi = np.asarray(qfx.state(circ), np.complex128).reshape((2,) * n)
    p = np.abs(psi) ** 2
    for wires in ([n - 1], [n - 1, 0], [3, 12, 17]):
        want = np.moveaxis(p, wires, range(len(wires))).reshape(2 ** len(wires), -1).sum(axis=1)
        np.testing.assert_allclose(qfx.probs(circ, wires), want, atol=1e-6, err_msg=str(wires))
    zz = np.einsum(
        "ij,i,j->",
        p.sum(axis=tuple(a for a in range(n) if a not in (1, n - 2))).reshape(2, 2),
        [1, -1],
        [1, -1],
    )
    np.testing.assert_allclose(qfx.expval(circ, qfx.Z(1) @ qfx.Z(n - 2)), zz, atol=1e-6)


def test_sample_indices_of_unnormalised_and_empty_distributions():
    # Only ratios count: unnormalised weights sample as their normalisation; a half of zero mass is never
    # entered, also when float32 flushes a subnormal total to 0 (index 3, of probability 0, came out).
    key = jax.random.key(9)
    counts = np.bincount(
        np.asarray(_reductions.sample_indices(key, jnp.asarray([3.0, 0, 1, 0]), 40_000)), minlength=4
    )
    assert counts[1] == counts[3] == 0 and abs(counts[0] / 40_000 - 0.75) < 5 * np.sqrt(0.75 * 0.25 / 40_000)
    for p in ([1e-40, 0, 0, 0], [0.0, 0, 0, 0]):
        np.testing.assert_array_equal(_reductions.sample_indices(key, jnp.asarray(p, jnp.float32), 10), 0)


def test_memory_guards_count_the_arrays_held(monkeypatch):
    # 24 KiB: one 11-wire complex64 state (16 KiB) fits, but simulating it holds two (each gate reads one
    # and writes the other); the check compared one state with the memory and let such sizes crash in XLA.
    monkeypatch.setattr(qfx._memory, "memory_limit_bytes", lambda: 3 * 2**10 * 8)
    with pytest.raises(ValueError, match=r"A 11-wire simulation .* needs 32\.0 KiB \(2 x 2\*\*11 complex64"):
        qfx.state(qfx.Circuit([qfx.H(0)], num_wires=11))
    circ = qfx.Circuit([qfx.H(w) for w in range(10)])
    assert qfx.state(circ).shape == (2**10,)
    # A density matrix of k wires has 4**k entries: refused before XLA runs out of memory.
    with pytest.raises(
        ValueError, match=r"qfx.density_matrix: the density matrix of 6 wires needs 32\.0 KiB"
    ):
        qfx.density_matrix(circ, wires=range(6))
    rho = qfx.density_matrix(circ, wires=range(5))
    np.testing.assert_allclose(rho, np.full((32, 32), 1 / 32), atol=1e-6)


def test_states_of_which_a_third_copy_would_not_fit_read_words_a_chunk_at_a_time(monkeypatch):
    """Past a memory where a third state would not fit, Pauli words are read a chunk at a time: the same
    values and gradients (against the reference and the shared-marginal path), without the flipped
    products and marginals that the shared path holds (a state or more of XLA temporaries)."""

    def pauli_sum(n):
        words = ["Z0", f"Z{n - 1}", "X3", "Y2 Z5", f"X0 Y{n - 1}", f"X1 X{n - 2} Z4", "Y0 Y1 Y2", ""]
        return qfx.LinearCombination.from_terms([(0.3 * (k + 1), w) for k, w in enumerate(words)])

    def chunked(state_bytes):
        monkeypatch.setattr(qfx._memory, "memory_limit_bytes", lambda: 3 * state_bytes - 1)

    rng = np.random.default_rng(11)
    n = 8
    circuit, H = random_circuit(rng, n, 30, ANGLE_GATES), pauli_sum(n)
    shared = jax.jit(jax.value_and_grad(lambda c: qfx.expval(c, H)))(circuit)
    monkeypatch.setattr(_reductions, "_CHUNK_WIRES", 3)  # 32 chunks of 8 amplitudes
    chunked(2**n * 8)
    got = jax.jit(jax.value_and_grad(lambda c: qfx.expval(c, H)))(circuit)
    assert np.isclose(float(got[0]), ref.expval(circuit, H), atol=1e-5)
    assert tree_allclose(got, shared, rtol=1e-5, atol=1e-5)

    monkeypatch.undo()
    n = 14
    ops = [qfx.RY(float(a), wires=i) for i, a in enumerate(rng.uniform(0, 3, n))]
    circuit = qfx.Circuit(ops + [qfx.CNOT(wires=(i, i + 1)) for i in range(n - 1)] + ops, num_wires=n)
    H = pauli_sum(n)

    def temps():
        return (
            jax.jit(lambda c: qfx.expval(c, H)).lower(circuit).compile().memory_analysis().temp_size_in_bytes
        )

    before = temps()
    chunked(2**n * 8)
    assert temps() <= before - 2**n * 8


def _ansatz(theta, n=5):
    ops = [qfx.RY(theta[i], wires=i) for i in range(n)] + [qfx.CNOT((i, i + 1)) for i in range(n - 1)]
    return qfx.Circuit(ops + [qfx.RX(theta[n + i], wires=i) for i in range(n)])


def _random_pauli_sum(rng, n, terms):
    words = {
        tuple((int(w), "XYZ"[rng.integers(3)]) for w in sorted(rng.choice(n, rng.integers(1, n + 1), False)))
        for _ in range(terms)
    }
    return sum(float(rng.normal()) * qfx.PauliWord(w) for w in sorted(words))


def test_many_unrelated_words_run_as_one_scan(monkeypatch, x64):
    # Many words flipping different wires: one step of a scan each (compiled once, however many words),
    # differentiated by its own rule. Against the reference, and the windowed marginals' plain autodiff.
    monkeypatch.setattr(_reductions, "SCAN_MIN_PASSES", 4)  # the scan from 5 groups of words on (on 5 wires)
    rng = np.random.default_rng(12)
    obs = _random_pauli_sum(rng, 5, 16) + 0.5 * qfx.Z(0) @ qfx.Z(3)  # words with and without flips
    theta = jnp.asarray(rng.uniform(-np.pi, np.pi, 10))
    calls = []
    scanned = _reductions._scanned_expvals
    monkeypatch.setattr(_reductions, "_scanned_expvals", lambda *a: calls.append(1) or scanned(*a))

    f = lambda t, o=obs: qfx.expval(_ansatz(t), o)  # noqa: E731
    assert float(f(theta)) == pytest.approx(ref.expval(_ansatz(theta), obs), abs=1e-10)
    grad = jax.jit(jax.grad(f))(theta)
    assert calls  # the scan ran
    # Inside outer traces too: closed-over word data leaked into the rule's trace there (UnexpectedTracer).
    np.testing.assert_allclose(jax.grad(jax.jit(f))(theta), grad, atol=1e-12)
    np.testing.assert_allclose(jax.grad(jax.checkpoint(f))(theta), grad, atol=1e-12)
    expected = central_difference(lambda t: ref.expval(_ansatz(t), obs), np.asarray(theta))
    np.testing.assert_allclose(grad, expected, atol=1e-7)
    # The coefficients' gradient is each word's expectation.
    coeff_grad = jax.grad(lambda o: f(theta, o))(obs).coeffs
    words = [ref.expval(_ansatz(theta), t) for t in obs.terms]
    np.testing.assert_allclose(coeff_grad, words, atol=1e-10)
    hessian = jax.jit(jax.hessian(f))(theta)
    forward = jax.jit(jax.jacfwd(jax.jacfwd(f)))(theta)
    values = jax.jit(jax.vmap(f))(jnp.stack([theta, -theta]))
    monkeypatch.setattr(_reductions, "SCAN_MIN_PASSES", 10**9)  # the windowed marginals instead
    calls.clear()
    np.testing.assert_allclose(hessian, jax.jit(jax.hessian(f))(theta), atol=1e-9)
    np.testing.assert_allclose(forward, hessian, atol=1e-9)
    np.testing.assert_allclose(values, [f(theta), f(-theta)], atol=1e-10)
    assert not calls


def test_scanned_words_in_complex64_and_the_adjoint(monkeypatch):
    monkeypatch.setattr(_reductions, "SCAN_MIN_PASSES", 4)
    rng = np.random.default_rng(13)
    obs = _random_pauli_sum(rng, 5, 16)
    theta = jnp.asarray(rng.uniform(-np.pi, np.pi, 10), jnp.float32)
    exact = ref.expval(_ansatz(theta), obs)
    assert float(qfx.expval(_ansatz(theta), obs)) == pytest.approx(exact, abs=1e-5)
    backprop = jax.jit(jax.grad(lambda t: qfx.expval(_ansatz(t), obs)))(theta)
    adjoint = jax.jit(jax.grad(lambda t: qfx.expval(_ansatz(t), obs, diff=qfx.diff.Adjoint())))(theta)
    np.testing.assert_allclose(adjoint, backprop, atol=1e-5)


def test_variance_of_many_words(monkeypatch, x64):
    # O|psi> of many words is a scan too (the variance, and mixed states' expectations in exact mode).
    monkeypatch.setattr(_reductions, "SCAN_MIN_PASSES", 4)
    rng = np.random.default_rng(14)
    obs = _random_pauli_sum(rng, 5, 16) - 0.7 * qfx.Z(1) @ qfx.Z(4)  # words with and without flips
    assert len(obs.terms) > _reductions.SCAN_MIN_PASSES
    theta = jnp.asarray(rng.uniform(-np.pi, np.pi, 10))
    f = jax.jit(lambda t: qfx.var(_ansatz(t), obs))
    assert float(f(theta)) == pytest.approx(ref.var(_ansatz(theta), obs), abs=1e-10)
    expected = central_difference(lambda t: ref.var(_ansatz(t), obs), np.asarray(theta))
    np.testing.assert_allclose(
        jax.jit(jax.grad(lambda t: qfx.var(_ansatz(t), obs)))(theta), expected, atol=1e-7
    )
    # Measuring wire 2, then X on wire 0 if it read 1: the mixture of the two projected branches.
    m = qfx.measure(2)
    circ = qfx.Circuit([*_ansatz(theta).ops, m, qfx.cond(m, qfx.X(0))])
    t = ref.final_state(_ansatz(theta)).reshape((2,) * 5)
    exact = 0.0
    for b, after in ((0, qfx.I(0)), (1, qfx.X(0))):
        branch = np.zeros_like(t)
        branch[:, :, b] = t[:, :, b]
        exact += ref.expval(qfx.Circuit([after], num_wires=5), obs, initial_state=branch.reshape(-1))
    assert float(qfx.expval(circ, obs, mcm="exact")) == pytest.approx(exact, abs=1e-10)


def test_shot_estimates_of_many_words():
    # Each word is measured on its own with `shots` samples: its +1 count is binomial around (1 + <P>) / 2
    # (drawn from the exact values, with no rotated state per word). Mean and variance over many keys.
    rng = np.random.default_rng(15)
    obs = _random_pauli_sum(rng, 5, 40) + 0.5 * qfx.Z(0) @ qfx.Z(3) + 0.3 * qfx.Hermitian(_herm(rng, 2), 2)
    theta = jnp.asarray(rng.uniform(-np.pi, np.pi, 10), jnp.float32)
    shots, runs = 500, 400
    keys = jax.random.split(jax.random.key(16), runs)
    estimates = np.asarray(
        jax.jit(jax.vmap(lambda k: qfx.expval(_ansatz(theta), obs, shots=shots, key=k)))(keys)
    )
    circ = _ansatz(theta)
    variance = (
        sum(float(c) ** 2 * ref.var(circ, t) for c, t in zip(obs.coeffs, obs.terms, strict=True)) / shots
    )
    assert abs(estimates.mean() - ref.expval(circ, obs)) < 5 * np.sqrt(variance / runs)
    # The sample variance of 400 estimates: within 30% of the true one (four standard errors of 7%).
    assert estimates.var(ddof=1) == pytest.approx(variance, rel=0.3)
