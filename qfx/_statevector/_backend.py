"""`qfx.StateVector`: the state-vector backend, the default."""

import equinox as eqx
import jax
from jaxtyping import Array

from .._backend import AbstractStateVectorBackend
from .._channels import refuse_channels
from .._circuit import Circuit
from .._control import has_control
from .._custom_types import complex_dtype
from .._measurements import AbstractMeasurement, DensityMatrix
from .._memory import check_fits, check_memory
from . import _walk
from ._measure import measure_pure
from ._pipeline import run
from ._simulators import check_mcm, evaluate_control
from ._states import initial_state_of, zero_state


class StateVector(AbstractStateVectorBackend):
    """The state vector of `2**n` amplitudes, evolved gate by gate: the default backend.

    Exact for every measurement (`qfx.state`, `qfx.probs`, `qfx.expval`, `qfx.var`, `qfx.sample`,
    `qfx.density_matrix`, `qfx.amplitude`), every gate, control flow and mid-circuit measurements, from
    any `initial_state`; every differentiation method works with it, `qfx.diff.Adjoint()` included. Its
    memory is two states of `2**n` amplitudes (each gate reads one and writes the other), so about 30
    qubits in complex64 fit in 24 GiB; beyond that, shallow circuits measured locally fit
    `qfx.TensorNetwork()`.

    Runs of gates are fused and grouped before they run (one named pipeline of static passes,
    `qfx/_statevector/_pipeline.py`); `qfx.repeat` blocks run as `lax.scan`, so deep circuits compile once
    per layer.

    **Arguments:**

    - `mcm`: how mid-circuit measurements (`qfx.measure`) are simulated: `None` (the default: a circuit
      with measurements raises and asks for a mode), `"exact"` (every outcome, weighted by its
      probability: a density matrix per classical record) or `"sampled"` (one trajectory, drawn with the
      entry point's `key=`; `jax.vmap` over keys for many). The entry points' `mcm=` argument is a
      shorthand for `backend=qfx.StateVector(mcm=...)`.

    ```python
    m = qfx.measure(0)
    circ = qfx.Circuit([qfx.H(0), m, qfx.cond(m, qfx.X(1))])
    qfx.probs(circ, backend=qfx.StateVector(mcm="exact"))  # [0.5, 0, 0, 0.5]
    qfx.probs(circ, mcm="exact")  # the same
    ```
    """

    mcm: str | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_mcm(self.mcm, "qfx.StateVector")

    def prepare(self, measurement: AbstractMeasurement, circuit: Circuit, initial_state) -> Array:
        refuse_channels(circuit, "qfx.StateVector()", measurement.name)
        if isinstance(measurement, DensityMatrix):
            check_memory(
                4 ** len(measurement.wires),
                f"qfx.density_matrix: the density matrix of {len(measurement.wires)} wires",
                "Ask for fewer wires (a reduced density matrix), or use qfx.state for a pure state.",
            )
        if initial_state is None:  # |0...0>, made inside the program that reads it (no eager kernels)
            check_fits(circuit.num_wires)
            return None
        return initial_state_of(circuit, initial_state)

    def evaluate(self, measurement, circuit, initial_state, args):
        if has_control(circuit.ops):
            return evaluate_control(measurement, circuit, _start(circuit, initial_state), args, self.mcm)
        return self.measure(measurement, self.simulate(circuit, initial_state), args)

    def evaluation_bytes(self, circuit: Circuit) -> int:
        return 2**circuit.num_wires * complex_dtype().itemsize

    def state_struct(self, circuit: Circuit) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((2**circuit.num_wires,), complex_dtype())

    def simulate(self, circuit: Circuit, initial_state: Array | None) -> Array:
        return run(circuit.ops, _start(circuit, initial_state), circuit.num_wires)

    def measure(self, measurement: AbstractMeasurement, state: Array, args) -> Array:
        return measure_pure(measurement, state, args, state.shape[0].bit_length() - 1)

    def backward(self, circuit: Circuit, state: Array, bra: Array) -> tuple[list[Array], Array]:
        leaves, (_, bra0) = _walk.backward(circuit.ops, (state, bra), circuit.num_wires)
        return leaves, bra0


def _start(circuit: Circuit, initial_state: Array | None) -> Array:
    return zero_state(circuit.num_wires) if initial_state is None else initial_state
