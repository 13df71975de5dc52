"""Quantum-chemistry ansätze: fermionic excitations from a Hartree-Fock state."""

from collections.abc import Sequence

from jaxtyping import ArrayLike

from .._checks import static_wires
from .._gates import AbstractOperation, DoubleExcitation, SingleExcitation
from ._common import real_array, template_wires, with_shape
from ._embeddings import BasisEmbedding


def excitations(electrons: int, orbitals: int, delta_sz: int | float = 0) -> tuple[list, list]:
    """The single and double excitations from the Hartree-Fock state that change the spin projection by
    `delta_sz` (the facts of PennyLane's `qchem.excitations`).

    Spin orbitals alternate spin up (even index, `s_z = +1/2`) and down (odd, `-1/2`); the first
    `electrons` are occupied. A single `[r, p]` moves an electron from occupied `r` to empty `p`; a double
    `[s, r, q, p]` (`s < r` occupied, `q < p` empty) moves two.

    **Arguments:**

    - `electrons`: the number of electrons (occupied spin orbitals).
    - `orbitals`: the number of spin orbitals (qubits).
    - `delta_sz`: the change of total `s_z`: 0 (the default), +-1, or +-2 for doubles.

    **Returns:** `(singles, doubles)`, lists of wire lists, for `AllSinglesDoubles`.

    ```python
    qfx.templates.excitations(2, 4)  # ([[0, 2], [1, 3]], [[0, 1, 2, 3]])
    ```
    """
    for what, value in (("electrons", electrons), ("orbitals", orbitals)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"excitations: {what} must be a non-negative int, got {value!r}.")
    if electrons > orbitals:
        raise ValueError(f"excitations: {electrons} electrons do not fit in {orbitals} spin orbitals.")
    sz = [0.5 if i % 2 == 0 else -0.5 for i in range(orbitals)]
    occupied, empty = range(electrons), range(electrons, orbitals)
    singles = [[r, p] for r in occupied for p in empty if sz[p] - sz[r] == delta_sz]
    doubles = [
        [s, r, q, p]
        for s in occupied
        for r in occupied
        if s < r
        for q in empty
        for p in empty
        if q < p and sz[p] + sz[q] - sz[r] - sz[s] == delta_sz
    ]
    return singles, doubles


def _excitation_wires(what: str, entries, k: int, wires: tuple[int, ...]) -> list[tuple[int, ...]]:
    out = []
    for entry in entries or ():
        ws = static_wires(entry)
        if ws is None or len(ws) != k or len(set(ws)) != k or not set(ws) <= set(wires):
            raise ValueError(
                f"AllSinglesDoubles: each entry of {what} must be {k} distinct wires among {wires}, "
                f"got {entry!r}."
            )
        out.append(ws)
    return out


def _all_singles_doubles_shape(singles: Sequence, doubles: Sequence) -> tuple[int]:
    return (len(singles) + len(doubles),)


@with_shape(_all_singles_doubles_shape)
def AllSinglesDoubles(  # noqa: N802
    weights: ArrayLike, wires, hf_state, singles=None, doubles=None
) -> list[AbstractOperation]:
    """The Hartree-Fock state, then a `DoubleExcitation` for each double and a `SingleExcitation` for each
    single (PennyLane's `AllSinglesDoubles`: doubles first, each with its own angle).

    **Arguments:**

    - `weights`: shape `(len(singles) + len(doubles),)`: the singles' angles first, then the doubles'
      (`AllSinglesDoubles.shape(singles, doubles)`).
    - `wires`: the wires, one per spin orbital.
    - `hf_state`: the occupation bits, one per wire (e.g. `[1, 1, 0, 0]`), prepared by `BasisEmbedding`.
    - `singles`: wire pairs `[r, p]`; `doubles`: wire quadruples `[s, r, q, p]`; not both empty.
      `qfx.templates.excitations(electrons, orbitals)` lists them all.

    **Returns:** a list of gates.

    ```python
    singles, doubles = qfx.templates.excitations(2, 4)
    w = jnp.zeros(qfx.templates.AllSinglesDoubles.shape(singles, doubles))
    ops = qfx.templates.AllSinglesDoubles(w, range(4), [1, 1, 0, 0], singles, doubles)
    qfx.probs(qfx.Circuit(ops))[0b1100]  # 1: the Hartree-Fock state
    ```
    """
    name = "AllSinglesDoubles"
    wires = template_wires(name, wires)
    singles = _excitation_wires("singles", singles, 2, wires)
    doubles = _excitation_wires("doubles", doubles, 4, wires)
    if not singles and not doubles:
        raise ValueError(f"{name}: singles and doubles cannot both be empty; see qfx.templates.excitations.")
    w = real_array(name, "weights", weights, (len(singles) + len(doubles),))
    ops = BasisEmbedding(hf_state, wires)
    ops += [DoubleExcitation(w[len(singles) + i], wires=d) for i, d in enumerate(doubles)]
    ops += [SingleExcitation(w[j], wires=s) for j, s in enumerate(singles)]
    return ops
