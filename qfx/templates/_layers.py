"""Layered ansätze: each is one or two `qfx.Repeat` blocks (a `lax.scan` over the stacked layer weights),
so compile time does not grow with the number of layers."""

from jaxtyping import ArrayLike

from .._circuit import repeat
from .._gates import CNOT, CZ, RX, RY, AbstractOperation, Rot
from ._common import gate_class, real_array, template_wires, with_shape


def _ring(n: int) -> list[tuple[int, int]]:
    """PennyLane's "ring" of CNOTs: none on one wire, one on two, `(i, i + 1 mod n)` on more."""
    if n < 2:
        return []
    if n == 2:
        return [(0, 1)]
    return [(i, (i + 1) % n) for i in range(n)]


def _basic_shape(n_layers: int, n_wires: int) -> tuple[int, int]:
    return (n_layers, n_wires)


@with_shape(_basic_shape)
def BasicEntanglerLayers(weights: ArrayLike, wires, rotation=RX) -> list[AbstractOperation]:  # noqa: N802
    """Layers of one-parameter rotations on every wire followed by a ring of CNOTs (PennyLane's
    `BasicEntanglerLayers`).

    Layer `l` applies `rotation(weights[l, i])` on `wires[i]`, then `CNOT(wires[i], wires[i + 1 mod n])`
    for every `i` (one CNOT on two wires, none on one).

    **Arguments:**

    - `weights`: shape `(n_layers, len(wires))`, `BasicEntanglerLayers.shape(n_layers, n_wires)`.
    - `wires`: the wires.
    - `rotation`: a one-wire one-parameter gate class, `qfx.RX` by default.

    **Returns:** a list holding one `qfx.Repeat` block of `n_layers` layers (empty for zero layers).

    ```python
    w = jnp.full(qfx.templates.BasicEntanglerLayers.shape(n_layers=2, n_wires=3), 0.1)
    circ = qfx.Circuit(qfx.templates.BasicEntanglerLayers(w, wires=range(3), rotation=qfx.RY))
    ```
    """
    wires = template_wires("BasicEntanglerLayers", wires)
    rotation = gate_class("BasicEntanglerLayers", "rotation", rotation, 1, 1)
    w = real_array("BasicEntanglerLayers", "weights", weights)
    if w.ndim != 2 or w.shape[1] != len(wires):
        raise ValueError(
            f"BasicEntanglerLayers: weights must have shape (n_layers, {len(wires)}) (one angle per wire and "
            f"layer: BasicEntanglerLayers.shape(n_layers, n_wires)), got {w.shape}."
        )
    if w.shape[0] == 0:
        return []
    ring = _ring(len(wires))

    def layer(wl):
        ops = [rotation(wl[i], wires=wire) for i, wire in enumerate(wires)]
        return ops + [CNOT((wires[a], wires[b])) for a, b in ring]

    return [repeat(layer, w)]


def _strong_shape(n_layers: int, n_wires: int) -> tuple[int, int, int]:
    return (n_layers, n_wires, 3)


def _period(values: tuple[int, ...]) -> int:
    """The smallest `p` with `values[l] == values[l - p]` for every `l >= p`."""
    return next(p for p in range(1, len(values) + 1) if values[p:] == values[:-p])


@with_shape(_strong_shape)
def StronglyEntanglingLayers(  # noqa: N802
    weights: ArrayLike, wires, ranges=None, imprimitive=CNOT
) -> list[AbstractOperation]:
    """Layers of general rotations on every wire followed by entanglers at a range (PennyLane's
    `StronglyEntanglingLayers`; Schuld et al. 2020).

    Layer `l` applies `Rot(*weights[l, i])` on `wires[i]`, then, on two wires or more,
    `imprimitive(wires[i], wires[(i + r_l) mod n])` for every `i`, with `r_l = ranges[l]`; by default
    `r_l = l mod (n - 1) + 1`.

    The entanglers change from layer to layer, so the layers are grouped by the period of `ranges`: one
    `qfx.Repeat` block whose step is one period of layers (`n - 1` layers by default), and one more block of
    one step for the layers left over.

    **Arguments:**

    - `weights`: shape `(n_layers, len(wires), 3)`, `StronglyEntanglingLayers.shape(n_layers, n_wires)`.
    - `wires`: the wires.
    - `ranges`: one int per layer, none divisible by the number of wires (when there are two or more).
    - `imprimitive`: a two-wire gate class without parameters, `qfx.CNOT` by default (`qfx.CZ`, ...).

    **Returns:** a list of one or two `qfx.Repeat` blocks (empty for zero layers).

    ```python
    shape = qfx.templates.StronglyEntanglingLayers.shape(n_layers=2, n_wires=3)
    w = jax.random.uniform(jax.random.key(0), shape, maxval=2 * jnp.pi)
    circ = qfx.Circuit(qfx.templates.StronglyEntanglingLayers(w, wires=range(3)))
    ```
    """
    name = "StronglyEntanglingLayers"
    wires = template_wires(name, wires)
    n = len(wires)
    imprimitive = gate_class(name, "imprimitive", imprimitive, 2, 0)
    w = real_array(name, "weights", weights)
    if w.ndim != 3 or w.shape[1:] != (n, 3):
        raise ValueError(
            f"{name}: weights must have shape (n_layers, {n}, 3) (three Rot angles per wire and layer: "
            f"{name}.shape(n_layers, n_wires)), got {w.shape}."
        )
    n_layers = w.shape[0]
    if ranges is None:
        ranges = tuple(l % (n - 1) + 1 for l in range(n_layers)) if n > 1 else (0,) * n_layers
    else:
        ints = [r for r in ranges if isinstance(r, int) and not isinstance(r, bool)]
        if len(ints) != len(ranges) or len(ranges) != n_layers:
            raise ValueError(f"{name}: ranges must be {n_layers} ints (one per layer), got {ranges!r}.")
        if n > 1 and any(r % n == 0 for r in ranges):
            raise ValueError(
                f"{name}: ranges must not be zero nor divisible by the number of wires ({n}), got {ranges!r}."
            )
        ranges = tuple(ranges)
    if n_layers == 0:
        return []

    def layers(ranges_of_step):
        def step(ws):  # ws: (len(ranges_of_step), n, 3)
            ops = []
            for k, r in enumerate(ranges_of_step):
                ops += [
                    Rot(ws[k, i, 0], ws[k, i, 1], ws[k, i, 2], wires=wire) for i, wire in enumerate(wires)
                ]
                if n > 1:
                    ops += [imprimitive((wires[i], wires[(i + r) % n])) for i in range(n)]
            return ops

        return step

    p = _period(ranges)
    steps, rest = divmod(n_layers, p)
    blocks = [repeat(layers(ranges[:p]), w[: steps * p].reshape(steps, p, n, 3))]
    if rest:
        blocks.append(repeat(layers(ranges[:rest]), w[steps * p :][None]))
    return blocks


def _two_design_shape(n_layers: int, n_wires: int) -> list[tuple[int, ...]]:
    return [(n_wires,), (n_layers, n_wires - 1, 2)]


@with_shape(_two_design_shape)
def SimplifiedTwoDesign(  # noqa: N802
    initial_layer_weights: ArrayLike, weights: ArrayLike, wires
) -> list[AbstractOperation]:
    """An initial layer of `RY`s, then layers of `CZ` + `RY` blocks on even and odd pairs of wires
    (PennyLane's `SimplifiedTwoDesign`; Cerezo et al. 2021).

    The initial layer is `RY(initial_layer_weights[i])` on `wires[i]`. Layer `l` applies, on each pair
    `(wires[2j], wires[2j + 1])`, `CZ` then `RY(weights[l, j, 0])` and `RY(weights[l, j, 1])` on the two
    wires, then the same on the pairs `(wires[2j + 1], wires[2j + 2])` with the weights that follow
    (`weights[l, n // 2 + j]`).

    **Arguments:**

    - `initial_layer_weights`: shape `(len(wires),)`.
    - `weights`: shape `(n_layers, len(wires) - 1, 2)`; `SimplifiedTwoDesign.shape(n_layers, n_wires)`
      gives both shapes, as a list.
    - `wires`: the wires.

    **Returns:** a list: the initial `RY`s, then one `qfx.Repeat` block of the layers.

    ```python
    init_shape, shape = qfx.templates.SimplifiedTwoDesign.shape(n_layers=2, n_wires=4)
    circ = qfx.Circuit(qfx.templates.SimplifiedTwoDesign(jnp.zeros(init_shape), jnp.ones(shape), range(4)))
    ```
    """
    name = "SimplifiedTwoDesign"
    wires = template_wires(name, wires)
    n = len(wires)
    init = real_array(name, "initial_layer_weights", initial_layer_weights, (n,))
    w = real_array(name, "weights", weights)
    if w.ndim != 3 or w.shape[1:] != (n - 1, 2):
        raise ValueError(
            f"{name}: weights must have shape (n_layers, {n - 1}, 2) (two angles per neighbouring pair of "
            f"wires and layer: {name}.shape(n_layers, n_wires)[1]), got {w.shape}."
        )
    ops: list[AbstractOperation] = [RY(init[i], wires=wire) for i, wire in enumerate(wires)]
    if n < 2 or w.shape[0] == 0:
        return ops
    pairs = [(2 * j, 2 * j + 1) for j in range(n // 2)] + [
        (2 * j + 1, 2 * j + 2) for j in range((n - 1) // 2)
    ]

    def layer(wl):  # wl: (n - 1, 2), one row per pair, even pairs first
        out = []
        for k, (a, b) in enumerate(pairs):
            out += [CZ((wires[a], wires[b])), RY(wl[k, 0], wires=wires[a]), RY(wl[k, 1], wires=wires[b])]
        return out

    return [*ops, repeat(layer, w)]
