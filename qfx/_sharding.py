"""The entry points' retry under explicit sharding (`with_auto_axes`)."""

from collections.abc import Callable
import functools

import jax


def with_auto_axes(fn: Callable) -> Callable:
    """`fn` (a public entry point), retried with the current mesh's Explicit axes made Auto when explicit
    sharding types refuse one of its operations.

    Under explicit sharding (`jax.make_mesh`'s default axis type, with `jax.set_mesh`), every reshape,
    gather and scatter of a sharded array must say how its output is sharded, which qfx's kernels, written
    for any state size, do not: a batch of circuits sharded over devices failed inside them. The retry runs
    `fn` in `jax.sharding.auto_axes` (XLA chooses the layouts; results come back replicated). Only on
    failure: inside `auto_axes` every array `fn` reads must cross as an argument, and one closed over (by a
    `for_loop` body, say) would not, where the direct call works whenever nothing sharded is reshaped.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            # jax._src.core's ShardingTypeError (not public), or JAX's own ops looking for a sharded
            # axis in an empty mesh ("Resource axis: b of P('b',) is not found in mesh: ()").
            typed = type(e).__name__ == "ShardingTypeError"
            if not (typed or (isinstance(e, ValueError) and "mesh" in str(e))):
                raise
            explicit = jax.sharding.get_abstract_mesh().explicit_axes
            if not explicit:
                e.add_note(
                    f"qfx.{fn.__name__}: arrays sharded over Explicit mesh axes need the mesh set around the "
                    "call (`with jax.set_mesh(mesh):`); qfx then runs its kernels with those axes made Auto."
                )
                raise
        leaves, treedef = jax.tree.flatten((args, kwargs))
        at = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)]

        def inner(arrays):
            full = list(leaves)
            for i, x in zip(at, arrays, strict=True):
                full[i] = x
            a, k = jax.tree.unflatten(treedef, full)
            return fn(*a, **k)

        return jax.sharding.auto_axes(inner, axes=explicit, out_sharding=jax.sharding.PartitionSpec())(
            [leaves[i] for i in at]
        )

    return wrapper
