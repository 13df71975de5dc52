"""Embeddings: classical features written into rotation angles, amplitudes or basis states."""

from collections.abc import Sequence
import itertools

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import ArrayLike
import numpy as np

from .._checks import as_numeric, is_concrete, static_wires
from .._gates import RX, RY, RZ, AbstractOperation, Hadamard, IsingZZ, PauliX, QubitUnitary, StatePrep
from ._common import real_array, template_wires

_ROTATIONS = {"X": RX, "Y": RY, "Z": RZ}


def AngleEmbedding(features: ArrayLike, wires, rotation: str = "X") -> list[AbstractOperation]:  # noqa: N802
    """Encodes `N` features into the angles of `N` one-qubit rotations (PennyLane's `AngleEmbedding`).

    Feature `i` is the angle of `RX`, `RY` or `RZ` on `wires[i]`; with fewer features than wires, the
    last wires get none.

    **Arguments:**

    - `features`: a real array of shape `(N,)`, `N <= len(wires)`; may be traced (`jax.grad` reaches it).
    - `wires`: the wires, e.g. `range(3)`.
    - `rotation`: `"X"` (the default), `"Y"` or `"Z"`.

    **Returns:** a list of gates, to put in a `qfx.Circuit` (`[*AngleEmbedding(x, range(3)), ...]`).

    ```python
    x = jnp.array([0.1, 0.2, 0.3])
    circ = qfx.Circuit(qfx.templates.AngleEmbedding(x, wires=range(3), rotation="Y"))
    qfx.expval(circ, qfx.Z(2))  # cos(0.3)
    ```
    """
    wires = template_wires("AngleEmbedding", wires)
    if rotation not in _ROTATIONS:
        raise ValueError(f'AngleEmbedding: rotation must be "X", "Y" or "Z", got {rotation!r}.')
    x = real_array("AngleEmbedding", "features", features)
    if x.ndim != 1 or x.shape[0] > len(wires):
        raise ValueError(
            f"AngleEmbedding: features must be a vector of at most {len(wires)} entries (one per wire), got "
            f"shape {x.shape}. For a batch of inputs, map with jax.vmap."
        )
    gate = _ROTATIONS[rotation]
    return [gate(x[i], wires=wires[i]) for i in range(x.shape[0])]


def AmplitudeEmbedding(  # noqa: N802
    features: ArrayLike, wires, pad_with: complex | None = None, normalize: bool = False
) -> list[AbstractOperation]:
    """Encodes `2**n` features into the amplitudes of `n` qubits (PennyLane's `AmplitudeEmbedding`).

    It is one `qfx.StatePrep` gate, a unitary that maps |0...0> on `wires` to the feature vector: put it
    first, or where its wires hold |0...0> (see `qfx.StatePrep` for what it does to other inputs).

    **Arguments:**

    - `features`: `2**len(wires)` amplitudes (fewer with `pad_with`), real or complex; may be traced.
    - `wires`: the wires.
    - `pad_with`: pad shorter features with this value.
    - `normalize`: divide by the norm; otherwise the norm must be 1 (checked; at run time when traced).

    **Returns:** a list holding one `qfx.StatePrep`.

    ```python
    ops = qfx.templates.AmplitudeEmbedding([3.0, 0.0, 4.0], wires=(0, 1), pad_with=0.0, normalize=True)
    circ = qfx.Circuit(ops)
    qfx.probs(circ)  # [0.36, 0, 0.64, 0]
    ```
    """
    return [StatePrep(features, wires, pad_with=pad_with, normalize=normalize)]


def BasisEmbedding(features: int | ArrayLike, wires) -> list[AbstractOperation]:  # noqa: N802
    """Prepares the computational basis state `features` on `wires` from |0...0> (PennyLane's
    `BasisEmbedding`).

    **Arguments:**

    - `features`: one bit per wire (`[1, 0, 1]`, wire `wires[0]` first) or an int whose binary digits
      they are (`5` on three wires is `[1, 0, 1]`).
    - `wires`: the wires.

    **Returns:** a list of gates: `X` on each wire whose bit is 1 when the bits are concrete; when they
    are traced (under `jit` or `vmap`), one `QubitUnitary` `[[1 - b, b], [b, 1 - b]]` per wire (exactly X or
    I), with the bits checked at run time to be 0 or 1.

    ```python
    circ = qfx.Circuit(qfx.templates.BasisEmbedding(5, wires=range(3)))
    qfx.probs(circ)[5]  # 1
    ```
    """
    wires = template_wires("BasisEmbedding", wires)
    n = len(wires)
    if isinstance(features, (int, np.integer)) and not isinstance(features, bool):
        if not 0 <= features < 2**n:
            raise ValueError(
                f"BasisEmbedding: the integer {features} does not fit in {n} bits (one per wire)."
            )
        features = [(int(features) >> (n - 1 - i)) & 1 for i in range(n)]
    bits = as_numeric(features, "BasisEmbedding: features")
    if bits.shape != (n,):
        raise ValueError(
            f"BasisEmbedding: expected {n} bits (one per wire), got shape {bits.shape}. For a batch of "
            "inputs, map with jax.vmap."
        )
    if is_concrete(bits):
        host = np.asarray(bits)
        if np.any((host != 0) & (host != 1)):
            raise ValueError(f"BasisEmbedding: bits must be 0 or 1, got {host.tolist()}.")
        return [PauliX(w) for w, b in zip(wires, host, strict=True) if b]
    b = eqx.error_if(bits, jnp.any((bits != 0) & (bits != 1)), "BasisEmbedding: bits must be 0 or 1.")
    b = b.astype(jnp.float32)
    return [
        QubitUnitary(jnp.array([[1 - b[i], b[i]], [b[i], 1 - b[i]]]), wires=w) for i, w in enumerate(wires)
    ]


def IQPEmbedding(  # noqa: N802
    features: ArrayLike, wires, n_repeats: int = 1, pattern: Sequence[Sequence[int]] | None = None
) -> list[AbstractOperation]:
    """Encodes `n` features in an IQP circuit (PennyLane's `IQPEmbedding`; Havlicek et al. 2019).

    Each repetition applies `H` and `RZ(x_i)` on every wire, then `MultiRZ(x_i x_j)` (an `IsingZZ`) on each
    pair of `pattern`; by default every pair `(wires[i], wires[j])`, `i < j`.

    **Arguments:**

    - `features`: a real array of shape `(len(wires),)`; may be traced.
    - `wires`: the wires.
    - `n_repeats`: how many times the block is applied.
    - `pattern`: the pairs of wires (wire labels, not positions) that get a `ZZ` entangler.

    **Returns:** a list of gates.

    ```python
    circ = qfx.Circuit(qfx.templates.IQPEmbedding(jnp.array([0.1, 0.2]), wires=(0, 1), n_repeats=2))
    ```
    """
    wires = template_wires("IQPEmbedding", wires)
    x = real_array("IQPEmbedding", "features", features, (len(wires),))
    if not isinstance(n_repeats, (int, np.integer)) or isinstance(n_repeats, bool) or n_repeats < 1:
        raise ValueError(f"IQPEmbedding: n_repeats must be a positive int, got {n_repeats!r}.")
    if pattern is None:
        pairs = list(itertools.combinations(range(len(wires)), 2))
    else:
        pairs = []
        for pair in pattern:
            ws = static_wires(pair)
            if ws is None or len(ws) != 2 or ws[0] == ws[1] or not set(ws) <= set(wires):
                raise ValueError(
                    f"IQPEmbedding: each entry of pattern must be two distinct wires among {wires}, "
                    f"got {pair!r}."
                )
            pairs.append((wires.index(ws[0]), wires.index(ws[1])))
    ops: list[AbstractOperation] = []
    for _ in range(int(n_repeats)):
        for i, w in enumerate(wires):
            ops += [Hadamard(w), RZ(x[i], wires=w)]
        # MultiRZ on two wires is IsingZZ, which the simulator knows as a diagonal.
        ops += [IsingZZ(x[i] * x[j], wires=(wires[i], wires[j])) for i, j in pairs]
    return ops
