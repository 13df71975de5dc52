"""`qfx.templates`: embeddings, layered ansätze, QAOA and quantum-chemistry building blocks.

Each template is a function named as in PennyLane, with PennyLane's arguments, conventions and weight
shapes, that returns a list of qfx operations: splice it into a circuit,
`qfx.Circuit([*AngleEmbedding(x, wires=range(3)), *StronglyEntanglingLayers(w, wires=range(3))])`, or join
lists with `+`. Layered templates return `qfx.Repeat` blocks (one `lax.scan` over the stacked layer
weights) and have a `shape(n_layers, n_wires)` helper for their weights. Inputs and weights may be
traced: `jax.grad`, `jax.jit` and `jax.vmap` of a function that builds the circuit reach them.
"""

from ._chemistry import AllSinglesDoubles as AllSinglesDoubles, excitations as excitations
from ._embeddings import (
    AmplitudeEmbedding as AmplitudeEmbedding,
    AngleEmbedding as AngleEmbedding,
    BasisEmbedding as BasisEmbedding,
    IQPEmbedding as IQPEmbedding,
)
from ._layers import (
    BasicEntanglerLayers as BasicEntanglerLayers,
    SimplifiedTwoDesign as SimplifiedTwoDesign,
    StronglyEntanglingLayers as StronglyEntanglingLayers,
)
from ._qaoa import cost_layer as cost_layer, maxcut as maxcut, mixer_layer as mixer_layer
