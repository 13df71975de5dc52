"""`packed_scan`: `lax.scan` over a pytree of many stacked leaves, as one array per dtype.

A `Repeat` block's body is a circuit whose every gate parameter is a leaf stacked over the layers: a
layer of 24 rotations is 24 scanned inputs. XLA's CPU compiler gives each scanned input its own kernels
(a slice per step and, in reverse mode, an update of the stacked cotangent per step and a read of it
back), each compiled on its own: for a layer of a 12-wire HEA about 70 of the 160 kernels of a
value_and_grad (packed: 92 kernels, 12% less compile time; the rest of it is per program, not per kernel).
Packed, the leaves of one dtype are one `(length, k)` array, sliced apart inside the step (where the slices
fuse into the gates' arithmetic), so the bookkeeping is a few kernels whatever the layer holds. Outputs
stacked by the scan (`ys`, the adjoint's parameter cotangents) are packed the same way inside the step and
split after it.
"""

import jax
import jax.numpy as jnp
import numpy as np


def _groups(leaves) -> dict:
    """For each (dtype, weak type), the positions of the leaves holding it."""
    groups: dict = {}
    for i, x in enumerate(leaves):
        aval = jax.typeof(x)
        groups.setdefault((aval.dtype, aval.weak_type), []).append(i)
    return groups


def _pack(leaves, groups: dict, lead: int) -> list:
    out = []
    for idx in groups.values():
        # The flat size is spelled out: `-1` is ambiguous for zero layers.
        shapes = [leaves[i].shape for i in idx]
        parts = [
            jnp.reshape(leaves[i], s[:lead] + (int(np.prod(s[lead:], dtype=np.int64)),))
            for i, s in zip(idx, shapes, strict=True)
        ]
        out.append(parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=lead))
    return out


def _unpack(packed: list, groups: dict, shapes: list, lead: int, count: int) -> list:
    """The leaves of `_pack`, from their shapes past the first `lead` axes."""
    leaves: list = [None] * count
    for block, idx in zip(packed, groups.values(), strict=True):
        start = 0
        for i in idx:
            size = int(np.prod(shapes[i], dtype=np.int64))
            part = jax.lax.slice_in_dim(block, start, start + size, axis=lead)
            leaves[i] = jnp.reshape(part, block.shape[:lead] + tuple(shapes[i]))
            start += size
    return leaves


def packed_scan(f, init, xs, length: int, reverse: bool = False, checkpoint: bool = False):
    """`jax.lax.scan(f, init, xs, length=length, reverse=reverse)`, with `xs` and the stacked outputs
    carried as one array per dtype (see the module's docstring).

    `checkpoint`: the step is `jax.checkpoint`ed together with its unpacking, so reverse mode saves the
    carry and the packed arrays per step (not every unpacked leaf)."""
    leaves, treedef = jax.tree.flatten(xs)
    if len(leaves) <= 1:
        return jax.lax.scan(jax.checkpoint(f) if checkpoint else f, init, xs, length=length, reverse=reverse)
    leaves = [jnp.asarray(x) for x in leaves]
    groups = _groups(leaves)
    shapes = [x.shape[1:] for x in leaves]
    out = {}  # what the step's outputs are, read when the step is traced

    def step(carry, packed):
        carry, ys = f(carry, jax.tree.unflatten(treedef, _unpack(packed, groups, shapes, 0, len(leaves))))
        y_leaves, y_def = jax.tree.flatten(ys)
        y_leaves = [jnp.asarray(y) for y in y_leaves]
        y_groups = _groups(y_leaves)
        out.update(treedef=y_def, groups=y_groups, shapes=[y.shape for y in y_leaves])
        return carry, _pack(y_leaves, y_groups, 0)

    if checkpoint:
        step = jax.checkpoint(step)
    carry, ys = jax.lax.scan(step, init, _pack(leaves, groups, 1), length=length, reverse=reverse)
    y_leaves = _unpack(ys, out["groups"], out["shapes"], 1, len(out["shapes"]))
    return carry, jax.tree.unflatten(out["treedef"], y_leaves)
