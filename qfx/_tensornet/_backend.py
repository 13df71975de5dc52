"""A state vector stops fitting at about 30 qubits; a shallow circuit measured by local observables stays a
small tensor network far beyond that. `qfx.TensorNetwork()` is passed as `backend=` to `qfx.expval`,
`qfx.probs` and `qfx.amplitude`:

- each Pauli word (or Hermitian term) becomes the network of `<0|C^dagger O C|0>`, keeping only the gates
  in the term's backward light cone (the others cancel against their adjoints);
- a marginal `p(x_W)` is the same network with a copy tensor joining the ket, the bra and an open index on
  each measured wire; an amplitude `<b|C|0>` is the ket network closed by one-hot vectors;
- each network gets its contraction path once per structure, from opt_einsum on shapes alone, outside any
  trace; paths are cached on the wires of the (unrolled) gates and on the task, never on parameters;
- networks of the same shape (the interior terms of a translation-invariant sum, say) are stacked and
  contracted together, as one network with a batch index;
- the contraction is `jnp.einsum` along that path (so backprop, `jit` and `vmap` just work), or
  NVIDIA cuTensorNet (`contractor="cutensornet"`, see `qfx/_tensornet/_cutensornet.py`).

Every index has extent 2; gate tensors are `matrix()` reshaped to `(2,) * 2k` (outputs first, wire 0 of
the gate most significant), so controlled and diagonal gates need no special case.

"""

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array
import opt_einsum

from .. import _memory
from .._backend import AbstractBackend
from .._channels import refuse_channels
from .._circuit import Circuit
from .._custom_types import EXACT, complex_dtype, real_dtype
from .._measurements import (
    AbstractMeasurement,
    Amplitude,
    Estimate,
    Expval,
    Probs,
    ProbsEstimate,
    VarEstimate,
)
from .._memory import check_memory
from .._observables import Hermitian, LinearCombination, PauliWord
from . import _cutensornet
from ._network import _amplitude_network, _expval_network, _Network, _probs_network
from ._operands import _needed, _Operands, _skeleton, _unroll

# --- the backend -------------------------------------------------------------------------------


def _check_optimize(optimize):
    if isinstance(optimize, str):
        try:
            opt_einsum.paths.get_path_fn(optimize)
        except KeyError:
            raise ValueError(
                f"TensorNetwork: optimize={optimize!r} is not an opt_einsum path optimizer; use one of "
                "'auto', 'auto-hq', 'greedy', 'random-greedy', 'dp', or an opt_einsum.paths.PathOptimizer "
                "instance ('optimal' and 'branch-*' search exhaustively: only for a few tensors)."
            ) from None
    elif not isinstance(optimize, opt_einsum.paths.PathOptimizer):
        raise TypeError(
            f"TensorNetwork: optimize must be an opt_einsum optimizer name or a PathOptimizer instance, "
            f"got {type(optimize).__name__}."
        )
    return optimize


# Shifted evaluations (parameter shift, finite differences) of the whole network run together in chunks of
# 256: sized as if each kept this many bytes (no state vectors here).
_EVALUATION_BYTES = 2**18


class TensorNetwork(AbstractBackend):
    """The tensor-network backend: pass `backend=qfx.TensorNetwork()` to `qfx.expval`, `qfx.probs` or
    `qfx.amplitude`.

    Each Pauli word of an observable becomes the network `<0|C^dagger P C|0>` restricted to the word's
    backward light cone, so the cost depends on the circuit's depth and on the observable's locality,
    not on the number of qubits: a depth-4 brick-wall circuit on 60 qubits is cheap. Amplitudes
    `<b|C|0>` need the whole circuit; marginal probabilities of a few wires need their light cone.
    Contraction paths are found once per circuit structure (by opt_einsum, on shapes alone) and cached;
    new parameter values reuse them, and under `jit` nothing is recompiled.

    **Arguments:**

    - `contractor`: `"jax"` (default) contracts with `jnp.einsum` along the cached path: CPU or GPU, any
      order of derivatives, `jit`, `vmap`. `"cutensornet"` hands the same network to NVIDIA cuTensorNet
      on the GPU, with its own backward pass (reverse mode only); it needs the `gpu` extra and a CUDA
      GPU, see `qfx/_tensornet/_cutensornet.py`.
    - `optimize`: the opt_einsum path optimizer: a name (`"auto"` by default: exhaustive for a few
      tensors, greedy beyond, milliseconds for a 60-qubit light cone; `"auto-hq"` searches longer for
      better paths) or an `opt_einsum.paths.PathOptimizer`. Paths are cached per optimizer.

    Derivatives: `diff=qfx.diff.Auto()` (the default, which backpropagates on this backend) and
    `qfx.diff.Backprop()` differentiate through the contraction, to any order; `qfx.diff.ParameterShift()`
    and `qfx.diff.FiniteDiff()` evaluate shifted networks under one `vmap`. `qfx.diff.Adjoint()` un-applies
    gates to a state vector, which this backend never builds, so it raises. Gradients with respect to
    `QubitUnitary` entries are those of the light-cone network, which assumes unitarity: they agree with
    the state vector's along unitary directions only.

    ```python
    n = 60
    circ = qfx.Circuit(
        [qfx.RY(0.1 * i, wires=i) for i in range(n)]
        + [qfx.CNOT(wires=(i, i + 1)) for i in range(0, n - 1, 2)]
        + [qfx.RY(0.2, wires=i) for i in range(n)]
    )
    tn = qfx.TensorNetwork()
    qfx.expval(circ, qfx.Z(30) @ qfx.Z(31), backend=tn)
    jax.grad(qfx.expval)(circ, qfx.Z(30), backend=tn)
    qfx.probs(circ, wires=(0, 59), backend=tn)
    qfx.amplitude(circ, [0] * n, backend=tn)
    ```
    """

    contractor: Any = eqx.field(static=True)
    optimize: Any = eqx.field(static=True)

    def __init__(self, contractor="jax", optimize="auto"):
        if isinstance(contractor, str):
            if contractor == "cutensornet":
                contractor = _cutensornet.cutensornet_engine()
            elif contractor != "jax":
                raise ValueError(
                    f"TensorNetwork: contractor must be 'jax' or 'cutensornet', got {contractor!r}."
                )
        elif not isinstance(contractor, _cutensornet.AbstractEngine):
            raise TypeError(
                f"TensorNetwork: contractor must be 'jax' or 'cutensornet', got {type(contractor).__name__}."
            )
        self.contractor = contractor
        self.optimize = _check_optimize(optimize)

    # --- the backend interface ------------------------------------------------------------------

    def prepare(self, measurement: AbstractMeasurement, circuit: Circuit, initial_state) -> None:
        fn = measurement.name
        refuse_channels(circuit, "qfx.TensorNetwork()", fn)
        if isinstance(measurement, (Estimate, ProbsEstimate, VarEstimate)):
            raise ValueError(
                f"qfx.{fn}: shots={measurement.shots} is not available with backend=qfx.TensorNetwork(), "
                "which computes exact expectations; drop shots=, or use backend=qfx.StateVector()."
            )
        if not isinstance(measurement, (Expval, Probs, Amplitude)):
            raise ValueError(
                f"qfx.{fn} is not available with backend=qfx.TensorNetwork(), which contracts expectation "
                "values (qfx.expval), marginal probabilities (qfx.probs) and amplitudes (qfx.amplitude) "
                "without a state vector; use backend=qfx.StateVector()."
            )
        _skeleton(circuit.ops)  # raises on control flow, naming it
        if initial_state is not None:
            raise ValueError(
                f"qfx.{fn}: backend=qfx.TensorNetwork() starts from |0...0> and takes no initial_state; "
                "build the initial state with gates, or use backend=qfx.StateVector()."
            )
        if isinstance(measurement, Probs):
            check_memory(
                2 ** len(measurement.wires),
                f"qfx.probs: the marginal of {len(measurement.wires)} wires",
                "With backend=qfx.TensorNetwork() ask for a few wires, e.g. "
                "qfx.probs(circuit, wires=(0, 1), ...).",
            )
        return None

    def evaluate(self, measurement, circuit, initial_state, args):
        payload, _ = args
        if isinstance(measurement, Expval):
            return self.expval(circuit, payload)
        if isinstance(measurement, Probs):
            return self.probs(circuit, measurement.wires)
        return self.amplitude(circuit, payload)

    def evaluation_bytes(self, circuit: Circuit) -> int:
        return _EVALUATION_BYTES

    def largest_intermediate(self, circuit: Circuit, observables: Sequence[LinearCombination]) -> int:
        """The entries of the largest intermediate tensor of the networks `qfx.expval(circuit, observables,
        backend=self)` contracts, one per Pauli word or Hermitian term (networks of one shape are
        contracted stacked, as many at once as fit). Path finding only, cached as `expval`'s: nothing is
        contracted. Used by `qfx.specs`."""
        skeleton = _skeleton(circuit.ops)
        largest = 1
        for lc in observables:
            for t in lc.terms:
                if isinstance(t, PauliWord):
                    if not t.word:
                        continue
                    term = ("pauli", t.word)
                else:
                    term = ("hermitian", t.wires)
                largest = max(largest, _expval_network(skeleton, term, self.optimize).largest)
        return largest

    # --- contraction ---------------------------------------------------------------------------

    def _check_size(self, net: _Network) -> None:
        check_memory(
            net.largest,
            "TensorNetwork: this network's largest intermediate tensor",
            "The light cone is too wide: use fewer layers, a more local observable, or a better path "
            "(optimize='auto-hq' or an opt_einsum.RandomGreedy with more repeats).",
        )

    def _contract(self, inputs, output, path, operands: list[Array]) -> Array:
        if self.contractor == "jax":
            sym = opt_einsum.get_symbol
            equation = ",".join("".join(sym(m) for m in t) for t in inputs) + "->" + "".join(map(sym, output))
            return jnp.einsum(equation, *operands, optimize=list(path), precision=EXACT)
        return _cutensornet.contract(self.contractor, inputs, output, path, operands)

    def _contract_all(self, nets: list[_Network], ops: _Operands, terms=None) -> list[Array]:
        """Contracts each network; networks of one shape are stacked and contracted as one network.
        `terms[k]` is the Hermitian term of network k, if any."""
        terms = [None] * len(nets) if terms is None else terms
        groups: dict[tuple, list[int]] = {}
        for k, net in enumerate(nets):
            self._check_size(net)
            groups.setdefault(net.shape_key, []).append(k)
        out: list = [None] * len(nets)
        limit = _memory.memory_limit_bytes() // complex_dtype().itemsize  # entries
        for group in groups.values():
            # Stacking multiplies the intermediates by the number of members: as many as fit at once.
            fit = max(1, limit // nets[group[0]].largest)
            for start in range(0, len(group), fit):
                self._evaluate_stacked(nets, group[start : start + fit], ops, terms, out)
        return out

    def _evaluate_stacked(self, nets: list[_Network], members: list[int], ops: _Operands, terms, out) -> None:
        """Contracts the networks `members` (of one shape) as one network, into `out[k]` for k in members."""
        net = nets[members[0]]
        if len(members) == 1:
            operands = [ops.one(e, terms[members[0]]) for e in net.recipe]
            out[members[0]] = self._contract(net.inputs, net.output, net.path, operands)
            return
        # One network with a batch mode on the operands that differ between the members (an index shared
        # by several tensors and the output). The same path applies.
        batch = 1 + max(m for t in net.inputs for m in t)
        operands, inputs, batched = [], [], False
        for j, modes in enumerate(net.inputs):
            x, axis = ops.many([nets[k].recipe[j] for k in members], [terms[k] for k in members])
            operands.append(x)
            inputs.append(modes if axis is None else (batch,) + modes)
            batched |= axis is not None
        if not batched:  # the members are one network (e.g. X(0) + X(1) after fixed gates): contract once
            value = self._contract(net.inputs, net.output, net.path, operands)
            for k in members:
                out[k] = value
            return
        values = self._contract(tuple(inputs), (batch,) + net.output, net.path, operands)
        for i, k in enumerate(members):
            out[k] = values[i]

    # --- tasks ------------------------------------------------------------------------------------

    def expval(self, circuit: Circuit, observables: Sequence[LinearCombination]) -> Array:
        """`<O>` for each observable, as a real array. Called by `qfx.expval(..., backend=self)`."""
        skeleton = _skeleton(circuit.ops)
        # One network per distinct Pauli word (shared between observables) and per Hermitian term.
        networks: list[_Network] = []
        hermitians: list[Hermitian | None] = []
        slot: dict = {}
        slots = []
        for lc in observables:
            slots.append([])
            for t in lc.terms:
                key = ("pauli", t.word) if isinstance(t, PauliWord) else ("hermitian", id(t))
                if key not in slot:
                    if key == ("pauli", ()):
                        slot[key] = None  # the identity: <I> = 1
                    else:
                        term = key if isinstance(t, PauliWord) else ("hermitian", t.wires)
                        slot[key] = len(networks)
                        networks.append(_expval_network(skeleton, term, self.optimize))
                        hermitians.append(t if isinstance(t, Hermitian) else None)
                slots[-1].append(slot[key])
        ops = _Operands(_unroll(circuit.ops), _needed(networks))
        values = self._contract_all(networks, ops, hermitians)
        values = [jnp.real(v).astype(real_dtype()) for v in values]
        one = jnp.ones((), real_dtype())
        out = [
            jnp.dot(lc.coeffs, jnp.stack([one if s is None else values[s] for s in ss]), precision=EXACT)
            if ss
            else jnp.zeros((), real_dtype())  # no terms
            for lc, ss in zip(observables, slots, strict=True)
        ]
        return jnp.stack(out)

    def probs(self, circuit: Circuit, wires: tuple[int, ...]) -> Array:
        """Marginal probabilities of `wires` (first wire most significant). Called by `qfx.probs`."""
        if not wires:  # the marginal of nothing: the norm
            return jnp.ones((1,), real_dtype())
        net = _probs_network(_skeleton(circuit.ops), tuple(wires), self.optimize)
        (value,) = self._contract_all([net], _Operands(_unroll(circuit.ops), _needed([net])))
        return jnp.real(value).reshape(-1).astype(real_dtype())

    def amplitude(self, circuit: Circuit, bits: Array) -> Array:
        """`<b|C|0>` for a bitstring `bits` of shape `(n,)`. Called by `qfx.amplitude`."""
        net = _amplitude_network(_skeleton(circuit.ops), circuit.num_wires, self.optimize)
        (value,) = self._contract_all([net], _Operands(_unroll(circuit.ops), _needed([net]), bits))
        return value
