"""The differentiation methods: Backprop, Adjoint, ParameterShift and FiniteDiff.

Every method is checked against the dense NumPy reference's finite differences and against the others,
for gradients, Jacobians (several observables) and Hessians, under jit, vmap(grad), grad(vmap) and
jacfwd, over scanned layers; with shots, parameter-shift is checked to be an unbiased estimator. Tests
that the custom rules ran inspect the traced program. Compilation dominates the run time, so circuits are
small and each test compiles few functions.
"""

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import qfx
from qfx._statevector import _fusion, _kernels, _walk
from qfx.diff import _finite_diff, _parameter_shift

from . import reference as ref
from .helpers import (
    ALL_GATES,
    ANGLE_GATES,
    central_difference,
    equations,
    random_circuit,
    random_state,
    random_unitary,
    tree_allclose,
)

AUTO = qfx.diff.Auto()
METHODS = {
    "backprop": qfx.diff.Backprop(),
    "adjoint": qfx.diff.Adjoint(),
    "parameter_shift": qfx.diff.ParameterShift(),
    "finite_diff": qfx.diff.FiniteDiff(),
}
# Agreement with the reference, by dtype. Finite differences are a baseline: at the default step
# h = eps**(1/3) their error is about h**2 / 6 + (rounding of f) / h.
TOL = {"complex64": 1e-5, "complex128": 1e-9}
FD_TOL = {"complex64": 2e-3, "complex128": 1e-8}


def _tol(method: str, dtype: str) -> float:
    return FD_TOL[dtype] if method == "finite_diff" else TOL[dtype]


def _dtype() -> str:
    return "complex128" if jax.config.read("jax_enable_x64") else "complex64"


# --- circuits as functions of a flat parameter vector --------------------------------------------


class Flat:
    """A circuit as a function of the flat vector of its real leaves; complex leaves stay fixed."""

    def __init__(self, circuit: qfx.Circuit):
        self.circuit = circuit
        leaves, self.treedef = jax.tree.flatten(circuit)
        self.real = [not jnp.iscomplexobj(x) for x in leaves]
        self.leaves = leaves
        self.shapes = [x.shape for x, r in zip(leaves, self.real, strict=True) if r]
        self.theta = np.concatenate(
            [np.asarray(x, np.float64).ravel() for x, r in zip(leaves, self.real, strict=True) if r]
        )

    def _build(self, theta, cast):
        sizes = [int(np.prod(s)) for s in self.shapes]
        parts = iter(
            theta[a:b].reshape(s)
            for a, b, s in zip(np.cumsum([0] + sizes)[:-1], np.cumsum(sizes), self.shapes, strict=True)
        )
        return jax.tree.unflatten(
            self.treedef, [next(parts) if r else cast(x) for x, r in zip(self.leaves, self.real, strict=True)]
        )

    def __call__(self, theta):
        """The qfx circuit (inside jit)."""
        return self._build(theta, lambda x: x)

    def reference(self, theta):
        """The same circuit with float64 / complex128 NumPy leaves, for the reference simulator."""
        return self._build(np.asarray(theta, np.float64), lambda x: np.asarray(x, np.complex128))


def _observables(rng):
    h = rng.normal(size=(2, 2)) + 1j * rng.normal(size=(2, 2))
    herm = qfx.Hermitian(h + h.conj().T, wires=1)
    h1 = 0.7 * qfx.Z(0) @ qfx.Z(1) - 0.4 * qfx.X(2) + 0.3 * qfx.Y(0) @ qfx.X(2) + 0.5 * herm
    return [h1, qfx.Z(2), qfx.X(0) @ qfx.Y(1)]


def _test_circuit(seed: int, n: int = 3, layers: int = 2) -> qfx.Circuit:
    """A random circuit of angle gates around a scanned block of random layers."""
    rng = np.random.default_rng(seed)
    head = random_circuit(rng, n, 6, ANGLE_GATES)
    layer = random_circuit(rng, n, 3, ANGLE_GATES) + qfx.Circuit([qfx.CRY(rng.uniform(-3, 3), (2, 0))], n)
    stacked = jax.tree.map(lambda x: jnp.stack([x + 0.4 * i for i in range(layers)]), layer)
    tail = random_circuit(rng, n, 4, ANGLE_GATES)
    return qfx.Circuit(head.ops + (qfx.Repeat(stacked),) + tail.ops, n)


# --- gradient and Jacobian against the reference --------------------------------------------------


def _jacobian_fn(method: str, flat: Flat, observables: tuple):
    diff = METHODS[method]
    f = lambda th: qfx.expval(flat(th), list(observables), diff=diff)  # noqa: E731
    return jax.jit(jax.jacrev(f))


@pytest.mark.parametrize("precision", ["complex64", "complex128"])
def test_jacobian_matches_reference(precision, request):
    if precision == "complex128":
        request.getfixturevalue("x64")
    flat = Flat(_test_circuit(seed=1))
    observables = tuple(_observables(np.random.default_rng(2)))
    expected = np.stack(
        [
            central_difference(lambda th, o=o: ref.expval(flat.reference(th), o), flat.theta, eps=1e-5)
            for o in observables
        ]
    )
    theta = jnp.asarray(flat.theta, jax.dtypes.canonicalize_dtype(jnp.float64))
    results = {m: np.asarray(_jacobian_fn(m, flat, observables)(theta)) for m in METHODS}
    for method, jac in results.items():
        tol = _tol(method, precision)
        assert jac.shape == (3, flat.theta.size)
        assert tree_allclose(jac, expected, rtol=tol, atol=tol), (method, np.max(np.abs(jac - expected)))
    for method in ("adjoint", "parameter_shift"):
        tol = TOL[precision]
        assert tree_allclose(results[method], results["backprop"], rtol=tol, atol=tol), method


@pytest.mark.parametrize("n, loop", [(3, False), (6, False), (6, True)])
def test_every_gate(x64, n, loop, monkeypatch):
    """Each gate of the battery once: shift rules, un-applying and differences against the reference.
    The QubitUnitary entries stay fixed (parameter-shift has no rule for them). On 3 wires fusion is made
    to absorb the two-qubit gates into dense blocks (an option, off by default); on 6 they stay as they
    are, so the adjoint's step meets every form of gate: dense matrices, diagonals and the others
    (controlled, wide Pauli rotations). With `loop`, the adjoint walks as it does on large states: as a
    loop over the gates, with the cotangents of matrices and diagonals taken from the states after each
    gate."""
    if loop:
        monkeypatch.setattr(_walk, "_LOOP_MIN_WIRES", 1)
    if n <= 4:
        monkeypatch.setattr(_fusion, "ABSORB_STRUCTURED_MAX_WIRES", n)
    forms = set()
    operator_form = _kernels.operator_form

    def recording(gate):
        out = operator_form(gate)
        forms.add(out[0])
        return out

    monkeypatch.setattr(_walk, "operator_form", recording)
    rng = np.random.default_rng(3)
    ops = []
    for k, make in ALL_GATES.values():
        if k > n:  # DoubleExcitation on 3 wires
            continue
        wires = tuple(int(w) for w in rng.permutation(n)[:k])
        ops.append(make(rng, wires if k > 1 else wires[0]))
    if n <= 4:  # the structured gates really are absorbed: fewer blocks than with the default policy
        assert len(_fusion.fuse(ops, n)) < len(_fusion.fuse(ops, n, absorb_below=0))
    flat = Flat(qfx.Circuit(ops, n))
    obs = _observables(rng)[0]
    expected = central_difference(lambda th: ref.expval(flat.reference(th), obs), flat.theta, eps=1e-5)
    theta = jnp.asarray(flat.theta)
    # The methods with per-gate logic; `loop` changes only the adjoint's walk.
    for method in ("adjoint",) if loop else ("adjoint", "parameter_shift"):
        diff = METHODS[method]
        grad = jax.jit(jax.grad(lambda th, diff=diff: qfx.expval(flat(th), obs, diff=diff)))(theta)
        tol = _tol(method, "complex128")
        assert tree_allclose(np.asarray(grad), expected, rtol=tol, atol=tol), (
            method,
            np.abs(grad - expected).max(),
        )
    if n > 4:
        assert {"matrix", "diagonal", "controlled", "pauli_rotation"} <= forms, forms


# --- Hessians ------------------------------------------------------------------------------------


def _reference_hessian(f, theta, eps=2e-4):
    p = theta.size
    out = np.zeros((p, p))
    for i in range(p):
        for j in range(p):
            vals = []
            for si, sj in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                x = theta.copy()
                x[i] += si * eps
                x[j] += sj * eps
                vals.append(si * sj * f(x))
            out[i, j] = sum(vals) / (4 * eps**2)
    return out


def test_hessian(x64):
    """All methods give the same Hessian: the custom rules are JAX code (adjoint backward) or apply to
    their own derivatives (shift rules), so second order is exact, and equal to backprop's."""
    rng = np.random.default_rng(4)
    layers = qfx.repeat(
        lambda t: [qfx.RY(t[0], 0), qfx.CRX(t[1], (0, 1)), qfx.IsingXY(t[2], (1, 2)), qfx.CNOT((2, 0))],
        jnp.asarray(rng.uniform(-np.pi, np.pi, (2, 3))),
        num_wires=3,
    )
    head = [qfx.H(0), qfx.Rot(0.3, -0.5, 1.1, wires=1)]
    flat = Flat(qfx.Circuit(head + [layers, qfx.Adjoint(qfx.U3(0.2, 0.6, -0.9, wires=2))], 3))
    obs = _observables(rng)[0]
    expected = _reference_hessian(lambda th: ref.expval(flat.reference(th), obs), flat.theta)
    theta = jnp.asarray(flat.theta)
    methods = dict(METHODS, finite_diff=qfx.diff.FiniteDiff(step=1e-4))  # a larger step for 2nd order
    hessians = {}
    for method, diff in methods.items():
        hessians[method] = np.asarray(
            jax.jit(jax.hessian(lambda th, diff=diff: qfx.expval(flat(th), obs, diff=diff)))(theta)
        )
        assert tree_allclose(hessians[method], expected, rtol=1e-6, atol=1e-6), method
    for method in ("adjoint", "parameter_shift"):
        assert tree_allclose(hessians[method], hessians["backprop"], rtol=1e-9, atol=1e-9), method


@pytest.mark.parametrize("loop", [False, True])
def test_adjoint_reverse_over_reverse(x64, loop, monkeypatch):
    """grad of grad differentiates the adjoint's backward walk by backprop: it equals backprop's Hessian.
    With `loop`, the walk runs as on large states (a loop, cotangents from the states after each gate),
    on a circuit whose diagonal two-qubit gates stay unfused; forward-over-reverse is checked too."""
    if loop:
        monkeypatch.setattr(_walk, "_LOOP_MIN_WIRES", 1)
    theta = jnp.asarray(np.random.default_rng(9).uniform(-np.pi, np.pi, 6))

    def wide(diff):  # _small's gates on 5 wires, where fusion leaves CRZ and IsingZZ as they are
        obs = _small_obs() + 0.3 * qfx.Z(4)
        circuit = lambda th: qfx.Circuit(_small_circuit(th).ops + (qfx.CNOT((1, 4)),), 5)  # noqa: E731
        return lambda th: qfx.expval(circuit(th), obs, diff=diff)

    for make in (_small, wide):
        expected = jax.jit(jax.hessian(make(qfx.diff.Backprop())))(theta)
        got = jax.jit(jax.jacrev(jax.grad(make(qfx.diff.Adjoint()))))(theta)
        assert tree_allclose(got, expected, rtol=1e-9, atol=1e-9), make.__name__
        if loop:
            got = jax.jit(jax.hessian(make(qfx.diff.Adjoint())))(theta)
            assert tree_allclose(got, expected, rtol=1e-9, atol=1e-9), make.__name__


@pytest.mark.parametrize("loop", [False, True])
def test_adjoint_higher_orders_in_matrix_entries(x64, loop, monkeypatch):
    """QubitUnitary entries can move off the unitary group, where the adjoint's `U^dagger` is not `U^-1`:
    its walk differentiates the inverse, so Hessians (forward- and reverse-over-reverse) and third
    derivatives equal backprop's. `loop`: the walk of large states (cotangents from the states after)."""
    if loop:
        monkeypatch.setattr(_walk, "_LOOP_MIN_WIRES", 1)
    rng = np.random.default_rng(12)
    u1, u2 = random_unitary(rng, 2), random_unitary(rng, 4)
    obs = qfx.Z(0) @ qfx.X(1) + 0.3 * qfx.Y(2)

    def f(diff):
        def energy(re1, im1, re2, im2, theta):
            ops = [qfx.H(0), qfx.H(2), qfx.RX(theta, 0), qfx.QubitUnitary(jax.lax.complex(re1, im1), wires=1)]
            ops += [
                qfx.RY(0.3, 2),
                qfx.QubitUnitary(jax.lax.complex(re2, im2), wires=(2, 0)),
                qfx.RZ(theta / 2, 1),
            ]
            return qfx.expval(qfx.Circuit(ops, 3), obs, diff=diff)

        return energy

    args = tuple(jnp.asarray(a) for a in (u1.real, u1.imag, u2.real, u2.imag, 0.4))
    every = tuple(range(5))
    adjoint, backprop = f(qfx.diff.Adjoint()), f(qfx.diff.Backprop())
    expected = jax.jit(jax.hessian(backprop, argnums=every))(*args)
    got = jax.jit(jax.hessian(adjoint, argnums=every))(*args)
    assert tree_allclose(got, expected, rtol=1e-9, atol=1e-9)
    got = jax.jit(jax.jacrev(jax.grad(adjoint, argnums=every), argnums=every))(*args)
    assert tree_allclose(got, expected, rtol=1e-9, atol=1e-9)
    if not loop:
        third = [
            jax.jit(jax.jacfwd(jax.hessian(lambda re1, g=g: g(re1, *args[1:]))))(args[0])
            for g in (backprop, adjoint)
        ]
        assert tree_allclose(third[1], third[0], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("count", [2, 3, 4, 5])
def test_adjoint_loop_gate_counts(x64, count, monkeypatch):
    """The looped walk takes two gates per loop step; an odd count is padded with a step that does
    nothing. Runs of 2 to 5 gates (one rotation per wire, which fusion leaves apart), at top level and in
    scanned layers, give backprop's gradient."""
    monkeypatch.setattr(_walk, "_LOOP_MIN_WIRES", 1)
    n = 6
    rng = np.random.default_rng(count)
    head = jnp.asarray(rng.uniform(-np.pi, np.pi, count))
    layers = jnp.asarray(rng.uniform(-np.pi, np.pi, (3, count)))

    def circuit(head, layers):
        ops = [op for w in range(count) for op in (qfx.H(w), qfx.RY(head[w], w))]
        block = qfx.repeat(lambda t: [qfx.RX(t[w], w) for w in range(count)], layers, num_wires=n)
        return qfx.Circuit(ops + [block], n)

    obs = qfx.Z(0) @ qfx.Z(count - 1) + 0.4 * qfx.Y(1)

    def grad(diff):
        f = lambda h, t: qfx.expval(circuit(h, t), obs, diff=diff)  # noqa: E731
        return jax.jit(jax.grad(f, argnums=(0, 1)))(head, layers)

    assert tree_allclose(grad(qfx.diff.Adjoint()), grad(qfx.diff.Backprop()), rtol=1e-10, atol=1e-10)


# --- transformations ------------------------------------------------------------------------------


def _small_circuit(theta) -> qfx.Circuit:
    block = qfx.repeat(
        lambda t: [qfx.RY(t[0], 0), qfx.CRZ(t[1], (0, 1))], theta[2:].reshape(2, 2), num_wires=2
    )
    return qfx.Circuit([qfx.RX(theta[0], 0), qfx.IsingZZ(theta[1], (0, 1)), block, qfx.RY(theta[0], 1)], 2)


def _small_obs() -> qfx.LinearCombination:
    return 0.6 * qfx.X(0) @ qfx.Z(1) + qfx.Y(1)


def _small(diff):
    return lambda th: qfx.expval(_small_circuit(th), _small_obs(), diff=diff)


@pytest.mark.parametrize("method", list(METHODS))
def test_transformations(method):
    diff = METHODS[method]
    tol = _tol(method, "complex64")
    thetas = jnp.asarray(np.random.default_rng(5).uniform(-np.pi, np.pi, (3, 6)), jnp.float32)
    exact = jax.jit(jax.vmap(jax.grad(_small(qfx.diff.Backprop()))))(thetas)

    traces = []

    def f(th):
        traces.append(None)
        return _small(diff)(th)

    jit_grad = jax.jit(jax.grad(f))
    for i in range(3):  # new parameter values never recompile
        assert tree_allclose(jit_grad(thetas[i]), exact[i], rtol=tol, atol=tol)
    assert len(traces) == 1

    assert tree_allclose(jax.jit(jax.vmap(jax.grad(_small(diff))))(thetas), exact, rtol=tol, atol=tol)
    grad_vmap = jax.jit(jax.grad(lambda ths: jnp.sum(jax.vmap(_small(diff))(ths))))
    assert tree_allclose(grad_vmap(thetas), exact, rtol=tol, atol=tol)
    if method == "adjoint":
        with pytest.raises(TypeError, match="reverse-mode"):
            jax.jacfwd(_small(diff))(thetas[0])
    else:
        assert tree_allclose(jax.jit(jax.jacfwd(_small(diff)))(thetas[0]), exact[0], rtol=tol, atol=tol)


# --- other measurements, coefficients, the circuit pytree -----------------------------------------


@pytest.mark.parametrize("method", list(METHODS))
def test_probs_var_density_matrix_coefficients(method, x64):
    """Jacobians of probs, var and density_matrix, and gradients with respect to observable coefficients
    and Hermitian entries, against backprop."""
    diff = METHODS[method]
    theta = jnp.asarray(np.random.default_rng(6).uniform(-np.pi, np.pi, 6))
    obs = _small_obs() + 0.3 * qfx.Hermitian(np.array([[1.0, 0.5j], [-0.5j, -0.2]]), wires=0)

    def measurements(diff):
        def f(th, obs):
            c = _small_circuit(th)
            rho = qfx.density_matrix(c, wires=1, diff=diff)
            out = (
                qfx.probs(c, wires=(1, 0), diff=diff),
                qfx.var(c, [obs, qfx.Z(0)], diff=diff),
                rho.real,
                rho.imag,
            )
            if method != "parameter_shift":  # no shift rule for amplitudes (an error, tested below)
                psi = qfx.state(c, diff=diff)
                out += (psi.real, psi.imag)
            return out

        def jacobians(th, obs):
            jac = (jax.jacrev if method == "adjoint" else jax.jacfwd)(f)(th, obs)
            d_obs = jax.grad(lambda o: qfx.expval(_small_circuit(th), o, diff=diff))(obs)
            return jac, d_obs

        return jax.jit(jacobians)

    tol = _tol(method, "complex128")
    got = measurements(diff)(theta, obs)
    want = measurements(qfx.diff.Backprop())(theta, obs)
    assert tree_allclose(got, want, rtol=tol, atol=tol)
    # d<O>/dc_k = <term_k>, from the reference.
    psi = ref.final_state(_small_circuit(np.asarray(theta)))
    terms = [ref.observable_matrix(t, 2) for t in obs.terms]
    assert tree_allclose(got[1].coeffs, np.array([np.real(psi.conj() @ m @ psi) for m in terms]), atol=tol)


def test_gradient_with_respect_to_the_circuit_pytree():
    """jax.grad of a circuit returns a circuit; Adjoint gives cotangents for QubitUnitary entries and
    initial_state too."""
    rng = np.random.default_rng(7)
    u = qfx.QubitUnitary(random_unitary(rng, 4), wires=(0, 1))
    circ = qfx.Circuit(
        [qfx.RX(0.4, 0), u, qfx.repeat(lambda t: [qfx.RY(t, 1)], jnp.array([0.1, 0.2, 0.3]))], 2
    )
    psi0 = jnp.asarray(ref.final_state(qfx.Circuit([qfx.H(0), qfx.RY(0.3, 1)], 2)), jnp.complex64)

    def f(diff):
        return jax.jit(
            jax.grad(lambda c, s: qfx.expval(c, _small_obs(), initial_state=s, diff=diff), argnums=(0, 1))
        )

    got = f(qfx.diff.Adjoint())(circ, psi0)
    assert isinstance(got[0], qfx.Circuit)
    assert tree_allclose(got, f(qfx.diff.Backprop())(circ, psi0), rtol=1e-5, atol=1e-5)


# --- shots ------------------------------------------------------------------------------------------


def test_parameter_shift_with_shots_is_unbiased():
    """The shot-based parameter-shift gradient (and coefficient gradient) averages to the exact one.

    Each shifted evaluation is an independent mean of `shots` samples per term of variance at most
    coeff**2, so a gradient entry with rule terms c_k has variance at most sum_k c_k**2 * sum_t coeff_t**2
    / shots; the mean over `repeats` keys stays within 5 of its standard deviations.
    """
    shots, repeats = 100, 1000
    obs = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(1)
    theta = jnp.asarray([0.3, -0.8, 1.2, 0.5], jnp.float32)

    def circuit(th):
        return qfx.Circuit(
            [qfx.RX(th[0], 0), qfx.RY(th[1], 1), qfx.CRX(th[2], (0, 1)), qfx.RZ(th[3], 1), qfx.H(0)]
        )

    def estimate(th, obs, key):
        return qfx.expval(circuit(th), obs, shots=shots, key=key, diff=qfx.diff.ParameterShift())

    keys = jax.random.split(jax.random.key(0), repeats)
    d_theta, d_obs = jax.jit(jax.vmap(jax.grad(estimate, argnums=(0, 1)), in_axes=(None, None, 0)))(
        theta, obs, keys
    )
    exact_theta, exact_obs = jax.grad(lambda th, o: qfx.expval(circuit(th), o), argnums=(0, 1))(theta, obs)

    coeff_sq = float(jnp.sum(obs.coeffs**2))
    rule_sq = np.array([0.5, 0.5, 2 * sum(c**2 for c, _ in _FOUR_TERM[:2]), 0.5])
    bound = np.sqrt(rule_sq * coeff_sq / shots)
    assert np.all(np.std(np.asarray(d_theta), axis=0) > 0.1 * bound)  # it is an estimator, not exact
    assert np.all(np.std(np.asarray(d_theta), axis=0) < 1.2 * bound)
    assert np.all(np.abs(np.mean(d_theta, axis=0) - exact_theta) < 5 * bound / np.sqrt(repeats))
    # d<O>/dc_t is the estimate of term t: variance at most 1 / shots.
    err = np.abs(np.mean(d_obs.coeffs, axis=0) - exact_obs.coeffs)
    assert np.all(err < 5 / np.sqrt(shots * repeats))


_FOUR_TERM = qfx.CRX.shift_rules[0]


def test_parameter_shift_with_shots_differentiates_coefficients_beside_hermitian_terms():
    """The coefficient derivative differentiates only the leaves that move: a Hermitian term's matrix (a
    leaf with a zero tangent) is not differentiated, which sampled estimates could not do."""
    c = qfx.Circuit([qfx.RX(0.3, 0), qfx.RY(0.5, 1)])
    terms = (qfx.PauliWord({0: "Z"}), qfx.Hermitian(np.diag([1.0, -1.0]), 1))
    key = jax.random.key(0)

    def f(coeffs, diff):
        return qfx.expval(c, qfx.LinearCombination(coeffs, terms), diff=diff, shots=2000, key=key)

    coeffs = jnp.asarray([0.5, 1.0])
    by_shifts = jax.grad(f)(coeffs, qfx.diff.ParameterShift())
    np.testing.assert_allclose(by_shifts, jax.grad(f)(coeffs, qfx.diff.Backprop()), atol=1e-6)
    np.testing.assert_allclose(by_shifts, [np.cos(0.3), np.cos(0.5)], atol=5 / np.sqrt(2000))


def test_parameter_shift_hessian_with_shots():
    """Second-order shifts with shots: each shifted evaluation of the shifted evaluations draws fresh keys."""
    shots, repeats = 200, 300
    theta = jnp.asarray([0.3, -0.8], jnp.float32)

    def f(th, key=None, shots=None):
        c = qfx.Circuit([qfx.RX(th[0], 0), qfx.CNOT((0, 1)), qfx.RY(th[1], 1)])
        return qfx.expval(c, qfx.Z(1), shots=shots, key=key, diff=qfx.diff.ParameterShift())

    keys = jax.random.split(jax.random.key(1), repeats)
    hess = jax.jit(jax.vmap(jax.hessian(f), in_axes=(None, 0, None)), static_argnums=2)(theta, keys, shots)
    exact = jax.hessian(f)(theta)
    bound = 0.25 * 2 / np.sqrt(shots)  # four terms of coefficient +-1/4, each of variance <= 1 / shots
    assert np.all(np.abs(np.mean(hess, axis=0) - exact) < 5 * bound / np.sqrt(repeats))
    assert np.all(np.std(np.asarray(hess), axis=0) > 0)


def test_parameter_shift_hessian_with_shots_in_chunks():
    """Shifted evaluations run in chunks when they would not fit in memory together (here forced by
    `batch_size`). Evaluation b draws with the key folded with b whatever the chunking, so the chunked
    Hessian must equal the unchunked one. (Chunks looped by lax.scan once gave zeros: JAX's reverse mode
    dropped the rule of the shot estimates evaluated inside the scan.)"""
    theta = jnp.asarray([0.3, -0.8, 0.5], jnp.float32)
    batch_size = 4  # does not divide the 6 first-order evaluations: the last chunk is padded

    def f(th, batch_size):
        c = qfx.Circuit([qfx.RX(th[0], 0), qfx.CNOT((0, 1)), qfx.RY(th[1], 1), qfx.RY(th[2], 0)])
        diff = qfx.diff.ParameterShift(batch_size=batch_size)
        return qfx.expval(c, qfx.Z(1) + 0.5 * qfx.X(0), shots=50, key=jax.random.key(3), diff=diff)

    whole = jax.hessian(f)(theta, None)
    chunked = jax.hessian(f)(theta, batch_size)
    assert np.all(np.abs(np.diag(np.asarray(whole))) > 0)
    np.testing.assert_allclose(chunked, whole, atol=1e-6)
    np.testing.assert_allclose(jax.jacfwd(jax.jacfwd(f))(theta, batch_size), whole, atol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(theta, batch_size), jax.grad(f)(theta, None), atol=1e-6)


# --- the custom rules ran ---------------------------------------------------------------------------


def _shapes(jaxpr) -> list[tuple[int, ...]]:
    """The shapes of all values in a jaxpr, sub-jaxprs (scan bodies, custom rules) included."""
    return [tuple(v.aval.shape) for eqn in equations(jaxpr) for v in eqn.outvars if hasattr(v.aval, "shape")]


def test_adjoint_keeps_no_intermediate_states(monkeypatch):
    """Backprop's program stacks a state per scanned layer; the adjoint's has no such array, and its
    backward walk ran. (7 qubits: on smaller states backprop walks too, see the next test.)"""
    n, layers = 7, 5
    thetas = jnp.asarray(np.random.default_rng(8).uniform(-np.pi, np.pi, (layers, n)), jnp.float32)

    def f(th, diff):
        body = qfx.repeat(
            lambda t: [qfx.RY(t[i], i) for i in range(n)] + [qfx.CNOT((i, i + 1)) for i in range(n - 1)], th
        )
        return qfx.expval(qfx.Circuit([body], n), sum(qfx.Z(i) for i in range(n)), diff=diff)

    calls = []
    backward = _walk.backward
    monkeypatch.setattr(_walk, "backward", lambda *a: calls.append(None) or backward(*a))

    def stacked_states(diff):
        jaxpr = jax.make_jaxpr(jax.grad(f), static_argnums=1)(thetas, diff)
        return [
            s for s in _shapes(jaxpr.jaxpr) if s and s[0] == layers and np.prod(s) >= layers * 2 ** (n - 1)
        ]

    assert stacked_states(qfx.diff.Backprop())
    assert not calls
    assert not stacked_states(qfx.diff.Adjoint())
    assert calls


def _count_walks(monkeypatch) -> list:
    calls = []
    backward = _walk.backward
    monkeypatch.setattr(_walk, "backward", lambda *a: calls.append(None) or backward(*a))
    return calls


def test_auto_walks_small_states(x64, monkeypatch):
    """On a 4-qubit state, Backprop differentiates a scalar expectation by the adjoint walk, written as a
    custom_jvp: gradients to the gate angles, the initial state and the observable's coefficients (of an
    observable with a Hermitian term) match the reference's finite differences, and jvp, jacfwd, hessian,
    grad of grad and vmap(grad) match plain backprop (the same method with the walk switched off)."""
    rng = np.random.default_rng(5)
    flat = Flat(_test_circuit(seed=3, n=4, layers=3))  # 3 stacked states of 256 bytes pass 512
    obs = _observables(rng)[0]
    psi0 = jnp.asarray(random_state(rng, 4))
    theta = jnp.asarray(flat.theta)

    def f(th, psi, o):
        return qfx.expval(flat(th), o, initial_state=psi / jnp.linalg.norm(psi).astype(psi.dtype))

    def f_ref(th, psi, o):
        return ref.expval(flat.reference(th), o, initial_state=np.asarray(psi) / np.linalg.norm(psi))

    calls = _count_walks(monkeypatch)
    args = (theta, psi0, obs)
    grads = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(*args)
    assert calls
    expected = (
        central_difference(lambda th: f_ref(th, psi0, obs), flat.theta, eps=1e-5),
        # JAX's gradient in a complex z is dL/dx - i dL/dy
        central_difference(
            lambda x: f_ref(theta, np.asarray(x[0]) + 1j * np.asarray(x[1]), obs),
            (psi0.real, psi0.imag),
            eps=1e-6,
        ),
        central_difference(
            lambda c: f_ref(theta, psi0, qfx.LinearCombination(c, obs.terms)), obs.coeffs, eps=1e-6
        ),
    )
    assert tree_allclose(grads[0], expected[0], rtol=1e-8, atol=1e-8)
    assert tree_allclose(grads[1], expected[1][0] - 1j * expected[1][1], rtol=1e-8, atol=1e-8)
    assert tree_allclose(grads[2].coeffs, expected[2], rtol=1e-8, atol=1e-8)

    g = lambda th: f(th, psi0, obs)  # noqa: E731
    thetas = jnp.stack([theta, theta * 0.5 - 0.2])
    transforms = {
        "jvp": lambda: jax.jvp(g, (theta,), (jnp.cos(theta),)),
        "jacfwd": lambda: jax.jacfwd(g)(theta),
        "hessian": lambda: jax.hessian(g)(theta),
        "grad of grad": lambda: jax.grad(lambda th: jnp.sum(jnp.sin(jax.grad(g)(th))))(theta),
        "vmap(grad)": lambda: jax.vmap(jax.grad(g))(thetas),
    }
    walked = {name: jax.jit(t)() for name, t in transforms.items()}
    monkeypatch.setattr(qfx.diff._auto, "SMALL_STATE_BYTES", 0)
    count = len(calls)
    for name, t in transforms.items():
        assert tree_allclose(walked[name], jax.jit(t)(), rtol=1e-9, atol=1e-9), name
    assert len(calls) == count  # the reference ran without the walk
    assert float(jnp.max(jnp.abs(walked["hessian"]))) > 0.1  # the case is not trivial


@pytest.mark.parametrize(
    "case", ["scalar", "two observables", "7 qubits", "8 layers", "QubitUnitary", "shots"]
)
def test_auto_walks_only_where_it_pays(case, monkeypatch):
    """Of these 10-layer circuits on 3 qubits (64-byte states), Backprop walks the scalar expectation only;
    it keeps plain autodiff for a measurement with several entries, a state over 512 bytes, a circuit
    whose layers stack at most 512 bytes of states, one with complex (matrix) parameters, and shot
    estimates. The walked gradient matches plain backprop's, the others the adjoint method's (with shots:
    a shot estimate is linear in the coefficients, so they sum to it)."""
    n = 7 if case == "7 qubits" else 3
    thetas = jnp.asarray(np.random.default_rng(6).uniform(-3, 3, (8 if case == "8 layers" else 10, n)))
    body = qfx.repeat(
        lambda t: [qfx.RY(t[i], i) for i in range(n)] + [qfx.CNOT((i, i + 1)) for i in range(n - 1)], thetas
    )
    ops = [body]
    if case == "QubitUnitary":
        ops.append(qfx.QubitUnitary(random_unitary(np.random.default_rng(6), 4), (0, 2)))
    circ = qfx.Circuit(ops, n)
    coeffs = jnp.asarray([0.5, -1.5], jnp.float32)
    terms = [qfx.Z(0), qfx.X(n - 1)]

    def f(c, diff=AUTO):
        if case == "two observables":
            return jnp.sum(jnp.sin(qfx.expval(c, terms, diff=diff)))
        return qfx.expval(c, qfx.LinearCombination(coeffs, terms), diff=diff)

    calls = _count_walks(monkeypatch)
    if case == "shots":
        est = lambda cf: qfx.expval(circ, qfx.LinearCombination(cf, terms), shots=10, key=jax.random.key(1))  # noqa: E731
        value, grad = jax.value_and_grad(est)(coeffs)
        assert not calls
        assert float(jnp.dot(grad, coeffs)) == pytest.approx(float(value), abs=1e-5)
        return
    got = jax.grad(f)(circ)
    assert bool(calls) == (case == "scalar")
    if case == "scalar":  # the walk against plain backprop; the others against the adjoint method
        monkeypatch.setattr(qfx.diff._auto, "SMALL_STATE_BYTES", 0)
        expected = jax.grad(f)(circ)
    else:
        expected = jax.grad(lambda c: f(c, qfx.diff.Adjoint()))(circ)
    assert tree_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["7 layers", "6 layers", "nested 3 x 4", "two observables"])
def test_auto_walks_past_its_checkpoint_budget(case, monkeypatch):
    """On 8 qubits (2 KiB states, too large for the small-state walk), Backprop walks a scalar expectation
    when its `Repeat` blocks would keep more than `CHECKPOINT_MEMORY_FRACTION` of the device's memory in
    per-layer states: here a device of 8 x 6 states, so 7 layers walk and 6 do not, and a block of 3
    layers, each holding a block of 4, counts 3 + 4. A measurement with two entries keeps backprop. The
    gradients match plain backprop's (the walk switched off by a budget of the whole memory)."""
    n = 8
    monkeypatch.setattr(qfx.diff._auto, "memory_limit_bytes", lambda: 8 * 6 * 2**n * 8)
    rng = np.random.default_rng(11)

    def layer(t):
        return [qfx.RY(t[i], i) for i in range(n)] + [qfx.CNOT((i, i + 1)) for i in range(n - 1)]

    if case == "nested 3 x 4":
        thetas = jnp.asarray(rng.uniform(-3, 3, (3, 4, n)), jnp.float32)
        block = qfx.repeat(lambda ts: [qfx.repeat(layer, ts)], thetas, num_wires=n)
    else:
        thetas = jnp.asarray(rng.uniform(-3, 3, (6 if case == "6 layers" else 7, n)), jnp.float32)
        block = qfx.repeat(layer, thetas)
    circ = qfx.Circuit([block], n)
    obs = [qfx.Z(0) @ qfx.Z(n - 1), qfx.X(3)]

    def f(c):
        if case == "two observables":
            return jnp.sum(jnp.cos(qfx.expval(c, obs)))
        return qfx.expval(c, 0.7 * obs[0] - 0.4 * obs[1])

    calls = _count_walks(monkeypatch)
    got = jax.jit(jax.grad(f))(circ)
    assert bool(calls) == (case in ("7 layers", "nested 3 x 4"))
    monkeypatch.setattr(qfx.diff._auto, "CHECKPOINT_MEMORY_FRACTION", 1.0)
    count = len(calls)
    expected = jax.jit(jax.grad(f))(circ)
    assert len(calls) == count
    assert tree_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(got)) > 0.01  # not a trivial case


@pytest.mark.parametrize("method", ["parameter_shift", "finite_diff"])
def test_shift_rule_ran(method, monkeypatch):
    module = {"parameter_shift": _parameter_shift, "finite_diff": _finite_diff}[method]
    calls = []
    engine = module.shifted_jvp
    monkeypatch.setattr(module, "shifted_jvp", lambda *a, **k: calls.append(None) or engine(*a, **k))
    theta = jnp.zeros(6, jnp.float32)
    jax.make_jaxpr(jax.grad(_small(METHODS[method])))(theta)
    assert len(calls) == 1
    jax.make_jaxpr(jax.hessian(_small(METHODS[method])))(theta)
    assert len(calls) >= 3  # the rule applied to its own evaluations
    # Evaluations in chunks (lax.map) give the same gradient as one vmap.
    chunked = {
        "parameter_shift": qfx.diff.ParameterShift(batch_size=5),
        "finite_diff": qfx.diff.FiniteDiff(batch_size=5),
    }
    theta = jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32)
    # The same evaluations, differently batched, may round differently (they did on a GPU): a finite
    # difference turns a rounding error eps of f into eps / h, ~2e-5 in float32 at the default h.
    atol = 1e-4 if method == "finite_diff" else 1e-6
    assert tree_allclose(
        jax.jit(jax.grad(_small(chunked[method])))(theta),
        jax.jit(jax.grad(_small(METHODS[method])))(theta),
        atol=atol,
    )


# --- errors -----------------------------------------------------------------------------------------


def test_errors():
    circ = _small_circuit(jnp.zeros(6, jnp.float32))
    ps = qfx.diff.ParameterShift()

    def grad_circuit(f):
        return jax.grad(f)(circ)

    with pytest.raises(ValueError, match="linear in"):
        grad_circuit(lambda c: jnp.real(qfx.state(c, diff=ps)[0]))
    with pytest.raises(ValueError, match="no shift rule for its parameter 'U'"):
        u = qfx.Circuit([qfx.QubitUnitary(jnp.eye(2), wires=0)])
        jax.grad(lambda c: qfx.expval(c, qfx.Z(0), diff=ps))(u)
    psi0 = jnp.zeros(4, jnp.complex64).at[0].set(1)
    with pytest.raises(ValueError, match="initial_state"):
        jax.jvp(lambda s: qfx.expval(circ, qfx.Z(0), initial_state=s, diff=ps), (psi0,), (psi0,))
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="shot-based estimate"):
        grad_circuit(lambda c: qfx.expval(c, qfx.Z(0), shots=10, key=key, diff=qfx.diff.FiniteDiff()))
    for diff in (qfx.diff.Backprop(), qfx.diff.Adjoint()):
        with pytest.raises(ValueError, match="through the simulation"):
            grad_circuit(lambda c, diff=diff: qfx.expval(c, qfx.Z(0), shots=10, key=key, diff=diff))
    with pytest.raises(ValueError, match="derivatives in Hermitian matrix entries .* need shots=None"):
        jax.grad(lambda m: qfx.expval(circ, qfx.Hermitian(m, wires=0), shots=10, key=key, diff=ps))(
            jnp.eye(2, dtype=jnp.float32)
        )
    with pytest.raises(TypeError, match="reverse-mode"):
        jax.jvp(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.Adjoint()), (circ,), (circ,))
    for step in (-1.0, 0.0, np.inf, np.nan, True, 1j, "0.1", np.ones(2)):
        with pytest.raises(ValueError, match="step must be a positive finite float"):
            qfx.diff.FiniteDiff(step=step)
    assert qfx.diff.FiniteDiff(step=np.float32(1e-3)).step == pytest.approx(1e-3)
    # A step whose difference rounding swamps (in float32, 1e-8 is below the spacing of floats near 0.3:
    # the gradient came out 0) is refused when the dtype is known.
    with pytest.raises(ValueError, match=r"step 1e-08 is below 50 eps \(6e-06\)"):
        grad_circuit(lambda c: qfx.expval(c, qfx.Z(0), diff=qfx.diff.FiniteDiff(step=1e-8)))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        qfx.diff.ParameterShift(batch_size=0)
    # Evaluating (not differentiating) is fine with every method, and stop_gradient is the way around a
    # gate without a shift rule.
    assert jnp.allclose(qfx.state(circ, diff=ps), qfx.state(circ))
    u = qfx.Circuit([qfx.RX(0.3, 0), qfx.QubitUnitary(jnp.eye(2), wires=0)])
    g = jax.grad(
        lambda c: qfx.expval(
            eqx.tree_at(lambda c: c.ops[1].U, c, replace_fn=jax.lax.stop_gradient), qfx.Z(0), diff=ps
        )
    )(u)
    assert jnp.allclose(g.ops[0].theta, -jnp.sin(0.3)) and jnp.all(g.ops[1].U == 0)


def test_finite_diff_steps_a_float32_leaf_as_float32(x64):
    # A float32 angle edited into a complex128 circuit: stepped by float64's 6e-6 it rounded to float32's
    # grid (-0.2656 for -sin(0.3) cos(0.5) = -0.2593); float32's default step gives float32's accuracy.
    # The tensor-network backend too (it gave -0.2500, -0.0469 for -0.0359 in a helper's circuit).
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), qfx.RY(0.5, wires=0)])
    circ = eqx.tree_at(lambda c: c.ops[0].theta, circ, jnp.float32(0.3))
    fd = qfx.diff.FiniteDiff()
    for backend in (None, qfx.TensorNetwork()):
        grad = jax.grad(lambda c, backend=backend: qfx.expval(c, qfx.Z(0), diff=fd, backend=backend))(circ)
        assert grad.ops[0].theta.dtype == jnp.float32
        np.testing.assert_allclose(grad.ops[0].theta, -np.sin(0.3) * np.cos(0.5), atol=1e-4, err_msg=backend)
        np.testing.assert_allclose(grad.ops[1].theta, -np.cos(0.3) * np.sin(0.5), atol=1e-8, err_msg=backend)


def test_finite_diff_of_the_initial_state():
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), qfx.CNOT(wires=(0, 1))])
    psi = jnp.asarray([0.6, 0.0, 0.8, 0.0], jnp.complex64)

    def grad(diff):
        return jax.grad(lambda p: qfx.expval(circ, qfx.Z(1), initial_state=p, diff=diff))(psi)

    np.testing.assert_allclose(
        grad(qfx.diff.FiniteDiff()), grad(qfx.diff.Backprop()), atol=FD_TOL["complex64"]
    )


def test_parameter_shift_of_controlled_gates_with_four_term_rules(x64):
    # Controlling adds the generator eigenvalue 0: CRX, IsingXY, controlled rotations and CRot keep the
    # four-term rule (they were refused). First and second derivatives equal backprop's.
    def gates(t):
        return [
            qfx.Controlled(qfx.CRX(t, wires=(1, 2)), 0),
            qfx.Controlled(qfx.IsingXY(0.7 * t, wires=(1, 2)), 0, 0),
            qfx.Controlled(qfx.Controlled(qfx.RY(1.3 * t, wires=2), 1), 0),
            qfx.Controlled(qfx.Adjoint(qfx.CRot(t, 0.2 * t, -t, wires=(2, 1))), 0),
        ]

    obs = qfx.X(2) + qfx.Y(1) @ qfx.Z(2) + qfx.X(0) @ qfx.X(1) @ qfx.Y(2)
    for k in range(4):

        def f(t, diff, k=k):
            circ = qfx.Circuit([qfx.H(0), qfx.H(1), qfx.RX(0.4, wires=2), gates(t)[k], qfx.RY(0.3, wires=1)])
            return qfx.expval(circ, obs, diff=diff)

        for order in (jax.grad, jax.hessian) if k == 0 else (jax.grad,):
            shifted = order(f)(0.7, qfx.diff.ParameterShift())
            assert float(shifted) == pytest.approx(float(order(f)(0.7, qfx.diff.Backprop())), abs=1e-9)
    assert float(jax.grad(f)(0.7, qfx.diff.Backprop())) != 0  # the case is not trivial
