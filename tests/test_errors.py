"""Every error message, triggered once: structural mistakes raise at construction, with the fix."""

import math
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx

C2 = qfx.Circuit([qfx.H(0)], num_wires=2)


def _stacked(size):
    return eqx.filter_vmap(lambda t: qfx.Circuit([qfx.RX(t, wires=0)]))(jnp.ones(size))


def _batch_of_circuits():
    return eqx.filter_vmap(lambda t: qfx.Circuit([qfx.RX(t, 0), qfx.CNOT((0, 1))]))(jnp.linspace(0, 1, 5))


def _batch_of_circuits_with_layers(batch: int):
    """`batch` circuits of 3 layers; with batch = 3 the leading axis looks like the layers' axis."""
    layers = lambda t: qfx.Circuit([qfx.repeat(lambda a: [qfx.RY(a, 0)], t)])  # noqa: E731
    return eqx.filter_vmap(layers)(jnp.ones((batch, 3)))


_ONE_WIRE = qfx.Circuit([qfx.RY(0.4, wires=0)])


def _edit_coeffs(coeffs):
    return eqx.tree_at(lambda o: o.coeffs, 0.5 * qfx.Z(0) + qfx.Hermitian(np.eye(2), wires=0), coeffs)


def _edit_matrix(matrix):
    return eqx.tree_at(lambda o: o.matrix, qfx.Hermitian(np.eye(2), wires=0), matrix)


class _NotAnObservableKind(qfx.AbstractObservable):
    @property
    def wires(self):
        return (0,)


# (id, thunk, exception type, regex matched against the message)
CASES = [
    # --- wires ---
    (
        "wire_out_of_range",
        lambda: qfx.Circuit([qfx.RX(0.1, wires=5)], num_wires=3),
        ValueError,
        re.escape("RX(0.1, wires=5) acts on wire 5, but the circuit has 3 wires (0..2); pass num_wires=6"),
    ),
    (
        "one_wire_named_in_the_singular",
        lambda: qfx.Circuit([qfx.X(3)], num_wires=1),
        ValueError,
        re.escape("PauliX(wires=3) acts on wire 3, but the circuit has 1 wire (0); pass num_wires=4"),
    ),
    (
        "empty_circuit_without_num_wires",  # it was given 1 wire, and later errors said "has 1 wires"
        lambda: qfx.Circuit([]),
        ValueError,
        re.escape("Circuit: cannot infer the number of wires (it has no operations); pass num_wires"),
    ),
    (
        "circuit_on_no_wire_without_num_wires",
        lambda: qfx.Circuit([qfx.Repeat(qfx.Circuit([], num_wires=2), length=3)]),
        ValueError,
        re.escape("Circuit: cannot infer the number of wires (its operations act on no wire)"),
    ),
    (
        "gate_without_wires",  # Python's own error named the private _AbstractOneParameter.__init__
        lambda: qfx.RX(0.1),
        TypeError,
        re.escape(
            "qfx.RX: missing the argument 'wires' (the wires it acts on: an int); call it as qfx.RX(theta, "
        ),
    ),
    (
        "gate_without_an_angle",
        lambda: qfx.Rot(0.1, wires=0),
        TypeError,
        re.escape(
            "qfx.Rot: missing the argument 'theta' (an angle in radians); call it as qfx.Rot(phi, theta"
        ),
    ),
    (
        "two_qubit_gate_without_wires",
        lambda: qfx.CNOT(),
        TypeError,
        re.escape("qfx.CNOT: missing the argument 'wires' (the wires it acts on: 2 ints)"),
    ),
    ("matrix_gate_without_wires", lambda: qfx.QubitUnitary(np.eye(2)), TypeError, "a sequence of ints"),
    ("pauli_rot_without_a_word", lambda: qfx.PauliRot(0.1, wires=0), TypeError, "a string over 'IXYZ'"),
    ("controlled_without_controls", lambda: qfx.Controlled(qfx.X(0)), TypeError, "'controls' \\(the control"),
    ("adjoint_of_nothing", lambda: qfx.Adjoint(), TypeError, "'base' \\(the gate it wraps\\)"),
    ("duplicate_wires", lambda: qfx.CNOT((1, 1)), ValueError, "cannot act twice on the same wire"),
    ("negative_wire", lambda: qfx.RX(0.1, wires=-1), ValueError, "wires must be non-negative integers"),
    (
        "wrong_wire_count",
        lambda: qfx.CNOT((0, 1, 2)),
        ValueError,
        re.escape("CNOT acts on 2 wire(s), but got wires=(0, 1, 2)"),
    ),
    ("no_wires", lambda: qfx.MultiRZ(0.1, wires=()), ValueError, "needs at least one wire"),
    (
        "non_int_wires",
        lambda: qfx.RX(0.1, wires=1.0),
        TypeError,
        "wires must be an int or a sequence of ints",
    ),
    ("non_int_wire_in_sequence", lambda: qfx.CNOT((0, "a")), TypeError, "wires must be ints, got 'a'"),
    ("bool_wire", lambda: qfx.CNOT((0, True)), TypeError, "wires must be ints, got True"),
    # --- angles ---
    ("complex_angle", lambda: qfx.RX(0.1 + 1j, wires=0), TypeError, "the angle theta must be real"),
    (
        "complex_array_angle",
        lambda: qfx.Rot(0.0, jnp.asarray(1j), 0.0, wires=0),
        TypeError,
        "theta must be real",
    ),
    (
        "non_scalar_angle",
        lambda: qfx.RY(jnp.ones(2), wires=0),
        ValueError,
        r"the angle theta must be a scalar, got shape \(2,\).*eqx.filter_vmap",
    ),
    # --- matrices ---
    (
        "non_unitary",
        lambda: qfx.QubitUnitary(np.ones((2, 2)), wires=0),
        ValueError,
        re.escape("QubitUnitary(wires=(0,)): the matrix is not unitary"),
    ),
    (
        "nan_unitary",
        lambda: qfx.QubitUnitary(np.full((2, 2), np.nan), wires=0),
        ValueError,
        re.escape("the matrix is not unitary (max |U^dagger U - I| = nan)"),
    ),
    (
        "qubit_unitary_shape",
        lambda: qfx.QubitUnitary(np.eye(2), wires=(0, 1)),
        ValueError,
        re.escape("expected a (4, 4) matrix for 2 wire(s), got shape (2, 2)"),
    ),
    (
        "non_hermitian",
        lambda: qfx.Hermitian(np.array([[0, 1], [0, 0]]), wires=0),
        ValueError,
        "the matrix is not Hermitian",
    ),
    (
        "nan_hermitian",
        lambda: qfx.Hermitian(np.array([[np.nan, 0], [0, 1]]), wires=0),
        ValueError,
        "the matrix is not Hermitian",
    ),
    (
        "hermitian_shape",
        lambda: qfx.Hermitian(np.eye(2), wires=(0, 1)),
        ValueError,
        re.escape("Hermitian(wires=(0, 1)): expected a (4, 4) matrix, got shape (2, 2)"),
    ),
    # --- gate families ---
    (
        "pauli_rot_letters",
        lambda: qfx.PauliRot(0.1, "XQ", wires=(0, 1)),
        ValueError,
        "pauli_word must be a string over 'IXYZ'",
    ),
    (
        "pauli_rot_length",
        lambda: qfx.PauliRot(0.1, "XX", wires=0),
        ValueError,
        "'XX' has 2 letters but wires=\\(0,\\) has 1",
    ),
    ("mcx_one_wire", lambda: qfx.MultiControlledX((0,)), ValueError, "needs a control and a target"),
    (
        "mcx_control_values",
        lambda: qfx.MultiControlledX((0, 1, 2), control_values=(1,)),
        ValueError,
        re.escape("MultiControlledX: control_values must be 2 static values in {0, 1}"),
    ),
    (
        "controlled_overlap",
        lambda: qfx.Controlled(qfx.RX(0.1, wires=0), controls=(0, 1)),
        ValueError,
        re.escape("control wires (0, 1) overlap the wires (0,) of RX on [0]"),
    ),
    (
        "controlled_values",
        lambda: qfx.Controlled(qfx.X(0), controls=1, control_values=2),
        ValueError,
        re.escape("Controlled: control_values must be 1 static values in {0, 1}"),
    ),
    (
        "controlled_non_gate",
        lambda: qfx.Controlled(qfx.Z(0) + qfx.X(0), 1),
        TypeError,
        "Controlled: expected a gate",
    ),
    ("adjoint_non_gate", lambda: qfx.Adjoint("S"), TypeError, "Adjoint: expected a gate, got str"),
    # --- observables ---
    (
        "non_hermitian_pauli_product",
        lambda: qfx.X(0) @ qfx.Y(0),
        ValueError,
        re.escape("The product (1 * X(0)) @ (1 * Y(0)) is not Hermitian: its term Z(0) has coefficient 0+1j"),
    ),
    ("complex_coefficient", lambda: (1 + 2j) * qfx.X(0), TypeError, "coefficients must be real"),
    (
        "complex_coefficients_array",
        lambda: qfx.LinearCombination(np.array([1j]), [qfx.PauliWord({0: "X"})]),
        TypeError,
        "LinearCombination: coefficients must be real",
    ),
    ("non_scalar_coefficient", lambda: qfx.X(0) * jnp.ones(2), ValueError, "expected a scalar coefficient"),
    ("observable_times_observable", lambda: qfx.X(0) * qfx.X(1), TypeError, "Use @ for the tensor product"),
    (
        "coefficient_count",
        lambda: qfx.LinearCombination(np.ones(2), [qfx.PauliWord({0: "X"})]),
        ValueError,
        re.escape("expected 1 coefficients (one per term), got shape (2,)"),
    ),
    (
        "linear_combination_terms",
        lambda: qfx.LinearCombination(np.ones(1), [qfx.H(0)]),
        TypeError,
        r"terms must be Pauli words \(or qfx.X / Y / Z / I\) or Hermitian, got Hadamard",
    ),
    (
        "hermitian_product_overlap",
        lambda: qfx.Hermitian(np.eye(2), 0) @ qfx.Hermitian(np.eye(2), 0),
        ValueError,
        "needs disjoint wires",
    ),
    (
        "pauli_word_letter",
        lambda: qfx.PauliWord({0: "Q"}),
        ValueError,
        "letters must be I, X, Y or Z, got 'Q'",
    ),
    (
        "pauli_word_wire",
        lambda: qfx.PauliWord({-1: "X"}),
        ValueError,
        "wires must be non-negative ints, got -1",
    ),
    (
        "pauli_word_twice",
        lambda: qfx.PauliWord([(0, "X"), (0, "Y")]),
        ValueError,
        "wire 0 appears twice; multiply with @ instead",
    ),
    (
        "unknown_observable_kind",
        lambda: _NotAnObservableKind() + qfx.Z(0),
        TypeError,
        "_NotAnObservableKind cannot be used as an observable",
    ),
    # --- circuits and Repeat ---
    (
        "circuit_non_op",
        lambda: qfx.Circuit([qfx.H(0), "H"]),
        TypeError,
        "operation 1 is a str, not a qfx operation",
    ),
    (
        "circuit_in_circuit",
        lambda: qfx.Circuit([C2]),
        TypeError,
        "operation 0 is a Circuit; concatenate circuits",
    ),
    (
        "num_wires",
        lambda: qfx.Circuit([qfx.H(0)], num_wires=0),
        ValueError,
        "num_wires must be a positive int",
    ),
    (
        "num_wires_bool",
        lambda: qfx.Circuit([qfx.H(0)], num_wires=True),
        ValueError,
        "num_wires must be a positive int, got True",
    ),
    (
        "repeat_length_bool",
        lambda: qfx.Repeat(qfx.Circuit([qfx.H(0)]), length=True),
        ValueError,
        "pass length= \\(a non-negative int\\) for a body with no parameters, got True",
    ),
    (
        "repeat_without_leading_axis",
        lambda: qfx.Repeat(qfx.Circuit([qfx.RX(0.1, wires=0)])),
        ValueError,
        "every leaf of the body needs a leading layer axis",
    ),
    (
        "repeat_length_mismatch",
        lambda: qfx.Repeat(_stacked(3), length=2),
        ValueError,
        "length=2, but the body's leaves stack 3 layers",
    ),
    (
        "repeat_ragged",
        lambda: qfx.Repeat(_stacked(3) + _stacked(2)),
        ValueError,
        re.escape("the body's leaves have different leading sizes [2, 3]"),
    ),
    (
        "repeat_without_length",
        lambda: qfx.Repeat(qfx.Circuit([qfx.H(0)])),
        ValueError,
        "pass length= \\(a non-negative int\\) for a body with no parameters, got None",
    ),
    ("repeat_body", lambda: qfx.Repeat([qfx.H(0)], length=2), TypeError, "body must be a Circuit, got list"),
    # --- measurements ---
    ("not_a_circuit", lambda: qfx.expval([qfx.H(0)], qfx.Z(0)), TypeError, "expected a qfx.Circuit"),
    ("wrong_diff", lambda: qfx.probs(C2, diff="adjoint"), TypeError, "diff must be a qfx.diff method"),
    ("not_an_observable", lambda: qfx.expval(C2, "Z0"), TypeError, "expected an observable"),
    (
        "observable_on_missing_wire",
        lambda: qfx.var(C2, qfx.Z(3)),
        ValueError,
        re.escape("acts on wire 3, but the circuit has 2 wires (0..1); pass num_wires=4 to the Circuit"),
    ),
    (
        "measured_wires_out_of_range",
        lambda: qfx.probs(C2, wires=(5,)),
        ValueError,
        re.escape("qfx.probs(wires=(5,)) acts on wire 5"),
    ),
    (
        "measured_wires_duplicate",
        lambda: qfx.density_matrix(C2, wires=(0, 0)),
        ValueError,
        "wires must be a sequence of distinct non-negative ints",
    ),
    (
        "state_length",
        lambda: qfx.state(C2, initial_state=np.ones(3) / np.sqrt(3)),
        ValueError,
        re.escape("initial_state: expected shape (4,) for 2 wires, got (3,)"),
    ),
    (
        "state_unnormalised",
        lambda: qfx.state(C2, initial_state=np.ones(4)),
        ValueError,
        "initial_state is not normalised: its squared norm is 4",
    ),
    (
        "edited_onto_a_missing_wire",
        lambda: qfx.expval(eqx.tree_at(lambda c: c.ops[0], C2, qfx.H(5)), qfx.Z(0)),
        ValueError,
        "qfx.expval: an operation acts on wire 5, but the circuit has 2 wires",
    ),
    (
        "outcome_probs_unnormalised_state",  # the same check as every other entry point (it renormalised)
        lambda: qfx.outcome_probs(
            qfx.Circuit([m := qfx.measure(0)], num_wires=2), [m], mcm="exact", initial_state=np.ones(4)
        ),
        ValueError,
        "initial_state is not normalised: its squared norm is 4",
    ),
    (
        "state_nan",
        lambda: qfx.state(C2, initial_state=np.array([np.nan, 0, 0, 0])),
        ValueError,
        "initial_state is not normalised: its squared norm is nan",
    ),
    (
        "state_too_big",
        lambda: qfx.state(qfx.Circuit([qfx.H(0)], num_wires=60)),
        ValueError,
        r"A 60-wire simulation \(two state vectors.*\) needs 16\.0 EiB \(2 x 2\*\*60 .* Use fewer wires",
    ),
    (
        "state_far_too_big",  # 2.0 ** 1100 overflowed: a bare OverflowError
        lambda: qfx.state(qfx.Circuit([qfx.H(0)], num_wires=1100)),
        ValueError,
        r"A 1100-wire simulation .* needs 2\*\*1104 B \(2 x 2\*\*1100 complex64 entries\)",
    ),
    (
        "state_absurdly_big",  # forming 2**(2**63) never finished
        lambda: qfx.state(qfx.Circuit([qfx.RX(0.1, wires=2**63)])),
        ValueError,
        r"A 9223372036854775809-wire simulation .* needs 2\*\*9223372036854775813 B \(2 x 2\*\*922337",
    ),
    ("shots_without_key", lambda: qfx.expval(C2, qfx.Z(0), shots=10), ValueError, "needs a PRNG key"),
    ("draw_not_a_circuit", lambda: qfx.draw([qfx.H(0)]), TypeError, "qfx.draw: expected a qfx.Circuit"),
    (
        "op_replaced_by_tree_at",
        lambda: qfx.state(eqx.tree_at(lambda c: c.ops[0], qfx.Circuit([qfx.H(0)]), "H")),
        TypeError,
        "qfx.state: operation 0 of the circuit is str, not a qfx operation",
    ),
    (
        "repeat_not_callable",
        lambda: qfx.repeat([qfx.H(0)], jnp.ones(2)),
        TypeError,
        "layer_fn must be callable",
    ),
    (
        "repeat_returns_none",
        lambda: qfx.repeat(lambda t: None, jnp.ones(2)),
        TypeError,
        "qfx.repeat: layer_fn must return a Circuit or a list of operations, got NoneType",
    ),
    (
        "repeat_without_layer_axis",
        lambda: qfx.repeat(lambda t: [qfx.RX(t, 0)], [0.1, 0.2]),
        ValueError,
        r"qfx.repeat: the stacked arrays need a leading layer axis .* got no array \(a Python list",
    ),
    (
        "repeat_scalar_array",
        lambda: qfx.repeat(lambda t: [qfx.RX(t, 0)], jnp.float32(0.1)),
        ValueError,
        r"qfx.repeat: the stacked arrays need a leading layer axis .* got \[\(\)\]",
    ),
    (
        "repeat_layer_counts_differ",
        lambda: qfx.repeat(lambda a, b: [qfx.RX(a, 0), qfx.RY(b, 0)], jnp.ones(3), jnp.ones(4)),
        ValueError,
        r"qfx.repeat: the stacked arrays have different numbers of layers \[\(3,\), \(4,\)\]",
    ),
    # Traced values where static ones choose the kernel: named, not a TracerBoolConversionError.
    (
        "traced_control_values",
        lambda: jax.jit(lambda v: qfx.state(qfx.Circuit([qfx.Controlled(qfx.X(0), 1, control_values=v)])))(1),
        ValueError,
        r"Controlled: control_values must be 1 static values in \{0, 1\} \(not traced",
    ),
    (
        "traced_postselect",
        lambda: jax.jit(lambda v: qfx.measure(0, postselect=v))(1),
        ValueError,
        r"qfx.measure: postselect must be None, 0 or 1 \(static\), got JitTracer",
    ),
    (
        "shots_above_int32",  # JAX's bare OverflowError named neither the function nor shots
        lambda: qfx.expval(C2, qfx.Z(0), shots=2**31, key=jax.random.key(0)),
        ValueError,
        re.escape("qfx.expval: shots=2147483648 is above 2**31 - 1"),
    ),
    (
        "samples_too_big",  # ran out of memory (or was killed) allocating the draws
        lambda: qfx.sample(qfx.Circuit([qfx.H(0)], 30), shots=2**31 - 1, key=jax.random.key(0)),
        ValueError,
        r"qfx.sample: 2147483647 shots of 30 wires .* needs 520.0 GiB",
    ),
    # --- values that are not numbers ---
    ("angle_string", lambda: qfx.RX("a", 0), TypeError, "RX: the angle theta must be a number .* got 'a'"),
    ("angle_none", lambda: qfx.RY(None, 0), TypeError, "RY: the angle theta must be a number .* got None"),
    (
        "unitary_string",
        lambda: qfx.QubitUnitary("I", 0),
        TypeError,
        re.escape("QubitUnitary(wires=(0,)): the matrix U must be a number"),
    ),
    (
        "hermitian_object",
        lambda: qfx.Hermitian(object(), 1),
        TypeError,
        re.escape("Hermitian(wires=(1,)): the matrix must be a number"),
    ),
    ("coefficient_string", lambda: "2" * qfx.Z(0), TypeError, "must be a number|unsupported operand"),
    (
        "coefficients_strings",
        lambda: qfx.LinearCombination(["a", "b"], (qfx.Z(0) + qfx.X(1)).terms),
        TypeError,
        "LinearCombination: coefficients must be numbers",
    ),
    (
        "state_bitstring",
        lambda: qfx.state(C2, initial_state="01"),
        TypeError,
        "initial_state must be a number or an array of numbers, got '01'",
    ),
    (
        "state_bitstring_control_flow",
        lambda: qfx.probs(qfx.Circuit([qfx.measure(0)], num_wires=2), mcm="exact", initial_state="01"),
        TypeError,
        "initial_state must be a number or an array of numbers",
    ),
    (
        "circuit_of_one_gate",
        lambda: qfx.Circuit(qfx.H(0)),
        TypeError,
        re.escape("Circuit: expected a sequence of operations, got one, Hadamard(wires=0); wrap it"),
    ),
    ("cond_string", lambda: qfx.cond("a", qfx.X(0)), TypeError, "qfx.cond: the predicate or index must be a"),
    (
        "key_int",
        lambda: qfx.sample(C2, shots=3, key=1),
        TypeError,
        re.escape("qfx.sample: key must be a PRNG key such as jax.random.key(0), got 1."),
    ),
    (
        "key_batch",
        lambda: qfx.sample(C2, shots=3, key=jax.random.split(jax.random.key(0), 4)),
        ValueError,
        r"qfx.sample: key must be one PRNG key, got a batch of shape \(4,\); .* jax.vmap",
    ),
    (
        "key_raw_wrong_size",
        lambda: qfx.sample(C2, shots=3, key=jnp.zeros(3, jnp.uint32)),
        TypeError,
        re.escape("qfx.sample: key must be a PRNG key such as jax.random.key(0); a raw uint32 key")
        + r".*"
        + re.escape("has shape (2,), got a uint32 array of shape (3,)."),
    ),
    (
        "key_raw_scalar",
        lambda: qfx.sample(C2, shots=3, key=jnp.uint32(5)),
        TypeError,
        re.escape("got a uint32 array of shape ()."),
    ),
    (
        "key_float_sampled_mcm",
        lambda: qfx.probs(qfx.Circuit([qfx.measure(0)]), mcm="sampled", key=jnp.zeros(2)),
        TypeError,
        "qfx.probs: key must be a PRNG key",
    ),
    ("float_wire", lambda: qfx.H(0.0), TypeError, "wires must be an int or a sequence of ints, got 0.0"),
    ("float_measured_wire", lambda: qfx.probs(C2, wires=(0.0,)), ValueError, "wires must be a sequence of"),
    (
        "bad_shots",
        lambda: qfx.sample(C2, key=jax.random.key(0), shots=0),
        ValueError,
        "shots must be a positive int",
    ),
    (
        "amplitude_bytes",
        lambda: qfx.amplitude(C2, b"01"),
        TypeError,
        "qfx.amplitude: the bitstring must be a number or an array of numbers, got b'01'",
    ),
    ("amplitude_none", lambda: qfx.amplitude(C2, None), TypeError, "qfx.amplitude: the bitstring must be"),
    ("apply_none", lambda: qfx.apply(qfx.H(0), None), TypeError, "qfx.apply: state must be a number"),
    (
        "measure_state_int_key",
        lambda: qfx.measure_state(qfx.zero_state(2), 0, key=0),
        TypeError,
        "qfx.measure_state: key must be a PRNG key",
    ),
    ("zero_state_negative", lambda: qfx.zero_state(-1), ValueError, "qfx.zero_state: num_wires must be a"),
    ("zero_state_float", lambda: qfx.zero_state(2.0), ValueError, "qfx.zero_state: num_wires must be a"),
    ("probs_wire_set", lambda: qfx.probs(C2, wires={0, 1}), ValueError, "a sequence of distinct .* order"),
    ("measure_float_wire", lambda: qfx.measure(1.0), ValueError, "qfx.measure: wire must be a non-negative"),
    (
        "batch_of_circuits_unmapped",
        lambda: qfx.expval(_batch_of_circuits(), qfx.Z(1)),
        ValueError,
        re.escape("qfx.expval: RX on wires (0,) has a parameter of shape (5,), expected ()")
        + ".*eqx.filter_vmap\\(lambda c: qfx.expval",
    ),
    (
        "batch_of_circuits_with_layers_unmapped",
        lambda: qfx.state(_batch_of_circuits_with_layers(5)),
        ValueError,
        re.escape("Repeat: length=3, but a parameter of its body has shape (5, 3)") + ".* jax.vmap",
    ),
    (
        "square_batch_of_circuits_with_layers_unmapped",
        lambda: qfx.state(_batch_of_circuits_with_layers(3)),
        ValueError,
        re.escape("qfx.state: RY on wires (0,) has a parameter of shape (3, 3), expected (3,)"),
    ),
    (
        "batch_of_unitaries_unmapped",
        lambda: qfx.apply(
            eqx.filter_vmap(lambda u: qfx.QubitUnitary(u, 0))(jnp.stack([jnp.eye(2)] * 4)), qfx.zero_state(1)
        ),
        ValueError,
        re.escape("QubitUnitary on wires (0,) has a parameter of shape (4, 2, 2), expected (2, 2)."),
    ),
    (
        "batch_of_circuits_amplitude",
        lambda: qfx.amplitude(_batch_of_circuits(), "00"),
        ValueError,
        "qfx.amplitude: RX on wires",
    ),
    (
        "complex_angle_by_tree_at",
        lambda: qfx.state(eqx.tree_at(lambda c: c.ops[0].theta, qfx.Circuit([qfx.RX(0.3, 0)]), 0.3 + 0.5j)),
        TypeError,
        re.escape("qfx.state: RX on wires (0,) has a complex angle"),
    ),
    (
        "non_unitary_by_tree_at",
        lambda: qfx.probs(
            eqx.tree_at(
                lambda c: c.ops[0].base.U,
                qfx.Circuit([qfx.Adjoint(qfx.QubitUnitary(np.eye(2), wires=0))]),
                jnp.diag(jnp.array([2.0, 0.5], jnp.complex64)),
            )
        ),
        ValueError,
        re.escape(
            "qfx.probs: QubitUnitary(wires=(0,)): the matrix is not unitary (max |U^dagger U - I| = 3)"
        ),
    ),
    ("pauli_word_bool_wire", lambda: qfx.PauliWord({True: "Z"}), ValueError, "wires must be non-negative"),
    (
        "pauli_word_string",
        lambda: qfx.PauliWord("XZ"),
        TypeError,
        re.escape("qfx.PauliWord(dict(enumerate('XZ')))"),
    ),
    ("measure_reset_string", lambda: qfx.measure(0, reset="no"), TypeError, "reset must be True or False"),
    (
        "for_loop_bool_length",
        lambda: qfx.for_loop(True, lambda i: qfx.X(0)),
        TypeError,
        "length must be an int",
    ),
    # mcm is checked on every circuit, not only those with measurements.
    (
        "mcm_typo_plain_circuit",
        lambda: qfx.probs(_ONE_WIRE, mcm="bogus"),
        ValueError,
        re.escape("qfx.probs: mcm must be 'exact', 'sampled' or None, got 'bogus'."),
    ),
    (
        "mcm_case_plain_circuit_sample",
        lambda: qfx.sample(_ONE_WIRE, key=jax.random.key(0), shots=2, mcm="Exact"),
        ValueError,
        re.escape("qfx.sample: mcm must be"),
    ),
    # Observables edited by eqx.tree_at skip their constructors' checks; the measurement checks again.
    (
        "complex_coefficients_by_tree_at",
        lambda: jax.jit(qfx.expval)(_ONE_WIRE, _edit_coeffs(jnp.asarray([1.0 + 1.0j, 0.5]))),
        TypeError,
        re.escape("qfx.expval: the observable's coefficients must be real"),
    ),
    (
        "coefficient_count_by_tree_at",
        lambda: qfx.var(_ONE_WIRE, _edit_coeffs(jnp.ones(3))),
        ValueError,
        re.escape("qfx.var: the observable has 2 terms but coefficients of shape (3,)"),
    ),
    (
        "hermitian_shape_by_tree_at",
        lambda: qfx.expval(_ONE_WIRE, _edit_matrix(jnp.eye(4, dtype=jnp.complex64))),
        ValueError,
        re.escape("qfx.expval: Hermitian(wires=(0,)) has a matrix of shape (4, 4), expected (2, 2)."),
    ),
    (
        "non_hermitian_by_tree_at",
        lambda: qfx.expval(_ONE_WIRE, _edit_matrix(jnp.asarray([[1.0, 2.0], [0.0, 1.0]], jnp.complex64))),
        ValueError,
        re.escape("qfx.expval: Hermitian(wires=(0,)): the matrix is not Hermitian"),
    ),
    (
        "batch_of_observables_unmapped",
        lambda: qfx.var(_ONE_WIRE, eqx.filter_vmap(lambda c: c * qfx.Z(0) + qfx.X(0))(jnp.ones(3))),
        ValueError,
        re.escape("coefficients of shape (3, 2), expected one per term. A batch of observables"),
    ),
    (
        "batch_of_hermitians_unmapped",
        lambda: qfx.expval(
            _ONE_WIRE, eqx.filter_vmap(lambda m: qfx.Hermitian(m, 0))(jnp.stack([jnp.eye(2)] * 3))
        ),
        ValueError,
        re.escape("Hermitian(wires=(0,)) has a matrix of shape (3, 2, 2), expected (2, 2). A batch"),
    ),
]


@pytest.mark.parametrize(("thunk", "error", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error(thunk, error, match):
    with pytest.raises(error, match=match):
        thunk()


@pytest.mark.parametrize("mcm", ["exact", "sampled"])
def test_while_loop_that_never_ends_raises(mcm):
    # The body re-measures |1>: the condition holds with probability 1 forever. An error, not a hang.
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.X(0), m, qfx.while_loop(m, [m])])
    key = jax.random.key(0) if mcm == "sampled" else None
    advice = "or use mcm='sampled'" if mcm == "exact" else "bound it with max_iterations"
    with pytest.raises(eqx.EquinoxRuntimeError, match=f"still held after 100000 iterations.*{advice}"):
        qfx.probs(circ, mcm=mcm, key=key)


def test_unnormalised_state_under_jit():
    """Traced states are checked at run time with eqx.error_if."""
    run = eqx.filter_jit(lambda psi: qfx.state(C2, initial_state=psi))
    np.testing.assert_allclose(
        run(jnp.asarray([0, 1, 0, 0], jnp.complex64)), [0, 0.5**0.5, 0, 0.5**0.5], atol=1e-6
    )
    with pytest.raises(eqx.EquinoxRuntimeError, match="initial_state is not normalised"):
        run(jnp.ones(4, jnp.complex64))


def test_integer_arrays_beyond_int32_are_refused():
    # NumPy int64 loop arguments became JAX arrays, wrapped into int32 without a word ([2**40, 1] -> [0, 1]).
    with pytest.raises(ValueError, match=r"beyond int32 \(1 \.\. 1099511627776\); enable x64"):
        qfx.for_loop(2, lambda i, a: qfx.RX(a[i] * 0.1, wires=0), np.array([2**40, 1]))


def test_constants_built_inside_jit_are_checked_when_traced():
    # A NumPy state or bitstring written inside the jitted function is a constant: refused when traced, as
    # outside jit (the norm and an int8 / int64 bitstring were checked at run time, through a callback).
    with pytest.raises(ValueError, match="initial_state is not normalised: its squared norm is 2"):
        jax.jit(lambda: qfx.state(C2, initial_state=np.array([1.0, 1.0, 0, 0])))()
    with pytest.raises(ValueError, match=re.escape("qfx.amplitude: bits must be 0 or 1, got [0, 2]")):
        jax.jit(lambda: qfx.amplitude(C2, np.array([0, 2], np.int8)))()


def test_integer_jax_arrays_are_taken_as_numpy_ones_are():
    """An integer JAX array as an initial state or a QubitUnitary's matrix gives what the same NumPy
    integers give (it reached `jnp.finfo` of an integer dtype, whose error named neither)."""
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT((0, 1))])
    basis = [0, 1, 0, 0]
    expected = qfx.state(circ, initial_state=np.asarray(basis))
    np.testing.assert_allclose(np.asarray(expected), [0, 2**-0.5, 2**-0.5, 0], atol=1e-6)
    for given in (jnp.asarray(basis), jnp.asarray(basis, jnp.int8)):
        np.testing.assert_allclose(qfx.state(circ, initial_state=given), expected, atol=1e-7)
        np.testing.assert_allclose(
            jax.jit(lambda s: qfx.state(circ, initial_state=s))(given), expected, atol=1e-7
        )
    u = qfx.QubitUnitary(jnp.asarray([[0, 1], [1, 0]], jnp.int32), 0)
    np.testing.assert_allclose(qfx.state(qfx.Circuit([u])), [0, 1], atol=1e-7)


# --- control-flow operations and the entry points that run them ---------------------------------------


def _two_wire_layer(i, thetas, phis):
    return [qfx.RX(thetas[i], wires=0), qfx.RY(phis[i], wires=1), qfx.CNOT(wires=(0, 1))]


class _Custom(qfx.AbstractOperation):
    @property
    def wires(self):
        return (0,)


def test_operation_errors():
    m = qfx.measure(0)
    with pytest.raises(TypeError, match="expected a measurement value"):
        m & 0.5
    with pytest.raises(TypeError, match="is only known during the simulation"):
        bool(m == 1)
    with pytest.raises(ValueError, match="it has no inverse"):
        qfx.Circuit([m]).inverse()
    with pytest.raises(ValueError, match="wire must be a non-negative int"):
        qfx.measure(-1)
    with pytest.raises(ValueError, match="postselect must be None, 0 or 1"):
        qfx.measure(0, postselect=2)
    with pytest.raises(ValueError, match="the body measures none of the outcomes the condition reads"):
        qfx.while_loop(m, [qfx.RX(0.3, wires=0)])  # would never end
    other = qfx.measure(1)
    with pytest.raises(ValueError, match="the body measures none"):
        qfx.while_loop(m | ~m, [qfx.cond(other, [qfx.X(0)]), other])
    qfx.while_loop(m, [qfx.cond(other, [qfx.X(0), m])])  # measured in a branch: fine
    qfx.while_loop(m, [qfx.RX(0.3, wires=0)], max_iterations=3)  # bounded: fine
    many = qfx.Circuit([qfx.H(0)] + [qfx.measure(0) for _ in range(40)])
    with pytest.raises(ValueError, match=r"mcm='exact' keeps a density matrix per record.*2\*\*42"):
        qfx.probs(many, mcm="exact")  # 2**40 records of a 2x2 density matrix: raise, do not allocate
    with pytest.raises(TypeError, match="expected an operation, a list of operations or a Circuit"):
        qfx.cond(m, 3)
    with pytest.raises(ValueError, match="must be a scalar, got shape"):
        qfx.cond(jnp.ones(2, bool), qfx.X(0))
    with pytest.raises(TypeError, match="must be a bool or an int"):
        qfx.cond(0.5, qfx.X(0))
    with pytest.raises(ValueError, match="give exactly one of index"):
        qfx.Cond((qfx.Circuit([], num_wires=1),), None, None)
    with pytest.raises(ValueError, match="conditional on measurement outcomes has no inverse"):
        qfx.cond(m, qfx.X(1)).adjoint()
    with pytest.raises(ValueError, match="branches must be a non-empty list"):
        qfx.switch(m, [])
    with pytest.raises(TypeError, match="the body must return an operation"):
        qfx.for_loop(2, lambda i: 3)
    with pytest.raises(ValueError, match="give exactly one of length"):
        qfx.ForLoop(lambda i: [], None, None)
    with pytest.raises(ValueError, match="traced number of iterations has no inverse"):
        qfx.for_loop(jnp.int32(2), lambda i: qfx.X(0)).adjoint()
    with pytest.raises(TypeError, match="body must be callable"):
        qfx.for_loop(2, [qfx.X(0)])
    with pytest.raises(ValueError, match="length must be non-negative"):
        qfx.for_loop(-1, lambda i: qfx.X(0))
    with pytest.raises(ValueError, match="while_loop .* has no inverse"):
        qfx.while_loop(m, [m]).adjoint()
    with pytest.raises(TypeError, match="the condition must be a measurement value"):
        qfx.while_loop(True, [m])
    with pytest.raises(ValueError, match="max_iterations must be a non-negative int"):
        qfx.while_loop(m, [m], max_iterations=-1)
    with pytest.raises(ValueError, match="that measurement is not in the circuit"):
        qfx.probs(qfx.Circuit([qfx.cond(m, qfx.X(0))]))
    # Read before the measurement runs (it would read 0): at the top level, in a loop before it, by the
    # condition of a while loop whose body makes it.
    for ops in (
        [qfx.X(0), qfx.cond(m, qfx.X(1)), m],
        [qfx.X(0), qfx.for_loop(2, lambda i: [qfx.cond(m, qfx.X(1))]), m],
        [qfx.while_loop(m, [qfx.X(0), m], max_iterations=2)],
    ):
        with pytest.raises(ValueError, match="reads the outcome m0 before that measurement runs"):
            qfx.probs(qfx.Circuit(ops, num_wires=2), mcm="exact")
    # A QubitUnitary in a loop body (checked for unitarity from its values, not its shape-only skeleton).
    u = np.asarray(qfx.RY(0.3, 0).matrix())
    looped_u = qfx.Circuit([qfx.for_loop(3, lambda i: [qfx.QubitUnitary(u, wires=0)])])
    assert float(qfx.expval(looped_u, qfx.Z(0))) == pytest.approx(math.cos(0.9), abs=1e-6)
    # Feedback in a loop body reads the previous iteration's outcome (0 in the first): as unrolled.
    fb = qfx.measure(0)
    looped = qfx.Circuit([qfx.for_loop(3, lambda i: [qfx.cond(fb, qfx.X(1)), qfx.RY(0.7, 0), fb])], 2)
    unrolled = qfx.Circuit([qfx.RY(0.7, 0), fb] + [qfx.cond(fb, qfx.X(1)), qfx.RY(0.7, 0), fb] * 2, 2)
    np.testing.assert_allclose(
        np.asarray(qfx.probs(looped, mcm="exact")), np.asarray(qfx.probs(unrolled, mcm="exact")), atol=1e-6
    )
    with pytest.raises(TypeError, match="is not a qfx operation that circuits can run"):
        qfx.probs(qfx.Circuit([qfx.cond(True, _Custom())]))
    # Inverses that exist: a for loop and a conditional on a traced value.
    circ = qfx.Circuit(
        [qfx.for_loop(3, _two_wire_layer, jnp.ones(3), jnp.ones(3)), qfx.cond(True, qfx.RX(0.2, 0))]
    )
    np.testing.assert_allclose(np.abs(np.asarray(qfx.state(circ + circ.inverse()))), [1, 0, 0, 0], atol=1e-5)


def test_entry_point_errors():
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.H(0), m])
    with pytest.raises(ValueError, match="cannot differentiate a circuit with control flow"):
        qfx.expval(circ, qfx.Z(0), mcm="exact", diff=qfx.diff.Adjoint())
    with pytest.raises(ValueError, match="mcm must be 'exact', 'sampled' or None"):
        qfx.probs(circ, mcm="deferred")
    with pytest.raises(ValueError, match="has mid-circuit measurements .* pass mcm='exact'"):
        qfx.probs(circ)
    with pytest.raises(ValueError, match="mcm='sampled' draws the measurement outcomes, so it needs key="):
        qfx.probs(circ, mcm="sampled")
    with pytest.raises(ValueError, match="mcm='exact' uses no randomness"):
        qfx.probs(circ, mcm="exact", key=jax.random.key(0))
    with pytest.raises(ValueError, match="is a mixture of branches"):
        qfx.state(circ, mcm="exact")
    with pytest.raises(ValueError, match="shots= is not supported"):
        qfx.expval(circ, qfx.Z(0), mcm="exact", shots=10, key=jax.random.key(0))
    with pytest.raises(TypeError, match="outcome_probs: expected a qfx.Circuit"):
        qfx.outcome_probs([m], m, mcm="exact")
    with pytest.raises(TypeError, match=r"outcome_probs: expected qfx.measure\(...\) operations"):
        qfx.outcome_probs(circ, [], mcm="exact")
    moved = eqx.tree_at(lambda c: c.ops[0], circ, qfx.RX(0.3, wires=circ.num_wires))  # skips Circuit's check
    with pytest.raises(ValueError, match="outcome_probs: an operation acts on wire"):
        qfx.outcome_probs(moved, m, mcm="exact")
    with pytest.raises(ValueError, match="is not in the circuit"):
        qfx.outcome_probs(circ, qfx.measure(0), mcm="exact")
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        qfx.outcome_probs(circ, m, mcm="exact", initial_state=jnp.ones(3))
    with pytest.raises(ValueError, match="state must be a flat vector of 2\\*\\*n amplitudes"):
        qfx.apply(qfx.X(0), jnp.ones(3))
    with pytest.raises(TypeError, match="qfx.apply: expected a qfx operation"):
        qfx.apply(qfx.Z(0) @ qfx.Z(1), qfx.zero_state(2))
    with pytest.raises(ValueError, match="acts on wire 2, but the state has 2 wires"):
        qfx.apply(qfx.X(2), qfx.zero_state(2))
    with pytest.raises(ValueError, match="holds mid-circuit measurements; pass key="):
        qfx.apply(circ, qfx.zero_state(1))
    with pytest.raises(ValueError, match="wire 3 is out of range for 1 wires"):
        qfx.measure_state(qfx.zero_state(1), 3, key=jax.random.key(0))
    # Outcomes are drawn from |amplitude|^2: an unnormalised state would skew them (P(1) 0.775 for 0.64).
    unnormalised = 1.1 * jnp.asarray([0.6, 0.8], jnp.complex64)
    with pytest.raises(
        ValueError, match="qfx.measure_state: state is not normalised: its squared norm is 1.21"
    ):
        qfx.measure_state(unnormalised, 0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="qfx.apply: state is not normalised"):
        qfx.apply(circ, unnormalised, key=jax.random.key(0))
    # Other differentiation methods and the tensor-network backend refuse control flow clearly; the
    # default runs it (X twice: |0>).
    looped = qfx.Circuit([qfx.for_loop(2, lambda i: qfx.X(0))])
    np.testing.assert_allclose([qfx.amplitude(looped, b) for b in ("0", "1")], [1, 0], atol=1e-6)
    for method in (qfx.diff.Adjoint(), qfx.diff.ParameterShift(), qfx.diff.FiniteDiff()):
        name = type(method).__name__
        with pytest.raises(ValueError, match=f"amplitude: diff={name}\\(\\) cannot differentiate a circuit"):
            qfx.amplitude(looped, "1", diff=method)
    with pytest.raises(ValueError, match="TensorNetwork\\(\\) contracts gates and Repeat blocks only"):
        qfx.expval(qfx.Circuit([qfx.cond(True, qfx.X(0))]), qfx.Z(0), backend=qfx.TensorNetwork())


def test_a_structure_that_passed_is_checked_again_after_edits():
    # Checks are cached by tree structure and avals (qfx/_circuit.py: check_circuit_flat); every edit that
    # changes what they read must miss that cache.
    circ = qfx.Circuit([qfx.RY(0.3, wires=0), qfx.CNOT((0, 1))])
    for _ in range(2):  # the second call is served from the cache
        np.testing.assert_allclose(qfx.expval(circ, qfx.Z(0)), np.cos(0.3), rtol=1e-6)
    # A parameter of another shape: the same tree structure, other avals.
    batched = eqx.tree_at(lambda c: c.ops[0].theta, circ, jnp.ones(3, jnp.float32))
    with pytest.raises(ValueError, match=r"expval: RY on wires \(0,\) has a parameter of shape \(3,\)"):
        qfx.expval(batched, qfx.Z(0))
    # A wire out of range: another tree structure.
    moved = eqx.tree_at(lambda c: c.ops[0], circ, qfx.RY(0.3, wires=2))
    with pytest.raises(ValueError, match="expval: an operation acts on wire 2"):
        qfx.expval(moved, qfx.Z(0))
    # A half-precision or Python-float edit is converted, not passed on as it is.
    half = eqx.tree_at(lambda c: c.ops[0].theta, circ, jnp.asarray(0.3, jnp.float16))
    for _ in range(2):
        np.testing.assert_allclose(qfx.expval(half, qfx.Z(0)), np.cos(float(np.float16(0.3))), rtol=1e-6)
        np.testing.assert_allclose(
            qfx.expval(eqx.tree_at(lambda c: c.ops[0].theta, circ, 0.5), qfx.Z(0)), np.cos(0.5), rtol=1e-6
        )
