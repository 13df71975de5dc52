import os
import subprocess
import sys

import jax
import pytest

from qfx._measure import _FAST_COMPILE


def _fast_compiling_xla() -> None:
    """The suite compiles thousands of small programs. XLA's classic CPU emitters compile them 1.3-5x
    faster than its MLIR fusion emitters, to kernels that compute the same values: `_FAST_COMPILE`, the
    option qfx's eager programs compile with; they take about a quarter off the suite's time. Set as an
    XLA flag, before JAX starts its backend, for this process and the processes the tests start, and only
    where this XLA knows it (an unknown flag in XLA_FLAGS aborts the process): a one-line probe. Not set if
    XLA_FLAGS names it already (`XLA_FLAGS=--xla_cpu_use_fusion_emitters=true` tests the default)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if any(name in flags for name in _FAST_COMPILE):
        return  # the user's choice, or inherited from a parent process (a test's subprocess)
    fast = " ".join([flags, *(f"--{name}={str(v).lower()}" for name, v in _FAST_COMPILE.items())]).strip()
    probe = [sys.executable, "-c", "import jax; jax.jit(lambda x: x + 1)(1.0)"]
    env = dict(os.environ, XLA_FLAGS=fast, JAX_PLATFORMS="cpu")
    if subprocess.run(probe, env=env, capture_output=True, timeout=120).returncode == 0:
        os.environ["XLA_FLAGS"] = fast


_fast_compiling_xla()  # importing JAX and qfx starts no backend: the flag is read when one starts

# Every implicit dtype promotion is a bug in qfx: casts must be explicit.
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def x64():
    """Runs a test with complex128 / float64 defaults, restoring the setting afterwards."""
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


# qfx compiles an eagerly called measurement once per circuit structure and keeps the program in JAX's
# caches. A test that monkeypatches qfx's internals (a threshold, a kernel it counts calls of) must see
# programs traced with the patch, and leave none behind for later tests: every patch and every undo
# empties JAX's in-memory caches.
_setattr, _undo = pytest.MonkeyPatch.setattr, pytest.MonkeyPatch.undo


def _setattr_and_forget_programs(self, *args, **kwargs):
    _setattr(self, *args, **kwargs)
    jax.clear_caches()


def _undo_and_forget_programs(self):
    _undo(self)
    jax.clear_caches()


pytest.MonkeyPatch.setattr = _setattr_and_forget_programs
pytest.MonkeyPatch.undo = _undo_and_forget_programs


# The longest tests (subprocesses with forced host devices; the 8-device one takes minutes on two cores)
# go first, so that under `pytest -n 2` one worker runs each while the other runs the rest, instead of
# starting late and running alone at the end.
_FIRST = (
    "tests/test_sharded.py::test_on_eight_host_devices",
    "tests/test_sharded.py::test_two_processes_agree_with_one",
)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: _FIRST.index(item.nodeid) if item.nodeid in _FIRST else len(_FIRST))
