"""The state-vector pipeline: the fusion passes, decided in one place, then the kernels that run the
result."""

from jaxtyping import Array

from .._circuit import Repeat
from .._gates import AbstractGate
from .._scan import packed_scan
from . import _fusion
from ._fusion import KronLayer, fuse, kron_layers, pair_one_qubit
from ._kernels import apply_gate
from ._kronlayer import apply_kron_layer
from ._staircase import Staircase, apply_staircase, staircases


def fuse_runs(ops, n: int) -> list:
    """`ops` with each run of consecutive gates fused (see `_fusion.py`); other operations stay in place."""
    out, run_ = [], []
    for op in ops:
        if isinstance(op, AbstractGate):
            run_.append(op)
            continue
        out += fuse(run_, n) + [op]
        run_ = []
    return out + fuse(run_, n)


def run(ops, state: Array, n: int) -> Array:
    """Applies a sequence of operations to a flat state; `Repeat` blocks run under `lax.scan`.

    Runs of gates are fused first, on small states dense one-qubit gates paired, on large ones layers of
    them grouped (`KronLayer`), and staircases of like gates grouped (static, trace-time transformations;
    see `_fusion.py` and `staircases`).
    """
    ops = fuse_runs(ops, n)
    if n <= _fusion.PAIR_MAX_WIRES:
        ops = pair_one_qubit(ops)
    ops = kron_layers(ops, n)
    for op in staircases(ops, n):
        if isinstance(op, Repeat):
            op.check_layers()

            # Checkpointed: reverse mode keeps one state per layer and recomputes inside the layer,
            # instead of saving every gate's intermediates for every layer.
            def layer(s, body):
                return run(body.ops, s, n), None

            state, _ = packed_scan(layer, state, op.body, length=op.length, checkpoint=True)
        elif isinstance(op, Staircase):
            state = apply_staircase(state, op, n)
        elif isinstance(op, KronLayer):
            state = apply_kron_layer(state, op, n)
        else:
            state = apply_gate(state, op, n)
    return state
