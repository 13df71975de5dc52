"""Control flow and mid-circuit measurement, against analytic values, the dense reference and
finite differences. Statistical checks use fixed keys and a 5-sigma tolerance from the shot count."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx

from . import reference as ref
from .helpers import central_difference, random_state, tree_allclose

SIGMA = 5.0
# Jitted entry points: the tests compile each program once instead of dispatching op by op.
probs, expval, var, density_matrix, outcome_probs, state, sample = (
    eqx.filter_jit(f)
    for f in (qfx.probs, qfx.expval, qfx.var, qfx.density_matrix, qfx.outcome_probs, qfx.state, qfx.sample)
)


def _five_sigma(p, shots):
    """A 5-sigma bound for the mean of `shots` values in [0, 1] with mean `p` (variance <= p (1 - p))."""
    return SIGMA * np.sqrt(np.maximum(np.asarray(p) * (1 - np.asarray(p)), 1e-4) / shots)


def _keys(n, seed=0):
    return jax.random.split(jax.random.key(seed), n)


def _u3(params, wire):
    return qfx.U3(*params, wires=wire)


# --- teleportation: feed-forward reproduces the input state exactly -----------------------------------


def _teleport(params):
    """Teleports U3(params)|0> from wire 0 to wire 2: Bell pair, Bell measurement, X^m1 Z^m0 on wire 2."""
    m0, m1 = qfx.measure(0), qfx.measure(1)
    return qfx.Circuit(
        [
            _u3(params, 0),
            qfx.H(1),
            qfx.CNOT(wires=(1, 2)),
            qfx.CNOT(wires=(0, 1)),
            qfx.H(0),
            m0,
            m1,
            qfx.cond(m1, qfx.X(2)),
            qfx.cond(m0, qfx.Z(2)),
        ]
    )


PARAMS = (1.1, -0.7, 0.4)


def _target_rho(params):
    psi = ref.op_matrix(qfx.U3(*params, wires=0)) @ np.array([1, 0])
    return np.outer(psi, psi.conj())


def test_teleportation_exact_mode():
    circ = _teleport(PARAMS)
    outcomes, rho = _exact_outcomes_and_rho(circ, list(circ.ops[5:7]), [2])
    np.testing.assert_allclose(np.asarray(rho), _target_rho(PARAMS), atol=1e-6)
    # The Bell measurement's four outcomes are equally likely, whatever the input.
    np.testing.assert_allclose(np.asarray(outcomes), [0.25] * 4, atol=1e-6)


def test_teleportation_every_trajectory():
    circ = _teleport(PARAMS)
    keys = _keys(64)
    rhos = jax.vmap(lambda k: density_matrix(circ, wires=[2], mcm="sampled", key=k))(keys)
    for rho in np.asarray(rhos):  # fidelity one in each trajectory, not only on average
        np.testing.assert_allclose(rho, _target_rho(PARAMS), atol=1e-5)
    m0, m1 = circ.ops[5], circ.ops[6]
    outcomes = jax.vmap(lambda k: outcome_probs(circ, [m0, m1], mcm="sampled", key=k))(keys)
    assert len({int(i) for i in np.argmax(np.asarray(outcomes), axis=1)}) == 4  # all four branches ran


def test_teleportation_functional_program():
    @qfx.autograph
    def teleport(psi, key):
        state = jnp.kron(psi, qfx.zero_state(2))
        state = qfx.apply(qfx.Circuit([qfx.H(1), qfx.CNOT((1, 2)), qfx.CNOT((0, 1)), qfx.H(0)]), state)
        k0, k1 = jax.random.split(key)
        m0, state = qfx.measure_state(state, 0, key=k0)
        m1, state = qfx.measure_state(state, 1, key=k1)
        if m1 == 1:
            state = qfx.apply(qfx.X(2), state)
        if m0 == 1:
            state = qfx.apply(qfx.Z(2), state)
        return state

    psi = random_state(np.random.default_rng(0), 1).astype(np.complex64)
    states = jax.jit(jax.vmap(teleport, in_axes=(None, 0)))(psi, _keys(32))
    for s in np.asarray(states):
        t = s.reshape(4, 2)  # wires 0, 1 hold the (collapsed) outcomes; wire 2 the teleported state
        branch = t[np.argmax(np.linalg.norm(t, axis=1))]
        assert abs(abs(np.vdot(psi, branch)) - 1) < 1e-5


# --- repeat until success -----------------------------------------------------------------------------


def _rus(theta, max_iterations):
    """Repeat until success for RZ(-theta) on wire 1, with an ancilla on wire 0.

    One attempt: H(a), CRZ(-2 theta)(a, t), H(a), measure a. By hand, with B = RZ(-2 theta) = exp(i theta Z):
    the state is |0> (I + B)/2 |psi> + |1> (I - B)/2 |psi>. (I + B)/2 = cos(theta/2) exp(i theta Z / 2), so
    outcome 0 has probability p = cos^2(theta/2) whatever |psi>, and leaves RZ(-theta)|psi> (success).
    (I - B)/2 = -i sin(theta/2) exp(i theta Z / 2) Z: outcome 1 leaves exp(i theta Z/2) Z |psi>, undone
    by RZ(theta) then Z (the correction), and the attempt is repeated.
    With 1 + max_iterations attempts, P(success) = 1 - (1 - p)^(1 + max_iterations); the target ends in
    RZ(-theta)|psi> on success and |psi> otherwise.
    """
    m = qfx.measure(0, reset=True)
    attempt = [
        qfx.H(0),
        qfx.CRZ(-2 * theta, wires=(0, 1)),
        qfx.H(0),
        m,
        qfx.cond(m, [qfx.RZ(theta, 1), qfx.Z(1)]),
    ]
    circ = qfx.Circuit(
        [qfx.RY(0.8, wires=1), *attempt, qfx.while_loop(m, attempt, max_iterations=max_iterations)]
    )
    return circ, m


def _rus_success(theta, k):
    return 1 - (1 - math.cos(theta / 2) ** 2) ** (1 + k)


@eqx.filter_jit
def _exact_outcomes_and_rho(circ, m, wires):
    return qfx.outcome_probs(circ, m, mcm="exact"), qfx.density_matrix(circ, wires=wires, mcm="exact")


@pytest.mark.parametrize("max_iterations", [0, 3])
def test_repeat_until_success_exact(max_iterations):
    theta = 2.0
    circ, m = _rus(theta, max_iterations)
    ps = _rus_success(theta, max_iterations)
    probs, rho = _exact_outcomes_and_rho(circ, m, [1])
    np.testing.assert_allclose(np.asarray(probs), [ps, 1 - ps], atol=1e-5)
    # The target: RZ(-theta) RY(0.8)|0> on success, RY(0.8)|0> after the last failure.
    before = ref.op_matrix(qfx.RY(0.8, wires=0)) @ np.array([1, 0])
    after = ref.op_matrix(qfx.RZ(-theta, wires=0)) @ before
    expected = ps * np.outer(after, after.conj()) + (1 - ps) * np.outer(before, before.conj())
    np.testing.assert_allclose(np.asarray(rho), expected, atol=1e-5)


def test_repeat_until_success_sampled_statistics():
    theta, k, shots = 2.0, 2, 4000
    circ, m = _rus(theta, k)
    outcomes = jax.jit(jax.vmap(lambda key: outcome_probs(circ, m, mcm="sampled", key=key)))(_keys(shots))
    ps = _rus_success(theta, k)
    assert abs(float(jnp.mean(outcomes[:, 0])) - ps) < _five_sigma(ps, shots)


def test_while_loop_without_bound_is_exact_and_sampled():
    theta = 2.0
    circ, m = _rus(theta, None)
    np.testing.assert_allclose(np.asarray(outcome_probs(circ, m, mcm="exact")), [1, 0], atol=1e-5)
    outcomes = jax.vmap(lambda k: outcome_probs(circ, m, mcm="sampled", key=k))(_keys(64))
    assert np.all(np.asarray(outcomes)[:, 0] == 1)  # every trajectory ends in success


def test_while_loop_without_bound_after_an_unlikely_post_selection():
    """The loop runs until the weight still looping is negligible relative to all records' weight, which a
    post-selection of probability ~1e-6 makes tiny: the loop must not stop early."""
    ps, m = qfx.measure(0, postselect=1), qfx.measure(1, reset=True)
    circ = qfx.Circuit([qfx.RY(0.002, wires=0), ps, qfx.H(1), m, qfx.while_loop(m, [qfx.H(1), m])])
    np.testing.assert_allclose(np.asarray(outcome_probs(circ, m, mcm="exact")), [1, 0], atol=1e-5)


def test_outcome_probs_of_a_measurement_asked_twice():
    m0, m1 = qfx.measure(0), qfx.measure(1)
    circ = qfx.Circuit([qfx.RY(0.8, wires=0), qfx.RY(1.9, wires=1), m0, m1])
    p0, p1 = np.sin(0.4) ** 2, np.sin(0.95) ** 2
    np.testing.assert_allclose(
        np.asarray(outcome_probs(circ, [m0, m0], mcm="exact")), [1 - p0, 0, 0, p0], atol=1e-6
    )
    joint = np.asarray(outcome_probs(circ, [m1, m0], mcm="exact")).reshape(2, 2)
    np.testing.assert_allclose(joint, np.outer([1 - p1, p1], [1 - p0, p0]), atol=1e-6)
    triple = np.asarray(outcome_probs(circ, [m1, m0, m1], mcm="exact")).reshape(2, 2, 2)
    np.testing.assert_allclose(triple, np.einsum("ab,ac->abc", joint, np.eye(2)), atol=1e-6)


# --- sampled and exact modes agree, and match a deferred-measurement reference ------------------------


def _feed_forward_circuit(a, b):
    m0, m1 = qfx.measure(0), qfx.measure(1, reset=True)
    return qfx.Circuit(
        [
            qfx.RY(a, wires=0),
            qfx.RX(b, wires=1),
            qfx.CNOT(wires=(0, 2)),
            m0,
            qfx.cond(m0, qfx.RY(b, wires=1), qfx.H(1)),
            m1,
            qfx.switch(m0 + 2 * m1, [[qfx.X(2)], [qfx.RX(a, wires=2)], [qfx.H(2)], []]),
            qfx.RY(0.3, wires=1),
        ]
    )


def test_sampled_and_exact_agree_statistically():
    circ = _feed_forward_circuit(0.9, 1.7)
    exact = np.asarray(probs(circ, mcm="exact"))
    shots = 2000
    sampled = jax.jit(jax.vmap(lambda k: qfx.probs(circ, mcm="sampled", key=k)))(_keys(shots, seed=1))
    assert np.all(np.abs(np.asarray(sampled).mean(0) - exact) < _five_sigma(exact, shots))
    # qfx.sample: one trajectory per shot, against the exact distribution.
    bits = sample(circ, key=jax.random.key(2), shots=shots, wires=[2], mcm="sampled")
    p1 = exact.reshape(4, 2).sum(0)[1]
    assert abs(float(bits.mean()) - p1) < _five_sigma(p1, shots)


def test_deferred_measurement_reference():
    # Measuring a wire and conditioning on the outcome gives the statistics of the controlled gate
    # (the deferred measurement principle), which the dense reference simulates.
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.RY(1.2, wires=0), qfx.H(1), m, qfx.cond(m, qfx.RY(0.7, wires=1), qfx.RZ(0.4, 1))])
    deferred = qfx.Circuit(
        [
            qfx.RY(1.2, wires=0),
            qfx.H(1),
            qfx.Controlled(qfx.RY(0.7, wires=1), controls=0),
            qfx.Controlled(qfx.RZ(0.4, wires=1), controls=0, control_values=(0,)),
        ]
    )
    np.testing.assert_allclose(np.asarray(probs(circ, mcm="exact")), ref.probs(deferred), atol=1e-6)
    obs = 0.5 * qfx.X(1) + qfx.Z(0) @ qfx.Z(1)
    assert abs(float(expval(circ, obs, mcm="exact")) - ref.expval(deferred, obs)) < 1e-5
    assert abs(float(var(circ, obs, mcm="exact")) - ref.var(deferred, obs)) < 1e-5
    np.testing.assert_allclose(
        np.asarray(density_matrix(circ, wires=[1], mcm="exact")), ref.density_matrix(deferred, [1]), atol=1e-6
    )


def test_postselection_and_reset():
    m = qfx.measure(0, postselect=1)
    circ = qfx.Circuit([qfx.RY(1.0, wires=0), qfx.H(1), m, qfx.CNOT((0, 1))])
    # Post-selected on outcome 1: wire 0 is |1>, the CNOT flips wire 1's |+>: probabilities 1/2, 1/2.
    expected = [0, 0, 0.5, 0.5]
    np.testing.assert_allclose(np.asarray(probs(circ, mcm="exact")), expected, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(probs(circ, mcm="sampled", key=jax.random.key(0))), expected, atol=1e-6
    )
    reset = qfx.Circuit([qfx.RY(1.0, wires=0), qfx.measure(0, reset=True)])
    np.testing.assert_allclose(np.asarray(probs(reset, mcm="exact")), [1, 0], atol=1e-6)
    psi = state(reset, mcm="sampled", key=jax.random.key(1))
    np.testing.assert_allclose(np.abs(np.asarray(psi)), [1, 0], atol=1e-6)
    impossible = qfx.Circuit([qfx.measure(0, postselect=1)])
    with pytest.raises(Exception, match="post-selected outcome has probability 0"):
        jax.block_until_ready(probs(impossible, mcm="sampled", key=jax.random.key(0)))
    with pytest.raises(Exception, match="post-selected outcomes have probability 0"):  # not NaN
        jax.block_until_ready(probs(impossible, mcm="exact"))
    # Probability 0 up to rounding: RX(pi)|0> leaves ~2e-15 on |0> in float32, which renormalised would
    # pass for a state; both modes refuse it.
    rounded = qfx.Circuit([qfx.RX(math.pi, wires=0), qfx.measure(0, postselect=0), qfx.H(1)])
    with pytest.raises(Exception, match="post-selected outcome has probability 0"):
        jax.block_until_ready(probs(rounded, mcm="sampled", key=jax.random.key(0)))
    with pytest.raises(Exception, match="post-selected outcomes have probability 0"):
        jax.block_until_ready(probs(rounded, mcm="exact"))


def test_exact_mode_holds_a_run_time_check_only_when_it_post_selects():
    # The check that the post-selected outcomes have probability above 0 is a host callback at run time,
    # which jax.export refuses and the persistent compilation cache skips: circuits without post-selection
    # (whose total weight is 1) must not carry it.
    def program(postselect):
        def f(t):
            m = qfx.measure(0, postselect=postselect)
            return qfx.expval(
                qfx.Circuit([qfx.RX(t, wires=0), m, qfx.cond(m, qfx.X(1))]), qfx.Z(1), mcm="exact"
            )

        return jax.jit(f)

    plain, postselected = program(None), program(1)
    assert "callback" not in plain.lower(jnp.float32(0.3)).as_text()
    assert "callback" in postselected.lower(jnp.float32(0.3)).as_text()
    np.testing.assert_allclose(float(plain(jnp.float32(0.3))), np.cos(0.3), atol=1e-6)  # P(0) - P(1)
    np.testing.assert_allclose(float(postselected(jnp.float32(0.3))), -1.0, atol=1e-6)


def test_sampled_mode_refuses_post_selection_after_a_drawn_outcome():
    # P(m0 = 1 | m1 = 1) is 0.83 (exact mode); forcing m1 in one trajectory leaves m0 drawn unconditioned
    # (0.31 on average over keys), so sampled mode refuses rather than return those statistics.
    m0, m1 = qfx.measure(0), qfx.measure(1, postselect=1)
    circ = qfx.Circuit([qfx.RY(1.2, wires=0), qfx.CNOT((0, 1)), qfx.RY(0.6, wires=1), m0, m1])
    s, a, b = np.sin(0.6) ** 2, np.sin(0.3) ** 2, np.cos(0.3) ** 2
    expected = s * b / (s * b + (1 - s) * a)
    np.testing.assert_allclose(outcome_probs(circ, m0, mcm="exact")[1], expected, atol=1e-6)
    with pytest.raises(ValueError, match="post-selects after an outcome drawn at random"):
        outcome_probs(circ, m0, mcm="sampled", key=jax.random.key(0))
    m2, m3 = qfx.measure(0), qfx.measure(1, postselect=0, reset=True)
    loop = qfx.Circuit([qfx.RY(1.2, wires=0), qfx.for_loop(2, lambda i: [qfx.RY(0.3, wires=1), m3, m2])])
    with pytest.raises(ValueError, match="a loop body both post-selects and draws outcomes"):
        probs(loop, mcm="sampled", key=jax.random.key(0))
    # Post-selected first, then drawn: forcing conditions everything after it, as exact mode does.
    first = qfx.Circuit([qfx.RY(1.2, wires=0), qfx.CNOT((0, 1)), qfx.RY(0.6, wires=1), m1, m0])
    trajectories = jax.vmap(lambda k: outcome_probs(first, m0, mcm="sampled", key=k))(_keys(4000))
    np.testing.assert_allclose(
        np.mean(np.asarray(trajectories)[:, 1]), expected, atol=4 * np.sqrt(0.25 / 4000)
    )


def test_sampled_state_is_the_normalised_post_measurement_state():
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.RY(1.0, wires=0), qfx.CNOT((0, 1)), m])
    for k in _keys(8):
        psi = np.asarray(state(circ, mcm="sampled", key=k))
        bit = int(np.asarray(outcome_probs(circ, m, mcm="sampled", key=k))[1])
        expected = np.zeros(4)
        expected[3 * bit] = 1
        np.testing.assert_allclose(np.abs(psi), expected, atol=1e-6)


def test_sampled_outcomes_of_probability_zero_are_never_drawn():
    """A state whose squared norm is 9e-5 below 1 (within the normalisation check's tolerance; float32
    drift over thousands of gates does the same) has wire 0 in |1> with certainty: 200,000 trajectories
    of `measure_state`, a sampled circuit and `qfx.sample` draw 1 every time, and every collapsed state
    is finite and normalised. (Drawn as `u < p1`, about 18 of them drew 0 and divided by 0.)"""
    psi0 = jnp.asarray([0, 0, np.sqrt(1 - 9e-5), 0], jnp.complex64)
    keys = jax.random.split(jax.random.key(3), 200_000)
    bits, states = jax.jit(jax.vmap(lambda k: qfx.measure_state(psi0, 0, key=k)))(keys)
    assert int(jnp.sum(bits)) == keys.shape[0]
    np.testing.assert_allclose(np.asarray(jnp.sum(jnp.abs(states) ** 2, axis=1)), 1.0, rtol=1e-5)
    m = qfx.measure(0)
    circ = qfx.Circuit([m], num_wires=2)
    drawn = jax.jit(jax.vmap(lambda k: outcome_probs(circ, m, mcm="sampled", key=k, initial_state=psi0)))(
        keys
    )
    assert float(jnp.sum(drawn[:, 1])) == keys.shape[0]
    samples = qfx.sample(circ, key=jax.random.key(4), shots=200_000, mcm="sampled", initial_state=psi0)
    assert bool(jnp.all(samples[:, 0] == 1))


# --- loops --------------------------------------------------------------------------------------------


def _layer(i, thetas, phis):
    return [
        qfx.RX(thetas[i], wires=0),
        qfx.RY(phis[i] * jnp.asarray(i + 1, phis.dtype), wires=1),
        qfx.CNOT(wires=(0, 1)),
    ]


def _unrolled(thetas, phis):
    ops = []
    for i, (t, p) in enumerate(zip(thetas, phis, strict=True)):
        ops += [qfx.RX(float(t), wires=0), qfx.RY(float(p) * (i + 1), wires=1), qfx.CNOT(wires=(0, 1))]
    return qfx.Circuit(ops, num_wires=2)


def test_for_loop_matches_reference_and_gradient(x64):
    # x64: the reference builds its gates from the perturbed angles, which must not round to float32.
    rng = np.random.default_rng(1)
    thetas, phis = (jnp.asarray(rng.uniform(-1, 1, 4)) for _ in range(2))
    circ = qfx.Circuit([qfx.H(0), qfx.for_loop(4, _layer, thetas, phis)])
    reference = qfx.Circuit([qfx.H(0), *_unrolled(np.asarray(thetas), np.asarray(phis)).ops])
    np.testing.assert_allclose(np.asarray(state(circ)), ref.final_state(reference), atol=1e-5)
    obs = qfx.Z(0) @ qfx.X(1) + 0.3 * qfx.Y(1)
    grad = jax.grad(qfx.expval)(circ, obs)  # a circuit-shaped gradient
    assert isinstance(grad.ops[1], qfx.ForLoop)

    def f(args):
        t, p = args
        return ref.expval(qfx.Circuit([qfx.H(0), *_unrolled(t, p).ops]), obs)

    expected = central_difference(f, (np.asarray(thetas), np.asarray(phis)))
    assert tree_allclose(grad.ops[1].body.args, expected, atol=1e-7)


def test_for_loop_traced_length_forward_mode():
    thetas = jnp.linspace(0.1, 0.8, 6)

    def f(t, n):
        circ = qfx.Circuit([qfx.for_loop(n, lambda i, t: qfx.RX(t[i], wires=0), t)])
        return expval(circ, qfx.Z(0))

    for n in (0, 3, 6):
        expected = math.cos(float(jnp.sum(thetas[:n])))
        assert abs(float(jax.jit(f)(thetas, n)) - expected) < 1e-5
    jac = jax.jacfwd(f)(thetas, 3)
    expected = [-math.sin(float(jnp.sum(thetas[:3])))] * 3 + [0] * 3
    np.testing.assert_allclose(np.asarray(jac), expected, atol=1e-5)


def _jaxpr_size(f, *args):
    return len(str(jax.make_jaxpr(f)(*args)))


def test_thousand_iterations_compile_like_one():
    def f(thetas):
        return expval(qfx.Circuit([qfx.for_loop(thetas.shape[0], _layer, thetas, thetas)]), qfx.Z(1))

    one, thousand = jnp.ones(1), jnp.ones(1000)
    # The traced program does not grow with the length (nothing is unrolled)...
    assert _jaxpr_size(f, thousand) < 1.1 * _jaxpr_size(f, one)
    # ... nor does the optimised program XLA compiles (its size, not a timing: tests assert behaviour).
    # (Two iterations: XLA turns a one-iteration loop into straight-line code.)
    sizes = [len(jax.jit(f).lower(x).compile().as_text()) for x in (jnp.ones(2), thousand)]
    assert sizes[1] < 1.1 * sizes[0]
    assert abs(float(jax.jit(f)(jnp.zeros(1000))) - 1) < 1e-5


def test_loop_and_conditional_measurements_per_iteration():
    # An error-correction-like round: measure the ancilla, reset it, flip the data qubit on outcome 1.
    def round_(i, theta):
        m = qfx.measure(1, reset=True)
        return [qfx.RY(theta, wires=0), qfx.CNOT((0, 1)), m, qfx.cond(m, qfx.X(0))]

    circ = qfx.Circuit([qfx.for_loop(5, round_, jnp.float32(0.6))])
    # By hand: each round rotates |0> by RY(0.6), copies the bit, resets it and flips it back to 0.
    np.testing.assert_allclose(np.asarray(probs(circ, wires=[0], mcm="exact")), [1, 0], atol=1e-5)
    states = jax.vmap(lambda k: probs(circ, mcm="sampled", key=k))(_keys(16))
    np.testing.assert_allclose(np.asarray(states), np.tile([1, 0, 0, 0], (16, 1)), atol=1e-5)


def test_no_recompile_for_new_parameters():
    circ, m = _rus(2.0, 3)
    count = 0

    @eqx.filter_jit
    def f(c):
        nonlocal count
        count += 1
        return expval(c, qfx.Z(1), mcm="exact")

    f(circ)
    f(eqx.tree_at(lambda c: c.ops[0].theta, circ, jnp.asarray(0.1, circ.ops[0].theta.dtype)))
    assert count == 1
    # The same circuit built again (new qfx.measure calls) has the same static structure: no recompile.
    f(_rus(2.0, 3)[0])
    assert count == 1


def test_measurement_numbering_is_per_circuit():
    a, _ = _rus(2.0, 1)
    b, _ = _rus(2.0, 1)
    assert [op.id for op in a.ops if isinstance(op, qfx.MidMeasure)] == [0]
    assert jax.tree.structure(a) == jax.tree.structure(b)
    # Two circuits' measurements stay distinct when combined: the second is renumbered 1.
    both = qfx.Circuit([*a.ops, *b.ops])
    ids = [op.id for op in both.ops if isinstance(op, qfx.MidMeasure)]
    assert ids == [0, 1]
    probs = qfx.outcome_probs(both, [m for m in both.ops if isinstance(m, qfx.MidMeasure)], mcm="exact")
    assert probs.shape == (4,)


# --- conditionals on traced values, and gradients -----------------------------------------------------


def test_cond_on_traced_boolean_and_gradient(x64):
    def f(theta, flag):
        circ = qfx.Circuit([qfx.RX(theta, wires=0), qfx.cond(flag, [qfx.RY(theta, wires=0)], [qfx.H(0)])])
        return expval(circ, qfx.Z(0))

    jf = jax.jit(f)
    theta = 0.4
    assert abs(float(jf(theta, True)) - math.cos(theta) ** 2) < 1e-5  # <Z> after RX(t) RY(t)
    reference = ref.expval(qfx.Circuit([qfx.RX(theta, wires=0), qfx.H(0)]), qfx.Z(0))
    assert abs(float(jf(theta, False)) - reference) < 1e-5
    for flag in (True, False):
        fd = central_difference(
            lambda t, flag=flag: ref.expval(
                qfx.Circuit([qfx.RX(float(t), wires=0), qfx.RY(float(t), wires=0) if flag else qfx.H(0)]),
                qfx.Z(0),
            ),
            np.float64(theta),
        )
        assert abs(float(jax.grad(f)(theta, flag)) - fd) < 1e-8


def test_gradient_through_measurement_branches(x64):
    # The RUS success probability as a function of theta, differentiated through the exact mode.
    def f(theta):
        circ, m = _rus(theta, 2)
        return qfx.outcome_probs(circ, m, mcm="exact")[0]

    fd = central_difference(lambda t: _rus_success(float(t), 2), np.float64(1.3))
    assert abs(float(jax.jit(jax.grad(f))(1.3)) - fd) < 1e-6
    # And an expectation after feed-forward, against finite differences of the deferred reference.
    obs = qfx.X(1)

    def g(params):
        a, b = params
        m = qfx.measure(0)
        circ = qfx.Circuit([qfx.RY(a, wires=0), m, qfx.cond(m, qfx.RY(b, wires=1))])
        return qfx.expval(circ, obs, mcm="exact")

    def g_ref(params):
        a, b = (float(x) for x in params)
        return ref.expval(
            qfx.Circuit([qfx.RY(a, wires=0), qfx.Controlled(qfx.RY(b, wires=1), controls=0)]), obs
        )

    params = np.array([0.7, 1.1])
    np.testing.assert_allclose(
        np.asarray(jax.jit(jax.grad(g))(jnp.asarray(params))), central_difference(g_ref, params), atol=1e-6
    )


def test_sampled_trajectories_are_not_differentiated():
    """One trajectory's derivative holds its outcomes fixed: a biased gradient, so an error instead."""

    def f(theta, key):
        m = qfx.measure(0)
        circ = qfx.Circuit([qfx.RY(theta, wires=0), m, qfx.cond(m, qfx.X(1))])
        return qfx.expval(circ, qfx.Z(1), mcm="sampled", key=key)

    keys = _keys(4)
    assert jax.vmap(f, in_axes=(None, 0))(0.8, keys).shape == (4,)  # evaluating is fine
    with pytest.raises(
        ValueError, match="Sampled measurement outcomes .* cannot be differentiated.*mcm='exact'"
    ):
        jax.grad(f)(0.8, keys[0])

    # The functional style draws outcomes alike: the same error (its mean over keys was ~0 for -0.78).
    def functional(theta, key):
        m = qfx.measure(0)
        state = qfx.apply(
            qfx.Circuit([qfx.RY(theta, wires=0), m, qfx.cond(m, qfx.X(1))]), qfx.zero_state(2), key=key
        )
        return jnp.abs(state[0]) ** 2

    def by_hand(theta, key):
        _, state = qfx.measure_state(qfx.apply(qfx.RY(theta, wires=0), qfx.zero_state(1)), 0, key=key)
        return jnp.abs(state[0]) ** 2

    for g in (functional, by_hand):
        assert jax.vmap(g, in_axes=(None, 0))(0.8, keys).shape == (4,)
        with pytest.raises(ValueError, match="Sampled measurement outcomes"):
            jax.grad(g)(0.8, keys[0])

    # A post-selected outcome is not drawn: the renormalised projection differentiates exactly. Wire 1 of
    # RY(t) x RY(0.5) post-selected on 1 leaves (cos(t/2)|0> + sin(t/2)|1>) x |1>: d<11|psi>/dt = cos(t/2)/2.
    def post(t):
        state = qfx.apply(qfx.Circuit([qfx.RY(t, wires=0), qfx.RY(0.5, wires=1)]), qfx.zero_state(2))
        return jnp.real(qfx.measure_state(state, 1, key=keys[0], postselect=1)[1][3])

    assert float(jax.grad(post)(0.8)) == pytest.approx(0.5 * np.cos(0.4), abs=1e-5)

    # The same post-selection in a circuit, sampled mode: nothing is drawn, so it differentiates as the
    # exact mode does (it was refused as a sampled outcome). P(wire 0 = 1 | wire 1 = 1) = sin^2(t/2).
    def in_circuit(t, mcm):
        circ = qfx.Circuit([qfx.RY(t, wires=0), qfx.RY(0.5, wires=1), qfx.measure(1, postselect=1)])
        return qfx.probs(circ, wires=0, mcm=mcm, key=keys[0] if mcm == "sampled" else None)[1]

    for mcm in ("sampled", "exact"):
        assert float(jax.grad(in_circuit)(0.8, mcm)) == pytest.approx(0.5 * np.sin(0.8), abs=1e-6)


def test_for_loop_float_arguments_are_parameter_leaves():
    # A Python float argument was kept as a float: eqx.filter_grad (eqx.is_inexact_array) skipped it, so an
    # Optax loop over eqx.partition never trained it. <Z> = cos(3 t) cos(0.2): d/dt = -3 sin(3 t) cos(0.2).
    circ = qfx.Circuit([qfx.for_loop(3, _rx_body, 0.2), qfx.RY(0.2, wires=0)])
    grad = eqx.filter_grad(lambda c: expval(c, qfx.Z(0)))(circ)
    (dt,) = grad.ops[0].body.args
    assert float(dt) == pytest.approx(-3 * np.sin(0.6) * np.cos(0.2), abs=1e-5)


def _rx_on_wire_body(i, thetas, wire):
    return [qfx.RX(thetas[i], wires=wire), qfx.CNOT((0, 1))]


def test_for_loop_int_arguments_are_static(x64):
    # A Python int argument (a wire) was an int32 leaf: jax.grad refused the circuit ("grad requires real-
    # or complex-valued inputs") and a batch of such circuits did not jax.vmap.
    def unrolled(t):
        return qfx.Circuit([op for i in range(3) for op in _rx_on_wire_body(i, t, 1)])

    thetas = jnp.asarray([0.1, 0.2, 0.3])
    circ = qfx.Circuit([qfx.for_loop(3, _rx_on_wire_body, thetas, 1)], num_wires=2)
    f = lambda c: expval(c, qfx.Z(1))  # noqa: E731
    assert float(f(circ)) == pytest.approx(ref.expval(unrolled(thetas), qfx.Z(1)), abs=1e-10)
    dthetas, wire = jax.grad(f)(circ).ops[0].body.args
    assert wire.value == 1  # static: no gradient, no leaf
    expected = central_difference(lambda t: ref.expval(unrolled(t), qfx.Z(1)), np.asarray(thetas))
    np.testing.assert_allclose(dthetas, expected, atol=1e-7)
    two = jnp.stack([thetas, 2 * thetas])
    batch = eqx.filter_vmap(lambda t: qfx.Circuit([qfx.for_loop(3, _rx_on_wire_body, t, 1)], num_wires=2))(
        two
    )
    np.testing.assert_allclose(
        jax.vmap(f)(batch), [ref.expval(unrolled(t), qfx.Z(1)) for t in two], atol=1e-10
    )


def test_for_loop_numpy_arguments_become_arrays():
    # A NumPy array stayed NumPy: the body's a[i] with a traced index failed (TracerArrayConversionError).
    def f(t):
        body = lambda i, a: qfx.RX(a[i] * t, wires=0)  # noqa: E731
        return qfx.expval(qfx.Circuit([qfx.for_loop(3, body, np.array([0.1, 0.2, 0.3]))]), qfx.Z(0))

    for g in (f, jax.jit(f)):
        assert float(g(2.0)) == pytest.approx(np.cos(1.2), abs=1e-6)
    assert float(jax.grad(f)(2.0)) == pytest.approx(-0.6 * np.sin(1.2), abs=1e-6)


def _rx_body(i, t):
    return [qfx.RX(t, wires=0)]


def _loop_in_layer_body(i, t):
    return [qfx.RX(t[i], wires=0), qfx.CNOT((0, 1))]


def _loop_in_layer(t):
    return [qfx.for_loop(3, _loop_in_layer_body, t), qfx.RY(t[0], wires=1)]


def _unrolled_loop_layers(thetas):
    ops = []
    for t in thetas:
        ops += [o for i in range(3) for o in _loop_in_layer_body(i, t)] + [qfx.RY(t[0], wires=1)]
    return qfx.Circuit(ops)


def _repeat_body(i, thetas):
    return [qfx.repeat(lambda t: [qfx.RX(t[0], wires=0), qfx.RY(t[1], wires=1), qfx.CZ((0, 1))], thetas[i])]


def test_repeat_inside_a_for_loop_body(x64):
    # The loop's shape-only visit sliced the block's ShapeDtypeStruct leaves: "'ShapeDtypeStruct' object is
    # not subscriptable" for any Repeat in a loop body (captured or built there, inside a cond too).
    thetas = jnp.asarray(np.random.default_rng(3).uniform(-1, 1, (2, 3, 2)))

    def unrolled(t):  # the layers of iterations t[0], t[1], ...
        return qfx.Circuit(
            [g for ti in t for a, b in ti for g in (qfx.RX(a, 0), qfx.RY(b, 1), qfx.CZ((0, 1)))]
        )

    obs = qfx.Y(0) + qfx.Z(0) @ qfx.X(1) + 0.3 * qfx.Z(1)
    circ = qfx.Circuit([qfx.for_loop(2, _repeat_body, thetas)])
    assert float(expval(circ, obs)) == pytest.approx(ref.expval(unrolled(thetas), obs), abs=1e-10)
    (grad,) = jax.grad(expval)(circ, obs).ops[0].body.args
    expected = central_difference(lambda t: ref.expval(unrolled(t), obs), np.asarray(thetas))
    np.testing.assert_allclose(grad, expected, atol=1e-7)
    block = _repeat_body(0, thetas)[0]  # captured by the body, inside a cond
    in_cond = qfx.Circuit([qfx.for_loop(2, lambda i: [qfx.cond(jnp.asarray(1), [block])])])
    expected = ref.expval(unrolled(jnp.stack([thetas[0], thetas[0]])), obs)
    assert float(expval(in_cond, obs)) == pytest.approx(expected, abs=1e-10)


def test_for_loop_inside_repeat_layers(x64):
    # Each layer's loop reads that layer's (3,) angles; the visit of the body once saw all layers' (4, 3).
    thetas = jnp.arange(12.0).reshape(4, 3) * 0.1
    circ = qfx.Circuit([qfx.repeat(_loop_in_layer, thetas)])
    obs = qfx.Z(0) + qfx.X(1)
    reference = ref.expval(_unrolled_loop_layers(np.asarray(thetas)), obs)
    assert float(expval(circ, obs)) == pytest.approx(reference, abs=1e-5)
    grad = jax.grad(lambda t: expval(qfx.Circuit([qfx.repeat(_loop_in_layer, t)]), obs))(thetas)
    by_reference = central_difference(lambda t: ref.expval(_unrolled_loop_layers(t), obs), thetas)
    np.testing.assert_allclose(grad, by_reference, atol=1e-4)
    assert float(expval(qfx.Circuit([*circ.ops, *circ.inverse().ops]), qfx.Z(0))) == pytest.approx(
        1.0, abs=1e-5
    )
    assert "for i:" in qfx.draw(circ) and "]×4" in qfx.draw(circ)


def test_plain_circuits_take_the_old_path():
    circ = qfx.Circuit([qfx.RX(0.3, wires=0), qfx.CNOT((0, 1))])
    assert not qfx._control.has_control(circ.ops)
    a = jax.make_jaxpr(lambda c: expval(c, qfx.Z(1)))(circ)
    b = jax.make_jaxpr(lambda c: qfx.state(c, diff=qfx.diff.Backprop()))(circ)
    assert "while" not in str(a) and "cond" not in str(a) and "while" not in str(b)


# --- drawing ------------------------------------------------------------------------------------------


def test_draw_shows_loops_and_conditionals_without_unrolling():
    circ, _ = _rus(2.0, 4)
    loop = qfx.for_loop(1000, _layer, jnp.ones(1000), jnp.ones(1000))
    text = qfx.draw(qfx.Circuit([*circ.ops, loop]), max_length=200)
    # A circuit numbers its measurements from 0 in order of appearance; the only one here is m0.
    assert "M0→0" in text
    assert "if m0" in text and "while m0" in text and "≤4" in text
    assert "]×1000" in text and text.count("RX(·)") == 1  # one drawn iteration, index-dependent parameter
    assert text.split("\n")[1].count("RZ(-4.00)") == 2  # the CRZ's target: before the loop, and inside it


def _loop_then_ry(t):
    return qfx.Circuit([qfx.for_loop(3, _rx_on_wire_body, t, 0), qfx.RY(t[0], wires=1)], num_wires=2)


def test_a_batch_holding_a_loop_draws_and_inverts():
    # Both called the body on the batch's leaves ("RX: the angle theta must be a scalar, got shape (3,)").
    thetas = jnp.asarray([[0.3, -0.7, 1.1], [0.9, 0.2, -0.4]])
    batch = eqx.filter_vmap(_loop_then_ry)(thetas)
    text = qfx.draw(batch)  # one circuit's structure; the batched angles as "·"
    assert text.split("\n") == ["0: [for i: ─RX(·)──●─]×3────────", "1: [       ────────X─]  ─RY(·)──"]
    inverse = batch.inverse()
    states = jax.vmap(state)(inverse)
    for t, psi in zip(thetas, states, strict=True):
        unrolled = qfx.Circuit([op for i in range(3) for op in _rx_on_wire_body(i, t, 0)] + [qfx.RY(t[0], 1)])
        np.testing.assert_allclose(psi, ref.final_state(unrolled.inverse()), atol=1e-6)


def test_draw_numbers_measurements_put_in_by_tree_at():
    # eqx.tree_at skips Circuit's numbering of its measurements: they were drawn "M?" and "if m?".
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.H(0), m, qfx.cond(m, qfx.X(1))], num_wires=2)
    k = qfx.measure(1)
    edited = eqx.tree_at(lambda c: c.ops, circ, (qfx.H(1), k, qfx.cond(k, qfx.X(0))))
    text = qfx.draw(edited)
    assert "?" not in text and "M0" in text and "if m0" in text
    assert qfx.draw(circ).count("m0") == 1


def _measured_cond(t):
    m = qfx.measure(0)
    return qfx.Circuit([qfx.H(0), qfx.H(1), m, qfx.cond(m, qfx.MultiRZ(t, wires=(0, 1))), qfx.H(1)])


def test_an_unmapped_batch_with_control_flow_is_refused():
    # The shape check skipped the branches of conds and the bodies of while loops: a batch of circuits whose
    # batched gates sat there ran as one circuit with broadcast angles ([0, 0, 0.749, 0.251] for MultiRZ,
    # none of the four circuits' probabilities), or failed deep in JAX for other gates.
    ts = jnp.linspace(0.3, 1.2, 4)
    batch = eqx.filter_vmap(_measured_cond)(ts)
    for mode, key in (("exact", None), ("sampled", jax.random.key(0))):
        with pytest.raises(
            ValueError, match=r"qfx.probs: MultiRZ on wires \(0, 1\) has a parameter of shape \(4,\)"
        ):
            qfx.probs(batch, mcm=mode, key=key)
    mapped = jax.vmap(lambda c: qfx.probs(c, mcm="exact"))(batch)
    np.testing.assert_allclose(mapped[1], qfx.probs(_measured_cond(ts[1]), mcm="exact"), atol=1e-6)

    traced = eqx.filter_vmap(lambda t: qfx.Circuit([qfx.cond(t > 0.5, qfx.X(0))]))(ts)
    with pytest.raises(
        ValueError,
        match=r"qfx.expval: a qfx.cond's traced predicate or index has shape \(4,\), expected \(\)",
    ):
        qfx.expval(traced, qfx.Z(0))

    def looped(t):
        m = qfx.measure(0)
        return qfx.Circuit(
            [qfx.H(0), m, qfx.while_loop(m, [qfx.RX(t, wires=1), qfx.H(0), m], max_iterations=2)]
        )

    with pytest.raises(ValueError, match=r"qfx.expval: RX on wires \(1,\) has a parameter of shape \(4,\)"):
        qfx.expval(eqx.filter_vmap(looped)(ts), qfx.Z(1), mcm="exact")


def _inner_loop(j, a):
    return [qfx.RZ(a[j], wires=0), qfx.RX(a[j], wires=0)]


def _layer_of_a_loop(p):
    return qfx.Circuit([qfx.for_loop(2, _inner_loop, p), qfx.CNOT(wires=(0, 1))])


def _repeat_of_loops(t):
    return qfx.Circuit([qfx.H(1), qfx.repeat(_layer_of_a_loop, t * jnp.arange(1.0, 7.0).reshape(3, 2))])


def test_batch_inverse_checks_the_loops_in_repeat_layers():
    # A batch of 3 circuits with 3 layers, each a loop: Circuit.inverse() reversed the batch axis for the
    # layers (states off by 0.94, no error) once ForLoop.adjoint stopped calling the body.
    ts = jnp.linspace(0.2, 1, 3)
    batch = eqx.filter_vmap(_repeat_of_loops)(ts)
    with pytest.raises(
        ValueError, match=r"Circuit.inverse: a qfx.for_loop's body fails .*filter_vmap\(lambda c"
    ):
        batch.inverse()
    inverse = eqx.filter_vmap(lambda c: c.inverse())(batch)
    for t, psi in zip(ts, jax.vmap(state)(inverse), strict=True):
        unrolled = [qfx.H(1)]
        for p in np.asarray(t * jnp.arange(1.0, 7.0).reshape(3, 2)):
            unrolled += [g for j in range(2) for g in _inner_loop(j, p)] + [qfx.CNOT((0, 1))]
        np.testing.assert_allclose(psi, ref.final_state(qfx.Circuit(unrolled).inverse()), atol=1e-6)


def _apply_gate_class(i, gate, t):
    return [gate(t, wires=0)]


def _read_measurement(i, m):
    return [qfx.cond(m, qfx.X(1)), qfx.H(0)]


def _rebuilt_with_a_measurement_argument():
    m = qfx.measure(0)
    return qfx.Circuit([qfx.H(0), m, qfx.for_loop(2, _read_measurement, m)])


def test_loop_arguments_of_every_kind():
    # A gate class and a NumPy int as arguments: drawn with their values (drawing traced every argument,
    # refusing non-arrays), a NumPy scalar kept static without Equinox's "JAX array set as static" warning.
    circ = qfx.Circuit(
        [
            qfx.for_loop(2, _apply_gate_class, qfx.RX, 0.3),
            qfx.for_loop(1, _rx_on_wire_body, jnp.ones(1), np.int64(1)),
        ]
    )
    assert qfx.draw(circ).split("\n")[0].startswith("0: [for i: ─RX(0.30)─]×2")
    assert float(expval(circ, qfx.Z(0))) == pytest.approx(np.cos(0.6), abs=1e-6)
    # A measurement passed as an argument is numbered by the circuit: rebuilt circuits are equal and share
    # one compilation (each rebuild traced again).
    a, b = _rebuilt_with_a_measurement_argument(), _rebuilt_with_a_measurement_argument()
    assert jax.tree.structure(a) == jax.tree.structure(b)
    traces = []

    @eqx.filter_jit
    def f(c):
        traces.append(1)
        return qfx.probs(c, mcm="exact")

    np.testing.assert_allclose(f(a), f(b), atol=0)
    assert len(traces) == 1
    # Whole arguments can be replaced with eqx.tree_at (the arguments are the body's field).
    edited = eqx.tree_at(lambda c: c.ops[0].body.args[0], circ, qfx.RY)
    assert "RY(0.30)" in qfx.draw(edited)


def test_a_nested_loop_with_a_function_argument_draws():
    # The batch retry of the outer loop masked the inner loop's failure to trace a function argument.
    def body(i, thetas):
        return [qfx.RX(thetas[i], wires=0), qfx.for_loop(2, lambda j, f: [qfx.RY(f(0.1), wires=0)], jnp.sin)]

    circ = qfx.Circuit([qfx.for_loop(3, body, jnp.arange(3.0))])
    assert qfx.draw(circ).split("\n")[0] == "0: [for i: ─RX(·)─[for i: ─RY(·)─]×2]×3─"


_OUTER = qfx.measure(0)


def _body_with_its_own_measurement(i):
    k = qfx.measure(1, reset=True)
    return [qfx.H(1), k, qfx.cond(k, qfx.X(2)), qfx.cond(_OUTER, qfx.X(1))]


def test_draw_numbers_a_loop_bodys_measurements_after_the_circuits():
    # The body's own measurement was drawn M0 / "if m0", the same as the circuit's m0.
    later = qfx.measure(2)
    circ = qfx.Circuit(
        [qfx.H(0), _OUTER, qfx.for_loop(2, _body_with_its_own_measurement), later, qfx.cond(later, qfx.X(0))]
    )
    rows = qfx.draw(circ).split("\n")
    assert "M0" in rows[0] and "M1" in rows[2]  # the circuit's two, in order of appearance
    assert "M2→0" in rows[1]  # the body's, numbered after them
    assert "if m2" in rows[2] and "if m0" in rows[1]  # the body reads its own and the circuit's
    assert "if m1" in rows[0]


# --- inverses and batches of circuits with loops -----------------------------------------------------


def test_apply_and_measure_state():
    state = qfx.apply(qfx.Circuit([qfx.H(0), qfx.CNOT((0, 1))]), qfx.zero_state(2))
    bits, states = jax.jit(jax.vmap(lambda k: qfx.measure_state(state, 0, key=k)))(_keys(200))
    for b, s in zip(np.asarray(bits), np.asarray(states), strict=True):
        assert abs(abs(s[3 * b]) - 1) < 1e-6  # a Bell pair collapses to |00> or |11>
    assert abs(float(bits.mean()) - 0.5) < _five_sigma(0.5, 200)
    loop = jax.jit(qfx.apply)(qfx.for_loop(4, lambda i: qfx.X(0)), qfx.zero_state(1))
    np.testing.assert_allclose(np.abs(np.asarray(loop)), [1, 0], atol=1e-6)
    m = qfx.measure(0, reset=True)
    out = eqx.filter_jit(qfx.apply)(
        qfx.Circuit([qfx.H(0), m, qfx.cond(m, qfx.X(1))]), qfx.zero_state(2), key=jax.random.key(0)
    )
    assert abs(np.linalg.norm(np.asarray(out)) - 1) < 1e-6


def test_grad_through_the_inverse_of_a_loop():
    """The inverse of a static for_loop keeps only float leaves (its length is static), so jax.grad takes
    the circuit as it is; inverses built twice are equal (one compilation)."""

    def layer(i, thetas):
        return [qfx.RX(thetas[i], wires=0), qfx.CNOT(wires=(0, 1)), qfx.RY(2 * thetas[i], wires=1)]

    thetas = jnp.asarray([0.1, 0.2, 0.3])
    circ = qfx.Circuit([qfx.for_loop(3, layer, thetas)])
    inverse = circ.inverse()
    assert inverse == circ.inverse()
    assert all(jnp.issubdtype(x.dtype, jnp.floating) for x in jax.tree.leaves(inverse))

    def f(c):
        return qfx.expval(c, qfx.Z(0) + qfx.X(1), initial_state=jnp.full(4, 0.5, jnp.complex64))

    (grad,) = jax.grad(f)(inverse).ops[0].body.args[0].args
    step = 1e-3
    shifted = [thetas.at[k].add(s) for k in range(3) for s in (step, -step)]
    bumped = [f(qfx.Circuit([qfx.for_loop(3, layer, t)]).inverse()) for t in shifted]
    fd = (np.asarray(bumped[0::2]) - np.asarray(bumped[1::2])) / (2 * step)
    np.testing.assert_allclose(grad, fd, atol=2e-3)
