"""qfx worker: benchmarks/hea.py's `make(n, L)` and `jax.jit(jax.value_and_grad(cost))`, as a user writes it.

Runs in qfx's own environment (the interpreter that runs run.py). Batches: `eqx.filter_vmap(hea)` builds a
batch of circuits from stacked parameters and `jax.vmap` evaluates it. complex64. The job's "diff" key
("adjoint") picks `diff=qfx.diff.Adjoint()` instead of the default (`qfx.diff.Auto()`); its "emitters"
key (false) compiles with XLA's CPU fusion emitters off.
"""

import json
import os
import sys

import common

common.no_persistent_cache()
common.quiet()

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

common.disable_jax_cache(jax)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from hea import hea, make  # noqa: E402  (benchmarks/hea.py)

import qfx  # noqa: E402

JOB = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
DIFF = JOB.get("diff")
METHODS = {None: None, "adjoint": qfx.diff.Adjoint()}
# "emitters": false compiles with XLA's CPU fusion emitters off, a per-function compiler option a user
# passes to jax.jit (less compiler memory and time, slower kernels; benchmarks/compile_options.py).
OPTIONS = None if JOB.get("emitters", True) else {"xla_cpu_use_fusion_emitters": False}


def jit(fn):
    return jax.jit(fn, compiler_options=OPTIONS)


def circuit_grad_to_theta(grad_circuit, n: int, L: int) -> np.ndarray:
    """The circuit-shaped gradient as an array theta[..., l, i, k].

    The HEA layer has one RY and one RZ per wire, in that order, whose stacked angles are the circuit's
    leaves: leaf k * n + i holds theta[..., :, i, k]. Checked against a gradient taken with respect to the
    raw parameter array in the agreement check (see `build`).
    """
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(grad_circuit)]
    if len(leaves) != 2 * n or any(x.shape[-1] != L for x in leaves):
        raise RuntimeError(f"unexpected HEA leaves: {[x.shape for x in leaves]}")
    stacked = np.stack(leaves).reshape((2, n) + leaves[0].shape)  # (k, i, ..., l)
    return np.moveaxis(np.moveaxis(stacked, 0, -1), 0, -2)  # (..., l, i, k)


def build(workload, n, L, batch):
    sync = jax.block_until_ready
    if workload == "vg":
        circuit, cost = make(n, L, diff=METHODS[DIFF])
        params = circuit_grad_to_theta(circuit, n, L)
        if not np.array_equal(params, common.theta(n, L)):
            raise RuntimeError("benchmarks/hea.py's parameters differ from common.theta")
        fn = jit(jax.value_and_grad(cost))

        def to_numpy(out):
            value, grad = out
            g = circuit_grad_to_theta(grad, n, L)
            if L <= 2:  # agreement check: the leaf order must match a gradient in theta's own layout
                g_ref = jax.grad(lambda t: cost(hea(t)))(params)
                if not np.allclose(g, np.asarray(g_ref), rtol=1e-4, atol=1e-5):
                    raise RuntimeError("circuit_grad_to_theta does not match the gradient w.r.t. theta")
            return np.asarray(value), g

        return fn, circuit, sync, to_numpy

    _, cost = make(n, L, diff=METHODS[DIFF])
    stacked = common.thetas(batch, n, L)
    circuits = eqx.filter_vmap(hea)(stacked)
    if workload == "batch_fwd":
        fn = jit(jax.vmap(cost))
        return fn, circuits, sync, lambda out: (np.asarray(out), None)
    if workload == "batch_vg":
        fn = jit(jax.vmap(jax.value_and_grad(cost)))
        return fn, circuits, sync, lambda out: (np.asarray(out[0]), circuit_grad_to_theta(out[1], n, L))
    raise ValueError(workload)


if __name__ == "__main__":
    common.run_worker(
        build,
        library="qfx",
        method=("jit, diff=Adjoint()" if DIFF == "adjoint" else "jit, default diff")
        + ("" if OPTIONS is None else ", fusion emitters off"),
        versions={"qfx": qfx.__version__, "jax": jax.__version__, "equinox": eqx.__version__},
        notes="complex64",
    )
