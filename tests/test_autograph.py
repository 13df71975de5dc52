"""AutoGraph (`qfx.autograph`): Python control flow on traced values becomes qfx and JAX control flow."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import malt
import numpy as np
import pytest

import qfx

from . import reference as ref


def _primitives(jaxpr) -> set[str]:
    """The control-flow primitives in a jaxpr, nested ones included."""
    text = str(jaxpr)
    return {p for p in ("while", "cond", "scan") if f"{p}[" in text}


@qfx.autograph
def _program(theta, n):
    state = qfx.zero_state(2)
    for i in range(n):
        state = qfx.apply(qfx.RX(theta * (i + 1).astype(theta.dtype), wires=0), state)
    if theta > 0:
        state = qfx.apply(qfx.CNOT((0, 1)), state)
    else:
        state = qfx.apply(qfx.H(1), state)
    count = 0
    while jnp.abs(state[0]) > 0.5 + count:
        count = count + 1
    return state, count


def test_autograph_converts_traced_control_flow():
    jaxpr = jax.make_jaxpr(_program)(0.3, 4)
    assert {"while", "cond"} <= _primitives(jaxpr.jaxpr)
    for theta, n in [(0.3, 4), (-0.2, 2), (0.5, 0)]:
        state, _ = jax.jit(_program)(theta, n)
        angle = theta * n * (n + 1) / 2
        ops = [qfx.RX(angle, wires=0), qfx.CNOT((0, 1)) if theta > 0 else qfx.H(1)]
        np.testing.assert_allclose(np.asarray(state), ref.final_state(qfx.Circuit(ops, 2)), atol=1e-5)
    assert int(jax.jit(_program)(0.0, 1)[1]) == 1  # |state[0]| = 1 > 0.5: one iteration, then 1 > 1.5 fails


@qfx.autograph
def _static_program(theta):
    state = qfx.zero_state(1)
    for _ in range(3):  # static: unrolled as Python does
        state = qfx.apply(qfx.RX(theta, wires=0), state)
    if theta.shape == ():  # static: no lax.cond
        state = qfx.apply(qfx.H(0), state)
    return state


def test_autograph_leaves_static_control_flow_alone():
    jaxpr = jax.make_jaxpr(_static_program)(0.3)
    assert not {"while", "cond", "scan"} & _primitives(jaxpr.jaxpr)
    expected = ref.final_state(qfx.Circuit([qfx.RX(0.9, wires=0), qfx.H(0)]))
    np.testing.assert_allclose(np.asarray(_static_program(jnp.float32(0.3))), expected, atol=1e-5)


@qfx.autograph
def _build(thetas, n):
    ops = [qfx.H(0)]
    for i in range(n):
        ops.append(qfx.RX(thetas[i], wires=0))
        ops.append(qfx.CNOT((0, 1)))
    m = qfx.measure(1, reset=True)
    ops.append(m)
    if m:
        ops.append(qfx.X(0))
    else:
        ops.append(qfx.RY(thetas[0], wires=0))
    while m:
        malt.experimental.set_loop_options(maximum_iterations=3)
        ops.append(qfx.H(1))
        ops.append(m)
    return qfx.Circuit(ops)


def test_autograph_builds_circuits_with_native_control_flow():
    thetas = jnp.asarray([0.3, 0.6, 0.2, 0.9])

    def loss(thetas, n):
        return qfx.expval(_build(thetas, n), qfx.Z(0), mcm="exact")

    jaxpr = jax.make_jaxpr(loss)(thetas, 3)
    assert "while" in _primitives(jaxpr.jaxpr)  # the loop over the traced n

    def unrolled(thetas, n):
        m = qfx.measure(1, reset=True)
        ops = [qfx.H(0)] + [op for i in range(n) for op in (qfx.RX(thetas[i], wires=0), qfx.CNOT((0, 1)))]
        ops += [m, qfx.cond(m, qfx.X(0), qfx.RY(thetas[0], wires=0))]
        ops += [qfx.while_loop(m, [qfx.H(1), m], max_iterations=3)]
        return qfx.expval(qfx.Circuit(ops), qfx.Z(0), mcm="exact")

    both = jax.jit(lambda t, n: (loss(t, n), jax.jacfwd(loss)(t, n)))  # n traced: one compilation
    for n in (0, 3):
        value, jac = both(thetas, n)
        expected, expected_jac = jax.jit(lambda t, n=n: (unrolled(t, n), jax.jacfwd(unrolled)(t, n)))(thetas)
        assert abs(float(value) - float(expected)) < 1e-5
        np.testing.assert_allclose(np.asarray(jac), np.asarray(expected_jac), atol=1e-5)
    built = eqx.filter_jit(_build)(thetas, jnp.int32(2))  # n traced: native control flow
    kinds = [type(op).__name__ for op in built.ops]
    assert kinds == ["Hadamard", "ForLoop", "MidMeasure", "Cond", "WhileLoop"]
    assert built.ops[-1].max_iterations == 3


def test_autograph_and_or_on_measurements_are_logical():
    """`and` / `or` on measurement values are Python's, not bitwise: m0 + m1 == 2 is true."""

    @qfx.autograph
    def build(mode):
        m0, m1, m2 = qfx.measure(0), qfx.measure(1), qfx.measure(2)
        ops = [qfx.X(0), qfx.X(1), qfx.X(2), m0, m1, m2]
        s = m0 + m1
        if mode == "and":
            if s and m2:
                ops.append(qfx.X(3))
        elif not s or m2:  # (not 2) or 1
            ops.append(qfx.X(3))
        return qfx.Circuit(ops, 4)

    for mode in ("and", "or"):
        p = qfx.probs(build(mode), wires=(3,), mcm="exact")
        np.testing.assert_allclose(np.asarray(p), [0.0, 1.0], atol=1e-6)


def test_autograph_nested_functions():
    @qfx.autograph
    def build(theta):
        def layer(t):
            return [qfx.RX(t, wires=0)]

        return qfx.Circuit(layer(theta) + layer(2 * theta))

    assert float(qfx.expval(build(0.3), qfx.Z(0))) == pytest.approx(math.cos(0.9), abs=1e-6)


def test_traced_index_and_trip_count_are_rounded():
    """Float leaves (for jax.grad over the circuit) that an optimizer step nudged still select the same
    branch and iteration count."""
    circ = qfx.Circuit(
        [
            qfx.switch(jnp.int32(1), [[qfx.X(0)], [qfx.RY(0.5, wires=0)]]),
            qfx.for_loop(jnp.int32(3), lambda i: [qfx.RX(0.4, wires=1)]),
        ]
    )
    nudged = eqx.tree_at(
        lambda c: (c.ops[0].index, c.ops[1].num_iterations),
        circ,
        (circ.ops[0].index - 1e-6, circ.ops[1].num_iterations - 1e-6),
    )
    for c in (circ, nudged):
        np.testing.assert_allclose(
            np.asarray(qfx.expval(c, [qfx.Z(0), qfx.Z(1)])), [math.cos(0.5), math.cos(1.2)], atol=1e-5
        )


def test_traced_trip_count_above_the_exact_float_range_is_refused():
    exact = 2 ** (np.finfo(np.dtype(jax.dtypes.canonicalize_dtype(jnp.float64))).nmant + 1)
    with pytest.raises(ValueError, match=f"qfx.for_loop: {exact + 1} is above {exact}"):
        qfx.for_loop(jnp.int32(exact + 1), lambda i: [qfx.X(0)])
    assert int(qfx.for_loop(jnp.int32(exact), lambda i: [qfx.X(0)]).num_iterations) == exact


def test_autograph_helpers_are_converted():
    def helper(state, n):
        for _ in range(n):
            state = qfx.apply(qfx.X(0), state)
        return state

    @qfx.autograph
    def f(n):
        return helper(qfx.zero_state(1), n)

    assert "while" in _primitives(jax.make_jaxpr(f)(3).jaxpr)
    np.testing.assert_allclose(np.abs(np.asarray(jax.jit(f)(3))), [0, 1], atol=1e-6)


def _add_layer(ops, theta):
    """A helper that appends to the list it is given, as plain Python code does."""
    ops.append(qfx.RY(theta, wires=0))
    ops.append(qfx.CNOT(wires=(0, 1)))


def test_autograph_keeps_in_place_updates():
    """Converted code changes lists, dicts and arrays in place as Python does: a helper's appends reach the
    caller's list, aliases see them, a nested function appends to the enclosing list, `c[w] += 1` works;
    inside an `if` on a traced value, each branch updates its own copy."""

    def build(theta):
        ops = [qfx.H(1)]
        _add_layer(ops, theta)

        def layer(t):
            ops.append(qfx.RX(t, wires=1))

        layer(theta)
        alias = ops
        alias.extend([qfx.Z(0)])
        return qfx.Circuit(ops)

    plain, converted = build(0.3), qfx.autograph(build)(0.3)
    assert [type(op) for op in converted.ops] == [type(op) for op in plain.ops]
    assert len(plain.ops) == 5
    np.testing.assert_allclose(np.asarray(qfx.probs(converted)), np.asarray(qfx.probs(plain)), atol=1e-6)

    @qfx.autograph
    def counts(wires):
        c = np.zeros(3, int)
        for w in wires:
            c[w] += 1
        return c

    np.testing.assert_array_equal(counts([0, 2, 2]), [1, 0, 2])

    @qfx.autograph
    def branch(x):
        ops = [qfx.H(0)]
        d = {"v": jnp.float32(0.0)}
        if x > 0:
            ops.extend([qfx.X(1)])
        if x > 0:
            d["v"] = jnp.float32(5.0)
        return qfx.probs(qfx.Circuit(ops, num_wires=2)), d["v"]

    for x, expected, v in ((-1.0, [0.5, 0, 0.5, 0], 0.0), (1.0, [0, 0.5, 0, 0.5], 5.0)):
        p, value = jax.jit(branch)(x)
        np.testing.assert_allclose(np.asarray(p), expected, atol=1e-6)
        assert float(value) == v

    class Builder:  # appends to an attribute inside a traced loop: one qfx.for_loop
        def __init__(self):
            self.ops = [qfx.H(1)]

        @qfx.autograph
        def layers(self, thetas, n):
            for i in range(n):
                self.ops.append(qfx.RY(thetas[i], wires=0))
            return qfx.Circuit(self.ops, num_wires=2)

    thetas = jnp.array([0.3, 0.5, 0.9])
    built = jax.jit(lambda t, n: qfx.probs(Builder().layers(t, n)))(thetas, 2)
    np.testing.assert_allclose(
        np.asarray(built), np.asarray(qfx.probs(qfx.Circuit([qfx.H(1), qfx.RY(0.8, 0)]))), atol=1e-6
    )

    cache: dict = {}

    class Counter:  # `add` is not taken for a container's method: the object is no loop state
        total = 0.0

        def add(self, v):
            self.total += v

    def scale():
        return cache.setdefault("scale", 2.0)  # a closure-held cache, changed inside a traced loop: fine

    @qfx.autograph
    def accumulate(x, n):
        counter = Counter()
        for _ in range(n):
            counter.add(1.0)
            x = x * scale()
        return x

    assert float(jax.jit(accumulate)(1.0, 3)) == 8.0


def test_autograph_while_evaluates_its_condition_as_python_does():
    calls = []

    def more(k):
        calls.append(k)
        return k < 3

    @qfx.autograph
    def loop():
        k = 0
        while more(k):
            k += 1
            if k > 10:
                break
        return k

    assert loop() == 3
    assert calls == [0, 1, 2, 3]


def test_autograph_traced_range_refuses_a_zero_step():
    @qfx.autograph
    def count(n, step):
        k = jnp.int32(0)
        for _ in range(0, n, step):
            k += 1
        return k

    assert int(jax.jit(count, static_argnums=1)(5, 2)) == 3
    two, zero = jnp.asarray(2), jnp.asarray(0)  # concrete JAX steps inside the trace
    assert int(jax.jit(lambda n: count(n, two))(5)) == 3
    for step in (0, zero):
        with pytest.raises(ValueError, match="range.. arg 3 must not be zero"):
            jax.jit(lambda n, step=step: count(n, step))(5)


def _loops_with_else(n, stop):
    """Python's loop `else` clauses: run when the loop ends without a `break` (also after no iteration)."""
    out = []
    for i in range(n):
        if i == stop:
            break
        out.append(i)
    else:
        out.append("for-else")
    k = 0
    while k < n:
        k += 1
        if k == stop:
            break
    else:
        out.append("while-else")
    for i in range(2):
        for j in range(n):
            if j == stop:
                break
        else:  # a `break` in an inner loop's `else` leaves the outer loop
            out.append("inner-else")
            break
        out.append(("outer", i))
    return out


def _loop_else_without_break(x, n):
    for _ in range(n):
        x = x * 2.0
    else:
        x = x + 1.0
    while x < 100.0:
        x = x * 3.0
    else:
        x = x - 1.0
    return x


def test_autograph_loop_else_runs_as_in_python():
    """malt refuses `for`/`while` with `else`; qfx rewrites them (without a `break`, the `else` follows the
    loop; with one, it runs unless a `break` of that loop ran). Python's own result is the reference."""
    converted = qfx.autograph(_loops_with_else)
    for n, stop in [(0, 5), (3, 5), (3, 1), (4, 0), (4, 3)]:
        assert converted(n, stop) == _loops_with_else(n, stop)
    # On traced values: the loops become lax.fori_loop / lax.while_loop with the `else` after them.
    traced = jax.jit(qfx.autograph(_loop_else_without_break))
    for x, n in [(1.0, 0), (1.0, 3), (5.0, 2)]:
        assert float(traced(x, n)) == _loop_else_without_break(x, n)

    @qfx.autograph
    def circuit(thetas, n):
        ops = []
        for i in range(n):  # n traced: a qfx.for_loop, then the `else`'s gate
            ops.append(qfx.RY(thetas[i], wires=0))
        else:
            ops.append(qfx.CNOT(wires=(0, 1)))
        return qfx.Circuit(ops, num_wires=2)

    thetas = jnp.asarray([0.3, 0.4, 0.5])
    expected = qfx.probs(qfx.Circuit([qfx.RY(0.7, wires=0), qfx.CNOT(wires=(0, 1))]))
    got = jax.jit(lambda t, n: qfx.probs(circuit(t, n)))(thetas, 2)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def _break_with_else(x, n):
    for i in range(n):
        x = x + 1.0
        if i > 2:
            break
    else:
        x = x - 1.0
    return x


@qfx.autograph
def _helper_in_traced_loop(thetas, n):
    ops = [qfx.H(1)]
    for i in range(n):
        _add_layer(ops, thetas[i])
    return qfx.Circuit(ops)


@qfx.autograph
def _with_break(x, n):
    for i in range(n):
        x = x + 1.0
        if i > 2:
            break
    return x


@qfx.autograph
def _different_types(x):
    if x > 0:
        y = jnp.zeros(2)
    else:
        y = jnp.zeros(3)
    return y


@qfx.autograph
def _one_branch(x):
    if x > 0:
        y = x
    return y  # noqa: F821


@qfx.autograph
def _type_changes(x, n):
    s = 0
    for _ in range(n):
        s = s + x
    return s


@qfx.autograph
def _while_break(x):
    while x < 10.0:
        x = x * 2
        if x > 5.0:
            break
    return x


def test_autograph_errors_name_the_line():
    with pytest.raises(ValueError, match=r"test_autograph\.py:\d+: `for i in range\(n\):`.*`break`"):
        jax.make_jaxpr(_with_break)(1.0, 5)
    with pytest.raises(ValueError, match=r"test_autograph\.py:\d+: `for i in range\(n\):`.*`break`"):
        jax.make_jaxpr(qfx.autograph(_break_with_else))(1.0, 5)
    with pytest.raises(TypeError, match=r"test_autograph\.py:\d+: `if x > 0:`.*different types"):
        jax.make_jaxpr(_different_types)(1.0)
    with pytest.raises(ValueError, match=r"`y` is not defined on every path"):
        jax.make_jaxpr(_one_branch)(1.0)
    with pytest.raises(TypeError, match=r"`s` has type int32\[\] before .* but float32\[\] after"):
        jax.make_jaxpr(_type_changes)(1.0, 3)
    with pytest.raises(ValueError, match=r"`while x < 10.0:`.*`break` inside a `while` loop"):
        jax.make_jaxpr(_while_break)(1.0)
    # A helper appending to a list inside a traced loop: traced once, it would append one layer.
    with pytest.raises(ValueError, match=r"`ops` is changed in place by a function called inside a `for`"):
        jax.make_jaxpr(lambda t, n: qfx.probs(_helper_in_traced_loop(t, n)))(jnp.zeros(3), 3)
    with pytest.raises(TypeError, match="expected a Python function"):
        qfx.autograph(len)
    namespace: dict = {}
    exec("def no_source(x):\n    return x\n", namespace)
    with pytest.raises(ValueError, match="source code of no_source is not available"):
        qfx.autograph(namespace["no_source"])


@qfx.autograph
def _float_range(x):
    for _ in range(x):
        x = x + 1.0
    return x


@qfx.autograph
def _mixed_loop(thetas, n):
    ops = []
    total = 0.0
    for i in range(n):
        ops.append(qfx.RX(thetas[i], wires=0))
        total = total + thetas[i]
    return ops, total


@qfx.autograph
def _measured_if_without_list(m):
    x = 0
    if m:
        x = 1
    return x


@qfx.autograph
def _measured_while_without_list(m):
    x = 0
    while m:
        x = 1
    return x


@qfx.autograph
def _traced_while_building(x):
    ops = [qfx.H(0)]
    while x > 0:
        ops.append(qfx.X(0))
        x = x - 1
    return ops


@qfx.autograph
def _becomes_traced(x):
    y = 0.0
    while y < 3:
        y = y + x
    return y


@qfx.autograph
def _not_arrays(n):
    s = "a"
    for _ in range(n):
        s = s + "b"
    return s


@qfx.autograph
def _vector_if(x):
    y = x
    if x > 0:
        y = x + 1
    return y


@qfx.autograph
def _vector_while(x):
    while x > 0:
        x = x - 1
    return x


@qfx.autograph
def _return_in_building(m):
    ops = []
    if m:
        ops.append(qfx.X(0))
        return ops
    return ops


@qfx.autograph
def _two_lists(m):
    a, b = [], []
    if m:
        a.append(qfx.X(0))
        b.append(qfx.X(1))
    return a, b


def test_autograph_other_errors():
    with pytest.raises(TypeError, match=r"range\(\) needs integer scalars"):
        jax.make_jaxpr(_float_range)(1.0)
    with pytest.raises(ValueError, match="appends operations to a circuit, so it cannot also update `total`"):
        jax.make_jaxpr(_mixed_loop)(jnp.ones(3), 3)
    m = qfx.measure(0)
    with pytest.raises(ValueError, match="an `if` on a measurement value needs a list of operations"):
        _measured_if_without_list(m)
    with pytest.raises(ValueError, match="a `while` loop on a measurement value needs a list"):
        _measured_while_without_list(m)
    with pytest.raises(ValueError, match="a `while` loop on a traced array cannot build a circuit"):
        jax.make_jaxpr(_traced_while_building)(3)
    with pytest.raises(ValueError, match="became traced after it started as a Python value"):
        jax.make_jaxpr(_becomes_traced)(1.0)
    with pytest.raises(TypeError, match="`s` changes in a converted loop but holds str"):
        jax.make_jaxpr(_not_arrays)(3)
    with pytest.raises(ValueError, match="the condition of an `if` must be a scalar"):
        jax.make_jaxpr(_vector_if)(jnp.ones(2))
    with pytest.raises(ValueError, match="the condition of a `while` loop must be a scalar"):
        jax.make_jaxpr(_vector_while)(jnp.ones(2))
    with pytest.raises(ValueError, match="a `return` inside an `if` on a traced or measured value"):
        _return_in_building(m)
    with pytest.raises(ValueError, match="appends to several lists of operations"):
        _two_lists(m)
    # A list that collects values, not operations: said so, with the way out (it was "Circuit: operation 0
    # is a DynamicJaxprTracer").
    with pytest.raises(TypeError, match="appends DynamicJaxprTracer to the list `results`.*into an array"):
        jax.make_jaxpr(_collects_values)(0.3, 3)


@qfx.autograph
def _collects_values(theta, n):
    results = []
    for i in range(n):
        results.append(theta * i.astype(jnp.float32))
    return results
