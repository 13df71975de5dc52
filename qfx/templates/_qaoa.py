"""QAOA: MaxCut Hamiltonians from an edge list, and the cost and mixer layers of any such Hamiltonians."""

from collections.abc import Sequence

from jaxtyping import ArrayLike
import numpy as np

from .._gates import RX, RZ, AbstractOperation, IsingZZ, MultiRZ, PauliRot
from .._observables import AbstractObservable, LinearCombination, PauliWord, as_linear_combination
from ._common import real_array


def maxcut(edges: Sequence[Sequence]) -> tuple[LinearCombination, LinearCombination]:
    """The MaxCut cost and mixer Hamiltonians of a graph given by its (weighted) edges.

    The cost is `sum_(i, j) w_ij (Z_i Z_j - 1) / 2`, whose ground states are the maximum cuts (its minimum
    is minus the cut's weight); the mixer is `sum_i X_i` over the graph's nodes. With weights 1 these are
    PennyLane's `qaoa.maxcut(graph)`.

    **Arguments:**

    - `edges`: pairs `(i, j)` of wires, or triples `(i, j, w)` with a weight.

    **Returns:** `(cost, mixer)`, two `qfx.LinearCombination`s.

    ```python
    cost, mixer = qfx.templates.maxcut([(0, 1), (1, 2), (0, 2, 0.5)])
    ```
    """
    weights: dict[tuple[int, int], float] = {}  # repeated edges add up
    for edge in edges:
        if len(edge) not in (2, 3):
            raise ValueError(f"maxcut: an edge is (i, j) or (i, j, weight), got {edge!r}.")
        i, j = edge[0], edge[1]
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in (i, j)):
            raise ValueError(f"maxcut: an edge joins two non-negative int wires, got {edge!r}.")
        if i == j:
            raise ValueError(
                f"maxcut: the edge {edge!r} is a loop (i == j); MaxCut takes edges between wires."
            )
        pair = (min(int(i), int(j)), max(int(i), int(j)))
        weights[pair] = weights.get(pair, 0.0) + (float(edge[2]) if len(edge) == 3 else 1.0)
    if not weights:
        raise ValueError("maxcut: the graph has no edges.")
    terms = [PauliWord({i: "Z", j: "Z"}) for i, j in weights]
    halves = [w / 2 for w in weights.values()]
    cost = LinearCombination(np.asarray([*halves, -sum(halves)]), [*terms, PauliWord()])
    nodes = sorted({w for pair in weights for w in pair})
    mixer = LinearCombination(np.ones(len(nodes)), [PauliWord({w: "X"}) for w in nodes])
    return cost, mixer


def _pauli_terms(name: str, hamiltonian) -> LinearCombination:
    if not isinstance(hamiltonian, AbstractObservable):
        raise TypeError(
            f"{name}: expected a Hamiltonian (a qfx observable), got {type(hamiltonian).__name__}."
        )
    lc = as_linear_combination(hamiltonian)
    for t in lc.terms:
        if not isinstance(t, PauliWord):
            raise ValueError(
                f"{name}: the Hamiltonian's terms must be Pauli words, got Hermitian(wires={t.wires})."
            )
    return lc


def cost_layer(gamma: ArrayLike, hamiltonian: AbstractObservable) -> list[AbstractOperation]:
    """`exp(-i gamma H)` for a diagonal cost Hamiltonian `H` (a sum of products of Z): one rotation per
    term, `exp(-i gamma c Z...Z)` (PennyLane's `qaoa.cost_layer`). Terms of the identity (a global phase)
    are left out.

    **Arguments:**

    - `gamma`: the angle, a real scalar (may be traced).
    - `hamiltonian`: the cost, e.g. from `qfx.templates.maxcut(edges)`; its coefficients may be traced.

    **Returns:** a list of gates: `RZ`, `IsingZZ` or `MultiRZ` of angle `2 gamma c`, all diagonal.

    ```python
    cost, mixer = qfx.templates.maxcut([(0, 1), (1, 2)])
    def layer(gamma, alpha):
        return qfx.templates.cost_layer(gamma, cost) + qfx.templates.mixer_layer(alpha, mixer)
    gammas, alphas = jnp.array([0.5, 0.3]), jnp.array([0.4, 0.2])
    circ = qfx.Circuit([qfx.H(0), qfx.H(1), qfx.H(2), qfx.repeat(layer, gammas, alphas)])
    qfx.expval(circ, cost)
    ```
    """
    lc = _pauli_terms("cost_layer", hamiltonian)
    g = real_array("cost_layer", "gamma", gamma, ())
    ops: list[AbstractOperation] = []
    for k, t in enumerate(lc.terms):
        if any(letter != "Z" for _, letter in t.word):
            raise ValueError(
                f"cost_layer: the cost Hamiltonian must be diagonal (products of Z), but has the term {t!r}; "
                "use mixer_layer for other words."
            )
        angle = 2 * g * lc.coeffs[k]
        wires = t.wires
        if len(wires) == 1:
            ops.append(RZ(angle, wires=wires[0]))
        elif len(wires) == 2:
            ops.append(IsingZZ(angle, wires=wires))
        elif wires:
            ops.append(MultiRZ(angle, wires=wires))
    return ops


def mixer_layer(alpha: ArrayLike, hamiltonian: AbstractObservable) -> list[AbstractOperation]:
    """`prod_k exp(-i alpha c_k P_k)` over the terms `c_k P_k` of a mixer Hamiltonian, in order
    (PennyLane's `qaoa.mixer_layer`): `exp(-i alpha H)` when the terms commute, as in `sum_i X_i`.
    Terms of the identity (a global phase) are left out.

    **Arguments:**

    - `alpha`: the angle, a real scalar (may be traced).
    - `hamiltonian`: the mixer, e.g. the second Hamiltonian of `qfx.templates.maxcut(edges)`.

    **Returns:** a list of gates: `RX(2 alpha c)` for one-wire X terms, `PauliRot(2 alpha c, word)` for
    the others.

    ```python
    ops = qfx.templates.mixer_layer(0.3, qfx.X(0) + qfx.X(1))  # [RX(0.6, 0), RX(0.6, 1)]
    ```
    """
    lc = _pauli_terms("mixer_layer", hamiltonian)
    a = real_array("mixer_layer", "alpha", alpha, ())
    ops: list[AbstractOperation] = []
    for k, t in enumerate(lc.terms):
        angle = 2 * a * lc.coeffs[k]
        letters = "".join(letter for _, letter in t.word)
        if letters == "X":
            ops.append(RX(angle, wires=t.wires[0]))
        elif letters:
            ops.append(PauliRot(angle, letters, wires=t.wires))
    return ops
