"""Circuits as pytrees: vmap, jit without recompiling, tree_at, serialisation, Optax."""

import re
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import qfx

from . import reference as ref
from .helpers import tree_allclose

N = 3
H = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(0) - 0.8 * qfx.Y(2) @ qfx.X(1)


def make_circuit(theta):
    """One structure, three parameters: `theta` has shape (3,)."""
    return qfx.Circuit(
        [
            qfx.RY(theta[0], wires=0),
            qfx.H(1),
            qfx.CRX(theta[1], wires=(0, 2)),
            qfx.CNOT((1, 0)),
            qfx.Rot(theta[2], theta[0], -theta[1], wires=2),
        ],
        num_wires=N,
    )


def _thetas(*shape, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.uniform(-np.pi, np.pi, size=(*shape, 3)), jnp.float32)


# Shared by the tests below: every call has make_circuit's structure, so it compiles once.
_expval = jax.jit(qfx.expval)
_grad = jax.jit(jax.grad(qfx.expval))


def test_jit_matches_eager_and_reference():
    circ = make_circuit(_thetas(seed=1))
    value = _expval(circ, H)
    assert float(value) == pytest.approx(float(qfx.expval(circ, H)), abs=1e-6)
    assert float(value) == pytest.approx(ref.expval(circ, H), abs=1e-5)


def test_new_parameter_values_do_not_recompile():
    traces = []

    @jax.jit
    def energy(circ, obs):
        traces.append(None)  # a Python side effect: runs once per trace
        return qfx.expval(circ, obs)

    for theta in _thetas(4, seed=2):
        energy(make_circuit(theta), H)
    # New coefficients (same words) do not recompile either.
    energy(
        make_circuit(_thetas(seed=3)), 2.0 * qfx.Z(0) @ qfx.Z(1) - 0.1 * qfx.X(0) + 0.3 * qfx.Y(2) @ qfx.X(1)
    )
    assert len(traces) == 1
    assert energy._cache_size() == 1
    # A different structure is a different program: the counter does see recompilations.
    energy(qfx.Circuit([qfx.RX(0.1, wires=0)], num_wires=N), H)
    assert len(traces) == 2


def test_grad_is_circuit_shaped():
    circ = make_circuit(_thetas(seed=4))
    grad = _grad(circ, H)
    assert isinstance(grad, qfx.Circuit)
    assert jax.tree.structure(grad) == jax.tree.structure(circ)
    assert [op.wires for op in grad] == [op.wires for op in circ]


def test_vmap_over_circuits_equals_loop():
    thetas = _thetas(5, seed=5)
    batch = eqx.filter_vmap(make_circuit)(thetas)
    assert batch.ops[0].theta.shape == (5,)
    values = jax.vmap(qfx.expval, (0, None))(batch, H)
    assert values.shape == (5,)
    np.testing.assert_allclose(values, [_expval(make_circuit(t), H) for t in thetas], atol=1e-6)
    np.testing.assert_allclose(values, [ref.expval(make_circuit(t), H) for t in thetas], atol=1e-5)


def test_nested_vmap_equals_loop():
    thetas = _thetas(2, 3, seed=6)
    batch = eqx.filter_vmap(eqx.filter_vmap(make_circuit))(thetas)
    values = jax.jit(jax.vmap(jax.vmap(qfx.expval, (0, None)), (0, None)))(batch, H)
    assert values.shape == (2, 3)
    loop = [[_expval(make_circuit(t), H) for t in row] for row in thetas]
    np.testing.assert_allclose(values, loop, atol=1e-6)


def test_vmap_over_observable_coefficients():
    circ = make_circuit(_thetas(seed=7))
    coeffs = jnp.asarray([[1.0, 0.5], [-2.0, 0.0], [0.3, 0.3]], jnp.float32)
    observables = eqx.filter_vmap(lambda c: c[0] * qfx.Z(0) + c[1] * qfx.X(2) @ qfx.Y(1))(coeffs)
    values = jax.vmap(qfx.expval, (None, 0))(circ, observables)
    z, xy = ref.expval(circ, qfx.Z(0)), ref.expval(circ, qfx.X(2) @ qfx.Y(1))
    np.testing.assert_allclose(values, np.asarray(coeffs) @ [z, xy], atol=1e-5)


def test_vmap_of_grad_and_grad_of_vmap_equal_loop():
    thetas = _thetas(3, seed=8)
    batch = eqx.filter_vmap(make_circuit)(thetas)
    loop = [_grad(make_circuit(t), H) for t in thetas]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *loop)
    vmap_grad = jax.jit(jax.vmap(jax.grad(qfx.expval), (0, None)))(batch, H)
    assert tree_allclose(vmap_grad, stacked, atol=1e-5)
    grad_vmap = jax.jit(jax.grad(lambda b: jnp.sum(jax.vmap(qfx.expval, (0, None))(b, H))))(batch)
    assert tree_allclose(grad_vmap, stacked, atol=1e-5)


def test_tree_at_edits_a_parameter():
    theta = _thetas(seed=9)
    circ = make_circuit(theta)
    edited = eqx.tree_at(lambda c: c.ops[2].theta, circ, jnp.asarray(0.25, jnp.float32))
    assert float(circ.ops[2].theta) == pytest.approx(float(theta[1]))  # the original is unchanged
    assert float(edited.ops[2].theta) == 0.25
    rebuilt = make_circuit(theta)
    rebuilt = qfx.Circuit([*rebuilt.ops[:2], qfx.CRX(0.25, wires=(0, 2)), *rebuilt.ops[3:]], num_wires=N)
    assert tree_allclose(edited, rebuilt)
    assert float(_expval(edited, H)) == pytest.approx(ref.expval(rebuilt, H), abs=1e-5)


def test_tree_at_with_a_python_float():
    # eqx.tree_at puts the Python float itself in the tree (the gate's __init__, which makes arrays, is
    # skipped): every entry point, every diff method, repr and draw take it as an array.
    circ = eqx.tree_at(lambda c: c.ops[0].theta, qfx.Circuit([qfx.RX(0.3, 0), qfx.U3(0.1, 0.2, 0.3, 1)]), 0.5)
    circ = eqx.tree_at(lambda c: c.ops[1].phi, circ, 0.7)
    assert repr(circ.ops[0]) == "RX(0.5, wires=0)" and "RX(0.50)" in qfx.draw(circ)
    np.testing.assert_allclose(
        qfx.expval(circ, [qfx.Z(0), qfx.X(1)]),
        qfx.expval(qfx.Circuit([qfx.RX(0.5, 0), qfx.U3(0.1, 0.7, 0.3, 1)]), [qfx.Z(0), qfx.X(1)]),
        atol=1e-6,
    )
    for diff in (qfx.diff.Backprop(), qfx.diff.Adjoint(), qfx.diff.ParameterShift(), qfx.diff.FiniteDiff()):
        grad = jax.grad(lambda c, d=diff: qfx.expval(c, qfx.Z(0), diff=d))(circ)
        atol = 1e-4 if isinstance(diff, qfx.diff.FiniteDiff) else 1e-6  # FiniteDiff: eps / h ~ 2e-5
        np.testing.assert_allclose(grad.ops[0].theta, -np.sin(0.5), atol=atol)


def test_serialise_round_trip(tmp_path):
    circ = qfx.Circuit(
        [*make_circuit(_thetas(seed=10)).ops, qfx.repeat(lambda t: [qfx.RX(t, wires=1)], jnp.arange(3.0))],
        num_wires=N,
    )
    obs = 0.3 * qfx.Z(0) + qfx.Hermitian(np.diag([1.0, -2.0]), wires=1)
    path = tmp_path / "model.eqx"
    eqx.tree_serialise_leaves(path, (circ, obs))
    like = (jax.tree.map(jnp.zeros_like, circ), jax.tree.map(jnp.zeros_like, obs))
    loaded_circ, loaded_obs = eqx.tree_deserialise_leaves(path, like)
    assert tree_allclose(loaded_circ, circ, rtol=0, atol=0)
    assert tree_allclose(loaded_obs, obs, rtol=0, atol=0)
    assert float(qfx.expval(loaded_circ, loaded_obs)) == pytest.approx(ref.expval(circ, obs), abs=1e-5)


def test_optax_adam_lowers_the_energy():
    circ = make_circuit(jnp.asarray([0.1, 0.2, 0.3], jnp.float32))
    optimiser = optax.adam(0.1)
    state = optimiser.init(circ)

    @jax.jit
    def step(circ, state):
        energy, grad = jax.value_and_grad(qfx.expval)(circ, H)
        # Optax's bias correction mixes int32 step counts with floats; qfx itself stays strict.
        with jax.numpy_dtype_promotion("standard"):
            updates, state = optimiser.update(grad, state, circ)
            return optax.apply_updates(circ, updates), state, energy

    energies = []
    for _ in range(40):
        circ, state, energy = step(circ, state)
        energies.append(float(energy))
    assert isinstance(circ, qfx.Circuit)
    ground = np.linalg.eigvalsh(ref.observable_matrix(H, N))[0]
    final = ref.expval(circ, H)
    assert final < energies[0] - 0.5
    assert final >= ground - 1e-6  # the variational principle


def test_inverse_of_a_batch_with_repeat_blocks_is_refused():
    # The batch axis comes before the layers: reversing the leading axis inverted the batch order instead
    # (wrong states, no error, when the batch had as many circuits as layers). Mapping the call works.
    def make(s):
        return qfx.Circuit([qfx.repeat(lambda t: [qfx.RX(t, 0), qfx.RY(2 * t, 0)], s * jnp.arange(1.0, 4.0))])

    scales = jnp.array([0.1, 0.5, 0.9])
    batch = eqx.filter_vmap(make)(scales)
    mapped = r"mapping the call: eqx.filter_vmap\(lambda c: c.inverse\(\)\)\(c\)"
    with pytest.raises(ValueError, match=r"expected \(3,\)\..*" + mapped):
        batch.inverse()
    inverted = jax.vmap(qfx.state)(eqx.filter_vmap(lambda c: c.inverse())(batch))
    for i, s in enumerate(scales):
        np.testing.assert_allclose(inverted[i], ref.final_state(make(s).inverse()), atol=1e-5)


def test_numpy_scalars_in_static_fields():
    # np.int64 / np.bool_ control values were "not iterable"; a np.str_ Pauli word warned that a JAX array
    # was set as static.
    assert qfx.Controlled(qfx.RX(0.3, 0), 1, np.int64(0)).control_values == (0,)
    assert qfx.MultiControlledX((0, 1), control_values=np.bool_(True)).control_values == (1,)
    rot = qfx.PauliRot(0.1, np.str_("XZ"), (0, 1))
    assert type(rot.pauli_word) is str
    np.testing.assert_allclose(rot.matrix(), qfx.PauliRot(0.1, "XZ", (0, 1)).matrix())


def test_trees_that_are_not_simulated_print_and_draw():
    """The static half of eqx.partition, an eval_shape skeleton, an Optax label tree and an allow_int
    gradient (a float0 leaf) are circuits whose leaves are not numbers; repr and draw crashed on them."""
    circ = qfx.Circuit([qfx.H(0), qfx.RX(0.3, wires=0), qfx.Rot(0.1, 0.2, 0.3, wires=1), qfx.CNOT((0, 2))])
    integer = eqx.tree_at(lambda c: c.ops[1].theta, circ, jnp.asarray(1))
    grad = jax.grad(qfx.expval, allow_int=True)(integer, H)
    trees = {
        "None": eqx.partition(circ, eqx.is_inexact_array)[1],
        "ShapeDtypeStruct()": jax.eval_shape(lambda: circ),
        "'train'": jax.tree.map(lambda _: "train", circ),
        "float0()": grad,
    }
    for shown, tree in trees.items():
        assert f"RX({shown}, wires=0)" in repr(tree)
    # H shares its column with the wider Rot(·,·,·) on wire 1 (in the gradient, Rot's are numbers).
    lines = [qfx.draw(t).split("\n")[0] for t in trees.values()]
    assert lines[:3] == ["0: ─H" + "─" * 11 + "RX(·)──●──"] * 3
    assert re.fullmatch("0: ─H─+RX\\(·\\)──●──", lines[3])
    assert "c * Z(0) @ Z(1)" in repr(jax.eval_shape(lambda: H))
    # Numbers in any dtype still print as numbers (NumPy does not count bfloat16 as a number).
    half = jax.tree.map(lambda x: x.astype(jnp.bfloat16), (qfx.RX(0.3, 0), 0.5 * qfx.Z(0) + 0.25 * qfx.X(1)))
    assert repr(half) == "(RX(0.3008, wires=0), 0.5 * Z(0) + 0.25 * X(1))"
    listed = eqx.tree_at(lambda o: o.coeffs, H, [1, 2, 3])
    assert repr(listed) == "1 * Z(0) @ Z(1) + 2 * X(0) + 3 * X(1) @ Y(2)"
    # Simulating one gets an error that names the gate, not a TypeError from inside a kernel.
    with pytest.raises(TypeError, match="RX on wires .0,. has a parameter None, not a number.*eqx.partition"):
        qfx.probs(trees["None"])
    with pytest.raises(TypeError, match="RX on wires .0,. has a parameter 'train'"):
        qfx.expval(trees["'train'"], H)


def test_half_precision_angles_are_simulated_in_the_default_dtype():
    # The constructors cast angles; an edit put a bfloat16 angle in as it was, and its trigonometry in
    # bfloat16 was off by 2e-3 (float16: 2e-4).
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), qfx.CRY(0.2, wires=(0, 1))])
    for dtype in (jnp.bfloat16, jnp.float16):
        angle = jnp.asarray(1.234567, dtype)
        edited = eqx.tree_at(lambda c: c.ops[0].theta, circ, angle)
        expected = np.cos(float(angle))  # <Z0> after RX(t) is cos(t), at the angle as stored
        np.testing.assert_allclose(qfx.expval(edited, qfx.Z(0)), expected, rtol=1e-6)
        batched = jax.vmap(lambda t: qfx.expval(eqx.tree_at(lambda c: c.ops[0].theta, circ, t), qfx.Z(0)))
        np.testing.assert_allclose(batched(jnp.stack([angle, angle])), [expected] * 2, rtol=1e-6)
        grad = jax.grad(qfx.expval)(edited, qfx.Z(0))
        assert grad.ops[0].theta.dtype == dtype  # the gradient keeps the leaf's dtype


def test_pauli_word_letters_from_numpy():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Equinox warns of a NumPy scalar in a static field
        word = qfx.PauliWord(dict(enumerate(np.array(["Z", "X"]))))
    assert word.word == ((0, "Z"), (1, "X")) and all(type(letter) is str for _, letter in word.word)


def test_batches_sharded_with_explicit_axes():
    """`jax.make_mesh` makes Explicit axes by default; under `jax.set_mesh`, a batch sharded over them runs
    qfx's kernels (reshapes, gathers, scatters) with the axes made Auto instead of failing in them. A mesh
    of this machine's one device types the batch as sharded all the same."""
    from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: PLC0415 - this test only

    mesh = jax.make_mesh((1,), ("b",))
    ts = np.linspace(0.1, 0.8, 4, dtype=np.float32)
    batch = jax.device_put(jnp.asarray(ts), NamedSharding(mesh, P("b")))
    keys = jax.device_put(jax.random.split(jax.random.key(0), 4), NamedSharding(mesh, P("b")))
    c = lambda t: qfx.Circuit([qfx.RX(t, wires=0), qfx.CNOT((0, 1)), qfx.RY(t, wires=1)])  # noqa: E731
    f = lambda t: qfx.expval(c(t), qfx.Z(1))  # noqa: E731 - <Z1> = cos(t)^2
    with jax.set_mesh(mesh):
        values = jax.jit(jax.vmap(f))(batch)
        adjoint = lambda t: qfx.expval(c(t), qfx.Z(1), diff=qfx.diff.Adjoint())  # noqa: E731
        grads = jax.jit(jax.vmap(jax.grad(adjoint)))(batch)
        bits = jax.jit(jax.vmap(lambda k: qfx.sample(c(0.3), key=k, shots=8)))(keys)
        # What needs no reshape of sharded arrays runs as it did: a loop body closing over an array (which
        # auto_axes would not see), second derivatives outside jit.
        thetas = jnp.array([0.1, 0.2])
        loop = qfx.Circuit([qfx.for_loop(2, lambda i: [qfx.RX(thetas[i], wires=0)])], num_wires=1)
        looped = qfx.expval(loop, qfx.Z(0))
        curvature = jax.hessian(f)(jnp.float32(0.3))
    np.testing.assert_allclose(float(looped), np.cos(0.3), atol=1e-6)
    np.testing.assert_allclose(float(curvature), -2 * np.cos(0.6), atol=1e-5)  # d^2/dt^2 cos(t)^2
    np.testing.assert_allclose(np.asarray(values), np.cos(ts) ** 2, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grads), -np.sin(2 * ts), atol=1e-6)
    expected = jax.vmap(lambda k: qfx.sample(c(0.3), key=k, shots=8))(jax.random.split(jax.random.key(0), 4))
    np.testing.assert_array_equal(np.asarray(bits), np.asarray(expected))
