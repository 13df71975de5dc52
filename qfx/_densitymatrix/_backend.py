"""`qfx.DensityMatrix`: the exact mixed-state backend, the default for circuits that hold channels."""

import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._backend import AbstractBackend
from .._checks import as_dtype, as_numeric, is_concrete
from .._circuit import Circuit
from .._control import Program, has_control, traverse
from .._custom_types import complex_dtype, tolerance
from .._measurements import AbstractMeasurement, Amplitude, Expval, State
from .._memory import check_memory
from .._statevector import initial_state_of, run, zero_state
from ._control import MixedSimulator, final_rho
from ._doubled import doubled, representable_in_pauli_basis
from ._measure import measure_rho
from ._pauli import from_pauli, pauli_expvals, pauli_zero_state, run_pauli, to_pauli


class DensityMatrix(AbstractBackend):
    """The density matrix of `4**n` entries, evolved gate by gate and channel by channel: exact noise.

    The mixed state is held as a `2n`-wire array (ket wires, then bra wires); a gate is `U` on the ket
    wires and `conj(U)` on the bra wires, a channel its superoperator `sum_i K_i (x) conj(K_i)`, all run
    by the state-vector kernels and fusion pipeline (`qfx/_densitymatrix/README.md`). A circuit whose gates
    and channels each act on one or two wires runs in the Pauli basis instead: real coefficients
    `tr(P rho)`, each block of operations one real transfer matrix, a Pauli expectation one entry (about
    3x faster at 10 qubits; results equal up to rounding). Every measurement
    but `qfx.state` and `qfx.amplitude` (a mixed state has neither): `qfx.probs`, `qfx.expval` (exact or
    with `shots=`), `qfx.var`, `qfx.sample`, `qfx.density_matrix`. Works under `jax.jit`, `jax.vmap` and
    `jax.grad`, with respect to gate parameters, channel strengths and observables; `qfx.diff.Backprop()`
    (the default's choice here), `qfx.diff.ParameterShift()` (gate parameters, affine strengths) and
    `qfx.diff.FiniteDiff()` apply, `qfx.diff.Adjoint()` does not (it un-applies gates, and a channel has
    no inverse).

    Mid-circuit measurements (`qfx.measure`) and control flow run here too, exactly: an outcome that a
    condition reads keeps a density matrix per record, one that nothing reads is traced out (the density
    matrix is dephased on that wire), so measuring many wires without reading them costs nothing extra.

    Memory: two arrays of `4**n` entries (checked before allocating): 14 qubits take 4 GiB in complex64.
    For more qubits, `qfx.Trajectories()` keeps `2**n` per trajectory.

    The public name is the backend's; the entry point `qfx.density_matrix(circuit, wires)` is the
    measurement (the reduced density matrix), and works on every backend that can give it.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1)), qfx.DepolarizingChannel(0.1, wires=0)])
    qfx.expval(circ, qfx.Z(0) @ qfx.Z(1), backend=qfx.DensityMatrix())  # 1 - 4 * 0.1 / 3
    ```
    """

    def prepare(self, measurement: AbstractMeasurement, circuit: Circuit, initial_state) -> Array | None:
        fn = measurement.name
        if isinstance(measurement, (State, Amplitude)):
            raise ValueError(
                f"qfx.{fn}: backend=qfx.DensityMatrix() simulates a mixed state, which has no state vector "
                "or amplitude. Use qfx.density_matrix(circuit) for the state, or qfx.probs."
            )
        n = circuit.num_wires
        check_memory(
            4**n,
            f"qfx.DensityMatrix(): the density matrix of {n} wires (two arrays of 4**{n} entries)",
            "Use backend=qfx.Trajectories() with key= (2**n amplitudes per trajectory), or fewer wires.",
            copies=2,
        )
        if initial_state is None:
            return None
        return _initial(circuit, initial_state)

    def evaluate(self, measurement, circuit, initial_state, args):
        n = circuit.num_wires
        pauli = representable_in_pauli_basis(circuit.ops)
        if pauli:
            x0 = pauli_zero_state(n) if initial_state is None else to_pauli(initial_state, n)
        else:
            x0 = zero_state(2 * n) if initial_state is None else initial_state
        if has_control(circuit.ops):
            program = Program(circuit.ops)
            sim = MixedSimulator(program, n, pauli=pauli)
            x = traverse(circuit.ops, sim.initial(x0), sim, program, program.alias, ())
            return measure_rho(measurement, final_rho(x, sim, program), args)
        if pauli:
            c = run_pauli(doubled(circuit.ops, n, pauli=True), x0, n)
            values = pauli_expvals(c, args[0], n) if isinstance(measurement, Expval) else None
            if values is not None:
                return values
            x = from_pauli(c, n)
        else:
            x = run(doubled(circuit.ops, n), x0, 2 * n)
        return measure_rho(measurement, x.reshape(2**n, 2**n), args)

    def evaluation_bytes(self, circuit: Circuit) -> int:
        return 4**circuit.num_wires * complex_dtype().itemsize


def _initial(circuit: Circuit, initial_state) -> Array:
    """A state vector (`2**n`, as `|psi><psi|`) or a density matrix (`(2**n, 2**n)`, Hermitian, trace 1,
    checked when concrete), flattened."""
    n = circuit.num_wires
    x = as_numeric(initial_state, "initial_state", inexact=True)
    if x.shape == (2**n,):
        psi = initial_state_of(circuit, x)
        return jnp.outer(psi, psi.conj()).reshape(-1)
    if x.shape != (2**n, 2**n):
        raise ValueError(
            f"initial_state: expected a state vector of shape ({2**n},) or a density matrix of shape "
            f"({2**n}, {2**n}) for {n} wires, got {x.shape}."
        )
    if is_concrete(x):
        host = np.asarray(x).astype(np.complex128)
        tol = tolerance(x.dtype)
        herm = float(np.max(np.abs(host - host.conj().T)))
        trace = complex(np.trace(host))
        if not herm <= tol or not abs(trace - 1) <= tol:
            raise ValueError(
                f"initial_state: a density matrix must be Hermitian with trace 1, got max |rho - rho^dagger| "
                f"= {herm:.3g} and trace {trace:.6g}."
            )
    return as_dtype(x, complex_dtype()).reshape(-1)
