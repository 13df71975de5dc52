import jax
import pytest

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
