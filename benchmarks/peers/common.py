"""Shared by every worker: parameters, the measurement loop and the JSON protocol.

Imports only numpy and the standard library, so that it works in both interpreters (qfx's own environment
for worker_qfx.py, benchmarks/peers/.venv for the peers).

A worker is run as `python worker_LIB.py '<json>'` with keys
    workload   "vg" (value_and_grad of one parameter set), "batch_fwd" or "batch_vg" (a batch of them)
    n, L       HEA size; batch: batch size (batch workloads only)
    repeats    at least this many steady-state calls for the median (0: first call only, as in the
               agreement check); calls shorter than a few ms are sampled for `STEADY_SECONDS`, up to
               `MAX_CALLS` of them (see `run_worker`)
    cap        seconds this config may take in all (the harness kills the process at the cap; the worker
               stops taking steady-state samples before it)
    full       report the whole gradient (the agreement check) rather than a digest
and prints one line `RESULT {json}` (see `run_worker`).
"""

import json
import os
import resource
import statistics
import sys
import time
import traceback
import warnings

import numpy as np

SEED = 0
BATCH_SEED = 1
# Steady-state sampling: at least `repeats` calls, and more while the calls so far add up to less than
# STEADY_SECONDS (at most MAX_CALLS). The first few calls after a compilation run slower than the steady
# state of a training loop (caches, allocator, branch predictors still cold), which a median of 7 sub-ms
# calls does not outvote; every library is sampled the same way.
STEADY_SECONDS = 1.0
MAX_CALLS = 1000


def theta(n: int, L: int, seed: int = SEED) -> np.ndarray:
    """HEA parameters, shape (L, n, 2), uniform in [0, 2 pi), float32; the same draw as benchmarks/hea.py."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 2 * np.pi, size=(L, n, 2)).astype(np.float32)


def thetas(batch: int, n: int, L: int, seed: int = BATCH_SEED) -> np.ndarray:
    """A batch of HEA parameters, shape (batch, L, n, 2)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 2 * np.pi, size=(batch, L, n, 2)).astype(np.float32)


def no_persistent_cache() -> None:
    """Make sure no JAX persistent compilation cache can shorten a first call. Call before importing jax."""
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"


def disable_jax_cache(jax) -> None:
    jax.config.update("jax_enable_compilation_cache", False)


def _rss_mb() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _digest(values: np.ndarray, grads: np.ndarray, full: bool) -> dict:
    """Numbers the harness compares across libraries.

    values: shape (B,) or (); grads: shape (B, L, n, 2), (L, n, 2) or None.
    """
    values = np.asarray(values, dtype=np.float64)
    out = {"value": values.reshape(-1)[:16].tolist(), "value_sum": float(values.sum())}
    if grads is not None:
        grads = np.asarray(grads, dtype=np.float64)
        single = grads.reshape((-1,) + grads.shape[-3:])
        out["grad"] = (
            single[0].reshape(-1).tolist()
            if (full or single.shape[0] == 1)
            else single[:2].reshape(-1).tolist()
        )
        out["grad_norm"] = float(np.linalg.norm(grads))
    return out


def run_worker(build, library: str, method: str, versions: dict, notes: str = "") -> None:
    """Parse the job, time it and print `RESULT {json}`.

    build(workload, n, L, batch) -> (fn, arg, sync, to_numpy):
        fn(arg) runs the computation; sync(out) blocks until it is done; to_numpy(out) gives
        (values, grads) as numpy arrays, values shape () or (batch,), grads (L, n, 2) or (batch, L, n, 2)
        or None (forward only). Building is part of the first call: everything a user waits for between
        having the parameters and having the first result, except importing the library.
    """
    job = json.loads(sys.argv[1])
    workload, n, L = job["workload"], int(job["n"]), int(job["L"])
    batch = int(job.get("batch", 0))
    repeats = int(job.get("repeats", 7))
    cap = float(job.get("cap", 300.0))
    result = dict(library=library, method=method, workload=workload, n=n, L=L, batch=batch, versions=versions)
    if notes:
        result["notes"] = notes
    result["rss_base_mb"] = _rss_mb()
    start = time.perf_counter()
    try:
        fn, arg, sync, to_numpy = build(workload, n, L, batch)
        out = fn(arg)
        sync(out)
        result["first_s"] = time.perf_counter() - start
        values, grads = to_numpy(out)
        result.update(_digest(values, grads, bool(job.get("full", False))))
        # If the steady-state calls run past the cap, the harness still has the first call.
        print("PARTIAL " + json.dumps(result), flush=True)
        times, spent = [], 0.0
        while len(times) < repeats or (repeats and spent < STEADY_SECONDS and len(times) < MAX_CALLS):
            t0 = time.perf_counter()
            sync(fn(arg))
            times.append(time.perf_counter() - t0)
            spent += times[-1]
            elapsed = time.perf_counter() - start
            # Few samples for slow calls; stop well before the harness's cap.
            if times[-1] > 1.0 and len(times) >= 3:
                break
            if times[-1] > 10.0 or elapsed + 2 * times[-1] > 0.8 * cap:
                break
        if times:
            result["steady_s"] = statistics.median(times)
            result["steady_calls"] = len(times)
    except Exception as e:  # noqa: BLE001 - reported to the harness, which prints it
        result["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    result["rss_peak_mb"] = _rss_mb()
    result["total_s"] = time.perf_counter() - start
    print("RESULT " + json.dumps(result), flush=True)


def quiet() -> None:
    """Silence the libraries' warnings (e.g. PennyLane's complex128 -> complex64 truncation) in workers."""
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
