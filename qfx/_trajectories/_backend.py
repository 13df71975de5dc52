"""`qfx.Trajectories`: noisy circuits as pure-state trajectories, one per key."""

import jax
from jaxtyping import Array

from .._backend import AbstractBackend
from .._checks import check_key
from .._circuit import Circuit
from .._control import has_control
from .._custom_types import complex_dtype
from .._measurements import AbstractMeasurement, Amplitude, Sample, State, Var
from .._memory import check_fits
from .._statevector import (
    StateVector,
    bits,
    initial_state_of,
    marginal_probs,
    measure_pure,
    sample_indices,
    zero_state,
)
from ..diff._adjoint import adjoint_scalar  # see README.md, Imports
from ..diff._auto import walkable  # see README.md, Imports
from ._walk import drawn, only_pauli_channels, score, trajectory

_STATE_VECTOR = StateVector()


class Trajectories(AbstractBackend):
    """Noisy circuits as pure-state trajectories: at each channel one Kraus operator is drawn with its Born
    probability, so each key gives one trajectory of `2**n` amplitudes; the mean over keys is exact.

    Pass `key=` to the entry point: `qfx.expval(circuit, H, backend=qfx.Trajectories(), key=k)` is one
    trajectory's value, an unbiased estimate of the exact (density-matrix) expectation; `jax.vmap` over
    `jax.random.split(key, m)` gives `m` of them, and their mean converges as `1/sqrt(m)`.

    Gradients (`jax.grad`, with respect to gate parameters and channel strengths) are unbiased too. The
    Kraus choice is discrete, so differentiating the trajectory alone would miss how the branch
    probabilities move; each trajectory's value `f` is multiplied by `exp(L - stop_gradient(L))`, where
    `L = sum log p_i` over the branches taken: 1 in value, and its derivative adds `f dL`, the
    score-function (likelihood-ratio) term, to the pathwise derivative `df`. Its mean over keys is the
    derivative of the exact expectation (`qfx/_trajectories/README.md` gives the argument).

    Measurements: `qfx.expval` (exact per trajectory, or with `shots=`), `qfx.probs` and
    `qfx.density_matrix` (per trajectory; the mean is the exact value), and `qfx.sample` (one trajectory
    per shot). `qfx.state`, `qfx.amplitude` and `qfx.var` are refused: their mean over trajectories is not
    the mixed state's (use `qfx.DensityMatrix()`, or the mean of `<O^2>` and `<O>` from `qfx.expval`).

    Cost: when every channel is a Pauli channel (`BitFlip`, `PhaseFlip`, `DepolarizingChannel`,
    `PauliError`), whose branch probabilities do not depend on the state, all branches are drawn first,
    the drawn Paulis moved past Clifford gates (CNOT, CZ, SWAP, H, S) and fused into the next other gate,
    so a trajectory costs about a noiseless run; the derivative of one exact expectation is then taken by
    the adjoint walk (as `qfx.diff.Auto` does on a state vector), a few states per trajectory whatever the
    depth, the same values as backprop's. Other channels (damping, `QubitChannel`) draw from the state
    where they stand.

    Use it past the density matrix's reach (`4**n` entries: about 14 qubits), or for many keys at once.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.DepolarizingChannel(0.3, wires=0)])
    keys = jax.random.split(jax.random.key(0), 1000)
    values = jax.vmap(lambda k: qfx.expval(circ, qfx.X(0), backend=qfx.Trajectories(), key=k))(keys)
    values.mean()  # about 1 - 4 * 0.3 / 3 = 0.6
    ```
    """

    def prepare(self, measurement: AbstractMeasurement, circuit: Circuit, initial_state) -> Array | None:
        fn = measurement.name
        if isinstance(measurement, (State, Amplitude, Var)):
            raise ValueError(
                f"qfx.{fn}: backend=qfx.Trajectories() gives one pure-state trajectory per key, and the "
                f"mean of a {fn} over trajectories is not the noisy circuit's. Use "
                "backend=qfx.DensityMatrix(), or (for a variance) the means of qfx.expval of O @ O and of O."
            )
        if has_control(circuit.ops):
            raise ValueError(
                f"qfx.{fn}: backend=qfx.Trajectories() does not run control flow or mid-circuit "
                "measurements yet; use qfx.StateVector(mcm='sampled') for a circuit without channels."
            )
        n = circuit.num_wires
        check_fits(n)
        return None if initial_state is None else initial_state_of(circuit, initial_state)

    def evaluate(self, measurement, circuit, initial_state, args):
        payload, key = args
        fn = measurement.name
        if key is None:
            raise ValueError(
                f"qfx.{fn}: backend=qfx.Trajectories() draws a Kraus branch at each channel, so it needs "
                "key=jax.random.key(0) (one trajectory per key; jax.vmap over keys for many)."
            )
        check_key(key, f"qfx.{fn}")
        n = circuit.num_wires
        psi0 = zero_state(n) if initial_state is None else initial_state
        predrawn = only_pauli_channels(circuit.ops)
        if isinstance(measurement, Sample):  # one trajectory per shot, each read out once

            def one(k):
                k_run, k_read = jax.random.split(k)
                if predrawn:
                    ops, _ = drawn(circuit.ops, k_run)
                    psi = _STATE_VECTOR.simulate(Circuit(ops, num_wires=n), initial_state)
                else:
                    psi, _ = trajectory(circuit.ops, psi0, n, k_run)
                p = jax.lax.stop_gradient(marginal_probs(psi, measurement.wires, n))
                return sample_indices(k_read, p, 1)[0]

            index = jax.vmap(one)(jax.random.split(key, measurement.shots))
            return bits(index, len(measurement.wires))
        k_run, k_read = jax.random.split(key)
        if not predrawn:
            psi, logp = trajectory(circuit.ops, psi0, n, k_run)
            value = measure_pure(measurement, psi, (payload, k_read), n)
            return value * score(logp).astype(value.dtype)
        ops, logp = drawn(circuit.ops, k_run)
        unitary = Circuit(ops, num_wires=n)
        # Asked of the user's circuit: the drawn one adds only the constant matrices of the drawn Paulis.
        if walkable(_STATE_VECTOR, measurement, circuit, (payload, None)):
            value = adjoint_scalar(_STATE_VECTOR, measurement, unitary, initial_state, (payload, None))
        else:
            value = _STATE_VECTOR.evaluate(measurement, unitary, initial_state, (payload, k_read))
        return value * score(logp).astype(value.dtype)

    def evaluation_bytes(self, circuit: Circuit) -> int:
        return 2**circuit.num_wires * complex_dtype().itemsize
