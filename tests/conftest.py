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
