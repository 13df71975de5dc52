"""`qfx.StateVector`: the state-vector backend, the default."""

import equinox as eqx
import jax
from jax.sharding import PartitionSpec
from jaxtyping import Array

from .._backend import AbstractStateVectorBackend
from .._channels import refuse_channels
from .._circuit import Circuit
from .._control import has_control
from .._custom_types import complex_dtype
from .._measurements import (
    AbstractMeasurement,
    Amplitude,
    DensityMatrix,
    Expval,
    Probs,
    Sample,
    State,
    Var,
)
from .._memory import check_fits, check_memory
from . import _walk
from ._distributed import Shards, global_wires
from ._layout import schedule, shapes
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

    - `mesh`: a `jax.sharding.Mesh` to shard the state over (None: one device). The `2**g` devices along
      `axis` each keep `2**(n - g)` amplitudes: the wires at the `g` leading positions are global (the
      device's index bits), the others local. Gates on local wires run on each device's shard; a gate
      that is diagonal on its global wires (a diagonal gate, or a control) runs on the device's slice of
      its matrix; any other gate on a global wire first swaps that wire with a local one (half of each
      shard exchanged between pairs of devices, `jax.lax.ppermute`), the swaps chosen over the whole
      circuit so that a swapped-out wire is the one needed locally latest. Reductions end in
      `jax.lax.psum`; `qfx.state` (and `qfx.probs` of every wire in order) come back sharded over `axis`,
      never gathered; `qfx.sample` draws on each device from its own shard. Backprop and
      `qfx.diff.Adjoint()` work; memory per device is that of a `n - g`-wire state. Circuits of gates and
      `qfx.repeat` blocks (the swaps of one layer are undone at its end, so a block is one `lax.scan`);
      not yet control flow, mid-circuit measurements or shot estimates (`shots=`; `qfx.sample` works).
    - `axis`: the mesh axis to shard over; needed only when the mesh has several (the others replicate
      the computation, or carry a batch under `jax.vmap`).

    ```python
    # The devices there are (XLA_FLAGS=--xla_force_host_platform_device_count=8 gives 8 host CPU ones).
    k = 2 ** (jax.device_count().bit_length() - 1)
    mesh = jax.make_mesh((k,), ("q",), devices=jax.devices()[:k], axis_types=(jax.sharding.AxisType.Auto,))
    sharded = qfx.StateVector(mesh=mesh)
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1)), qfx.RY(0.3, wires=2), qfx.CNOT(wires=(2, 3))])
    qfx.expval(circ, qfx.Z(0) @ qfx.Z(1), backend=sharded)  # 1
    qfx.state(circ, backend=sharded)  # a jax.Array sharded over the mesh's devices
    ```
    """

    mcm: str | None = eqx.field(static=True, default=None)
    mesh: jax.sharding.Mesh | None = eqx.field(static=True, default=None)
    axis: str | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_mcm(self.mcm, "qfx.StateVector")
        if self.mesh is None:
            if self.axis is not None:
                raise ValueError(
                    f"qfx.StateVector: axis={self.axis!r} names an axis of a mesh; pass mesh= too."
                )
            return
        if not isinstance(self.mesh, jax.sharding.Mesh):
            raise TypeError(
                f"qfx.StateVector: mesh must be a jax.sharding.Mesh (e.g. jax.make_mesh((8,), ('q',))), got "
                f"{self.mesh!r}."
            )
        names = tuple(self.mesh.axis_names)
        if self.axis is None and len(names) != 1:
            raise ValueError(
                f"qfx.StateVector: the mesh has the axes {names}; say which one shards the state with axis=."
            )
        if self.axis is not None and self.axis not in names:
            raise ValueError(
                f"qfx.StateVector: axis={self.axis!r} is not an axis of the mesh, whose axes are {names}."
            )
        size = self.mesh.shape[self.axis_name]
        if size & (size - 1):
            raise ValueError(
                f"qfx.StateVector: the mesh axis {self.axis_name!r} has {size} devices; a state vector is "
                "sharded over a power of two (each device keeps the amplitudes of one value of the leading "
                "wires)."
            )

    @property
    def axis_name(self) -> str | None:
        """The mesh axis the state is sharded over (None without a mesh)."""
        if self.mesh is None:
            return None
        return self.axis if self.axis is not None else self.mesh.axis_names[0]

    def _shards(self, num_wires: int) -> Shards:
        return Shards(num_wires, global_wires(self.mesh.shape[self.axis_name]), self.axis_name)

    def prepare(self, measurement: AbstractMeasurement, circuit: Circuit, initial_state) -> Array:
        refuse_channels(circuit, "qfx.StateVector()", measurement.name)
        if self.mesh is not None:
            return self._prepare_sharded(measurement, circuit, initial_state)
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

    def _prepare_sharded(self, measurement, circuit: Circuit, initial_state) -> Array | None:
        fn, n = f"qfx.{measurement.name}", circuit.num_wires
        shards = self._shards(n)
        if has_control(circuit.ops):
            raise ValueError(
                f"{fn}: qfx.StateVector(mesh=...) runs circuits of gates and qfx.repeat blocks; this one has "
                "control flow or mid-circuit measurements. Drop mesh= for it."
            )
        if not isinstance(measurement, (State, Probs, Amplitude, DensityMatrix, Expval, Var, Sample)):
            raise ValueError(
                f"{fn}: shot estimates (shots=) are not available on a sharded state yet; draw samples with "
                "qfx.sample (distributed) and estimate from them, or drop mesh=."
            )
        if shards.local < 1:
            raise ValueError(
                f"{fn}: a {n}-wire state cannot be sharded over {2**shards.g} devices (each keeps at least 2 "
                f"amplitudes); use at most {2 ** (n - 1)} devices along the mesh axis {self.axis_name!r}."
            )
        if isinstance(measurement, DensityMatrix) and len(measurement.wires) > shards.local:
            raise ValueError(
                f"{fn}: the reduced density matrix of {len(measurement.wires)} wires is read on each device, "
                f"which keeps {shards.local} wires of this state; ask for fewer wires or use fewer devices."
            )
        check_memory(
            2**shards.local,
            f"A {n}-wire simulation sharded over {2**shards.g} devices (two shards of the state per device)",
            "Use more devices, or fewer wires.",
            copies=2,
        )
        if initial_state is None:
            return None
        return initial_state_of(circuit, initial_state)

    def _sharded(self, fn, in_specs, out_specs):
        return jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs)

    def _state_sharding(self) -> jax.sharding.NamedSharding:
        return jax.sharding.NamedSharding(self.mesh, PartitionSpec(self.axis_name))

    def _on_mesh(self, x: Array | None) -> Array | None:
        """`x` sharded over the axis (a state, or a bra), whatever its sharding was."""
        if x is None:
            return None
        kind = dict(zip(self.mesh.axis_names, self.mesh.axis_types, strict=True))[self.axis_name]
        if kind == jax.sharding.AxisType.Explicit:
            return jax.reshard(x, self._state_sharding())
        return jax.lax.with_sharding_constraint(x, self._state_sharding())

    def evaluate(self, measurement, circuit, initial_state, args):
        if self.mesh is None and has_control(circuit.ops):  # `prepare` refuses it with a mesh
            return evaluate_control(measurement, circuit, _start(circuit, initial_state), args, self.mcm)
        return self.measure(measurement, self.simulate(circuit, initial_state), args)

    def evaluation_bytes(self, circuit: Circuit) -> int:
        wires = circuit.num_wires if self.mesh is None else self._shards(circuit.num_wires).local
        return 2**wires * complex_dtype().itemsize

    def state_struct(self, circuit: Circuit) -> jax.ShapeDtypeStruct:
        sharding = None if self.mesh is None else self._state_sharding()
        return jax.ShapeDtypeStruct((2**circuit.num_wires,), complex_dtype(), sharding=sharding)

    def simulate(self, circuit: Circuit, initial_state: Array | None) -> Array:
        if self.mesh is None:
            return run(circuit.ops, _start(circuit, initial_state), circuit.num_wires)
        shards = self._shards(circuit.num_wires)
        sharded = PartitionSpec(self.axis_name)
        structure = shapes(circuit.ops)

        def local(ops, s):
            items = schedule(ops, shards.n, shards.g, shards.axis, structure)
            return shards.forward(items, shards.zero() if s is None else s)

        return self._sharded(local, (PartitionSpec(), sharded), sharded)(
            circuit.ops, self._on_mesh(initial_state)
        )

    def measure(self, measurement: AbstractMeasurement, state: Array, args) -> Array:
        n = state.shape[0].bit_length() - 1
        if self.mesh is None:
            return measure_pure(measurement, state, args, n)
        shards = self._shards(n)
        sharded = PartitionSpec(self.axis_name)
        full = isinstance(measurement, State) or (
            isinstance(measurement, Probs) and measurement.wires == tuple(range(n))
        )
        out = sharded if full else PartitionSpec()
        return self._sharded(lambda s, a: shards.measure(measurement, s, a), (sharded, PartitionSpec()), out)(
            self._on_mesh(state), args
        )

    def backward(self, circuit: Circuit, state: Array, bra: Array) -> tuple[list[Array], Array]:
        if self.mesh is None:
            leaves, (_, bra0) = _walk.backward(circuit.ops, (state, bra), circuit.num_wires)
            return leaves, bra0
        shards = self._shards(circuit.num_wires)
        sharded = PartitionSpec(self.axis_name)
        structure = shapes(circuit.ops)

        def local(ops, s, b):
            # The walk's cotangents as this device's partial sums (varying), added up explicitly: left
            # replicated, JAX would add them inside some transposes and not others.
            ops = jax.tree.map(lambda x: jax.lax.pcast(x, shards.axis, to="varying"), ops)
            items = schedule(ops, shards.n, shards.g, shards.axis, structure)
            leaves, (_, b0) = shards.backward(items, (s, b))
            return [jax.lax.psum(x, shards.axis) for x in leaves], b0

        return self._sharded(local, (PartitionSpec(), sharded, sharded), (PartitionSpec(), sharded))(
            circuit.ops, self._on_mesh(state), self._on_mesh(bra)
        )


def _start(circuit: Circuit, initial_state: Array | None) -> Array:
    return zero_state(circuit.num_wires) if initial_state is None else initial_state
