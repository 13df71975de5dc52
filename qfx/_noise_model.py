"""Noise models: rules that insert channels into a circuit, applied as a pure transformation."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp

from ._channels import AbstractChannel
from ._circuit import Circuit, Repeat
from ._control import Cond, ForLoop, MidMeasure, WhileLoop
from ._control._operations import _body_ops
from ._gates import AbstractGate


def _check_template(rule: str, channel) -> AbstractChannel:
    if not isinstance(channel, AbstractChannel):
        raise TypeError(
            f"qfx.{rule}: expected a noise channel such as qfx.DepolarizingChannel(0.01, wires=0) (its wires "
            f"are replaced where it is inserted), got {channel!r}."
        )
    return channel


def _check_wire_filter(rule: str, wires) -> tuple[int, ...] | None:
    if wires is None:
        return None
    wires = (wires,) if isinstance(wires, int) else tuple(wires)
    if not wires or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in wires):
        raise ValueError(f"qfx.{rule}: wires must be None (all) or non-negative ints, got {wires!r}.")
    return wires


def _stacked(channel: AbstractChannel, layers: tuple[int, ...]) -> AbstractChannel:
    """The channel with its leaves broadcast over the layer axes of the `Repeat` blocks around it (the same
    strengths in every layer; the gradient sums over them)."""
    if not layers:
        return channel
    return jax.tree.map(lambda x: jnp.broadcast_to(x, layers + jnp.shape(x)), channel)


class AfterGates(eqx.Module):
    """A rule of `qfx.NoiseModel`: after every gate of the given kinds (on the given wires), the channel.

    **Arguments:**

    - `channel`: the channel to insert; its strengths are the rule's leaves, shared by every insertion, and
      its wires are replaced. A one-qubit channel goes on each wire of the gate (those in `wires`); a
      wider one on the gate's wires, when it has as many.
    - `gates`: gate classes (`(qfx.RX, qfx.CNOT)`), or None for every gate.
    - `wires`: only gates acting on one of these wires (and, for a one-qubit channel, only on these);
      None for all.

    ```python
    rule = qfx.AfterGates(qfx.DepolarizingChannel(0.01, wires=0), gates=(qfx.CNOT,))
    ```
    """

    channel: AbstractChannel
    gates: tuple[type, ...] | None = eqx.field(static=True)
    wires: tuple[int, ...] | None = eqx.field(static=True)

    def __init__(self, channel: AbstractChannel, gates: Sequence[type] | type | None = None, wires=None):
        self.channel = _check_template("AfterGates", channel)
        if gates is not None:
            gates = (gates,) if isinstance(gates, type) else tuple(gates)
            if not gates or not all(isinstance(g, type) and issubclass(g, AbstractGate) for g in gates):
                raise TypeError(
                    "qfx.AfterGates: gates must be gate classes such as (qfx.RX, qfx.CNOT), or None for "
                    f"all, got {gates!r}."
                )
        self.gates = gates
        self.wires = _check_wire_filter("AfterGates", wires)

    def after(self, gate: AbstractGate, channel: AbstractChannel) -> list[AbstractChannel]:
        """The channels this rule puts after `gate`: `channel` (the rule's, its leaves broadcast over the
        layers of the `Repeat` blocks around the gate: `_stacked`) on the gate's wires."""
        if self.gates is not None and not isinstance(gate, self.gates):
            return []
        on = gate.wires if self.wires is None else tuple(w for w in gate.wires if w in self.wires)
        if not on:
            return []
        width = len(self.channel.wires)
        if width == 1:
            return [channel.on((w,)) for w in on]
        if width == len(gate.wires):
            return [channel.on(gate.wires)]
        raise ValueError(
            f"qfx.AfterGates: {self.channel!r} acts on {width} wires, so it cannot follow {gate!r} on "
            f"{len(gate.wires)}; use a one-qubit channel (inserted on each wire) or restrict gates=."
        )


class Readout(eqx.Module):
    """A rule of `qfx.NoiseModel`: a readout error, the channel on each measured wire just before the
    measurement (the end of the circuit, and each `qfx.measure`).

    **Arguments:**

    - `channel`: a one-qubit channel, typically `qfx.BitFlip(p, wires=0)` (its wires are replaced).
    - `wires`: the wires it applies to; None for all.

    ```python
    rule = qfx.Readout(qfx.BitFlip(0.02, wires=0))
    ```
    """

    channel: AbstractChannel
    wires: tuple[int, ...] | None = eqx.field(static=True)

    def __init__(self, channel: AbstractChannel, wires=None):
        self.channel = _check_template("Readout", channel)
        if len(self.channel.wires) != 1:
            raise ValueError(f"qfx.Readout: the channel must act on one wire, got {self.channel!r}.")
        self.wires = _check_wire_filter("Readout", wires)

    def before(self, wires, channel: AbstractChannel) -> list[AbstractChannel]:
        """`channel` (the rule's, broadcast as in `AfterGates.after`) on each of `wires` it applies to."""
        return [channel.on((w,)) for w in wires if self.wires is None or w in self.wires]


class NoiseModel(eqx.Module):
    """Noise rules applied to a circuit as a pure transformation: `model(circuit)` is a new circuit with
    the rules' channels inserted.

    The model is a pytree whose leaves are its channels' strengths, shared by every insertion, so fitting a
    noise model to data is `jax.grad` of a loss with respect to the model, plus Optax.

    **Arguments:**

    - `rules`: `qfx.AfterGates(...)` and `qfx.Readout(...)` rules, applied in order (after a gate, the
      first rule's channels come first).

    Gates inside `qfx.repeat` blocks get the channels inside the block (the same strengths in every
    layer), and so do the gates in the branches of `qfx.cond` / `qfx.switch` and in the bodies of
    `qfx.for_loop` and `qfx.while_loop`, as if the program were unrolled; `qfx.Readout` also acts before
    each `qfx.measure`, inside those bodies too.

    ```python
    model = qfx.NoiseModel([
        qfx.AfterGates(qfx.DepolarizingChannel(0.01, wires=0)),
        qfx.Readout(qfx.BitFlip(0.02, wires=0)),
    ])
    noisy = model(qfx.Circuit([qfx.H(0), qfx.CNOT(wires=(0, 1))]))
    qfx.probs(noisy)  # on qfx.DensityMatrix(), the default for noisy circuits
    ```
    """

    rules: tuple[AfterGates | Readout, ...]

    def __init__(self, rules: Sequence[AfterGates | Readout]):
        rules = tuple(rules)
        for r in rules:
            if not isinstance(r, (AfterGates, Readout)):
                raise TypeError(
                    f"qfx.NoiseModel: rules must be qfx.AfterGates(...) or qfx.Readout(...), got {r!r}."
                )
        self.rules = rules

    def __call__(self, circuit: Circuit) -> Circuit:
        if not isinstance(circuit, Circuit):
            raise TypeError(f"qfx.NoiseModel: expected a qfx.Circuit, got {type(circuit).__name__}.")
        ops = self._ops(circuit.ops, circuit.num_wires, ())
        readouts = [r for r in self.rules if isinstance(r, Readout)]
        for r in readouts:
            ops += r.before(range(circuit.num_wires), r.channel)
        return Circuit(ops, circuit.num_wires)

    def _ops(self, ops, n: int, layers: tuple[int, ...], channels=None) -> list:
        # Each rule's channel broadcast once per nesting of `Repeat` blocks: every insertion shares those
        # arrays, so the program holds one copy, and the gradient one sum over the layers, per rule.
        if channels is None:
            channels = [_stacked(r.channel, layers) for r in self.rules]
        inside = lambda c: Circuit(self._ops(c.ops, n, layers, channels), c.num_wires)  # noqa: E731
        out = []
        for op in ops:
            if isinstance(op, Repeat):
                body = Circuit(self._ops(op.body.ops, n, layers + (op.length,)), op.body.num_wires)
                out.append(Repeat(body, op.length))
                continue
            if isinstance(op, Cond):
                out.append(eqx.tree_at(lambda c: c.branches, op, tuple(inside(b) for b in op.branches)))
                continue
            if isinstance(op, WhileLoop):
                out.append(eqx.tree_at(lambda w: w.body, op, inside(op.body)))
                continue
            if isinstance(op, ForLoop):  # its body is a function: the rules go in with it, as leaves
                rules = [
                    eqx.tree_at(lambda r: r.channel, r, c) for r, c in zip(self.rules, channels, strict=True)
                ]
                body = _NoisyIteration(op.body, NoiseModel(rules), n)
                out.append(eqx.tree_at(lambda f: f.body, op, body))
                continue
            if isinstance(op, MidMeasure):
                for r, channel in zip(self.rules, channels, strict=True):
                    if isinstance(r, Readout):
                        out += r.before((op.wire,), channel)
            out.append(op)
            if isinstance(op, AbstractGate):
                for r, channel in zip(self.rules, channels, strict=True):
                    if isinstance(r, AfterGates):
                        out += r.after(op, channel)
        return out


class _NoisyIteration(eqx.Module):
    """A `qfx.for_loop` body with a noise model's rules: iteration `i` is `body(i)` with the channels
    inserted. The rules' channels are leaves here (broadcast over the `Repeat` layers around the loop, so
    each layer reads its own slice), shared with every other insertion of the same rule."""

    body: object
    model: NoiseModel
    num_wires: int = eqx.field(static=True)

    def __call__(self, i):
        ops = _body_ops(self.body(i), "qfx.for_loop")
        return self.model._ops(ops, self.num_wires, ())
