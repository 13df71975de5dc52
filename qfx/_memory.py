"""The device-memory budget: what an array of a given size needs, and whether it fits."""

import functools
import os

import jax
import numpy as np

from ._custom_types import complex_dtype

# XLA's CPU runtime runs a program (and each loop body or branch on its own) kernel after kernel on the
# calling thread when all its buffers are at most this many bytes; one larger buffer makes it dispatch the
# kernels as a dataflow graph over its thread pool (`ThunkExecutor::Options::
# execute_sequential_buffer_threshold`, fixed, no flag), which costs more than kernels on states this
# small do: a small circuit's gradient slowed down sharply once backprop's stacked per-layer states passed
# 512 bytes (measurements: `qfx/diff/README.md`). Small states keep their programs under it where that is
# cheap (see `qfx/_statevector/_reductions.py: _computed_weights` and `qfx.diff.Auto`).
SEQUENTIAL_BYTES = 512


@functools.cache
def memory_limit_bytes() -> int:
    device = jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001  (backends without memory stats)
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def format_bytes(b: float) -> str:
    if b >= 1024**7:  # past EiB (an int of any size: 2.0 ** n overflows at n = 1024)
        return f"2**{int(b).bit_length() - 1} B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if b < 1024:
            return f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} EiB"


def check_memory(entries: int, what: str, advice: str, copies: int = 1, dtype=None) -> None:
    """Raises before allocating when `copies` arrays of `entries` entries of `dtype` (by default the
    default complex one) cannot fit in the device's memory. `what` names the array (the message says what
    it needs), `advice` the way out. In Python integers: exact at any size (`2 ** 1100` entries too)."""
    dtype = complex_dtype() if dtype is None else np.dtype(dtype)
    need = copies * entries * dtype.itemsize
    limit = memory_limit_bytes()
    if need > limit:
        k = entries.bit_length() - 1
        count = f"2**{k}" if entries == 2**k else f"{entries}"
        count = f"{copies} x {count}" if copies > 1 else count
        raise ValueError(
            f"{what} needs {format_bytes(need)} ({count} {dtype.name} entries), but this device has "
            f"{format_bytes(limit)}. {advice}"
        )


def check_fits(num_wires: int) -> None:
    """Raises before allocating when a state vector of `num_wires` qubits cannot be simulated in memory:
    each gate reads one state and writes another, so two must fit."""
    what = f"A {num_wires}-wire simulation (two state vectors: each gate reads one and writes the other)"
    advice = "Use fewer wires, or a backend that does not store the full state."
    if num_wires > 4096:  # not forming 2**num_wires, which takes seconds at 10**9 and forever at 2**63
        dtype = complex_dtype()
        raise ValueError(
            f"{what} needs 2**{num_wires + 1 + dtype.itemsize.bit_length() - 1} B (2 x 2**{num_wires} "
            f"{dtype.name} entries), but this device has {format_bytes(memory_limit_bytes())}. {advice}"
        )
    check_memory(2**num_wires, what, advice, copies=2)


def fits_a_third_state(entries: int) -> bool:
    """Whether a third array of `entries` default-complex entries fits beside the two that simulating a
    state of that size holds. When it does not, the passes that would make one (a permutation gather's
    index table and output, the flipped products of Pauli expectations) give way to leaner ones."""
    return 3 * entries * complex_dtype().itemsize <= memory_limit_bytes()
