"""OpenFermion's `QubitOperator` to a qfx observable, through its public `.terms` dict (no import of
OpenFermion: it takes minutes and hundreds of MB to install, so qfx does not depend on it)."""

from .._observables import LinearCombination
from ._pennylane import _from_terms


def hamiltonian_from_openfermion(operator) -> LinearCombination:
    """An OpenFermion `QubitOperator` (e.g. from `jordan_wigner`) as a qfx `LinearCombination`.

    Read through its `terms` dict, `{((0, "X"), (3, "Z")): coefficient, ...}`: OpenFermion's qubit k is
    wire k.

    **Arguments:**

    - `operator`: an `openfermion.QubitOperator`, or any object with such a `terms` dict; coefficients
      must be real (a Hermitian operator).

    **Returns:** a `qfx.LinearCombination`.

    With OpenFermion, `qfx.interop.hamiltonian_from_openfermion(QubitOperator("Z0 Z1", 0.5) +
    QubitOperator("X0", -0.2))`; here with an object that has the same `terms`:

    ```python
    class Terms:
        terms = {((0, "Z"), (1, "Z")): 0.5, ((0, "X"),): -0.2, (): 1.0}

    H = qfx.interop.hamiltonian_from_openfermion(Terms())  # 0.5 Z0 Z1 - 0.2 X0 + 1.0
    ```
    """
    terms = getattr(operator, "terms", None)
    if not isinstance(terms, dict):
        raise TypeError(
            "qfx.interop.hamiltonian_from_openfermion: expected a QubitOperator (an object with a dict "
            f"`terms`), got {type(operator).__name__}."
        )
    items = []
    for word, coeff in terms.items():
        if not isinstance(word, tuple) or not all(
            isinstance(t, tuple) and len(t) == 2 and t[1] in ("X", "Y", "Z") for t in word
        ):
            raise ValueError(
                f"qfx.interop.hamiltonian_from_openfermion: the term {word!r} is not "
                "((qubit, 'X'|'Y'|'Z'), ...)."
            )
        items.append((word, coeff))
    return _from_terms(items, "qfx.interop.hamiltonian_from_openfermion")
